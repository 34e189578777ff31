//! Traces through the gateway, received by a real OTLP receiver (OTLP/HTTP protobuf and
//! OTLP/gRPC, decoded with `opentelemetry-proto`): a message its producer sent with a
//! `traceparent` fails twice, is dead-lettered, replayed and delivered - on the embedded
//! store (over OTLP/HTTP and OTLP/gRPC), NATS, RabbitMQ and Kafka. Each attempt is one span tree in the producer's trace, linked to
//! the creation context; the consumer receives a `traceparent` whose parent is the push
//! span; the dead letter is a PRODUCER span whose context the envelope keeps; the replay is a
//! new trace linked to the creation context and to that span, and the replayed delivery
//! continues it. No span carries the payload.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::otlp::{self, Receiver, Span, kind};
use verdict_tests::{fixtures, scratch_dir};

const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";
const PRODUCER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// In the payload only: no span may carry it.
const PAYLOAD_MARK: &str = "payload-must-not-leak-7f3a";
/// Two attempts, the first retried after 50 ms, the second dead-lettered (exhausted).
const RULES: &str = r#"{ max_attempts = 2, rules = [
    { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
    { match = ["http.5*"], retry = { strategy = "fixed", delay_ms = 50 } },
] }"#;

/// A consumer that answers 503 until it is made healthy, recording each request's
/// `x-verdict-attempt` and `traceparent`.
struct Recording {
    url: String,
    seen: Arc<Mutex<Vec<(u32, String)>>>,
    healthy: Arc<AtomicBool>,
}

impl Recording {
    fn start(runtime: &tokio::runtime::Runtime) -> Recording {
        let seen: Arc<Mutex<Vec<(u32, String)>>> = Arc::default();
        let healthy = Arc::new(AtomicBool::new(false));
        let (kept, ok) = (seen.clone(), healthy.clone());
        let router = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
            let (kept, ok) = (kept.clone(), ok.clone());
            async move {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string()
                };
                kept.lock().unwrap().push((
                    header("x-verdict-attempt").parse().unwrap_or(0),
                    header("traceparent"),
                ));
                if ok.load(Ordering::SeqCst) {
                    axum::http::StatusCode::OK
                } else {
                    axum::http::StatusCode::SERVICE_UNAVAILABLE
                }
            }
        });
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, router).await });
        Recording { url, seen, healthy }
    }

    fn seen(&self) -> Vec<(u32, String)> {
        self.seen.lock().unwrap().clone()
    }
}

/// `[telemetry]` exporting to `receiver` over `protocol`, spans sent every 100 ms.
fn telemetry(config: TestConfig, receiver: &Receiver, grpc: bool) -> TestConfig {
    let (endpoint, protocol) = if grpc {
        (&receiver.grpc_url, "grpc")
    } else {
        (&receiver.http_url, "http/protobuf")
    };
    config.merge(
        "telemetry",
        &format!(
            "endpoint = \"{endpoint}\"\nprotocol = \"{protocol}\"\nbatch_delay_ms = 100\n\
             service_name = \"verdict-under-test\"\n"
        ),
    )
}

fn wait(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + limit;
    while std::time::Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// The `traceparent` fields: trace id, parent span id.
fn parts(traceparent: &str) -> (String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent:?}");
    (p[1].to_string(), p[2].to_string())
}

/// Run the scenario on a started gateway: `publish` sends the message (id `m-1`, the
/// producer's `traceparent`, a payload with [`PAYLOAD_MARK`]); `source` is the DLQ tools'
/// `source` (none: the store). Returns the printed span trees.
fn scenario(
    gw: &Gateway,
    consumer: &Recording,
    receiver: &Receiver,
    source: Option<&str>,
    publish: impl FnOnce(),
) -> String {
    gw.wait_ready();
    publish();
    let query = source.map_or(String::new(), |s| format!("?source={s}"));
    let mut letters: Vec<Value> = Vec::new();
    let dead = wait(Duration::from_secs(60), || {
        letters = gw.admin.get(&format!("/v1/dlq{query}")).unwrap();
        !letters.is_empty()
    });
    assert!(
        dead,
        "no dead letter; the consumer saw {:?}",
        consumer.seen()
    );
    assert_eq!(letters.len(), 1, "{letters:?}");
    let envelope = &letters[0]["envelope"];
    assert_eq!(
        envelope["original"]["headers"]["traceparent"], PRODUCER,
        "{envelope}"
    );
    assert_eq!(envelope["trace"]["creation"], PRODUCER, "{envelope}");
    let dead_letter_context = envelope["trace"]["deadLetter"]
        .as_str()
        .unwrap_or_else(|| panic!("the envelope keeps the dead letter's span: {envelope}"))
        .to_string();

    consumer.healthy.store(true, Ordering::SeqCst);
    let mut filter = json!({});
    if let Some(source) = source {
        filter["source"] = json!(source);
    }
    let report: Value = gw
        .admin
        .post(
            "/v1/dlq/replay",
            &json!({"filter": filter, "note": "traced"}),
        )
        .unwrap();
    assert_eq!(report["replayed"], 1, "{report}");
    assert!(
        wait(Duration::from_secs(60), || consumer.seen().len() >= 3),
        "the replay was not delivered: {:?}",
        consumer.seen()
    );

    // 3 attempts (process, push, settle), the dead letter and the replay.
    let spans = receiver.wait_for(Duration::from_secs(30), |s| {
        s.iter()
            .filter(|s| s.service == "verdict-under-test")
            .count()
            >= 11
    });
    let spans: Vec<Span> = spans
        .into_iter()
        .filter(|s| s.service == "verdict-under-test")
        .collect();
    let children = |parent: &Span| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| s.trace_id == parent.trace_id && s.parent_span_id == parent.span_id)
            .collect()
    };
    for s in &spans {
        for (key, value) in &s.attributes {
            assert!(
                !value.contains(PAYLOAD_MARK),
                "{key} carries the payload: {s:?}"
            );
        }
    }

    // The two attempts before the dead letter: in the producer's trace, children of its
    // span, linked to it.
    let mut processes: Vec<&Span> = spans
        .iter()
        .filter(|s| s.kind == kind::CONSUMER && s.trace_id == PRODUCER_TRACE)
        .collect();
    processes.sort_by_key(|s| s.start_ns);
    assert_eq!(processes.len(), 2, "{spans:#?}");
    let seen = consumer.seen();
    for (i, process) in processes.iter().enumerate() {
        let attempt = (i + 1).to_string();
        assert_eq!(process.parent_span_id, PRODUCER_SPAN, "{process:?}");
        assert!(
            process
                .links
                .iter()
                .any(|(t, s, _)| t == PRODUCER_TRACE && s == PRODUCER_SPAN),
            "linked to the creation context: {process:?}"
        );
        let a = &process.attributes;
        assert_eq!(a["verdict.attempt"], attempt, "{process:?}");
        assert_eq!(a["messaging.operation.type"], "process");
        assert_eq!(a["messaging.message.id"], "m-1");
        assert_eq!(a["verdict.policy.name"], "rules");
        assert_eq!(
            a["verdict.class"],
            if i == 0 { "transient" } else { "exhausted" }
        );
        assert_eq!(
            a["verdict.action"],
            if i == 0 { "retry" } else { "dead-letter" }
        );
        assert_eq!(
            a["verdict.outcome"],
            if i == 0 {
                "retry-scheduled"
            } else {
                "dead-lettered"
            }
        );
        assert!(a.contains_key("verdict.route") && a.contains_key("verdict.policy.sha256"));
        let kids = children(process);
        let push = kids
            .iter()
            .find(|s| s.kind == kind::CLIENT)
            .unwrap_or_else(|| panic!("a push span under {process:?}: {kids:?}"));
        assert_eq!(push.attributes["http.response.status_code"], "503");
        assert_eq!(
            push.attributes
                .get("http.request.resend_count")
                .map(String::as_str),
            (i == 1).then_some("1"),
            "{push:?}"
        );
        assert_eq!(push.status, 2, "a failed push is an error: {push:?}");
        // The consumer's request carried the push span as its parent.
        let (trace, parent) = parts(&seen[i].1);
        assert_eq!(
            (trace.as_str(), parent.as_str()),
            (PRODUCER_TRACE, push.span_id.as_str())
        );
        assert_eq!(seen[i].0, i as u32 + 1);
        let settle = kids
            .iter()
            .find(|s| s.name == "settle" && s.kind == kind::INTERNAL)
            .unwrap_or_else(|| panic!("a settle span under {process:?}: {kids:?}"));
        assert_eq!(settle.attributes["verdict.outcome"], a["verdict.outcome"]);
    }
    let letter = children(processes[1])
        .into_iter()
        .find(|s| s.kind == kind::PRODUCER)
        .unwrap_or_else(|| panic!("a dead-letter span under {:?}", processes[1]));
    assert!(
        letter.name.starts_with("send ") && letter.name.ends_with("DLQ"),
        "{letter:?}"
    );
    let (trace, span) = parts(&dead_letter_context);
    assert_eq!(
        (trace.as_str(), span.as_str()),
        (PRODUCER_TRACE, letter.span_id.as_str())
    );

    // The replay: a trace of its own, linked to the creation context and the dead letter.
    let replay = spans
        .iter()
        .find(|s| s.kind == kind::PRODUCER && s.attributes.contains_key("verdict.replay"))
        .unwrap_or_else(|| panic!("a replay span: {spans:#?}"));
    assert_ne!(replay.trace_id, PRODUCER_TRACE);
    assert!(replay.parent_span_id.is_empty(), "{replay:?}");
    let linked = |trace: &str, span: &str, role: &str| {
        replay.links.iter().any(|(t, s, a)| {
            t == trace && s == span && a.get("verdict.link").map(String::as_str) == Some(role)
        })
    };
    assert!(
        linked(PRODUCER_TRACE, PRODUCER_SPAN, "creation"),
        "{replay:?}"
    );
    assert!(
        linked(PRODUCER_TRACE, &letter.span_id, "dead-letter"),
        "{replay:?}"
    );
    let delivered = spans
        .iter()
        .find(|s| s.kind == kind::CONSUMER && s.trace_id == replay.trace_id)
        .unwrap_or_else(|| panic!("the replayed delivery in the replay's trace: {spans:#?}"));
    assert_eq!(delivered.parent_span_id, replay.span_id);
    assert_eq!(delivered.attributes["verdict.outcome"], "delivered");
    assert_eq!(delivered.attributes["verdict.attempt"], "1");
    let push = children(delivered)
        .into_iter()
        .find(|s| s.kind == kind::CLIENT)
        .expect("the replay's push");
    let (trace, parent) = parts(&seen[2].1);
    assert_eq!(
        (trace.as_str(), parent.as_str()),
        (replay.trace_id.as_str(), push.span_id.as_str())
    );

    let shown = [
        "verdict.attempt",
        "verdict.action",
        "verdict.outcome",
        "http.response.status_code",
        "http.request.resend_count",
    ];
    format!(
        "{}{}",
        otlp::tree(&spans, PRODUCER_TRACE, &shown),
        otlp::tree(&spans, &replay.trace_id, &shown)
    )
}

fn config(consumer: &Recording) -> TestConfig {
    TestConfig::new()
        .set("gateway.instance", "gw-traced")
        .policy("rules", fixtures::RULES)
        .route(
            Route::new("orders", "rules")
                .config(RULES)
                .consumer(&consumer.url),
        )
}

#[test]
fn on_the_embedded_store_a_message_is_traced_through_retries_the_dlq_and_replay() {
    let dir = scratch_dir("traces-embedded");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let receiver = Receiver::start(&runtime);
    let consumer = Recording::start(&runtime);
    let gw = telemetry(config(&consumer), &receiver, false).start_on(runtime, &dir, "trace-token");
    let tree = scenario(&gw, &consumer, &receiver, None, || {
        let _: Value = gw
            .admin
            .post(
                "/v1/topics/orders/messages",
                &json!({
                    "id": "m-1",
                    "headers": {"traceparent": PRODUCER, "tracestate": "vendor=1"},
                    "payload": {"note": PAYLOAD_MARK},
                }),
            )
            .unwrap();
    });
    println!("{tree}");
    assert!(receiver.spans().iter().all(|s| s.transport == "http"));

    // A producer's hostile trace context is no context: the message is delivered in a trace
    // of its own, and what the consumer receives is the gateway's valid one.
    let hostile = format!("{PRODUCER}\r\nx-injected: 1{}", "0".repeat(300));
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "m-2", "headers": {"traceparent": hostile, "tracestate": "=,=;;"}, "payload": 2}),
        )
        .unwrap();
    let spans = receiver.wait_for(Duration::from_secs(30), |s| {
        s.iter()
            .any(|s| s.attributes.get("messaging.message.id").map(String::as_str) == Some("m-2"))
    });
    let process = spans
        .iter()
        .find(|s| s.kind == kind::CONSUMER && s.attributes["messaging.message.id"] == "m-2")
        .unwrap_or_else(|| panic!("m-2's process span: {spans:#?}"));
    assert!(
        process.parent_span_id.is_empty() && process.links.is_empty(),
        "{process:?}"
    );
    assert_ne!(process.trace_id, PRODUCER_TRACE);
    let received = consumer.seen().last().cloned().unwrap();
    assert_eq!(parts(&received.1).0, process.trace_id, "{received:?}");

    // A producer that did not sample its trace decides for the gateway (parent-based
    // sampling): no span is exported, and the consumer continues the trace, unsampled.
    let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "m-3", "headers": {"traceparent": unsampled}, "payload": 3}),
        )
        .unwrap();
    assert!(wait(Duration::from_secs(20), || consumer.seen().len() == 5));
    let received = consumer.seen().last().cloned().unwrap().1;
    assert!(
        received.starts_with("00-0af7651916cd43dd8448eb211c80319c-") && received.ends_with("-00"),
        "{received}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !receiver
            .spans()
            .iter()
            .any(|s| s.trace_id == "0af7651916cd43dd8448eb211c80319c"),
        "an unsampled trace exported nothing"
    );
}

#[test]
fn over_grpc_the_same_spans_arrive() {
    let dir = scratch_dir("traces-grpc");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let receiver = Receiver::start(&runtime);
    let consumer = Recording::start(&runtime);
    let gw = telemetry(config(&consumer), &receiver, true).start_on(runtime, &dir, "trace-token");
    scenario(&gw, &consumer, &receiver, None, || {
        let _: Value = gw
            .admin
            .post(
                "/v1/topics/orders/messages",
                &json!({"id": "m-1", "headers": {"traceparent": PRODUCER}, "payload": PAYLOAD_MARK}),
            )
            .unwrap();
    });
    assert!(receiver.spans().iter().all(|s| s.transport == "grpc"));
}

#[test]
fn on_nats_a_message_is_traced_through_retries_the_dlq_and_replay() {
    use verdict_tests::nats::NatsFixture;
    let nats = NatsFixture::new("traces");
    let dir = scratch_dir("traces-nats");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let receiver = Receiver::start(&runtime);
    let consumer = Recording::start(&runtime);
    let topic = nats.subject("orders");
    let config = crate::brokers::broker_config(
        &nats.section(),
        "nats",
        &topic,
        &nats.prefix,
        &consumer.url,
        RULES,
        4,
    );
    // The DLQ tools of the admin API need its token, which the broker configs leave out.
    let config = config.set("admin.token_file", "token");
    let gw = telemetry(config, &receiver, false).start_on(runtime, &dir, "trace-token");
    scenario(&gw, &consumer, &receiver, Some("nats"), || {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", "m-1");
        headers.insert("traceparent", PRODUCER);
        nats.publish_raw(
            "orders",
            headers,
            format!("{{\"note\": \"{PAYLOAD_MARK}\"}}").into_bytes(),
        );
    });
}

#[test]
fn on_rabbitmq_a_message_is_traced_through_retries_the_dlq_and_replay() {
    use lapin::BasicProperties;
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
    use verdict_tests::rabbitmq::RabbitFixture;
    let rabbit = RabbitFixture::new("traces");
    let dir = scratch_dir("traces-rabbitmq");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let receiver = Receiver::start(&runtime);
    let consumer = Recording::start(&runtime);
    let topic = rabbit.queue("orders");
    let config = crate::brokers::broker_config(
        &rabbit.section(),
        "rabbitmq",
        &topic,
        "verdict",
        &consumer.url,
        RULES,
        4,
    );
    // The DLQ tools of the admin API need its token, which the broker configs leave out.
    let config = config.set("admin.token_file", "token");
    let gw = telemetry(config, &receiver, false).start_on(runtime, &dir, "trace-token");
    scenario(&gw, &consumer, &receiver, Some("rabbitmq"), || {
        let mut headers = FieldTable::default();
        headers.insert(
            "traceparent".into(),
            AMQPValue::LongString(LongString::from(PRODUCER)),
        );
        let properties = BasicProperties::default()
            .with_message_id(ShortString::from("m-1"))
            .with_content_type("application/json".into())
            .with_headers(headers);
        rabbit.publish_raw(
            "orders",
            properties,
            format!("{{\"note\": \"{PAYLOAD_MARK}\"}}").as_bytes(),
        );
    });
}

#[cfg(feature = "kafka")]
#[test]
fn on_kafka_a_message_is_traced_through_retries_the_dlq_and_replay() {
    use verdict_tests::kafka::KafkaFixture;
    let kafka = KafkaFixture::new("traces");
    let dir = scratch_dir("traces-kafka");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let receiver = Receiver::start(&runtime);
    let consumer = Recording::start(&runtime);
    let topic = kafka.topic("orders");
    let config = crate::brokers::broker_config(
        &kafka.section(),
        "kafka",
        &topic,
        "verdict",
        &consumer.url,
        RULES,
        4,
    )
    .set("admin.token_file", "token");
    let gw = telemetry(config, &receiver, false).start_on(runtime, &dir, "trace-token");
    scenario(&gw, &consumer, &receiver, Some("kafka"), || {
        let payload = format!("{{\"note\": \"{PAYLOAD_MARK}\"}}");
        kafka.produce(
            &topic,
            "m-1",
            payload.as_bytes(),
            &[("message-id", b"m-1"), ("traceparent", PRODUCER.as_bytes())],
        );
    });
}

#[test]
fn a_collector_over_tls_is_trusted_like_every_peer_on_either_protocol() {
    let pki = verdict_tls::test_pki::Pki::new("traces-collector");
    let leaf = pki.server("collector", &["localhost"]);
    let server = verdict_tls::server_config("collector", &leaf.cert, &leaf.key, None).unwrap();
    for grpc in [false, true] {
        let dir = scratch_dir(&format!("traces-tls-{grpc}"));
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let receiver = Receiver::start_tls(&runtime, server.clone());
        let consumer = Recording::start(&runtime);
        consumer.healthy.store(true, Ordering::SeqCst);
        let config = telemetry(config(&consumer), &receiver, grpc).merge(
            "telemetry",
            &format!("tls = {{ ca_file = {:?} }}\n", pki.ca_file()),
        );
        let gw = config.start_on(runtime, &dir, "trace-token");
        gw.wait_ready();
        let _: Value = gw
            .admin
            .post(
                "/v1/topics/orders/messages",
                &json!({"id": "m-tls", "payload": 1}),
            )
            .unwrap();
        let spans = receiver.wait_for(Duration::from_secs(30), |s| {
            s.iter().any(|s| s.kind == kind::CONSUMER)
        });
        let process = spans
            .iter()
            .find(|s| s.kind == kind::CONSUMER)
            .unwrap_or_else(|| panic!("grpc {grpc}: no span over TLS"));
        assert_eq!(process.attributes["verdict.outcome"], "delivered");
        assert_eq!(process.transport, if grpc { "grpc" } else { "http" });
    }

    // A collector whose certificate the gateway's CA did not sign gets nothing; the
    // message is delivered all the same.
    let stranger = verdict_tls::test_pki::Pki::new("traces-stranger");
    let dir = scratch_dir("traces-tls-refused");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let receiver = Receiver::start_tls(&runtime, server);
    let consumer = Recording::start(&runtime);
    consumer.healthy.store(true, Ordering::SeqCst);
    let config = telemetry(config(&consumer), &receiver, false).merge(
        "telemetry",
        &format!("tls = {{ ca_file = {:?} }}\n", stranger.ca_file()),
    );
    let gw = config.start_on(runtime, &dir, "trace-token");
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "m-x", "payload": 1}),
        )
        .unwrap();
    assert!(wait(Duration::from_secs(20), || consumer.seen().len() == 1));
    let failed = wait(Duration::from_secs(20), || {
        gw.anonymous
            .get_text("/metrics")
            .unwrap()
            .lines()
            .any(|l| l.starts_with("verdict_trace_exports_failed_total ") && !l.ends_with(" 0"))
    });
    assert!(failed, "the refused exports are counted");
    assert!(receiver.spans().is_empty(), "{:?}", receiver.spans());
}
