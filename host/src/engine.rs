//! The [`Host`]: one Wasmtime engine, its linker and the epoch clock, shared by every policy.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::artifacts::{ArtifactCache, CacheStats};
use crate::bindings::{self, HostState};
use crate::{ConfigError, Limits, LoadError, Policy};

/// Loads policies and runs them under the configured [`Limits`]. Cheap to clone.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    limits: Limits,
    artifacts: ArtifactCache,
    _ticker: EpochTicker,
}

impl Host {
    /// Create a host with validated limits.
    pub fn new(limits: &Limits) -> Result<Host, ConfigError> {
        Host::with_artifact_cache(limits, None)
    }

    /// Create a host that keeps compiled components in `cache_dir` (when given), so loading
    /// a component it has compiled before, in this process or an earlier one, skips the
    /// compiler. A stale or corrupt entry is rebuilt, never trusted.
    pub fn with_artifact_cache(
        limits: &Limits,
        cache_dir: Option<PathBuf>,
    ) -> Result<Host, ConfigError> {
        limits.validate()?;
        let engine = Engine::new(&engine_config(limits))
            .map_err(|e| ConfigError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        bindings::add_to_linker(&mut linker).map_err(|e| ConfigError::Engine(format!("{e:#}")))?;
        let ticker =
            EpochTicker::start(engine.clone(), Duration::from_millis(limits.epoch_tick_ms))
                .map_err(|e| ConfigError::Engine(format!("starting the epoch thread: {e}")))?;
        Ok(Host {
            inner: Arc::new(Inner {
                engine,
                linker,
                limits: limits.clone(),
                artifacts: ArtifactCache::new(cache_dir),
                _ticker: ticker,
            }),
        })
    }

    /// Load a policy component from a file.
    pub fn load_file(&self, path: &Path) -> Result<Arc<Policy>, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_bytes(&bytes, &path.display().to_string())
    }

    /// Load a policy component from bytes; `origin` names it in errors and logs.
    pub fn load_bytes(&self, bytes: &[u8], origin: &str) -> Result<Arc<Policy>, LoadError> {
        Policy::load(self, bytes, origin).map(Arc::new)
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// How many components were compiled, and taken from or refused by the artifact cache.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.artifacts.stats()
    }

    pub(crate) fn artifacts(&self) -> &ArtifactCache {
        &self.inner.artifacts
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(crate) fn linker(&self) -> &Linker<HostState> {
        &self.inner.linker
    }
}

fn engine_config(limits: &Limits) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.consume_fuel(limits.fuel_per_decision.is_some());
    config.max_wasm_stack(limits.max_wasm_stack_bytes);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(limits.pooled_instances)
        .total_core_instances(limits.pooled_instances)
        .total_memories(limits.pooled_instances)
        .total_tables(limits.pooled_instances)
        .max_memory_size(limits.memory_cap_bytes);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// Advances the engine's epoch on a fixed period so that every call's deadline fires even
/// when the guest never returns. Stops when dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: Engine, period: Duration) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("verdict-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(period);
                    engine.increment_epoch();
                }
            })?;
        Ok(EpochTicker { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
