//! A failed delivery as the policy sees it, built from the gateway's own records.
//!
//! Everything here comes from the [`Delivery`] the source read and the consumer's answer,
//! both already bounded and cleaned; the attempt count and history are the gateway's (the
//! source's records, never a producer header), which is what keeps a poison message from
//! looping.

use verdict_registry::GatewaySection;
use verdict_runtime::{ErrorSpec, Failure, FailureSpec, StatsSpec};

use super::delivery::DeliveryError;
use crate::model::Delivery;

/// What the pipeline knows of a failure beyond the message and the consumer's answer.
pub(crate) struct Observed<'a> {
    /// The clock of the decision.
    pub(crate) now_ms: u64,
    /// The topic's recent deliveries, this one included.
    pub(crate) stats: StatsSpec,
    /// The route that delivered it (its topic pattern).
    pub(crate) route_topic: &'a str,
    /// The gateway's identity: consumer group and instance.
    pub(crate) settings: &'a GatewaySection,
}

/// The failure a policy decides on for `message`, whose delivery failed with `error`. The
/// payload goes in as bytes, never through JSON text, so a binary body reaches the policy
/// unaltered.
pub(crate) fn failure_of(message: &Delivery, error: &DeliveryError, seen: Observed<'_>) -> Failure {
    FailureSpec {
        topic: message.topic.clone(),
        message_id: message.id.clone(),
        consumer_group: seen.settings.consumer_group.clone(),
        // The policy counts this failure too; the source counts spent attempts.
        attempt: message.attempts_spent.saturating_add(1),
        deferrals: message.deferrals,
        first_failed_at_ms: message.first_failed_at_ms.unwrap_or(seen.now_ms),
        now_ms: Some(seen.now_ms),
        published_at_ms: Some(message.published_at_ms),
        deadline_ms: message.deadline_ms(),
        error: ErrorSpec {
            kind: error.kind.clone(),
            message: error.message.clone(),
            retry_after_ms: error.retry_after_ms,
            rejected: error.rejected,
        },
        history: message.history.clone(),
        headers: message.headers.clone(),
        payload: None,
        content_type: message.content_type.clone(),
        jitter_seed: None,
        stats: seen.stats,
        extensions: [
            ("source", message.source),
            ("route", seen.route_topic),
            ("gateway", seen.settings.instance.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    }
    .into_failure()
    .with_payload(message.payload.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AttemptRecord;

    #[test]
    fn the_policy_counts_this_failure_and_sees_the_gateways_history_not_the_producers() {
        let message = Delivery {
            id: "m-1".into(),
            topic: "orders".into(),
            // A producer's claim about attempts is a header like any other: it counts nothing.
            headers: [("x-verdict-attempt".to_string(), "0".to_string())].into(),
            payload: vec![0xff, 0x00, 0xfe],
            content_type: None,
            attempts_spent: 2,
            deferrals: 1,
            published_at_ms: 1_000,
            first_failed_at_ms: Some(2_000),
            history: vec![
                AttemptRecord {
                    at_ms: 2_000,
                    kind: "db.timeout".into(),
                    message: String::new(),
                };
                2
            ],
            redelivery: false,
            after_dead_letter: false,
            source: "nats",
        };
        let error = DeliveryError {
            kind: "http.503".into(),
            message: "unavailable".into(),
            retry_after_ms: Some(500),
            rejected: false,
            tls: None,
            status: Some(503),
        };
        let settings = GatewaySection::default();
        let failure = failure_of(
            &message,
            &error,
            Observed {
                now_ms: 5_000,
                stats: StatsSpec::default(),
                route_topic: "orders.>",
                settings: &settings,
            },
        );
        assert_eq!(failure.attempt(), 3, "two spent, this one the third");
        assert_eq!(failure.deferrals(), 1);
        assert_eq!(failure.kind(), "http.503");
        assert_eq!(failure.age_ms(), 4_000, "age counts from publication");
        assert_eq!(failure.message_id(), "m-1");
        assert_eq!(
            failure.jitter_seed(),
            verdict_runtime::jitter_seed("m-1", 3),
            "the seed follows the attempt the policy sees"
        );
    }
}
