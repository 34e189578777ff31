//! A retried message's attempt history in the JetStream key-value bucket. JetStream
//! redelivers a `nak`ed message unchanged, so what the gateway knows about its earlier
//! attempts has to live beside it; the bucket is shared, so whichever gateway gets the next
//! delivery reads it.

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};

use crate::AttemptSpec;
use crate::sources::{AttemptRecord, Delivery};

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
    pub attempts: Vec<AttemptSpec>,
}

impl History {
    /// The history once `failed` is recorded against `delivery`.
    pub fn after(delivery: &Delivery, failed: &AttemptRecord, spend_attempt: bool) -> History {
        History {
            attempt: delivery.attempt + u32::from(spend_attempt),
            deferrals: delivery.deferrals + u32::from(!spend_attempt),
            first_failed_at_ms: Some(delivery.first_failed_at_ms.unwrap_or(failed.at_ms)),
            attempts: delivery.history_with(failed),
        }
    }

    /// Carry this history into `delivery`.
    pub fn apply_to(&self, delivery: &mut Delivery) {
        delivery.attempt = self.attempt;
        delivery.deferrals = self.deferrals;
        delivery.first_failed_at_ms = self.first_failed_at_ms;
        delivery.history = self.attempts.clone();
    }
}

/// The bucket.
#[derive(Clone)]
pub(crate) struct Histories(pub(crate) kv::Store);

impl Histories {
    /// The history under `key`, if any. A value that does not decode is treated as none
    /// (logged): the message then counts its attempts afresh rather than being stuck.
    pub(crate) async fn get(&self, key: &str) -> anyhow::Result<Option<History>> {
        let Some(bytes) = self.0.get(key).await? else {
            return Ok(None);
        };
        match rmp_serde::from_slice(&bytes) {
            Ok(history) => Ok(Some(history)),
            Err(e) => {
                tracing::warn!(key, error = %e, "nats source: an attempt history does not decode; ignoring it");
                Ok(None)
            }
        }
    }

    pub(crate) async fn put(&self, key: &str, history: &History) -> anyhow::Result<()> {
        let bytes = rmp_serde::to_vec_named(history)?;
        self.0.put(key, bytes.into()).await?;
        Ok(())
    }

    pub(crate) async fn forget(&self, key: &str) -> anyhow::Result<()> {
        self.0.purge(key).await?;
        Ok(())
    }
}
