//! Gateway throughput on the embedded store, against a baseline in the same run: the same
//! messages POSTed straight to the same consumer with the same concurrency (what a consumer
//! costs without Verdict in between). The gateway adds the store (publish, lease, settle:
//! three fsync'd transactions per message) and, for failures, a decision.
//!
//! Also a route ordered by key, without failures and with a tenth of its keys failing: how
//! fast the other keys go.
//!
//! `cargo bench -p verdict-cli --bench gateway` (N from `VERDICT_BENCH_MESSAGES`, default
//! 5000; the consumer fails 20% transiently and 5% permanently, as in the README quickstart and `verdict bench`).

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use verdict_cli::demo::{Behaviour, DemoConsumer, by_percent};

const CONCURRENCY: usize = 16;

fn rules_component() -> PathBuf {
    common::component("policies/rules")
}

async fn consumer(transient: u32, permanent: u32) -> String {
    let demo = DemoConsumer::new(by_percent(transient, permanent));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, demo.router()).await });
    url
}

/// POST every message straight to a consumer that never fails, `CONCURRENCY` at a time.
async fn baseline(n: usize) -> Duration {
    let url = consumer(0, 0).await;
    verdict_tls::install_default_provider();
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (client, url, next) = (client.clone(), url.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, AtomicOrdering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let body = format!(r#"{{"order": {i}}}"#);
                    client
                        .post(&url)
                        .header("x-verdict-message-id", format!("m-{i}"))
                        .body(body)
                        .send()
                        .await
                        .expect("baseline delivery");
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    started.elapsed()
}

/// Publish `n` messages to a gateway and wait until every one is delivered or dead.
/// `settings`: the route's guardrails and fallback (a TOML inline table), if any.
async fn through_verdict(
    n: usize,
    transient: u32,
    permanent: u32,
    settings: Option<&str>,
) -> (Duration, u64, u64) {
    let url = consumer(transient, permanent).await;
    let name = format!("{transient}-{}", settings.is_some());
    let route = settings.map_or(String::new(), |s| format!("settings = {s}"));
    let gateway = Bench::start(&name, &url, &route).await;
    let batch: Vec<serde_json::Value> = (0..n)
        .map(|i| serde_json::json!({"id": format!("m-{i}"), "payload": {"order": i}}))
        .collect();
    let store = gateway.store.clone();
    let started = Instant::now();
    gateway.publish(batch).await;
    tokio::task::spawn_blocking(move || {
        loop {
            let c = store.counts().unwrap();
            if c.pending() == 0 && c.total() == n as u64 {
                return (started.elapsed(), c.delivered, c.dead);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    })
    .await
    .unwrap()
}

/// The key of message `i` of a run over `keys` keys.
fn key_of(i: usize, keys: usize) -> usize {
    i % keys
}

/// What a run over keys measured.
struct Ordered {
    /// Until the messages of the keys that never fail were all delivered.
    healthy: Duration,
    /// How many they are.
    healthy_messages: usize,
    /// Until every message was settled in the store.
    all: Duration,
}

/// `n` messages over `keys` keys, on a route ordered by key if `by_key`; the messages of
/// the first `failing` keys each fail twice (503) before they are accepted.
async fn keyed(n: usize, keys: usize, failing: usize, by_key: bool) -> Ordered {
    // Counted as the consumer answers them (a healthy message is accepted at its first
    // delivery), without reading the consumer's books under its lock.
    let healthy_seen = Arc::new(AtomicUsize::new(0));
    let seen = healthy_seen.clone();
    let demo = DemoConsumer::new(move |id: &str| {
        let i: usize = id.trim_start_matches("m-").parse().unwrap_or(0);
        if key_of(i, keys) < failing {
            Behaviour::FailsFirst(2)
        } else {
            seen.fetch_add(1, AtomicOrdering::Relaxed);
            Behaviour::Ok
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let router = demo.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let route = if by_key {
        "ordering = \"key\"\nkey_header = \"order-id\""
    } else {
        ""
    };
    let gateway = Bench::start(&format!("keyed-{failing}-{by_key}"), &url, route).await;
    let healthy_messages = (0..n).filter(|i| key_of(*i, keys) >= failing).count();
    let batch: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "id": format!("m-{i}"),
                "payload": {"order": i},
                "headers": {"order-id": format!("key-{}", key_of(i, keys))},
            })
        })
        .collect();
    let store = gateway.store.clone();
    let started = Instant::now();
    gateway.publish(batch).await;
    tokio::task::spawn_blocking(move || {
        let mut healthy = None;
        loop {
            if healthy.is_none() && healthy_seen.load(AtomicOrdering::Relaxed) >= healthy_messages {
                healthy = Some(started.elapsed());
            }
            let c = store.counts().unwrap();
            if let Some(healthy) = healthy
                && c.pending() == 0
                && c.total() == n as u64
            {
                return Ordered {
                    healthy,
                    healthy_messages,
                    all: started.elapsed(),
                };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    })
    .await
    .unwrap()
}

/// A gateway of this bench's own, on an embedded store in a scratch directory.
struct Bench {
    store: Arc<verdict_gateway::store::Store>,
    admin: verdict_cli::client::AdminClient,
    /// Dropped with the bench: the gateway stops, so it does not poll beside the next run.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Bench {
    /// One route `orders` to the consumer at `url`, with `route` (TOML lines) added to it.
    async fn start(name: &str, url: &str, route: &str) -> Bench {
        let dir = std::env::temp_dir().join(format!(
            "verdict-bench-gateway-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = format!(
            r#"[admin]
listen = "127.0.0.1:0"
token_file = "token"
[gateway]
poll_ms = 5
[policies.rules]
path = "{rules}"
[[routes]]
topic = "orders"
policy = "rules"
consumer = {{ url = "{url}", concurrency = {CONCURRENCY} }}
{route}
config = {{ max_attempts = 5, rules = [
    {{ match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" }},
    {{ match = ["http.5*", "transport.*"], retry = {{ strategy = "fixed", delay_ms = 10 }} }},
] }}
"#,
            rules = rules_component().display(),
        );
        std::fs::write(dir.join("verdict.toml"), config).unwrap();
        std::fs::write(dir.join("token"), "bench-token").unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = verdict_gateway::Gateway::start(&dir.join("verdict.toml"), async move {
            let _ = stopped.await;
        })
        .await
        .expect("gateway starts");
        let admin = verdict_cli::client::AdminClient::new(
            &format!("http://{}", running.admin),
            Some("bench-token".into()),
        );
        Bench {
            store: running.store.clone(),
            admin,
            _stop: stop,
        }
    }

    /// Publish `batch` to `orders`, 1,000 messages a request.
    async fn publish(&self, batch: Vec<serde_json::Value>) {
        let admin = self.admin.clone();
        tokio::task::spawn_blocking(move || {
            for chunk in batch.chunks(1_000) {
                let _: serde_json::Value =
                    admin.post("/v1/topics/orders/messages", &chunk).unwrap();
            }
        })
        .await
        .unwrap();
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("VERDICT_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let base = baseline(n).await;
        let (clean, ..) = through_verdict(n, 0, 0, None).await;
        let (mixed, delivered, dead) = through_verdict(n, 20, 5, None).await;
        // A budget so large it never holds: what checking it costs every delivery.
        let (gated, gated_delivered, gated_dead) = through_verdict(
            n,
            20,
            5,
            Some("{ guardrails = { retry_budget = { percent = 1000, min_per_s = 100000 } } }"),
        )
        .await;
        // Key ordering: 100 keys, none failing, against a tenth of them failing twice per
        // message - how fast the other keys' messages go.
        let unfailed = keyed(n, 100, 0, true).await;
        let beside_failures = keyed(n, 100, 10, true).await;
        let unordered_beside_failures = keyed(n, 100, 10, false).await;
        let rate = |d: Duration| n as f64 / d.as_secs_f64();
        println!("{n} messages, consumer concurrency {CONCURRENCY}, same run:");
        println!("  baseline (direct POST, no failures):   {:>8.0} msg/s", rate(base));
        println!(
            "  through verdict, no failures:          {:>8.0} msg/s  ({:.1}x the baseline's time)",
            rate(clean),
            clean.as_secs_f64() / base.as_secs_f64()
        );
        println!(
            "  through verdict, 20% transient + 5% permanent: {:>8.0} msg/s  ({delivered} delivered, {dead} dead-lettered)",
            rate(mixed)
        );
        println!(
            "  the same with a retry budget that never holds: {:>8.0} msg/s  ({gated_delivered} delivered, {gated_dead} dead-lettered; {:.2}x the time without)",
            rate(gated),
            gated.as_secs_f64() / mixed.as_secs_f64()
        );
        let healthy_rate = |run: &Ordered| run.healthy_messages as f64 / run.healthy.as_secs_f64();
        println!(
            "  ordered by key (100 keys), no failures: {:>8.0} msg/s  ({:.2}x the unordered run's rate)",
            rate(unfailed.all),
            rate(unfailed.all) / rate(clean)
        );
        println!(
            "  the same, 10 keys failing twice per message: {:>8.0} msg/s for the 90 other keys  ({:.2}x their rate without failures)",
            healthy_rate(&beside_failures),
            healthy_rate(&beside_failures) / healthy_rate(&unfailed)
        );
        println!(
            "  the same failures without ordering:      {:>8.0} msg/s for the 90 other keys  (ordered: {:.2}x this)",
            healthy_rate(&unordered_beside_failures),
            healthy_rate(&beside_failures) / healthy_rate(&unordered_beside_failures)
        );
    });
}
