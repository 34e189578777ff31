//! Shared helpers for Verdict's integration tests: the components `build.rs` compiled, a
//! host, and shorthands for deciders and failures.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use verdict_runtime::{
    Action, Class, Decider, Failure, FailureSpec, Host, Limits, Policy, TopicSettings,
};

/// Paths of the components built from source by `build.rs`.
pub mod fixtures {
    include!(concat!(env!("OUT_DIR"), "/fixtures.rs"));

    /// A vector file of the `rules` policy (`policies/rules/vectors/<file>`).
    pub fn rules_vectors(file: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../policies/rules/vectors")
            .join(file)
    }

    /// The `rules` policy's config most gateway tests route with: schema, JSON, format and
    /// auth failures dead-lettered as poison, 5xx and transport failures retried every
    /// 20 ms, eight attempts.
    pub const RULES_CONFIG: &str = r#"{ max_attempts = 8, rules = [
    { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
    { match = ["http.5*", "transport.*"], retry = { strategy = "fixed", delay_ms = 20 } },
] }"#;

    /// A hand-written or deliberately broken fixture under `tests/fixtures/`.
    pub fn file(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(name)
    }
}

/// A host with the default limits but a 1 s decide deadline: CI machines are loaded, and a
/// descheduled thread must not turn a correct decision into a timeout fallback. The
/// deadline itself is tested on purpose in `hostile.rs`.
pub fn host() -> Host {
    Host::new(Limits::new().decide_timeout_ms(1_000)).expect("limits are valid")
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

/// Run `hostile` while a `rules` topic decides on another thread, and assert that topic
/// kept giving correct verdicts throughout (at least one, every one checked).
pub fn with_bystander<T>(hostile: impl FnOnce() -> T) -> T {
    let host = host();
    let bystander = decider(&host, fixtures::RULES, r#"{"max_attempts": 3}"#);
    let done = AtomicBool::new(false);
    let decided = AtomicU32::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) || decided.load(Ordering::Relaxed) == 0 {
                let d = bystander.decide(&at("db.timeout", 3));
                assert_eq!(
                    (d.verdict.action, d.verdict.class),
                    (Action::DeadLetter, Class::Exhausted)
                );
                assert!(d.fallback.is_none());
                decided.fetch_add(1, Ordering::Relaxed);
                // Leave the CPU to the hostile call: this is a witness, not a load test.
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let out = hostile();
        done.store(true, Ordering::Relaxed);
        out
    })
}

/// A fresh directory under the system temp dir, unique to this process and `name`.
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("verdict-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a scratch dir");
    dir
}

/// A copy of the component at `path` with a custom section named `tag` appended: the same
/// policy, different bytes (a new sha256) - a second "version" to reload to and from.
pub fn variant(path: &str, tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut bytes = std::fs::read(path).expect("reading a fixture");
    let mut section = Vec::new();
    leb(tag.len(), &mut section);
    section.extend_from_slice(tag.as_bytes());
    bytes.push(0); // custom section id
    leb(section.len(), &mut bytes);
    bytes.extend_from_slice(&section);
    bytes
}

/// Poll `check` every 100 ms until it holds or `limit` passes; whether it held.
pub fn wait_for(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    check()
}

pub mod api;
pub mod conformance;
pub mod consumer;
pub mod gateway;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod nats;
pub mod otlp;
pub mod rabbitmq;
pub mod scripted;
