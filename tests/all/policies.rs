//! The shipped policies, compiled to components and run through the host.

use serde_json::json;
use verdict_runtime::{Action, Class, Severity};
use verdict_tests::{at, decider, failure, fixtures, host};

/// RocketMQ's levels 3 to 18: the delays of retries 1 to 16.
const LADDER: [u64; 16] = [
    10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000, 480_000, 540_000,
    600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

#[test]
fn rules_payments_retries_db_timeout_at_1_to_4_and_exhausts_at_5() {
    let host = host();
    let payments = decider(&host, fixtures::RULES, r#"{"max_attempts": 5}"#);
    for attempt in 1..=4 {
        let d = payments.decide(&at("db.timeout", attempt));
        assert!(
            matches!(d.verdict.action, Action::Retry(_)),
            "attempt {attempt}: {d:?}"
        );
        assert!(d.fallback.is_none() && d.clamps.is_empty());
    }
    let d = payments.decide(&at("db.timeout", 5));
    assert_eq!(
        (d.verdict.action, d.verdict.class),
        (Action::DeadLetter, Class::Exhausted)
    );
    assert_eq!(d.provenance.name, "rules");
    assert_eq!(d.provenance.sha256.len(), 64);
}

#[test]
fn rules_notifications_exhausts_at_3_and_json_parse_is_poison_under_both() {
    let host = host();
    let notifications = decider(&host, fixtures::RULES, r#"{"max_attempts": 3}"#);
    let payments = decider(&host, fixtures::RULES, r#"{"max_attempts": 5}"#);
    assert!(matches!(
        notifications.decide(&at("db.timeout", 2)).verdict.action,
        Action::Retry(_)
    ));
    let d = notifications.decide(&at("db.timeout", 3));
    assert_eq!(
        (d.verdict.action, d.verdict.class),
        (Action::DeadLetter, Class::Exhausted)
    );
    for topic in [&notifications, &payments] {
        let d = topic.decide(&at("json.parse", 1));
        assert_eq!(
            (d.verdict.action, d.verdict.class),
            (Action::DeadLetter, Class::Poison)
        );
    }
}

#[test]
fn rocketmq_gives_the_ladder_attempt_by_attempt_then_dead_letters_after_16_retries() {
    let host = host();
    let rocketmq = decider(&host, fixtures::ROCKETMQ, "{}");
    for (i, want) in LADDER.iter().enumerate() {
        let attempt = i as u32 + 1;
        assert_eq!(
            rocketmq.decide(&at("http.503", attempt)).verdict.action,
            Action::Retry(*want),
            "attempt {attempt}"
        );
    }
    let d = rocketmq.decide(&at("http.503", 17));
    assert_eq!(
        (d.verdict.action, d.verdict.class),
        (Action::DeadLetter, Class::Exhausted)
    );
}

#[test]
fn same_failure_same_seed_same_verdict_jitter_included() {
    let host = host();
    let first = decider(&host, fixtures::RULES, "{}");
    // A second, independently instantiated copy: nothing may depend on instance state.
    let second = decider(&verdict_tests::host(), fixtures::RULES, "{}");
    let mut delays = std::collections::BTreeSet::new();
    for seed in 0..50u64 {
        let f =
            failure(json!({"attempt": 3, "jitter-seed": seed, "error": {"kind": "db.timeout"}}));
        let a = first.decide(&f);
        assert_eq!(a, first.decide(&f));
        assert_eq!(a, second.decide(&f));
        delays.insert(a.verdict.delay_ms());
    }
    assert!(
        delays.len() > 10,
        "jitter should vary with the seed: {delays:?}"
    );
}

#[test]
fn adaptive_scales_with_success_rate_and_opens_the_circuit() {
    let host = host();
    let adaptive = decider(&host, fixtures::ADAPTIVE, "{}");
    let with = |deliveries: u32, failures: u32, consecutive: u32| {
        failure(
            json!({"attempt": 2, "jitter-seed": 1, "error": {"kind": "http.503"},
            "stats": {"window-ms": 60000, "deliveries": deliveries, "failures": failures, "consecutive-failures": consecutive}}),
        )
    };
    let delay = |f| adaptive.decide(&f).verdict.delay_ms().unwrap();
    let (high, medium, low) = (
        delay(with(100, 10, 1)),
        delay(with(100, 50, 1)),
        delay(with(100, 90, 1)),
    );
    assert!(
        high <= 1_000 && (1_000..=2_000).contains(&medium) && (4_000..=8_000).contains(&low),
        "{high} {medium} {low}"
    );
    assert_eq!(
        adaptive.decide(&with(100, 100, 50)).verdict.action,
        Action::Pause(30_000)
    );
}

#[test]
fn payments_reads_the_payload_through_the_host() {
    let host = host();
    let payments = decider(&host, fixtures::PAYMENTS, "{}");
    let pay = |kind: &str, payload: serde_json::Value| {
        payments.decide(&failure(
            json!({"error": {"kind": kind}, "payload": payload, "jitter-seed": 5}),
        ))
    };
    let ok = json!({"schema_version": 1, "amount": 42.0});
    assert_eq!(
        pay("gateway.503", json!({"schema_version": 7, "amount": 1}))
            .verdict
            .class,
        Class::Poison
    );
    assert_eq!(
        pay("gateway.503", json!("not a payment")).verdict.class,
        Class::Poison
    );
    let d = pay(
        "gateway.503",
        json!({"schema_version": 2, "amount": -1, "currency": "EUR"}),
    );
    assert_eq!(
        (d.verdict.class, d.verdict.alert),
        (Class::Permanent, Severity::Critical)
    );
    assert!(
        d.verdict
            .labels
            .contains(&("currency".into(), "EUR".into()))
    );
    assert_eq!(
        pay("card.declined", ok.clone()).verdict.class,
        Class::Permanent
    );
    assert!(matches!(pay("gateway.503", ok).verdict.action, Action::Retry(d) if d <= 500));
}

#[test]
fn a_refused_config_names_the_policy_and_field() {
    let host = host();
    let err = verdict_tests::load(&host, fixtures::RULES)
        .configure(r#"{"max_attempts": "five"}"#, Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rules") && err.contains("config.max_attempts"),
        "{err}"
    );
}

#[test]
fn rules_standard_table_example_config_behaves_as_its_readme_says() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../policies/rules/examples/error-table.json");
    let config = std::fs::read_to_string(path).unwrap();
    let host = host();
    let table = decider(&host, fixtures::RULES, &config);
    let verdict = |kind: &str, attempt: u32| table.decide(&at(kind, attempt)).verdict;
    // network timeout: exponential (full jitter), 5 attempts
    assert!(matches!(verdict("net.timeout", 4).action, Action::Retry(d) if d <= 8_000));
    assert_eq!(verdict("net.timeout", 5).class, Class::Exhausted);
    // deadlock: random 100-1000 ms, 3 attempts
    assert!(
        matches!(verdict("db.deadlock", 2).action, Action::Retry(d) if (100..=1_000).contains(&d))
    );
    assert_eq!(verdict("db.deadlock", 3).class, Class::Exhausted);
    // business: fixed 5 s, 2 attempts
    assert_eq!(verdict("biz.stock_locked", 1).action, Action::Retry(5_000));
    assert_eq!(verdict("biz.stock_locked", 2).class, Class::Exhausted);
    // format: never retried
    assert_eq!(
        (
            verdict("json.parse", 1).action,
            verdict("json.parse", 1).class
        ),
        (Action::DeadLetter, Class::Poison)
    );
    // auth: never retried, critical
    let auth = verdict("auth.token_expired", 1);
    assert_eq!(
        (auth.action, auth.class, auth.alert),
        (Action::DeadLetter, Class::Permanent, Severity::Critical)
    );
}

#[test]
fn example_configs_and_failure_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/rules/examples");
    let host = host();
    let failure = std::fs::read_to_string(dir.join("db-timeout.json")).unwrap();
    let failure = verdict_runtime::FailureSpec::from_json(&failure)
        .unwrap()
        .into_failure();
    for (config, class) in [
        ("payments.json", Class::Exhausted),
        ("notifications.json", Class::Exhausted),
    ] {
        let config = std::fs::read_to_string(dir.join(config)).unwrap();
        assert_eq!(
            decider(&host, fixtures::RULES, &config)
                .decide(&failure)
                .verdict
                .class,
            class
        );
    }
}

#[test]
fn every_on_demand_fact_reaches_the_policy_through_the_host() {
    let host = host();
    let echo = decider(&host, fixtures::HOSTILE, r#"{"mode": "echo"}"#);
    let d = echo.decide(&failure(json!({
        "topic": "orders", "message-id": "m-42", "consumer-group": "billing",
        "now-ms": 5_000, "published-at-ms": 1_000,
        "error": {"kind": "http.503", "message": "upstream down"},
        "content-type": "application/json", "headers": {"x-trace": "t-1"},
        "payload": "hello",
        "history": [{"at-ms": 1, "kind": "db.timeout"}, {"at-ms": 2, "kind": "http.503"}]
    })));
    let label = |k: &str| {
        d.verdict
            .labels
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(label("topic"), "orders");
    assert_eq!(label("message-id"), "m-42");
    assert_eq!(label("consumer-group"), "billing");
    assert_eq!(label("error-message"), "upstream down");
    assert_eq!(label("content-type"), "application/json");
    assert_eq!(label("published-at-ms"), "Some(1000)");
    assert_eq!(
        (label("payload-size"), label("payload")),
        ("5".into(), "hello".into())
    );
    assert_eq!(label("header"), "t-1");
    assert_eq!(label("history"), "db.timeout,http.503");
    assert_eq!(label("age-ms"), "4000");
}
