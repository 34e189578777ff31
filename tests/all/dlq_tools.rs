//! The DLQ tools on the brokers: list, stats, export, discard (audited) and replay with a
//! rate limit and a canary - the same operations the embedded store offers, through the
//! same `verdict_gateway::dlq` API, against the real servers.

use std::time::Duration;

use verdict_gateway::dlq::{DeadLetters, ReplayOptions, groups, replay};
use verdict_gateway::sources::nats::NatsDeadLetters;
use verdict_gateway::sources::rabbitmq::RabbitDeadLetters;
use verdict_gateway::store::DlqFilter;
use verdict_registry::GatewayConfig;
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Route, TestConfig};
use verdict_tests::nats::NatsFixture;
use verdict_tests::rabbitmq::RabbitFixture;
use verdict_tests::{scratch_dir, wait_for};

use super::brokers::broker_config;

/// One attempt, then the DLQ: a consumer that is down dead-letters everything.
const ONE_ATTEMPT: &str = r#"{ max_attempts = 1, rules = [
    { match = ["auth.*"], dead_letter = "poison" },
    { match = ["http.5*"], retry = { strategy = "fixed", delay_ms = 20 } },
] }"#;

fn config(section: &str, source: &str, topic: &str, consumer_url: &str) -> TestConfig {
    let group = topic.replace('.', "-");
    broker_config(section, source, topic, &group, consumer_url, ONE_ATTEMPT, 8)
}

fn depth(dlqs: &dyn DeadLetters) -> usize {
    dlqs.list(&DlqFilter::default(), u64::MAX).unwrap().len()
}

/// Ten messages dead-lettered while the consumer is down; then the tools.
fn round_trip(dlqs: &dyn DeadLetters, consumer: &Consumer, topic: &str) {
    assert!(
        wait_for(Duration::from_secs(30), || depth(dlqs) == 10),
        "{}",
        depth(dlqs)
    );
    let entries = dlqs.list(&DlqFilter::default(), u64::MAX).unwrap();
    for e in &entries {
        assert_eq!(e.topic, topic);
        assert_eq!(e.dlq, format!("{topic}.DLQ"));
        assert_eq!(
            (e.class.as_str(), e.kind.as_str()),
            ("exhausted", "http.503")
        );
        assert_eq!(e.attempts, 1);
        assert_eq!(e.envelope.original.id, e.message_id);
    }
    // Grouped by cause, a page at a time, as on the store: one group of ten, the broker
    // keeping no repeat count (nothing parked), and the group a filter that matches them.
    let grouped = groups(&[("broker", dlqs)], &DlqFilter::default(), 3, u64::MAX).unwrap();
    assert_eq!(grouped.len(), 1, "{grouped:#?}");
    assert_eq!((grouped[0].count, grouped[0].parked), (10, 0));
    assert_eq!(grouped[0].dlqs, [format!("{topic}.DLQ")].into());
    let members = DlqFilter {
        group: Some(grouped[0].id.clone()),
        ..DlqFilter::default()
    };
    assert_eq!(dlqs.list(&members, u64::MAX).unwrap().len(), 10);
    let stats = dlqs.stats().unwrap();
    assert_eq!(stats.len(), 1);
    assert_eq!(
        (stats[0].dlq.as_str(), stats[0].depth),
        (format!("{topic}.DLQ").as_str(), 10)
    );
    let limited = DlqFilter {
        limit: Some(3),
        ..DlqFilter::default()
    };
    assert_eq!(dlqs.list(&limited, u64::MAX).unwrap().len(), 3);
    // Page by page, three at a time: every dead letter exactly once.
    let mut paged = Vec::new();
    let mut filter = limited.clone();
    for _ in 0..10 {
        let page = dlqs.page(&filter, u64::MAX).unwrap();
        assert!(page.entries.len() <= 3, "{page:?}");
        paged.extend(page.entries.into_iter().map(|e| e.message_id));
        match page.next {
            Some(next) => filter.after = Some(next),
            None => break,
        }
    }
    let mut all: Vec<String> = entries.iter().map(|e| e.message_id.clone()).collect();
    all.sort();
    paged.sort();
    assert_eq!(paged, all, "pages hold each dead letter once");
    let bad = dlqs.page(
        &DlqFilter {
            after: Some("not-a-cursor".into()),
            ..DlqFilter::default()
        },
        u64::MAX,
    );
    let bad = bad.unwrap_err().to_string();
    assert!(
        bad.contains("after") && bad.contains("not-a-cursor"),
        "{bad}"
    );
    // One letter by its number, as `dlq show` and `replay --seq` name it: that one alone
    // (a broker's DLQ once matched every letter here, so `replay --seq` replayed them all).
    let one = DlqFilter {
        seq: Some(entries[3].seq),
        ..DlqFilter::default()
    };
    let found = dlqs.list(&one, u64::MAX).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].message_id, entries[3].message_id);
    let other = DlqFilter {
        class: Some("poison".into()),
        ..DlqFilter::default()
    };
    assert!(dlqs.list(&other, u64::MAX).unwrap().is_empty());

    // Discard two, for good.
    let two = dlqs
        .list(
            &DlqFilter {
                limit: Some(2),
                ..DlqFilter::default()
            },
            u64::MAX,
        )
        .unwrap();
    assert_eq!(dlqs.discard(&two, "test: duplicates of m-8").unwrap(), 2);
    assert_eq!(depth(dlqs), 8);

    // A canary while the consumer is still down fails, and the rest stays put.
    let options = ReplayOptions {
        canary: Some(2),
        canary_timeout: Duration::from_secs(20),
        note: "test".into(),
        ..ReplayOptions::default()
    };
    let report = replay(dlqs, None, &DlqFilter::default(), &options, |_, _| {}).unwrap();
    let canary = report.canary.expect("a canary ran");
    assert!(!canary.passed, "{canary:?}");
    assert_eq!((report.replayed, canary.size), (2, 2));
    assert!(wait_for(Duration::from_secs(20), || depth(dlqs) == 8));

    // Fixed: a rate-limited replay with a canary drains the DLQ.
    consumer.demo.set_down(false);
    let options = ReplayOptions {
        rate_per_s: Some(50.0),
        ..options
    };
    let report = replay(dlqs, None, &DlqFilter::default(), &options, |_, _| {}).unwrap();
    assert!(
        report.canary.as_ref().is_some_and(|c| c.passed),
        "{report:?}"
    );
    assert_eq!(report.replayed, 8);
    assert!(wait_for(Duration::from_secs(30), || consumer
        .snapshot()
        .1
        .len()
        == 8));
    assert!(wait_for(Duration::from_secs(10), || depth(dlqs) == 0));
    let (_, accepted) = consumer.snapshot();
    for e in &entries[2..] {
        assert_eq!(accepted.get(&e.message_id), Some(&1), "{}", e.message_id);
    }
}

#[test]
fn the_dlq_tools_work_on_jetstream() {
    let dir = scratch_dir("dlq-tools-nats");
    let nats = NatsFixture::new("dlqtools");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    consumer.demo.set_down(true);
    let topic = nats.subject("orders");
    // Reading the broker's DLQ through the admin API needs the token.
    let test_config =
        config(&nats.section(), "nats", &topic, &consumer.url()).set("admin.token_file", "token");
    let gw = test_config.start_on(runtime, &dir, "dlq-token");
    assert!(wait_for(Duration::from_secs(20), || {
        gw.anonymous
            .get_text("/readyz")
            .is_ok_and(|t| t == "ready\n")
    }));
    nats.publish("orders", 0..10);
    let config = GatewayConfig::parse(&test_config.text(), "(test config)").unwrap();
    let dlqs = NatsDeadLetters::connect(&config).unwrap();
    assert!(wait_for(Duration::from_secs(30), || depth(&dlqs) == 10));
    // The admin API reads the broker's DLQ too, with the token.
    let anonymous = gw
        .anonymous
        .get::<serde_json::Value>("/v1/dlq/stats?source=nats");
    assert!(format!("{anonymous:?}").contains("401"), "{anonymous:?}");
    let stats: serde_json::Value = gw.admin.get("/v1/dlq/stats?source=nats").unwrap();
    assert_eq!(stats[0]["depth"], 10, "{stats}");
    let listed: serde_json::Value = gw.admin.get("/v1/dlq?source=nats&limit=3").unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed}");
    // One letter on its own, by its number.
    let seq = &listed[1]["seq"];
    let one: serde_json::Value = gw.admin.get(&format!("/v1/dlq/{seq}?source=nats")).unwrap();
    assert_eq!(one["message_id"], listed[1]["message_id"], "{one}");
    let anonymous = gw
        .anonymous
        .get::<serde_json::Value>(&format!("/v1/dlq/{seq}?source=nats"));
    assert!(format!("{anonymous:?}").contains("401"), "{anonymous:?}");
    // Grouped across every source: the store holds none, the stream ten - one group, from
    // NATS. Reading a broker needs the token.
    let anonymous = gw
        .anonymous
        .get::<serde_json::Value>("/v1/dlq/groups?source=all");
    assert!(format!("{anonymous:?}").contains("401"), "{anonymous:?}");
    let groups: serde_json::Value = gw.admin.get("/v1/dlq/groups?source=all").unwrap();
    assert_eq!(groups.as_array().map(Vec::len), Some(1), "{groups}");
    assert_eq!(groups[0]["count"], 10, "{groups}");
    assert_eq!(
        groups[0]["sources"],
        serde_json::json!(["nats"]),
        "{groups}"
    );
    let refused = gw
        .admin
        .get::<serde_json::Value>("/v1/dlq/groups?source=sqs");
    assert!(
        format!("{refused:?}").contains("expected embedded, nats, rabbitmq, kafka or all"),
        "{refused:?}"
    );
    let refused = gw.admin.get::<serde_json::Value>("/v1/dlq?source=sqs");
    assert!(format!("{refused:?}").contains("400"), "{refused:?}");
    // A build without the Kafka source says so rather than failing to connect.
    #[cfg(not(feature = "kafka"))]
    {
        let left_out = gw.admin.get::<serde_json::Value>("/v1/dlq?source=kafka");
        assert!(
            format!("{left_out:?}").contains("501")
                && format!("{left_out:?}").contains("without the Kafka source"),
            "{left_out:?}"
        );
    }
    round_trip(&dlqs, &consumer, &topic);
    let audit: Vec<String> = nats
        .messages("_AUDIT")
        .iter()
        .map(|m| m.subject.to_string())
        .collect();
    let count = |event: &str| audit.iter().filter(|s| s.ends_with(event)).count();
    assert_eq!(count(".dlq-discarded"), 2, "{audit:?}");
    assert_eq!(count(".replayed"), 10, "{audit:?}");
}

#[test]
fn the_dlq_tools_work_on_rabbitmq() {
    let dir = scratch_dir("dlq-tools-rabbit");
    let mq = RabbitFixture::new("dlqtools");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    consumer.demo.set_down(true);
    let topic = mq.queue("orders");
    let instance = format!("gw-{}", mq.prefix);
    let test_config = config(&mq.section(), "rabbitmq", &topic, &consumer.url())
        .set("gateway.instance", instance.as_str())
        .set("admin.token_file", "token");
    let gw = test_config.start_on(runtime, &dir, "dlq-token");
    assert!(wait_for(Duration::from_secs(20), || {
        gw.anonymous
            .get_text("/readyz")
            .is_ok_and(|t| t == "ready\n")
    }));
    mq.publish("orders", 0..10);
    let config = GatewayConfig::parse(&test_config.text(), "(test config)").unwrap();
    let dlqs = RabbitDeadLetters::connect(&config).unwrap();
    assert!(wait_for(Duration::from_secs(30), || depth(&dlqs) == 10));
    // Through the admin API: pages and stats over one kept connection, and a page holds
    // the DLQ's messages only while it is read.
    let name = format!("verdict {instance} dlq tools");
    let before = mq.connections_named(&name);
    let mut seen = Vec::new();
    let mut path = "/v1/dlq?source=rabbitmq&limit=4".to_string();
    for _ in 0..5 {
        let (page, next): (Vec<serde_json::Value>, _) = gw.admin.get_page(&path).unwrap();
        assert!(page.len() <= 4);
        seen.extend(
            page.iter()
                .map(|e| e["message_id"].as_str().unwrap().to_string()),
        );
        assert_eq!(
            mq.depth(&format!("{topic}.DLQ")),
            10,
            "nothing held after a page"
        );
        match next {
            Some(next) => path = format!("/v1/dlq?source=rabbitmq&limit=4&after={next}"),
            None => break,
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 10, "{seen:?}");
    let stats: serde_json::Value = gw.admin.get("/v1/dlq/stats?source=rabbitmq").unwrap();
    assert_eq!(stats[0]["depth"], 10, "{stats}");
    assert_eq!(
        mq.connections_named(&name),
        before + 1,
        "the API keeps one connection for all its requests: {name}"
    );
    round_trip(&dlqs, &consumer, &topic);
    let audit: Vec<String> = mq
        .take_all(&format!("{}.audit", mq.prefix))
        .iter()
        .map(|(_, body)| {
            serde_json::from_slice::<serde_json::Value>(body).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let count = |event: &str| audit.iter().filter(|s| *s == event).count();
    assert_eq!(count("dlq-discarded"), 2, "{audit:?}");
    assert_eq!(count("replayed"), 10, "{audit:?}");
    assert_eq!(count("replay-delivered"), 8, "{audit:?}");
}

/// On Kafka the tools read the DLQ topics and mark what they replay or discard in the
/// settled topic (a letter cannot be taken out of a log): listings skip marked letters and
/// records another writer put in a DLQ topic; replays go back to the route's topic with the
/// record's own key and headers, and arrive (the canary reads the audit topic).
#[cfg(feature = "kafka")]
#[test]
fn the_dlq_tools_work_on_kafka() {
    use rdkafka::Message as _;
    use verdict_gateway::sources::kafka::KafkaDeadLetters;
    use verdict_tests::kafka::KafkaFixture;
    let dir = scratch_dir("dlq-tools-kafka");
    let broker = KafkaFixture::new("dlqtools");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    consumer.demo.set_down(true);
    let topic = broker.topic("orders");
    let test_config = config(&broker.section(), "kafka", &topic, &consumer.url())
        .set("admin.token_file", "token");
    let gw = test_config.start_on(runtime, &dir, "dlq-token");
    gw.wait_ready();
    // A record of another writer's in the DLQ topic (a Spring application's own): not a
    // letter of ours, never listed, replayed or counted.
    let dlq = format!("{topic}.DLQ");
    broker.publish("orders", 0..10);
    let config = GatewayConfig::parse(&test_config.text(), "(test config)").unwrap();
    let dlqs = KafkaDeadLetters::connect(&config).unwrap();
    assert!(wait_for(Duration::from_secs(30), || depth(&dlqs) == 10));
    broker.produce(
        &dlq,
        "spring",
        b"{}",
        &[(
            "kafka_dlt-exception-fqcn",
            b"java.lang.IllegalStateException",
        )],
    );
    // Through the admin API, with the token: stats and pages.
    let anonymous = gw
        .anonymous
        .get::<serde_json::Value>("/v1/dlq/stats?source=kafka");
    assert!(format!("{anonymous:?}").contains("401"), "{anonymous:?}");
    let stats: serde_json::Value = gw.admin.get("/v1/dlq/stats?source=kafka").unwrap();
    assert_eq!(stats[0]["depth"], 10, "{stats}");
    let mut seen = Vec::new();
    let mut path = "/v1/dlq?source=kafka&limit=4".to_string();
    for _ in 0..5 {
        let (page, next): (Vec<serde_json::Value>, _) = gw.admin.get_page(&path).unwrap();
        assert!(page.len() <= 4);
        seen.extend(
            page.iter()
                .map(|e| e["message_id"].as_str().unwrap().to_string()),
        );
        match next {
            Some(next) => path = format!("/v1/dlq?source=kafka&limit=4&after={next}"),
            None => break,
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 10, "{seen:?}");
    let groups: serde_json::Value = gw.admin.get("/v1/dlq/groups?source=kafka").unwrap();
    assert_eq!(groups[0]["count"], 10, "{groups}");
    // The command line's way in opens the same tools.
    let path = dir.join("verdict.toml");
    std::fs::write(&path, test_config.text()).unwrap();
    let (_, cli) = verdict_cli::cli::dlq::open(&path, verdict_registry::SourceKind::Kafka).unwrap();
    assert_eq!(depth(cli.as_ref()), 10);

    round_trip(&dlqs, &consumer, &topic);
    // Every record is still in the DLQ topic - the ten letters, another writer's record, the
    // two letters of the canary that failed - and none is a letter to list any more.
    assert_eq!(broker.depth(&dlq), 13);
    assert_eq!(depth(cli.as_ref()), 0, "another reader sees the marks too");
    // The replays were the records themselves, back in the route's topic.
    let replayed: Vec<_> = broker
        .records(&topic)
        .into_iter()
        .filter(|r| KafkaFixture::header(r, "verdict-replay").is_some())
        .collect();
    assert_eq!(replayed.len(), 10);
    for r in &replayed {
        let id = KafkaFixture::header(r, "message-id").unwrap();
        assert_eq!(r.key(), Some(&id[..]), "the original key");
        assert_eq!(
            KafkaFixture::header(r, "tenant").as_deref(),
            Some(&b"eu"[..])
        );
        assert!(KafkaFixture::header(r, "verdict-envelope").is_none());
        assert!(KafkaFixture::header(r, "kafka_dlt-original-topic").is_none());
    }
    let audit: Vec<String> = broker
        .records(&broker.topic("audit"))
        .iter()
        .map(|r| {
            serde_json::from_slice::<serde_json::Value>(r.payload().unwrap()).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let count = |event: &str| audit.iter().filter(|s| *s == event).count();
    assert_eq!(count("dlq-discarded"), 2, "{audit:?}");
    assert_eq!(count("replayed"), 10, "{audit:?}");
    assert_eq!(count("replay-delivered"), 8, "{audit:?}");
}

/// Reading a DLQ that is not there yet creates nothing on the broker: no stream, no queue.
#[test]
fn broker_dlq_reads_create_nothing() {
    let dir = scratch_dir("dlq-read-only");
    let nats = NatsFixture::new("dlqro");
    let mq = RabbitFixture::new("dlqro");
    let nats_route = config(
        &nats.section(),
        "nats",
        &nats.subject("orders"),
        "http://127.0.0.1:9",
    );
    let path = nats_route
        .merge("", &mq.section())
        .route(
            Route::new(&mq.queue("orders"), "rules")
                .set("source", "rabbitmq")
                .set("consumer.url", "http://127.0.0.1:9"),
        )
        .write_toml(&dir);
    let config = GatewayConfig::load(&path).unwrap();
    let on_nats = NatsDeadLetters::connect(&config).unwrap();
    let on_rabbit = RabbitDeadLetters::connect(&config).unwrap();
    for dlqs in [&on_nats as &dyn DeadLetters, &on_rabbit] {
        assert!(
            dlqs.page(&DlqFilter::default(), u64::MAX)
                .unwrap()
                .entries
                .is_empty()
        );
        assert!(dlqs.stats().unwrap().is_empty());
        assert!(depth(dlqs) == 0);
    }
    assert!(!nats.stream_exists(&format!("{}_DLQ", nats.prefix)));
    assert!(!nats.stream_exists(&format!("{}_AUDIT", nats.prefix)));
    assert!(!mq.exists(&format!("{}.DLQ", mq.queue("orders"))));
}
