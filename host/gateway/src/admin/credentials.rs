//! The identities a running gateway accepts: the admin token, read once at start, and the
//! tokens file, followed across edits so that adding or revoking an identity needs no
//! restart.
//!
//! The file is looked at again at most once a second, when a credential is checked, and
//! read again only when its size or modification time changed. A file that stops parsing
//! fails closed: its identities are refused (the admin token still works) and a warning
//! names the line, until the file is mended.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::identity::{Identities, IdentityError};

/// How often the tokens file is looked at.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Why the credentials cannot be loaded at start.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The tokens file could not be read.
    #[error("admin.tokens_file = {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line of the tokens file is not an identity.
    #[error("admin.tokens_file = {}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Which line, and what is wrong.
        #[source]
        source: IdentityError,
    },
    /// The admin token collides with an identity of the file.
    #[error("admin.tokens_file = {}: {problem}", path.display())]
    Conflict {
        /// The file.
        path: PathBuf,
        /// What collides.
        problem: String,
    },
}

/// What a file looked like when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

struct Loaded {
    identities: Arc<Identities>,
    stamp: Option<Stamp>,
    looked_at: Instant,
}

/// The identities, kept current with the tokens file.
pub struct Credentials {
    admin_token: Option<String>,
    file: Option<PathBuf>,
    loaded: Mutex<Loaded>,
}

impl Credentials {
    /// The admin token (if any) and the identities of `file` (if any). A file that cannot
    /// be read or parsed is an error here: a gateway does not start with credentials other
    /// than those its operator wrote.
    pub fn load(
        admin_token: Option<String>,
        file: Option<PathBuf>,
    ) -> Result<Credentials, CredentialsError> {
        let admin_token = admin_token.filter(|t| !t.trim().is_empty());
        let (identities, stamp) = match &file {
            Some(path) => {
                let (identities, stamp) = read(path, admin_token.as_deref())?;
                (identities, Some(stamp))
            }
            None => (admin_only(admin_token.as_deref()), None),
        };
        Ok(Credentials {
            admin_token,
            file,
            loaded: Mutex::new(Loaded {
                identities: Arc::new(identities),
                stamp,
                looked_at: Instant::now(),
            }),
        })
    }

    /// The identities now (the tokens file looked at again when it is due).
    pub fn current(&self) -> Arc<Identities> {
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(path) = &self.file else {
            return loaded.identities.clone();
        };
        if loaded.looked_at.elapsed() < LOOK_EVERY {
            return loaded.identities.clone();
        }
        loaded.looked_at = Instant::now();
        let stamp = stamp_of(path);
        if stamp.is_some() && stamp == loaded.stamp {
            return loaded.identities.clone();
        }
        match read(path, self.admin_token.as_deref()) {
            Ok((identities, stamp)) => {
                tracing::info!(
                    file = %path.display(),
                    identities = identities.len(),
                    "admin.tokens_file read again"
                );
                loaded.identities = Arc::new(identities);
                loaded.stamp = Some(stamp);
            }
            Err(e) => {
                let cause = std::error::Error::source(&e).map(ToString::to_string);
                tracing::warn!(
                    error = %e,
                    cause = %cause.unwrap_or_default(),
                    "admin.tokens_file cannot be used: its identities are refused until it \
                     is mended (the admin token still works)"
                );
                loaded.identities = Arc::new(admin_only(self.admin_token.as_deref()));
                loaded.stamp = stamp;
            }
        }
        loaded.identities.clone()
    }
}

fn stamp_of(path: &std::path::Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

fn read(
    path: &std::path::Path,
    admin_token: Option<&str>,
) -> Result<(Identities, Stamp), CredentialsError> {
    let stamp = stamp_of(path);
    let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let identities = Identities::parse(&text).map_err(|source| CredentialsError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let identities =
        match admin_token {
            Some(token) => identities.with_admin_token(token).map_err(|problem| {
                CredentialsError::Conflict {
                    path: path.to_path_buf(),
                    problem,
                }
            })?,
            None => identities,
        };
    let stamp = stamp.unwrap_or(Stamp {
        len: text.len() as u64,
        modified: None,
    });
    Ok((identities, stamp))
}

/// The admin token alone (an empty set cannot hold a conflicting name or digest).
fn admin_only(admin_token: Option<&str>) -> Identities {
    admin_token
        .and_then(|token| Identities::default().with_admin_token(token).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::identity::{Role, tokens_file_line};
    use super::*;

    #[test]
    fn an_edited_file_is_followed_and_a_broken_one_fails_closed() {
        let dir = std::env::temp_dir().join(format!("verdict-credentials-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(&path, tokens_file_line("ada", Role::Read, "t-ada")).unwrap();
        let credentials = Credentials::load(Some("root".into()), Some(path.clone())).unwrap();
        assert!(credentials.current().find("t-ada").is_some());
        assert!(credentials.current().find("root").is_some());

        std::fs::write(&path, "ada read sha256:broken\n").unwrap();
        std::thread::sleep(LOOK_EVERY + Duration::from_millis(50));
        let now = credentials.current();
        assert!(now.find("t-ada").is_none(), "a broken file fails closed");
        assert!(now.find("root").is_some(), "the admin token still works");

        let lines = format!(
            "{}\n{}\n",
            tokens_file_line("bob", Role::Operate, "t-bob"),
            tokens_file_line("ada", Role::Read, "t-ada")
        );
        std::fs::write(&path, lines).unwrap();
        std::thread::sleep(LOOK_EVERY + Duration::from_millis(50));
        assert_eq!(
            credentials.current().find("t-bob").map(|i| i.role),
            Some(Role::Operate)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_does_not_parse_stops_the_start_naming_the_line() {
        let dir =
            std::env::temp_dir().join(format!("verdict-credentials-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(&path, "# ok\nada reader sha256:00\n").unwrap();
        let chain = |e: CredentialsError| {
            let source = std::error::Error::source(&e).map(ToString::to_string);
            format!("{e}: {}", source.unwrap_or_default())
        };
        let err = chain(Credentials::load(None, Some(path.clone())).err().unwrap());
        assert!(
            err.contains("tokens_file") && err.contains("line 2"),
            "{err}"
        );
        let err = chain(
            Credentials::load(None, Some(dir.join("missing")))
                .err()
                .unwrap(),
        );
        assert!(err.contains("missing"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
