//! The NATS JetStream source: a durable pull consumer with explicit acks on one stream.
//!
//! - **Retry / delay** -> the attempt history goes to a key-value bucket (keyed by stream
//!   sequence, shared by every gateway of the group), then `nak` with the verdict's delay.
//!   The gateway counts attempts from that history, not from JetStream's delivery count, so
//!   a delay spends none and a crash before the history write costs a duplicate, not an
//!   attempt.
//! - **Dead-letter** -> the envelope is published to `<dlq_subject_prefix>.<dlq>` in the
//!   DLQ stream; only after its PubAck is the original `term`inated.
//! - **Discard** -> an audit record to the audit stream (PubAck), then `term`.
//! - While a consumer works, in-progress acks every half `ack_wait_ms` keep the delivery
//!   from being redelivered elsewhere.
//!
//! Connection loss is survived twice over: the client reconnects by itself, and a session
//! that fails (stream gone, consumer deleted) is rebuilt with backoff. `/readyz` reflects
//! the connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind, consumer, stream};
use futures_util::StreamExt;
use tokio::sync::{Semaphore, watch};

use super::{AbortOnDrop, BrokerDlqs, Delivery, Readiness, Settlement};
use crate::pipeline::Pipeline;
use crate::{GatewaySection, NatsConfig};

mod history;
mod setup;

pub use history::History;
pub use setup::{Broker, connect};

/// The source's name in metrics and `/readyz`.
pub const NAME: &str = "nats";

/// Consume until `shutdown` turns true, reconnecting with backoff; then wait up to `grace`
/// for deliveries in flight. Messages fetched but not started are redelivered by JetStream
/// after `ack_wait_ms`.
pub async fn run(
    pipeline: Arc<Pipeline>,
    config: NatsConfig,
    subjects: Vec<String>,
    ready: Readiness,
    dlqs: BrokerDlqs,
    shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let settings = &pipeline.settings().clone();
    let (config, ready, dlqs, subjects) = (&config, &ready, &dlqs, &subjects);
    let pipeline = &pipeline;
    let session = move |slots: Arc<Semaphore>, shutdown: watch::Receiver<bool>| async move {
        let session = Session {
            pipeline: pipeline.clone(),
            config,
            settings,
            ready,
            dlqs,
            slots,
        };
        session.run(subjects, shutdown).await
    };
    super::supervise(
        NAME,
        ready,
        settings.max_in_flight,
        shutdown,
        grace,
        session,
    )
    .await;
}

struct Session<'a> {
    pipeline: Arc<Pipeline>,
    config: &'a NatsConfig,
    settings: &'a GatewaySection,
    ready: &'a Readiness,
    dlqs: &'a BrokerDlqs,
    slots: Arc<Semaphore>,
}

impl Session<'_> {
    /// One connection's life: set up, then consume until shutdown (`Ok`) or failure.
    async fn run(
        &self,
        subjects: &[String],
        mut shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let broker = connect(
            self.config,
            self.settings,
            subjects,
            Some(self.ready.clone()),
        )
        .await?;
        let consumer = broker.consumer().await?;
        let mut messages = consumer.messages().await?;
        self.ready.set(true);
        tracing::info!(stream = %self.config.stream, "nats source: consuming");
        let poller = tokio::spawn(poll_dlq_depths(
            broker.clone(),
            self.settings.dlq_naming,
            self.dlqs.clone(),
        ));
        let _poller = AbortOnDrop(poller);
        loop {
            let permit = tokio::select! {
                permit = self.slots.clone().acquire_owned() => permit?,
                _ = shutdown.changed() => return Ok(()),
            };
            let next = tokio::select! {
                next = messages.next() => next,
                _ = shutdown.changed() => return Ok(()),
            };
            let message = match next {
                Some(Ok(message)) => message,
                Some(Err(e)) => {
                    // Missed heartbeats while the server restarts, and the like: the stream
                    // goes on after the client reconnects.
                    tracing::debug!(error = %e, "nats source: pull stream error");
                    if !self.ready.is_up() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
                None => anyhow::bail!("the pull stream ended"),
            };
            let (pipeline, broker, dlqs) =
                (self.pipeline.clone(), broker.clone(), self.dlqs.clone());
            tokio::spawn(async move {
                handle(&pipeline, &broker, &dlqs, message).await;
                drop(permit);
            });
        }
    }
}

/// Deliver one message and apply its settlement.
async fn handle(
    pipeline: &Pipeline,
    broker: &Broker,
    dlqs: &BrokerDlqs,
    message: jetstream::Message,
) {
    let received = Instant::now();
    let Ok(info) = message.info() else {
        tracing::error!(subject = %message.subject, "nats source: a message without JetStream metadata; terminating it");
        let _ = message.ack_with(AckKind::Term).await;
        return;
    };
    let seq = info.stream_sequence;
    let delivered = u64::try_from(info.delivered).unwrap_or(0);
    let published_at_ms =
        u64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    let key = broker.history_key(seq);
    // A first delivery has no history; later ones read it (another gateway may have written it).
    let history = if delivered > 1 {
        match broker.history().get(&key, delivered).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, seq, "nats source: the history could not be read; trying again later");
                let _ = message
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                    .await;
                return;
            }
        }
    } else {
        None
    };
    let had_history = history.is_some();
    let mut delivery = to_delivery(&message, broker.stream_name(), seq, published_at_ms);
    if let Some(h) = &history {
        h.apply_to(&mut delivery);
    } else {
        delivery.redelivery = delivered > 1;
    }
    // In the same task, not a spawned one: a task and a message copy per delivery cost more
    // than the delivery's own bookkeeping.
    let every = Duration::from_millis(broker.config().ack_wait_ms / 2);
    let settlement = tokio::select! {
        biased;
        settlement = pipeline.process(&delivery) => settlement,
        never = keep_alive(&message, every) => match never {},
    };
    let handled = settlement.handled();
    let outcome = apply(
        broker, dlqs, &message, &delivery, &key, settlement, delivered,
    )
    .await;
    match outcome {
        Ok(()) => {
            pipeline
                .metrics()
                .handled(NAME, handled, received.elapsed());
            // Once the message is gone from the stream's point of view, so is its history.
            if handled.is_final()
                && had_history
                && let Err(e) = broker.history().forget(&key).await
            {
                tracing::debug!(error = %e, seq, "nats source: a settled history was not purged (it expires)");
            }
        }
        Err(e) => tracing::error!(
            error = %format!("{e:#}"),
            seq,
            "nats source: applying a verdict failed; JetStream redelivers the message"
        ),
    }
}

async fn apply(
    broker: &Broker,
    dlqs: &BrokerDlqs,
    message: &jetstream::Message,
    delivery: &Delivery,
    key: &str,
    settlement: Settlement,
    delivered: u64,
) -> anyhow::Result<()> {
    let ack = |kind| async move {
        message
            .ack_with(kind)
            .await
            .map_err(|e| anyhow::anyhow!("ack: {e}"))
    };
    match settlement {
        Settlement::Delivered => {
            ack(AckKind::Ack).await?;
            replay_delivered(broker, delivery).await
        }
        Settlement::Again {
            failed,
            delay_ms,
            spend_attempt,
        } => {
            let next = History::after(delivery, &failed, spend_attempt);
            broker.history().put(key, &next, delivered).await?;
            ack(AckKind::Nak(Some(Duration::from_millis(delay_ms)))).await
        }
        Settlement::DeadLetter { failed, letter } => {
            broker.dead_letter(delivery, &failed, &letter, key).await?;
            dlqs.written(NAME, &letter.dlq, &delivery.topic);
            message
                .double_ack_with(AckKind::Term)
                .await
                .map_err(|e| anyhow::anyhow!("term after dead-lettering: {e}"))
        }
        Settlement::Discard { failed, reason } => {
            broker
                .audit("discarded", delivery, &failed.kind, &reason)
                .await?;
            ack(AckKind::Term).await
        }
        Settlement::Release { delay_ms } => {
            ack(AckKind::Nak(Some(Duration::from_millis(delay_ms)))).await
        }
    }
}

/// A replayed message arrived: the record a replay's canary waits for.
async fn replay_delivered(broker: &Broker, delivery: &Delivery) -> anyhow::Result<()> {
    match delivery.headers.get(crate::dlq::REPLAY_HEADER) {
        Some(token) => broker.audit("replay-delivered", delivery, "", token).await,
        None => Ok(()),
    }
}

/// In-progress acks while the consumer works, so JetStream does not hand the message to
/// another gateway. Never returns: it ends when the delivery does.
async fn keep_alive(message: &jetstream::Message, every: Duration) -> std::convert::Infallible {
    let every = every.max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = message.ack_with(AckKind::Progress).await {
            // The connection is down; the ack of the outcome will tell.
            tracing::debug!(error = %e, "nats source: an in-progress ack failed");
        }
    }
}

fn to_delivery(
    message: &jetstream::Message,
    stream: &str,
    seq: u64,
    published_at_ms: u64,
) -> Delivery {
    let mut delivery = Delivery {
        id: format!("{stream}-{seq}"),
        topic: message.subject.to_string(),
        payload: message.payload.to_vec(),
        published_at_ms,
        ..Delivery::default()
    };
    if let Some(headers) = &message.headers {
        // A replay carries the original id (its own Nats-Msg-Id would be deduplicated).
        let replayed = headers.get("verdict-message-id").is_some();
        for (name, values) in headers.iter() {
            let name = name.to_string();
            let Some(value) = values.first() else {
                continue;
            };
            match name.as_str() {
                "Nats-Msg-Id" if !replayed => delivery.id = value.to_string(),
                "verdict-message-id" => delivery.id = value.to_string(),
                n if n.eq_ignore_ascii_case("content-type") => {
                    delivery.content_type = Some(value.to_string());
                }
                n if n.starts_with("Nats-") => {}
                _ => {
                    delivery.headers.insert(name, value.to_string());
                }
            }
        }
    }
    delivery
}

/// Read each DLQ's depth from the DLQ stream about once a second.
async fn poll_dlq_depths(broker: Broker, naming: crate::DlqNaming, dlqs: BrokerDlqs) {
    loop {
        match broker.dlq_depths().await {
            Ok(depths) => {
                for (dlq, depth) in depths {
                    dlqs.set_depth(NAME, &dlq, &super::topic_of_dlq(naming, &dlq), depth);
                }
            }
            Err(e) => tracing::debug!(error = %e, "nats source: DLQ depths not read"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The config the gateway gives its durable consumer.
pub(crate) fn consumer_config(config: &NatsConfig, durable: &str) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(durable.to_string()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_millis(config.ack_wait_ms),
        // The gateway counts attempts (a delay spends none): JetStream must never give up.
        max_deliver: -1,
        max_ack_pending: config.max_ack_pending,
        deliver_policy: consumer::DeliverPolicy::All,
        ..Default::default()
    }
}

/// The config of a stream the gateway creates.
pub(crate) fn stream_config(name: &str, subjects: Vec<String>) -> stream::Config {
    stream::Config {
        name: name.to_string(),
        subjects,
        storage: stream::StorageType::File,
        allow_direct: true,
        ..Default::default()
    }
}
