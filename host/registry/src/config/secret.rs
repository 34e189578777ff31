//! A secret the config names but never holds: a file to read or an environment variable.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

/// Where a secret (a password, a token, a key seed) is read from: `{ file = "..." }` (relative
/// to the config file; surrounding whitespace and a final newline are dropped) or
/// `{ env = "NAME" }`. The value never appears in the config, and once read the one
/// redactor masks it in every answer and log line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Secret {
    /// A file holding the secret.
    File(PathBuf),
    /// An environment variable holding it.
    Env(String),
}

impl Secret {
    /// The same secret with a relative file taken from `base`.
    pub fn resolved(&self, base: &Path) -> Secret {
        match self {
            Secret::File(path) => Secret::File(base.join(path)),
            Secret::Env(name) => Secret::Env(name.clone()),
        }
    }

    /// Read it (and teach the redactor). The error names where it was looked for, never
    /// the value.
    pub fn read(&self) -> Result<String, String> {
        let value = match self {
            Secret::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("file {}: {e}", path.display()))?
                .trim()
                .to_string(),
            Secret::Env(name) => std::env::var(name)
                .map_err(|_| format!("environment variable {name} is not set"))?,
        };
        if value.is_empty() {
            return Err(match self {
                Secret::File(path) => format!("file {} is empty", path.display()),
                Secret::Env(name) => format!("environment variable {name} is empty"),
            });
        }
        verdict_runtime::redact::remember(&value);
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_read_from_a_file_or_the_environment_and_errors_never_show_it() {
        let dir = std::env::temp_dir().join(format!("verdict-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pw"), "s3cret-from-file\n").unwrap();
        let file: Secret = toml::from_str::<toml::Table>("s = { file = \"pw\" }").unwrap()["s"]
            .clone()
            .try_into()
            .unwrap();
        assert_eq!(file.resolved(&dir).read().unwrap(), "s3cret-from-file");
        assert!(
            verdict_runtime::redact::redact("x s3cret-from-file y").contains("***"),
            "the redactor learnt it"
        );
        let missing = Secret::Env("VERDICT_TEST_SURELY_UNSET_VARIABLE".into());
        assert_eq!(
            missing.read().unwrap_err(),
            "environment variable VERDICT_TEST_SURELY_UNSET_VARIABLE is not set"
        );
        std::fs::write(dir.join("empty"), "\n").unwrap();
        let empty = Secret::File(dir.join("empty")).read().unwrap_err();
        assert!(empty.ends_with("is empty"), "{empty}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
