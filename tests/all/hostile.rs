//! A misbehaving policy is contained: each case yields the fallback verdict with its cause,
//! within bounded time, while another topic's policy keeps deciding correctly.

use std::time::{Duration, Instant};

use verdict_runtime::{
    Action, Clamp, Class, ConfigError, Decision, Fault, Host, Limits, TopicSettings,
};
use verdict_tests::{at, decider, fixtures, host, load, with_bystander};

/// Generous bound for "did not hang": deadline plus scheduling noise on a busy 2-core CI.
const HANG: Duration = Duration::from_secs(10);
/// Deadline for the cases that are not about time: long enough that a loaded machine never
/// turns a memory bomb or a panic into a timeout, and still a bound if one hangs.
const PATIENT_MS: u64 = 3_000;

fn hostile_decision(mode: &str) -> Decision {
    hostile_decision_within(mode, PATIENT_MS)
}

fn hostile_decision_within(mode: &str, decide_timeout_ms: u64) -> Decision {
    hostile_decision_on(mode, decide_timeout_ms, &at("db.timeout", 1))
}

/// The hostile guest in `mode` deciding `failure` twice beside a well-behaved bystander:
/// each call ends within [`HANG`], and the second is contained the same way as the first.
fn hostile_decision_on(
    mode: &str,
    decide_timeout_ms: u64,
    failure: &verdict_runtime::Failure,
) -> Decision {
    let mut limits = Limits::new();
    limits.decide_timeout_ms(decide_timeout_ms);
    let host = Host::new(&limits).unwrap();
    let topic = decider(
        &host,
        fixtures::HOSTILE,
        &format!(r#"{{"mode": "{mode}"}}"#),
    );
    with_bystander(|| {
        let started = Instant::now();
        let d = topic.decide(failure);
        assert!(
            started.elapsed() < HANG,
            "{mode}: took {:?}",
            started.elapsed()
        );
        eprintln!("{mode}: {:?} after {:?}", d.fallback, started.elapsed());
        // The topic stays usable: the next decision is contained the same way.
        let again = topic.decide(failure);
        assert_eq!(
            d.fallback.is_some(),
            again.fallback.is_some(),
            "{mode}: second call differs: {again:?}"
        );
        d
    })
}

fn assert_fallback_retry(d: &Decision) {
    assert!(
        matches!(d.verdict.action, Action::Retry(ms) if ms <= 60_000),
        "{d:?}"
    );
    assert_eq!(d.verdict.class, Class::Unknown);
    assert!(
        d.verdict.labels.iter().any(|(k, _)| k == "fallback"),
        "{d:?}"
    );
}

#[test]
fn endless_loop_times_out_into_the_fallback() {
    let d = hostile_decision_within("loop", 50);
    assert_eq!(d.fallback, Some(Fault::Timeout { limit_ms: 50 }));
    assert_fallback_retry(&d);
}

#[test]
fn memory_bomb_hits_the_cap_into_the_fallback() {
    let d = hostile_decision("oom");
    assert!(
        matches!(d.fallback, Some(Fault::MemoryCap { cap_bytes: 16_777_216, requested_bytes }) if requested_bytes > 16_777_216),
        "{d:?}"
    );
    assert_fallback_retry(&d);
}

#[test]
fn panic_is_reported_with_its_message() {
    let d = hostile_decision("panic");
    match &d.fallback {
        Some(Fault::Panic { message }) => assert!(
            message.contains("hostile policy panics on db.timeout"),
            "{message}"
        ),
        other => panic!("expected a panic fault, got {other:?}"),
    }
    assert_fallback_retry(&d);
}

#[test]
fn deep_recursion_traps_into_the_fallback() {
    let d = hostile_decision("recurse");
    assert!(matches!(&d.fallback, Some(Fault::Trap { .. })), "{d:?}");
    assert_fallback_retry(&d);
}

#[test]
fn gigantic_reason_and_label_list_are_truncated() {
    let d = hostile_decision("huge-reason");
    assert!(d.fallback.is_none(), "{:?}", d.fallback);
    assert_eq!(d.verdict.reason.len(), 1_024);
    assert!(
        d.clamps
            .contains(&Clamp::ReasonTruncated { bytes: 4 << 20 })
    );
    let d = hostile_decision("many-labels");
    assert_eq!(d.verdict.labels.len(), 16);
    assert!(d.clamps.contains(&Clamp::LabelsTruncated { count: 10_000 }));
}

#[test]
fn delay_past_the_cap_is_clamped() {
    let d = hostile_decision("past-the-cap");
    assert_eq!(d.verdict.action, Action::Retry(6 * 3_600_000));
    assert!(
        matches!(
            d.clamps[..],
            [Clamp::DelayCapped {
                requested_ms: u64::MAX,
                ..
            }]
        ),
        "{:?}",
        d.clamps
    );
}

#[test]
fn retry_past_the_attempt_ceiling_is_exhausted() {
    let host = host();
    let topic = decider(&host, fixtures::HOSTILE, r#"{"mode": "ok"}"#);
    let d = with_bystander(|| topic.decide(&at("db.timeout", 32)));
    assert_eq!(
        (d.verdict.action, d.verdict.class),
        (Action::DeadLetter, Class::Exhausted)
    );
    assert_eq!(d.clamps, [Clamp::AttemptCeiling { max_attempts: 32 }]);
}

#[test]
fn init_that_rejects_its_config_is_a_config_error_naming_the_field() {
    let host = host();
    let err = with_bystander(|| {
        load(&host, fixtures::HOSTILE)
            .configure(r#"{"mode": "reject-init"}"#, TopicSettings::default())
            .unwrap_err()
    });
    assert!(
        matches!(&err, ConfigError::Rejected { policy, message } if policy == "hostile" && message.contains("config.mode")),
        "{err}"
    );
}

#[test]
fn trap_in_init_is_a_config_error_with_the_panic() {
    let host = host();
    let err = with_bystander(|| {
        load(&host, fixtures::HOSTILE)
            .configure(r#"{"mode": "trap-in-init"}"#, TopicSettings::default())
            .unwrap_err()
    });
    match err {
        ConfigError::InitFault {
            fault: Fault::Panic { message },
            ..
        } => assert!(message.contains("trap-in-init"), "{message}"),
        other => panic!("expected an init panic, got {other}"),
    }
}

/// A failure whose on-demand facts are large: a 64 KiB payload, 8 earlier attempts with
/// 1 KiB messages.
fn bulky_failure() -> verdict_runtime::Failure {
    let history: Vec<_> = (0..8)
        .map(|i| serde_json::json!({"at-ms": i, "kind": "db.timeout", "message": "m".repeat(1 << 10)}))
        .collect();
    verdict_tests::failure(serde_json::json!({
        "message-id": "m-1", "attempt": 1, "jitter-seed": 7,
        "error": {"kind": "db.timeout"},
        "payload": "p".repeat(64 << 10),
        "history": history,
    }))
}

fn storm(mode: &str, decide_timeout_ms: u64) -> Decision {
    hostile_decision_on(mode, decide_timeout_ms, &bulky_failure())
}

/// Each `host.payload()` copies 64 KiB out of the failure and into the guest's memory, and
/// the host frees its copy as the call returns; the guest drops its own at once, so neither
/// side's memory grows and only time does: the deadline ends it.
#[test]
fn a_million_payload_fetches_in_one_decision_time_out_into_the_fallback() {
    let d = storm("payload-storm", 50);
    assert_eq!(d.fallback, Some(Fault::Timeout { limit_ms: 50 }), "{d:?}");
    assert_fallback_retry(&d);
}

/// Each `host.history()` copy lands in the guest's memory (the host keeps none): kept, they
/// hit the policy's memory cap long before a million.
#[test]
fn a_million_history_copies_kept_in_one_decision_hit_the_memory_cap() {
    let d = storm("history-storm", PATIENT_MS);
    assert!(
        matches!(d.fallback, Some(Fault::MemoryCap { cap_bytes: 16_777_216, requested_bytes }) if requested_bytes > 16_777_216),
        "{d:?}"
    );
    assert_fallback_retry(&d);
}
