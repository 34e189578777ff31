//! What a DLQ must offer the tools, and the embedded store's answer.

use std::collections::BTreeMap;

use crate::pipeline::now_ms;
use crate::sources::letter_headers;
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

/// A broker dead letter read back: `header` looks up the [`letter_headers`] its source wrote,
/// `body` is the envelope; `seq` and `dlq` say where it sits.
pub(crate) fn entry_from_headers(
    seq: i64,
    dlq: String,
    header: impl Fn(&str) -> String,
    body: &[u8],
) -> Result<DlqEntry, String> {
    use letter_headers::*;
    let envelope = crate::envelope::decode(&header(FORMAT), body)
        .map_err(|e| format!("{dlq}: dead letter {seq}: {e}"))?;
    Ok(DlqEntry {
        seq,
        message_id: header(MESSAGE_ID),
        topic: header(TOPIC),
        dlq,
        class: header(CLASS),
        kind: header(KIND),
        reason: header(REASON),
        attempts: header(ATTEMPTS).parse().unwrap_or(0),
        created_at_ms: header(AT_MS).parse().unwrap_or(0),
        envelope,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{AttemptRecord, DeadLetter, Delivery};

    #[test]
    fn what_a_broker_source_writes_the_dlq_tools_read_back() {
        let delivery = Delivery {
            id: "m-7".into(),
            topic: "orders".into(),
            attempt: 2,
            ..Delivery::default()
        };
        let failed = AttemptRecord {
            at_ms: 1_234,
            kind: "http.503".into(),
            message: "busy".into(),
        };
        let letter = DeadLetter {
            dlq: "orders.DLQ".into(),
            class: "exhausted".into(),
            reason: "3 attempts\nspent".into(),
            format: "json",
            envelope: br#"{"original": {"id": "m-7"}}"#.to_vec(),
        };
        let headers: BTreeMap<&str, String> =
            letter.headers(&delivery, &failed).into_iter().collect();
        let header = |name: &str| headers.get(name).cloned().unwrap_or_default();
        let e = entry_from_headers(4, "orders.DLQ".into(), header, &letter.envelope).unwrap();
        assert_eq!(
            (
                e.message_id.as_str(),
                e.topic.as_str(),
                e.class.as_str(),
                e.kind.as_str()
            ),
            ("m-7", "orders", "exhausted", "http.503")
        );
        assert_eq!((e.attempts, e.created_at_ms, e.seq), (3, 1_234, 4));
        assert_eq!(e.reason, "3 attempts spent", "header values are one line");
        assert_eq!(e.envelope["original"]["id"], "m-7");
        let bad = entry_from_headers(5, "orders.DLQ".into(), |_| "json".into(), b"{not json");
        assert!(bad.unwrap_err().contains("orders.DLQ: dead letter 5"));
    }
}
