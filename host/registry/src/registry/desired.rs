//! What a generation was built from: the config file plus the operator's changes made
//! through the admin API (an activated upload, a shadow turned on or off).
//!
//! An operator change holds across reloads of the file for as long as the file's own entry
//! it replaced is unchanged: editing an unrelated route keeps an activated upload live, but
//! editing that policy's entry in the file means the file speaks again. The operator's
//! changes are journaled in the state directory (`operator.json`), so they survive a restart
//! on the same terms.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::{GatewayConfig, PolicyConfig, ShadowConfig};

/// A generation's inputs: what the operator wants live - the config file as read plus the
/// changes made through the admin API.
#[derive(Debug, Clone)]
pub(crate) struct Desired {
    /// The config as read from the file.
    pub file: GatewayConfig,
    /// Paths in `file` are relative to this.
    pub base_dir: PathBuf,
    /// Activated uploads, by policy name.
    pub components: BTreeMap<String, ComponentOverride>,
    /// Shadows set by the operator, by route topic pattern.
    pub shadows: BTreeMap<String, ShadowOverride>,
}

/// An uploaded component activated for a policy.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct ComponentOverride {
    /// The uploaded file (absolute).
    pub path: PathBuf,
    /// The file's entry for the policy when the upload was activated.
    pub replaced: PolicyConfig,
}

/// A route's shadow as the operator set it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct ShadowOverride {
    /// The shadow (`None`: turned off).
    pub shadow: Option<ShadowConfig>,
    /// The file's shadow for the route when the operator changed it.
    pub replaced: Option<ShadowConfig>,
}

impl Desired {
    pub(crate) fn from_file(file: GatewayConfig, base_dir: PathBuf) -> Self {
        Desired {
            file,
            base_dir,
            components: BTreeMap::new(),
            shadows: BTreeMap::new(),
        }
    }

    /// The same operator changes on top of a new file, dropping those whose entry the file
    /// has since changed.
    pub(crate) fn with_file(&self, file: GatewayConfig, base_dir: PathBuf) -> Self {
        let components = self
            .components
            .iter()
            .filter(|(name, o)| file.policies.get(*name) == Some(&o.replaced))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let shadows = self
            .shadows
            .iter()
            .filter(|(topic, o)| {
                file.routes
                    .iter()
                    .any(|r| &r.topic == *topic && r.shadow == o.replaced)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Desired {
            file,
            base_dir,
            components,
            shadows,
        }
    }

    /// The config with the operator's changes applied.
    pub(crate) fn effective(&self) -> GatewayConfig {
        let mut config = self.file.clone();
        for (name, o) in &self.components {
            if let Some(policy) = config.policies.get_mut(name) {
                policy.path.clone_from(&o.path);
                // The file's vectors still apply to the upload; its pin does too (a pinned
                // policy cannot be replaced through the API, by design).
            }
        }
        for route in &mut config.routes {
            if let Some(o) = self.shadows.get(&route.topic) {
                route.shadow.clone_from(&o.shadow);
            }
        }
        config
    }
}

/// The operator's changes, as journaled.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Journal {
    pub components: BTreeMap<String, ComponentOverride>,
    pub shadows: BTreeMap<String, ShadowOverride>,
}

impl Journal {
    pub(crate) fn load(path: &std::path::Path) -> Result<Option<Journal>, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    pub(crate) fn save(source: &Desired, path: &std::path::Path) -> std::io::Result<()> {
        let journal = Journal {
            components: source.components.clone(),
            shadows: source.shadows.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&journal).map_err(std::io::Error::other)?;
        verdict_runtime::fsutil::write_atomically(path, &[&bytes])
    }

    /// `file` with these changes, minus those whose file entry has changed since.
    pub(crate) fn apply(self, file: GatewayConfig, base_dir: PathBuf) -> Desired {
        let journaled = Desired {
            file: file.clone(),
            base_dir: base_dir.clone(),
            components: self.components,
            shadows: self.shadows,
        };
        journaled.with_file(file, base_dir)
    }
}
