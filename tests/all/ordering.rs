//! Key ordering on the embedded store: ten keys, twenty messages each, published
//! interleaved; a quarter of the messages fail once or twice before they succeed. The
//! consumer checks every delivery as it arrives: a message of a key may only come once the
//! one before it in publish order was accepted - a later message overtaking a failed one,
//! even a delivery that fails, is a violation. Every message ends accepted once, none
//! overtaken, none dead-lettered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir, wait_for};

const KEYS: u32 = 10;
const PER_KEY: u32 = 20;

/// What the consumer saw.
#[derive(Default)]
struct Seen {
    /// Per key, the last message number accepted (`None`: none yet).
    accepted: HashMap<u32, Option<u32>>,
    /// Deliveries so far per message id.
    deliveries: HashMap<String, u32>,
    /// Deliveries that came before their key's previous message was accepted.
    overtaken: Vec<String>,
    /// Messages accepted, counting repeats.
    accepts: u32,
}

/// How many deliveries of `key`/`n` fail before it succeeds: 0 for most, 1 or 2 for about
/// a quarter (fixed per message, so a rerun fails the same ones).
fn failures_before_success(key: u32, n: u32) -> u32 {
    let h = (key * 7_919 + n * 104_729) % 100;
    match h {
        0..=14 => 1,
        15..=24 => 2,
        _ => 0,
    }
}

/// The checking consumer; `poison`, if set, is refused for good (422,
/// `schema.unknown-version`) on its first delivery, and accepted once delivered again.
fn consumer(
    runtime: &tokio::runtime::Runtime,
    seen: Arc<Mutex<Seen>>,
    poison: Option<&'static str>,
) -> String {
    let router = Router::new().route(
        "/",
        post(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                let id = headers
                    .get("x-verdict-message-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let Some((key, n)) = id
                    .strip_prefix('k')
                    .and_then(|rest| rest.split_once('-'))
                    .and_then(|(k, n)| Some((k.parse::<u32>().ok()?, n.parse::<u32>().ok()?)))
                else {
                    return StatusCode::UNPROCESSABLE_ENTITY.into_response();
                };
                let mut seen = seen.lock().unwrap();
                let last = seen.accepted.get(&key).copied().flatten();
                if n != last.map_or(0, |l| l + 1) {
                    seen.overtaken.push(format!("{id} after {last:?}"));
                }
                let delivered = {
                    let d = seen.deliveries.entry(id).or_default();
                    *d += 1;
                    *d
                };
                if delivered == 1 && poison == Some(id_of(key, n).as_str()) {
                    return (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        [("content-type", "application/json")],
                        r#"{"error": {"kind": "schema.unknown-version", "message": "v9"}}"#,
                    )
                        .into_response();
                }
                if delivered <= failures_before_success(key, n) {
                    return StatusCode::SERVICE_UNAVAILABLE.into_response();
                }
                seen.accepted.insert(key, Some(n));
                seen.accepts += 1;
                StatusCode::OK.into_response()
            }
        }),
    );
    serve(runtime, router)
}

/// `router` served on a port of its own on loopback; its URL.
fn serve(runtime: &tokio::runtime::Runtime, router: Router) -> String {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}/")
}

fn id_of(key: u32, n: u32) -> String {
    format!("k{key}-{n}")
}

/// A gateway whose route `orders` (changed by `route`) delivers to a checking consumer at
/// concurrency 8, refusing `poison` once.
fn start(
    name: &str,
    route: impl FnOnce(Route) -> Route,
    poison: Option<&'static str>,
) -> (Gateway, Arc<Mutex<Seen>>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let url = consumer(&runtime, seen.clone(), poison);
    let route = route(
        Route::new("orders", "rules")
            .config(fixtures::RULES_CONFIG)
            .consumer(&url)
            .set("consumer.concurrency", 8),
    );
    let gw = TestConfig::new()
        .policy("rules", fixtures::RULES)
        .route(route)
        .start_on(runtime, &scratch_dir(name), "ordering-token");
    (gw, seen)
}

/// The ten keys' messages published interleaved: k0-0, k1-0, ..., k9-0, k0-1, ...
fn publish_interleaved(gw: &Gateway) {
    let batch: Vec<Value> = (0..PER_KEY)
        .flat_map(|n| {
            (0..KEYS).map(move |key| {
                json!({"id": id_of(key, n), "payload": {"n": n},
                       "headers": {"Order-Id": format!("key-{key}")}})
            })
        })
        .collect();
    publish(gw, &batch);
}

/// `batch` published on `orders`.
fn publish(gw: &Gateway, batch: &[Value]) {
    let _: Value = gw
        .admin
        .post("/v1/topics/orders/messages", &batch)
        .expect("publish");
}

fn wait_for_accepts(seen: &Mutex<Seen>, total: u32) {
    assert!(
        wait_for(Duration::from_secs(120), || seen.lock().unwrap().accepts
            >= total),
        "{} of {total} accepted",
        seen.lock().unwrap().accepts
    );
}

/// [`start`], ordered by the `Order-Id` header when `ordered`, with the keys published
/// interleaved; waits until every message was accepted.
fn run_interleaved(name: &str, ordered: bool) -> (Gateway, Arc<Mutex<Seen>>) {
    let (gw, seen) = start(
        name,
        |route| match ordered {
            true => route.set("ordering", "key").set("key_header", "order-id"),
            false => route,
        },
        None,
    );
    publish_interleaved(&gw);
    wait_for_accepts(&seen, KEYS * PER_KEY);
    (gw, seen)
}

#[test]
fn on_the_embedded_store_each_keys_messages_arrive_in_publish_order_through_retries() {
    let (gw, seen) = run_interleaved("ordering-store", true);
    let seen = seen.lock().unwrap();
    assert!(seen.overtaken.is_empty(), "overtaken: {:?}", seen.overtaken);
    assert_eq!(seen.accepts, KEYS * PER_KEY, "each message accepted once");
    for key in 0..KEYS {
        assert_eq!(seen.accepted[&key], Some(PER_KEY - 1), "key {key}");
    }
    let retried = seen.deliveries.values().filter(|d| **d > 1).count();
    assert!(retried > 20, "failures were retried: {retried} messages");
    let letters = gw
        .store
        .dlq_list(&verdict_gateway::store::DlqFilter::default(), u64::MAX)
        .unwrap();
    assert!(letters.is_empty(), "{} dead letters", letters.len());
}

/// Without `ordering = "key"` the same run lets later messages overtake failed ones: the
/// check above can fail.
#[test]
fn without_key_ordering_later_messages_overtake_failed_ones() {
    let (_gw, seen) = run_interleaved("ordering-none", false);
    assert!(!seen.lock().unwrap().overtaken.is_empty());
}

/// `on_dead_letter = "dead-letter-key"`: `k3-5` is refused for good and dead-lettered; the
/// fourteen later messages of key 3 follow it to the DLQ undelivered, each with its own
/// envelope, while the other keys flow. Replayed, the key's letters go back in their order:
/// `k3-5` (accepted this time) first, then the rest, one at a time.
#[test]
fn with_dead_letter_key_a_keys_later_messages_follow_its_dead_letter_and_replay_in_order() {
    let (gw, seen) = start(
        "ordering-dead-letter-key",
        |route| {
            route
                .set("ordering", "key")
                .set("key_header", "order-id")
                .set("on_dead_letter", "dead-letter-key")
        },
        Some("k3-5"),
    );
    publish_interleaved(&gw);
    let followers = PER_KEY - 6;
    wait_for_accepts(&seen, KEYS * PER_KEY - 1 - followers);
    let all = verdict_gateway::store::DlqFilter::default();
    assert!(
        wait_for(Duration::from_secs(30), || gw
            .store
            .dlq_list(&all, u64::MAX)
            .is_ok_and(|l| l.len() as u32 == 1 + followers)),
        "dead letters: {:?}",
        gw.store.dlq_list(&all, u64::MAX).map(|l| l.len())
    );
    let letters = gw.store.dlq_list(&all, u64::MAX).unwrap();
    let mut ids: Vec<(String, String)> = letters
        .iter()
        .map(|l| (l.message_id.clone(), l.kind.clone()))
        .collect();
    ids.sort_by_key(|(id, _)| id[3..].parse::<u32>().unwrap());
    let mut want = vec![("k3-5".to_string(), "schema.unknown-version".to_string())];
    want.extend((6..PER_KEY).map(|n| (id_of(3, n), "key.dead-lettered".to_string())));
    assert_eq!(ids, want);
    for letter in &letters {
        assert_eq!(
            letter.envelope.original.id, letter.message_id,
            "its own envelope"
        );
    }
    {
        let seen = seen.lock().unwrap();
        assert!(seen.overtaken.is_empty(), "overtaken: {:?}", seen.overtaken);
        let delivered_followers: Vec<_> = (6..PER_KEY)
            .map(|n| id_of(3, n))
            .filter(|id| seen.deliveries.contains_key(id))
            .collect();
        assert!(delivered_followers.is_empty(), "{delivered_followers:?}");
        assert_eq!(seen.accepted[&3], Some(4));
    }
    // Replayed in one go, the key's letters come back in publish order.
    let seqs: Vec<i64> = letters.iter().map(|l| l.seq).collect();
    let replayed = gw
        .store
        .dlq_replay(&seqs, gw.store.now_ms(), "test")
        .unwrap();
    assert_eq!(replayed.len(), seqs.len());
    wait_for_accepts(&seen, KEYS * PER_KEY);
    let seen = seen.lock().unwrap();
    assert!(seen.overtaken.is_empty(), "overtaken: {:?}", seen.overtaken);
    assert_eq!(seen.accepts, KEYS * PER_KEY, "each message accepted once");
    assert_eq!(seen.accepted[&3], Some(PER_KEY - 1));
}

/// A [`healing_consumer`]: its URL, what heals it, and each delivery's message id.
type Healing = (
    String,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<Mutex<Vec<String>>>,
);

/// A consumer that refuses (503) every message whose id starts with `failing` until it is
/// healed, and accepts the others.
fn healing_consumer(runtime: &tokio::runtime::Runtime, failing: &'static str) -> Healing {
    let healed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let router = {
        let (healed, calls) = (healed.clone(), calls.clone());
        Router::new().route(
            "/",
            post(move |headers: HeaderMap| {
                let (healed, calls) = (healed.clone(), calls.clone());
                async move {
                    let id = headers
                        .get("x-verdict-message-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let refused = id.starts_with(failing)
                        && !healed.load(std::sync::atomic::Ordering::SeqCst);
                    calls.lock().unwrap().push(id);
                    if refused {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        StatusCode::OK
                    }
                }
            }),
        )
    };
    (serve(runtime, router), healed, calls)
}

/// A sample of `metric` for the route `orders` in `/metrics`.
fn route_gauge(gw: &Gateway, metric: &str) -> Option<String> {
    let text = gw.admin.get_text("/metrics").expect("/metrics");
    let prefix = format!("{metric}{{topic=\"orders\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

/// `max_parked_keys = 2`: six keys' first messages fail (503) until the consumer heals,
/// parking six keys. At the bound the route takes only its retries: messages of new keys
/// published meanwhile wait undelivered, `verdict_route_parked_keys_full` is 1, and
/// `/v1/routes` and the console say so. Healed, the parked keys clear and the new keys' messages go.
#[test]
fn a_route_at_max_parked_keys_takes_only_retries_until_a_key_clears() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (url, healed, calls) = healing_consumer(&runtime, "p");
    let gw = TestConfig::new()
        .policy("rules", fixtures::RULES)
        .route(
            Route::new("orders", "rules")
                .config(
                    r#"{ max_attempts = 30, rules = [
                        { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
                        { match = ["http.5*"], retry = { strategy = "fixed", delay_ms = 400 } },
                    ] }"#,
                )
                .consumer(&url)
                .set("consumer.concurrency", 8)
                .set("ordering", "key")
                .set("key_header", "order-id")
                .set("max_parked_keys", 2),
        )
        .start_on(runtime, &scratch_dir("ordering-parked"), "ordering-token");
    let six_keys = |prefix: &str| -> Vec<Value> {
        (0..6)
            .map(|k| {
                json!({"id": format!("{prefix}{k}"), "payload": {},
                       "headers": {"Order-Id": format!("{prefix}-key-{k}")}})
            })
            .collect()
    };
    publish(&gw, &six_keys("p"));
    assert!(
        wait_for(Duration::from_secs(15), || route_gauge(
            &gw,
            "verdict_route_parked_keys_full"
        )
        .as_deref()
            == Some("1")),
        "the route never reached its bound: {:?} keys parked",
        route_gauge(&gw, "verdict_parked_keys")
    );
    publish(&gw, &six_keys("n"));
    std::thread::sleep(Duration::from_millis(1_500));
    let early: Vec<String> = calls
        .lock()
        .unwrap()
        .iter()
        .filter(|id| id.starts_with('n'))
        .cloned()
        .collect();
    assert!(
        early.is_empty(),
        "new keys delivered at the bound: {early:?}"
    );
    let retries = calls.lock().unwrap().len();
    assert!(
        retries > 12,
        "the parked keys kept retrying: {retries} calls"
    );
    let routes: Value = gw.admin.get("/v1/routes").expect("/v1/routes");
    let parked = &routes[0]["parked_keys"];
    assert_eq!(
        (&parked["max"], &parked["full"]),
        (&json!(2), &json!(true)),
        "{parked}"
    );
    assert!(parked["keys"].as_u64().unwrap() >= 2, "{parked}");
    let console = gw.admin.get_text("/").expect("the console");
    assert!(console.contains("keys parked (full)"), "{console}");

    healed.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        wait_for(Duration::from_secs(15), || {
            let calls = calls.lock().unwrap();
            (0..6).all(|k| calls.contains(&format!("n{k}")))
        }),
        "new keys after healing: {:?}",
        calls.lock().unwrap()
    );
    assert!(wait_for(Duration::from_secs(5), || route_gauge(
        &gw,
        "verdict_route_parked_keys_full"
    )
    .as_deref()
        == Some("0")));
    assert_eq!(
        route_gauge(&gw, "verdict_parked_keys").as_deref(),
        Some("0")
    );
}

/// A route `topic` from `source` to `url`, ordered by the `order-id` header: 503s retried
/// every 300 ms, up to 30 attempts.
fn ordered_route(topic: &str, source: &str, url: &str) -> Route {
    Route::new(topic, "rules")
        .set("source", source)
        .config(
            r#"{ max_attempts = 30, rules = [
                { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
                { match = ["http.5*"], retry = { strategy = "fixed", delay_ms = 300 } },
            ] }"#,
        )
        .consumer(url)
        .set("consumer.concurrency", 8)
        .set("ordering", "key")
        .set("key_header", "order-id")
}

/// The run both broker sources that hold a key in the gateway share: `stuck-0` and
/// `stuck-1` of key `stuck`, then `free-0..4` of key `free`, each published by `message(id,
/// key)` to the route `topic`, whose consumer ([`healing_consumer`]) refuses `stuck-*`
/// until healed. While `stuck-0` retries, `stuck-1` waits undelivered, the free key's five
/// go in order, and the key counts as parked (`/v1/routes`, `verdict_parked_keys`) -
/// `while_parked` checks the source's side; healed, `stuck-1` comes after `stuck-0`'s last
/// attempt and the count returns to 0.
fn a_failing_key_waits_in_place(
    gw: &Gateway,
    topic: &str,
    (healed, calls): (&std::sync::atomic::AtomicBool, &Mutex<Vec<String>>),
    message: impl Fn(&str, &str),
    while_parked: impl FnOnce(),
) {
    let parked = || -> Value {
        let routes: Value = gw.admin.get("/v1/routes").expect("/v1/routes");
        routes[0]["parked_keys"].clone()
    };
    assert_eq!(parked()["keys"], json!(0), "shown before any key parks");
    message("stuck-0", "stuck");
    message("stuck-1", "stuck");
    for n in 0..5 {
        message(&format!("free-{n}"), "free");
    }
    let gauge = || {
        let text = gw.admin.get_text("/metrics").expect("/metrics");
        let prefix = format!("verdict_parked_keys{{topic=\"{topic}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
    };
    assert!(
        wait_for(Duration::from_secs(30), || {
            let calls = calls.lock().unwrap();
            (0..5).all(|n| calls.contains(&format!("free-{n}")))
                && calls.iter().filter(|id| *id == "stuck-0").count() >= 3
        }),
        "the other key flows while the failing one retries: {:?}",
        calls.lock().unwrap()
    );
    {
        let calls = calls.lock().unwrap();
        assert!(
            !calls.contains(&"stuck-1".to_string()),
            "a parked key's next message waits: {calls:?}"
        );
        let free: Vec<&String> = calls.iter().filter(|id| id.starts_with("free")).collect();
        assert_eq!(free, ["free-0", "free-1", "free-2", "free-3", "free-4"]);
    }
    assert_eq!(parked()["keys"], json!(1), "{}", parked());
    assert_eq!(gauge().as_deref(), Some("1"));
    while_parked();

    healed.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        wait_for(Duration::from_secs(20), || calls
            .lock()
            .unwrap()
            .contains(&"stuck-1".to_string())),
        "the key goes on once healed"
    );
    let calls = calls.lock().unwrap().clone();
    let last_first = calls.iter().rposition(|id| id == "stuck-0").unwrap();
    let second = calls.iter().position(|id| id == "stuck-1").unwrap();
    assert!(last_first < second, "in publish order: {calls:?}");
    assert!(wait_for(Duration::from_secs(5), || parked()["keys"] == json!(0)));
    assert_eq!(gauge().as_deref(), Some("0"));
}

/// RabbitMQ, ordered by key: a key whose first message fails (503 until the consumer heals)
/// retries in place with its second message held back undelivered, while another key's
/// five messages all go, in order; the parked key shows in `verdict_parked_keys` and
/// `/v1/routes` until it clears, and its messages then come in publish order. No retry went
/// through a delay bucket, and nothing waited in the queue meanwhile.
#[test]
fn on_rabbitmq_a_failing_key_waits_in_place_and_is_counted_parked_while_other_keys_flow() {
    use lapin::BasicProperties;
    use lapin::types::{AMQPValue, FieldTable, LongString};
    use verdict_tests::rabbitmq::RabbitFixture;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mq = RabbitFixture::new("ordered");
    let (url, healed, calls) = healing_consumer(&runtime, "stuck");
    let topic = mq.queue("orders");
    let gw = TestConfig::new()
        .policy("rules", fixtures::RULES)
        .route(ordered_route(&topic, "rabbitmq", &url))
        .merge("", &mq.section())
        .start_on(runtime, &scratch_dir("ordering-rabbitmq"), "ordering-token");
    gw.wait_ready();
    let message = |id: &str, key: &str| {
        let mut headers = FieldTable::default();
        headers.insert(
            "Order-Id".into(),
            AMQPValue::LongString(LongString::from(key)),
        );
        let properties = BasicProperties::default()
            .with_message_id(id.into())
            .with_content_type("application/json".into())
            .with_headers(headers);
        mq.publish_raw("orders", properties, b"{}");
    };
    a_failing_key_waits_in_place(&gw, &topic, (&healed, &calls), message, || {
        assert_eq!(mq.depth(&topic), 0, "held unacknowledged, not in the queue");
    });
    let buckets =
        verdict_gateway::sources::rabbitmq::topology::delay_names(&format!("{}.delay", mq.prefix));
    let declared: Vec<&String> = buckets
        .iter()
        .filter(|b| b.contains(".wait.") && mq.exists(b))
        .collect();
    assert!(declared.is_empty(), "retries waited in place: {declared:?}");
}

/// NATS, ordered by key: the same run as on RabbitMQ - a failing key retries in place with
/// its next message held back, another key's five go in order, the parked key is counted
/// until it clears - and nothing is left pending on the route's consumer at the end.
#[test]
fn on_nats_a_failing_key_waits_in_place_and_is_counted_parked_while_other_keys_flow() {
    use async_nats::HeaderMap;
    use verdict_tests::nats::NatsFixture;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::new("ordered");
    let (url, healed, calls) = healing_consumer(&runtime, "stuck");
    let topic = nats.subject("orders");
    let gw = TestConfig::new()
        .policy("rules", fixtures::RULES)
        .route(ordered_route(&topic, "nats", &url))
        .merge("", &nats.section())
        .start_on(runtime, &scratch_dir("ordering-nats"), "ordering-token");
    gw.wait_ready();
    let message = |id: &str, key: &str| {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        headers.insert("Order-Id", key);
        headers.insert("Content-Type", "application/json");
        nats.publish_raw("orders", headers, b"{}".to_vec());
    };
    a_failing_key_waits_in_place(&gw, &topic, (&healed, &calls), message, || {});
    assert!(
        nats.wait_for(Duration::from_secs(10), || nats.pending("") == (0, 0)),
        "everything settled on the route's consumer: {:?}",
        nats.pending("")
    );
    let free = calls
        .lock()
        .unwrap()
        .iter()
        .filter(|id| id.starts_with("free"))
        .count();
    assert_eq!(free, 5, "each free message once");
}

/// Kafka, ordered by key (the record's key): while a key's record fails (503 until the
/// consumer heals) it waits out its retries in place, so its partition - every key in it -
/// counts as one parked key in `verdict_parked_keys` and `/v1/routes` (0 before it parks
/// and after it clears), and the key's next record comes only after the stuck one's last
/// attempt. Nothing goes through a retry topic.
#[cfg(feature = "kafka")]
#[test]
fn on_kafka_a_failing_key_parks_its_partition_and_is_counted_until_it_clears() {
    use verdict_tests::kafka::KafkaFixture;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = KafkaFixture::new("ordered-parked");
    let (url, healed, calls) = healing_consumer(&runtime, "stuck");
    let topic = broker.topic("orders");
    let gw = TestConfig::new()
        .set("gateway.consumer_group", "verdict")
        .merge("gateway", &broker.section())
        .policy("rules", fixtures::RULES)
        .route(
            Route::new(&topic, "rules")
                .set("source", "kafka")
                .config(
                    r#"{ max_attempts = 30, rules = [
                        { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
                        { match = ["http.5*"], retry = { strategy = "fixed", delay_ms = 300 } },
                    ] }"#,
                )
                .consumer(&url)
                .set("consumer.concurrency", 8)
                .set("ordering", "key"),
        )
        .start_on(runtime, &scratch_dir("ordering-kafka"), "ordering-token");
    gw.wait_ready();
    let parked = || -> Value {
        let routes: Value = gw.admin.get("/v1/routes").expect("/v1/routes");
        routes[0]["parked_keys"].clone()
    };
    assert!(
        wait_for(Duration::from_secs(30), || parked()["keys"] == json!(0)),
        "shown before any key parks: {}",
        parked()
    );
    let record = |id: &str| {
        let headers: [(&str, &[u8]); 2] = [
            ("message-id", id.as_bytes()),
            ("content-type", b"application/json"),
        ];
        broker.produce(&topic, "order-7", b"{}", &headers);
    };
    record("stuck-0");
    record("stuck-1");
    let gauge = || {
        let text = gw.admin.get_text("/metrics").expect("/metrics");
        let prefix = format!("verdict_parked_keys{{topic=\"{topic}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
    };
    assert!(
        wait_for(Duration::from_secs(60), || {
            calls
                .lock()
                .unwrap()
                .iter()
                .filter(|id| *id == "stuck-0")
                .count()
                >= 3
        }),
        "the stuck record retries: {:?}",
        calls.lock().unwrap()
    );
    assert_eq!(parked()["keys"], json!(1), "{}", parked());
    assert_eq!(gauge().as_deref(), Some("1"));
    assert!(
        !calls.lock().unwrap().contains(&"stuck-1".to_string()),
        "a parked key's next record waits"
    );

    healed.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        wait_for(Duration::from_secs(20), || calls
            .lock()
            .unwrap()
            .contains(&"stuck-1".to_string())),
        "the key goes on once healed"
    );
    let calls = calls.lock().unwrap().clone();
    let last_first = calls.iter().rposition(|id| id == "stuck-0").unwrap();
    let second = calls.iter().position(|id| id == "stuck-1").unwrap();
    assert!(last_first < second, "in order: {calls:?}");
    assert!(wait_for(Duration::from_secs(5), || parked()["keys"] == json!(0)));
    assert_eq!(gauge().as_deref(), Some("0"));
    let retries = broker.topic(&format!(
        "retry.{}",
        verdict_gateway::sources::delay_buckets::bucket_ms(300)
    ));
    assert_eq!(broker.depth(&retries), 0, "no retry went through a topic");
}
