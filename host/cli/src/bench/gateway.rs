//! The `embedded` and `nats` targets: a real gateway (`Gateway::start`, the same code as
//! `verdict run`) in a scratch directory, fed by the load generator.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::exact::Exact;
use super::load::{self, Load};
use super::{BenchOptions, Figures, Progress, Target, cpu, native};

const TOKEN: &str = "verdict-bench";

pub(crate) async fn run(target: Target, options: &BenchOptions, load: &Load) -> Result<Figures> {
    let consumer = load
        .consumer(options.transient_percent, options.permanent_percent)
        .await?;
    let names = native::Names::new("gw");
    let dir = scratch_dir(target)?;
    let topic = match target {
        Target::Nats => names.subject.clone(),
        _ => "bench.orders".to_string(),
    };
    let config = config(target, options, &consumer.url, &topic, &names)?;
    std::fs::write(dir.join("verdict.toml"), config)?;
    std::fs::write(dir.join("token"), TOKEN)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = verdict_gateway::Gateway::start(&dir.join("verdict.toml"), async {
        let _ = stopped.await;
    })
    .await
    .context("starting the gateway")?;
    let pipeline = running.pipeline.clone();
    let exact = Arc::new(Exact::new());
    pipeline.metrics().observe(exact.clone());
    wait_ready(&pipeline).await?;

    let progress = Progress::new(target, options);
    let before = cpu::Sample::now(load::THREADS, native::BROKER_PROCESS);
    let started = Instant::now();
    let publisher = match target {
        Target::Nats => load.handle().spawn(native::publish(
            options.nats_url.clone(),
            names.subject.clone(),
            options.messages,
        )),
        _ => load.handle().spawn(publish_embedded(
            format!("http://{}/v1/topics/{topic}/messages", running.admin),
            options.messages,
        )),
    };
    let metrics = pipeline.clone();
    let waited = progress
        .wait_on(load, move || metrics.metrics().finished())
        .await;
    let elapsed = started.elapsed();
    let after = cpu::Sample::now(load::THREADS, native::BROKER_PROCESS);
    let _ = stop.send(());
    let clean_up = async {
        if target == Target::Nats {
            let (url, names) = (options.nats_url.clone(), names);
            let _ = load
                .handle()
                .spawn(async move { native::clean_up(&url, &names).await })
                .await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    };
    if let Err(e) = waited {
        // A stalled gateway may never finish its shutdown: do not wait for it.
        clean_up.await;
        return Err(e);
    }
    publisher.await.context("the publisher")??;
    running.wait().await?;
    clean_up.await;

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
        policy_wall: pipeline.metrics().policy_time(),
        broker_cpu: (target == Target::Nats).then_some(broker_cpu).flatten(),
    })
}

fn scratch_dir(target: Target) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "verdict-bench-{}-{}",
        std::process::id(),
        target.name()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn config(
    target: Target,
    options: &BenchOptions,
    consumer: &str,
    topic: &str,
    names: &native::Names,
) -> Result<String> {
    let source = match target {
        Target::Nats => "nats",
        _ => "embedded",
    };
    let nats = match target {
        Target::Nats => names.section(&options.nats_url),
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
instance = "bench"
consumer_group = "{group}"
{poll}
max_in_flight = {in_flight}
{nats}
[policies.bench]
path = {policy}
[[routes]]
topic = "{topic}"
source = "{source}"
policy = "bench"
consumer = {{ url = "{consumer}", concurrency = {concurrency}, timeout_ms = 10000 }}
config = {policy_config}
"#,
        group = names.durable,
        // The embedded source claims in batches (a claim is a transaction); a broker source
        // fetches no more than it can deliver, as the native baseline does.
        in_flight = match target {
            Target::Embedded => options.concurrency * 4,
            _ => options.concurrency,
        },
        // Publishing wakes the embedded source; polling is its fallback. A broker target
        // keeps the default slow poll of the (idle) store.
        poll = if target == Target::Embedded {
            "poll_ms = 5"
        } else {
            ""
        },
        concurrency = options.concurrency,
    ))
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
