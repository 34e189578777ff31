//! Key order on a RabbitMQ route (`ordering = "key"`): one gateway consumes the route's
//! queue, and delivers one message of a key at a time, a failed one retried in place.
//!
//! - **One consumer.** The queue is consumed with `basic.consume`'s `exclusive` flag, so
//!   the broker hands it to one gateway at a time. Another gateway is refused
//!   (`ACCESS_REFUSED`), stands by and asks again every [`STANDBY_RETRY`], taking over once
//!   the holder's connection closes. (A single-active-consumer queue would do the same, but
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
//! A crash or a lost connection: the broker puts back everything a closed channel held
//! unacknowledged, each message in its place, so the next consumer - this gateway
//! reconnected, or another one taking over - sees each key in its order again. A session
//! torn down while its channel stays open (its publishing channel broke) keeps what it
//! holds in the key's chain, delivered from there and settled through the current
//! session's publisher, so the new session's messages of that key still wait behind it.
//!
//! Limits: a retry waits in place within the broker's `consumer_timeout` (30 minutes by
//! default), past which the broker closes the channel and hands the message out again; the
//! history of a message retrying in place lives in this gateway's memory, so a crash starts
//! its attempts again (a message that always fails still ends in the DLQ, after a crash
//! per extra `max_attempts`); what waits behind a failed key takes `prefetch` slots that
//! other keys could use.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::FutureExt as _;
use lapin::types::FieldTable;

use super::Job;
use super::topology::Topology;

/// How often a gateway standing by asks for an ordered queue again.
pub(super) const STANDBY_RETRY: Duration = Duration::from_secs(2);

/// A key longer than this is replaced by its digest (a key only ever lives in memory here,
/// but a producer's header must not size the gateway's maps).
const MAX_KEY_BYTES: usize = 256;

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

    /// See [`Chains::admit`].
    pub(super) fn admit(&self, queue: &str, key: String, waiting: Waiting) -> Option<Waiting> {
        self.chains.admit(queue, key, waiting)
    }
}

/// Per (queue, key), the messages waiting behind the one being delivered.
struct Chains<T> {
    waiting: Mutex<HashMap<(String, String), VecDeque<T>>>,
}

impl<T> Default for Chains<T> {
    fn default() -> Self {
        Chains {
            waiting: Mutex::default(),
        }
    }
}

impl<T> Chains<T> {
    /// Hand `item` (a message of `key` on `queue`) to its key's chain: back when the key
    /// was free - the caller delivers it and then asks [`Chains::next`] - or kept to wait
    /// behind the key's earlier messages.
    fn admit(&self, queue: &str, key: String, item: T) -> Option<T> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        match waiting.entry((queue.to_string(), key)) {
            Entry::Occupied(mut chain) => {
                chain.get_mut().push_back(item);
                None
            }
            Entry::Vacant(free) => {
                free.insert(VecDeque::new());
                Some(item)
            }
        }
    }

    /// The next message of `key` on `queue` once the one before it is settled; `None` frees
    /// the key.
    fn next(&self, queue: &str, key: &str) -> Option<T> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let chain_key = (queue.to_string(), key.to_string());
        let next = waiting.get_mut(&chain_key).and_then(VecDeque::pop_front);
        if next.is_none() {
            waiting.remove(&chain_key);
        }
        next
    }
}

/// Deliver `first` and then, one at a time, each message of `key` that waited behind it,
/// until the key's chain is empty.
pub(super) fn run_chain(chains: Arc<KeyChains>, queue: String, key: String, first: Waiting) {
    tokio::spawn(async move {
        let mut next = Some(first);
        while let Some(Waiting { job, message }) = next {
            // The driver already turns a panic in processing into a dead letter; one past it
            // must not stall the key for good, so its chain goes on (the message it held
            // stays unacknowledged until its channel closes).
            let delivered = AssertUnwindSafe(job.handle_in_order(&chains, &queue, message))
                .catch_unwind()
                .await;
            if delivered.is_err() {
                tracing::error!(
                    queue = %verdict_runtime::text::Clean(&queue),
                    "rabbitmq source: delivering a message of an ordered queue panicked; its \
                     key goes on with the next message"
                );
            }
            next = chains.chains.next(&queue, &key);
        }
    });
}

/// The key of a message on a queue ordered by the header `header` (its name matched without
/// regard to case): its value, or the digest of a value longer than [`MAX_KEY_BYTES`];
/// `None` without the header or with an empty one (the message is then not ordered).
pub(super) fn key_of(headers: Option<&FieldTable>, header: &str) -> Option<String> {
    let value = headers?
        .inner()
        .iter()
        .find(|(name, _)| name.as_str().eq_ignore_ascii_case(header))
        .and_then(|(_, value)| super::headers::text(value))
        .filter(|v| !v.is_empty())?;
    if value.len() <= MAX_KEY_BYTES {
        return Some(value);
    }
    Some(format!(
        "sha256:{}",
        verdict_runtime::digest::sha256_hex(value.as_bytes())
    ))
}

/// Whether consuming failed because another consumer holds the queue exclusively.
pub(super) fn refused(error: &anyhow::Error) -> bool {
    error.downcast_ref::<lapin::Error>().is_some_and(
        |e| matches!(e.kind(), lapin::ErrorKind::ProtocolError(amqp) if amqp.get_id() == 403),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{AMQPValue, LongString, ShortString};

    #[test]
    fn a_key_goes_one_message_at_a_time_in_the_order_taken_and_keys_do_not_wait_for_each_other() {
        let chains = Chains::default();
        assert_eq!(
            chains.admit("q", "a".into(), 1),
            Some(1),
            "a free key delivers at once"
        );
        assert_eq!(
            chains.admit("q", "a".into(), 2),
            None,
            "a busy key's message waits"
        );
        assert_eq!(chains.admit("q", "a".into(), 3), None);
        assert_eq!(
            chains.admit("q", "b".into(), 4),
            Some(4),
            "another key does not wait"
        );
        assert_eq!(
            chains.admit("other", "a".into(), 5),
            Some(5),
            "nor another queue's key"
        );
        assert_eq!(chains.next("q", "a"), Some(2));
        assert_eq!(
            chains.admit("q", "a".into(), 6),
            None,
            "the key is busy until drained"
        );
        assert_eq!(chains.next("q", "a"), Some(3));
        assert_eq!(chains.next("q", "a"), Some(6));
        assert_eq!(chains.next("q", "a"), None);
        assert_eq!(
            chains.admit("q", "a".into(), 7),
            Some(7),
            "a drained key is free again"
        );
        assert_eq!(chains.next("q", "b"), None);
        assert_eq!(
            chains.waiting.lock().unwrap().len(),
            2,
            "only busy keys are kept"
        );
    }

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut table = FieldTable::default();
        for (name, value) in pairs {
            table.insert(ShortString::from(*name), value.clone());
        }
        table
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
