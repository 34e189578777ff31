//! One scenario suite, run on both brokers (NATS JetStream on 127.0.0.1:4222, RabbitMQ on
//! 127.0.0.1:5672) with the broker as the system of record: a thousand messages end
//! delivered or dead-lettered with counts equal to the broker's; retries keep their whole
//! history and are never early; two gateways share one queue without losing a message; a
//! retry budget's holds lose nothing and spend no attempt.
//! What only one broker has (JetStream's in-progress acks) follows the suite.
//!
//! A new broker behaviour goes here as a scenario generic over [`Broker`], so it runs on
//! every broker at once.

use std::ops::Range;
use std::time::Duration;

use verdict_gateway::envelope::Envelope;
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::nats::NatsFixture;
use verdict_tests::rabbitmq::RabbitFixture;
use verdict_tests::{fixtures, scratch_dir};

use super::gateway::{RULES_CONFIG, assert_settled_as_behaviour, behaviour};

/// What a scenario needs of a broker: a private corner of it, a gateway config that routes
/// its `orders` topic, and the broker's own view of the queues.
trait Broker: Sized {
    /// The source's name in the config and in metrics.
    const SOURCE: &'static str;

    /// Names of its own for the test `name`, cleaned up when dropped.
    fn new(name: &str) -> Self;

    /// The broker's name of the route's topic.
    fn topic(&self) -> String;

    /// The DLQ the route's dead letters go to.
    fn dlq(&self) -> String {
        format!("{}.DLQ", self.topic())
    }

    /// A one-route gateway config.
    fn config(&self, consumer_url: &str, rules: &str, concurrency: usize) -> TestConfig;

    /// Publish `m-<i>` for each `i`, with a `tenant: eu` header and `{"order": i}`.
    fn publish(&self, ids: Range<u32>);

    /// Dead letters in the DLQ, as the broker counts them.
    fn dlq_depth(&self) -> u64;

    /// The dead letters' envelopes, read from the broker (a RabbitMQ read takes them).
    fn dead_letters(&self) -> Vec<Envelope>;

    /// Nothing of the route is waiting or unacknowledged on the broker.
    fn drained(&self) -> bool;

    /// How much later than its delay a retry of `delay_ms` may come by design (RabbitMQ
    /// rounds a delay up to its bucket).
    fn rounding_ms(_delay_ms: u64) -> u64 {
        0
    }

    /// Poll `check` until it holds or `limit` passes.
    fn wait_for(&self, limit: Duration, check: impl FnMut() -> bool) -> bool;
}

impl Broker for NatsFixture {
    const SOURCE: &'static str = "nats";

    fn new(name: &str) -> Self {
        NatsFixture::new(name)
    }

    fn topic(&self) -> String {
        self.subject("orders")
    }

    fn config(&self, consumer_url: &str, rules: &str, concurrency: usize) -> TestConfig {
        let topic = self.topic();
        broker_config(
            &self.section(),
            Self::SOURCE,
            &topic,
            &self.prefix,
            consumer_url,
            rules,
            concurrency,
        )
    }

    fn publish(&self, ids: Range<u32>) {
        NatsFixture::publish(self, "orders", ids);
    }

    fn dlq_depth(&self) -> u64 {
        self.messages("_DLQ").len() as u64
    }

    fn dead_letters(&self) -> Vec<Envelope> {
        let letters = self.messages("_DLQ");
        for m in &letters {
            assert_eq!(m.subject.as_str(), self.dlq_subject("orders"));
        }
        letters
            .iter()
            .map(|m| serde_json::from_slice(&m.payload).expect("a JSON envelope"))
            .collect()
    }

    fn drained(&self) -> bool {
        self.pending(&self.prefix) == (0, 0)
    }

    fn wait_for(&self, limit: Duration, check: impl FnMut() -> bool) -> bool {
        NatsFixture::wait_for(self, limit, check)
    }
}

impl Broker for RabbitFixture {
    const SOURCE: &'static str = "rabbitmq";

    fn new(name: &str) -> Self {
        RabbitFixture::new(name)
    }

    fn topic(&self) -> String {
        self.queue("orders")
    }

    fn config(&self, consumer_url: &str, rules: &str, concurrency: usize) -> TestConfig {
        let topic = self.topic();
        broker_config(
            &self.section(),
            Self::SOURCE,
            &topic,
            "verdict",
            consumer_url,
            rules,
            concurrency,
        )
    }

    fn publish(&self, ids: Range<u32>) {
        RabbitFixture::publish(self, "orders", ids);
    }

    fn dlq_depth(&self) -> u64 {
        self.depth(&self.dlq())
    }

    fn dead_letters(&self) -> Vec<Envelope> {
        self.take_all(&self.dlq())
            .iter()
            .map(|(_, body)| serde_json::from_slice(body).expect("a JSON envelope"))
            .collect()
    }

    fn drained(&self) -> bool {
        self.depth(&self.topic()) == 0
    }

    fn rounding_ms(delay_ms: u64) -> u64 {
        verdict_gateway::sources::delay_buckets::bucket_ms(delay_ms) - delay_ms
    }

    fn wait_for(&self, limit: Duration, check: impl FnMut() -> bool) -> bool {
        RabbitFixture::wait_for(self, limit, check)
    }
}

#[cfg(feature = "kafka")]
impl Broker for verdict_tests::kafka::KafkaFixture {
    const SOURCE: &'static str = "kafka";

    fn new(name: &str) -> Self {
        verdict_tests::kafka::KafkaFixture::new(name)
    }

    fn topic(&self) -> String {
        verdict_tests::kafka::KafkaFixture::topic(self, "orders")
    }

    fn config(&self, consumer_url: &str, rules: &str, concurrency: usize) -> TestConfig {
        let topic = Broker::topic(self);
        broker_config(
            &self.section(),
            Self::SOURCE,
            &topic,
            "verdict",
            consumer_url,
            rules,
            concurrency,
        )
    }

    fn publish(&self, ids: Range<u32>) {
        verdict_tests::kafka::KafkaFixture::publish(self, "orders", ids);
    }

    fn dlq_depth(&self) -> u64 {
        self.depth(&self.dlq())
    }

    fn dead_letters(&self) -> Vec<Envelope> {
        self.records(&self.dlq())
            .iter()
            .map(|r| {
                let envelope = Self::header(r, "verdict-envelope").expect("the envelope header");
                serde_json::from_slice(&envelope).expect("a JSON envelope")
            })
            .collect()
    }

    fn drained(&self) -> bool {
        verdict_tests::kafka::KafkaFixture::drained(self)
    }

    fn rounding_ms(delay_ms: u64) -> u64 {
        verdict_gateway::sources::delay_buckets::bucket_ms(delay_ms) - delay_ms
    }

    fn wait_for(&self, limit: Duration, check: impl FnMut() -> bool) -> bool {
        verdict_tests::kafka::KafkaFixture::wait_for(self, limit, check)
    }
}

/// Each scenario as a test on each broker: `on_nats::<scenario>`, `on_rabbitmq::<scenario>`
/// (and `on_kafka::<scenario>` in a build with the `kafka` feature).
macro_rules! on_every_broker {
    ($($scenario:ident => $name:literal),* $(,)?) => {
        mod on_nats {
            $(#[test]
            fn $scenario() {
                super::$scenario::<verdict_tests::nats::NatsFixture>($name);
            })*
        }
        mod on_rabbitmq {
            $(#[test]
            fn $scenario() {
                super::$scenario::<verdict_tests::rabbitmq::RabbitFixture>($name);
            })*
        }
        #[cfg(feature = "kafka")]
        mod on_kafka {
            $(#[test]
            fn $scenario() {
                super::$scenario::<verdict_tests::kafka::KafkaFixture>($name);
            })*
        }
    };
}

on_every_broker! {
    a_thousand_messages_end_delivered_or_dead_lettered => "thousand",
    retries_carry_their_history_and_are_never_early => "delays",
    two_gateways_on_one_queue_split_the_load_and_lose_nothing => "pair",
    a_retry_budget_holds_retries_without_losing_or_spending => "budget",
    a_paused_route_calls_nothing_but_its_probes => "pause",
}

/// 5% of a thousand messages fail for good, 20% a few times: 950 are delivered once each,
/// 50 are dead-lettered with their whole story, and the DLQ depth metric is the broker's
/// own count.
fn a_thousand_messages_end_delivered_or_dead_lettered<B: Broker>(name: &str) {
    let dir = scratch_dir(&format!("{}-{name}", B::SOURCE));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = B::new(name);
    let consumer = Consumer::start(&runtime, behaviour);
    let gw = broker
        .config(&consumer.url(), RULES_CONFIG, 32)
        .start_on(runtime, &dir, "unused");
    gw.wait_ready();
    broker.publish(0..1_000);

    let settled = broker.wait_for(Duration::from_secs(120), || {
        consumer.snapshot().1.len() == 950 && broker.dlq_depth() == 50
    });
    assert!(
        settled,
        "accepted {}, dead {}",
        consumer.snapshot().1.len(),
        broker.dlq_depth()
    );
    assert!(broker.wait_for(Duration::from_secs(20), || broker.drained()));
    assert_settled_as_behaviour(&consumer, 1_000);

    let series = format!(
        r#"verdict_dlq_depth{{dlq="{}",topic="{}",source="{}",core="false"}} 50"#,
        broker.dlq(),
        broker.topic(),
        B::SOURCE
    );
    let mut metrics = String::new();
    let agreed = broker.wait_for(Duration::from_secs(10), || {
        metrics = gw.anonymous.get_text("/metrics").unwrap();
        metrics.contains(&series)
    });
    assert!(agreed, "{series} not in\n{metrics}");
    assert_eq!(gw.anonymous.get_text("/readyz").unwrap(), "ready\n");

    let dead = broker.dead_letters();
    assert_eq!(dead.len(), 50);
    for e in &dead {
        let original = &e.original;
        assert_eq!(behaviour(&original.id), Behaviour::Permanent, "{e:?}");
        assert_eq!(original.topic, broker.topic());
        assert_eq!(original.headers["tenant"], "eu", "{e:?}");
        let payload = original.payload.as_ref().expect("a JSON payload");
        assert!(payload["order"].is_u64(), "{e:?}");
        assert_eq!(e.errors[0].kind, "schema.unknown-version");
        assert_eq!(e.verdict.class, "poison");
        assert_eq!(e.dlq, broker.dlq());
    }
}

/// Every message fails 100 times against `max_attempts = 4` and a fixed 400 ms retry: each
/// is delivered exactly four times, dead-lettered with four errors, and no retry comes
/// before its delay (late only by the broker's rounding and latency).
fn retries_carry_their_history_and_are_never_early<B: Broker>(name: &str) {
    const DELAY_MS: u64 = 400;
    let dir = scratch_dir(&format!("{}-{name}", B::SOURCE));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = B::new(name);
    let consumer = Consumer::start(&runtime, |_| Behaviour::FailsFirst(100));
    let rules = format!(
        r#"{{ max_attempts = 4, rules = [
            {{ match = ["auth.*"], dead_letter = "poison" }},
            {{ match = ["http.5*"], retry = {{ strategy = "fixed", delay_ms = {DELAY_MS} }} }},
        ] }}"#
    );
    let gw = broker
        .config(&consumer.url(), &rules, 32)
        .start_on(runtime, &dir, "unused");
    gw.wait_ready();
    broker.publish(0..20);
    assert!(broker.wait_for(Duration::from_secs(60), || broker.dlq_depth() == 20));

    let late = retry_lateness(&broker.dead_letters(), DELAY_MS);
    let (p50, max) = (late[late.len() / 2], late[late.len() - 1]);
    let rounding = B::rounding_ms(DELAY_MS);
    eprintln!(
        "{} retry lateness over {DELAY_MS} ms delays (rounding {rounding} ms): p50 {p50} ms, max {max} ms",
        B::SOURCE
    );
    // Well before what a lost retry falls back to (NATS: `ack_wait_ms`, 5 s). The figure an
    // operator should expect is the printed one (tens of ms past the rounding on an idle
    // machine); the bound leaves room for a loaded CI.
    assert!(max < rounding + 3_000, "p50 {p50} ms, max {max} ms");
    let (deliveries, _) = consumer.snapshot();
    assert_eq!(deliveries.len(), 20);
    assert!(deliveries.values().all(|n| *n == 4), "{deliveries:?}");
}

/// A route with a retry budget (no share of first attempts, 10 retries a second over a
/// 2 s window) on a consumer that always answers 503: retries reach it no faster than the
/// budget allows; the holds (a `nak` with a delay on NATS, a delay queue on RabbitMQ) lose
/// nothing and spend no attempt - three deliveries each, then the DLQ with the holds in the
/// envelope - and leave nothing behind on the broker.
fn a_retry_budget_holds_retries_without_losing_or_spending<B: Broker>(name: &str) {
    let dir = scratch_dir(&format!("{}-{name}", B::SOURCE));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = B::new(name);
    let consumer = std::sync::Arc::new(Consumer::start(&runtime, |_| {
        Behaviour::FailsFirst(u32::MAX)
    }));
    let rules = r#"{ max_attempts = 3, rules = [
        { match = ["auth.*"], dead_letter = "poison" },
        { match = ["http.5*"], retry = { strategy = "fixed", delay_ms = 50 } },
    ] }"#;
    let gw = broker
        .config(&consumer.url(), rules, 8)
        .map_routes(|r| {
            r.merge(
                "settings = { guardrails = { retry_budget = \
                 { percent = 0, window_s = 2, min_per_s = 10 } } }",
            )
        })
        .start_on(runtime, &dir, "unused");
    gw.wait_ready();
    let watch = super::retry_budget::RetryWatch::start(consumer.clone(), "m-", 20);
    broker.publish(0..20);
    assert!(
        broker.wait_for(Duration::from_secs(90), || broker.dlq_depth() == 20),
        "{} dead letters",
        broker.dlq_depth()
    );
    watch.check(20, 2);
    let (deliveries, _) = consumer.snapshot();
    assert_eq!(deliveries.len(), 20);
    assert!(deliveries.values().all(|n| *n == 3), "{deliveries:?}");
    let letters = broker.dead_letters();
    assert_eq!(letters.len(), 20);
    let held = letters
        .iter()
        .filter(|e| {
            assert_eq!(
                (e.attempts, e.verdict.class.as_str()),
                (3, "exhausted"),
                "{e:?}"
            );
            e.retry_budget.is_some_and(|h| h.holds >= 1)
        })
        .count();
    assert!(held > 0, "some letters show their holds");
    assert!(broker.wait_for(Duration::from_secs(10), || broker.drained()));
}

/// `adaptive`'s open circuit pauses the route: the consumer sees one probe per pause and
/// nothing else until it is back, then every message once (see `pause`).
fn a_paused_route_calls_nothing_but_its_probes<B: Broker>(name: &str) {
    let dir = scratch_dir(&format!("{}-{name}", B::SOURCE));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = B::new(name);
    let consumer = super::pause::down_consumer(&runtime);
    let gw = broker
        .config(&consumer.url(), super::pause::ADAPTIVE_CONFIG, 1)
        .policy("adaptive", fixtures::ADAPTIVE)
        .map_routes(|r| r.set("policy", "adaptive"))
        .start_on(runtime, &dir, "unused");
    gw.wait_ready();
    super::pause::a_paused_route_calls_nothing_but_its_probes(
        &gw,
        &broker.topic(),
        &consumer,
        1,
        &|ids| broker.publish(ids),
        &|| broker.dlq_depth(),
    );
    assert!(broker.wait_for(Duration::from_secs(10), || broker.drained()));
}

/// Two gateways consuming one queue (on NATS, one durable consumer) share 600 messages,
/// each delivering some, together each message once plus the duplicates the consumer saw.
fn two_gateways_on_one_queue_split_the_load_and_lose_nothing<B: Broker>(name: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = B::new(name);
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    let config = broker.config(&consumer.url(), RULES_CONFIG, 4);
    let a = config.start_on(
        runtime,
        &scratch_dir(&format!("{}-{name}-a", B::SOURCE)),
        "unused",
    );
    let b = config.start(&scratch_dir(&format!("{}-{name}-b", B::SOURCE)), "unused");
    a.wait_ready();
    b.wait_ready();
    broker.publish(0..600);
    assert!(
        broker.wait_for(Duration::from_secs(60), || consumer.snapshot().1.len()
            == 600)
    );
    assert_split(&a, &b, &consumer, 600);
}

/// Kafka only: a dead letter is the record itself - its key, value and headers - with the
/// envelope and the `kafka_dlt-*` headers Spring Kafka writes, in Spring's encodings, so
/// Spring applications and Kafka tools read it as their own.
#[cfg(feature = "kafka")]
#[test]
fn on_kafka_a_dead_letter_is_the_record_with_springs_headers() {
    use verdict_tests::kafka::KafkaFixture;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = KafkaFixture::new("spring");
    let consumer = Consumer::start(&runtime, behaviour);
    let gw = Broker::config(&broker, &consumer.url(), RULES_CONFIG, 8).start_on(
        runtime,
        &scratch_dir("kafka-spring"),
        "unused",
    );
    gw.wait_ready();
    Broker::publish(&broker, 0..20);
    // m-0..m-4 fail for good.
    assert!(broker.wait_for(Duration::from_secs(60), || broker.dlq_depth() == 5));
    let topic = Broker::topic(&broker);
    let records = broker.records(&broker.dlq());
    assert_eq!(records.len(), 5);
    for r in &records {
        use rdkafka::Message as _;
        let header = |name: &str| KafkaFixture::header(r, name).unwrap_or_else(|| panic!("{name}"));
        let id = String::from_utf8(header("message-id")).unwrap();
        assert_eq!(behaviour(&id), Behaviour::Permanent, "{id}");
        assert_eq!(r.key(), Some(id.as_bytes()), "the original key");
        let order: u32 = id.trim_start_matches("m-").parse().unwrap();
        assert_eq!(
            r.payload(),
            Some(format!(r#"{{"order": {order}}}"#).as_bytes())
        );
        assert_eq!(header("tenant"), b"eu");
        assert_eq!(header("kafka_dlt-original-topic"), topic.as_bytes());
        let partition =
            i32::from_be_bytes(header("kafka_dlt-original-partition").try_into().unwrap());
        assert!((0..verdict_tests::kafka::PARTITIONS).contains(&partition));
        let offset = i64::from_be_bytes(header("kafka_dlt-original-offset").try_into().unwrap());
        assert!((0..20).contains(&offset), "{offset}");
        assert_eq!(header("kafka_dlt-original-timestamp").len(), 8);
        assert_eq!(header("kafka_dlt-original-timestamp-type"), b"CreateTime");
        assert_eq!(
            header("kafka_dlt-original-consumer-group"),
            broker.group().as_bytes()
        );
        assert_eq!(header("kafka_dlt-exception-fqcn"), b"verdict.poison");
        assert_eq!(
            header("kafka_dlt-exception-cause-fqcn"),
            b"schema.unknown-version"
        );
        let envelope: Envelope = serde_json::from_slice(&header("verdict-envelope")).unwrap();
        assert_eq!(envelope.original.id, id);
        assert!(
            !String::from_utf8_lossy(&header("verdict-envelope")).is_empty()
                && KafkaFixture::header(r, "x-verdict-attempt").is_none(),
            "no retry bookkeeping in a dead letter"
        );
    }
    assert!(broker.wait_for(Duration::from_secs(20), || broker.drained()));
}

/// Kafka only: a dead letter of a payload too big to be carried twice (as the record's value
/// and in the envelope) is still written - the value byte for byte, the envelope without
/// its copy of the payload but with its size and sha256 - rather than failing for ever.
#[cfg(feature = "kafka")]
#[test]
fn on_kafka_a_big_dead_letter_keeps_its_value_and_leaves_the_envelopes_copy_out() {
    use rdkafka::Message as _;
    use verdict_tests::kafka::KafkaFixture;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = KafkaFixture::new("big");
    let consumer = Consumer::start(&runtime, behaviour);
    let gw = Broker::config(&broker, &consumer.url(), RULES_CONFIG, 8).start_on(
        runtime,
        &scratch_dir("kafka-big"),
        "unused",
    );
    gw.wait_ready();
    // 600 KB of binary: base64 in the envelope alone is 800 KB.
    let payload: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    let topic = Broker::topic(&broker);
    broker.produce(&topic, "m-0", &payload, &[("message-id", b"m-0")]);
    assert!(broker.wait_for(Duration::from_secs(60), || broker.dlq_depth() == 1));
    let letter = &broker.records(&broker.dlq())[0];
    assert_eq!(
        letter.payload(),
        Some(&payload[..]),
        "the value byte for byte"
    );
    let envelope: serde_json::Value =
        serde_json::from_slice(&KafkaFixture::header(letter, "verdict-envelope").unwrap()).unwrap();
    let omitted = &envelope["original"]["payloadOmitted"];
    assert_eq!(omitted["bytes"], 600_000, "{omitted}");
    assert!(envelope["original"]["payloadBase64"].is_null(), "{omitted}");
    assert!(broker.wait_for(Duration::from_secs(20), || broker.drained()));
}

/// Kafka only: copies a producer writes into a retry topic - a forged signature, a due time
/// past the end of time - are set aside in `<prefix>.retry.invalid`, never delivered, and
/// hold back none of the real retries behind them in the same partition.
#[cfg(feature = "kafka")]
#[test]
fn on_kafka_forged_retry_copies_are_set_aside_and_hold_nothing_back() {
    use verdict_tests::kafka::KafkaFixture;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = KafkaFixture::new("forged");
    let consumer = Consumer::start(&runtime, behaviour);
    let gw = Broker::config(&broker, &consumer.url(), RULES_CONFIG, 8).start_on(
        runtime,
        &scratch_dir("kafka-forged"),
        "unused",
    );
    gw.wait_ready();
    // The bucket the rules' 20 ms retries wait in.
    let bucket = verdict_gateway::sources::delay_buckets::bucket_ms(20);
    let retry = broker.topic(&format!("retry.{bucket}"));
    let topic = Broker::topic(&broker);
    let never = u64::MAX.to_string();
    broker.produce(
        &retry,
        "m-forged",
        br#"{"order": 9999}"#,
        &[
            ("x-verdict-topic", topic.as_bytes()),
            ("x-verdict-message-id", b"m-forged"),
            ("x-verdict-attempt", b"0"),
            ("x-verdict-history", b"[]"),
            ("x-verdict-signature", b"00"),
            ("x-verdict-due-at-ms", never.as_bytes()),
        ],
    );
    // m-5..m-19 fail a few times first and retry through the same bucket: all delivered.
    Broker::publish(&broker, 0..20);
    let invalid = broker.topic("retry.invalid");
    assert!(
        broker.wait_for(Duration::from_secs(60), || {
            consumer.snapshot().1.len() == 15 && broker.dlq_depth() == 5
        }),
        "accepted {}, dead {}",
        consumer.snapshot().1.len(),
        broker.dlq_depth()
    );
    assert!(broker.wait_for(Duration::from_secs(10), || broker.depth(&invalid) == 1));
    assert!(
        !consumer.snapshot().0.contains_key("m-forged"),
        "never delivered"
    );
    let set_aside = &broker.records(&invalid)[0];
    let why = KafkaFixture::header(set_aside, "verdict-invalid-reason").unwrap();
    assert!(
        String::from_utf8_lossy(&why).contains("not signed"),
        "{why:?}"
    );
    assert_settled_as_behaviour(&consumer, 20);
}

/// Kafka only: a route in `blocking` mode (`[kafka] route_modes`) keeps each partition's
/// order through retries: a record that fails waits out its delay in place, and no later
/// record of its partition reaches the consumer before it is delivered or dead-lettered.
/// Nothing goes through a retry topic, and every offset is committed in the end.
#[cfg(feature = "kafka")]
#[test]
fn on_kafka_a_blocking_route_keeps_each_partitions_order_through_retries() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use rdkafka::Message as _;
    use verdict_tests::kafka::{KafkaFixture, PARTITIONS};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = KafkaFixture::new("blocking");
    // Every delivery in the order it reached the consumer.
    let arrivals = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = arrivals.clone();
    let consumer = Consumer::start(&runtime, move |id| {
        seen.lock().unwrap().push(id.to_string());
        behaviour(id)
    });
    let topic = Broker::topic(&broker);
    let section = format!(
        "{}route_modes = {{ \"{topic}\" = \"blocking\" }}\n",
        broker.section()
    );
    let gw = broker_config(
        &section,
        "kafka",
        &topic,
        "verdict",
        &consumer.url(),
        RULES_CONFIG,
        8,
    )
    .start_on(runtime, &scratch_dir("kafka-blocking"), "unused");
    gw.wait_ready();
    // m-0..m-4 fail for good, m-5..m-24 one to three times, the rest never.
    Broker::publish(&broker, 0..40);
    assert!(
        broker.wait_for(Duration::from_secs(90), || {
            consumer.snapshot().1.len() == 35 && broker.dlq_depth() == 5
        }),
        "accepted {}, dead {}",
        consumer.snapshot().1.len(),
        broker.dlq_depth()
    );
    assert_settled_as_behaviour(&consumer, 40);
    let place: HashMap<String, (i32, i64)> = broker
        .records(&topic)
        .iter()
        .map(|r| {
            let id = String::from_utf8(r.key().unwrap().to_vec()).unwrap();
            (id, (r.partition(), r.offset()))
        })
        .collect();
    let arrivals = arrivals.lock().unwrap().clone();
    for partition in 0..PARTITIONS {
        let offsets: Vec<i64> = arrivals
            .iter()
            .map(|id| place[id])
            .filter(|(p, _)| *p == partition)
            .map(|(_, offset)| offset)
            .collect();
        assert!(
            offsets.windows(2).all(|w| w[0] <= w[1]),
            "partition {partition}: a record reached the consumer before an earlier one was \
             done: {offsets:?}"
        );
    }
    let retries = broker.topic(&format!(
        "retry.{}",
        verdict_gateway::sources::delay_buckets::bucket_ms(20)
    ));
    assert_eq!(broker.depth(&retries), 0, "no retry went through a topic");
    assert!(broker.wait_for(Duration::from_secs(20), || broker.drained()));
}

/// Kafka only: a client nobody here wrote - kafka-python, a pure-Python implementation of
/// the protocol - produces to a Kafka route and reads its dead letters as a Spring Kafka
/// user's tools would: the record's own key, value and headers (a binary one byte for
/// byte), Spring's headers decoded in Spring's encodings, and the envelope.
#[cfg(feature = "kafka")]
#[test]
fn on_kafka_a_python_client_produces_and_reads_the_dead_letters() {
    use verdict_tests::kafka::{KafkaFixture, bootstrap};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = KafkaFixture::new("python");
    let consumer = Consumer::start(&runtime, behaviour);
    let gw = Broker::config(&broker, &consumer.url(), RULES_CONFIG, 8).start_on(
        runtime,
        &scratch_dir("kafka-python"),
        "unused",
    );
    gw.wait_ready();
    let topic = Broker::topic(&broker);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/support/kafka_python_client.py"
    );
    let out = std::process::Command::new("python3")
        .args([script, &bootstrap(), &topic, &broker.dlq(), "20", "5", "60"])
        .output()
        .expect("python3 on PATH");
    assert!(
        out.status.success(),
        "the kafka-python client failed (.ci/run installs kafka-python into the pytools \
         virtualenv, whose python3 comes first on PATH): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let letters: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    // m-0..m-4 fail for good; the rest are delivered once each.
    assert_eq!(letters.len(), 5, "{letters:#?}");
    let mut ids: Vec<&str> = letters.iter().map(|l| l["key"].as_str().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["m-0", "m-1", "m-2", "m-3", "m-4"]);
    for l in &letters {
        let id = l["key"].as_str().unwrap();
        let order: u64 = id.trim_start_matches("m-").parse().unwrap();
        assert_eq!(l["value"], format!(r#"{{"order": {order}}}"#), "{l}");
        assert_eq!(l["tenant"], "eu", "{l}");
        assert_eq!(
            l["trace_bin"], "ff0001",
            "a binary header byte for byte: {l}"
        );
        assert_eq!(l["original_topic"], topic.as_str(), "{l}");
        let partition = l["original_partition"].as_i64().unwrap();
        assert!(
            (0..i64::from(verdict_tests::kafka::PARTITIONS)).contains(&partition),
            "{l}"
        );
        assert!(
            (0..20).contains(&l["original_offset"].as_i64().unwrap()),
            "{l}"
        );
        assert!(
            l["original_timestamp"].as_i64().unwrap() > 1_600_000_000_000,
            "{l}"
        );
        assert_eq!(l["original_timestamp_type"], "CreateTime", "{l}");
        assert_eq!(l["original_consumer_group"], broker.group().as_str(), "{l}");
        assert_eq!(l["exception_fqcn"], "verdict.poison", "{l}");
        assert_eq!(l["envelope"]["original"]["id"], id, "{l}");
    }
    assert!(
        broker.wait_for(Duration::from_secs(30), || consumer.snapshot().1.len()
            == 15)
    );
    assert_settled_as_behaviour(&consumer, 20);
}

/// JetStream only: a delivery slower than `ack_wait_ms` is kept by in-progress acks, not
/// redelivered to another consumer.
#[test]
fn on_nats_in_progress_acks_keep_a_slow_delivery_from_being_redelivered() {
    let dir = scratch_dir("nats-slow");
    let nats = NatsFixture::new("slow");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The consumer takes 2.5 s; JetStream would redeliver after 1 s without progress acks.
    let consumer = Consumer::start(&runtime, |_| Behaviour::Slow(2_500));
    let gw = Broker::config(&nats, &consumer.url(), RULES_CONFIG, 8)
        .set("nats.ack_wait_ms", 1000)
        .map_routes(|r| r.set("consumer.timeout_ms", 5000))
        .start_on(runtime, &dir, "unused");
    gw.wait_ready();
    Broker::publish(&nats, 0..3);
    assert!(nats.wait_for(Duration::from_secs(30), || consumer.snapshot().1.len() == 3));
    assert!(nats.wait_for(Duration::from_secs(10), || nats.drained()));
    std::thread::sleep(Duration::from_millis(1_500));
    let (deliveries, _) = consumer.snapshot();
    assert!(
        deliveries.values().all(|n| *n == 1),
        "redelivered: {deliveries:?}"
    );
}

/// A one-route gateway on a broker: `section` is the fixture's `[nats]` or `[rabbitmq]`,
/// `group` the consumer group (on NATS, the durable consumer the gateways share).
pub(crate) fn broker_config(
    section: &str,
    source: &str,
    topic: &str,
    group: &str,
    consumer_url: &str,
    rules: &str,
    concurrency: usize,
) -> TestConfig {
    TestConfig::new()
        .unset("admin.token_file")
        .set("gateway.instance", format!("gw-{source}"))
        .set("gateway.consumer_group", group)
        .merge("gateway", section)
        .policy("rules", fixtures::RULES)
        .route(
            Route::new(topic, "rules")
                .set("source", source)
                .config(rules)
                .consumer(consumer_url)
                .set("consumer.concurrency", concurrency as i64),
        )
}

/// How late each retry came in `envelopes` (dead letters exhausted after four attempts of
/// `delay_ms` retries): every gap between consecutive failures minus the delay, sorted.
/// Asserts that each holds its whole history and that no retry came early.
fn retry_lateness(envelopes: &[Envelope], delay_ms: u64) -> Vec<u64> {
    let mut late = Vec::new();
    for e in envelopes {
        assert_eq!(e.attempts, 4, "{e:?}");
        assert_eq!(e.verdict.class, "exhausted", "{e:?}");
        let at: Vec<u64> = e.errors.iter().map(|x| x.at_ms).collect();
        assert_eq!(
            at.len(),
            4,
            "the whole history travels with the message: {e:?}"
        );
        for w in at.windows(2) {
            let gap = w[1] - w[0];
            assert!(
                gap >= delay_ms,
                "a retry came {} ms early: {at:?}",
                delay_ms - gap
            );
            late.push(gap - delay_ms);
        }
    }
    late.sort_unstable();
    late
}

/// Two gateways on one broker queue/consumer delivered `n` messages between them, each
/// some, and together exactly once each plus the duplicates the consumer saw.
fn assert_split(a: &Gateway, b: &Gateway, consumer: &Consumer, n: u64) {
    let duplicates: u32 = consumer.snapshot().1.values().map(|k| k - 1).sum();
    // The consumer counts an acceptance before its answer reaches the gateway, which counts
    // the delivery once the answer is in: the last answers may still be on their way.
    let _ = verdict_tests::wait_for(Duration::from_secs(5), || {
        a.delivered() + b.delivered() >= n + u64::from(duplicates)
    });
    let (from_a, from_b) = (a.delivered(), b.delivered());
    assert!(from_a > 0 && from_b > 0, "a {from_a}, b {from_b}");
    assert_eq!(from_a + from_b, n + u64::from(duplicates));
    eprintln!("two gateways: {from_a} + {from_b} deliveries, {duplicates} duplicates");
}
