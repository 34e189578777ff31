//! Real brokers through the real binaries: on NATS JetStream, RabbitMQ and Kafka, a gateway
//! `kill -9`ed mid-run and the broker itself restarted mid-run lose nothing; duplicates are
//! counted, and a route ordered by key keeps each key's order through both. A broker restart would disturb any other test on that broker: the tests on a
//! shared broker take turns (test binaries run one at a time, so no other file's tests are
//! running); the Kafka tests each run a broker of their own.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Proc, accepted, consumer, rules, spawn, wait_until};
use futures_util::StreamExt as _;
use verdict_cli::demo::{Behaviour, by_percent};
use verdict_gateway::sources::rabbitmq::topology::delay_names;
use verdict_tests::gateway::{Route, TestConfig};

const RULES: &str = r#"{ max_attempts = 8, rules = [
    { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
    { match = ["http.5*", "transport.*"], retry = { strategy = "fixed", delay_ms = 50 } },
] }"#;

/// The route `topic` from `source` to `consumer`.
fn route(topic: &str, source: &str, consumer: &Proc) -> Route {
    Route::new(topic, "rules")
        .set("source", source)
        .config(RULES)
        .consumer(&format!("{}/", consumer.url))
}

/// A config of `route` alone, without an admin token.
fn config_of(route: Route) -> TestConfig {
    TestConfig::new()
        .unset("admin.token_file")
        .policy("rules", "rules.wasm")
        .route(route)
}

/// A config of the route `topic` from `source` to `consumer`, without an admin token.
fn config(topic: &str, source: &str, consumer: &Proc) -> TestConfig {
    config_of(route(topic, source, consumer))
}

fn gateway(config: &Path) -> Proc {
    spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    )
}

fn dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(rules(), dir.join("rules.wasm")).unwrap();
    dir
}

fn ready(gw: &Proc) -> bool {
    ureq::get(&format!("{}/readyz", gw.url))
        .call()
        .is_ok_and(|r| r.status() == 200)
}

/// The demo consumer's `/stats`.
fn stats(consumer: &Proc) -> serde_json::Value {
    ureq::get(&format!("{}/stats", consumer.url))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap()
}

fn duplicates(consumer: &Proc) -> u64 {
    stats(consumer)["duplicates"].as_u64().unwrap()
}

fn permanent_ids(n: u32) -> BTreeSet<String> {
    let rule = by_percent(20, 5);
    (0..n)
        .map(|i| format!("m-{i}"))
        .filter(|id| rule(id) == Behaviour::Permanent)
        .collect()
}

fn port_open(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Runs `start` when dropped if the broker's port is closed: a failed test must not leave
/// the machine without its broker.
struct Restore {
    port: u16,
    start: Box<dyn Fn()>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if !port_open(self.port) {
            (self.start)();
            wait_until(Duration::from_secs(60), || port_open(self.port));
        }
    }
}

/// The gateway's run of 1,000 messages through a restart of the gateway (`kill -9`) and of
/// the broker (`restart_broker`), ending when every message is delivered or dead-lettered.
struct Run {
    consumer: Proc,
    config: PathBuf,
}

impl Run {
    fn through(&self, restart_broker: impl FnOnce(&Proc), publish: impl FnOnce()) -> Proc {
        let mut gw = gateway(&self.config);
        assert!(wait_until(Duration::from_secs(30), || ready(&gw)));
        publish();
        assert!(wait_until(Duration::from_secs(60), || accepted(
            &self.consumer
        ) >= 200));
        gw.child.kill().unwrap(); // SIGKILL
        gw.child.wait().unwrap();
        let gw = gateway(&self.config);
        assert!(wait_until(Duration::from_secs(60), || accepted(
            &self.consumer
        ) >= 500));
        restart_broker(&gw);
        gw
    }
}

// ---- NATS ------------------------------------------------------------------------------

fn nats_server_command() -> Vec<String> {
    let pid = nats_server_pid();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn start_detached(command: &[String]) {
    Command::new("setsid")
        .arg("-f")
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("setsid starts the server");
}

/// The NATS tests restart the machine's server: one at a time.
static NATS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Stop the machine's NATS server, see `gw` report it lost, and start it again.
fn restart_nats(gw: &Proc, command: &[String]) {
    let pid = nats_server_pid();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(wait_until(Duration::from_secs(30), || !port_open(4222)));
    assert!(
        wait_until(Duration::from_secs(10), || !ready(gw)),
        "/readyz reports the lost broker"
    );
    start_detached(command);
    assert!(wait_until(Duration::from_secs(30), || port_open(4222)));
}

/// How many dead letters of each original id the DLQ stream `stream` holds.
fn nats_dlq_ids(
    runtime: &tokio::runtime::Runtime,
    js: &async_nats::jetstream::Context,
    stream: &str,
) -> BTreeMap<String, u32> {
    runtime.block_on(async {
        let mut ids = BTreeMap::new();
        let Ok(mut stream) = js.get_stream(stream).await else {
            return ids;
        };
        let state = stream.info().await.unwrap().state.clone();
        if state.messages == 0 {
            return ids;
        }
        for seq in state.first_sequence..=state.last_sequence {
            if let Ok(m) = stream.get_raw_message(seq).await {
                let e: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
                *ids.entry(e["original"]["id"].as_str().unwrap().to_string())
                    .or_default() += 1;
            }
        }
        ids
    })
}

/// A test's NATS settings: its own stream, DLQ and audit streams, history bucket and
/// consumer group, all named after `prefix`.
fn nats_settings(config: TestConfig, prefix: &str) -> TestConfig {
    config
        .set("gateway.consumer_group", prefix)
        .set("nats.stream", prefix)
        .set("nats.dlq_stream", format!("{prefix}_DLQ"))
        .set("nats.dlq_subject_prefix", format!("{prefix}dlq"))
        .set("nats.audit_stream", format!("{prefix}_AUDIT"))
        .set("nats.audit_subject_prefix", format!("{prefix}audit"))
        .set("nats.history_bucket", format!("{prefix}-history"))
        .set("nats.ack_wait_ms", 3000)
}

/// Delete what [`nats_settings`] named.
fn nats_clean(
    runtime: &tokio::runtime::Runtime,
    js: &async_nats::jetstream::Context,
    prefix: &str,
) {
    runtime.block_on(async {
        for s in [
            prefix.to_string(),
            format!("{prefix}_DLQ"),
            format!("{prefix}_AUDIT"),
            format!("KV_{prefix}-history"),
        ] {
            let _ = js.delete_stream(&s).await;
        }
    });
}

fn nats_connect(runtime: &tokio::runtime::Runtime) -> async_nats::jetstream::Context {
    runtime
        .block_on(async {
            async_nats::connect("nats://127.0.0.1:4222")
                .await
                .map(async_nats::jetstream::new)
        })
        .unwrap()
}

#[test]
fn nats_kill_9_and_a_server_restart_lose_nothing() {
    let _turn = NATS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = dir("brokers-nats");
    let prefix = format!("k{}", std::process::id());
    let consumer = consumer("127.0.0.1:0", 5);
    let config = nats_settings(
        config(&format!("{prefix}.orders"), "nats", &consumer),
        &prefix,
    )
    .write_toml(&dir);
    let command = nats_server_command();
    let _restore = Restore {
        port: 4222,
        start: Box::new({
            let command = command.clone();
            move || start_detached(&command)
        }),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let js = nats_connect(&runtime);
    let run = Run { consumer, config };
    let gw = run.through(
        |gw| restart_nats(gw, &command),
        || {
            runtime.block_on(async {
                let mut acks = Vec::new();
                for i in 0..1_000 {
                    let mut headers = async_nats::HeaderMap::new();
                    headers.insert("Nats-Msg-Id", format!("m-{i}").as_str());
                    let payload = format!(r#"{{"order": {i}}}"#);
                    acks.push(
                        js.publish_with_headers(
                            format!("{prefix}.orders"),
                            headers,
                            payload.into(),
                        )
                        .await
                        .unwrap(),
                    );
                }
                for ack in acks {
                    ack.await.unwrap();
                }
            });
        },
    );
    assert!(
        wait_until(Duration::from_secs(60), || ready(&gw)),
        "/readyz recovers"
    );

    // Count equality against the broker: delivered + dead-lettered = 1,000, each once.
    let permanent = permanent_ids(1_000);
    let dlq_ids = || nats_dlq_ids(&runtime, &js, &format!("{prefix}_DLQ"));
    let done = wait_until(Duration::from_secs(180), || {
        accepted(&run.consumer) == 1_000 - permanent.len() as u64
            && dlq_ids().len() == permanent.len()
    });
    assert!(
        done,
        "accepted {}, dead {}",
        accepted(&run.consumer),
        dlq_ids().len()
    );
    let dead = dlq_ids();
    assert_eq!(dead.keys().cloned().collect::<BTreeSet<_>>(), permanent);
    // The operator's view through the binary agrees with the stream.
    let out = common::verdict(
        &[
            "dlq",
            "stats",
            "--source",
            "nats",
            "--json",
            "-c",
            run.config.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total: u64 = stats
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["depth"].as_u64().unwrap())
        .sum();
    assert_eq!(total, dead.values().map(|n| u64::from(*n)).sum::<u64>());
    eprintln!(
        "nats: kill -9 and a server restart mid-run: {} duplicate deliveries, {} duplicate dead letters",
        duplicates(&run.consumer),
        dead.values().map(|n| n - 1).sum::<u32>()
    );
    nats_clean(&runtime, &js, &prefix);
}

/// NATS, ordered by key: two gateways share the route (one delivers it, the other stands
/// by); 10 keys x 100 messages published interleaved, 20% failing 1-3 times and 5% for
/// good; the gateway delivering `kill -9`ed at a fifth (the other takes over once its record
/// goes stale and what it held comes back; the killed one comes back to stand by), the
/// server stopped and started at half. Every delivery is checked against its key's order.
#[test]
fn nats_ordered_keys_stay_in_publish_order_through_kill_9_a_takeover_and_a_server_restart() {
    let _turn = NATS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    const KEYS: u32 = 10;
    const PER_KEY: u32 = 100;
    let total = KEYS * PER_KEY;
    let prefix = format!("n{}", std::process::id());
    let subject = format!("{prefix}.orders");
    let consumer = common::ordered_consumer(5);
    let (dir_a, dir_b) = (dir("brokers-nats-ordered-a"), dir("brokers-nats-ordered-b"));
    let config = |dir: &Path| {
        nats_settings(
            config_of(
                route(&subject, "nats", &consumer)
                    .set("ordering", "key")
                    .set("key_header", "order-id"),
            ),
            &prefix,
        )
        .write_toml(dir)
    };
    let (config_a, config_b) = (config(&dir_a), config(&dir_b));
    let command = nats_server_command();
    let _restore = Restore {
        port: 4222,
        start: Box::new({
            let command = command.clone();
            move || start_detached(&command)
        }),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let js = nats_connect(&runtime);
    let mut a = gateway(&config_a);
    assert!(wait_until(Duration::from_secs(30), || ready(&a)));
    // `a` takes the route first; `b` finds it held.
    std::thread::sleep(Duration::from_secs(2));
    let b = gateway(&config_b);
    assert!(
        wait_until(Duration::from_secs(30), || ready(&b)),
        "a gateway standing by is ready"
    );
    runtime.block_on(async {
        let mut acks = Vec::new();
        for n in 0..PER_KEY {
            for k in 0..KEYS {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", format!("m-{}", n * KEYS + k).as_str());
                headers.insert("Order-Id", format!("key-{k}").as_str());
                headers.insert("Order-Seq", n.to_string().as_str());
                headers.insert("Content-Type", "application/json");
                let payload = format!(r#"{{"key": {k}, "n": {n}}}"#);
                acks.push(
                    js.publish_with_headers(subject.clone(), headers, payload.into())
                        .await
                        .unwrap(),
                );
            }
        }
        for ack in acks {
            ack.await.unwrap();
        }
    });
    assert!(wait_until(Duration::from_secs(120), || accepted(&consumer)
        >= u64::from(total / 5)));
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let a = gateway(&config_a);
    assert!(
        wait_until(Duration::from_secs(120), || accepted(&consumer)
            >= u64::from(total / 2)),
        "the route is delivered again after its holder's kill"
    );
    restart_nats(&b, &command);
    assert!(
        wait_until(Duration::from_secs(60), || ready(&a) && ready(&b)),
        "/readyz recovers"
    );
    let permanent = permanent_ids(total);
    let dlq_ids = || nats_dlq_ids(&runtime, &js, &format!("{prefix}_DLQ"));
    let done = wait_until(Duration::from_secs(240), || {
        accepted(&consumer) == u64::from(total) - permanent.len() as u64
            && dlq_ids().len() == permanent.len()
    });
    assert!(
        done,
        "accepted {}, dead {}",
        accepted(&consumer),
        dlq_ids().len()
    );
    drop((a, b));
    let dead = dlq_ids();
    assert_eq!(dead.keys().cloned().collect::<BTreeSet<_>>(), permanent);
    let stats = stats(&consumer);
    eprintln!(
        "nats, ordered by key: {total} messages through kill -9, a takeover and a server \
         restart: {} overtaken, {} duplicate deliveries, {} duplicate dead letters",
        stats["overtaken"],
        stats["duplicates"],
        dead.values().map(|n| n - 1).sum::<u32>()
    );
    nats_clean(&runtime, &js, &prefix);
    assert_eq!(stats["overtaken"], 0, "{}", stats["overtakes"]);
    // Every delivery was checked: each carried its key and number.
    assert_eq!(stats["ordered"], stats["deliveries"], "{stats}");
}

fn nats_server_pid() -> String {
    let out = Command::new("pgrep")
        .args(["-x", "nats-server"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("nats-server runs")
        .to_string()
}

// ---- RabbitMQ --------------------------------------------------------------------------

fn rabbitmqctl(args: &[&str]) {
    let status = Command::new("rabbitmqctl")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rabbitmqctl runs");
    assert!(status.success(), "rabbitmqctl {args:?}");
}

/// The RabbitMQ server the tests use.
const RABBITMQ_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Publish `messages` (properties and payload, made persistent) to `queue`, declared
/// durable when missing, and wait for every confirm.
fn rabbitmq_publish(
    runtime: &tokio::runtime::Runtime,
    queue: &str,
    messages: Vec<(lapin::BasicProperties, Vec<u8>)>,
) {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
    runtime.block_on(async {
        let conn = lapin::Connection::connect(RABBITMQ_URL, Default::default())
            .await
            .unwrap();
        let channel = conn.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::durable(),
                Default::default(),
            )
            .await
            .unwrap();
        let mut confirms = Vec::new();
        for (properties, payload) in messages {
            let publish = channel.basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                &payload,
                properties.with_delivery_mode(2),
            );
            confirms.push(publish.await.unwrap());
        }
        futures_util::stream::iter(confirms)
            .for_each(|c| async move { assert!(c.await.unwrap().is_ack()) })
            .await;
    });
}

/// The messages ready in `queue`, or `None` when it does not exist (or the broker is away).
fn rabbitmq_depth(runtime: &tokio::runtime::Runtime, queue: &str) -> Option<u64> {
    use lapin::options::QueueDeclareOptions;
    runtime.block_on(async {
        let conn = lapin::Connection::connect(RABBITMQ_URL, Default::default())
            .await
            .ok()?;
        let channel = conn.create_channel().await.ok()?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let q = channel
            .queue_declare(queue.into(), passive, Default::default())
            .await
            .ok()?;
        Some(u64::from(q.message_count()))
    })
}

/// Take every envelope from `dlq` (counted per original message id), then delete `queues`
/// and every queue and exchange a gateway may have made under `delay_prefix`.
fn rabbitmq_drain_and_clean(
    runtime: &tokio::runtime::Runtime,
    dlq: &str,
    queues: &[String],
    delay_prefix: &str,
) -> BTreeMap<String, u32> {
    use lapin::options::{BasicGetOptions, QueueDeleteOptions};
    runtime.block_on(async {
        let conn = lapin::Connection::connect(RABBITMQ_URL, Default::default())
            .await
            .unwrap();
        let channel = conn.create_channel().await.unwrap();
        let mut ids = BTreeMap::new();
        while let Ok(Some(m)) = channel
            .basic_get(dlq.into(), BasicGetOptions { no_ack: true })
            .await
        {
            let e: serde_json::Value = serde_json::from_slice(&m.delivery.data).unwrap();
            *ids.entry(e["original"]["id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        // A failed delete closes its channel: one channel each.
        let buckets = delay_names(delay_prefix);
        for q in queues.iter().chain(&buckets) {
            if let Ok(ch) = conn.create_channel().await {
                let _ = ch
                    .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                    .await;
            }
        }
        for e in &buckets {
            if let Ok(ch) = conn.create_channel().await {
                let _ = ch
                    .exchange_delete(e.as_str().into(), Default::default())
                    .await;
            }
        }
        ids
    })
}

/// The RabbitMQ tests each restart the one broker: they take turns.
static RABBITMQ: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn rabbitmq_kill_9_and_a_broker_restart_lose_nothing() {
    let _turn = RABBITMQ
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = dir("brokers-rabbitmq");
    let prefix = format!("k{}", std::process::id());
    let queue = format!("{prefix}.orders");
    let dlq = format!("{queue}.DLQ");
    let consumer = consumer("127.0.0.1:0", 5);
    let config = config(&queue, "rabbitmq", &consumer)
        .set("rabbitmq.delay_prefix", format!("{prefix}.delay"))
        .set("rabbitmq.audit_queue", format!("{prefix}.audit"))
        .write_toml(&dir);
    let _restore = Restore {
        port: 5672,
        start: Box::new(|| rabbitmqctl(&["start_app"])),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let run = Run { consumer, config };
    let gw = run.through(
        |gw| {
            rabbitmqctl(&["stop_app"]);
            assert!(
                wait_until(Duration::from_secs(10), || !ready(gw)),
                "/readyz reports the lost broker"
            );
            rabbitmqctl(&["start_app"]);
            assert!(wait_until(Duration::from_secs(60), || port_open(5672)));
        },
        || {
            let messages = (0..1_000)
                .map(|i| {
                    let properties =
                        lapin::BasicProperties::default().with_message_id(format!("m-{i}").into());
                    (properties, format!(r#"{{"order": {i}}}"#).into_bytes())
                })
                .collect();
            rabbitmq_publish(&runtime, &queue, messages);
        },
    );
    assert!(
        wait_until(Duration::from_secs(60), || ready(&gw)),
        "/readyz recovers"
    );

    let permanent = permanent_ids(1_000);
    let depth = |name: &str| rabbitmq_depth(&runtime, name).unwrap_or(0);
    let done = wait_until(Duration::from_secs(180), || {
        accepted(&run.consumer) == 1_000 - permanent.len() as u64
            && depth(&dlq) >= permanent.len() as u64
            && depth(&queue) == 0
    });
    assert!(
        done,
        "accepted {}, dead {}",
        accepted(&run.consumer),
        depth(&dlq)
    );
    drop(gw);
    // Every permanent failure is in the DLQ; a crash between the confirm and the ack may
    // have written one twice (a duplicate, never a loss).
    let queues = [queue.clone(), dlq.clone(), format!("{prefix}.audit")];
    let dead = rabbitmq_drain_and_clean(&runtime, &dlq, &queues, &format!("{prefix}.delay"));
    assert_eq!(dead.keys().cloned().collect::<BTreeSet<_>>(), permanent);
    eprintln!(
        "rabbitmq: kill -9 and a broker restart mid-run: {} duplicate deliveries, {} duplicate dead letters",
        duplicates(&run.consumer),
        dead.values().map(|n| n - 1).sum::<u32>()
    );
}

/// A RabbitMQ route ordered by key, consumed by two gateways: one holds the queue (its
/// exclusive consumer), the other stands by. 10 keys x 100 messages published interleaved,
/// 20% failing 1-3 times and 5% for good; the holder is `kill -9`ed at a fifth (the other
/// takes over, and the killed one comes back to stand by), another route's queue is
/// deleted at a third (the broker cancels its consumers: every session is rebuilt, the
/// ordered queue's channel closed under its held messages) and the broker restarted at
/// half. The consumer checks every delivery against the one before it of its key:
/// redeliveries after the kill are duplicates - counted, never out of order - and every
/// message ends delivered or dead-lettered, none through a delay bucket.
#[test]
fn rabbitmq_ordered_keys_stay_in_publish_order_through_kill_9_a_takeover_and_a_broker_restart() {
    let _turn = RABBITMQ
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    use lapin::types::{AMQPValue, FieldTable, LongString};
    const KEYS: u32 = 10;
    const PER_KEY: u32 = 100;
    let total = KEYS * PER_KEY;
    let prefix = format!("o{}", std::process::id());
    let queue = format!("{prefix}.orders");
    let dlq = format!("{queue}.DLQ");
    let other = format!("{prefix}.other");
    let consumer = common::ordered_consumer(5);
    let (dir_a, dir_b) = (
        dir("brokers-rabbitmq-ordered-a"),
        dir("brokers-rabbitmq-ordered-b"),
    );
    // Gateways sharing a queue sign its history with one key.
    let history_key = dir_a.join("shared-history.key");
    std::fs::write(&history_key, [7u8; 32]).unwrap();
    let config = |dir: &Path| {
        config_of(
            route(&queue, "rabbitmq", &consumer)
                .set("ordering", "key")
                .set("key_header", "order-id"),
        )
        .route(route(&other, "rabbitmq", &consumer))
        .set("rabbitmq.delay_prefix", format!("{prefix}.delay"))
        .set("rabbitmq.audit_queue", format!("{prefix}.audit"))
        .set(
            "rabbitmq.history_key_file",
            history_key.display().to_string(),
        )
        .write_toml(dir)
    };
    let (config_a, config_b) = (config(&dir_a), config(&dir_b));
    let _restore = Restore {
        port: 5672,
        start: Box::new(|| rabbitmqctl(&["start_app"])),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut a = gateway(&config_a);
    assert!(wait_until(Duration::from_secs(30), || ready(&a)));
    let b = gateway(&config_b);
    assert!(
        wait_until(Duration::from_secs(30), || ready(&b)),
        "a gateway standing by is ready"
    );
    let messages = (0..PER_KEY)
        .flat_map(|n| (0..KEYS).map(move |k| (n, k)))
        .map(|(n, k)| {
            let mut headers = FieldTable::default();
            for (name, value) in [
                ("Order-Id", format!("key-{k}")),
                ("Order-Seq", n.to_string()),
            ] {
                headers.insert(name.into(), AMQPValue::LongString(LongString::from(value)));
            }
            let properties = lapin::BasicProperties::default()
                .with_message_id(format!("m-{}", n * KEYS + k).into())
                .with_content_type("application/json".into())
                .with_headers(headers);
            (
                properties,
                format!(r#"{{"key": {k}, "n": {n}}}"#).into_bytes(),
            )
        })
        .collect();
    rabbitmq_publish(&runtime, &queue, messages);
    assert!(wait_until(Duration::from_secs(120), || accepted(&consumer)
        >= u64::from(total / 5)));
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let a = gateway(&config_a);
    assert!(
        wait_until(Duration::from_secs(120), || accepted(&consumer)
            >= u64::from(total / 3)),
        "the gateway standing by took the queue over"
    );
    runtime.block_on(async {
        let conn = lapin::Connection::connect(RABBITMQ_URL, Default::default())
            .await
            .unwrap();
        let channel = conn.create_channel().await.unwrap();
        channel
            .queue_delete(other.as_str().into(), Default::default())
            .await
            .unwrap();
    });
    assert!(wait_until(Duration::from_secs(120), || accepted(&consumer)
        >= u64::from(total / 2)));
    rabbitmqctl(&["stop_app"]);
    assert!(
        wait_until(Duration::from_secs(10), || !ready(&b)),
        "/readyz reports the lost broker"
    );
    rabbitmqctl(&["start_app"]);
    assert!(wait_until(Duration::from_secs(60), || port_open(5672)));
    assert!(
        wait_until(Duration::from_secs(60), || ready(&a) && ready(&b)),
        "/readyz recovers"
    );
    let permanent = permanent_ids(total);
    let depth = |name: &str| rabbitmq_depth(&runtime, name);
    let done = wait_until(Duration::from_secs(240), || {
        accepted(&consumer) == u64::from(total) - permanent.len() as u64
            && depth(&dlq).unwrap_or(0) >= permanent.len() as u64
            && depth(&queue) == Some(0)
    });
    assert!(
        done,
        "accepted {}, dead {:?}, waiting {:?}",
        accepted(&consumer),
        depth(&dlq),
        depth(&queue)
    );
    drop((a, b));
    let buckets = delay_names(&format!("{prefix}.delay"));
    let declared: Vec<&String> = buckets
        .iter()
        .filter(|name| !name.contains(".due") && depth(name).is_some())
        .collect();
    let queues = [
        queue.clone(),
        dlq.clone(),
        other.clone(),
        format!("{other}.DLQ"),
        format!("{prefix}.audit"),
    ];
    let dead = rabbitmq_drain_and_clean(&runtime, &dlq, &queues, &format!("{prefix}.delay"));
    assert_eq!(dead.keys().cloned().collect::<BTreeSet<_>>(), permanent);
    let stats = stats(&consumer);
    eprintln!(
        "rabbitmq, ordered by key: {total} messages through kill -9, a takeover, every session \
         rebuilt and a broker restart: {} overtaken, {} duplicate deliveries, {} duplicate dead \
         letters",
        stats["overtaken"],
        stats["duplicates"],
        dead.values().map(|n| n - 1).sum::<u32>()
    );
    assert_eq!(stats["overtaken"], 0, "{}", stats["overtakes"]);
    // Every delivery was checked: each carried its key and number.
    assert_eq!(stats["ordered"], stats["deliveries"], "{stats}");
    assert!(
        declared.is_empty(),
        "retries waited in place, yet these delay buckets were declared: {declared:?}"
    );
}

// ---- Kafka (a build with the `kafka` feature) --------------------------------------------

/// A Kafka-compatible broker of this test's own (nisshi, as `.ci/run` installs it) on a
/// private port, storing in a PostgreSQL database of its own: killed and started again, it
/// comes back with its records, groups and committed offsets, as a Kafka broker would.
#[cfg(feature = "kafka")]
struct OwnKafka {
    port: u16,
    database: String,
    /// nisshi's `--storage-engine`.
    storage: String,
    child: Option<std::process::Child>,
}

#[cfg(feature = "kafka")]
impl OwnKafka {
    fn start_new(name: &str) -> OwnKafka {
        let database = format!("verdict_kafka_{name}_{}", std::process::id());
        let storage = common::kafka::fresh_database(&database);
        let mut kafka = OwnKafka {
            port: common::kafka::free_port(),
            database,
            storage,
            child: None,
        };
        kafka.start();
        kafka
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn start(&mut self) {
        let url = format!("tcp://{}", self.bootstrap());
        let child = Command::new(common::kafka::nisshi())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                &self.storage,
                "--group-initial-rebalance-delay",
                "0s",
                "--silent",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nisshi (with its postgres feature) installed by .ci/run");
        self.child = Some(child);
        assert!(
            wait_until(Duration::from_secs(30), || port_open(self.port)),
            "nisshi listens on {}",
            self.port
        );
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(wait_until(Duration::from_secs(10), || !port_open(
            self.port
        )));
    }
}

#[cfg(feature = "kafka")]
impl Drop for OwnKafka {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        common::kafka::drop_database(&self.database);
    }
}

#[cfg(feature = "kafka")]
#[test]
fn kafka_kill_9_and_a_broker_restart_lose_nothing() {
    use verdict_tests::kafka::KafkaFixture;
    let dir = dir("brokers-kafka");
    let mut kafka = OwnKafka::start_new("restart");
    let fixture = KafkaFixture::on(&kafka.bootstrap(), "restart");
    let topic = fixture.topic("orders");
    let dlq = format!("{topic}.DLQ");
    let consumer = consumer("127.0.0.1:0", 5);
    let config = config(&topic, "kafka", &consumer)
        .merge("", &fixture.section())
        .write_toml(&dir);
    let run = Run { consumer, config };
    let gw = run.through(
        |_| {
            // SIGKILL: what it had not written to its storage is lost, as a crashed broker
            // loses what it had not synced.
            kafka.kill();
            std::thread::sleep(Duration::from_secs(2));
            kafka.start();
        },
        || fixture.publish("orders", 0..1_000),
    );
    assert!(
        wait_until(Duration::from_secs(60), || ready(&gw)),
        "/readyz recovers"
    );
    let permanent = permanent_ids(1_000);
    let dead_ids = || -> BTreeMap<String, u32> {
        let mut ids = BTreeMap::new();
        for r in fixture.records(&dlq) {
            if let Some(id) = KafkaFixture::header(&r, "verdict-message-id") {
                *ids.entry(String::from_utf8_lossy(&id).into_owned())
                    .or_default() += 1;
            }
        }
        ids
    };
    let done = wait_until(Duration::from_secs(180), || {
        accepted(&run.consumer) == 1_000 - permanent.len() as u64
            && dead_ids().len() == permanent.len()
            && fixture.drained()
    });
    assert!(
        done,
        "accepted {}, dead {}, drained {}",
        accepted(&run.consumer),
        dead_ids().len(),
        fixture.drained()
    );
    let dead = dead_ids();
    assert_eq!(dead.keys().cloned().collect::<BTreeSet<_>>(), permanent);
    // The operator's view through the binary agrees with the topic.
    let out = common::verdict(
        &[
            "dlq",
            "stats",
            "--source",
            "kafka",
            "--json",
            "-c",
            run.config.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total: u64 = stats
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["depth"].as_u64().unwrap())
        .sum();
    assert_eq!(total, dead.values().map(|n| u64::from(*n)).sum::<u64>());
    eprintln!(
        "kafka: kill -9 and a broker restart mid-run: {} duplicate deliveries, {} duplicate dead letters",
        duplicates(&run.consumer),
        dead.values().map(|n| n - 1).sum::<u32>()
    );
    drop(gw);
}

/// Kafka only: a route ordered by key (`ordering = "key"`: the record's key, which picks its
/// partition) through a `kill -9` of the gateway and a restart of the broker. 10 keys x 100
/// records, produced interleaved; a fifth fail one to three times, one in twenty for good.
/// The consumer checks every delivery as it arrives: none may come before its key's
/// previous record was finished (accepted, or refused for good). Records delivered again
/// after the kill are duplicates - counted, never out of order - and every record ends
/// delivered or dead-lettered.
#[cfg(feature = "kafka")]
#[test]
fn kafka_ordered_keys_stay_in_publish_order_through_kill_9_and_a_broker_restart() {
    use verdict_tests::kafka::{KafkaFixture, Produced};
    const KEYS: u32 = 10;
    const PER_KEY: u32 = 100;
    let dir = dir("brokers-kafka-ordered");
    let mut kafka = OwnKafka::start_new("ordered");
    let fixture = KafkaFixture::on(&kafka.bootstrap(), "ordered");
    let topic = fixture.topic("orders");
    let dlq = format!("{topic}.DLQ");
    let consumer = common::ordered_consumer(5);
    let config = config_of(route(&topic, "kafka", &consumer).set("ordering", "key"))
        .merge("", &fixture.section())
        .write_toml(&dir);
    let total = KEYS * PER_KEY;
    // A partition holds its records one at a time, so this run is slower than the others:
    // the kill and the broker restart come at a fifth and at half of the records.
    let mut gw = gateway(&config);
    assert!(wait_until(Duration::from_secs(30), || ready(&gw)));
    let records: Vec<_> = (0..PER_KEY)
        .flat_map(|n| {
            (0..KEYS).map(move |k| {
                let key = format!("key-{k}");
                let headers = vec![
                    ("message-id".to_string(), format!("m-{}", n * KEYS + k)),
                    ("content-type".to_string(), "application/json".to_string()),
                    ("Order-Id".to_string(), key.clone()),
                    ("Order-Seq".to_string(), n.to_string()),
                ];
                let payload = format!(r#"{{"key": {k}, "n": {n}}}"#).into_bytes();
                Produced {
                    key,
                    payload,
                    headers,
                }
            })
        })
        .collect();
    fixture.produce_all(&topic, &records);
    let started = std::time::Instant::now();
    assert!(wait_until(Duration::from_secs(180), || accepted(&consumer)
        >= u64::from(total / 5)));
    eprintln!(
        "kafka, ordered: a fifth accepted after {:?}",
        started.elapsed()
    );
    gw.child.kill().unwrap(); // SIGKILL
    gw.child.wait().unwrap();
    let gw = gateway(&config);
    assert!(wait_until(Duration::from_secs(240), || accepted(&consumer)
        >= u64::from(total / 2)));
    eprintln!(
        "kafka, ordered: half accepted after {:?}",
        started.elapsed()
    );
    kafka.kill();
    std::thread::sleep(Duration::from_secs(2));
    kafka.start();
    assert!(
        wait_until(Duration::from_secs(60), || ready(&gw)),
        "/readyz recovers"
    );
    let permanent = permanent_ids(total);
    let dead = || -> BTreeSet<String> {
        fixture
            .records(&dlq)
            .iter()
            .filter_map(|r| KafkaFixture::header(r, "verdict-message-id"))
            .map(|id| String::from_utf8_lossy(&id).into_owned())
            .collect()
    };
    let done = wait_until(Duration::from_secs(300), || {
        accepted(&consumer) == u64::from(total) - permanent.len() as u64
            && dead().len() == permanent.len()
            && fixture.drained()
    });
    assert!(
        done,
        "accepted {}, dead {}, drained {}",
        accepted(&consumer),
        dead().len(),
        fixture.drained()
    );
    assert_eq!(dead(), permanent);
    let stats = stats(&consumer);
    eprintln!(
        "kafka, ordered by key: {total} records through kill -9 and a broker restart: {} \
         overtaken, {} duplicate deliveries",
        stats["overtaken"], stats["duplicates"]
    );
    assert_eq!(stats["overtaken"], 0, "{}", stats["overtakes"]);
    // Every delivery was checked: each carried its key and number.
    assert_eq!(stats["ordered"], stats["deliveries"], "{stats}");
    // Its retries waited in place: none went through a retry topic.
    let through_topics: u64 = verdict_gateway::sources::delay_buckets::all_buckets()
        .into_iter()
        .map(|bucket| fixture.depth(&fixture.topic(&format!("retry.{bucket}"))))
        .sum();
    assert_eq!(through_topics, 0, "no retry went through a topic");
    drop(gw);
}
