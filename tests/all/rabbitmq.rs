//! The gateway on RabbitMQ (127.0.0.1:5672): the same scenario as on the embedded store,
//! retries through delay-bucket queues with their history in headers, two gateways as
//! competing consumers, and DLQ depth as the broker counts it.

use std::time::Duration;

use serde_json::Value;
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::Gateway;
use verdict_tests::rabbitmq::RabbitFixture;
use verdict_tests::scratch_dir;

use super::gateway::{
    RULES_CONFIG, assert_settled_as_behaviour, assert_split, behaviour, broker_config,
    retry_lateness,
};

fn config(mq: &RabbitFixture, consumer_url: &str, rules: &str) -> String {
    let topic = mq.queue("orders");
    broker_config(
        &mq.section(),
        "rabbitmq",
        &topic,
        "verdict",
        consumer_url,
        rules,
        32,
    )
}

fn dlq(mq: &RabbitFixture) -> String {
    format!("{}.DLQ", mq.queue("orders"))
}

#[test]
fn a_thousand_messages_end_delivered_or_dead_lettered_on_rabbitmq() {
    let dir = scratch_dir("rabbit-thousand");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mq = RabbitFixture::new("thousand");
    let consumer = Consumer::start(&runtime, behaviour);
    let gw = Gateway::start_on(
        runtime,
        &dir,
        &config(&mq, &consumer.url(), RULES_CONFIG),
        "unused",
    );
    gw.wait_ready();
    mq.publish("orders", 0..1_000);

    let settled = mq.wait_for(Duration::from_secs(120), || {
        consumer.snapshot().1.len() == 950 && mq.depth(&dlq(&mq)) == 50
    });
    assert!(
        settled,
        "accepted {}, dead {}",
        consumer.snapshot().1.len(),
        mq.depth(&dlq(&mq))
    );
    assert_eq!(mq.depth(&mq.queue("orders")), 0);

    assert_settled_as_behaviour(&consumer, 1_000);
    // The DLQ depth metric equals the broker's own count.
    let series = format!(
        r#"verdict_dlq_depth{{dlq="{}",topic="{}",source="rabbitmq",core="false"}} 50"#,
        dlq(&mq),
        mq.queue("orders")
    );
    let mut metrics = String::new();
    let agreed = mq.wait_for(Duration::from_secs(10), || {
        metrics = gw.anonymous.get_text("/metrics").unwrap();
        metrics.contains(&series)
    });
    assert!(agreed, "{series} not in\n{metrics}");

    let dead = mq.take_all(&dlq(&mq));
    assert_eq!(dead.len(), 50);
    for (_, body) in &dead {
        let e: Value = serde_json::from_slice(body).expect("a JSON envelope");
        let id = e["original"]["id"].as_str().unwrap();
        assert_eq!(behaviour(id), Behaviour::Permanent, "{e}");
        assert_eq!(e["original"]["topic"], Value::from(mq.queue("orders")));
        assert_eq!(e["original"]["headers"]["tenant"], "eu", "{e}");
        assert!(e["original"]["payload"]["order"].is_u64(), "{e}");
        assert_eq!(e["errors"][0]["kind"], "schema.unknown-version");
        assert_eq!(e["verdict"]["class"], "poison");
    }
}

#[test]
fn retries_wait_in_delay_buckets_and_carry_their_history_in_headers() {
    const DELAY_MS: u64 = 400;
    let dir = scratch_dir("rabbit-delays");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mq = RabbitFixture::new("delays");
    let consumer = Consumer::start(&runtime, |_| Behaviour::FailsFirst(100));
    let rules = format!(
        r#"{{ max_attempts = 4, rules = [
            {{ match = ["auth.*"], dead_letter = "poison" }},
            {{ match = ["http.5*"], retry = {{ strategy = "fixed", delay_ms = {DELAY_MS} }} }},
        ] }}"#
    );
    let gw = Gateway::start_on(
        runtime,
        &dir,
        &config(&mq, &consumer.url(), &rules),
        "unused",
    );
    gw.wait_ready();
    mq.publish("orders", 0..20);
    assert!(mq.wait_for(Duration::from_secs(60), || mq.depth(&dlq(&mq)) == 20));

    let bucket = verdict_gateway::sources::rabbitmq::headers::bucket_ms(DELAY_MS);
    let dead: Vec<Value> = mq
        .take_all(&dlq(&mq))
        .iter()
        .map(|(_, body)| serde_json::from_slice(body).unwrap())
        .collect();
    let late = retry_lateness(&dead, DELAY_MS);
    let (p50, max) = (late[late.len() / 2], late[late.len() - 1]);
    eprintln!(
        "rabbitmq retry lateness over {DELAY_MS} ms delays (bucket {bucket} ms): p50 {p50} ms, max {max} ms"
    );
    // Never early; late by the bucket's rounding (at most 25%) plus broker and gateway
    // latency - the printed figure on an idle machine, with room for a loaded CI.
    assert!(
        max < (bucket - DELAY_MS) + 3_000,
        "p50 {p50} ms, max {max} ms"
    );
    let (deliveries, _) = consumer.snapshot();
    assert!(deliveries.values().all(|n| *n == 4), "{deliveries:?}");
}

#[test]
fn two_gateways_on_one_queue_split_the_load_and_lose_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mq = RabbitFixture::new("pair");
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    let config = config(&mq, &consumer.url(), RULES_CONFIG);
    let a = Gateway::start_on(runtime, &scratch_dir("rabbit-pair-a"), &config, "unused");
    let b = Gateway::start(&scratch_dir("rabbit-pair-b"), &config, "unused");
    a.wait_ready();
    b.wait_ready();
    mq.publish("orders", 0..600);
    assert!(
        mq.wait_for(Duration::from_secs(60), || consumer.snapshot().1.len()
            == 600)
    );

    assert_split(&a, &b, &consumer, 600);
}
