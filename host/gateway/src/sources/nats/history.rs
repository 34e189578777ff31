//! A retried message's attempt history in the JetStream key-value bucket. JetStream
//! redelivers a `nak`ed message unchanged, so what the gateway knows about its earlier
//! attempts has to live beside it; the bucket is shared, so whichever gateway gets the next
//! delivery reads it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};

use crate::model::{AttemptRecord, Delivery};

/// What the gateway knows of a message's failed deliveries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// Attempts spent (retries).
    pub attempt: u32,
    /// Delays granted.
    pub deferrals: u32,
    /// The first failure.
    pub first_failed_at_ms: Option<u64>,
    /// Every failure, oldest first.
    pub attempts: Vec<AttemptRecord>,
    /// The message's dead letter is written, but terminating the original failed: a
    /// redelivery is terminated at once, never delivered again.
    #[serde(default)]
    pub dead_lettered: bool,
}

/// The deepest nesting a history read from the bucket may have: a history nests 3 levels;
/// rmp-serde's own limit (1,024) lets a value in the shared bucket nest deep enough to
/// overflow a thread's stack while it is skipped.
const MAX_DEPTH: usize = 16;

impl History {
    /// A history as the bucket holds it (MessagePack), nested at most a few levels deep.
    pub fn decode(bytes: &[u8]) -> Result<History, rmp_serde::decode::Error> {
        let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
        de.set_max_depth(MAX_DEPTH);
        History::deserialize(&mut de)
    }

    /// The history once `failed` is recorded against `delivery`.
    pub fn after(delivery: &Delivery, failed: &AttemptRecord, spend_attempt: bool) -> History {
        History {
            attempt: delivery.attempts_spent + u32::from(spend_attempt),
            deferrals: delivery.deferrals + u32::from(!spend_attempt),
            first_failed_at_ms: Some(delivery.first_failed_at_ms.unwrap_or(failed.at_ms)),
            attempts: delivery.history_with(failed),
            dead_lettered: false,
        }
    }

    /// Carry this history into `delivery`.
    pub fn apply_to(&self, delivery: &mut Delivery) {
        delivery.attempts_spent = self.attempt;
        delivery.deferrals = self.deferrals;
        delivery.first_failed_at_ms = self.first_failed_at_ms;
        delivery.history = self.attempts.clone();
    }
}

/// Whether a history this gateway wrote at delivery number `written_at` is still the
/// message's history at delivery number `delivered`: only when no delivery came in between
/// (one that another gateway handled may have written a newer one).
fn still_current(written_at: u64, delivered: u64) -> bool {
    written_at.checked_add(1) == Some(delivered)
}

/// How many recent histories a gateway remembers; past that it forgets them all and reads
/// the bucket again (a miss costs a read, never a wrong count).
const REMEMBERED: usize = 50_000;

/// The bucket, and the histories this gateway wrote last.
///
/// A redelivery usually comes back to the gateway that `nak`ed it; reading the bucket for a
/// history this process has just written would be a round trip to the server per retry. The
/// copy is used only when JetStream's delivery count says no other delivery happened since
/// this gateway wrote it (`delivered` then = written at + 1); otherwise another gateway may
/// have changed it, and the bucket is read.
#[derive(Clone)]
pub(crate) struct Histories {
    bucket: kv::Store,
    recent: Arc<Mutex<HashMap<String, (u64, History)>>>,
}

impl Histories {
    /// The bucket itself, for the few records beside the histories (a retired route's
    /// agreed boundary).
    pub(crate) fn bucket(&self) -> &kv::Store {
        &self.bucket
    }

    pub(crate) fn new(bucket: kv::Store) -> Histories {
        Histories {
            bucket,
            recent: Arc::default(),
        }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, History)>> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The history under `key` for delivery number `delivered`, if any. A value that does
    /// not decode is treated as none (logged): the message then counts its attempts afresh
    /// rather than being stuck.
    pub(crate) async fn get(&self, key: &str, delivered: u64) -> anyhow::Result<Option<History>> {
        if let Some((written_at, history)) = self.recent().get(key)
            && still_current(*written_at, delivered)
        {
            return Ok(Some(history.clone()));
        }
        let Some(bytes) = self.bucket.get(key).await? else {
            return Ok(None);
        };
        match History::decode(&bytes) {
            Ok(history) => Ok(Some(history)),
            Err(e) => {
                tracing::warn!(key, error = %e, "nats source: an attempt history does not decode; ignoring it");
                Ok(None)
            }
        }
    }

    /// Write the history of `key` as of delivery number `delivered`.
    pub(crate) async fn put(
        &self,
        key: &str,
        history: &History,
        delivered: u64,
    ) -> anyhow::Result<()> {
        let bytes = rmp_serde::to_vec_named(history)?;
        self.bucket.put(key, bytes.into()).await?;
        let mut recent = self.recent();
        if recent.len() >= REMEMBERED {
            recent.clear();
        }
        recent.insert(key.to_string(), (delivered, history.clone()));
        Ok(())
    }

    pub(crate) async fn forget(&self, key: &str) -> anyhow::Result<()> {
        self.recent().remove(key);
        self.bucket.purge(key).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{History, still_current};

    #[test]
    fn a_history_nested_past_its_shape_is_refused_not_a_stack_overflow() {
        // `{"zz": [[[...1]]]}`, 1,000 deep: an unknown field is skipped as deep as it nests;
        // before, that overflowed the stack (found by `tests/fuzz.rs`).
        let mut bytes = b"\x81\xa2zz".to_vec();
        bytes.extend(std::iter::repeat_n(0x91u8, 1_000));
        bytes.push(0x01);
        assert!(History::decode(&bytes).is_err());
        let history = History {
            attempt: 2,
            deferrals: 1,
            first_failed_at_ms: Some(7),
            attempts: vec![verdict_runtime::AttemptRecord {
                at_ms: 7,
                kind: "http.503".into(),
                message: "busy".into(),
            }],
            dead_lettered: false,
        };
        let packed = rmp_serde::to_vec_named(&history).unwrap();
        assert_eq!(History::decode(&packed).unwrap(), history);
    }

    #[test]
    fn a_remembered_history_is_used_only_for_the_very_next_delivery() {
        assert!(
            still_current(1, 2),
            "nak'ed at 1, redelivered as 2: ours is current"
        );
        assert!(
            !still_current(1, 3),
            "delivery 2 went elsewhere: read the bucket"
        );
        assert!(
            !still_current(2, 2),
            "the same delivery again is not a redelivery"
        );
        assert!(
            !still_current(3, 2),
            "an older delivery number: read the bucket"
        );
        assert!(!still_current(u64::MAX, 0), "no overflow into a match");
    }
}
