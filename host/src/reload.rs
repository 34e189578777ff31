//! Hot reload: watch a gateway config and the files it names (components, vectors); after a
//! debounced burst of changes, rebuild behind the admission gate and swap in - or keep the
//! active generation and record why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use serde::Serialize;

use crate::{GatewayConfig, Registry};

/// What the watcher has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReloadStatus {
    /// Reloads that went live.
    pub reloads: u64,
    /// Reloads refused (the previous generation stayed active).
    pub refused: u64,
    /// Why the last refused reload was refused.
    pub last_error: Option<String>,
    /// The active generation after the last attempt.
    pub generation: u64,
}

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[error("watching {path}: {message}")]
pub struct WatchError {
    /// The path.
    pub path: PathBuf,
    /// What the OS said.
    pub message: String,
}

/// Reloads `registry` when the config file or a file it names changes. Stops when dropped.
pub struct ConfigWatcher {
    _debouncer: Debouncer<RecommendedWatcher>,
    status: Arc<Mutex<ReloadStatus>>,
}

impl ConfigWatcher {
    /// Watch `config_path` (and the components and vector files it names, as of now) with
    /// changes coalesced over `debounce`.
    pub fn start(
        registry: Arc<Registry>,
        config_path: &Path,
        debounce: Duration,
    ) -> Result<Self, WatchError> {
        let config_path = config_path.to_path_buf();
        let base = config_path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let status = Arc::new(Mutex::new(ReloadStatus {
            generation: registry.current().number,
            ..Default::default()
        }));
        let shared = status.clone();
        let path = config_path.clone();
        let mut debouncer = new_debouncer(debounce, move |events: DebounceEventResult| {
            if events.is_ok_and(|events| !events.is_empty()) {
                reload(&registry, &path, &base, &shared);
            }
        })
        .map_err(|e| WatchError {
            path: config_path.clone(),
            message: e.to_string(),
        })?;
        // Directories, not files: editors and deploy tools replace files by renaming, which a
        // watch on the old inode would miss.
        for dir in watched_dirs(&config_path) {
            debouncer
                .watcher()
                .watch(&dir, RecursiveMode::NonRecursive)
                .map_err(|e| WatchError {
                    path: dir.clone(),
                    message: e.to_string(),
                })?;
        }
        Ok(ConfigWatcher {
            _debouncer: debouncer,
            status,
        })
    }

    /// What has happened so far.
    pub fn status(&self) -> ReloadStatus {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn reload(registry: &Registry, config_path: &Path, base: &Path, status: &Mutex<ReloadStatus>) {
    let outcome = GatewayConfig::load(config_path)
        .map_err(|e| e.to_string())
        .and_then(|config| registry.reload(&config, base).map_err(|e| e.to_string()));
    let mut status = status.lock().unwrap_or_else(PoisonError::into_inner);
    match outcome {
        Ok(generation) => {
            tracing::info!(generation, config = %config_path.display(), "reloaded");
            status.reloads += 1;
            status.generation = generation;
        }
        Err(error) => {
            tracing::warn!(config = %config_path.display(), %error, "reload refused; the active generation stays");
            status.refused += 1;
            status.last_error = Some(error);
        }
    }
}

/// The config's directory and those of the files it names.
fn watched_dirs(config_path: &Path) -> Vec<PathBuf> {
    let base = config_path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut dirs = vec![base.clone()];
    if let Ok(config) = GatewayConfig::load(config_path) {
        for policy in config.policies.values() {
            for file in std::iter::once(&policy.path).chain(&policy.vectors) {
                if let Some(dir) = base.join(file).parent() {
                    dirs.push(dir.to_path_buf());
                }
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    dirs.retain(|d| d.is_dir());
    dirs
}
