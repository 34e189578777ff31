//! Where failed deliveries come from and where verdicts are applied: the *sources*.
//!
//! A source hands the pipeline [`Delivery`](crate::model::Delivery)s and applies the
//! [`Settlement`](crate::model::Settlement) the pipeline
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

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};

use crate::health::Readiness;

pub mod embedded;
pub mod nats;
pub mod rabbitmq;

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
    let mut backoff = Reconnect::new();
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
pub(crate) struct Reconnect {
    next_ms: u64,
}

impl Reconnect {
    pub(crate) fn new() -> Reconnect {
        Reconnect { next_ms: 100 }
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
        let mut b = Reconnect::new();
        let waits: Vec<u64> = (0..8).map(|_| b.next().as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
        b.reset();
        assert_eq!(b.next(), Duration::from_millis(100));
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
