//! A failed delivery as the host holds it, and its JSON form.
//!
//! The small facts live in the contract's `failure` record, passed to the policy as is; the
//! bulky parts sit behind an `Arc` that the policy's store borrows for the call, so deciding
//! copies nothing the policy does not ask for.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::wit::types as wit;
use verdict_types::{AttemptRecord, jitter_seed};

/// The parts of a failure a policy fetches on demand.
#[derive(Debug, Default)]
pub(crate) struct Details {
    pub(crate) topic: String,
    pub(crate) message_id: String,
    pub(crate) consumer_group: String,
    pub(crate) error_message: String,
    pub(crate) content_type: Option<String>,
    pub(crate) published_at_ms: Option<u64>,
    /// When the first delivery failed: on demand since contract 0.2 (few policies read
    /// it), in the record under 0.1.
    pub(crate) first_failed_at_ms: u64,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) payload: Vec<u8>,
    pub(crate) history: Vec<AttemptRecord>,
    pub(crate) extensions: BTreeMap<String, String>,
}

/// One failed delivery, ready to be decided. Build it from a [`FailureSpec`].
#[derive(Debug, Clone)]
pub struct Failure {
    pub(crate) record: wit::Failure,
    pub(crate) details: Arc<Details>,
}

impl Failure {
    /// The record as the 0.1 contract spells it (the same fields, its own generated type).
    pub(crate) fn record_v0_1(&self) -> crate::wit::v0_1::types::Failure {
        use crate::wit::v0_1::types as v0_1;
        let r = &self.record;
        v0_1::Failure {
            attempt: r.attempt,
            deferrals: r.deferrals,
            first_failed_at_ms: self.details.first_failed_at_ms,
            now_ms: r.now_ms,
            deadline_ms: r.deadline_ms,
            error: v0_1::ErrorInfo {
                kind: r.error.kind.clone(),
                retry_after_ms: r.error.retry_after_ms,
                rejected: r.error.rejected,
            },
            jitter_seed: r.jitter_seed,
            stats: v0_1::TopicStats {
                window_ms: r.stats.window_ms,
                deliveries: r.stats.deliveries,
                failures: r.stats.failures,
                consecutive_failures: r.stats.consecutive_failures,
            },
        }
    }

    /// 1-based count of failed deliveries, this one included.
    pub fn attempt(&self) -> u32 {
        self.record.attempt
    }
    /// Delays already granted to this message.
    pub fn deferrals(&self) -> u32 {
        self.record.deferrals
    }
    /// Failures of the topic in a row, this one included.
    pub fn consecutive_failures(&self) -> u32 {
        self.record.stats.consecutive_failures
    }
    /// The error kind.
    pub fn kind(&self) -> &str {
        &self.record.error.kind
    }
    /// The jitter seed.
    pub fn jitter_seed(&self) -> u64 {
        self.record.jitter_seed
    }
    /// The topic.
    pub fn topic(&self) -> &str {
        &self.details.topic
    }
    /// The message id.
    pub fn message_id(&self) -> &str {
        &self.details.message_id
    }
    /// Milliseconds since the message was published (or first failed), by the failure's clock.
    pub fn age_ms(&self) -> u64 {
        let since = self
            .details
            .published_at_ms
            .unwrap_or(self.details.first_failed_at_ms);
        self.record.now_ms.saturating_sub(since)
    }

    /// The same failure with `payload` as its body, byte for byte (a binary body reaches the
    /// policy unaltered, and `payload-size` is its length).
    pub fn with_payload(mut self, payload: Vec<u8>) -> Failure {
        match Arc::get_mut(&mut self.details) {
            Some(details) => details.payload = payload,
            None => {
                let d = &self.details;
                self.details = Arc::new(Details {
                    topic: d.topic.clone(),
                    message_id: d.message_id.clone(),
                    consumer_group: d.consumer_group.clone(),
                    error_message: d.error_message.clone(),
                    content_type: d.content_type.clone(),
                    published_at_ms: d.published_at_ms,
                    first_failed_at_ms: d.first_failed_at_ms,
                    headers: d.headers.clone(),
                    payload,
                    history: d.history.clone(),
                    extensions: d.extensions.clone(),
                });
            }
        }
        self
    }
}

/// The JSON form of a failure, with the contract's field names. Everything but
/// `error.kind` is optional: omitted fields take neutral defaults (attempt 1, clock 0,
/// empty payload), and the jitter seed is derived from the message id and attempt.
///
/// ```
/// use verdict_runtime::FailureSpec;
///
/// let spec: FailureSpec = serde_json::from_str(r#"{
///     "topic": "payments", "message-id": "m-1", "attempt": 2,
///     "error": {"kind": "db.timeout", "message": "dial tcp: i/o timeout"},
///     "payload": {"amount": 12}
/// }"#)?;
/// let failure = spec.into_failure();
/// assert_eq!(failure.attempt(), 2);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FailureSpec {
    /// Topic the message was published to.
    #[serde(default)]
    pub topic: String,
    /// The message id.
    #[serde(default)]
    pub message_id: String,
    /// The consumer group.
    #[serde(default)]
    pub consumer_group: String,
    /// 1-based failed deliveries, this one included (default 1).
    #[serde(default = "one")]
    pub attempt: u32,
    /// Delays already granted.
    #[serde(default)]
    pub deferrals: u32,
    /// First failure, ms since the epoch.
    #[serde(default)]
    pub first_failed_at_ms: u64,
    /// The clock for the decision; defaults to `first-failed-at-ms`.
    #[serde(default)]
    pub now_ms: Option<u64>,
    /// Publication time.
    #[serde(default)]
    pub published_at_ms: Option<u64>,
    /// Deadline (TTL).
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// The error of this delivery.
    pub error: ErrorSpec,
    /// Earlier failed attempts, oldest first.
    #[serde(default)]
    pub history: Vec<AttemptRecord>,
    /// Headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Payload: a JSON string is taken as UTF-8 text, any other JSON value as its compact
    /// JSON encoding.
    #[serde(default)]
    pub payload: Option<serde_json::Value>,
    /// Payload content type.
    #[serde(default)]
    pub content_type: Option<String>,
    /// Jitter seed; derived from message id and attempt when omitted.
    #[serde(default)]
    pub jitter_seed: Option<u64>,
    /// Topic statistics.
    #[serde(default)]
    pub stats: StatsSpec,
    /// Facts for `host.extension`.
    #[serde(default)]
    pub extensions: BTreeMap<String, String>,
}

fn one() -> u32 {
    1
}

/// The error of a delivery.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ErrorSpec {
    /// Machine-readable kind, e.g. `db.timeout`.
    pub kind: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// `Retry-After` hint in ms.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    /// Explicit reject by the consumer.
    #[serde(default)]
    pub rejected: bool,
}

/// Topic statistics over a recent window.
#[derive(Debug, Clone, Copy, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StatsSpec {
    /// Window length.
    #[serde(default)]
    pub window_ms: u64,
    /// Deliveries in the window.
    #[serde(default)]
    pub deliveries: u32,
    /// Failures in the window.
    #[serde(default)]
    pub failures: u32,
    /// Failures in a row.
    #[serde(default)]
    pub consecutive_failures: u32,
}

impl FailureSpec {
    /// Parse JSON, naming the offending field on error (e.g. `error.kind: missing field`).
    pub fn from_json(json: &str) -> Result<Self, String> {
        let mut de = serde_json::Deserializer::from_str(json);
        let located = |path: String, message: String| match path.as_str() {
            "." => message,
            _ => format!("{path}: {message}"),
        };
        let spec: FailureSpec = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| located(e.path().to_string(), e.inner().to_string()))?;
        de.end().map_err(|e| e.to_string())?;
        Ok(spec)
    }

    /// Freeze into a [`Failure`].
    pub fn into_failure(self) -> Failure {
        let payload = match self.payload {
            None => Vec::new(),
            Some(serde_json::Value::String(s)) => s.into_bytes(),
            Some(other) => other.to_string().into_bytes(),
        };
        let jitter_seed = self
            .jitter_seed
            .unwrap_or_else(|| jitter_seed(&self.message_id, self.attempt));
        let record = wit::Failure {
            attempt: self.attempt,
            deferrals: self.deferrals,
            now_ms: self.now_ms.unwrap_or(self.first_failed_at_ms),
            deadline_ms: self.deadline_ms,
            error: wit::ErrorInfo {
                kind: self.error.kind,
                retry_after_ms: self.error.retry_after_ms,
                rejected: self.error.rejected,
            },
            jitter_seed,
            stats: wit::TopicStats {
                window_ms: self.stats.window_ms,
                deliveries: self.stats.deliveries,
                failures: self.stats.failures,
                consecutive_failures: self.stats.consecutive_failures,
            },
        };
        let details = Details {
            topic: self.topic,
            message_id: self.message_id,
            consumer_group: self.consumer_group,
            error_message: self.error.message,
            content_type: self.content_type,
            published_at_ms: self.published_at_ms,
            first_failed_at_ms: self.first_failed_at_ms,
            headers: self.headers.into_iter().collect(),
            payload,
            history: self.history,
            extensions: self.extensions,
        };
        Failure {
            record,
            details: Arc::new(details),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_json_gets_defaults_and_a_stable_seed() {
        let f = FailureSpec::from_json(r#"{"message-id": "m1", "error": {"kind": "db.timeout"}}"#)
            .unwrap()
            .into_failure();
        assert_eq!(f.attempt(), 1);
        assert_eq!(f.jitter_seed(), jitter_seed("m1", 1));
        assert_ne!(jitter_seed("m1", 1), jitter_seed("m1", 2));
        assert_ne!(jitter_seed("m1", 1), jitter_seed("m2", 1));
    }

    #[test]
    fn errors_name_the_field() {
        let e = FailureSpec::from_json(r#"{"error": {}}"#).unwrap_err();
        assert!(e.contains("kind"), "{e}");
        let e = FailureSpec::from_json(r#"{"atempt": 2, "error": {"kind": "x"}}"#).unwrap_err();
        assert!(e.contains("atempt"), "{e}");
        let e =
            FailureSpec::from_json(r#"{"attempt": "two", "error": {"kind": "x"}}"#).unwrap_err();
        assert!(e.starts_with("attempt:"), "{e}");
        let e = FailureSpec::from_json(r#"{"history": [{"at-ms": 1}], "error": {"kind": "x"}}"#)
            .unwrap_err();
        assert!(e.starts_with("history[0]"), "{e}");
    }

    #[test]
    fn payload_text_and_json_values() {
        let f = FailureSpec::from_json(r#"{"error": {"kind": "x"}, "payload": "hi"}"#)
            .unwrap()
            .into_failure();
        assert_eq!(f.details.payload, b"hi");
        let f = FailureSpec::from_json(r#"{"error": {"kind": "x"}, "payload": {"a": 1}}"#)
            .unwrap()
            .into_failure();
        assert_eq!(f.details.payload, br#"{"a":1}"#);
        assert_eq!(f.details.payload.len(), 7);
    }
}
