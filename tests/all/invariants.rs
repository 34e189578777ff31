//! The delivery invariants (the book's "Guarantees"), each pinned by hostile input through a
//! real gateway (`Gateway::start_with`: what `verdict run` runs, on a config built in
//! code), a real HTTP consumer scripted to misbehave, and the real brokers on loopback:
//!
//! - I1 nothing lost, I2 no duplicate without a fault, I3 no poison loop, I4 routes
//!   isolated, I5 outside input bounded and clean.

use std::time::{Duration, Instant, SystemTime};

use async_nats::HeaderMap as NatsHeaders;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use serde_json::{Value, json};
use verdict_gateway::store::{DlqFilter, StateCounts};
use verdict_runtime::FailureSpec;
use verdict_tests::gateway::{Gateway, TestConfig};
use verdict_tests::nats::NatsFixture;
use verdict_tests::rabbitmq::RabbitFixture;
use verdict_tests::scripted::{Reply, Scripted};
use verdict_tests::{decider, fixtures, host, scratch_dir, wait_for};

/// 4xx dead-letter at once as permanent (3xx too), 5xx retry every 20 ms up to 3 attempts.
const STRICT: &str = r#"{ max_attempts = 3, rules = [
    { match = ["http.3*", "http.4*", "schema.*", "json.*", "format.*", "auth.*"], dead_letter = "permanent" },
    { match = ["http.5*", "transport.*"], retry = { strategy = "fixed", delay_ms = 20 } },
] }"#;

/// A gateway on the embedded store: `gateway` (TOML lines) goes into `[gateway]`,
/// `routes` is the route list (TOML), with the `rules` policy available as `rules`.
fn embedded(gateway: &str, routes: &str) -> TestConfig {
    TestConfig::new()
        .set("gateway.instance", "gw-invariants")
        .merge("gateway", gateway)
        .policy("rules", fixtures::RULES)
        .merge("", routes)
}

fn route(topic: &str, consumer: &str, extra: &str, config: &str) -> String {
    format!(
        r#"
[[routes]]
topic = "{topic}"
policy = "rules"
config = {config}
consumer = {{ url = "{consumer}", {extra} }}
"#
    )
}

/// The `[gateway]` keys and `[nats]` section of a gateway on this test's NATS names.
fn nats_gateway(nats: &NatsFixture) -> String {
    format!("consumer_group = \"{}\"\n{}", nats.prefix, nats.section())
}

/// A route consuming `topic` from the broker `source` (TOML).
fn broker_route(
    source: &str,
    topic: &str,
    consumer: &str,
    timeout_ms: u64,
    concurrency: usize,
    config: &str,
) -> String {
    format!(
        r#"
[[routes]]
topic = "{topic}"
source = "{source}"
policy = "rules"
config = {config}
consumer = {{ url = "{consumer}", timeout_ms = {timeout_ms}, concurrency = {concurrency} }}
"#
    )
}

fn publish(gw: &Gateway, topic: &str, messages: &[Value]) {
    let published: Value = gw
        .admin
        .post(&format!("/v1/topics/{topic}/messages"), &messages)
        .expect("publish");
    assert_eq!(
        published["accepted"].as_array().unwrap().len(),
        messages.len(),
        "{published}"
    );
}

fn ids(prefix: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"id": format!("{prefix}-{i}"), "payload": {"n": i}}))
        .collect()
}

/// The `verdict_settlement_faults_total` series of a gateway, as `(labels, value)`.
fn faults(gw: &Gateway) -> Vec<(String, u64)> {
    let metrics = gw.anonymous.get_text("/metrics").unwrap();
    metrics
        .lines()
        .filter(|l| l.starts_with("verdict_settlement_faults_total{"))
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once(' ')?;
            Some((labels.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Wait (at most `seconds`) until the store's counts satisfy `done`.
fn until(gw: &Gateway, seconds: u64, done: impl Fn(&StateCounts) -> bool) -> bool {
    wait_for(Duration::from_secs(seconds), || {
        gw.store.counts().is_ok_and(|c| done(&c))
    })
}

fn dead_letters(gw: &Gateway) -> Vec<verdict_gateway::store::DlqEntry> {
    gw.store.dlq_list(&DlqFilter::default(), u64::MAX).unwrap()
}

// ---------------------------------------------------------------- I2: no duplicate

/// A consumer slower than the lease, one delivery at a time: messages waiting for the
/// route's slot used to outlive their lease, be claimed again and reach the consumer two or
/// three times with nothing failing. Now a message is claimed only for a free slot, and a
/// running delivery's lease is kept.
#[test]
fn a_slow_consumer_gets_each_message_once_on_the_embedded_store() {
    let dir = scratch_dir("inv-slow");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Five messages of 1 s each behind one slot: the last waits 4 s, past a 3 s lease. (The
    // lease keeper renews every second: a loaded machine has 2 s of slack.)
    let consumer = Scripted::start(&runtime, |_| Reply::ok().after(Duration::from_secs(1)));
    let config = embedded(
        "lease_ms = 3000",
        &route(
            "orders",
            &consumer.url(),
            "timeout_ms = 2500, concurrency = 1",
            STRICT,
        ),
    );
    let gw = config.start_on(runtime, &dir, "t");
    publish(&gw, "orders", &ids("m", 5));
    assert!(
        until(&gw, 30, |c| c.delivered == 5),
        "{:?}",
        gw.store.counts()
    );
    // Longer than a lease: a stale lease would have brought a message back by now.
    std::thread::sleep(Duration::from_millis(3_500));
    let per_id = consumer.per_id();
    assert_eq!(per_id.len(), 5, "{per_id:?}");
    assert!(per_id.values().all(|n| *n == 1), "duplicates: {per_id:?}");
    assert_eq!(gw.store.audit_count("lease-expired").unwrap(), 0);
    assert!(
        faults(&gw).iter().all(|(_, n)| *n == 0),
        "{:?}",
        faults(&gw)
    );
}

// ---------------------------------------------------------------- I4: isolation

/// Route A's consumer hangs until its timeout; route B's answers at once. A's deliveries
/// hold A's own slots only: B's messages go through while A has hundreds waiting.
#[test]
fn a_hanging_route_does_not_hold_another_routes_slots_on_the_embedded_store() {
    let dir = scratch_dir("inv-isolated");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let slow = Scripted::start(&runtime, |_| Reply::ok().after(Duration::from_secs(5)));
    let fast = Scripted::start(&runtime, |_| Reply::ok());
    let routes = route(
        "a",
        &slow.url(),
        "timeout_ms = 2000, concurrency = 4",
        STRICT,
    ) + &route(
        "b",
        &fast.url(),
        "timeout_ms = 2000, concurrency = 4",
        STRICT,
    );
    let gw = embedded("max_in_flight = 8\nlease_ms = 5000", &routes).start_on(runtime, &dir, "t");
    publish(&gw, "a", &ids("a", 300));
    assert!(wait_for(Duration::from_secs(10), || slow.received().len() >= 4));
    let started = Instant::now();
    publish(&gw, "b", &ids("b", 20));
    let through = wait_for(Duration::from_secs(20), || fast.received().len() >= 20);
    let took = started.elapsed();
    println!("route b: 20 messages in {took:?} beside route a's 300 hanging ones");
    assert!(through, "route b got {} of 20", fast.received().len());
    // Route A holds its own concurrency and as many claimed ahead, no more.
    let counts = gw.store.counts().unwrap();
    assert!(counts.leased <= 8, "{counts:?}");
}

/// The same on RabbitMQ: queue A's consumer hangs, queue B's messages go through.
#[test]
fn a_hanging_queue_does_not_hold_another_queues_slots_on_rabbitmq() {
    let dir = scratch_dir("inv-rabbit-isolated");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rabbit = RabbitFixture::new("isolated");
    let slow = Scripted::start(&runtime, |_| Reply::ok().after(Duration::from_secs(5)));
    let fast = Scripted::start(&runtime, |_| Reply::ok());
    let route = |queue: &str, url: &str| broker_route("rabbitmq", queue, url, 2000, 4, STRICT);
    let routes =
        route(&rabbit.queue("orders"), &slow.url()) + &route(&rabbit.queue("other"), &fast.url());
    let config = embedded(
        &format!(
            "consumer_group = \"{}\"\nmax_in_flight = 8\n{}",
            rabbit.prefix,
            rabbit.section()
        ),
        &routes,
    );
    let gw = config.start_on(runtime, &dir, "t");
    gw.wait_ready();
    rabbit.publish("orders", 0..100);
    assert!(wait_for(Duration::from_secs(10), || slow.received().len() >= 4));
    let started = Instant::now();
    rabbit.publish("other", 0..20);
    let through = wait_for(Duration::from_secs(20), || fast.received().len() >= 20);
    println!(
        "queue other: 20 messages in {:?} beside 100 hanging ones",
        started.elapsed()
    );
    assert!(through, "queue other got {} of 20", fast.received().len());
}

/// Route A's consumer is down and `rules` backs off 20 s: thousands of A's messages wait
/// out a `nak` delay. They occupy A's own durable consumer only; B's messages arrive as fast
/// as without A's backlog, and A's new messages are still delivered (attempted).
#[test]
fn a_route_in_backoff_does_not_slow_another_route_on_nats() {
    const BACKLOG: u32 = 5_000;
    let dir = scratch_dir("inv-nats-isolated");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::new("isolated");
    let down = Scripted::start(&runtime, |_| Reply::status(503));
    let up = Scripted::start(&runtime, |_| Reply::ok());
    let backoff = r#"{ max_attempts = 10, rules = [
        { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
        { match = ["http.5*"], retry = { strategy = "exponential", base_ms = 20000, cap_ms = 60000 } },
    ] }"#;
    let routes = broker_route("nats", &nats.subject("a"), &down.url(), 2000, 32, backoff)
        + &broker_route("nats", &nats.subject("b"), &up.url(), 2000, 8, STRICT);
    // `[nats]` keeps its default `max_ack_pending` (no limit per route consumer).
    let config = embedded(&nats_gateway(&nats), &routes);
    let gw = config.start_on(runtime, &dir, "t");
    gw.wait_ready();

    let b_latency = |from: u32| {
        let started = Instant::now();
        let mut headers_ids = Vec::new();
        for i in from..from + 20 {
            let mut h = NatsHeaders::new();
            h.insert("Nats-Msg-Id", format!("b-{i}").as_str());
            nats.publish_raw("b", h, b"{}".to_vec());
            headers_ids.push(format!("b-{i}"));
        }
        let ok = wait_for(Duration::from_secs(30), || {
            let seen = up.per_id();
            headers_ids.iter().all(|id| seen.contains_key(id))
        });
        assert!(ok, "route b: {} of 20", up.received().len());
        started.elapsed()
    };
    let without = b_latency(0);

    let publish_started = Instant::now();
    nats.publish("a", 0..BACKLOG);
    let all_tried = wait_for(Duration::from_secs(180), || {
        down.per_id().len() == BACKLOG as usize
    });
    assert!(
        all_tried,
        "route a's new messages stalled: {} of {BACKLOG} delivered once",
        down.per_id().len()
    );
    let backlog_after = publish_started.elapsed();
    let with = b_latency(20);
    println!(
        "route b, 20 messages: {without:?} without route a's backlog, {with:?} with {BACKLOG} \
         of route a's messages in backoff (all {BACKLOG} delivered once in {backlog_after:?})"
    );
    // A's backlog sits on A's consumer; B's holds nothing - once the server has taken
    // the acknowledgements of B's last messages, a moment after the consumer answered.
    let b_settled = |consumers: &[(String, u64, usize)]| {
        consumers
            .iter()
            .filter(|(name, _, _)| name.contains("_b-"))
            .all(|c| c.2 == 0)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut consumers = nats.consumers(&nats.prefix);
    while !b_settled(&consumers) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        consumers = nats.consumers(&nats.prefix);
    }
    assert_eq!(consumers.len(), 2, "{consumers:?}");
    let pending_a: usize = consumers
        .iter()
        .filter(|(name, _, _)| name.contains("_a-"))
        .map(|c| c.2)
        .sum();
    assert!(pending_a > 0, "{consumers:?}");
    assert!(b_settled(&consumers), "{consumers:?}");
}

/// Two NATS routes whose subjects overlap (`orders.>` and `orders.vip`): each message is
/// delivered once, by the route the router picks (the more specific one for `orders.vip`).
#[test]
fn overlapping_nats_routes_deliver_each_message_once() {
    let dir = scratch_dir("inv-nats-overlap");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::new("overlap");
    let wide = Scripted::start(&runtime, |_| Reply::ok());
    let vip = Scripted::start(&runtime, |_| Reply::ok());
    let route = |topic: &str, url: &str| broker_route("nats", topic, url, 1000, 4, STRICT);
    let routes = route(&nats.subject("orders.>"), &wide.url())
        + &route(&nats.subject("orders.vip"), &vip.url());
    let config = embedded(&nats_gateway(&nats), &routes);
    let gw = config.start_on(runtime, &dir, "t");
    gw.wait_ready();
    for (topic, prefix) in [("orders.eu", "eu"), ("orders.vip", "vip")] {
        for i in 0..10 {
            let mut h = NatsHeaders::new();
            h.insert("Nats-Msg-Id", format!("{prefix}-{i}").as_str());
            nats.publish_raw(topic, h, b"{}".to_vec());
        }
    }
    assert!(wait_for(Duration::from_secs(20), || {
        wide.received().len() >= 10 && vip.received().len() >= 10
    }));
    // Past a few pulls: a message the wide route also matched would have come by now.
    std::thread::sleep(Duration::from_secs(2));
    let (wide, vip) = (wide.per_id(), vip.per_id());
    assert_eq!(wide.len(), 10, "{wide:?}");
    assert!(wide.keys().all(|id| id.starts_with("eu-")), "{wide:?}");
    assert_eq!(vip.len(), 10, "{vip:?}");
    assert!(wide.values().chain(vip.values()).all(|n| *n == 1));
    assert!(
        nats.wait_for(Duration::from_secs(10), || nats.pending(&nats.prefix)
            == (0, 0))
    );
}

/// A gateway of an earlier version consumed every route through one shared durable
/// consumer (named like the prefix). Its route consumers start where that one stopped
/// acknowledging: what it had acknowledged is not delivered again, what it had not is not
/// lost.
#[test]
fn route_consumers_take_over_from_the_shared_durable_of_an_earlier_version() {
    use async_nats::jetstream::{self, consumer};
    use futures_util::StreamExt as _;
    let dir = scratch_dir("inv-nats-upgrade");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::new("upgrade");
    let consumer_http = Scripted::start(&runtime, |_| Reply::ok());
    let topic = nats.subject("orders");
    // The earlier version's stream and shared durable; it took and acknowledged m-0, m-1.
    let js = nats.js.clone();
    let (stream_name, prefix) = (nats.prefix.clone(), nats.prefix.clone());
    let subject = topic.clone();
    let setup = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let stream = js
                .create_stream(jetstream::stream::Config {
                    name: stream_name,
                    subjects: vec![subject],
                    ..Default::default()
                })
                .await
                .unwrap();
            stream
                .create_consumer(consumer::pull::Config {
                    durable_name: Some(prefix),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ..Default::default()
                })
                .await
                .unwrap()
        })
    });
    let legacy = setup.join().unwrap();
    nats.publish("orders", 0..5);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut batch = legacy.fetch().max_messages(2).messages().await.unwrap();
        while let Some(Ok(m)) = batch.next().await {
            m.double_ack().await.unwrap();
        }
    });
    let config = embedded(
        &nats_gateway(&nats),
        &broker_route("nats", &topic, &consumer_http.url(), 1000, 4, STRICT),
    );
    let gw = config.start_on(runtime, &dir, "t");
    gw.wait_ready();
    assert!(wait_for(Duration::from_secs(20), || consumer_http
        .received()
        .len()
        >= 3));
    std::thread::sleep(Duration::from_secs(1));
    let mut seen: Vec<String> = consumer_http.per_id().into_keys().collect();
    seen.sort();
    assert_eq!(seen, ["m-2", "m-3", "m-4"]);
    drop(gw);
}

// ---------------------------------------------------------------- I3: no poison loop

/// A consumer answering 422 with a CR/LF in its error kind: the kind is not used (it would
/// go into a header), the message is dead-lettered once, and JetStream does not redeliver it.
#[test]
fn a_kind_with_crlf_is_dead_lettered_once_not_looped_on_nats() {
    let dir = scratch_dir("inv-nats-crlf");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::new("crlf");
    let consumer = Scripted::start(&runtime, |_| {
        Reply::status(422)
            .header("content-type", "application/json")
            .body(r#"{"error": {"kind": "schema.bad\r\nx-injected: 1", "message": "bad\r\nx-other: 2"}}"#)
    });
    let topic = nats.subject("orders");
    let config = embedded(
        &nats_gateway(&nats),
        &broker_route("nats", &topic, &consumer.url(), 1000, 4, STRICT),
    )
    .set("nats.ack_wait_ms", 2000);
    let gw = config.start_on(runtime, &dir, "t");
    gw.wait_ready();
    nats.publish("orders", 0..1);
    assert!(wait_for(Duration::from_secs(20), || nats
        .messages("_DLQ")
        .len()
        == 1));
    // Well past ack_wait: a message left unsettled would have come back twice by now.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(consumer.count("m-0"), 1, "{:?}", consumer.per_id());
    let letters = nats.messages("_DLQ");
    assert_eq!(letters.len(), 1);
    let headers = letters[0].headers.clone();
    assert_eq!(
        headers.get("verdict-kind").map(|v| v.as_str()),
        Some("http.422")
    );
    assert!(headers.get("x-injected").is_none());
    let envelope: Value = serde_json::from_slice(&letters[0].payload).unwrap();
    let message = envelope["errors"][0]["message"].as_str().unwrap();
    assert!(!message.contains(['\r', '\n']), "{message:?}");
    assert!(
        faults(&gw).iter().all(|(_, n)| *n == 0),
        "{:?}",
        faults(&gw)
    );
}

fn rabbit_config(rabbit: &RabbitFixture, consumer: &str, prefetch: u16) -> TestConfig {
    let section = rabbit
        .section()
        .replace("prefetch = 32", &format!("prefetch = {prefetch}"));
    embedded(
        &format!("consumer_group = \"{}\"\n{section}", rabbit.prefix),
        &broker_route(
            "rabbitmq",
            &rabbit.queue("orders"),
            consumer,
            1000,
            8,
            STRICT,
        ),
    )
}

/// Eight messages a producer published with Verdict's own history headers - an attempt
/// count of `u32::MAX` and a failure dated past the year 9999 - to a route that dead-letters
/// them: the forged headers are ignored (unsigned), each is dead-lettered after its one real
/// attempt, and a normal message behind them (`prefetch = 8`) is delivered.
#[test]
fn forged_history_headers_neither_loop_nor_stall_a_rabbitmq_queue() {
    let dir = scratch_dir("inv-rabbit-forged");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rabbit = RabbitFixture::new("forged");
    let consumer = Scripted::start(&runtime, |r| {
        if r.id.starts_with("poison") {
            Reply::status(422).body(r#"{"error": {"kind": "schema.bad"}}"#)
        } else {
            Reply::ok()
        }
    });
    let gw = rabbit_config(&rabbit, &consumer.url(), 8).start_on(runtime, &dir, "t");
    gw.wait_ready();
    for i in 0..8 {
        let mut headers = FieldTable::default();
        headers.insert(
            "x-verdict-attempt".into(),
            AMQPValue::LongLongInt(i64::from(u32::MAX)),
        );
        headers.insert(
            "x-verdict-history".into(),
            AMQPValue::LongString(LongString::from(
                r#"[{"at-ms": 18446744073709551615, "kind": "x", "message": "from the future"}]"#,
            )),
        );
        headers.insert(
            "x-verdict-signature".into(),
            AMQPValue::LongString(LongString::from("00".repeat(32))),
        );
        let properties = BasicProperties::default()
            .with_message_id(ShortString::from(format!("poison-{i}")))
            .with_headers(headers);
        rabbit.publish_raw("orders", properties, b"{}");
    }
    let fine = BasicProperties::default().with_message_id(ShortString::from("fine"));
    rabbit.publish_raw("orders", fine, b"{}");
    let dlq = format!("{}.DLQ", rabbit.queue("orders"));
    assert!(
        wait_for(Duration::from_secs(20), || consumer.count("fine") == 1
            && rabbit.depth(&dlq) == 8),
        "fine: {}, dlq: {}",
        consumer.count("fine"),
        rabbit.depth(&dlq)
    );
    for (properties, body) in rabbit.take_all(&dlq) {
        let envelope: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(envelope["attempts"], 1, "{envelope}");
        let errors = envelope["errors"].as_array().unwrap();
        assert_eq!(
            errors.len(),
            1,
            "the forged history is not in it: {envelope}"
        );
        let headers = properties.headers().clone().unwrap();
        assert!(
            headers
                .inner()
                .keys()
                .all(|k| !k.as_str().starts_with("x-verdict-")),
            "{headers:?}"
        );
    }
    for i in 0..8 {
        assert_eq!(consumer.count(&format!("poison-{i}")), 1);
    }
}

/// The DLQ refuses every dead letter (a broker policy: `max-length` 0, `reject-publish`):
/// settling fails. The message is given back a bounded number of times, then released at a
/// bounded rate - never left unacked, never requeued in a tight loop - and it reaches the
/// DLQ once the DLQ takes it.
#[test]
fn a_dlq_that_refuses_letters_releases_the_message_at_a_bounded_rate_on_rabbitmq() {
    let dir = scratch_dir("inv-rabbit-refused");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rabbit = RabbitFixture::new("refused");
    let dlq = format!("{}.DLQ", rabbit.queue("orders"));
    let policy = format!("{}-refuse", rabbit.prefix);
    let rabbitmqctl = |args: &[&str]| {
        let out = std::process::Command::new("rabbitmqctl")
            .args(args)
            .output()
            .expect("rabbitmqctl runs (the broker tests run as root beside the server)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    rabbitmqctl(&[
        "set_policy",
        "--apply-to",
        "queues",
        &policy,
        &format!("^{}$", dlq.replace('.', "\\.")),
        r#"{"max-length": 0, "overflow": "reject-publish"}"#,
    ]);
    struct Unset<F: Fn()>(F);
    impl<F: Fn()> Drop for Unset<F> {
        fn drop(&mut self) {
            (self.0)();
        }
    }
    let _unset = Unset(|| {
        let _ = std::process::Command::new("rabbitmqctl")
            .args(["clear_policy", &policy])
            .output();
    });
    let consumer = Scripted::start(&runtime, |_| {
        Reply::status(422).body(r#"{"error": {"kind": "schema.bad"}}"#)
    });
    let gw = rabbit_config(&rabbit, &consumer.url(), 8).start_on(runtime, &dir, "t");
    gw.wait_ready();
    rabbit.publish("orders", 0..1);
    // Three failed settlements in a row, then the gateway's own dead letter fails too: the
    // message waits 5 s in a delay bucket.
    assert!(wait_for(Duration::from_secs(10), || consumer.count("m-0") >= 3));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(consumer.count("m-0"), 3, "released at a bounded rate");
    assert_eq!(rabbit.depth(&dlq), 0);
    let released: u64 = faults(&gw)
        .iter()
        .filter(|(l, _)| l.contains("released"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(released, 3, "{:?}", faults(&gw));
    // The DLQ takes letters again: the message gets there at its next delivery.
    let _ = std::process::Command::new("rabbitmqctl")
        .args(["clear_policy", &policy])
        .output();
    assert!(
        wait_for(Duration::from_secs(20), || rabbit.depth(&dlq) == 1),
        "deliveries: {}",
        consumer.count("m-0")
    );
}

// ---------------------------------------------------------------- I5: bounded and clean

/// A consumer that redirects (`307`) to another address: the payload is not re-POSTed
/// there, and the delivery is a failure (`http.307`), not a success.
#[test]
fn a_redirect_is_a_failure_and_is_never_followed() {
    let dir = scratch_dir("inv-redirect");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let thief = Scripted::start(&runtime, |_| Reply::ok());
    let stolen = format!("{}stolen", thief.url());
    let consumer = Scripted::start(&runtime, move |_| {
        Reply::status(307).header("location", &stolen)
    });
    let config = embedded(
        "",
        &route("orders", &consumer.url(), "timeout_ms = 1000", STRICT),
    );
    let gw = config.start_on(runtime, &dir, "t");
    publish(
        &gw,
        "orders",
        &[json!({"id": "card", "payload": {"pan": "4111111111111111"}})],
    );
    assert!(until(&gw, 10, |c| c.dead == 1), "{:?}", gw.store.counts());
    assert!(
        thief.received().is_empty(),
        "followed to {:?}",
        thief.received()
    );
    let dead = dead_letters(&gw);
    assert_eq!(dead[0].kind, "http.307");
    assert_eq!(gw.store.counts().unwrap().delivered, 0);
}

/// `Retry-After` as an HTTP-date (RFC 9110 allows it besides seconds) is the retry hint.
#[test]
fn a_retry_after_http_date_is_honoured() {
    let dir = scratch_dir("inv-retry-after");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Scripted::start(&runtime, |r| {
        if r.header("x-verdict-attempt") == Some("1") {
            let at = SystemTime::now() + Duration::from_secs(4);
            Reply::status(503).header("retry-after", &httpdate::fmt_http_date(at))
        } else {
            Reply::ok()
        }
    });
    let config = embedded(
        "",
        &route("orders", &consumer.url(), "timeout_ms = 1000", STRICT),
    );
    let gw = config.start_on(runtime, &dir, "t");
    publish(&gw, "orders", &ids("m", 1));
    assert!(wait_for(Duration::from_secs(15), || consumer.count("m-0") == 2));
    let seen = consumer.received();
    let gap = seen[1].at - seen[0].at;
    // The date has one-second resolution: at least 3 s of the 4 remain.
    assert!(gap >= Duration::from_secs(3), "retried after {gap:?}");
}

/// A producer's headers cannot speak for the gateway: its `x-verdict-attempt` (wrapping the
/// attempt budget), `x-verdict-topic`, `Host` and `Authorization` never reach the consumer;
/// the gateway's own values do.
#[test]
fn producer_headers_cannot_speak_for_the_gateway() {
    let dir = scratch_dir("inv-headers");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Scripted::start(&runtime, |r| {
        if r.header("x-verdict-attempt") == Some("1") {
            Reply::status(503)
        } else {
            Reply::ok()
        }
    });
    let config = embedded(
        "",
        &route("orders", &consumer.url(), "timeout_ms = 1000", STRICT),
    );
    let gw = config.start_on(runtime, &dir, "t");
    publish(
        &gw,
        "orders",
        &[json!({
            "id": "m-0",
            "headers": {
                "x-verdict-attempt": "4294967295",
                "X-Verdict-Topic": "payments",
                "host": "evil.example",
                "authorization": "Bearer stolen",
                "tenant": "eu",
            },
            "payload": {},
        })],
    );
    assert!(wait_for(Duration::from_secs(10), || consumer.count("m-0") == 2));
    let seen = consumer.received();
    for (i, r) in seen.iter().enumerate() {
        let attempt = (i + 1).to_string();
        assert_eq!(r.headers["x-verdict-attempt"], [attempt.as_str()], "{r:?}");
        assert_eq!(r.headers["x-verdict-topic"], ["orders"], "{r:?}");
        assert_eq!(r.header("tenant"), Some("eu"));
        assert!(r.header("authorization").is_none(), "{r:?}");
        assert_eq!(r.header("host"), Some(consumer.addr.to_string().as_str()));
    }
}

/// A consumer's error body is read no further than the cap, and what it says is bounded.
#[test]
fn a_huge_error_body_is_capped_and_its_message_bounded() {
    let dir = scratch_dir("inv-huge-body");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Scripted::start(&runtime, |_| {
        Reply::status(422).body(format!(
            r#"{{"error": {{"kind": "schema.bad", "message": "{}"}}}}"#,
            "m".repeat(20 << 20)
        ))
    });
    let config = embedded(
        "",
        &route("orders", &consumer.url(), "timeout_ms = 5000", STRICT),
    );
    let gw = config.start_on(runtime, &dir, "t");
    publish(&gw, "orders", &ids("m", 1));
    assert!(until(&gw, 20, |c| c.dead == 1), "{:?}", gw.store.counts());
    let dead = dead_letters(&gw);
    // Past the cap the JSON is cut, so the kind is the status's and the text is the start.
    assert_eq!(dead[0].kind, "http.422");
    let message = &dead[0].envelope.errors[0].message;
    assert!(message.len() <= 512, "{}", message.len());
}

/// Config values at the edge of `u64`: `now + lease_ms` and `at + delay_ms` saturate instead
/// of wrapping (or failing every claim, which looped the message).
#[test]
fn a_lease_at_the_end_of_time_neither_wraps_nor_loops() {
    let dir = scratch_dir("inv-lease-max");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Scripted::start(&runtime, |_| Reply::ok());
    // `u64::MAX` is past what a TOML value built in code holds (an `i64`): written into the
    // file's text, as an operator would write it.
    let text = embedded(
        "",
        &route("orders", &consumer.url(), "timeout_ms = 1000", STRICT),
    )
    .text()
    .replacen(
        "[gateway]\n",
        "[gateway]\nlease_ms = 18446744073709551615\n",
        1,
    );
    assert!(text.contains("lease_ms = 18446744073709551615"), "{text}");
    let gw = Gateway::start_on(runtime, &dir, &text, "t");
    publish(&gw, "orders", &ids("m", 3));
    assert!(
        until(&gw, 10, |c| c.delivered == 3),
        "{:?}",
        gw.store.counts()
    );
    assert_eq!(consumer.received().len(), 3);
}

/// A binary payload reaches the policy byte for byte (not through JSON text), and
/// `payload-size` is its length.
#[test]
fn a_binary_payload_reaches_the_policy_byte_for_byte() {
    let host = host();
    let echo = decider(&host, fixtures::HOSTILE, r#"{"mode": "echo"}"#);
    let bytes = vec![0xff, 0x00, 0xfe, b'a', 0x80];
    let failure = FailureSpec::from_json(r#"{"error": {"kind": "http.503"}}"#)
        .unwrap()
        .into_failure()
        .with_payload(bytes.clone());
    let decision = echo.decide(&failure);
    let labels = &decision.verdict.labels;
    let label = |k: &str| {
        labels
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(label("payload-size"), Some("5".into()), "{labels:?}");
    assert_eq!(
        label("payload"),
        Some(String::from_utf8_lossy(&bytes).into_owned())
    );
}

/// The same through a real gateway on RabbitMQ: a binary body (not UTF-8) reaches the
/// policy as the same 5 bytes, and the dead letter keeps them.
#[test]
fn a_binary_payload_reaches_the_policy_through_the_gateway() {
    let dir = scratch_dir("inv-binary");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rabbit = RabbitFixture::new("binary");
    let consumer = Scripted::start(&runtime, |_| Reply::status(503));
    // The echo policy retries, labelling what it read; one attempt allowed makes that a
    // dead letter with the labels.
    let routes = format!(
        r#"
[[routes]]
topic = "{queue}"
source = "rabbitmq"
policy = "hostile"
config = {{ mode = "echo" }}
consumer = {{ url = "{url}", timeout_ms = 1000 }}
settings = {{ guardrails = {{ max_attempts = 1 }} }}
[policies.hostile]
path = "{hostile}"
[admission]
properties = false
"#,
        queue = rabbit.queue("orders"),
        url = consumer.url(),
        hostile = fixtures::HOSTILE,
    );
    let config = embedded(
        &format!(
            "consumer_group = \"{}\"\n{}",
            rabbit.prefix,
            rabbit.section()
        ),
        &routes,
    );
    let gw = config.start_on(runtime, &dir, "t");
    gw.wait_ready();
    let bytes = [0xff, 0x00, 0xfe, b'a', 0x80];
    let properties = BasicProperties::default().with_message_id(ShortString::from("bin"));
    rabbit.publish_raw("orders", properties, &bytes);
    let dlq = format!("{}.DLQ", rabbit.queue("orders"));
    assert!(wait_for(Duration::from_secs(20), || rabbit.depth(&dlq) == 1));
    let (_, body) = rabbit.take_all(&dlq).remove(0);
    let envelope: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        envelope["verdict"]["labels"]["payload-size"], "5",
        "{envelope}"
    );
    assert_eq!(
        envelope["original"]["payloadBase64"], "/wD+YYA=",
        "{envelope}"
    );
    drop(gw);
}

/// A policy whose panic message is megabytes long: what reaches the decision (and so logs,
/// metrics and every envelope) is one bounded line.
#[test]
fn a_policys_panic_message_is_bounded() {
    let host = host();
    let hostile = decider(&host, fixtures::HOSTILE, r#"{"mode": "huge-panic"}"#);
    let failure = verdict_tests::at("http.503", 1);
    let decision = hostile.decide(&failure);
    let fault = decision.fallback.expect("the fallback applies");
    let text = fault.to_string();
    assert!(text.len() <= 600, "{}", text.len());
    assert!(!text.contains('\n'));
}
