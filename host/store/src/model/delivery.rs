//! A delivery: one message as a source hands it to the pipeline, with what the gateway
//! recorded of its earlier attempts.

use std::collections::BTreeMap;

use verdict_runtime::AttemptRecord;

/// One delivery of one message, as any source hands it to the pipeline.
#[derive(Debug, Clone, Default)]
pub struct Delivery {
    /// Message id.
    pub id: String,
    /// Topic (NATS subject, RabbitMQ queue).
    pub topic: String,
    /// Headers passed to the consumer.
    pub headers: BTreeMap<String, String>,
    /// Body.
    pub payload: Vec<u8>,
    /// Content type.
    pub content_type: Option<String>,
    /// Attempts spent so far: failed deliveries that were retried (0 on the first delivery).
    /// The policy sees `attempts_spent + 1`, the number of the delivery that failed, as
    /// `attempt`; both count from the message's first delivery.
    pub attempts_spent: u32,
    /// Delays granted so far.
    pub deferrals: u32,
    /// Publication time.
    pub published_at_ms: u64,
    /// First failure, if any.
    pub first_failed_at_ms: Option<u64>,
    /// Earlier failed attempts, oldest first.
    pub history: Vec<AttemptRecord>,
    /// Delivered before without an outcome recorded: the consumer may have seen it.
    pub redelivery: bool,
    /// A keyed message whose key's previous message (in publish order) is a dead letter: on
    /// a route with `on_dead_letter = "dead-letter-key"` it follows that letter to the DLQ
    /// undelivered. Only the embedded source's stores know it; `false` elsewhere.
    pub after_dead_letter: bool,
    /// The source's name (`embedded`, `nats`, `rabbitmq`), for policies' `source` extension.
    pub source: &'static str,
}

/// The header naming a message's deadline, in ms since the Unix epoch: a policy sees it as
/// `deadline-ms` (`is_expired`, `time_left_ms`). The brokers' own TTLs (RabbitMQ's
/// `expiration`, NATS's `Nats-TTL`) are turned into it when a message arrives.
pub const DEADLINE_HEADER: &str = "x-message-deadline-ms";
/// The header naming a message's time to live, in ms after its publication (used when
/// [`DEADLINE_HEADER`] is absent).
pub const TTL_HEADER: &str = "x-message-ttl-ms";

impl Delivery {
    /// The message's deadline (ms since the Unix epoch), from [`DEADLINE_HEADER`] or
    /// [`TTL_HEADER`] (case-insensitive); an unparsable value counts as none.
    pub fn deadline_ms(&self) -> Option<u64> {
        let header = |name: &str| {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        };
        header(DEADLINE_HEADER)
            .or_else(|| header(TTL_HEADER).map(|ttl| self.published_at_ms.saturating_add(ttl)))
    }
}

impl Delivery {
    /// The history after `failed`, oldest first.
    pub fn history_with(&self, failed: &AttemptRecord) -> Vec<AttemptRecord> {
        let mut history = self.history.clone();
        history.push(failed.clone());
        history
    }
}

/// The header a replayed message carries (the replay's token): the gateway writes a
/// `replay-delivered` audit record when such a message is delivered, which is how a broker
/// canary learns that its messages arrived.
pub const REPLAY_HEADER: &str = "verdict-replay";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_comes_from_its_header_or_a_ttl_after_publication() {
        let with = |headers: &[(&str, &str)]| Delivery {
            published_at_ms: 1_000,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Delivery::default()
        };
        assert_eq!(with(&[]).deadline_ms(), None);
        assert_eq!(
            with(&[("X-Message-Deadline-Ms", "5000")]).deadline_ms(),
            Some(5_000)
        );
        assert_eq!(
            with(&[("x-message-ttl-ms", "250")]).deadline_ms(),
            Some(1_250)
        );
        assert_eq!(
            with(&[("x-message-deadline-ms", "7"), ("x-message-ttl-ms", "250")]).deadline_ms(),
            Some(7),
            "an explicit deadline wins"
        );
        assert_eq!(
            with(&[("x-message-deadline-ms", "soon")]).deadline_ms(),
            None
        );
        assert_eq!(
            with(&[("x-message-ttl-ms", "18446744073709551615")]).deadline_ms(),
            Some(u64::MAX)
        );
    }
}
