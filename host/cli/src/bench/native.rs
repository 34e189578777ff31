//! The `nats-native` baseline - NATS JetStream redelivering on its own, no gateway - and
//! what the `nats` target shares with it: names, publishing, cleaning up.
//!
//! The baseline consumer POSTs each message to the same consumer with the gateway's HTTP
//! code, `ack`s a success and `nak`s a failure with the retry delay; the consumer's
//! `MaxDeliver` bounds the deliveries, after which the server drops the message. NATS 2.9
//! applies a consumer's `BackOff` only to ack timeouts, not to `nak`s, so the delay travels
//! with the `nak` - the schedule a `BackOff` of `[retry_delay_ms; max_attempts - 1]` would
//! give. Nothing is classified: a permanent failure is retried until `MaxDeliver` like any
//! other, and nothing is kept of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_nats::jetstream::{self, AckKind, consumer, stream};
use futures_util::StreamExt;
use tokio::sync::Semaphore;

use super::HandlingSummary;
use super::exact::Exact;
use super::load::{self, Load};
use super::{BenchOptions, Figures, Progress, Target, cpu};
use verdict_gateway::model::Delivery;
use verdict_gateway::model::Handled;
use verdict_gateway::pipeline::{Consumer, PipelineMetrics, deliver};
use verdict_registry::ConsumerConfig;

/// The baseline's name in its metrics.
const NAME: &str = "nats-native";

/// The broker's process name, for its CPU.
pub(crate) const BROKER_PROCESS: &str = "nats-server";

/// The id of message `i` (the consumer fails ids by hash, so every target sees the same).
pub(crate) fn message_id(i: usize) -> String {
    format!("m-{i}")
}

/// One target's streams, subjects and consumer, unique to this process.
pub(crate) struct Names {
    pub(crate) stream: String,
    pub(crate) subject: String,
    pub(crate) durable: String,
    prefix: String,
}

impl Names {
    pub(crate) fn new(kind: &str) -> Names {
        let prefix = format!("vbench{}{kind}", std::process::id());
        Names {
            stream: prefix.to_uppercase(),
            subject: format!("{prefix}.orders"),
            durable: prefix.clone(),
            prefix,
        }
    }

    fn streams(&self) -> Vec<String> {
        let s = &self.stream;
        vec![
            s.clone(),
            format!("{s}_DLQ"),
            format!("{s}_AUDIT"),
            format!("KV_{}-history", self.prefix),
        ]
    }

    /// The gateway's `[nats]` section for these names.
    pub(crate) fn section(&self, url: &str) -> String {
        let (s, p) = (&self.stream, &self.prefix);
        format!(
            r#"[nats]
url = {url}
stream = "{s}"
dlq_stream = "{s}_DLQ"
dlq_subject_prefix = "{p}dlq"
audit_stream = "{s}_AUDIT"
audit_subject_prefix = "{p}audit"
history_bucket = "{p}-history"
"#,
            url = toml::Value::String(url.to_string()),
        )
    }
}

/// Delete every stream of `names` (the gateway's DLQ, audit and history too).
pub(crate) async fn clean_up(url: &str, names: &Names) {
    let Ok(client) = async_nats::connect(url).await else {
        return;
    };
    let js = jetstream::new(client);
    for stream in names.streams() {
        let _ = js.delete_stream(&stream).await;
    }
}

/// A NATS server to publish to.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    /// Its URL (`tls://` for one that takes TLS only).
    pub(crate) url: String,
    /// The CA that signed its certificate, when it is not one the platform trusts.
    pub(crate) ca_file: Option<std::path::PathBuf>,
}

/// Publish `messages` to `subject` on `server`, each with its id as `Nats-Msg-Id`, acks
/// awaited in batches so the server is never more than a batch behind.
pub(crate) async fn publish(server: Server, subject: String, messages: usize) -> Result<()> {
    let mut connect = async_nats::ConnectOptions::new();
    if let Some(ca) = &server.ca_file {
        verdict_tls::install_default_provider();
        connect = connect.add_root_certificates(ca.clone()).require_tls(true);
    }
    let client = connect
        .connect(&server.url)
        .await
        .with_context(|| format!("connecting to NATS at {}", server.url))?;
    let js = jetstream::new(client);
    let mut pending = Vec::with_capacity(256);
    for i in 0..messages {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", message_id(i).as_str());
        let payload = format!(r#"{{"order": {i}}}"#);
        pending.push(
            js.publish_with_headers(subject.clone(), headers, payload.into())
                .await?,
        );
        if pending.len() == 256 || i + 1 == messages {
            for ack in pending.drain(..) {
                ack.await.context("a publish was not acknowledged")?;
            }
        }
    }
    Ok(())
}

/// The baseline's outcomes, recorded by the same metrics the gateway's sources use (so both
/// sides are timed by one piece of code); a message dropped at `MaxDeliver` counts as final.
struct Counters {
    metrics: PipelineMetrics,
    exact: Arc<Exact>,
    dropped: AtomicU64,
}

pub(crate) async fn run(options: &BenchOptions, load: &Load) -> Result<Figures> {
    let consumer = load
        .consumer(options.transient_percent, options.permanent_percent, None)
        .await?;
    let names = Names::new("nat");
    let client = async_nats::connect(&options.nats_url)
        .await
        .with_context(|| format!("connecting to NATS at {}", options.nats_url))?;
    let js = jetstream::new(client);
    let result = consume(options, load, &js, &names, &consumer.url).await;
    clean_up(&options.nats_url, &names).await;
    let (figures, counters) = result?;
    let seen = consumer.demo.seen();
    Ok(Figures {
        deliveries: seen.deliveries.values().map(|&n| u64::from(n)).sum(),
        delivered: seen.accepted.len() as u64,
        dropped: counters.dropped.load(Ordering::Relaxed),
        duplicates: seen.duplicates(),
        handling: counters.exact.handling(),
        ..figures
    })
}

async fn consume(
    options: &BenchOptions,
    load: &Load,
    js: &jetstream::Context,
    names: &Names,
    consumer_url: &str,
) -> Result<(Figures, Arc<Counters>)> {
    let stream = js
        .create_stream(stream::Config {
            name: names.stream.clone(),
            subjects: vec![names.subject.clone()],
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating stream {}", names.stream))?;
    let pull = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(names.durable.clone()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            max_deliver: i64::from(options.max_attempts),
            max_ack_pending: 1_000,
            ..Default::default()
        })
        .await
        .context("creating the native consumer")?;
    let mut messages = pull.messages().await?;
    let counters = Arc::new(Counters {
        metrics: PipelineMetrics::default(),
        exact: Arc::new(Exact::new()),
        dropped: AtomicU64::new(0),
    });
    counters.metrics.observe(counters.exact.clone());
    let target = Arc::new(Consumer::new(&ConsumerConfig {
        url: consumer_url.to_string(),
        timeout_ms: 10_000,
        concurrency: options.concurrency,
        tls: None,
    }));
    let slots = Arc::new(Semaphore::new(options.concurrency));
    let delay = Duration::from_millis(options.retry_delay_ms);
    let max = options.max_attempts;

    let progress = Progress::new(Target::NatsNative, options);
    let before = cpu::Sample::now(load::THREADS, BROKER_PROCESS);
    let started = Instant::now();
    let publisher = load.handle().spawn(publish(
        Server {
            url: options.nats_url.clone(),
            ca_file: None,
        },
        names.subject.clone(),
        options.messages,
    ));
    let consuming = async {
        loop {
            let permit = slots.clone().acquire_owned().await?;
            let message = match messages.next().await {
                Some(Ok(message)) => message,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "bench: pull stream error");
                    continue;
                }
                None => anyhow::bail!("the pull stream ended"),
            };
            let (target, counters) = (target.clone(), counters.clone());
            tokio::spawn(async move {
                handle(&target, &counters, message, max, delay).await;
                drop(permit);
            });
        }
    };
    let waited = tokio::select! {
        waited = progress.wait_on(load, {
            let counters = counters.clone();
            move || counters.metrics.finished()
        }) => waited,
        failed = consuming => failed,
    };
    let elapsed = started.elapsed();
    let after = cpu::Sample::now(load::THREADS, BROKER_PROCESS);
    publisher.await.context("the publisher")??;
    waited?;
    let (cpu, broker_cpu) = after.since(&before);
    let figures = Figures {
        target: Target::NatsNative,
        round: 1,
        messages: options.messages,
        elapsed,
        deliveries: 0,
        delivered: 0,
        dead_lettered: 0,
        dropped: 0,
        duplicates: 0,
        handling: HandlingSummary::default(),
        cpu,
        policy: Duration::ZERO,
        policy_wall: Duration::ZERO,
        broker_cpu,
    };
    Ok((figures, counters))
}

/// One delivery: POST, then `ack` or `nak` with the delay; past `MaxDeliver` the server
/// drops it.
async fn handle(
    target: &Consumer,
    counters: &Counters,
    message: jetstream::Message,
    max: u32,
    delay: Duration,
) {
    let received = Instant::now();
    let delivered = message
        .info()
        .map(|i| u32::try_from(i.delivered).unwrap_or(u32::MAX))
        .unwrap_or(1);
    let id = message
        .headers
        .as_ref()
        .and_then(|h| h.get("Nats-Msg-Id"))
        .map(|v| v.to_string())
        .unwrap_or_default();
    let delivery = Delivery {
        id,
        topic: message.subject.to_string(),
        payload: message.payload.to_vec(),
        ..Delivery::default()
    };
    let ok = deliver(target, &delivery, delivered).await.is_ok();
    let kind = if ok {
        AckKind::Ack
    } else {
        AckKind::Nak(Some(delay))
    };
    if let Err(e) = message.ack_with(kind).await {
        tracing::warn!(error = %e, "bench: an ack failed; the server redelivers");
        return;
    }
    let outcome = if ok {
        Handled::Delivered
    } else if delivered >= max {
        counters.dropped.fetch_add(1, Ordering::Relaxed);
        Handled::Discarded
    } else {
        Handled::Again
    };
    counters.metrics.handled(NAME, outcome, received.elapsed());
}
