//! Hot reload: watch a gateway config and the files it names (components, vectors); after a
//! debounced burst of changes, rebuild behind the admission gate and swap in - or keep the
//! active generation and record why.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use sha2::{Digest, Sha256};

use crate::{GatewayConfig, Registry, ReloadStatus};

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
    registry: Arc<Registry>,
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for ConfigWatcher {
    /// The debouncer's thread may still hand over one last batch of events after it is
    /// dropped - the files of a gateway that stopped being removed, say - which must not
    /// become a "reload refused" warning about a gateway that no longer runs.
    fn drop(&mut self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl ConfigWatcher {
    /// Watch `config_path` (and the components and vector files it names, as of now) with
    /// changes coalesced over `debounce`.
    pub fn start(
        registry: Arc<Registry>,
        config_path: &Path,
        debounce: Duration,
    ) -> Result<Self, WatchError> {
        let config_path = std::path::absolute(config_path).map_err(|e| WatchError {
            path: config_path.to_path_buf(),
            message: e.to_string(),
        })?;
        let path = config_path.clone();
        let target = registry.clone();
        // Events are only a hint: reading a file is an event too (the reload itself reads
        // them), and the state directory changes as the registry works. What counts is
        // whether the bytes of the config or a file it names changed.
        let mut last = fingerprint(&config_path);
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stopped.clone();
        let mut debouncer = new_debouncer(debounce, move |events: DebounceEventResult| {
            if events.is_err() || stopping.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            // A file still being written is not reloaded half-way: wait until the files stop
            // changing, and give a config that does not parse yet a moment to become whole
            // before calling it broken.
            let mut now = settled_fingerprint(&path, SETTLE, SETTLE_MAX);
            let edited = now != last;
            if edited {
                let deadline = std::time::Instant::now() + BROKEN_GRACE;
                while GatewayConfig::load(&path).is_err() && std::time::Instant::now() < deadline {
                    std::thread::sleep(SETTLE);
                    now = settled_fingerprint(&path, SETTLE, SETTLE_MAX);
                }
                // Settling took a while: the watcher may have been dropped meanwhile.
                if stopping.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let before = target.current().number;
                let result = target.reload_file(&path);
                last = now;
                match result {
                    Ok(generation) if generation == before => {
                        tracing::debug!(config = %path.display(), "files changed, routes did not");
                    }
                    Ok(generation) => {
                        tracing::info!(generation, config = %path.display(), "reloaded");
                    }
                    Err(error) => {
                        let error = verdict_runtime::redact::redact(&error.to_string());
                        tracing::warn!(config = %path.display(), %error, "reload refused; the active generation stays");
                    }
                }
            }
        })
        .map_err(|e| WatchError {
            path: config_path.clone(),
            message: e.to_string(),
        })?;
        // Directories, not files: editors and deploy tools replace files by renaming, which a
        // watch on the old inode would miss.
        let dirs = watched_dirs(&config_path);
        if dirs.is_empty() {
            return Err(WatchError {
                path: config_path.clone(),
                message: "its directory is not a directory that can be watched".into(),
            });
        }
        for dir in dirs {
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
            registry,
            stopped,
        })
    }

    /// What the registry has applied and refused so far.
    pub fn status(&self) -> ReloadStatus {
        self.registry.status()
    }
}

/// How long the files must stay unchanged before a reload reads them.
const SETTLE: Duration = Duration::from_millis(250);
/// The longest a reload waits for the files to settle.
const SETTLE_MAX: Duration = Duration::from_secs(5);
/// How long a config that does not parse may take to become whole before the reload is
/// refused.
const BROKEN_GRACE: Duration = Duration::from_secs(3);

/// [`fingerprint`] once it held still for `quiet` (or after `max`, whatever it is then).
fn settled_fingerprint(
    config_path: &Path,
    quiet: Duration,
    max: Duration,
) -> Vec<Option<[u8; 32]>> {
    let deadline = std::time::Instant::now() + max;
    let mut seen = fingerprint(config_path);
    loop {
        std::thread::sleep(quiet);
        let now = fingerprint(config_path);
        if now == seen || std::time::Instant::now() >= deadline {
            return now;
        }
        seen = now;
    }
}

/// SHA-256 of the config file and of every file it names (`None` for one that cannot be
/// read).
fn fingerprint(config_path: &Path) -> Vec<Option<[u8; 32]>> {
    let digest = |p: &Path| std::fs::read(p).ok().map(|b| Sha256::digest(b).into());
    let mut out = vec![digest(config_path)];
    let base = config_path.parent().unwrap_or(Path::new("."));
    if let Ok(config) = GatewayConfig::load(config_path) {
        for policy in config.policies.values() {
            for file in std::iter::once(&policy.path).chain(&policy.vectors) {
                out.push(digest(&base.join(file)));
            }
        }
    }
    out
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
