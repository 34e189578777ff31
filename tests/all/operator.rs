//! What an operator relies on around the gateway, through a real gateway (`Gateway::start_with`)
//! and a scripted consumer: message deadlines and the facts the gateway adds for policies.

use std::time::Duration;

use serde_json::{Value, json};
use verdict_gateway::store::DlqFilter;
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::scripted::{Reply, Scripted};
use verdict_tests::{fixtures, scratch_dir, wait_for};

fn config(
    consumer: &str,
    policy: &str,
    path: &str,
    route_config: &str,
    settings: &str,
) -> TestConfig {
    TestConfig::new()
        .set("gateway.instance", "gw-operator")
        .set("admission.properties", false)
        .policy(policy, path)
        .route(
            Route::new("orders", policy)
                .config(route_config)
                .set("consumer.url", consumer)
                .set("consumer.timeout_ms", 1000)
                .merge(settings),
        )
}

fn dead_letter(gw: &Gateway) -> Value {
    assert!(wait_for(Duration::from_secs(15), || gw
        .store
        .counts()
        .unwrap()
        .dead
        == 1));
    let letter = gw
        .store
        .dlq_list(&DlqFilter::default(), u64::MAX)
        .unwrap()
        .remove(0);
    // The envelope as operators and their tools read it: its JSON.
    serde_json::to_value(letter.envelope).unwrap()
}

/// A message whose deadline (`x-message-deadline-ms`) has passed reaches the policy with
/// `deadline-ms` set: `rules` dead-letters it as expired instead of retrying a 503.
#[test]
fn a_message_deadline_reaches_the_policy() {
    let dir = scratch_dir("operator-deadline");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Scripted::start(&runtime, |_| Reply::status(503));
    let gw = config(
        &consumer.url(),
        "rules",
        fixtures::RULES,
        "{ max_attempts = 5 }",
        "",
    )
    .start_on(runtime, &dir, "t");
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "late", "headers": {"x-message-deadline-ms": "1"}, "payload": {}}),
        )
        .unwrap();
    let envelope = dead_letter(&gw);
    assert_eq!(envelope["verdict"]["class"], "expired", "{envelope}");
    assert_eq!(consumer.count("late"), 1, "not retried past its deadline");
}

/// `extension(key)` answers `source`, `route` and `gateway` in the gateway; an unknown key
/// is none. A TTL header (`x-message-ttl-ms`) becomes the deadline after publication.
#[test]
fn policies_see_the_gateways_extension_facts_and_a_ttl_deadline() {
    let dir = scratch_dir("operator-extensions");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Scripted::start(&runtime, |_| Reply::status(503));
    // One attempt allowed: the echo policy's retry becomes a dead letter, labels and all.
    let gw = config(
        &consumer.url(),
        "hostile",
        fixtures::HOSTILE,
        r#"{ mode = "echo" }"#,
        "settings = { guardrails = { max_attempts = 1 } }",
    )
    .start_on(runtime, &dir, "t");
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "m", "headers": {"x-message-ttl-ms": "60000"}, "payload": {}}),
        )
        .unwrap();
    let envelope = dead_letter(&gw);
    let labels = &envelope["verdict"]["labels"];
    assert_eq!(labels["ext-source"], "embedded", "{envelope}");
    assert_eq!(labels["ext-route"], "orders");
    assert_eq!(labels["ext-gateway"], "gw-operator");
    assert_eq!(labels["ext-unknown"], "None");
    let published = labels["published-at-ms"]
        .as_str()
        .unwrap()
        .trim_start_matches("Some(")
        .trim_end_matches(')')
        .parse::<u64>()
        .unwrap();
    assert_eq!(
        labels["deadline-ms"],
        Value::from(format!("Some({})", published + 60_000))
    );
}

/// Reading a broker's DLQ connects to the broker: it needs the token like a change does,
/// and whatever the broker answers, no password from the config reaches the answer.
#[test]
fn broker_dlq_reads_need_the_token_and_never_show_a_password() {
    let dir = scratch_dir("operator-broker-reads");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Scripted::start(&runtime, |_| Reply::ok());
    // No route on NATS: the gateway itself never connects; port 9 refuses.
    let config = config(
        &consumer.url(),
        "rules",
        fixtures::RULES,
        "{ max_attempts = 5 }",
        "",
    )
    .set("nats.url", "nats://app:s3cret-pass@127.0.0.1:9");
    let gw = config.start_on(runtime, &dir, "the-token");
    for path in ["/v1/dlq?source=nats", "/v1/dlq/stats?source=nats"] {
        let err = gw.anonymous.get::<Value>(path).unwrap_err().to_string();
        assert!(err.contains("401"), "{path}: {err}");
        let err = gw.admin.get::<Value>(path).unwrap_err().to_string();
        assert!(err.contains("503"), "{path}: {err}");
        assert!(!err.contains("s3cret-pass"), "{path}: {err}");
    }
    // The store's DLQ answers with the token: it is the broker that is missing.
    let entries: Vec<Value> = gw.admin.get("/v1/dlq").unwrap();
    assert!(entries.is_empty());
}
