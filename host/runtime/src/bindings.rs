//! The host side of the contract's imports: what a policy's store carries, the `host.*`
//! functions of both contracts (0.2's `details` resource, 0.1's free functions about the
//! current failure), and the memory limiter.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Resource};
use wasmtime::{ResourceLimiter, Result};

use crate::failure::Details;
use crate::wasi::{CallInputs, WasiHost, WasiState};

use crate::wit::generated::verdict::policy::host as host_v0_2;
use crate::wit::generated_v0_1::verdict::policy::host as host_v0_1;
use crate::wit::types as wit;
use crate::wit::{Lent, generated, generated_v0_1};

/// Longest log line a policy may write; the rest is cut.
const MAX_LOG_LINE_BYTES: usize = 4 << 10;
/// Log lines one call may write; more are dropped and counted.
const MAX_LOG_LINES_PER_CALL: u32 = 32;
/// `details` handles one instance may hold at a time. A policy needs one; each lives in a
/// table on the host, outside the memory cap, so a policy making them without end must be
/// stopped rather than trusted.
pub(crate) const MAX_DETAILS_HANDLES: u32 = 16;

/// What a store carries for one policy instance.
pub(crate) struct HostState {
    pub(crate) limiter: MemoryLimiter,
    /// The details of the failures being decided, for the call: a 0.2 policy's `details`
    /// methods name one by its index here, and a 0.1 policy's `host.*` functions read the
    /// first. Empty outside `decide` and `decide-batch`.
    pub(crate) lent: Vec<Arc<Details>>,
    /// `details` handles the policy holds (made and not yet dropped).
    details_handles: u32,
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
            lent: Vec::new(),
            details_handles: 0,
            last_panic: None,
            policy,
            wasi: WasiState::default(),
            log_lines: 0,
        }
    }

    /// Reset per-call state and lend the call's failure details.
    pub(crate) fn begin_call(
        &mut self,
        lent: impl IntoIterator<Item = Arc<Details>>,
        inputs: CallInputs,
    ) {
        self.lent.clear();
        self.lent.extend(lent);
        self.log_lines = 0;
        self.last_panic = None;
        self.wasi = WasiState::begin(inputs);
    }

    /// Take back the lent details once the call returns (the panic message stays for the
    /// fault report), and write out what the policy printed without a final newline.
    pub(crate) fn end_call(&mut self) {
        self.lent.clear();
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

    /// What a 0.1 policy's `host.*` functions describe: the one failure of its call.
    fn details(&self) -> Option<&Details> {
        self.lent.first().map(|d| &**d)
    }

    /// The details of the call's `failure`-th failure, for a 0.2 policy. Outside a call, or
    /// at a position past the call's failures, empty values, never a trap.
    fn lent(&self, failure: u32) -> Option<&Details> {
        let index = usize::try_from(failure).ok()?;
        self.lent.get(index).map(|d| &**d)
    }

    /// A panic message the SDK's hook logged: one bounded line kept to explain the trap.
    fn note_panic(&mut self, level: wit::Level, message: &str) {
        if level == wit::Level::Error && message.starts_with("panic: ") {
            // A policy's panic message reaches logs, metrics and envelopes: one bounded line.
            self.last_panic = Some(crate::text::one_line(
                &message["panic: ".len()..],
                crate::text::MAX_MESSAGE_BYTES,
            ));
        }
    }
}

/// Link the `host` interface of every contract this host speaks.
pub(crate) fn add_to_linker(linker: &mut wasmtime::component::Linker<HostState>) -> Result<()> {
    host_v0_2::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    host_v0_1::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)
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
impl generated_v0_1::verdict::policy::types::Host for HostState {}

impl host_v0_2::Host for HostState {
    fn log(&mut self, level: wit::Level, message: String) {
        self.note_panic(level, &message);
        self.policy_log(level, message);
    }
}

impl host_v0_2::HostDetails for HostState {
    /// Every handle reads the same store (its rep carries nothing): the count bounds them.
    fn new(&mut self) -> Result<Resource<Lent>> {
        if self.details_handles >= MAX_DETAILS_HANDLES {
            wasmtime::bail!(
                "the policy holds {MAX_DETAILS_HANDLES} `details` handles and asked for \
                 another: one, kept for every call, is all a policy needs"
            );
        }
        self.details_handles += 1;
        Ok(Resource::new_own(0))
    }

    fn topic(&mut self, _: Resource<Lent>, failure: u32) -> String {
        self.lent(failure).map(topic).unwrap_or_default()
    }

    fn message_id(&mut self, _: Resource<Lent>, failure: u32) -> String {
        self.lent(failure).map(message_id).unwrap_or_default()
    }

    fn consumer_group(&mut self, _: Resource<Lent>, failure: u32) -> String {
        self.lent(failure).map(consumer_group).unwrap_or_default()
    }

    fn error_message(&mut self, _: Resource<Lent>, failure: u32) -> String {
        self.lent(failure).map(error_message).unwrap_or_default()
    }

    fn published_at_ms(&mut self, _: Resource<Lent>, failure: u32) -> Option<u64> {
        self.lent(failure).and_then(|d| d.published_at_ms)
    }

    fn first_failed_at_ms(&mut self, _: Resource<Lent>, failure: u32) -> u64 {
        self.lent(failure).map_or(0, |d| d.first_failed_at_ms)
    }

    fn content_type(&mut self, _: Resource<Lent>, failure: u32) -> Option<String> {
        self.lent(failure).and_then(|d| d.content_type.clone())
    }

    fn payload_size(&mut self, _: Resource<Lent>, failure: u32) -> u32 {
        self.lent(failure).map_or(0, payload_size)
    }

    fn headers(&mut self, _: Resource<Lent>, failure: u32) -> Vec<wit::Header> {
        self.lent(failure)
            .map(|d| headers(d, |name, value| wit::Header { name, value }))
            .unwrap_or_default()
    }

    fn payload(&mut self, _: Resource<Lent>, failure: u32) -> Vec<u8> {
        self.lent(failure)
            .map(|d| d.payload.clone())
            .unwrap_or_default()
    }

    fn history(&mut self, _: Resource<Lent>, failure: u32) -> Vec<wit::AttemptRecord> {
        self.lent(failure)
            .map(|d| {
                history(d, |at_ms, kind, message| wit::AttemptRecord {
                    at_ms,
                    kind,
                    message,
                })
            })
            .unwrap_or_default()
    }

    fn extension(&mut self, _: Resource<Lent>, failure: u32, key: String) -> Option<String> {
        self.lent(failure)
            .and_then(|d| d.extensions.get(&key).cloned())
    }

    /// A handle holds nothing but its place in the count.
    fn drop(&mut self, _: Resource<Lent>) -> Result<()> {
        self.details_handles = self.details_handles.saturating_sub(1);
        Ok(())
    }
}

impl host_v0_1::Host for HostState {
    fn log(&mut self, level: host_v0_1::Level, message: String) {
        let level = match level {
            host_v0_1::Level::Trace => wit::Level::Trace,
            host_v0_1::Level::Debug => wit::Level::Debug,
            host_v0_1::Level::Info => wit::Level::Info,
            host_v0_1::Level::Warn => wit::Level::Warn,
            host_v0_1::Level::Error => wit::Level::Error,
        };
        self.note_panic(level, &message);
        self.policy_log(level, message);
    }

    fn topic(&mut self) -> String {
        self.details().map(topic).unwrap_or_default()
    }

    fn message_id(&mut self) -> String {
        self.details().map(message_id).unwrap_or_default()
    }

    fn consumer_group(&mut self) -> String {
        self.details().map(consumer_group).unwrap_or_default()
    }

    fn error_message(&mut self) -> String {
        self.details().map(error_message).unwrap_or_default()
    }

    fn published_at_ms(&mut self) -> Option<u64> {
        self.details().and_then(|d| d.published_at_ms)
    }

    fn payload_size(&mut self) -> u32 {
        self.details().map_or(0, payload_size)
    }

    fn content_type(&mut self) -> Option<String> {
        self.details().and_then(|d| d.content_type.clone())
    }

    fn headers(&mut self) -> Vec<host_v0_1::Header> {
        self.details()
            .map(|d| headers(d, |name, value| host_v0_1::Header { name, value }))
            .unwrap_or_default()
    }

    fn payload(&mut self) -> Vec<u8> {
        self.details()
            .map(|d| d.payload.clone())
            .unwrap_or_default()
    }

    fn history(&mut self) -> Vec<host_v0_1::AttemptRecord> {
        self.details()
            .map(|d| {
                history(d, |at_ms, kind, message| host_v0_1::AttemptRecord {
                    at_ms,
                    kind,
                    message,
                })
            })
            .unwrap_or_default()
    }

    fn extension(&mut self, key: String) -> Option<String> {
        self.details().and_then(|d| d.extensions.get(&key).cloned())
    }
}

// What both contracts answer, written once: the two differ only in how a policy names the
// failure (a handle, or "the current one") and in their generated record types.

fn topic(d: &Details) -> String {
    d.topic.clone()
}

fn message_id(d: &Details) -> String {
    d.message_id.clone()
}

fn consumer_group(d: &Details) -> String {
    d.consumer_group.clone()
}

fn error_message(d: &Details) -> String {
    d.error_message.clone()
}

fn payload_size(d: &Details) -> u32 {
    u32::try_from(d.payload.len()).unwrap_or(u32::MAX)
}

fn headers<H>(d: &Details, header: impl Fn(String, String) -> H) -> Vec<H> {
    d.headers
        .iter()
        .map(|(name, value)| header(name.clone(), value.clone()))
        .collect()
}

fn history<A>(d: &Details, record: impl Fn(u64, String, String) -> A) -> Vec<A> {
    d.history
        .iter()
        .map(|a| record(a.at_ms, a.kind.clone(), a.message.clone()))
        .collect()
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
