//! What the store takes and gives back, the same for every backend.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Delivery;

/// A message to publish.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMessage {
    /// Its id; a message whose id is already stored is a duplicate and is not stored again.
    pub id: String,
    /// The topic.
    pub topic: String,
    /// Headers passed to the consumer and kept in the envelope.
    pub headers: BTreeMap<String, String>,
    /// The body.
    pub payload: Vec<u8>,
    /// The body's content type.
    pub content_type: Option<String>,
    /// The key its route orders by (`ordering = "key"`): no message of a key is delivered
    /// while an older one of the same topic and key is unfinished. `None`: unordered.
    #[serde(default)]
    pub key: Option<String>,
}

/// What a publish stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    /// Ids stored.
    pub accepted: Vec<String>,
    /// Ids already stored before (not stored again).
    pub duplicates: Vec<String>,
}

/// A message leased for one delivery.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// Store key.
    pub seq: i64,
    /// The lease this delivery holds: its settlement applies only while the message is
    /// still held by it (a message re-claimed after its lease expired has a new one).
    pub lease: i64,
    /// The message and its history.
    pub delivery: Delivery,
}

/// Which dead letters an operation applies to. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DlqFilter {
    /// One dead letter, by its key (what `list` shows): how a parked one is replayed.
    pub seq: Option<i64>,
    /// Source topic.
    pub topic: Option<String>,
    /// The DLQ's name.
    pub dlq: Option<String>,
    /// The verdict's class.
    pub class: Option<String>,
    /// The last error's kind.
    pub kind: Option<String>,
    /// Only dead letters at least this old (ms).
    pub min_age_ms: Option<u64>,
    /// Only dead letters dead-lettered before this instant (ms since the epoch): a group
    /// action's cut-off, so that letters arriving while it runs (its own replays failing
    /// again among them) stay for the next look.
    pub dead_before_ms: Option<u64>,
    /// Only the dead letters of this group (a group's `id`, as `verdict dlq groups` shows
    /// it). Matched as each page is read, so a page may hold fewer than its `limit` and
    /// still have a next one.
    pub group: Option<String>,
    /// Only dead letters that came back from at most this many replays
    /// ([`DlqEntry::repeats`]): a bulk replay passes one less than `park_after_repeats`,
    /// which leaves the parked ones out.
    pub max_repeats: Option<u32>,
    /// At most this many, oldest first.
    pub limit: Option<usize>,
    /// Only dead letters after this cursor: the `next` of the page before (the admin API's
    /// `x-verdict-next` header). Its form is the source's own; pass it back unchanged.
    pub after: Option<String>,
    /// Whose DLQs (the admin API's `?source=nats`): the embedded store when absent. Sources
    /// ignore it; whoever opens the DLQs reads it.
    pub source: Option<verdict_registry::SourceKind>,
    /// The bytes of letters (as JSON) one page of the admin API holds at most (beside the
    /// one letter a page always holds): `?max_bytes=`. Sources ignore it; the API pages by
    /// it.
    pub max_bytes: Option<usize>,
    /// How a listing shows payloads (`?payloads=full`): by default one past
    /// [`INLINE_PAYLOAD_BYTES`] is summarised ([`DlqEntry::payload_summary`]) and fetched one
    /// letter at a time. Sources ignore it; listings read it.
    pub payloads: Option<PayloadView>,
}

/// The payload bytes a listing shows in full by default; a larger payload is summarised.
pub const INLINE_PAYLOAD_BYTES: usize = 64 << 10;

/// How a listing shows payloads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadView {
    /// Payloads up to [`INLINE_PAYLOAD_BYTES`] in full, larger ones as their size and digest.
    #[default]
    Summary,
    /// Every payload in full (a page still ends at its byte budget).
    Full,
}

/// What a listing shows of a payload it left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadSummary {
    /// The payload's size, as the envelope holds it.
    pub bytes: u64,
    /// The SHA-256 (hex) of those bytes: a JSON payload's as the envelope serialises it
    /// again, which may differ byte for byte from what the producer sent.
    pub sha256: String,
}

/// One dead letter.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DlqEntry {
    /// Its key (what `show`, `replay` and `discard` take).
    pub seq: i64,
    /// The message id.
    pub message_id: String,
    /// Source topic.
    pub topic: String,
    /// The DLQ.
    pub dlq: String,
    /// The verdict's class.
    pub class: String,
    /// The last error's kind.
    pub kind: String,
    /// The verdict's reason.
    pub reason: String,
    /// Attempts made.
    pub attempts: u32,
    /// When it was dead-lettered (ms since the epoch).
    pub created_at_ms: u64,
    /// The envelope, decoded whatever the stored format.
    pub envelope: crate::envelope::Envelope,
    /// How often this message was dead-lettered before, replayed, and failed again. Kept
    /// by the store with the message, so retention pruning its earlier DLQ rows does not
    /// lower it; a broker's DLQ does not keep it and says 0.
    #[serde(default)]
    pub repeats: u32,
    /// Set by a listing that left a large payload out of [`Self::envelope`] (see
    /// [`PayloadView`]): fetch the letter alone (`GET /v1/dlq/{seq}`, `verdict dlq show`)
    /// for all of it. Never set on a letter that is replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_summary: Option<PayloadSummary>,
}

impl DlqEntry {
    /// Leave the payload out of this entry when it takes more than `inline_bytes`, keeping
    /// its size and digest: what a listing shows by default.
    pub fn summarise_payload(&mut self, inline_bytes: usize) {
        let original = &mut self.envelope.original;
        if original.payload.is_none() && original.payload_base64.is_none() {
            return;
        }
        let bytes = original.payload_bytes();
        if bytes.len() <= inline_bytes {
            return;
        }
        original.payload = None;
        original.payload_base64 = None;
        self.payload_summary = Some(PayloadSummary {
            bytes: bytes.len() as u64,
            sha256: verdict_runtime::digest::sha256_hex(&bytes),
        });
    }
}

/// What an operator changed in a dead letter before resubmitting it: each part left `None`
/// stays as it was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repair {
    /// The new body.
    pub payload: Option<Vec<u8>>,
    /// The new body's content type.
    pub content_type: Option<String>,
    /// The new headers (all of them: a header left out is removed).
    pub headers: Option<BTreeMap<String, String>>,
}

impl Repair {
    /// The headers as the store keeps them (JSON), when they change.
    pub(crate) fn headers_json(&self) -> Result<Option<String>, super::StoreError> {
        self.headers
            .as_ref()
            .map(|h| {
                serde_json::to_string(h).map_err(|e| super::StoreError::Corrupt(e.to_string()))
            })
            .transpose()
    }
}

/// One DLQ's depth.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DlqStats {
    /// The DLQ.
    pub dlq: String,
    /// Source topic.
    pub topic: String,
    /// Dead letters waiting.
    pub depth: u64,
    /// The oldest one's time (ms since the epoch; 0 when the DLQ is empty).
    pub oldest_at_ms: u64,
    /// Dead letters ever written to it (replayed and discarded ones too): the ingress.
    pub ingress: u64,
}

/// What one pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Delivered or discarded messages.
    pub messages: u64,
    /// Audit records.
    pub audit: u64,
    /// Replayed or discarded DLQ entries.
    pub dlq: u64,
}

impl Pruned {
    /// Rows deleted in all.
    pub fn total(&self) -> u64 {
        self.messages + self.audit + self.dlq
    }
}

/// Messages by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StateCounts {
    /// Waiting for delivery.
    pub ready: u64,
    /// Waiting for a retry or delay to fall due.
    pub scheduled: u64,
    /// Being delivered.
    pub leased: u64,
    /// Delivered (the consumer answered 2xx).
    pub delivered: u64,
    /// Dead-lettered (and not replayed since).
    pub dead: u64,
    /// Discarded on a policy's word or an operator's.
    pub discarded: u64,
}

impl StateCounts {
    /// Set the count of the state a store row names; an unknown state is corruption.
    pub(crate) fn set(&mut self, state: &str, n: u64) -> Result<(), super::StoreError> {
        let slot = match state {
            "ready" => &mut self.ready,
            "scheduled" => &mut self.scheduled,
            "leased" => &mut self.leased,
            "delivered" => &mut self.delivered,
            "dead" => &mut self.dead,
            "discarded" => &mut self.discarded,
            other => {
                return Err(super::StoreError::Corrupt(format!(
                    "unknown state `{}`",
                    verdict_runtime::text::one_line(other, 32)
                )));
            }
        };
        *slot = n;
        Ok(())
    }

    /// Every message the store holds.
    pub fn total(&self) -> u64 {
        self.ready + self.scheduled + self.leased + self.delivered + self.dead + self.discarded
    }

    /// Messages not yet in a final state.
    pub fn pending(&self) -> u64 {
        self.ready + self.scheduled + self.leased
    }
}
