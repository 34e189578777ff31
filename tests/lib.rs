//! Shared helpers for Verdict's integration tests: the components `build.rs` compiled, a
//! host, and shorthands for deciders and failures.

use std::sync::Arc;

use verdict_host::{Decider, Failure, FailureSpec, Host, Limits, Policy, TopicSettings};

/// Paths of the components built from source by `build.rs`.
pub mod fixtures {
    include!(concat!(env!("OUT_DIR"), "/fixtures.rs"));

    /// A hand-written or deliberately broken fixture under `tests/fixtures/`.
    pub fn file(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(name)
    }
}

/// A host with the default limits.
pub fn host() -> Host {
    Host::new(&Limits::new()).expect("default limits are valid")
}

/// Load a component.
pub fn load(host: &Host, path: &str) -> Arc<Policy> {
    host.load_file(path.as_ref())
        .unwrap_or_else(|e| panic!("loading {path}: {e}"))
}

/// Load a component and configure it with default topic settings.
pub fn decider(host: &Host, path: &str, config: &str) -> Decider {
    load(host, path)
        .configure(config, TopicSettings::default())
        .unwrap_or_else(|e| panic!("configuring {path}: {e}"))
}

/// A failure from JSON in the contract's field names.
pub fn failure(json: serde_json::Value) -> Failure {
    FailureSpec::from_json(&json.to_string())
        .expect("test failure JSON is valid")
        .into_failure()
}

/// A failure of `kind` at `attempt` with a fixed seed.
pub fn at(kind: &str, attempt: u32) -> Failure {
    failure(
        serde_json::json!({"message-id": "m-1", "attempt": attempt, "jitter-seed": 7, "error": {"kind": kind}}),
    )
}
