//! The gateway on NATS JetStream (127.0.0.1:4222): the same scenario as on the embedded
//! store, with the broker as the system of record; two gateways sharing one durable
//! consumer; retry delays through `nak`; DLQ depth as the DLQ stream counts it.

use std::time::Duration;

use serde_json::Value;
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::Gateway;
use verdict_tests::nats::NatsFixture;
use verdict_tests::scratch_dir;

use super::gateway::{
    RULES_CONFIG, assert_settled_as_behaviour, assert_split, behaviour, broker_config,
    retry_lateness,
};

fn config(nats: &NatsFixture, consumer_url: &str, rules: &str, concurrency: usize) -> String {
    let topic = nats.subject("orders");
    broker_config(
        &nats.section(),
        "nats",
        &topic,
        &nats.prefix,
        consumer_url,
        rules,
        concurrency,
    )
}

fn envelopes(nats: &NatsFixture) -> Vec<Value> {
    nats.messages("_DLQ")
        .iter()
        .map(|m| serde_json::from_slice(&m.payload).expect("a JSON envelope"))
        .collect()
}

#[test]
fn a_thousand_messages_end_delivered_or_dead_lettered_on_jetstream() {
    let dir = scratch_dir("nats-thousand");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::new("thousand");
    let consumer = Consumer::start(&runtime, behaviour);
    let config = config(&nats, &consumer.url(), RULES_CONFIG, 32);
    let gw = Gateway::start_on(runtime, &dir, &config, "unused");
    gw.wait_ready();
    nats.publish("orders", 0..1_000);

    let settled = nats.wait_for(Duration::from_secs(120), || {
        let (_, accepted) = consumer.snapshot();
        accepted.len() == 950 && nats.messages("_DLQ").len() == 50
    });
    assert!(settled, "accepted {:?}", consumer.snapshot().1.len());
    assert!(
        nats.wait_for(Duration::from_secs(20), || nats.pending(&nats.prefix)
            == (0, 0))
    );

    // Count equality against the broker: 950 delivered + 50 in the DLQ stream = 1,000.
    assert_settled_as_behaviour(&consumer, 1_000);
    let dead = envelopes(&nats);
    assert_eq!(dead.len(), 50);
    for e in &dead {
        let id = e["original"]["id"].as_str().unwrap();
        assert_eq!(behaviour(id), Behaviour::Permanent, "{e}");
        assert_eq!(e["original"]["topic"], Value::from(nats.subject("orders")));
        assert_eq!(e["original"]["headers"]["tenant"], "eu");
        assert!(e["original"]["payload"]["order"].is_u64(), "{e}");
        assert_eq!(e["errors"][0]["kind"], "schema.unknown-version");
        assert_eq!(e["verdict"]["class"], "poison");
        assert_eq!(
            e["dlq"],
            Value::from(format!("{}.DLQ", nats.subject("orders")))
        );
    }
    for m in nats.messages("_DLQ") {
        assert_eq!(m.subject.as_str(), nats.dlq_subject("orders"));
    }
    // The DLQ depth metric equals the DLQ stream's own count.
    let series = format!(
        r#"verdict_dlq_depth{{dlq="{0}.DLQ",topic="{0}",source="nats",core="false"}} 50"#,
        nats.subject("orders")
    );
    let mut metrics = String::new();
    let agreed = nats.wait_for(Duration::from_secs(10), || {
        metrics = gw.anonymous.get_text("/metrics").unwrap();
        metrics.contains(&series)
    });
    assert!(agreed, "{series} not in\n{metrics}");
    assert_eq!(gw.anonymous.get_text("/readyz").unwrap(), "ready\n");
}

#[test]
fn retries_carry_their_history_across_naks_and_land_on_time() {
    const DELAY_MS: u64 = 400;
    let dir = scratch_dir("nats-delays");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::new("delays");
    let consumer = Consumer::start(&runtime, |_| Behaviour::FailsFirst(100));
    let rules = format!(
        r#"{{ max_attempts = 4, rules = [
            {{ match = ["auth.*"], dead_letter = "poison" }},
            {{ match = ["http.5*"], retry = {{ strategy = "fixed", delay_ms = {DELAY_MS} }} }},
        ] }}"#
    );
    let config = config(&nats, &consumer.url(), &rules, 32);
    let gw = Gateway::start_on(runtime, &dir, &config, "unused");
    gw.wait_ready();
    nats.publish("orders", 0..20);
    assert!(nats.wait_for(Duration::from_secs(60), || envelopes(&nats).len() == 20));

    let late = retry_lateness(&envelopes(&nats), DELAY_MS);
    let (p50, max) = (late[late.len() / 2], late[late.len() - 1]);
    eprintln!("nats retry lateness over {DELAY_MS} ms delays: p50 {p50} ms, max {max} ms");
    // Never early (a nak without its delay would be); and well before `ack_wait_ms` (5 s),
    // which is what a lost nak would fall back to. The figure an operator should expect is
    // the printed one (tens of ms on an idle machine); the bound leaves room for a loaded CI.
    assert!(max < 3_000, "lateness p50 {p50} ms, max {max} ms");
    let (deliveries, _) = consumer.snapshot();
    assert_eq!(deliveries.len(), 20);
    assert!(deliveries.values().all(|n| *n == 4), "{deliveries:?}");
}

#[test]
fn two_gateways_on_one_durable_consumer_split_the_load_and_lose_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::new("pair");
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    let config = config(&nats, &consumer.url(), RULES_CONFIG, 4);
    let a = Gateway::start_on(runtime, &scratch_dir("nats-pair-a"), &config, "unused");
    let b = Gateway::start(&scratch_dir("nats-pair-b"), &config, "unused");
    a.wait_ready();
    b.wait_ready();
    nats.publish("orders", 0..600);
    assert!(
        nats.wait_for(Duration::from_secs(60), || consumer.snapshot().1.len()
            == 600)
    );

    assert_split(&a, &b, &consumer, 600);
}

#[test]
fn in_progress_acks_keep_a_slow_delivery_from_being_redelivered() {
    let dir = scratch_dir("nats-slow");
    let nats = NatsFixture::new("slow");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The consumer takes 2.5 s; JetStream would redeliver after 1 s without progress acks.
    let consumer = Consumer::start(&runtime, |_| Behaviour::Slow(2_500));
    let config = config(&nats, &consumer.url(), RULES_CONFIG, 8)
        .replace("ack_wait_ms = 5000", "ack_wait_ms = 1000")
        .replace("timeout_ms = 2000", "timeout_ms = 5000");
    let gw = Gateway::start_on(runtime, &dir, &config, "unused");
    gw.wait_ready();
    nats.publish("orders", 0..3);
    assert!(nats.wait_for(Duration::from_secs(30), || consumer.snapshot().1.len() == 3));
    assert!(
        nats.wait_for(Duration::from_secs(10), || nats.pending(&nats.prefix)
            == (0, 0))
    );
    std::thread::sleep(Duration::from_millis(1_500));
    let (deliveries, _) = consumer.snapshot();
    assert!(
        deliveries.values().all(|n| *n == 1),
        "redelivered: {deliveries:?}"
    );
}
