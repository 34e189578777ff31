//! Errors, one type per boundary: loading a component, configuring a policy for a topic,
//! and the faults a decision can hit (which never escape `decide`: they pick the fallback).

use std::path::PathBuf;

/// Why a component could not be loaded as a policy.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Reading the file failed.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Zero bytes.
    #[error("{origin}: empty file, expected a WebAssembly component")]
    Empty {
        /// Where the bytes came from.
        origin: String,
    },
    /// Not WebAssembly at all.
    #[error("{origin}: not WebAssembly (no \\0asm header), expected a component")]
    NotWasm {
        /// Where the bytes came from.
        origin: String,
    },
    /// A core module where a component was expected.
    #[error(
        "{origin}: a core WebAssembly module, not a component; build policies with `verdict build`"
    )]
    CoreModule {
        /// Where the bytes came from.
        origin: String,
    },
    /// Past one of the sandbox's static bounds (size, functions, blocks, memory), found by a
    /// scan before compiling: what would have cost the compiler seconds costs milliseconds.
    #[error("{origin}: {what}: {value}, past sandbox.{limit} = {max} (refused before compiling)")]
    Bound {
        /// Where the bytes came from.
        origin: String,
        /// What was measured, and where.
        what: String,
        /// Its value.
        value: u64,
        /// The `[sandbox]` setting it is past.
        limit: &'static str,
        /// The setting's value.
        max: u64,
    },
    /// Wasmtime could not compile it (truncated, corrupt, unsupported feature).
    #[error("{origin}: invalid component: {message}")]
    Compile {
        /// Where the bytes came from.
        origin: String,
        /// What the compiler said.
        message: String,
    },
    /// It imports something outside the contract.
    #[error(
        "{origin}: imports `{import}`, which is outside the verdict:policy contract (a policy may import only verdict:policy/host and verdict:policy/types, version {supported}, and the WASI 0.2 interfaces Verdict stubs deterministically){}",
        wasi_hint(import)
    )]
    ForeignImport {
        /// Where the bytes came from.
        origin: String,
        /// The offending import.
        import: String,
        /// The versions this host supports.
        supported: &'static str,
    },
    /// It does not export the decider interface.
    #[error(
        "{origin}: does not export verdict:policy/decider (exports: {exports}); a Rust policy exports it with `verdict_sdk::export_policy!(YourPolicy);` in its lib.rs"
    )]
    MissingExport {
        /// Where the bytes came from.
        origin: String,
        /// What it does export.
        exports: String,
    },
    /// It implements a contract version this host does not speak.
    #[error("{origin}: implements {found}, but this host supports verdict:policy@{supported}")]
    WrongVersion {
        /// Where the bytes came from.
        origin: String,
        /// The interface and version found.
        found: String,
        /// The versions this host supports.
        supported: &'static str,
    },
    /// It imports one contract version and exports another.
    #[error(
        "{origin}: imports `{import}` but exports {contract}; a component speaks one contract version (rebuild it with one SDK)"
    )]
    MixedContracts {
        /// Where the bytes came from.
        origin: String,
        /// The import of the other version.
        import: String,
        /// The contract its decider export speaks.
        contract: crate::Contract,
    },
    /// Its imports or exports do not have the contract's types.
    #[error("{origin}: does not match the verdict:policy contract: {message}")]
    Link {
        /// Where the bytes came from.
        origin: String,
        /// What the linker said.
        message: String,
    },
    /// The first instance could not be made (a start function that traps, a component past
    /// the per-policy memory, table or instance limits), before any call.
    #[error("{origin}: {fault}")]
    Instantiate {
        /// Where the bytes came from.
        origin: String,
        /// What went wrong (a [`Fault::Instantiate`]).
        fault: Fault,
    },
    /// `describe` (called once at load) failed.
    #[error("{origin}: `describe` failed: {fault}")]
    Describe {
        /// Where the bytes came from.
        origin: String,
        /// What went wrong.
        fault: Fault,
    },
}

/// Why a policy could not be configured for a topic, or the host limits are invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A host limit is out of range.
    #[error("{field}: {message}")]
    InvalidLimit {
        /// The setting.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The policy's `init` refused the config.
    #[error("policy `{policy}` refused its config: {message}")]
    Rejected {
        /// The policy's name.
        policy: String,
        /// The policy's explanation (names the field).
        message: String,
    },
    /// `init` trapped, timed out or ran out of memory.
    #[error("policy `{policy}` failed in init: {fault}")]
    InitFault {
        /// The policy's name.
        policy: String,
        /// What went wrong.
        fault: Fault,
    },
    /// The engine could not be created.
    #[error("engine: {0}")]
    Engine(String),
}

/// What went wrong inside a policy call. A decision that hits one of these uses the
/// topic's fallback verdict and carries the fault.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum Fault {
    /// The call ran past its wall-clock deadline (an endless loop, say).
    #[error("timed out after {limit_ms} ms")]
    Timeout {
        /// The deadline.
        limit_ms: u64,
    },
    /// The call used up its fuel budget.
    #[error("ran out of fuel ({fuel} units)")]
    OutOfFuel {
        /// The budget.
        fuel: u64,
    },
    /// The policy tried to grow its memory past the cap.
    #[error("tried to grow memory to {requested_bytes} bytes, past the {cap_bytes}-byte cap")]
    MemoryCap {
        /// The cap.
        cap_bytes: usize,
        /// What it asked for.
        requested_bytes: usize,
    },
    /// The policy panicked (the message comes from the SDK's panic hook).
    #[error("panicked: {message}")]
    Panic {
        /// The panic message.
        message: String,
    },
    /// Any other trap: stack overflow, unreachable, out-of-bounds access, invalid result.
    #[error("trapped: {message}")]
    Trap {
        /// The trap.
        message: String,
    },
    /// A fresh instance could not be created.
    #[error("could not instantiate: {message}")]
    Instantiate {
        /// Why.
        message: String,
    },
}

/// What to do about a WASI import: it comes from building for a WASI target, whose standard
/// library imports the system interfaces the sandbox does not grant.
fn wasi_hint(import: &str) -> &'static str {
    if !import.starts_with("wasi:") {
        ""
    } else if crate::wasi::describe(import).is_some() {
        "; Verdict stubs this interface at version 0.2.x only: build with a toolchain that \
         targets WASI 0.2 (`verdict build` does)"
    } else {
        "; Verdict links only deterministic stubs of wasi:cli, wasi:clocks, wasi:random, \
         wasi:io, wasi:filesystem and wasi:sockets, each granting nothing, so a policy cannot \
         make requests or serve anything (a Rust policy built by `verdict build` imports no \
         WASI at all)"
    }
}
