//! Two contract versions in one host: a component built for `verdict:policy@0.1` (the
//! `rules` crate with the previous SDK glue) gives the verdicts its 0.2 build gives, a 0.2
//! policy answers a batch exactly as it answers each failure alone - each with its own
//! details, a fault costing only the failure that caused it - and one gateway routes topics
//! to both with the same outcome.

use serde_json::json;
use verdict_gateway::store::DlqFilter;
use verdict_runtime::{Contract, Decision, Failure};
use verdict_tests::consumer::Consumer;
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{failure, fixtures, host, scratch_dir};

use crate::gateway::RULES_CONFIG;
use crate::languages::{behaviour, publish_and_settle};

/// Failures across the `rules` table: every kind family, attempts past the limit, a
/// Retry-After, deferrals, expired and live deadlines, many jitter seeds - 72 of them, more
/// than one batch.
fn sweep() -> Vec<Failure> {
    let kinds = [
        "db.timeout",
        "http.503",
        "http.429",
        "json.parse",
        "schema.unknown-version",
        "auth.denied",
        "transport.refused",
        "no.such.kind",
    ];
    let mut failures = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        for attempt in 1..=9u32 {
            let n = (k as u64) * 10 + u64::from(attempt);
            let mut spec = json!({
                "topic": format!("orders.{k}"),
                "message-id": format!("m-{n}"),
                "attempt": attempt,
                "deferrals": attempt % 3,
                "first-failed-at-ms": 1_000_000,
                "now-ms": 1_000_000 + n * 1_000,
                "jitter-seed": n * 7_919,
                "error": {"kind": kind, "message": format!("failure {n}")},
            });
            if attempt == 2 {
                spec["error"]["retry-after-ms"] = json!(4_500);
            }
            if attempt == 4 {
                spec["deadline-ms"] = json!(1_000_000 + n * 500);
            }
            failures.push(failure(spec));
        }
    }
    failures
}

/// What a decision says, without where it came from (the two builds differ in digest).
fn answer(d: &Decision) -> String {
    assert!(d.fallback.is_none(), "no fault: {:?}", d.fallback);
    format!("{:?}", d.verdict)
}

#[test]
fn a_0_1_component_gives_the_verdicts_of_its_0_2_build_batched_or_not() {
    let host = host();
    let current = host.load_file(fixtures::RULES.as_ref()).unwrap();
    let previous = host.load_file(fixtures::RULES_V0_1.as_ref()).unwrap();
    assert_eq!(current.contract(), Contract::V0_2);
    assert_eq!(previous.contract(), Contract::V0_1);
    assert_eq!(previous.exports(), ["verdict:policy/decider@0.1.0"]);
    assert_eq!(current.exports(), ["verdict:policy/decider@0.2.0"]);
    assert_eq!(
        (&previous.provenance().name, &current.provenance().name),
        (&"rules".to_string(), &"rules".to_string())
    );
    let config = r#"{"max_attempts": 4}"#;
    let new = current.configure(config, Default::default()).unwrap();
    let old = previous.configure(config, Default::default()).unwrap();
    let failures = sweep();
    let alone: Vec<String> = failures.iter().map(|f| answer(&new.decide(f))).collect();
    let old_alone: Vec<String> = failures.iter().map(|f| answer(&old.decide(f))).collect();
    assert_eq!(
        old_alone, alone,
        "0.1 and 0.2 builds agree on every failure"
    );
    // Batched: one call per 64 failures on 0.2, one call per failure on 0.1 - the same
    // answers, in order.
    let batched: Vec<String> = new.decide_batch(&failures).iter().map(answer).collect();
    assert_eq!(batched, alone, "a batch answers as each failure alone");
    let old_batched: Vec<String> = old.decide_batch(&failures).iter().map(answer).collect();
    assert_eq!(old_batched, alone);
    assert!(
        failures.len() > 64,
        "the sweep spans more than one batch ({})",
        failures.len()
    );
    // The sweep exercises both actions the table has, so agreement is not vacuous.
    for action in ["Retry", "DeadLetter"] {
        assert!(
            alone.iter().any(|a| a.contains(action)),
            "{action} in {alone:#?}"
        );
    }
}

/// A batch of failures with distinct details, as the hostile `echo` mode reports them.
fn distinct_details(n: usize) -> Vec<Failure> {
    (0..n)
        .map(|i| {
            let kind = if i == 3 {
                "hostile.panic"
            } else {
                "db.timeout"
            };
            failure(json!({
                "topic": format!("t.{i}"),
                "message-id": format!("id-{i}"),
                "consumer-group": format!("g-{i}"),
                "attempt": 1 + i % 4,
                "now-ms": 2_000 + i,
                "error": {"kind": kind, "message": format!("error {i}")},
                "payload": format!("payload {i}"),
                "headers": {"X-Trace": format!("trace-{i}")},
                "history": [{"at-ms": 1, "kind": format!("k{i}"), "message": "earlier"}],
                "extensions": {"source": format!("src-{i}")},
            }))
        })
        .collect()
}

fn label<'a>(d: &'a Decision, key: &str) -> &'a str {
    d.verdict
        .labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no label {key}: {:?}", d.verdict))
}

#[test]
fn each_failure_of_a_batch_reads_its_own_details_through_its_handle() {
    let host = host();
    let hostile = host.load_file(fixtures::HOSTILE.as_ref()).unwrap();
    assert_eq!(hostile.contract(), Contract::V0_2);
    let echo = hostile
        .configure(r#"{"mode": "echo"}"#, Default::default())
        .unwrap();
    let failures = distinct_details(9);
    let decisions = echo.decide_batch(&failures);
    assert_eq!(decisions.len(), failures.len());
    for (i, d) in decisions.iter().enumerate() {
        assert!(d.fallback.is_none(), "{i}: {:?}", d.fallback);
        assert_eq!(label(d, "topic"), format!("t.{i}"));
        assert_eq!(label(d, "message-id"), format!("id-{i}"));
        assert_eq!(label(d, "consumer-group"), format!("g-{i}"));
        assert_eq!(label(d, "error-message"), format!("error {i}"));
        assert_eq!(label(d, "payload"), format!("payload {i}"));
        assert_eq!(
            label(d, "payload-size"),
            format!("payload {i}").len().to_string()
        );
        assert_eq!(label(d, "header"), format!("trace-{i}"));
        assert_eq!(label(d, "history"), format!("k{i}"));
        assert_eq!(label(d, "ext-source"), format!("src-{i}"));
        assert_eq!(label(d, "ext-unknown"), "None");
    }
    // A reason given is lifted as given; none given reads as empty.
    assert_eq!(decisions[0].verdict.reason, "");
}

#[test]
fn a_fault_in_a_batch_costs_only_the_failure_that_caused_it() {
    let host = host();
    let hostile = host.load_file(fixtures::HOSTILE.as_ref()).unwrap();
    let decider = hostile
        .configure(r#"{"mode": "panic-on-kind"}"#, Default::default())
        .unwrap();
    let failures = distinct_details(6);
    let decisions = decider.decide_batch(&failures);
    for (i, d) in decisions.iter().enumerate() {
        if i == 3 {
            let fault = d.fallback.as_ref().expect("failure 3 faults");
            assert!(
                fault.to_string().contains("hostile.panic"),
                "the panic message names the kind: {fault}"
            );
        } else {
            assert!(d.fallback.is_none(), "{i} decided by the policy: {d:?}");
            assert_eq!(label(d, "message-id"), format!("id-{i}"));
        }
    }
    // The counters saw one decision per failure, one of them a fault.
    let stats = decider.stats();
    assert_eq!(stats.decisions, 6, "{stats:?}");
    assert_eq!(stats.faults, 1, "{stats:?}");
}

/// A policy whose `decide-batch` answers too few or too many verdicts gets no batch
/// answer applied: each failure is decided again alone (reason `alone`, the batch's would
/// say `batch`), none of them a fault.
#[test]
fn a_batch_answered_with_the_wrong_number_of_verdicts_is_decided_again_one_by_one() {
    let host = host();
    let liar = host.load_file(fixtures::BATCH_LIAR.as_ref()).unwrap();
    assert_eq!(liar.contract(), Contract::V0_2);
    for mode in ["short", "long"] {
        let decider = liar.configure(mode, Default::default()).unwrap();
        let failures = distinct_details(5);
        let decisions = decider.decide_batch(&failures);
        assert_eq!(decisions.len(), 5, "{mode}");
        for d in &decisions {
            assert!(d.fallback.is_none(), "{mode}: {d:?}");
            assert_eq!(d.verdict.reason, "alone", "{mode}: {d:?}");
        }
        let stats = decider.stats();
        assert_eq!((stats.decisions, stats.faults), (5, 0), "{mode}: {stats:?}");
    }
    // Its config is checked like any policy's.
    let refused = liar.configure("sideways", Default::default()).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("expected `short`, `long`, `past-the-end`, `hoard-handles` or"),
        "{refused}"
    );
}

/// `details` asked about a position no failure of the call holds answer empty values - no
/// trap, no other failure's data - through a handle made outside any call (in `init`) and
/// kept, as the SDKs keep theirs.
#[test]
fn details_asked_past_the_batch_answer_nothing() {
    let host = host();
    let liar = host.load_file(fixtures::BATCH_LIAR.as_ref()).unwrap();
    let decider = liar.configure("past-the-end", Default::default()).unwrap();
    let decisions = decider.decide_batch(&distinct_details(4));
    assert_eq!(decisions.len(), 4);
    for d in &decisions {
        assert!(d.fallback.is_none(), "{d:?}");
        assert_eq!(
            d.verdict.reason,
            "texts=0 payload=0 payload-size=0 headers=0 history=0 published=None \
             content-type=None extension=None"
        );
    }
}

/// A policy that makes `details` handles and never drops them is stopped at the bound: the
/// call faults with a message that says what happened, the fallback decides, and the
/// instance holding the handles is dropped (the next call starts with none).
#[test]
fn a_policy_hoarding_details_handles_faults_at_the_bound() {
    let host = host();
    let liar = host.load_file(fixtures::BATCH_LIAR.as_ref()).unwrap();
    let decider = liar.configure("hoard-handles", Default::default()).unwrap();
    // `init` made one; each decision makes one more: the 16th decision asks for the 17th.
    let failures = distinct_details(1);
    for n in 1..16 {
        let d = decider.decide(&failures[0]);
        assert!(
            d.fallback.is_none(),
            "decision {n} holds {} handles: {d:?}",
            n + 1
        );
    }
    let d = decider.decide(&failures[0]);
    let fault = d.fallback.as_ref().expect("the 17th handle is refused");
    assert!(
        fault.to_string().contains("16 `details` handles"),
        "the fault names the bound: {fault}"
    );
    // The faulted instance went with its handles: the next decision, on a fresh one, holds
    // two.
    let d = decider.decide(&failures[0]);
    assert!(d.fallback.is_none(), "{d:?}");
    assert_eq!(d.verdict.reason, "alone");
    // A batch asks for one handle per failure at once: 20 are refused, and its failures
    // are decided again one by one, so each still gets a verdict of its own.
    let decisions = decider.decide_batch(&distinct_details(20));
    assert_eq!(decisions.len(), 20);
    assert!(
        decisions.iter().any(|d| d.verdict.reason == "alone"),
        "{decisions:?}"
    );
}

/// A policy that makes a `details` handle and drops it, call after call, never reaches the
/// bound: a dropped handle gives its place back.
#[test]
fn details_handles_dropped_free_their_place() {
    let host = host();
    let liar = host.load_file(fixtures::BATCH_LIAR.as_ref()).unwrap();
    let decider = liar.configure("churn-handles", Default::default()).unwrap();
    let failures = distinct_details(1);
    for n in 0..40 {
        let d = decider.decide(&failures[0]);
        assert!(d.fallback.is_none(), "decision {n}: {d:?}");
    }
    let decisions = decider.decide_batch(&distinct_details(20));
    assert!(
        decisions
            .iter()
            .all(|d| d.fallback.is_none() && d.verdict.reason == "batch"),
        "{decisions:?}"
    );
}

#[test]
fn one_gateway_runs_a_0_1_and_a_0_2_policy_with_the_same_outcome() {
    let dir = scratch_dir("gateway-contracts");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, behaviour);
    let mut config = TestConfig::new()
        .set("gateway.instance", "gw-contracts")
        .policy("rules", fixtures::RULES)
        .policy("rules_v0_1", fixtures::RULES_V0_1);
    for (topic, policy) in [("orders.v02", "rules"), ("orders.v01", "rules_v0_1")] {
        config = config.route(
            Route::new(topic, policy)
                .config(RULES_CONFIG)
                .consumer(&consumer.url()),
        );
    }
    let gw = Gateway::start_on(runtime, &dir, &config.text(), "unused");
    const N: u32 = 60;
    publish_and_settle(&gw, &["v02", "v01"], N);
    let dead = gw.store.dlq_list(&DlqFilter::default(), u64::MAX).unwrap();
    let (deliveries, accepted) = consumer.snapshot();
    let outcome = |v: &str| {
        let mut letters: Vec<(String, String, u32)> = dead
            .iter()
            .filter(|e| e.topic == format!("orders.{v}"))
            .map(|e| (e.message_id[4..].to_string(), e.class.clone(), e.attempts))
            .collect();
        letters.sort();
        let delivered: Vec<(u32, u32, u32)> = (0..N)
            .map(|i| {
                let id = format!("{v}-{i}");
                (
                    i,
                    deliveries.get(&id).copied().unwrap_or(0),
                    accepted.get(&id).copied().unwrap_or(0),
                )
            })
            .collect();
        (letters, delivered)
    };
    let current = outcome("v02");
    assert!(
        !current.0.is_empty(),
        "the permanent failures are dead-lettered"
    );
    assert_eq!(
        outcome("v01"),
        current,
        "the 0.1 build gives the 0.2 outcome"
    );
    for entry in &dead {
        assert!(
            entry.envelope.policy.fallback.is_none(),
            "no fault: {:?}",
            entry.envelope.policy
        );
    }
    // Every failure was decided exactly once, whether alone or in a batch with failures
    // that waited for it: the failures handed to each route's policy add up to its
    // decisions. The 0.1 route is asked one failure per call.
    let metrics = gw.admin.get_text("/metrics").unwrap();
    for topic in ["orders.v02", "orders.v01"] {
        let decisions = sum(&metrics, "verdict_decisions_total{", topic);
        let handed = sum(&metrics, "verdict_policy_batch_failures_sum{", topic);
        let calls = sum(&metrics, "verdict_policy_batch_failures_count{", topic);
        assert!(decisions > 0.0, "{topic} decided failures:\n{metrics}");
        assert_eq!(handed, decisions, "{topic}: each failure decided once");
        assert!(calls <= handed, "{topic}");
        if topic == "orders.v01" {
            assert_eq!(calls, handed, "a 0.1 policy takes one failure per call");
        }
    }
}

/// The sum of the samples of `series` (a name and the opening brace) labelled with `topic`.
fn sum(metrics: &str, series: &str, topic: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(series) && l.contains(&format!("topic=\"{topic}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
