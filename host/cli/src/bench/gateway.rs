//! The gateway targets (`embedded`, `nats`, their TLS twins `embedded-https` and
//! `nats-tls`, and the shared stores `postgres`, `mysql` with one or three gateways): real
//! gateways (`Gateway::start`, the same code as `verdict run`), each in a scratch directory,
//! fed by the load generator through the first one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::exact::Exact;
use super::load::{self, Load};
use super::{BenchOptions, Figures, Progress, Target, cpu, native};

const TOKEN: &str = "verdict-bench";

pub(crate) async fn run(target: Target, options: &BenchOptions, load: &Load) -> Result<Figures> {
    let certificates = matches!(target, Target::EmbeddedHttps | Target::NatsTls)
        .then(|| crate::tls_peers::Certificates::new("bench"));
    // The collector the traced target exports to: it takes every export and drops it.
    let collector = match target {
        Target::EmbeddedTraced => Some(load.collector().await?),
        _ => None,
    };
    let consumer_tls = match (target, &certificates) {
        (Target::EmbeddedHttps, Some(c)) => Some(c.consumer()?),
        _ => None,
    };
    let consumer = load
        .consumer(
            options.transient_percent,
            options.permanent_percent,
            consumer_tls,
        )
        .await?;
    let tls_nats = match (target, &certificates) {
        (Target::NatsTls, Some(c)) => {
            let dir =
                std::env::temp_dir().join(format!("verdict-bench-nats-{}", std::process::id()));
            Some(crate::tls_peers::TlsNats::start(&dir, c)?)
        }
        _ => None,
    };
    // The NATS server this target's gateway consumes from, and the CA that signed it.
    let nats = match (&tls_nats, &certificates) {
        (Some(server), Some(c)) => native::Server {
            url: server.url(),
            ca_file: Some(c.ca_file().to_path_buf()),
        },
        _ => native::Server {
            url: options.nats_url.clone(),
            ca_file: None,
        },
    };
    let names = native::Names::new("gw");
    let topic = if target.on_nats() {
        names.subject.clone()
    } else {
        "bench.orders".to_string()
    };
    let database = if target.shared_store() {
        // The database drivers block: never on an async worker.
        let servers = (options.postgres_url.clone(), options.mysql_url.clone());
        let created = tokio::task::spawn_blocking(move || {
            super::database::ScratchDatabase::create(target, &servers.0, &servers.1)
        });
        Some(created.await.context("creating the scratch database")??)
    } else {
        None
    };
    let store = database.as_ref().map(super::database::ScratchDatabase::url);
    let mut dirs = Vec::new();
    let mut gateways = Vec::new();
    let mut stops = Vec::new();
    for n in 0..target.gateways() {
        let dir = scratch_dir(target, n)?;
        let config = config(
            target,
            options,
            &Peers {
                consumer: &consumer.url,
                nats: &nats,
                tls: certificates.as_ref(),
                collector: collector.as_ref().map(|c| c.url.as_str()),
            },
            &topic,
            &names,
            store.as_deref(),
            n,
        )?;
        std::fs::write(dir.join("verdict.toml"), config)?;
        std::fs::write(dir.join("token"), TOKEN)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = verdict_gateway::Gateway::start(&dir.join("verdict.toml"), async {
            let _ = stopped.await;
        })
        .await
        .context("starting the gateway")?;
        dirs.push(dir);
        gateways.push(running);
        stops.push(stop);
    }
    let pipelines: Vec<_> = gateways.iter().map(|g| g.pipeline.clone()).collect();
    let exact = Arc::new(Exact::new());
    for pipeline in &pipelines {
        pipeline.metrics().observe(exact.clone());
        wait_ready(pipeline).await?;
    }
    let running = &gateways[0];

    let progress = Progress::new(target, options);
    let before = cpu::Sample::now(load::THREADS, target.server_process());
    let started = Instant::now();
    let publisher = match target {
        Target::Nats | Target::NatsTls => load.handle().spawn(native::publish(
            nats.clone(),
            names.subject.clone(),
            options.messages,
        )),
        _ => load.handle().spawn(publish_embedded(
            format!("http://{}/v1/topics/{topic}/messages", running.admin),
            options.messages,
        )),
    };
    let all = pipelines.clone();
    let waited = progress
        .wait_on(load, move || {
            all.iter().map(|p| p.metrics().finished()).sum()
        })
        .await;
    let elapsed = started.elapsed();
    let after = cpu::Sample::now(load::THREADS, target.server_process());
    for stop in stops {
        let _ = stop.send(());
    }
    let clean_up = async {
        // The TLS server goes with its store when dropped; the machine's keeps its own.
        if target == Target::Nats {
            let (url, names) = (options.nats_url.clone(), names);
            let _ = load
                .handle()
                .spawn(async move { native::clean_up(&url, &names).await })
                .await;
        }
        drop(tls_nats);
        for dir in &dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(database) = database {
            let _ = tokio::task::spawn_blocking(move || drop(database)).await;
        }
    };
    if let Err(e) = waited {
        // A stalled gateway may never finish its shutdown: do not wait for it.
        clean_up.await;
        return Err(e);
    }
    publisher.await.context("the publisher")??;
    let policy_wall = pipelines.iter().map(|p| p.metrics().policy_time()).sum();
    for running in gateways {
        running.wait().await?;
    }
    clean_up.await;
    if let Some(collector) = &collector
        && options.trace_sample_ratio > 0.0
        && collector
            .received
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
    {
        anyhow::bail!("the traced gateway exported no spans to the bench's collector");
    }

    let (cpu, broker_cpu) = after.since(&before);
    let seen = consumer.demo.seen();
    let delivered = seen.accepted.len() as u64;
    Ok(Figures {
        target,
        round: 1,
        messages: options.messages,
        elapsed,
        deliveries: seen.deliveries.values().map(|&n| u64::from(n)).sum(),
        delivered,
        dead_lettered: (options.messages as u64).saturating_sub(delivered),
        dropped: 0,
        duplicates: seen.duplicates(),
        handling: exact.handling(),
        cpu,
        policy: exact.policy_cpu(),
        policy_wall,
        broker_cpu: (!matches!(
            target,
            Target::Embedded | Target::EmbeddedHttps | Target::EmbeddedTraced
        ))
        .then_some(broker_cpu)
        .flatten(),
    })
}

fn scratch_dir(target: Target, n: usize) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "verdict-bench-{}-{}-{n}",
        std::process::id(),
        target.name()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Who a target's gateway talks to.
struct Peers<'a> {
    /// The consumer's URL.
    consumer: &'a str,
    /// The NATS server (for the NATS targets).
    nats: &'a native::Server,
    /// The run's CA, for the TLS targets.
    tls: Option<&'a crate::tls_peers::Certificates>,
    /// The OTLP collector, for the traced target.
    collector: Option<&'a str>,
}

fn config(
    target: Target,
    options: &BenchOptions,
    peers: &Peers<'_>,
    topic: &str,
    names: &native::Names,
    store: Option<&str>,
    n: usize,
) -> Result<String> {
    let source = if target.on_nats() { "nats" } else { "embedded" };
    let nats = match (target, peers.tls) {
        (Target::Nats, _) => names.section(&peers.nats.url),
        (Target::NatsTls, Some(tls)) => {
            format!("{}{}\n", names.section(&peers.nats.url), tls.table())
        }
        _ => String::new(),
    };
    let consumer_tls = match (target, peers.tls) {
        (Target::EmbeddedHttps, Some(tls)) => format!(", {}", tls.table()),
        _ => String::new(),
    };
    let policy = toml_path(&options.policy)?;
    // TOML has no JSON literal; the policy config goes in as an inline table.
    let policy_config: toml::Value = serde_json::from_value(options.policy_config.clone())
        .context("the policy config does not fit in TOML")?;
    Ok(format!(
        r#"[admin]
listen = "127.0.0.1:0"
token_file = "token"
[gateway]
instance = "bench-{n}"
consumer_group = "{group}"
{store}
{poll}
max_in_flight = {in_flight}
{nats}
[policies.bench]
path = {policy}
[[routes]]
topic = "{topic}"
source = "{source}"
policy = "bench"
consumer = {{ url = "{consumer}", concurrency = {concurrency}, timeout_ms = 10000{consumer_tls} }}
config = {policy_config}
"#,
        group = names.durable,
        store = store.map_or(String::new(), |url| {
            format!("store = {}", toml::Value::String(url.to_string()))
        }),
        // The embedded source claims in batches (a claim is a transaction); a broker source
        // fetches no more than it can deliver, as the native baseline does.
        in_flight = if target.on_nats() {
            options.concurrency
        } else {
            options.concurrency * 4
        },
        // Publishing wakes the embedded source; polling is its fallback. A broker target
        // keeps the default slow poll of the (idle) store.
        poll = if target.on_nats() { "" } else { "poll_ms = 5" },
        consumer = peers.consumer,
        concurrency = options.concurrency,
    ) + &peers.collector.map_or(String::new(), |url| {
        // By default every span is kept and exported: the most tracing can cost.
        format!(
            "[telemetry]\nendpoint = \"{url}\"\nsample_ratio = {:?}\n",
            options.trace_sample_ratio
        )
    }))
}

fn toml_path(path: &Path) -> Result<String> {
    let absolute = std::path::absolute(path)?;
    let text = absolute
        .to_str()
        .with_context(|| format!("--policy {}: not UTF-8", path.display()))?;
    Ok(toml::Value::String(text.to_string()).to_string())
}

/// Until the broker sources consume (the embedded one always does).
async fn wait_ready(pipeline: &verdict_gateway::pipeline::Pipeline) -> Result<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(15);
    while !pipeline.sources().iter().all(|s| s.is_up()) {
        if Instant::now() > deadline {
            anyhow::bail!("the gateway's broker source did not come up within 15 s");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(())
}

/// POST the messages to the gateway's admin API, 1,000 a request.
async fn publish_embedded(url: String, messages: usize) -> Result<()> {
    verdict_tls::install_default_provider();
    let client = reqwest::Client::new();
    let ids: Vec<usize> = (0..messages).collect();
    for chunk in ids.chunks(1_000) {
        let batch: Vec<serde_json::Value> = chunk
            .iter()
            .map(|i| serde_json::json!({"id": native::message_id(*i), "payload": {"order": i}}))
            .collect();
        let response = client
            .post(&url)
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&batch)?)
            .send()
            .await
            .context("publishing to the gateway")?;
        anyhow::ensure!(
            response.status().is_success(),
            "publishing to the gateway: {}",
            response.status()
        );
    }
    Ok(())
}
