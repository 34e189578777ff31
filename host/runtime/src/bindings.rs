//! The host side of the contract's imports: what a policy's store carries, the `host.*`
//! functions, and the memory limiter.

use std::sync::Arc;

use wasmtime::component::HasSelf;
use wasmtime::{ResourceLimiter, Result};

use crate::failure::Details;
use crate::wasi::{CallInputs, WasiHost, WasiState};

use crate::wit::generated;
use crate::wit::generated::verdict::policy::host::Host;
use crate::wit::types as wit;

/// Longest log line a policy may write; the rest is cut.
const MAX_LOG_LINE_BYTES: usize = 4 << 10;
/// Log lines one call may write; more are dropped and counted.
const MAX_LOG_LINES_PER_CALL: u32 = 32;

/// What a store carries for one policy instance.
pub(crate) struct HostState {
    pub(crate) limiter: MemoryLimiter,
    /// The failure being decided; `None` outside `decide`.
    pub(crate) current: Option<Arc<Details>>,
    /// The last panic message the SDK's hook logged, to explain the trap that follows.
    pub(crate) last_panic: Option<String>,
    pub(crate) policy: Arc<str>,
    /// The deterministic WASI's clock, generator and unfinished output lines.
    pub(crate) wasi: WasiState,
    log_lines: u32,
}

impl HostState {
    pub(crate) fn new(policy: Arc<str>, memory_cap_bytes: usize, max_core_instances: u32) -> Self {
        HostState {
            limiter: MemoryLimiter::new(memory_cap_bytes, max_core_instances as usize),
            current: None,
            last_panic: None,
            policy,
            wasi: WasiState::default(),
            log_lines: 0,
        }
    }

    /// Reset per-call state.
    pub(crate) fn begin_call(&mut self, current: Option<Arc<Details>>, inputs: CallInputs) {
        self.current = current;
        self.log_lines = 0;
        self.last_panic = None;
        self.wasi = WasiState::begin(inputs);
    }

    /// Drop the borrowed failure once the call returns (the panic message stays for the
    /// fault report), and write out what the policy printed without a final newline.
    pub(crate) fn end_call(&mut self) {
        self.current = None;
        for (level, pending) in [
            (wit::Level::Info, std::mem::take(&mut self.wasi.stdout)),
            (wit::Level::Warn, std::mem::take(&mut self.wasi.stderr)),
        ] {
            if !pending.is_empty() {
                self.policy_log(level, String::from_utf8_lossy(&pending).into_owned());
            }
        }
    }

    /// One line of the policy log, from `host.log` or the policy's stdout and stderr: cut
    /// to [`MAX_LOG_LINE_BYTES`], at most [`MAX_LOG_LINES_PER_CALL`] per call.
    pub(crate) fn policy_log(&mut self, level: wit::Level, message: String) {
        let mut message = message;
        self.log_lines += 1;
        if self.log_lines > MAX_LOG_LINES_PER_CALL {
            return;
        }
        crate::text::truncate_utf8(&mut message, MAX_LOG_LINE_BYTES);
        let policy = &*self.policy;
        match level {
            wit::Level::Trace => tracing::trace!(target: "verdict::policy", policy, "{message}"),
            wit::Level::Debug => tracing::debug!(target: "verdict::policy", policy, "{message}"),
            wit::Level::Info => tracing::info!(target: "verdict::policy", policy, "{message}"),
            wit::Level::Warn => tracing::warn!(target: "verdict::policy", policy, "{message}"),
            wit::Level::Error => tracing::error!(target: "verdict::policy", policy, "{message}"),
        }
    }

    fn details(&self) -> Option<&Details> {
        self.current.as_deref()
    }
}

pub(crate) fn add_to_linker(linker: &mut wasmtime::component::Linker<HostState>) -> Result<()> {
    generated::verdict::policy::host::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)
}

impl WasiHost for HostState {
    fn wasi(&mut self) -> &mut WasiState {
        &mut self.wasi
    }

    fn policy_log(&mut self, level: wit::Level, line: String) {
        HostState::policy_log(self, level, line);
    }
}

impl generated::verdict::policy::types::Host for HostState {}

impl Host for HostState {
    fn log(&mut self, level: wit::Level, message: String) {
        if level == wit::Level::Error && message.starts_with("panic: ") {
            // A policy's panic message reaches logs, metrics and envelopes: one bounded line.
            self.last_panic = Some(crate::text::one_line(
                &message["panic: ".len()..],
                crate::text::MAX_MESSAGE_BYTES,
            ));
        }
        self.policy_log(level, message);
    }

    fn topic(&mut self) -> String {
        self.details().map(|d| d.topic.clone()).unwrap_or_default()
    }

    fn message_id(&mut self) -> String {
        self.details()
            .map(|d| d.message_id.clone())
            .unwrap_or_default()
    }

    fn consumer_group(&mut self) -> String {
        self.details()
            .map(|d| d.consumer_group.clone())
            .unwrap_or_default()
    }

    fn error_message(&mut self) -> String {
        self.details()
            .map(|d| d.error_message.clone())
            .unwrap_or_default()
    }

    fn published_at_ms(&mut self) -> Option<u64> {
        self.details().and_then(|d| d.published_at_ms)
    }

    fn payload_size(&mut self) -> u32 {
        self.details()
            .map_or(0, |d| u32::try_from(d.payload.len()).unwrap_or(u32::MAX))
    }

    fn content_type(&mut self) -> Option<String> {
        self.details().and_then(|d| d.content_type.clone())
    }

    fn headers(&mut self) -> Vec<wit::Header> {
        let Some(d) = self.details() else {
            return Vec::new();
        };
        d.headers
            .iter()
            .map(|(name, value)| wit::Header {
                name: name.clone(),
                value: value.clone(),
            })
            .collect()
    }

    fn payload(&mut self) -> Vec<u8> {
        self.details()
            .map(|d| d.payload.clone())
            .unwrap_or_default()
    }

    fn history(&mut self) -> Vec<wit::AttemptRecord> {
        let Some(d) = self.details() else {
            return Vec::new();
        };
        d.history
            .iter()
            .map(|a| wit::AttemptRecord {
                at_ms: a.at_ms,
                kind: a.kind.clone(),
                message: a.message.clone(),
            })
            .collect()
    }

    fn extension(&mut self, key: String) -> Option<String> {
        self.details().and_then(|d| d.extensions.get(&key).cloned())
    }
}

/// Caps linear memory and remembers when a policy hit the cap, so the trap that follows is
/// reported as "memory cap" rather than a bare out-of-bounds or unreachable.
pub(crate) struct MemoryLimiter {
    cap_bytes: usize,
    max_core_instances: usize,
    pub(crate) peak_bytes: usize,
    pub(crate) refused: Option<usize>,
}

impl MemoryLimiter {
    fn new(cap_bytes: usize, max_core_instances: usize) -> Self {
        MemoryLimiter {
            cap_bytes,
            max_core_instances,
            peak_bytes: 0,
            refused: None,
        }
    }

    pub(crate) fn cap_bytes(&self) -> usize {
        self.cap_bytes
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> Result<bool> {
        if desired > self.cap_bytes {
            self.refused = Some(desired);
            wasmtime::bail!(
                "memory cap of {} bytes reached (asked for {desired})",
                self.cap_bytes
            );
        }
        self.peak_bytes = self.peak_bytes.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> Result<bool> {
        Ok(desired <= 100_000)
    }

    // Per store - one policy instance: one memory and two tables are what every toolchain
    // needs (a Rust policy's module plus the canonical ABI's shims; CPython's and
    // SpiderMonkey's libraries share one memory). The memory cap holds per memory; these
    // keep a component from multiplying its memories or tables past it, or taking pool
    // slots from other routes. Core instances are a limit (`max_core_instances`).
    fn instances(&self) -> usize {
        self.max_core_instances
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

/// Tables one policy instance may create.
pub(crate) const MAX_TABLES: usize = 2;
/// Linear memories one policy instance may create.
pub(crate) const MAX_MEMORIES: usize = 1;
