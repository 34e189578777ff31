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
        let origin = path.display().to_string();
        let bytes = crate::bounds::read(path, self.limits(), &origin)?;
        self.load_bytes(&bytes, &origin)
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
        .total_core_instances(
            limits
                .pooled_instances
                .saturating_mul(limits.max_core_instances),
        )
        .total_memories(limits.pooled_instances)
        .total_tables(limits.pooled_instances)
        .max_memory_size(limits.memory_cap_bytes)
        // Per component as well as per store (the limiter): a component with many
        // memories or instances is refused at instantiation, on every engine.
        .max_memories_per_component(bindings::MAX_MEMORIES as u32)
        .max_tables_per_component(bindings::MAX_TABLES as u32)
        .max_core_instances_per_component(limits.max_core_instances);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A component that instantiates `n` core modules, each with a memory of its own.
    fn memories(n: usize) -> String {
        let mut wat = String::from("(component\n  (core module $m (memory 1))\n");
        for _ in 0..n {
            wat += "  (core instance (instantiate $m))\n";
        }
        wat + ")"
    }

    #[test]
    fn a_component_gets_one_memory_however_many_it_declares() {
        let host = Host::new(&Limits::new()).unwrap();
        let instantiate = |wat: &str| {
            let bytes = wat::parse_str(wat).unwrap();
            // Refused when compiled for the pool already, or at instantiation at the latest.
            let component = wasmtime::component::Component::new(host.engine(), &bytes)?;
            let mut store =
                wasmtime::Store::new(host.engine(), HostState::new("test".into(), 1 << 20, 4));
            store.limiter(|state| &mut state.limiter);
            Linker::<HostState>::new(host.engine())
                .instantiate(&mut store, &component)
                .map(|_| ())
        };
        instantiate(&memories(1)).expect("one memory is what a policy has");
        let refused = instantiate(&memories(3)).unwrap_err();
        let text = format!("{refused:#}");
        assert!(text.contains("3 Wasm linear memories"), "{text}");
    }
}
