//! Uploaded components: staged in the state directory, checked on arrival, activated by
//! digest. Staging and activation are separate steps so an operator can upload, look
//! (`verdict policy list`), and only then put the new version live.

use std::path::PathBuf;

use serde::Serialize;

use super::{Registry, RegistryError};
use verdict_runtime::Provenance;

/// A component staged for a policy.
#[derive(Debug, Clone, Serialize)]
pub struct Upload {
    /// The policy name it is staged for.
    pub policy: String,
    /// What the component says it is, and its digest (the handle to activate it by).
    pub provenance: Provenance,
    /// Where it is stored.
    pub path: PathBuf,
}

impl Registry {
    /// Stage `bytes` as a new component for `policy`: it must load and speak the contract
    /// (the full admission gate runs on activation, with the routes' configs). Compiles it
    /// now, so activation does not wait for the compiler.
    pub fn upload(&self, policy: &str, bytes: &[u8]) -> Result<Upload, RegistryError> {
        let current = self.current();
        self.check_policy(&current.source, policy)?;
        let loaded = self
            .host
            .load_bytes(bytes, policy)
            .map_err(|source| RegistryError::Load {
                policy: policy.into(),
                error: source,
            })?;
        let provenance = (**loaded.provenance()).clone();
        let path = self.uploaded_path(policy, &provenance.sha256)?;
        if !path.is_file() {
            verdict_runtime::fsutil::write_atomically(&path, &[bytes]).map_err(|source| {
                RegistryError::Storage {
                    path: path.clone(),
                    error: source,
                }
            })?;
        }
        tracing::info!(policy, sha256 = %provenance.sha256, version = %provenance.version, "component uploaded");
        Ok(Upload {
            policy: policy.into(),
            provenance,
            path,
        })
    }

    /// Digests of the components uploaded for `policy`.
    pub fn uploads(&self, policy: &str) -> Vec<String> {
        let Ok(dir) = self.policy_dir(policy) else {
            return Vec::new();
        };
        let mut digests: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".wasm").map(String::from)
            })
            .collect();
        digests.sort();
        digests
    }

    pub(super) fn uploaded_path(
        &self,
        policy: &str,
        sha256: &str,
    ) -> Result<PathBuf, RegistryError> {
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(RegistryError::NotUploaded {
                policy: policy.into(),
                sha256: sha256.into(),
            });
        }
        Ok(self.policy_dir(policy)?.join(format!("{sha256}.wasm")))
    }

    /// The policy's upload directory. Names come from the operator's config, but are still
    /// checked: they become a path.
    fn policy_dir(&self, policy: &str) -> Result<PathBuf, RegistryError> {
        self.check_policy(&self.current().source, policy)?;
        let safe = !policy.is_empty()
            && !policy.starts_with('.')
            && policy
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !safe {
            return Err(RegistryError::Storage {
                path: self.uploads.join(policy),
                error: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a policy name used for uploads may hold only letters, digits, `.`, `_` and `-`",
                ),
            });
        }
        Ok(self.uploads.join(policy))
    }
}
