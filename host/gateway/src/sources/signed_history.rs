//! The attempt history a broker message carries between deliveries. On a broker a retry is
//! a new copy of the message (in a delay queue, a retry topic), so its attempts, deferrals,
//! first failure and history must ride along in its headers: `x-verdict-attempt`,
//! `x-verdict-deferrals`, `x-verdict-first-failed-at-ms`, `x-verdict-published-at-ms`,
//! `x-verdict-history` (JSON), replaced - never appended - at every hop.
//!
//! The history is signed: `x-verdict-signature` is an HMAC-SHA256 of the topic, the message
//! id and every history field, keyed by the gateway group's history key. A producer cannot
//! lower a message's attempts or forge its history: headers without a valid signature are
//! not trusted, and never passed on to the consumer.
//!
//! Every gateway consuming the same topics must share one key (the source's
//! `history_key_file`). A copy also names the key that signed it (`x-verdict-key-id`, a
//! fingerprint, not the key): one signed by *another* key - a gateway set up with its own -
//! is a misconfiguration the source reports (log, `verdict_history_key_mismatches_total`,
//! `/readyz`), and its attempts are still counted: taken from its headers, never fewer than
//! they say. Counting more attempts than were made can only end a message's retries
//! sooner, so no forged header can make a message loop; resetting them to zero would let
//! two gateways with different keys retry a message forever.
//!
//! Each broker encodes the fields in its own header types (AMQP integers, Kafka bytes);
//! what they mean, how they are signed and how a consumed copy is trusted is here, once.

use crate::health::Readiness;
use crate::model::{AttemptRecord, Delivery};
use crate::pipeline::Pipeline;

/// Header names, the same on every broker.
pub(crate) const ATTEMPT: &str = "x-verdict-attempt";
pub(crate) const DEFERRALS: &str = "x-verdict-deferrals";
pub(crate) const FIRST_FAILED: &str = "x-verdict-first-failed-at-ms";
pub(crate) const PUBLISHED: &str = "x-verdict-published-at-ms";
pub(crate) const HISTORY: &str = "x-verdict-history";
pub(crate) const SIGNATURE: &str = "x-verdict-signature";
pub(crate) const KEY_ID: &str = "x-verdict-key-id";
/// Every header of ours starts with it: none is passed on to a consumer.
pub(crate) const PREFIX: &str = "x-verdict-";

/// The key that signs and checks history headers; every gateway consuming the same queues
/// must have the same one.
#[derive(Clone)]
pub struct HistoryKey(Vec<u8>);

impl std::fmt::Debug for HistoryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HistoryKey(..)")
    }
}

impl HistoryKey {
    /// A key of these bytes.
    pub fn new(bytes: Vec<u8>) -> HistoryKey {
        HistoryKey(bytes)
    }

    fn mac(&self, fields: &SignedHistory) -> hmac::Hmac<sha2::Sha256> {
        use hmac::Mac as _;
        let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        // Length-prefixed fields: no two field lists sign alike. The queue binds a copy to
        // the queue it was made for; the first failure's presence is signed apart from its
        // value.
        let first_failed = match fields.first_failed {
            Some(at) => [&[1_u8][..], &at.to_be_bytes()].concat(),
            None => vec![0_u8],
        };
        for field in [
            fields.queue.as_bytes(),
            fields.id.as_bytes(),
            &fields.attempt.to_be_bytes(),
            &fields.deferrals.to_be_bytes(),
            &first_failed,
            &fields.published.to_be_bytes(),
            fields.history.as_bytes(),
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
        mac
    }

    /// The key's fingerprint, as copies name it: 16 hex digits of a SHA-256 of the key
    /// (it tells keys apart and reveals nothing of them).
    pub fn id(&self) -> String {
        use sha2::Digest as _;
        let digest = sha2::Sha256::new()
            .chain_update(b"verdict history key id\0")
            .chain_update(&self.0)
            .finalize();
        hex(&digest[..8])
    }

    pub(crate) fn sign(&self, fields: &SignedHistory) -> String {
        use hmac::Mac as _;
        hex(&self.mac(fields).finalize().into_bytes())
    }

    pub(crate) fn verify(&self, fields: &SignedHistory, signature: &str) -> bool {
        use hmac::Mac as _;
        let Some(bytes) = unhex(signature) else {
            return false;
        };
        self.mac(fields).verify_slice(&bytes).is_ok()
    }
}

/// What the signature covers: the topic a copy was made for (so a copy cannot be moved to
/// another route), the message id and the counts and history.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SignedHistory {
    pub(crate) queue: String,
    pub(crate) id: String,
    pub(crate) attempt: u64,
    pub(crate) deferrals: u64,
    pub(crate) first_failed: Option<u64>,
    pub(crate) published: u64,
    pub(crate) history: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// The most history entries a message carries (the oldest are dropped past it): a header
/// table has to fit the broker's frame, and a policy needs the recent attempts.
pub(crate) const MAX_HISTORY: usize = 100;

/// How a consumed copy's history headers were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryCheck {
    /// No signed history: a first delivery (or a producer's own `x-verdict-*` headers,
    /// which count for nothing).
    Unsigned,
    /// Signed with this gateway's key.
    Verified,
    /// Signed with another gateway's key (its id): counted from its headers, unverified.
    ForeignKey(String),
}

/// A copy on `source` signed by another gateway's key (`theirs`): gateways reading the
/// same queues or topics do not share one (`setting` names where it is set). Counted
/// (`verdict_history_key_mismatches_total`), shown by `/readyz`, logged once a minute.
pub(crate) fn report_foreign_key(
    pipeline: &Pipeline,
    ready: &Readiness,
    source: &'static str,
    setting: &str,
    ours: &HistoryKey,
    theirs: &str,
) {
    pipeline.metrics().history_key_mismatch(source);
    let ours = ours.id();
    let text = format!(
        "retried copies are signed with another gateway's history key (key id {theirs}, \
         this gateway's {ours}): every gateway on these {source} routes must use the same \
         {setting}; attempts are counted from the copies' headers, unverified"
    );
    if ready.warn(text.clone()) {
        tracing::warn!(source, theirs = %theirs, ours = %ours, "{text}");
    }
}

/// `delivery` made its next attempt in place, without a copy (a Kafka partition that waits
/// out the delay): the same steps as [`SignedHistory::next`].
pub(crate) fn advance(delivery: &mut Delivery, failed: Option<(&AttemptRecord, bool)>) {
    let mut counts = (
        delivery.attempts_spent,
        delivery.deferrals,
        delivery.first_failed_at_ms,
    );
    step(&mut counts, &mut delivery.history, failed);
    (
        delivery.attempts_spent,
        delivery.deferrals,
        delivery.first_failed_at_ms,
    ) = counts;
}

/// With `failed`, add it to `history` (a retry spends an attempt, a delay a deferral) and
/// drop the oldest entries past [`MAX_HISTORY`].
fn step(
    (attempt, deferrals, first_failed): &mut (u32, u32, Option<u64>),
    history: &mut Vec<AttemptRecord>,
    failed: Option<(&AttemptRecord, bool)>,
) {
    if let Some((failed, spend_attempt)) = failed {
        if spend_attempt {
            *attempt = attempt.saturating_add(1);
        } else {
            *deferrals = deferrals.saturating_add(1);
        }
        first_failed.get_or_insert(failed.at_ms);
        history.push(failed.clone());
    }
    if history.len() > MAX_HISTORY {
        history.drain(..history.len() - MAX_HISTORY);
    }
}

impl SignedHistory {
    /// What the copy carrying `delivery` to its next attempt signs; with `failed`, that
    /// failure is added to the history (a retry spends an attempt, a delay a deferral), the
    /// oldest entries dropped past [`MAX_HISTORY`].
    pub(crate) fn next(
        delivery: &Delivery,
        failed: Option<(&AttemptRecord, bool)>,
    ) -> SignedHistory {
        let mut counts = (
            delivery.attempts_spent,
            delivery.deferrals,
            delivery.first_failed_at_ms,
        );
        let mut history: Vec<AttemptRecord> = delivery.history.clone();
        step(&mut counts, &mut history, failed);
        let (attempt, deferrals, first_failed) = counts;
        SignedHistory {
            queue: delivery.topic.clone(),
            id: delivery.id.clone(),
            attempt: attempt.into(),
            deferrals: deferrals.into(),
            first_failed,
            published: delivery.published_at_ms,
            history: serde_json::to_string(&history).unwrap_or_else(|_| "[]".into()),
        }
    }

    /// Take what a consumed copy's headers said into `delivery` when they can be trusted:
    /// signed by `key`, or signed by another key (`key_id`), whose counts are taken as they
    /// are (never fewer attempts than it says) and whose history is bounded like any outside
    /// text. Unsigned headers leave `delivery` at attempt 0. `has_published`: whether the
    /// copy carried a publish time (otherwise the broker's stays).
    pub(crate) fn read_into(
        self,
        signature: Option<&str>,
        key_id: Option<String>,
        has_published: bool,
        key: &HistoryKey,
        delivery: &mut Delivery,
    ) -> HistoryCheck {
        let check = match (signature, key_id) {
            (Some(s), _) if key.verify(&self, s) => HistoryCheck::Verified,
            (Some(_), Some(id)) if id != key.id() => {
                HistoryCheck::ForeignKey(verdict_runtime::text::one_line(&id, 32))
            }
            _ => return HistoryCheck::Unsigned,
        };
        delivery.attempts_spent = u32::try_from(self.attempt).unwrap_or(u32::MAX);
        delivery.deferrals = u32::try_from(self.deferrals).unwrap_or(u32::MAX);
        delivery.first_failed_at_ms = self.first_failed;
        if has_published {
            delivery.published_at_ms = self.published;
        }
        let history: Vec<AttemptRecord> = serde_json::from_str(&self.history).unwrap_or_default();
        delivery.history = match check {
            HistoryCheck::Verified => history,
            // Unverified text: bounded and made one clean line like any outside string.
            _ => history
                .into_iter()
                .rev()
                .take(MAX_HISTORY)
                .rev()
                .map(|a| AttemptRecord {
                    at_ms: a.at_ms,
                    kind: verdict_runtime::text::one_line(&a.kind, 128),
                    message: verdict_runtime::text::one_line(
                        &a.message,
                        verdict_runtime::text::MAX_MESSAGE_BYTES,
                    ),
                })
                .collect(),
        };
        check
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(at_ms: u64) -> AttemptRecord {
        AttemptRecord {
            at_ms,
            kind: "http.503".into(),
            message: "busy".into(),
        }
    }

    #[test]
    fn a_retry_spends_an_attempt_a_delay_a_deferral_and_history_is_bounded() {
        let mut delivery = Delivery {
            id: "m".into(),
            topic: "orders".into(),
            ..Delivery::default()
        };
        delivery.history = (0..MAX_HISTORY as u64).map(failure).collect();
        let retry = SignedHistory::next(&delivery, Some((&failure(500), true)));
        assert_eq!((retry.attempt, retry.deferrals), (1, 0));
        assert_eq!(retry.first_failed, Some(500));
        let history: Vec<AttemptRecord> = serde_json::from_str(&retry.history).unwrap();
        assert_eq!(history.len(), MAX_HISTORY, "the oldest entry dropped");
        assert_eq!(history.last().unwrap().at_ms, 500);
        let delay = SignedHistory::next(&delivery, Some((&failure(600), false)));
        assert_eq!((delay.attempt, delay.deferrals), (0, 1));
    }

    #[test]
    fn a_delivery_advanced_in_place_counts_as_its_copy_would() {
        let mut delivery = Delivery {
            id: "m".into(),
            topic: "orders".into(),
            ..Delivery::default()
        };
        delivery.history = (0..MAX_HISTORY as u64).map(failure).collect();
        let copy = SignedHistory::next(&delivery, Some((&failure(500), true)));
        advance(&mut delivery, Some((&failure(500), true)));
        advance(&mut delivery, Some((&failure(600), false)));
        advance(&mut delivery, None);
        assert_eq!((delivery.attempts_spent, delivery.deferrals), (1, 1));
        assert_eq!(u64::from(delivery.attempts_spent), copy.attempt);
        assert_eq!(delivery.first_failed_at_ms, Some(500));
        assert_eq!(delivery.history.len(), MAX_HISTORY, "bounded like a copy's");
        assert_eq!(delivery.history.last().unwrap().at_ms, 600);
    }

    #[test]
    fn only_a_signature_makes_headers_count() {
        let key = HistoryKey::new(b"ours".to_vec());
        let theirs = HistoryKey::new(b"theirs".to_vec());
        let delivery = Delivery {
            id: "m".into(),
            topic: "orders".into(),
            ..Delivery::default()
        };
        let signed = SignedHistory::next(&delivery, Some((&failure(1), true)));
        let read = |signature: Option<&str>, key_id: Option<String>| {
            let mut d = delivery.clone();
            let check = signed
                .clone()
                .read_into(signature, key_id, true, &key, &mut d);
            (check, d.attempts_spent)
        };
        assert_eq!(
            read(Some(&key.sign(&signed)), None),
            (HistoryCheck::Verified, 1)
        );
        assert_eq!(read(Some("00"), None), (HistoryCheck::Unsigned, 0));
        assert_eq!(read(None, Some(theirs.id())), (HistoryCheck::Unsigned, 0));
        assert_eq!(
            read(Some(&theirs.sign(&signed)), Some(theirs.id())),
            (HistoryCheck::ForeignKey(theirs.id()), 1),
            "another group's key: counted, never reset"
        );
        // Moved to another topic, a copy's signature no longer holds.
        let moved = SignedHistory {
            queue: "payments".into(),
            ..signed.clone()
        };
        assert!(!key.verify(&moved, &key.sign(&signed)));
    }
}
