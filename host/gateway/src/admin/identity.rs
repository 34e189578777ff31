//! Who may do what through the admin listener: named identities, each with a role, each
//! proven by a bearer token of its own.
//!
//! The tokens file (`[admin] tokens_file`) holds one identity per line - its name, its role
//! and a SHA-256 digest of its token - so the file reveals no token:
//!
//! ```text
//! # name     role     digest of the token
//! ada        read     sha256:5d41402abc4b2a76b9719d911017c592ae7a0d05c0c3b3a4e2d0f8c5e7d6b3a1
//! ci-deploy  admin    sha256:...
//! ```
//!
//! `verdict admin token new NAME --role ROLE` makes a token and prints it once, with the line
//! to add. A plain digest is enough because the tokens it makes are 256 random bits: there
//! is no dictionary to try against the file.
//!
//! Roles are ordered; each includes the ones before it:
//!
//! | role | may |
//! |---|---|
//! | `read` | read message content: dead letters, their groups, jobs, the console's letter and group pages |
//! | `operate` | replay and discard dead letters, run and cancel jobs, roll back, shadow, publish into the store |
//! | `edit` | repair a dead letter (change its payload) and put it back |
//! | `admin` | upload and activate policies, reload the config: everything |
//!
//! The admin token of earlier versions (the variable named by `[admin] token_env`, or
//! `[admin] token_file`) is the identity `admin` with the role `admin`.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

/// What an identity may do. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Read message content.
    Read,
    /// Act on dead letters and generations.
    Operate,
    /// Change a dead letter's content.
    Edit,
    /// Everything, policies and config included.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 4] = [Role::Read, Role::Operate, Role::Edit, Role::Admin];

    /// Its name in the tokens file.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Operate => "operate",
            Role::Edit => "edit",
            Role::Admin => "admin",
        }
    }

    /// The role called `name`.
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Someone the gateway knows: what audit notes and the console call them, and their role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The name (letters, digits, `.`, `_`, `-`; at most [`MAX_NAME_CHARS`]).
    pub name: Arc<str>,
    /// What it may do.
    pub role: Role,
}

impl Identity {
    /// Whether it may do what `needed` allows.
    pub fn may(&self, needed: Role) -> bool {
        self.role >= needed
    }
}

/// The identity the single admin token stands for.
pub const ADMIN_NAME: &str = "admin";

/// Longest identity name.
pub const MAX_NAME_CHARS: usize = 64;

/// Why a tokens file cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// A line is not `name role sha256:<64 hex digits>`.
    #[error("line {line}: {problem}")]
    Line {
        /// Its number, from 1.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
}

/// An identity and the digest of its token.
#[derive(Debug, Clone)]
struct Known {
    identity: Identity,
    digest: [u8; 32],
}

/// The identities a gateway knows.
#[derive(Debug, Clone, Default)]
pub struct Identities {
    known: Vec<Known>,
}

impl Identities {
    /// Parse a tokens file's text. Blank lines and `#` comments are skipped; names and
    /// digests must be unique.
    pub fn parse(text: &str) -> Result<Identities, IdentityError> {
        let mut identities = Identities::default();
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            let content = line.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let bad = |problem: String| IdentityError::Line {
                line: line_no,
                problem,
            };
            let fields: Vec<&str> = content.split_whitespace().collect();
            let [name, role, digest] = fields[..] else {
                return Err(bad(format!(
                    "expected three fields `NAME ROLE sha256:DIGEST`, found {}",
                    fields.len()
                )));
            };
            if let Some(problem) = name_error(name) {
                return Err(bad(format!("name {problem}")));
            }
            let role = Role::parse(role).ok_or_else(|| {
                bad(format!(
                    "role `{}` is none of read, operate, edit, admin",
                    verdict_runtime::text::one_line(role, 32)
                ))
            })?;
            let digest = parse_digest(digest).ok_or_else(|| {
                bad(
                    "the digest is not `sha256:` and 64 hex digits (make one with \
                     `verdict admin token new`)"
                        .into(),
                )
            })?;
            identities
                .add(
                    Identity {
                        name: Arc::from(name),
                        role,
                    },
                    digest,
                )
                .map_err(bad)?;
        }
        Ok(identities)
    }

    /// The same with `token` standing for the identity `admin` (role `admin`).
    pub fn with_admin_token(mut self, token: &str) -> Result<Identities, String> {
        let identity = Identity {
            name: Arc::from(ADMIN_NAME),
            role: Role::Admin,
        };
        self.add(identity, digest(token))?;
        Ok(self)
    }

    fn add(&mut self, identity: Identity, digest: [u8; 32]) -> Result<(), String> {
        if self.known.iter().any(|k| k.identity.name == identity.name) {
            return Err(format!(
                "the identity `{}` is named twice (the admin token is the identity `{ADMIN_NAME}`)",
                identity.name
            ));
        }
        if self.known.iter().any(|k| k.digest == digest) {
            return Err(format!(
                "`{}` has the token of another identity: give each its own",
                identity.name
            ));
        }
        self.known.push(Known { identity, digest });
        Ok(())
    }

    /// Whether no identity is known (then every credential is refused).
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// How many identities are known.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// The identity whose token `presented` is. Every digest is compared in full, so the
    /// time taken says nothing about which one came close.
    pub fn find(&self, presented: &str) -> Option<&Identity> {
        let presented = digest(presented.trim());
        let mut found = None;
        for known in &self.known {
            let differs = known
                .digest
                .iter()
                .zip(presented.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if differs == 0 {
                found = Some(&known.identity);
            }
        }
        found
    }

    /// The identity called `name`, as it is now (a console login keeps only the name, so
    /// removing an identity or changing its role takes effect on its next request).
    pub fn named(&self, name: &str) -> Option<&Identity> {
        self.known
            .iter()
            .map(|k| &k.identity)
            .find(|i| &*i.name == name)
    }
}

/// Why `name` cannot name an identity (`None` when it can).
pub fn name_error(name: &str) -> Option<String> {
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        Some(format!("must be 1 to {MAX_NAME_CHARS} characters"))
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some(format!(
            "`{}` may hold only letters, digits, `.`, `_` and `-`",
            verdict_runtime::text::one_line(name, MAX_NAME_CHARS)
        ))
    } else {
        None
    }
}

/// A new token: 256 random bits, as `vdt_` and 64 hex digits (the prefix lets secret
/// scanners and people recognise one).
pub fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    verdict_runtime::fsutil::random_bytes(&mut bytes)?;
    Ok(format!("vdt_{}", hex(&bytes)))
}

/// The tokens-file line for `name` with `role`, proven by `token`.
pub fn tokens_file_line(name: &str, role: Role, token: &str) -> String {
    format!("{name} {role} sha256:{}", hex(&digest(token)))
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn parse_digest(text: &str) -> Option<[u8; 32]> {
    let hex_digits = text.strip_prefix("sha256:")?;
    if hex_digits.len() != 64 || !hex_digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex_digits[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_made_for_a_token_finds_that_token_and_only_it() {
        let token = new_token().unwrap();
        assert!(token.starts_with("vdt_") && token.len() == 68, "{token}");
        let file = format!(
            "# who may read\n{}\n\n{}  # the deploy job\n",
            tokens_file_line("ada", Role::Read, &token),
            tokens_file_line("ci-deploy", Role::Admin, "another")
        );
        let identities = Identities::parse(&file).unwrap();
        assert_eq!(identities.len(), 2);
        let ada = identities.find(&format!(" {token}\n")).unwrap();
        assert_eq!((&*ada.name, ada.role), ("ada", Role::Read));
        assert!(identities.find(&token[..67]).is_none());
        assert!(identities.find("").is_none());
        assert_eq!(identities.named("ci-deploy").unwrap().role, Role::Admin);
        assert!(file.lines().all(|l| !l.contains(&token)));
    }

    #[test]
    fn roles_include_the_weaker_ones() {
        let editor = Identity {
            name: Arc::from("e"),
            role: Role::Edit,
        };
        assert!(editor.may(Role::Read) && editor.may(Role::Operate) && editor.may(Role::Edit));
        assert!(!editor.may(Role::Admin));
        assert_eq!(Role::parse("operate"), Some(Role::Operate));
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn a_bad_line_is_named_with_what_was_expected() {
        let line = |text: &str| match Identities::parse(text) {
            Err(IdentityError::Line { line, problem }) => (line, problem),
            Ok(_) => panic!("{text:?} parsed"),
        };
        let ok = tokens_file_line("ada", Role::Read, "t1");
        assert_eq!(line(&format!("{ok}\nbob read")).0, 2);
        assert!(line("bob read").1.contains("three fields"));
        assert!(line("bob root sha256:00").1.contains("none of read"));
        assert!(line("bob read sha256:00").1.contains("64 hex digits"));
        assert!(line("b/ob read sha256:00").1.contains("may hold only"));
        let twice = format!("{ok}\n{}", tokens_file_line("ada", Role::Admin, "t2"));
        assert!(line(&twice).1.contains("named twice"));
        let shared = format!("{ok}\n{}", tokens_file_line("bob", Role::Admin, "t1"));
        assert!(line(&shared).1.contains("token of another"));
    }

    #[test]
    fn the_admin_token_is_the_admin_identity_and_cannot_be_shadowed() {
        let identities = Identities::default().with_admin_token("s3cret").unwrap();
        let admin = identities.find("s3cret").unwrap();
        assert_eq!((&*admin.name, admin.role), (ADMIN_NAME, Role::Admin));
        let file = tokens_file_line("admin", Role::Read, "other");
        let err = Identities::parse(&file)
            .unwrap()
            .with_admin_token("s3cret")
            .unwrap_err();
        assert!(err.contains("named twice"), "{err}");
    }
}
