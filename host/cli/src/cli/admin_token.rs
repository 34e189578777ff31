//! `verdict admin token new NAME --role ROLE`: a fresh token for a named identity, and the
//! line that makes the gateway accept it.

use anyhow::{Context, bail};
use verdict_gateway::admin::identity::{Role, name_error, new_token as fresh, tokens_file_line};

/// What `verdict admin token new` prints: the token (once; nothing keeps it) and the
/// tokens-file line holding its digest.
pub fn new_token(name: &str, role: &str) -> anyhow::Result<String> {
    if let Some(problem) = name_error(name) {
        bail!("NAME: {problem}");
    }
    let Some(role) = Role::parse(role) else {
        bail!("--role: `{role}` is none of read, operate, edit, admin");
    };
    let token = fresh().context("reading the system's random source for the token")?;
    let line = tokens_file_line(name, role, &token);
    Ok(format!(
        "# The token of `{name}` (role {role}). It is shown this once and kept nowhere: give \
         it to its holder now.\n{token}\n\
         # Add this line to the file `[admin] tokens_file` names; a running gateway accepts \
         the token within a second.\n{line}\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_gateway::admin::identity::Identities;

    #[test]
    fn the_printed_line_accepts_the_printed_token() {
        let out = new_token("ci-deploy", "operate").unwrap();
        let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        let [token, line] = lines[..] else {
            panic!("{out}")
        };
        assert!(!line.contains(token));
        let identities = Identities::parse(line).unwrap();
        let who = identities.find(token).unwrap();
        assert_eq!((&*who.name, who.role), ("ci-deploy", Role::Operate));
        assert_ne!(
            new_token("ci-deploy", "operate").unwrap(),
            out,
            "tokens are fresh"
        );
    }

    #[test]
    fn a_bad_name_or_role_is_named() {
        let e = new_token("ada lovelace", "read").unwrap_err().to_string();
        assert!(e.starts_with("NAME:"), "{e}");
        let e = new_token("ada", "root").unwrap_err().to_string();
        assert!(e.starts_with("--role:"), "{e}");
    }
}
