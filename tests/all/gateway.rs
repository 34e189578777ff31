//! The gateway end to end on the embedded store: publish, deliver over HTTP to a consumer
//! that fails on purpose, decide with `rules`, retry, dead-letter with the whole history.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_gateway::store::{DlqFilter, StateCounts};
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir};

pub(crate) use verdict_tests::fixtures::RULES_CONFIG;

/// `orders` decided by `rules` with `rules_config`, delivered to `consumer_url`.
fn config_with(consumer_url: &str, rules_config: &str) -> TestConfig {
    TestConfig::new()
        .set("gateway.instance", "gw-test")
        .policy("rules", fixtures::RULES)
        .route(
            Route::new("orders", "rules")
                .config(rules_config)
                .consumer(consumer_url),
        )
}

/// [`config_with`] [`RULES_CONFIG`].
fn config(consumer_url: &str) -> TestConfig {
    config_with(consumer_url, RULES_CONFIG)
}

/// Message i: 5% permanent, 20% transient (1-3 failures first), the rest fine.
pub(crate) fn behaviour(id: &str) -> Behaviour {
    let i: u32 = id.trim_start_matches("m-").parse().unwrap_or(0);
    match i % 100 {
        0..5 => Behaviour::Permanent,
        5..25 => Behaviour::FailsFirst(1 + i % 3),
        _ => Behaviour::Ok,
    }
}

/// Each of messages `m-0`..`m-<n>` reached the consumer as [`behaviour`] says: permanent
/// ones never accepted, transient ones accepted once after their failures, the rest once.
pub(crate) fn assert_settled_as_behaviour(consumer: &Consumer, n: u32) {
    let (deliveries, accepted) = consumer.snapshot();
    for i in 0..n {
        let id = format!("m-{i}");
        match behaviour(&id) {
            Behaviour::Permanent => assert_eq!(accepted.get(&id), None),
            Behaviour::FailsFirst(k) => {
                assert_eq!(deliveries[&id], k + 1, "{id}");
                assert_eq!(accepted[&id], 1, "{id}");
            }
            Behaviour::Ok | Behaviour::Slow(_) => {
                assert_eq!((deliveries[&id], accepted[&id]), (1, 1), "{id}");
            }
        }
    }
}

fn publish(gw: &Gateway, ids: std::ops::Range<u32>) {
    let batch: Vec<Value> = ids
        .map(|i| json!({"id": format!("m-{i}"), "headers": {"tenant": "eu"}, "payload": {"order": i}}))
        .collect();
    let published: Value = gw
        .admin
        .post("/v1/topics/orders/messages", &batch)
        .expect("publish");
    assert_eq!(published["accepted"].as_array().unwrap().len(), batch.len());
}

/// Wait until nothing is pending (at most `limit`), returning the final counts.
fn drained(gw: &Gateway, limit: Duration) -> StateCounts {
    let deadline = Instant::now() + limit;
    loop {
        let counts = gw.store.counts().unwrap();
        if counts.pending() == 0 || Instant::now() > deadline {
            return counts;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_thousand_messages_end_delivered_or_dead_lettered_with_their_history() {
    let dir = scratch_dir("gateway-thousand");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, behaviour);
    let gw = config(&consumer.url()).start_on(runtime, &dir, "unused");
    publish(&gw, 0..1_000);
    let counts = drained(&gw, Duration::from_secs(120));

    // Count equality against the store: every message delivered or dead-lettered.
    assert_eq!(counts.total(), 1_000, "{counts:?}");
    assert_eq!((counts.delivered, counts.dead), (950, 50), "{counts:?}");
    assert_settled_as_behaviour(&consumer, 1_000);

    // The DLQ holds exactly the permanent ones, each with its history and provenance.
    let dead = gw.store.dlq_list(&DlqFilter::default(), u64::MAX).unwrap();
    assert_eq!(dead.len(), 50);
    for entry in &dead {
        assert_eq!(behaviour(&entry.message_id), Behaviour::Permanent);
        assert_eq!(
            (entry.dlq.as_str(), entry.class.as_str()),
            ("orders.DLQ", "poison")
        );
        // The envelope as operators and their tools read it: its JSON.
        let e = &serde_json::to_value(&entry.envelope).unwrap();
        assert_eq!(e["original"]["topic"], "orders");
        assert_eq!(e["original"]["id"], json!(entry.message_id));
        assert_eq!(e["original"]["headers"]["tenant"], "eu");
        assert!(e["original"]["payload"]["order"].is_u64(), "{e}");
        assert_eq!(e["attempts"], 1);
        assert_eq!(e["errors"][0]["kind"], "schema.unknown-version");
        assert_eq!(e["errors"][0]["message"], "schema v9 is unknown");
        assert_eq!(e["consumerGroup"], "verdict");
        assert_eq!(e["gateway"], "gw-test");
        assert_eq!(e["policy"]["name"], "rules");
        assert_eq!(e["policy"]["sha256"].as_str().unwrap().len(), 64);
        assert_eq!(e["policy"]["generation"], 1);
        assert_eq!(e["verdict"]["class"], "poison");
        assert!(e["firstFailedAt"].as_str().unwrap().ends_with('Z'), "{e}");
    }
    // `/metrics` agrees with the store.
    let metrics = gw.anonymous.get_text("/metrics").unwrap();
    assert!(
        metrics.contains(r#"verdict_dlq_depth{dlq="orders.DLQ",topic="orders",source="embedded",core="false"} 50"#),
        "{metrics}"
    );
}

#[test]
fn retries_run_out_into_the_dlq_with_every_attempt() {
    let dir = scratch_dir("gateway-exhausted");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::FailsFirst(100));
    let gw = config(&consumer.url())
        .set("gateway.dlq_format", "msgpack")
        .set("gateway.dlq_naming", "prefix")
        .start_on(runtime, &dir, "unused");
    publish(&gw, 0..3);
    let counts = drained(&gw, Duration::from_secs(60));
    assert_eq!(counts.dead, 3, "{counts:?}");
    let dead = gw.store.dlq_list(&DlqFilter::default(), u64::MAX).unwrap();
    for entry in &dead {
        assert_eq!(
            (entry.dlq.as_str(), entry.class.as_str()),
            ("DLQ.orders", "exhausted")
        );
        let e = &entry.envelope;
        assert_eq!(e.attempts, 8);
        assert_eq!(e.errors.len(), 8);
        assert!(e.errors.iter().all(|x| x.kind == "http.503"));
        let at: Vec<u64> = e.errors.iter().map(|x| x.at_ms).collect();
        assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
    }
    let (deliveries, _) = consumer.snapshot();
    assert_eq!(deliveries["m-0"], 8);
}

#[test]
fn publishing_bad_input_or_to_an_unknown_topic_stores_nothing() {
    let dir = scratch_dir("gateway-publish");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    let gw = config(&consumer.url()).start_on(runtime, &dir, "pub-token");
    // Publishing changes the store: without the token it is refused.
    match gw
        .anonymous
        .post::<Value>("/v1/topics/orders/messages", &json!({"payload": 1}))
    {
        Err(verdict_cli::client::ClientError::Api { status: 401, .. }) => {}
        other => panic!("an anonymous publish: {other:?}"),
    }
    let cases = [
        (
            "/v1/topics/inventory/messages",
            json!({"payload": 1}),
            404,
            "inventory",
        ),
        (
            "/v1/topics/orders/messages",
            json!({"body": 1}),
            400,
            "message 0",
        ),
        (
            "/v1/topics/orders/messages",
            json!([{"payload": 1}, {"payload": 2, "id": 7}]),
            400,
            "message 1: id",
        ),
        ("/v1/topics/orders/messages", json!([]), 400, "1 to"),
        (
            "/v1/topics/orders.*/messages",
            json!({"payload": 1}),
            400,
            "not a topic",
        ),
    ];
    for (path, body, status, names) in cases {
        match gw.admin.post::<Value>(path, &body) {
            Err(verdict_cli::client::ClientError::Api {
                status: s, message, ..
            }) => {
                assert_eq!(s, status, "{path} {body}: {message}");
                assert!(message.contains(names), "`{message}` should name `{names}`");
            }
            other => panic!("{path} {body}: {other:?}"),
        }
    }
    assert_eq!(gw.store.counts().unwrap().total(), 0);
    // A duplicate id is reported, not stored twice.
    let first: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "a", "payload": "x"}),
        )
        .unwrap();
    let again: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "a", "payload": "x"}),
        )
        .unwrap();
    assert_eq!(
        (first["accepted"].clone(), again["duplicates"].clone()),
        (json!(["a"]), json!(["a"]))
    );
    assert_eq!(gw.store.counts().unwrap().total(), 1);
}

/// Retries that outlast a 30 s outage under `rules`: exponential from 1 s, capped at 8 s,
/// equal jitter (so each wait is at least half the step): 11 retries wait at least 35 s.
const OUTAGE_RULES: &str = r#"{ max_attempts = 12, rules = [
    { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
    { match = ["http.5*", "transport.*"],
      retry = { strategy = "exponential", base_ms = 1000, cap_ms = 8000, jitter = "equal" } },
] }"#;

#[test]
fn a_consumer_down_for_30_seconds_causes_retries_not_dead_letters() {
    let dir = scratch_dir("gateway-outage");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    consumer.demo.set_down(true);
    let gw = config_with(&consumer.url(), OUTAGE_RULES).start_on(runtime, &dir, "unused");
    publish(&gw, 0..50);
    std::thread::sleep(Duration::from_secs(30));
    let during = gw.store.counts().unwrap();
    assert_eq!((during.dead, during.delivered), (0, 0), "{during:?}");
    let (deliveries, _) = consumer.snapshot();
    assert!(
        deliveries.values().all(|n| *n >= 3),
        "retried during the outage: {deliveries:?}"
    );

    consumer.demo.set_down(false);
    let after = drained(&gw, Duration::from_secs(60));
    assert_eq!((after.delivered, after.dead), (50, 0), "{after:?}");
}

#[test]
fn the_dlq_over_the_admin_api_lists_dry_runs_replays_and_discards() {
    let dir = scratch_dir("gateway-dlq-api");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Permanent);
    let gw = config(&consumer.url()).start_on(runtime, &dir, "dlq-token");
    publish(&gw, 0..4);
    assert_eq!(drained(&gw, Duration::from_secs(30)).dead, 4);

    let (listed, next): (Vec<Value>, _) =
        gw.admin.get_page("/v1/dlq?topic=orders&limit=3").unwrap();
    assert_eq!(listed.len(), 3);
    // The next page starts where this one ended: the fourth, and no page after it.
    let next = next.expect("a fourth dead letter follows");
    let (rest, after): (Vec<Value>, _) = gw
        .admin
        .get_page(&format!("/v1/dlq?topic=orders&limit=3&after={next}"))
        .unwrap();
    assert_eq!((rest.len(), after), (1, None));
    assert!(listed.iter().all(|e| e["seq"] != rest[0]["seq"]));
    // Oldest first (deliveries run concurrently, so which id died first varies).
    let at: Vec<u64> = listed
        .iter()
        .map(|e| e["created_at_ms"].as_u64().unwrap())
        .collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");
    assert!(
        listed
            .iter()
            .all(|e| e["envelope"]["original"]["topic"] == "orders")
    );
    let stats: Vec<Value> = gw.anonymous.get("/v1/dlq/stats").unwrap();
    assert_eq!(stats[0]["depth"], 4);
    let none: Vec<Value> = gw.admin.get("/v1/dlq?class=exhausted").unwrap();
    assert!(none.is_empty());

    // Changes need the token; a discard needs a reason.
    let denied = gw.anonymous.post::<Value>("/v1/dlq/replay", &json!({}));
    assert!(matches!(
        denied,
        Err(verdict_cli::client::ClientError::Api { status: 401, .. })
    ));
    let no_reason = gw
        .admin
        .post::<Value>("/v1/dlq/discard", &json!({"reason": " "}));
    assert!(matches!(
        no_reason,
        Err(verdict_cli::client::ClientError::Api { status: 400, .. })
    ));

    let dry: Value = gw
        .admin
        .post("/v1/dlq/replay", &json!({"dry_run": true}))
        .unwrap();
    assert_eq!(
        (dry["matched"].clone(), dry["replayed"].clone()),
        (json!(4), json!(0))
    );
    assert_eq!(dry["dry_run"][0]["decision"]["verdict"]["class"], "poison");
    assert_eq!(gw.store.counts().unwrap().dead, 4);

    let discarded: Value = gw
        .admin
        .post(
            "/v1/dlq/discard",
            &json!({"filter": {"limit": 1}, "reason": "test data"}),
        )
        .unwrap();
    assert_eq!(discarded["discarded"], 1);
    // Replayed into the same always-failing consumer: they come back to the DLQ.
    let replayed: Value = gw
        .admin
        .post("/v1/dlq/replay", &json!({"note": "after fix"}))
        .unwrap();
    assert_eq!(replayed["replayed"], 3);
    assert_eq!(gw.store.audit_count("replayed").unwrap(), 3);
    assert_eq!(gw.store.audit_count("dlq-discarded").unwrap(), 1);
    let counts = drained(&gw, Duration::from_secs(30));
    assert_eq!((counts.dead, counts.discarded), (3, 1), "{counts:?}");
    let ready = gw.anonymous.get_text("/readyz").unwrap();
    assert_eq!(ready, "ready\n");
}

/// Letters of 200 KB: the admin API's DLQ pages stop at their byte budget (`max_bytes`, 4
/// MiB by default), always hold one letter, and their cursor walks every letter once - a
/// client asking for a thousand letters of 1 MiB gets a few megabytes at a time, never a
/// gigabyte in one answer. (Small enough not to starve the timing tests beside it.)
#[test]
fn dlq_pages_are_bounded_by_bytes_and_their_cursor_walks_every_letter_once() {
    let dir = scratch_dir("gateway-dlq-bytes");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Permanent);
    let gw = config(&consumer.url()).start_on(runtime, &dir, "dlq-token");
    const LETTERS: u32 = 12;
    let big = "x".repeat(200_000);
    for chunk in (0..LETTERS).collect::<Vec<_>>().chunks(4) {
        let batch: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"id": format!("big-{i}"), "payload": big}))
            .collect();
        let published: Value = gw
            .admin
            .post("/v1/topics/orders/messages", &batch)
            .expect("publish");
        assert_eq!(published["accepted"].as_array().unwrap().len(), chunk.len());
    }
    assert_eq!(
        drained(&gw, Duration::from_secs(60)).dead,
        u64::from(LETTERS)
    );

    let walk = |query: &str| -> Vec<(Vec<i64>, usize)> {
        let mut pages = Vec::new();
        let mut after = String::new();
        loop {
            let (page, next): (Vec<Value>, _) = gw
                .admin
                .get_page(&format!("/v1/dlq?limit=1000&payloads=full{query}{after}"))
                .unwrap();
            let size = serde_json::to_vec(&page).unwrap().len();
            pages.push((
                page.iter().map(|e| e["seq"].as_i64().unwrap()).collect(),
                size,
            ));
            match next {
                Some(n) => after = format!("&after={n}"),
                None => return pages,
            }
        }
    };
    let every = |pages: &[(Vec<i64>, usize)]| {
        let mut seqs: Vec<i64> = pages.iter().flat_map(|(p, _)| p.clone()).collect();
        let listed = seqs.len();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(
            (listed, seqs.len()),
            (LETTERS as usize, LETTERS as usize),
            "{pages:?}"
        );
    };
    // 700 KB a page: three letters, the fourth waits for the next page.
    let pages = walk("&max_bytes=700000");
    every(&pages);
    assert!(
        pages
            .iter()
            .all(|(p, size)| *size <= 700_000 && p.len() == 3),
        "{pages:?}"
    );
    // The default, 4 MiB, holds all twelve (2.4 MB).
    let pages = walk("");
    every(&pages);
    assert_eq!(pages.len(), 1);
    // A budget below one letter still moves: one letter a page.
    let pages = walk("&max_bytes=1000");
    every(&pages);
    assert!(pages.iter().all(|(p, _)| p.len() == 1));
    // A budget past the most a page may hold is held to it (64 MiB), not refused.
    let pages = walk("&max_bytes=999999999999");
    every(&pages);
    assert_eq!(pages.len(), 1);
    let refused = gw.admin.get::<Value>("/v1/dlq?max_bytes=lots");
    assert!(
        matches!(
            refused,
            Err(verdict_cli::client::ClientError::Api { status: 400, .. })
        ),
        "{refused:?}"
    );

    // By default a listing shows each 200 KB payload as its size and digest - all twelve
    // letters in a few kilobytes - and a letter is fetched whole on its own.
    let (page, next): (Vec<Value>, _) = gw.admin.get_page("/v1/dlq").unwrap();
    assert_eq!((page.len(), next), (LETTERS as usize, None));
    let size = serde_json::to_vec(&page).unwrap().len();
    assert!(size < 64 << 10, "{size} bytes");
    let digest = verdict_runtime::digest::sha256_hex(big.as_bytes());
    for letter in &page {
        assert_eq!(letter["payload_summary"]["bytes"], 200_000, "{letter}");
        assert_eq!(letter["payload_summary"]["sha256"], digest.as_str());
        assert!(letter["envelope"]["original"].get("payload").is_none());
    }
    let seq = page[0]["seq"].as_i64().unwrap();
    let whole: Value = gw.admin.get(&format!("/v1/dlq/{seq}")).unwrap();
    assert_eq!(
        whole["envelope"]["original"]["payload"].as_str(),
        Some(&*big)
    );
    assert!(whole.get("payload_summary").is_none());
    // Hostile paths and queries: a seq past i64, a negative one, a payload mode that is
    // neither `summary` nor `full` (one with a line break in it too).
    for (path, status) in [
        ("/v1/dlq/999999", 404),
        ("/v1/dlq/lots", 400),
        ("/v1/dlq/99999999999999999999", 400),
        ("/v1/dlq/-1", 404),
        ("/v1/dlq?payloads=everything", 400),
        ("/v1/dlq?payloads=full%0D%0Ax", 400),
    ] {
        let refused = gw.admin.get::<Value>(path);
        assert!(
            matches!(
                refused,
                Err(verdict_cli::client::ClientError::Api { status: s, .. }) if s == status
            ),
            "{path}: {refused:?}"
        );
    }
}

#[test]
fn an_unreachable_consumer_is_retried_as_transport_failures_then_dead_lettered() {
    let dir = scratch_dir("gateway-unreachable");
    // A port nothing listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gw = config(&format!("http://127.0.0.1:{port}/")).start(&dir, "unused");
    publish(&gw, 0..2);
    let counts = drained(&gw, Duration::from_secs(60));
    assert_eq!((counts.dead, counts.total()), (2, 2), "{counts:?}");
    let dead = gw.store.dlq_list(&DlqFilter::default(), u64::MAX).unwrap();
    let errors = &dead[0].envelope.errors;
    assert_eq!(errors.len(), 8);
    assert!(
        errors.iter().all(|e| e.kind == "transport.refused"),
        "{errors:?}"
    );
}

/// A gateway started from a config built in code (`Gateway::start_with`) answers with the
/// token it was given, and has no file to reload: `POST /v1/reload` says so (409) instead
/// of reading one from wherever the process runs.
#[test]
fn a_gateway_started_without_a_file_takes_its_token_and_refuses_a_reload() {
    let dir = scratch_dir("gateway-no-file");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    let gw = config(&consumer.url()).start_on(runtime, &dir, "in-code-token");
    assert!(!dir.join("verdict.toml").exists(), "no file is written");
    publish(&gw, 0..1);
    assert_eq!(drained(&gw, Duration::from_secs(30)).delivered, 1);
    match gw.admin.post::<Value>("/v1/reload", &json!({})) {
        Err(verdict_cli::client::ClientError::Api { status, code, .. }) => {
            assert_eq!((status, code.as_str()), (409, "no_config_file"));
        }
        other => panic!("a reload without a file: {other:?}"),
    }
    let refused = gw.anonymous.post::<Value>("/v1/reload", &json!({}));
    assert!(
        matches!(
            refused,
            Err(verdict_cli::client::ClientError::Api { status: 401, .. })
        ),
        "{refused:?}"
    );
}
