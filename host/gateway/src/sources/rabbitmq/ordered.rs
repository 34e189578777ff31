//! Key order on a RabbitMQ route (`ordering = "key"`): one gateway consumes the route's
//! queue, and delivers one message of a key at a time, a failed one retried in place.
//!
//! - **One consumer.** The queue is consumed with `basic.consume`'s `exclusive` flag, so
//!   the broker hands it to one gateway at a time. Another gateway sees the queue has a
//!   consumer (asking anyway would be refused, `ACCESS_REFUSED`), stands by and looks
//!   again every [`STANDBY_RETRY`], taking over once the holder's consumer is gone. (A single-active-consumer queue would do the same, but
//!   that is an argument fixed when a queue is declared: an existing queue could not be
//!   switched to it without deleting it.)
//! - **One message of a key at a time.** The broker hands a queue's messages out in order;
//!   a message whose key (the value of the route's `key_header` header) has one in flight
//!   or waiting to retry waits behind it in [`KeyChains`], held unacknowledged - so it
//!   counts against `prefetch`. A message without the header is not ordered.
//! - **Retries in place.** A delay bucket would put a retry behind its key's later
//!   messages. On an ordered route a failed message stays unacknowledged and is delivered
//!   again after its delay, its history carried in memory in the same signed headers a
//!   bucket's copy would carry (never published).
//!
//! A crash, a lost connection, or this queue's consumer stopping for any other reason (its
//! channel is then closed): the broker puts back everything the closed channel held
//! unacknowledged, each message in its place, so the next consumer - this gateway again, or
//! another one taking over - sees each key in order. What a closed channel held is dropped
//! from the chains unread; a message in a consumer call when it closed comes twice (the
//! fault's duplicate), its second delivery waiting behind the first's call.
//!
//! Limits: a message waits unacknowledged within the broker's `consumer_timeout` (30
//! minutes by default): past it the broker closes the channel and the queue is consumed
//! again, the attempts a message made in place kept here ([`KeyChains`] holds its history
//! until it is settled), so its retries still end; on a gateway's crash or a takeover they
//! start again (a message that always fails still ends in the DLQ, after a crash per extra
//! `max_attempts`). What waits behind a failed key takes `prefetch` slots: a key with
//! `prefetch` messages in a row holds every key until its first is settled. Order is the
//! order the broker hands messages out again: checked on classic queues, the kind the
//! gateway declares.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::FutureExt as _;
use lapin::BasicProperties;
use lapin::types::{FieldTable, ShortString};
use tokio::sync::watch;

use super::topology::Topology;
use super::{Attempt, Attempted, Job, Retries};
use crate::sources::key_chains::{Chains, bounded_key};

/// How often a gateway standing by asks for an ordered queue again.
pub(super) const STANDBY_RETRY: Duration = Duration::from_secs(2);

/// At most this many histories of messages retried in place are kept for their next
/// delivery (the oldest forgotten first: a message another gateway took over never comes
/// back here).
const MAX_HISTORIES: usize = 10_000;

/// How often a message waiting in place looks at whether its channel is still open.
const CHANNEL_CHECK: Duration = Duration::from_millis(250);

/// A message taken from an ordered queue, with what delivering it needs.
pub(super) struct Waiting {
    pub(super) job: Job,
    pub(super) message: lapin::message::Delivery,
}

/// The keys of ordered queues with a message in flight or waiting to retry, and each one's
/// later messages in the order the broker handed them out; shared by every session of the
/// source, so a new session's messages of a key wait behind what an earlier one still
/// holds. Also the current session's publishing channel, for settling what an earlier
/// session's consumer took.
#[derive(Default)]
pub(super) struct KeyChains {
    chains: Chains<Waiting>,
    publisher: Mutex<Option<Topology>>,
    /// Per queue, the keys whose message is retrying in place (parked: their later messages
    /// wait).
    parked: Mutex<HashMap<String, HashSet<String>>>,
    /// The properties (the signed history) of each message retried in place, by its
    /// failure key, until it is settled: a message the broker hands out again after its
    /// channel closed goes on from its last attempt here instead of from the first.
    histories: Mutex<Histories>,
}

/// Bounded map from a message's failure key to its history (see [`KeyChains::histories`]).
#[derive(Default)]
struct Histories {
    kept: HashMap<String, (u64, BasicProperties)>,
    next: u64,
}

impl Histories {
    fn keep(&mut self, key: &str, properties: BasicProperties) {
        self.next += 1;
        self.kept.insert(key.to_string(), (self.next, properties));
        if self.kept.len() > MAX_HISTORIES
            && let Some(oldest) = self
                .kept
                .iter()
                .min_by_key(|(_, (n, _))| *n)
                .map(|(k, _)| k.clone())
        {
            self.kept.remove(&oldest);
        }
    }
}

impl KeyChains {
    /// The session now consuming publishes through `topology`.
    pub(super) fn set_publisher(&self, topology: &Topology) {
        *self
            .publisher
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(topology.clone());
    }

    /// The current session's publishing channel, if a session has started.
    pub(super) fn publisher(&self) -> Option<Topology> {
        self.publisher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Mark `key` of `queue` parked or not: how many keys of `queue` are parked now, or
    /// `None` when nothing changed (a key that never failed costs no allocation or gauge
    /// update when its message settles).
    fn park(&self, queue: &str, key: &str, parked: bool) -> Option<u64> {
        let mut keys = self.parked.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = if parked {
            keys.entry(queue.to_string())
                .or_default()
                .insert(key.to_string())
        } else {
            keys.get_mut(queue)
                .is_some_and(|of_queue| of_queue.remove(key))
        };
        let now = keys.get(queue).map_or(0, HashSet::len) as u64;
        changed.then_some(now)
    }

    fn history(&self, key: &str) -> Option<BasicProperties> {
        let histories = self
            .histories
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        histories.kept.get(key).map(|(_, p)| p.clone())
    }

    fn keep_history(&self, key: &str, properties: BasicProperties) {
        let mut histories = self
            .histories
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        histories.keep(key, properties);
    }

    fn forget_history(&self, key: &str) {
        let mut histories = self
            .histories
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        histories.kept.remove(key);
    }

    /// See [`Chains::admit`].
    pub(super) fn admit(&self, queue: &str, key: String, waiting: Waiting) -> Option<Waiting> {
        self.chains.admit(queue, key, waiting)
    }
}

/// Deliver `first` and then, one at a time, each message of `key` that waited behind it,
/// until the key's chain is empty. Once `shutdown` turns true nothing more is delivered:
/// what waits goes back to the queue when the connection closes.
pub(super) fn run_chain(
    chains: Arc<KeyChains>,
    queue: String,
    key: String,
    first: Waiting,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut next = Some(first);
        while let Some(Waiting { job, message }) = next {
            let channel = job.channel.clone();
            let delivery = deliver(&job, &chains, (&queue, &key), &message, &mut shutdown);
            let delivered = AssertUnwindSafe(delivery).catch_unwind().await;
            // Whatever ended its message's turn, the key is no longer parked behind it.
            if let Some(parked) = chains.park(&queue, &key, false) {
                job.driver.pipeline().parked_keys_held(&queue, parked);
            }
            // The driver turns a panic in processing into a dead letter; one past it must
            // neither stall the key nor let its next message overtake this one: the channel
            // closes, and the broker puts this message and its key's next ones back in
            // their places.
            if delivered.is_err() {
                tracing::error!(
                    queue = %verdict_runtime::text::Clean(&queue),
                    "rabbitmq source: delivering a message of a queue ordered by key panicked; \
                     its channel is closed, so the broker hands its messages out again in order"
                );
                close(channel);
            }
            next = chains.chains.next(&queue, &key);
        }
    });
}

/// Deliver `message`, retrying it in place until it is settled otherwise; settled through
/// the current session's publisher, so a message an earlier session took can still be
/// dead-lettered. Returns without settling it once its channel has closed (the broker has
/// it back) or the source is stopping.
async fn deliver(
    job: &Job,
    chains: &KeyChains,
    (queue, key): (&str, &str),
    message: &lapin::message::Delivery,
    shutdown: &mut watch::Receiver<bool>,
) {
    let failure_key = super::failure_key(queue, message);
    let mut properties = chains
        .history(&failure_key)
        .unwrap_or_else(|| message.properties.clone());
    let mut redelivered = message.redelivered;
    loop {
        if *shutdown.borrow() || !job.channel.status().connected() {
            return;
        }
        let attempt = Attempt {
            properties: &properties,
            redelivered,
            retries: Retries::InPlace(None),
            topology: chains.publisher().unwrap_or_else(|| job.topology.clone()),
            failure_key: failure_key.clone(),
        };
        match job.attempt(queue, message, attempt).await {
            Attempted::Settled => {
                chains.forget_history(&failure_key);
                return;
            }
            Attempted::NotDelivered => return,
            Attempted::InPlace(again) => {
                chains.keep_history(&failure_key, again.properties.clone());
                if let Some(parked) = chains.park(queue, key, true) {
                    job.driver.pipeline().parked_keys_held(queue, parked);
                }
                if !wait_in_place(again.wait, &job.channel, shutdown).await {
                    return;
                }
                properties = again.properties;
                // What comes next is a retry, like a bucket's copy, not a redelivery.
                redelivered = false;
            }
        }
    }
}

/// Wait `wait` for a message's next attempt in place: false as soon as its channel closes
/// (the broker has it back, and another consumer may deliver it and its key's next ones) or
/// the source stops.
async fn wait_in_place(
    wait: Duration,
    channel: &lapin::Channel,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let until = tokio::time::Instant::now() + wait;
    loop {
        if !channel.status().connected() || *shutdown.borrow() {
            return false;
        }
        let now = tokio::time::Instant::now();
        if now >= until {
            return true;
        }
        tokio::select! {
            () = tokio::time::sleep((until - now).min(CHANNEL_CHECK)) => {}
            _ = shutdown.changed() => return false,
        }
    }
}

/// Closes its channel when dropped (unless taken out first): the broker puts back what the
/// channel held unacknowledged, in place.
pub(super) struct CloseOnDrop(pub(super) Option<lapin::Channel>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        if let Some(channel) = self.0.take() {
            close(channel);
        }
    }
}

/// Close `channel` (in a task of its own: this may run in a `Drop`).
fn close(channel: lapin::Channel) {
    if !channel.status().connected() {
        return;
    }
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = channel
                .close(200, ShortString::from("verdict: handing the queue back"))
                .await;
        });
    }
}

/// The key of a message on a queue ordered by the header `header` (its name matched without
/// regard to case): its value, bounded ([`bounded_key`]); `None` without the header or with
/// an empty one (the message is then not ordered).
pub(super) fn key_of(headers: Option<&FieldTable>, header: &str) -> Option<String> {
    let value = headers?
        .inner()
        .iter()
        .find(|(name, _)| name.as_str().eq_ignore_ascii_case(header))
        .and_then(|(_, value)| super::headers::text(value))?;
    bounded_key(value)
}

/// Whether consuming failed because another consumer holds the queue exclusively (not for
/// want of permission, which is refused with the same code).
pub(super) fn refused(error: &anyhow::Error) -> bool {
    error.downcast_ref::<lapin::Error>().is_some_and(|e| {
        matches!(e.kind(), lapin::ErrorKind::ProtocolError(amqp)
                if amqp.get_id() == 403 && amqp.get_message().as_str().contains("exclusive use"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{AMQPValue, LongString, ShortString};

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut table = FieldTable::default();
        for (name, value) in pairs {
            table.insert(ShortString::from(*name), value.clone());
        }
        table
    }

    #[test]
    fn histories_kept_for_messages_retried_in_place_are_bounded_oldest_first() {
        let mut histories = Histories::default();
        for n in 0..=MAX_HISTORIES {
            histories.keep(&format!("q\u{0}m-{n}"), BasicProperties::default());
        }
        assert_eq!(histories.kept.len(), MAX_HISTORIES);
        assert!(
            !histories.kept.contains_key("q\u{0}m-0"),
            "the oldest goes first"
        );
        // Kept again, a history is the newest.
        histories.keep("q\u{0}m-1", BasicProperties::default());
        histories.keep("q\u{0}new", BasicProperties::default());
        assert!(histories.kept.contains_key("q\u{0}m-1"));
        assert!(!histories.kept.contains_key("q\u{0}m-2"));
    }

    #[test]
    fn a_key_is_its_header_matched_without_case_and_bounded() {
        let long = |s: &str| AMQPValue::LongString(LongString::from(s));
        let headers = table(&[("Order-Id", long("o-1")), ("other", long("x"))]);
        assert_eq!(key_of(Some(&headers), "order-id").as_deref(), Some("o-1"));
        assert_eq!(key_of(Some(&headers), "missing"), None);
        assert_eq!(key_of(None, "order-id"), None);
        assert_eq!(
            key_of(Some(&table(&[("order-id", long(""))])), "order-id"),
            None,
            "an empty key orders nothing"
        );
        assert_eq!(
            key_of(
                Some(&table(&[("order-id", AMQPValue::LongLongInt(42))])),
                "order-id"
            )
            .as_deref(),
            Some("42")
        );
        let huge = "k".repeat(10_000);
        let key = key_of(Some(&table(&[("order-id", long(&huge))])), "order-id").unwrap();
        assert!(key.starts_with("sha256:") && key.len() < 100, "{key}");
        let other = key_of(
            Some(&table(&[("order-id", long(&format!("{huge}x")))])),
            "order-id",
        )
        .unwrap();
        assert_ne!(key, other, "two long keys stay two keys");
        // A header that is no text (a table, say) gives no key rather than a made-up one.
        let nested = table(&[("order-id", AMQPValue::FieldTable(FieldTable::default()))]);
        assert_eq!(key_of(Some(&nested), "order-id"), None);
    }
}
