//! The sandbox's limits, set once through a builder and validated when the [`Host`] is
//! created.
//!
//! [`Host`]: crate::Host

use crate::ConfigError;

/// Limits every policy runs under. Defaults suit a gateway deciding thousands of failures
/// per second; each setter returns `&mut Self` so calls chain. The same struct is the
/// `[sandbox]` table of `verdict.toml` (every field optional).
///
/// ```
/// use verdict_runtime::{Host, Limits};
///
/// let mut limits = Limits::new();
/// limits.decide_timeout_ms(20).memory_cap_bytes(8 << 20);
/// let host = Host::new(&limits)?;
/// # Ok::<(), verdict_runtime::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Wall-clock deadline of one `decide`.
    pub(crate) decide_timeout_ms: u64,
    /// Wall-clock deadline of `init` and `describe`.
    pub(crate) init_timeout_ms: u64,
    /// Resolution of the deadline clock.
    pub(crate) epoch_tick_ms: u64,
    /// Fuel per decision (metering off when absent).
    pub(crate) fuel_per_decision: Option<u64>,
    /// Largest linear memory of a policy.
    pub(crate) memory_cap_bytes: usize,
    /// Largest Wasm stack.
    pub(crate) max_wasm_stack_bytes: usize,
    /// Instance slots shared by all policies.
    pub(crate) pooled_instances: u32,
    /// Decisions one warm instance serves before it is replaced.
    pub(crate) instance_max_uses: u32,
    /// Memory growth after which an instance is replaced.
    pub(crate) instance_recycle_bytes: usize,
    /// Idle instances kept warm per route.
    pub(crate) warm_instances: usize,
    /// Largest component file, checked before it is read whole or compiled.
    pub(crate) max_component_bytes: usize,
    /// Most functions a component may define, over all its core modules.
    pub(crate) max_functions: u32,
    /// Most blocks, ifs and trys in one function, a loop counting as 16 (compile time grows
    /// with the square of this count).
    pub(crate) max_function_blocks: u64,
    /// Most blocks, ifs and trys in all of a component's functions, a loop counting as 16.
    pub(crate) max_blocks: u64,
    /// Most core module instances one policy instance may create.
    pub(crate) max_core_instances: u32,
}

/// The most core instances a component may declare at all (Wasmtime's parser takes no more).
const MAX_CORE_INSTANCES: u32 = 1_000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            decide_timeout_ms: 10,
            init_timeout_ms: 1_000,
            epoch_tick_ms: 1,
            fuel_per_decision: None,
            memory_cap_bytes: 16 << 20,
            max_wasm_stack_bytes: 512 << 10,
            pooled_instances: 256,
            instance_max_uses: 10_000,
            instance_recycle_bytes: 4 << 20,
            warm_instances: 4,
            max_component_bytes: 32 << 20,
            max_functions: 40_000,
            max_function_blocks: 10_000,
            max_blocks: 1_000_000,
            max_core_instances: 16,
        }
    }
}

impl Limits {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wall-clock deadline of one `decide` call (epoch interruption; always on). Default 10.
    pub fn decide_timeout_ms(&mut self, ms: u64) -> &mut Self {
        self.decide_timeout_ms = ms;
        self
    }

    /// Wall-clock deadline of `init` and `describe`. Default 1000.
    pub fn init_timeout_ms(&mut self, ms: u64) -> &mut Self {
        self.init_timeout_ms = ms;
        self
    }

    /// Resolution of the deadline clock: a background thread advances the epoch this often.
    /// Default 1.
    pub fn epoch_tick_ms(&mut self, ms: u64) -> &mut Self {
        self.epoch_tick_ms = ms;
        self
    }

    /// Deterministic cost budget of one `decide`, in Wasmtime fuel units. Off by default:
    /// metering costs 13-33% per call, so it is for admission and property checks.
    pub fn fuel_per_decision(&mut self, fuel: Option<u64>) -> &mut Self {
        self.fuel_per_decision = fuel;
        self
    }

    /// Largest linear memory a policy may grow to. Default 16 MiB.
    pub fn memory_cap_bytes(&mut self, bytes: usize) -> &mut Self {
        self.memory_cap_bytes = bytes;
        self
    }

    /// Largest Wasm stack (deep recursion traps past it). Default 512 KiB.
    pub fn max_wasm_stack_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_wasm_stack_bytes = bytes;
        self
    }

    /// Instance slots in the pooling allocator, shared by all policies. Default 256.
    pub fn pooled_instances(&mut self, count: u32) -> &mut Self {
        self.pooled_instances = count;
        self
    }

    /// Decisions one warm instance serves before it is replaced, so state a policy keeps
    /// between calls cannot build up for long. Default 10 000.
    pub fn instance_max_uses(&mut self, uses: u32) -> &mut Self {
        self.instance_max_uses = uses;
        self
    }

    /// An instance whose memory grew by more than this since it was instantiated is replaced
    /// after its call (growth, not size: an embedded interpreter starts with megabytes).
    /// Default 4 MiB.
    pub fn instance_recycle_bytes(&mut self, bytes: usize) -> &mut Self {
        self.instance_recycle_bytes = bytes;
        self
    }

    /// Idle instances a topic keeps warm for concurrent decisions. Default 4.
    pub fn warm_instances(&mut self, count: usize) -> &mut Self {
        self.warm_instances = count;
        self
    }

    /// Largest component a policy may be, in bytes; a larger file is refused before it is
    /// read whole or compiled. Default 32 MiB: a Python policy embeds CPython (about
    /// 18 MiB), a JavaScript one SpiderMonkey (about 12 MiB); the shipped Rust policies are
    /// under 250 KiB, so a gateway that runs only Rust policies can set 8 MiB.
    pub fn max_component_bytes(&mut self, bytes: usize) -> &mut Self {
        self.max_component_bytes = bytes;
        self
    }

    /// Most functions a component may define, over all its core modules; each costs the
    /// compiler time and memory of its own. Default 40 000 (a Python policy defines about
    /// 12 500, the shipped Rust policies under 400).
    pub fn max_functions(&mut self, count: u32) -> &mut Self {
        self.max_functions = count;
        self
    }

    /// Most blocks, ifs and trys in one function, each loop counting as 16: the compiler's
    /// time grows with the square of this count, so a small function of deeply nested or
    /// many blocks is a compile bomb. Default 10 000 (the shipped policies reach 742).
    pub fn max_function_blocks(&mut self, count: u64) -> &mut Self {
        self.max_function_blocks = count;
        self
    }

    /// Most blocks, ifs and trys in all of a component's functions, counted as for
    /// [`max_function_blocks`](Self::max_function_blocks); with it, bounds the compile time
    /// of many large functions. Default 1 000 000 (a Python or JavaScript policy's
    /// interpreter reaches about 400 000; the shipped Rust policies 8 232, so a gateway that
    /// runs only Rust policies can set 100 000 and compile nothing slower than a second).
    pub fn max_blocks(&mut self, count: u64) -> &mut Self {
        self.max_blocks = count;
        self
    }

    /// Most core module instances one policy instance may create: a Rust policy needs 3
    /// (its module and the canonical ABI's shims), a Python policy 14 (CPython, libc and
    /// its dynamically linked libraries). Default 16. Pool slots are sized for every
    /// pooled instance to reach it.
    pub fn max_core_instances(&mut self, count: u32) -> &mut Self {
        self.max_core_instances = count;
        self
    }

    /// Take the bounds that keep a component in its box from `other`: the memory cap, the
    /// stack, and the component's shape (size, functions, blocks). Deadlines, fuel and
    /// pooling stay as they are. An admission gate compiles candidates this way, under the
    /// same bounds as the engine that will serve them.
    pub fn bounds_of(&mut self, other: &Limits) -> &mut Self {
        self.memory_cap_bytes = other.memory_cap_bytes;
        self.max_wasm_stack_bytes = other.max_wasm_stack_bytes;
        self.max_component_bytes = other.max_component_bytes;
        self.max_functions = other.max_functions;
        self.max_function_blocks = other.max_function_blocks;
        self.max_blocks = other.max_blocks;
        self.max_core_instances = other.max_core_instances;
        self
    }

    /// Check the limits against each other; [`Host::new`] does this, a config loader may do
    /// it earlier to name the file.
    ///
    /// [`Host::new`]: crate::Host::new
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, message: String| Err(ConfigError::InvalidLimit { field, message });
        if self.epoch_tick_ms == 0 {
            return bad("epoch_tick_ms", "must be at least 1".into());
        }
        if self.decide_timeout_ms < self.epoch_tick_ms {
            return bad(
                "decide_timeout_ms",
                format!(
                    "{} is below the epoch tick ({} ms)",
                    self.decide_timeout_ms, self.epoch_tick_ms
                ),
            );
        }
        if self.init_timeout_ms < self.epoch_tick_ms {
            return bad(
                "init_timeout_ms",
                format!("{} is below the epoch tick", self.init_timeout_ms),
            );
        }
        if self.fuel_per_decision == Some(0) {
            return bad(
                "fuel_per_decision",
                "must be positive (or None to disable metering)".into(),
            );
        }
        if self.memory_cap_bytes < 1 << 16 {
            return bad(
                "memory_cap_bytes",
                format!("{} is below one Wasm page (65536)", self.memory_cap_bytes),
            );
        }
        if self.max_wasm_stack_bytes < 16 << 10 {
            return bad("max_wasm_stack_bytes", "must be at least 16 KiB".into());
        }
        if self.pooled_instances == 0 {
            return bad("pooled_instances", "must be at least 1".into());
        }
        if self.instance_max_uses == 0 {
            return bad("instance_max_uses", "must be at least 1".into());
        }
        if self.max_component_bytes < 8 {
            return bad(
                "max_component_bytes",
                format!(
                    "{} is below a component's 8-byte header",
                    self.max_component_bytes
                ),
            );
        }
        if self.max_functions == 0 {
            return bad("max_functions", "must be at least 1".into());
        }
        if self.max_function_blocks == 0 {
            return bad("max_function_blocks", "must be at least 1".into());
        }
        if self.max_blocks < self.max_function_blocks {
            return bad(
                "max_blocks",
                format!(
                    "{} is below max_function_blocks ({})",
                    self.max_blocks, self.max_function_blocks
                ),
            );
        }
        if self.max_core_instances == 0 || self.max_core_instances > MAX_CORE_INSTANCES {
            return bad(
                "max_core_instances",
                format!("must be between 1 and {MAX_CORE_INSTANCES}"),
            );
        }
        Ok(())
    }

    /// Epochs to wait for a deadline: rounded up, plus one because the current tick may be
    /// about to end.
    pub(crate) fn ticks(&self, timeout_ms: u64) -> u64 {
        timeout_ms.div_ceil(self.epoch_tick_ms) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        assert!(Limits::new().validate().is_ok());
    }

    #[test]
    fn each_bad_limit_names_its_field() {
        type Setter = fn(&mut Limits);
        let cases: [(&str, Setter); 11] = [
            ("max_core_instances", |l| {
                l.max_core_instances(1_001);
            }),
            ("epoch_tick_ms", |l| {
                l.epoch_tick_ms(0);
            }),
            ("decide_timeout_ms", |l| {
                l.epoch_tick_ms(5).decide_timeout_ms(2);
            }),
            ("fuel_per_decision", |l| {
                l.fuel_per_decision(Some(0));
            }),
            ("memory_cap_bytes", |l| {
                l.memory_cap_bytes(1000);
            }),
            ("pooled_instances", |l| {
                l.pooled_instances(0);
            }),
            ("instance_max_uses", |l| {
                l.instance_max_uses(0);
            }),
            ("max_component_bytes", |l| {
                l.max_component_bytes(4);
            }),
            ("max_functions", |l| {
                l.max_functions(0);
            }),
            ("max_function_blocks", |l| {
                l.max_function_blocks(0).max_blocks(0);
            }),
            ("max_blocks", |l| {
                l.max_function_blocks(100).max_blocks(99);
            }),
        ];
        for (field, set) in cases {
            let mut l = Limits::new();
            set(&mut l);
            let err = l.validate().unwrap_err().to_string();
            assert!(err.starts_with(field), "{field}: {err}");
        }
    }

    #[test]
    fn ticks_round_up() {
        let mut l = Limits::new();
        l.epoch_tick_ms(3);
        assert_eq!(l.ticks(10), 5);
        assert_eq!(l.ticks(9), 4);
    }
}
