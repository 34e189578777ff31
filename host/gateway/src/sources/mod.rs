//! Where failed deliveries come from and where verdicts are applied: the *sources*.
//!
//! A source hands the pipeline [`Delivery`]s and applies the [`Settlement`] the pipeline
//! returns for each, in the source's own terms. Everything between - the HTTP push, the
//! policy's verdict, the dead-letter envelope, the metrics - is shared, so a policy behaves
//! the same on every source.
//!
//! | settlement | embedded (SQLite) | NATS JetStream | RabbitMQ |
//! |---|---|---|---|
//! | delivered | row `delivered` | `ack` | `ack` |
//! | retry / delay | row `scheduled` at `now + delay` | history to the KV bucket, then `nak(delay)` | copy with history headers to the delay bucket's queue (publisher confirm), then `ack` |
//! | dead-letter | DLQ row, same transaction | envelope to the DLQ stream, PubAck, then `term` | envelope to the DLQ queue (publisher confirm), then `ack` |
//! | discard | row `discarded` + audit row | audit record, then `term` | audit record, then `ack` |
//!
//! Each source writes the new state *before* it lets go of the old one, so a crash between
//! the two delivers a message twice, never zero times.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, watch};

use crate::pipeline::Handled;
use verdict_runtime::AttemptSpec;

pub mod embedded;
pub mod nats;
pub mod rabbitmq;

/// One delivery of one message, as any source hands it to the pipeline.
#[derive(Debug, Clone, Default)]
pub struct Delivery {
    /// Message id.
    pub id: String,
    /// Topic (NATS subject, RabbitMQ queue).
    pub topic: String,
    /// Headers passed to the consumer.
    pub headers: BTreeMap<String, String>,
    /// Body.
    pub payload: Vec<u8>,
    /// Content type.
    pub content_type: Option<String>,
    /// Attempts spent so far (failed deliveries that were retried).
    pub attempt: u32,
    /// Delays granted so far.
    pub deferrals: u32,
    /// Publication time.
    pub published_at_ms: u64,
    /// First failure, if any.
    pub first_failed_at_ms: Option<u64>,
    /// Earlier failed attempts, oldest first.
    pub history: Vec<AttemptSpec>,
    /// Delivered before without an outcome recorded: the consumer may have seen it.
    pub redelivery: bool,
    /// The source's name (`embedded`, `nats`, `rabbitmq`), for policies' `source` extension.
    pub source: &'static str,
}

/// The header naming a message's deadline, in ms since the Unix epoch: a policy sees it as
/// `deadline-ms` (`is_expired`, `time_left_ms`). The brokers' own TTLs (RabbitMQ's
/// `expiration`, NATS's `Nats-TTL`) are turned into it when a message arrives.
pub const DEADLINE_HEADER: &str = "x-message-deadline-ms";
/// The header naming a message's time to live, in ms after its publication (used when
/// [`DEADLINE_HEADER`] is absent).
pub const TTL_HEADER: &str = "x-message-ttl-ms";

impl Delivery {
    /// The message's deadline (ms since the Unix epoch), from [`DEADLINE_HEADER`] or
    /// [`TTL_HEADER`] (case-insensitive); an unparsable value counts as none.
    pub fn deadline_ms(&self) -> Option<u64> {
        let header = |name: &str| {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        };
        header(DEADLINE_HEADER)
            .or_else(|| header(TTL_HEADER).map(|ttl| self.published_at_ms.saturating_add(ttl)))
    }
}

/// A failed delivery, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// When.
    pub at_ms: u64,
    /// Error kind.
    pub kind: String,
    /// Error message.
    pub message: String,
}

impl From<&AttemptRecord> for AttemptSpec {
    fn from(r: &AttemptRecord) -> Self {
        AttemptSpec {
            at_ms: r.at_ms,
            kind: r.kind.clone(),
            message: r.message.clone(),
        }
    }
}

/// A dead letter ready to be written: the encoded envelope and what indexes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The DLQ's name.
    pub dlq: String,
    /// The verdict's class (kebab-case).
    pub class: String,
    /// The verdict's reason.
    pub reason: String,
    /// `json` or `msgpack`.
    pub format: &'static str,
    /// The encoded envelope.
    pub envelope: Vec<u8>,
}

/// The headers a broker dead letter carries beside its envelope, written by every broker
/// source and read back by the DLQ tools (`crate::dlq`), so listing and filtering a DLQ
/// never decodes the envelopes' own fields.
pub mod letter_headers {
    /// The source topic.
    pub const TOPIC: &str = "verdict-topic";
    /// The message id.
    pub const MESSAGE_ID: &str = "verdict-message-id";
    /// The verdict's class.
    pub const CLASS: &str = "verdict-class";
    /// The last error's kind.
    pub const KIND: &str = "verdict-kind";
    /// The verdict's reason (one line, at most 512 characters).
    pub const REASON: &str = "verdict-reason";
    /// The envelope's encoding (`json`, `msgpack`).
    pub const FORMAT: &str = "verdict-format";
    /// Attempts made.
    pub const ATTEMPTS: &str = "verdict-attempts";
    /// When it was dead-lettered (ms since the epoch).
    pub const AT_MS: &str = "verdict-at-ms";
}

impl DeadLetter {
    /// The [`letter_headers`] of this dead letter of `delivery`, which failed with `failed`.
    pub fn headers(
        &self,
        delivery: &Delivery,
        failed: &AttemptRecord,
    ) -> [(&'static str, String); 8] {
        use letter_headers::*;
        use verdict_runtime::text::one_line;
        // Header values are one bounded line: a CR/LF would inject headers, and some
        // clients refuse such a value with a panic.
        [
            (TOPIC, one_line(&delivery.topic, 1_024)),
            (MESSAGE_ID, one_line(&delivery.id, 1_024)),
            (CLASS, one_line(&self.class, 64)),
            (
                KIND,
                one_line(&failed.kind, verdict_runtime::text::MAX_KIND_BYTES),
            ),
            (REASON, one_line(&self.reason, 512)),
            (FORMAT, self.format.to_string()),
            (ATTEMPTS, delivery.attempt.saturating_add(1).to_string()),
            (AT_MS, failed.at_ms.to_string()),
        ]
    }
}

/// What a source must do with a delivery once the pipeline is done with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The consumer took it.
    Delivered,
    /// Deliver again after `delay_ms`, recording the failure; a retry spends an attempt, a
    /// delay counts a deferral instead.
    Again {
        /// The failure.
        failed: AttemptRecord,
        /// How long to wait.
        delay_ms: u64,
        /// Retry (true) or delay (false).
        spend_attempt: bool,
    },
    /// Retire it to a DLQ.
    DeadLetter {
        /// The failure.
        failed: AttemptRecord,
        /// The envelope.
        letter: DeadLetter,
    },
    /// Drop it on the policy's word, with an audit record.
    Discard {
        /// The failure.
        failed: AttemptRecord,
        /// The verdict's reason.
        reason: String,
    },
    /// Give it back untouched (no route for its topic now): nothing spent.
    Release {
        /// How long to wait.
        delay_ms: u64,
    },
}

impl Settlement {
    /// What applying it does, for the `verdict_handling_seconds` metric.
    pub fn handled(&self) -> Handled {
        match self {
            Settlement::Delivered => Handled::Delivered,
            Settlement::Again { .. } => Handled::Again,
            Settlement::DeadLetter { .. } => Handled::DeadLettered,
            Settlement::Discard { .. } => Handled::Discarded,
            Settlement::Release { .. } => Handled::Released,
        }
    }
}

impl Delivery {
    /// The history after `failed`, oldest first.
    pub fn history_with(&self, failed: &AttemptRecord) -> Vec<AttemptSpec> {
        let mut history = self.history.clone();
        history.push(failed.into());
        history
    }
}

/// Whether a source is connected to its broker; `/readyz` reads these.
#[derive(Debug, Clone)]
pub struct Readiness {
    name: &'static str,
    up: Arc<AtomicBool>,
}

impl Readiness {
    /// A source named `name`, not yet connected.
    pub fn new(name: &'static str) -> Readiness {
        Readiness {
            name,
            up: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The source's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Connected now?
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Record (dis)connection.
    pub fn set(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
    }
}

/// Run a broker source: `session` connects and consumes until shutdown (`Ok`) or until
/// it fails, and is then rebuilt after a backoff (100 ms doubling to 5 s, back to 100 ms
/// once a session got as far as consuming, which it reports through `ready`). Deliveries
/// hold one of `max_in_flight` slots; at shutdown they get `grace` to finish - what is still
/// unsettled after that the broker redelivers.
pub(crate) async fn supervise<F, Fut>(
    name: &'static str,
    ready: &Readiness,
    max_in_flight: usize,
    shutdown: watch::Receiver<bool>,
    grace: Duration,
    mut session: F,
) where
    F: FnMut(Arc<Semaphore>, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let max = max_in_flight.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let mut backoff = Backoff::new();
    let mut stop = shutdown.clone();
    while !*shutdown.borrow() {
        match session(slots.clone(), shutdown.clone()).await {
            Ok(()) => break,
            Err(e) => {
                if ready.is_up() {
                    backoff.reset();
                }
                ready.set(false);
                let wait = backoff.next();
                tracing::warn!(
                    source = name,
                    error = %format!("{e:#}"),
                    retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    "broker session failed; reconnecting"
                );
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }
    ready.set(false);
    if !drained(&slots, max, grace).await {
        tracing::warn!(
            source = name,
            "deliveries still in flight at shutdown are redelivered by the broker"
        );
    }
}

/// Whether every one of a source's `max` delivery slots came back within `grace`: false
/// when deliveries are still running at shutdown.
pub(crate) async fn drained(slots: &Semaphore, max: usize, grace: Duration) -> bool {
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    tokio::time::timeout(grace, slots.acquire_many(all))
        .await
        .is_ok()
}

/// What a caught panic said, as text (a panic's payload is a `&str` or a `String` when it
/// has a message at all).
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// How many times in a row applying a settlement to one message may fail (the message
/// given back to the broker each time) before the gateway dead-letters it itself.
pub const MAX_SETTLE_FAILURES: u32 = 3;

/// How long a message waits before its next delivery after `failures` failed settlements
/// in a row: at once (the broker's own redelivery) below [`MAX_SETTLE_FAILURES`]; past it,
/// when even the gateway's own dead letter could not be written (the DLQ itself refuses),
/// 5 s doubling to 5 minutes - the message stays on the source, released at a bounded rate
/// and counted (`verdict_settlement_faults_total{reason="released"}`) until the DLQ takes
/// it.
pub(crate) fn release_delay(failures: u32) -> Duration {
    match failures.checked_sub(MAX_SETTLE_FAILURES) {
        None => Duration::ZERO,
        Some(past) => Duration::from_secs((5_u64 << past.min(6)).min(300)),
    }
}

/// Failed settlements per message, in this process: the bound that keeps a message that
/// no settlement can be applied to from being redelivered without end. Kept in memory and
/// bounded (forgotten wholesale past 100,000 entries): after a restart a message gets
/// [`MAX_SETTLE_FAILURES`] more tries, never unbounded ones.
#[derive(Debug, Clone, Default)]
pub(crate) struct SettleFailures(Arc<Failures>);

#[derive(Debug, Default)]
struct Failures {
    counts: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// Keys tracked now: a settled delivery checks this, not the lock, in the usual case
    /// of no failures at all.
    tracked: std::sync::atomic::AtomicUsize,
}

impl SettleFailures {
    const MAX_TRACKED: usize = 100_000;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, u32>> {
        self.0
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether any message has failed to settle lately (then a settled one may need
    /// [`SettleFailures::settled`]).
    pub(crate) fn any(&self) -> bool {
        self.0.tracked.load(Ordering::Relaxed) > 0
    }

    /// One more failure for `key`: how many in a row now.
    pub(crate) fn failed(&self, key: &str) -> u32 {
        let mut map = self.lock();
        if map.len() >= Self::MAX_TRACKED && !map.contains_key(key) {
            map.clear();
        }
        let n = map.entry(key.to_string()).or_default();
        *n = n.saturating_add(1);
        let n = *n;
        self.0.tracked.store(map.len(), Ordering::Relaxed);
        n
    }

    /// `key` settled: its count starts over.
    pub(crate) fn settled(&self, key: &str) {
        if !self.any() {
            return;
        }
        let mut map = self.lock();
        map.remove(key);
        self.0.tracked.store(map.len(), Ordering::Relaxed);
    }
}

/// Aborts a background task (a depth poller, the bench's consumer) when its owner goes.
pub struct AbortOnDrop(
    /// The task.
    pub tokio::task::JoinHandle<()>,
);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reconnect delays: 100 ms doubling to 5 s.
#[derive(Debug)]
pub(crate) struct Backoff {
    next_ms: u64,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff { next_ms: 100 }
    }

    pub(crate) fn reset(&mut self) {
        self.next_ms = 100;
    }

    pub(crate) fn next(&mut self) -> Duration {
        let d = Duration::from_millis(self.next_ms);
        self.next_ms = (self.next_ms * 2).min(5_000);
        d
    }
}

/// The dead-letter queues a broker holds, as last read from the broker (refreshed about once
/// a second by each broker source) plus the dead letters this process wrote to them; the
/// metrics read this instead of asking the broker on every scrape.
#[derive(Debug, Clone, Default)]
pub struct BrokerDlqs(Arc<std::sync::Mutex<BTreeMap<(&'static str, String), BrokerDlq>>>);

/// One broker DLQ.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerDlq {
    /// Source topic (empty for a global DLQ, whose letters come from many).
    pub topic: String,
    /// Dead letters waiting, as the broker counts them.
    pub depth: u64,
    /// Dead letters this process wrote (and the broker confirmed).
    pub ingress: u64,
}

impl BrokerDlqs {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(&'static str, String), BrokerDlq>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The broker's count for `dlq` of `source`.
    pub(crate) fn set_depth(&self, source: &'static str, dlq: &str, topic: &str, depth: u64) {
        let mut map = self.lock();
        let entry = map.entry((source, dlq.to_string())).or_default();
        entry.topic = topic.to_string();
        entry.depth = depth;
    }

    /// One dead letter confirmed by the broker.
    pub(crate) fn written(&self, source: &'static str, dlq: &str, topic: &str) {
        let mut map = self.lock();
        let entry = map.entry((source, dlq.to_string())).or_default();
        entry.topic = topic.to_string();
        entry.ingress += 1;
        entry.depth += 1;
    }

    /// Every broker DLQ: (source, dlq, state).
    pub fn snapshot(&self) -> Vec<(&'static str, String, BrokerDlq)> {
        self.lock()
            .iter()
            .map(|((source, dlq), d)| (*source, dlq.clone(), d.clone()))
            .collect()
    }
}

/// The source topic of a DLQ named by `naming` (empty when the DLQ is global).
pub(crate) fn topic_of_dlq(naming: verdict_registry::DlqNaming, dlq: &str) -> String {
    match naming {
        verdict_registry::DlqNaming::Suffix => dlq.strip_suffix(".DLQ").unwrap_or(dlq).to_string(),
        verdict_registry::DlqNaming::Prefix => dlq.strip_prefix("DLQ.").unwrap_or(dlq).to_string(),
        verdict_registry::DlqNaming::Global => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_comes_from_its_header_or_a_ttl_after_publication() {
        let with = |headers: &[(&str, &str)]| Delivery {
            published_at_ms: 1_000,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Delivery::default()
        };
        assert_eq!(with(&[]).deadline_ms(), None);
        assert_eq!(
            with(&[("X-Message-Deadline-Ms", "5000")]).deadline_ms(),
            Some(5_000)
        );
        assert_eq!(
            with(&[("x-message-ttl-ms", "250")]).deadline_ms(),
            Some(1_250)
        );
        assert_eq!(
            with(&[("x-message-deadline-ms", "7"), ("x-message-ttl-ms", "250")]).deadline_ms(),
            Some(7),
            "an explicit deadline wins"
        );
        assert_eq!(
            with(&[("x-message-deadline-ms", "soon")]).deadline_ms(),
            None
        );
        assert_eq!(
            with(&[("x-message-ttl-ms", "18446744073709551615")]).deadline_ms(),
            Some(u64::MAX)
        );
    }

    #[test]
    fn settlement_failures_are_released_at_once_then_at_a_bounded_rate() {
        let waits: Vec<u64> = (1..=12).map(|n| release_delay(n).as_secs()).collect();
        assert_eq!(waits, [0, 0, 5, 10, 20, 40, 80, 160, 300, 300, 300, 300]);
        let failures = SettleFailures::default();
        assert_eq!((failures.failed("a"), failures.failed("a")), (1, 2));
        assert_eq!(failures.failed("b"), 1);
        failures.settled("a");
        assert_eq!(failures.failed("a"), 1, "a settled message starts over");
        failures.settled("a");
        failures.settled("b");
        assert!(!failures.any(), "nothing tracked once all settled");
    }

    #[test]
    fn reconnects_back_off_to_five_seconds_and_start_over_once_up() {
        let mut b = Backoff::new();
        let waits: Vec<u64> = (0..8).map(|_| b.next().as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
        b.reset();
        assert_eq!(b.next(), Duration::from_millis(100));
    }

    #[test]
    fn broker_dlq_depth_is_the_brokers_count_and_ingress_is_ours() {
        let dlqs = BrokerDlqs::default();
        dlqs.written("nats", "orders.DLQ", "orders");
        dlqs.written("nats", "orders.DLQ", "orders");
        assert_eq!(
            dlqs.snapshot(),
            [(
                "nats",
                "orders.DLQ".to_string(),
                BrokerDlq {
                    topic: "orders".into(),
                    depth: 2,
                    ingress: 2
                }
            )]
        );
        // The broker's own count wins at the next poll (a replay emptied it).
        dlqs.set_depth("nats", "orders.DLQ", "orders", 0);
        assert_eq!(dlqs.snapshot()[0].2.depth, 0);
        assert_eq!(dlqs.snapshot()[0].2.ingress, 2);
    }

    #[test]
    fn a_dlq_names_its_topic_unless_it_is_global() {
        use verdict_registry::DlqNaming;
        assert_eq!(
            topic_of_dlq(DlqNaming::Suffix, "orders.eu.DLQ"),
            "orders.eu"
        );
        assert_eq!(topic_of_dlq(DlqNaming::Prefix, "DLQ.orders"), "orders");
        assert_eq!(topic_of_dlq(DlqNaming::Global, "all"), "");
    }
}
