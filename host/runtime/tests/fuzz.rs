//! Fuzz and property targets of the runtime's inputs from outside: failure JSON, and the
//! bytes of an uploaded component. Cases per target: `VERDICT_FUZZ_CASES` (see the
//! `verdict-fuzz` crate).

use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::Value;
use verdict_fuzz::*;
use verdict_runtime::{FailureSpec, Host, Limits};

// ---------------------------------------------------------------------------------------
// 3. Failure JSON (`verdict decide`, `POST /v1/decide`, vector files).

fn failure_seeds() -> Vec<String> {
    vec![
        r#"{"topic": "payments", "message-id": "m-1", "attempt": 2, "error": {"kind": "db.timeout", "message": "dial tcp: i/o timeout", "retry-after-ms": 500}, "payload": {"amount": 12}, "history": [{"at-ms": 1, "kind": "http.503"}], "headers": {"a": "b"}, "stats": {"window-ms": 60000, "failures": 3}}"#.into(),
        r#"{"error": {"kind": "x"}}"#.into(),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// `FailureSpec::from_json`: never panics; an error names the field of the wrong type
    /// (or the unknown field); what parses was one JSON object with an `error.kind`, and
    /// freezes into a failure with the documented defaults (attempt 1, a seed derived from
    /// the id and attempt) whose age never overflows.
    #[test]
    fn failure_json((text, expect) in json_document(FAILURE_SPEC, failure_seeds())) {
        match FailureSpec::from_json(&text) {
            Ok(spec) => {
                prop_assert!(!matches!(expect, Expect::WrongField(_) | Expect::UnknownField), "accepted: {text}");
                let doc: Value = serde_json::from_str(&text).expect("one JSON document");
                prop_assert!(doc["error"]["kind"].is_string());
                let failure = spec.clone().into_failure();
                prop_assert_eq!(failure.attempt(), doc.get("attempt").and_then(Value::as_u64).unwrap_or(1) as u32);
                prop_assert_eq!(failure.kind(), spec.error.kind.as_str());
                let seed = spec.jitter_seed.unwrap_or_else(|| verdict_runtime::jitter_seed(&spec.message_id, spec.attempt));
                prop_assert_eq!(failure.jitter_seed(), seed);
                let _ = failure.age_ms();
            }
            Err(e) => {
                prop_assert!(!e.is_empty());
                match &expect {
                    Expect::WrongField(field) => prop_assert!(e.starts_with(field.as_str()), "want {field}, got {e}"),
                    Expect::UnknownField => prop_assert!(e.contains("unknown field"), "{e}"),
                    Expect::Anything => {}
                }
            }
        }
    }
}

/// A host for the upload target, made once.
fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| Host::new(&Limits::new()).expect("a host"))
}

fn component_seeds() -> Vec<Vec<u8>> {
    vec![
        wat::parse_str("(component)").expect("wat"),
        wat::parse_str("(module)").expect("wat"),
        wat::parse_str(r#"(component (core module (func (export "f"))))"#).expect("wat"),
        wat::parse_str(r#"(component (import "verdict:policy/host@0.1.0" (instance)))"#)
            .expect("wat"),
    ]
}

proptest! {
    #![proptest_config(config_tenth())]

    /// `PUT /v1/policies/{name}/component` (`Host::load_bytes`, what an upload runs first):
    /// any bytes, or a mutated small component or module, are refused with an error that
    /// names the upload, never loaded and never a panic.
    #[test]
    fn admin_upload_component(bytes in prop_oneof![
        1 => any_bytes(),
        2 => (prop::sample::select(component_seeds()), edits(&["\0asm", "\r\n", "\x0d\0\x01\0", "\x01\0\0\0", "\x00", "\u{ff}"]))
            .prop_map(|(seed, e)| mutate(&seed, &e)),
        1 => prop::sample::select(component_seeds()),
    ]) {
        match host().load_bytes(&bytes, "upload.wasm") {
            Ok(policy) => prop_assert!(false, "loaded {:?}", policy),
            Err(e) => {
                let shown = e.to_string();
                prop_assert!(shown.contains("upload.wasm"), "{shown}");
            }
        }
    }
}
