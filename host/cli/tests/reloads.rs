//! Reloads that remove, narrow and widen routes while messages wait for a retry, through
//! the real binary (the config file edited under a running `verdict run`): every waiting
//! retry is handed to the route that takes its topic now, or dead-lettered with kind
//! `route.removed` when none does - never acknowledged unseen, never held forever, and what
//! one route delivered is not delivered again by the route that replaces it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Proc, rules, spawn, wait_until};
use verdict_cli::demo::{Behaviour, DemoConsumer};

/// A consumer in this process: the test reads what it saw directly.
struct App {
    consumer: DemoConsumer,
    url: String,
}

fn app(runtime: &tokio::runtime::Runtime, behaviour: Behaviour) -> App {
    let consumer = DemoConsumer::new(move |_| behaviour);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let router = consumer.router();
    runtime.spawn(async move { axum::serve(listener, router).await });
    App { consumer, url }
}

impl App {
    fn deliveries(&self) -> BTreeMap<String, u32> {
        self.consumer.seen().deliveries.into_iter().collect()
    }

    fn accepted(&self) -> BTreeMap<String, u32> {
        self.consumer.seen().accepted.into_iter().collect()
    }
}

/// 503 is retried after `delay_ms`, at most 4 attempts.
fn route(topic: &str, source: &str, app: &App, delay_ms: u64) -> String {
    format!(
        r#"
[[routes]]
topic = "{topic}"
source = "{source}"
policy = "rules"
consumer = {{ url = "{url}", timeout_ms = 2000 }}
config = {{ max_attempts = 4, rules = [
    {{ match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" }},
    {{ match = ["http.5*", "transport.*"], retry = {{ strategy = "fixed", delay_ms = {delay_ms}, jitter = "none" }} }},
] }}
"#,
        url = app.url
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(rules(), dir.join("rules.wasm")).unwrap();
    std::fs::write(dir.join("token"), "operator-token\n").unwrap();
    dir
}

/// Write the config (the running gateway reloads it by itself).
fn write_config(dir: &Path, head: &str, routes: &str) -> PathBuf {
    let path = dir.join("verdict.toml");
    let config = format!(
        r#"[admin]
listen = "127.0.0.1:0"
token_file = "token"
[gateway]
poll_ms = 10
{head}
[policies.rules]
path = "rules.wasm"
{routes}"#
    );
    std::fs::write(&path, config).unwrap();
    path
}

fn generation(gw: &Proc) -> u64 {
    let status: serde_json::Value = ureq::get(&format!("{}/v1/status", gw.url))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    status["generation"].as_u64().unwrap_or(0)
}

/// Write the new routes and wait until the gateway runs them.
fn reload(gw: &Proc, dir: &Path, head: &str, routes: &str) {
    let before = generation(gw);
    write_config(dir, head, routes);
    assert!(
        wait_until(Duration::from_secs(20), || generation(gw) > before),
        "the gateway did not reload"
    );
}

/// This test's corner of the NATS server on loopback: its stream, DLQ and audit streams,
/// history bucket and durable consumers, removed at the end.
struct Nats {
    prefix: String,
    js: async_nats::jetstream::Context,
    runtime: tokio::runtime::Runtime,
}

impl Nats {
    fn new(name: &str) -> Nats {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let js = runtime
            .block_on(async {
                async_nats::connect("nats://127.0.0.1:4222")
                    .await
                    .map(async_nats::jetstream::new)
            })
            .expect("NATS with JetStream on 127.0.0.1:4222 (.ci/run starts it)");
        let nats = Nats {
            prefix: format!("rl{}{name}", std::process::id()),
            js,
            runtime,
        };
        nats.clean();
        nats
    }

    fn head(&self) -> String {
        let p = &self.prefix;
        format!(
            r#"instance = "gw-reload"
consumer_group = "{p}"
[nats]
url = "nats://127.0.0.1:4222"
stream = "{p}"
dlq_stream = "{p}_DLQ"
dlq_subject_prefix = "{p}dlq"
audit_stream = "{p}_AUDIT"
audit_subject_prefix = "{p}audit"
history_bucket = "{p}-history"
ack_wait_ms = 5000"#
        )
    }

    fn subject(&self, topic: &str) -> String {
        format!("{}.{topic}", self.prefix)
    }

    /// Publish `ids` to `topic`, each confirmed by the stream.
    fn publish(&self, topic: &str, ids: &[String]) {
        let subject = self.subject(topic);
        self.runtime.block_on(async {
            for id in ids {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", id.as_str());
                self.js
                    .publish_with_headers(subject.clone(), headers, b"{}".to_vec().into())
                    .await
                    .expect("publish")
                    .await
                    .unwrap_or_else(|e| panic!("no stream confirmed {id} on {subject}: {e}"));
            }
        });
    }

    /// (error kind, original id) of every dead letter.
    fn dead_letters(&self) -> Vec<(String, String)> {
        self.runtime.block_on(async {
            let Ok(mut stream) = self.js.get_stream(format!("{}_DLQ", self.prefix)).await else {
                return Vec::new();
            };
            let state = stream.info().await.unwrap().state.clone();
            let mut out = Vec::new();
            for seq in state.first_sequence..=state.last_sequence {
                if let Ok(m) = stream.get_raw_message(seq).await {
                    let kind = m
                        .headers
                        .get("verdict-kind")
                        .map(|v| v.to_string())
                        .unwrap_or_default();
                    let e: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
                    out.push((kind, e["original"]["id"].as_str().unwrap().to_string()));
                }
            }
            out.sort();
            out
        })
    }

    /// (durable name, pending, ack pending) of each of the gateway's consumers.
    fn consumers(&self) -> Vec<(String, u64, usize)> {
        use futures_util::TryStreamExt as _;
        self.runtime.block_on(async {
            let Ok(stream) = self.js.get_stream(&self.prefix).await else {
                return Vec::new();
            };
            let infos: Vec<_> = stream.consumers().try_collect().await.unwrap();
            infos
                .into_iter()
                .map(|i| (i.name, i.num_pending, i.num_ack_pending))
                .collect()
        })
    }

    /// Whether the durable consumer of `route` exists.
    fn has_consumer_of(&self, topic: &str) -> bool {
        let name =
            verdict_gateway::sources::nats::route_durable(&self.prefix, &self.subject(topic));
        self.consumers().iter().any(|(n, _, _)| *n == name)
    }

    fn clean(&self) {
        let p = self.prefix.clone();
        self.runtime.block_on(async {
            for name in [p.clone(), format!("{p}_DLQ"), format!("{p}_AUDIT")] {
                let _ = self.js.delete_stream(&name).await;
            }
            let _ = self.js.delete_key_value(format!("{p}-history")).await;
        });
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.clean();
    }
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn each_once(ids: &[String]) -> BTreeMap<String, u32> {
    ids.iter().map(|id| (id.clone(), 1)).collect()
}

/// Routes `orders.>` (a healthy consumer) and `orders.vip` (always 503, retried after 6 s).
/// Five vip messages are delivered once and wait out their retry; then the vip route is
/// removed. The wide route now takes them: each is delivered to its consumer once, none is
/// dead-lettered or acknowledged unseen, and the vip route's consumer is deleted once it
/// has handed everything on. Messages published after the reload go to the wide route.
#[test]
fn removing_an_overlapping_nats_route_hands_its_waiting_retries_to_the_wider_route() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (healthy, down) = (
        app(&runtime, Behaviour::Ok),
        app(&runtime, Behaviour::FailsFirst(u32::MAX)),
    );
    let nats = Nats::new("remove");
    let dir = scratch("reload-nats-remove");
    let wide = route(&nats.subject("orders.>"), "nats", &healthy, 200);
    let vip = route(&nats.subject("orders.vip"), "nats", &down, 6_000);
    let config = write_config(&dir, &nats.head(), &format!("{wide}{vip}"));
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(wait_until(Duration::from_secs(20), || nats
        .has_consumer_of("orders.vip")));

    let waiting = ids("v", 5);
    nats.publish("orders.vip", &waiting);
    assert!(
        wait_until(Duration::from_secs(20), || down.deliveries().len() == 5),
        "{:?}",
        down.deliveries()
    );
    reload(&gw, &dir, &nats.head(), &wide);

    assert!(
        wait_until(Duration::from_secs(40), || healthy.accepted().len() == 5),
        "the retries the removed route held never reached the route that takes them now: \
         healthy {:?}, down {:?}, dead letters {:?}, consumers {:?}",
        healthy.accepted(),
        down.deliveries(),
        nats.dead_letters(),
        nats.consumers()
    );
    assert_eq!(healthy.accepted(), each_once(&waiting));
    assert_eq!(
        down.deliveries(),
        each_once(&waiting),
        "not delivered again on the old route"
    );
    assert_eq!(nats.dead_letters(), Vec::new());

    let after = ids("n", 3);
    nats.publish("orders.vip", &after);
    assert!(wait_until(Duration::from_secs(20), || healthy
        .accepted()
        .len()
        == 8));
    assert!(
        wait_until(Duration::from_secs(20), || !nats
            .has_consumer_of("orders.vip")),
        "the removed route's consumer is deleted once drained: {:?}",
        nats.consumers()
    );
    assert!(
        wait_until(Duration::from_secs(20), || nats
            .consumers()
            .iter()
            .all(|(_, pending, acks)| (*pending, *acks) == (0, 0))),
        "{:?}",
        nats.consumers()
    );
    let mut all = waiting.clone();
    all.extend(after);
    assert_eq!(healthy.accepted(), each_once(&all), "nothing twice");
}

/// `orders.>` (always 503, retried after 6 s) holds retries on `orders.us` and
/// `orders.eu.fr`; it is narrowed to `orders.eu.>` (healthy): the eu retries are delivered
/// there once, the us ones - which no route takes now - are dead-lettered with kind
/// `route.removed`. Then it is widened back to `orders.>` (healthy): nothing the eu route
/// delivered comes again, and new messages on any `orders.` subject are delivered once.
#[test]
fn narrowing_and_widening_a_nats_route_lose_nothing_and_replay_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (healthy, down) = (
        app(&runtime, Behaviour::Ok),
        app(&runtime, Behaviour::FailsFirst(u32::MAX)),
    );
    let nats = Nats::new("narrow");
    let dir = scratch("reload-nats-narrow");
    let config = write_config(
        &dir,
        &nats.head(),
        &route(&nats.subject("orders.>"), "nats", &down, 6_000),
    );
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(wait_until(Duration::from_secs(20), || nats.has_consumer_of("orders.>")));
    let (us, eu) = (ids("us", 3), ids("eu", 3));
    nats.publish("orders.us", &us);
    nats.publish("orders.eu.fr", &eu);
    assert!(wait_until(Duration::from_secs(20), || down
        .deliveries()
        .len()
        == 6));

    // Narrow.
    let eu_route = route(&nats.subject("orders.eu.>"), "nats", &healthy, 200);
    reload(&gw, &dir, &nats.head(), &eu_route);
    assert!(
        wait_until(Duration::from_secs(40), || healthy.accepted().len() == 3
            && nats.dead_letters().len() == 3),
        "healthy {:?}, dead letters {:?}, consumers {:?}",
        healthy.accepted(),
        nats.dead_letters(),
        nats.consumers()
    );
    assert_eq!(healthy.accepted(), each_once(&eu));
    let removed: Vec<(String, String)> = us
        .iter()
        .map(|id| ("route.removed".to_string(), id.clone()))
        .collect();
    assert_eq!(nats.dead_letters(), removed);
    assert_eq!(
        down.deliveries(),
        each_once(&[us.clone(), eu.clone()].concat())
    );
    assert!(
        wait_until(Duration::from_secs(20), || !nats
            .has_consumer_of("orders.>")),
        "the narrowed route's old consumer is deleted once drained: {:?}",
        nats.consumers()
    );

    // Widen back: a new consumer for `orders.>`, the eu one retired.
    let wide = route(&nats.subject("orders.>"), "nats", &healthy, 200);
    reload(&gw, &dir, &nats.head(), &wide);
    assert!(wait_until(Duration::from_secs(20), || nats.has_consumer_of("orders.>")));
    let fresh = [ids("us-new", 2), ids("eu-new", 2)];
    nats.publish("orders.us", &fresh[0]);
    nats.publish("orders.eu.de", &fresh[1]);
    assert!(wait_until(Duration::from_secs(20), || healthy
        .accepted()
        .len()
        == 7));
    // Past a few pulls: a replay of what the eu route delivered would have come by now.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        healthy.accepted(),
        each_once(&[eu, fresh[0].clone(), fresh[1].clone()].concat()),
        "each once: nothing the eu route delivered came again"
    );
    assert_eq!(nats.dead_letters().len(), 3);
}

/// On the embedded store: `orders.>` (healthy) and `orders.vip` (always 503, retried after
/// 3 s), and `payments` (always 503, retried after 3 s). A reload removes `orders.vip` and
/// `payments` while their messages wait: the vip ones are delivered on `orders.>`, the
/// payments ones - no route takes them now - are dead-lettered with kind `route.removed`
/// instead of being claimed and put back every few seconds forever.
#[test]
fn removing_routes_on_the_embedded_store_hands_their_retries_on_or_dead_letters_them() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (healthy, down) = (
        app(&runtime, Behaviour::Ok),
        app(&runtime, Behaviour::FailsFirst(u32::MAX)),
    );
    let dir = scratch("reload-embedded");
    let wide = route("orders.>", "embedded", &healthy, 200);
    let vip = route("orders.vip", "embedded", &down, 3_000);
    let payments = route("payments", "embedded", &down, 3_000);
    let head = r#"instance = "gw-reload""#;
    let config = write_config(&dir, head, &format!("{wide}{vip}{payments}"));
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    let token = dir.join("token");
    for (topic, prefix) in [("orders.vip", "v"), ("payments", "p")] {
        let batch = dir.join(format!("{prefix}.jsonl"));
        let lines: Vec<String> = ids(prefix, 4)
            .iter()
            .map(|id| format!(r#"{{"id": "{id}", "payload": {{}}}}"#))
            .collect();
        std::fs::write(&batch, lines.join("\n")).unwrap();
        let out = common::verdict(
            &[
                "publish",
                "--admin",
                &gw.url,
                "--token-file",
                token.to_str().unwrap(),
                "--topic",
                topic,
                "--batch",
                batch.to_str().unwrap(),
            ],
            None,
        );
        assert!(out.status.success(), "{}", common::text(&out.stderr));
    }
    assert!(wait_until(Duration::from_secs(20), || down
        .deliveries()
        .len()
        == 8));
    reload(&gw, &dir, head, &wide);

    let store = verdict_gateway::store::Store::open(&dir.join(".verdict/verdict.db")).unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || store
            .counts()
            .is_ok_and(|c| c.pending() == 0)),
        "{:?}",
        store.counts()
    );
    let letters = store
        .dlq_list(
            &verdict_gateway::store::DlqFilter::default(),
            store.now_ms(),
        )
        .unwrap();
    let mut dead: Vec<(String, String)> = letters
        .iter()
        .map(|e| (e.kind.clone(), e.message_id.clone()))
        .collect();
    dead.sort();
    let expected: Vec<(String, String)> = ids("p", 4)
        .into_iter()
        .map(|id| ("route.removed".to_string(), id))
        .collect();
    assert_eq!(dead, expected);
    assert_eq!(healthy.accepted(), each_once(&ids("v", 4)));
    assert_eq!(
        down.deliveries(),
        each_once(&[ids("v", 4), ids("p", 4)].concat())
    );
}
