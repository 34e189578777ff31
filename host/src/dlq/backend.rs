//! What a DLQ must offer the tools, and the embedded store's answer.

use std::collections::BTreeMap;

use crate::pipeline::now_ms;
use crate::store::{DlqEntry, DlqFilter, DlqStats, Store, StoreError};

/// The header a replayed message carries (the replay's token): the gateway writes a
/// `replay-delivered` audit record when such a message is delivered, which is how a broker
/// canary learns that its messages arrived.
pub const REPLAY_HEADER: &str = "verdict-replay";

/// Why a DLQ operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    /// The embedded store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The broker failed or answered something unexpected.
    #[error("{source_name}: {message}")]
    Broker {
        /// `nats` or `rabbitmq`.
        source_name: &'static str,
        /// What went wrong.
        message: String,
    },
}

impl DlqError {
    pub(crate) fn broker(source_name: &'static str, e: impl std::fmt::Display) -> DlqError {
        DlqError::Broker {
            source_name,
            message: e.to_string(),
        }
    }
}

/// How a canary's messages fared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CanaryProgress {
    /// Delivered so far.
    pub delivered: usize,
    /// At least one was dead-lettered or discarded again.
    pub failed: bool,
}

/// A set of dead-letter queues the tools can work on.
pub trait DeadLetters {
    /// Dead letters matching `filter`, oldest first.
    fn list(&self, filter: &DlqFilter, now_ms: u64) -> Result<Vec<DlqEntry>, DlqError>;

    /// Depth and oldest entry per DLQ.
    fn stats(&self) -> Result<Vec<DlqStats>, DlqError>;

    /// Put `entries` back for delivery with their attempts reset, audited with `note`, each
    /// marked with `token`; returns the message ids replayed (entries gone meanwhile are
    /// skipped).
    fn replay(
        &self,
        entries: &[DlqEntry],
        note: &str,
        token: &str,
    ) -> Result<Vec<String>, DlqError>;

    /// Discard `entries` for good, audited with `reason`; returns how many.
    fn discard(&self, entries: &[DlqEntry], reason: &str) -> Result<u64, DlqError>;

    /// How the messages `ids`, replayed with `token`, fared since.
    fn outcome(&self, ids: &[String], token: &str) -> Result<CanaryProgress, DlqError>;
}

/// Whether `entry` passes `filter` (all but `limit`), for DLQs filtered in memory.
pub fn matches(filter: &DlqFilter, entry: &DlqEntry, now_ms: u64) -> bool {
    let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    is(&filter.topic, &entry.topic)
        && is(&filter.dlq, &entry.dlq)
        && is(&filter.class, &entry.class)
        && is(&filter.kind, &entry.kind)
        && filter
            .min_age_ms
            .is_none_or(|age| now_ms.saturating_sub(entry.created_at_ms) >= age)
}

/// Whether any of `ids`, replayed with `token`, is back among `entries` (the DLQ read whole):
/// a failed canary.
pub(crate) fn back_again(entries: &[DlqEntry], ids: &[String], token: &str) -> bool {
    entries.iter().any(|e| {
        e.envelope["original"]["headers"][REPLAY_HEADER] == token && ids.contains(&e.message_id)
    })
}

/// Filter, order (oldest first) and limit a DLQ read whole.
pub(crate) fn select(mut entries: Vec<DlqEntry>, filter: &DlqFilter, now_ms: u64) -> Vec<DlqEntry> {
    entries.retain(|e| matches(filter, e, now_ms));
    entries.sort_by_key(|e| (e.created_at_ms, e.seq));
    if let Some(limit) = filter.limit {
        entries.truncate(limit);
    }
    entries
}

/// Depth and oldest entry per (DLQ, topic) of a DLQ read whole; a broker counts no ingress
/// beyond what it holds.
pub(crate) fn stats_of(entries: &[DlqEntry]) -> Vec<DlqStats> {
    let mut by: BTreeMap<(String, String), DlqStats> = BTreeMap::new();
    for e in entries {
        let s = by
            .entry((e.dlq.clone(), e.topic.clone()))
            .or_insert_with(|| DlqStats {
                dlq: e.dlq.clone(),
                topic: e.topic.clone(),
                depth: 0,
                oldest_at_ms: e.created_at_ms,
                ingress: 0,
            });
        s.depth += 1;
        s.ingress += 1;
        s.oldest_at_ms = s.oldest_at_ms.min(e.created_at_ms);
    }
    by.into_values().collect()
}

impl DeadLetters for Store {
    fn list(&self, filter: &DlqFilter, now_ms: u64) -> Result<Vec<DlqEntry>, DlqError> {
        Ok(self.dlq_list(filter, now_ms)?)
    }

    fn stats(&self) -> Result<Vec<DlqStats>, DlqError> {
        Ok(self.dlq_stats()?)
    }

    fn replay(
        &self,
        entries: &[DlqEntry],
        note: &str,
        _token: &str,
    ) -> Result<Vec<String>, DlqError> {
        let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
        Ok(self.dlq_replay(&seqs, now_ms(), note)?)
    }

    fn discard(&self, entries: &[DlqEntry], reason: &str) -> Result<u64, DlqError> {
        let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
        Ok(self.dlq_discard(&seqs, now_ms(), reason)?)
    }

    fn outcome(&self, ids: &[String], _token: &str) -> Result<CanaryProgress, DlqError> {
        let mut progress = CanaryProgress::default();
        for id in ids {
            match self.state_of(id)?.as_deref() {
                Some("delivered") => progress.delivered += 1,
                Some("dead" | "discarded") => progress.failed = true,
                _ => {}
            }
        }
        Ok(progress)
    }
}
