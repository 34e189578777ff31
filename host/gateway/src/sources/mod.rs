//! Where failed deliveries come from and where verdicts are applied: the *sources*.
//!
//! A [`Source`] hands the pipeline [`Delivery`](crate::model::Delivery)s and applies the
//! [`Settlement`](crate::model::Settlement) the pipeline returns for each, in its own
//! terms. Each broker has a folder of its own: its source, how it keeps a message's attempt
//! history, and its DLQ tools (`nats::NatsDeadLetters`, `rabbitmq::RabbitDeadLetters`,
//! `kafka::KafkaDeadLetters`). Everything between - the HTTP push, the
//! policy's verdict, the dead-letter envelope, the metrics - is shared, so a policy behaves
//! the same on every source.
//!
//! | settlement | embedded (SQLite) | NATS JetStream | RabbitMQ | Kafka |
//! |---|---|---|---|---|
//! | delivered | row `delivered` | `ack` | `ack` | offset done |
//! | retry / delay | row `scheduled` at `now + delay` | history to the KV bucket, then `nak(delay)` | copy with history headers to the delay bucket's queue (publisher confirm), then `ack` | copy with history headers to the bucket's retry topic (acknowledged), then offset done; blocking: the record waits in place |
//! | dead-letter | DLQ row, same transaction | envelope to the DLQ stream, PubAck, then `term` | envelope to the DLQ queue (publisher confirm), then `ack` | the record with the envelope to the DLQ topic (acknowledged), then offset done |
//! | discard | row `discarded` + audit row | audit record, then `term` | audit record, then `ack` | audit record, then offset done |
//!
//! Each source writes the new state *before* it lets go of the old one, so a crash between
//! the two delivers a message twice, never zero times.
//!
//! What happens when a settlement cannot be applied - a panic, a store out of reach, a
//! broker refusing writes - is not a source's to decide: every source hands its deliveries
//! to the one `SettlementDriver` (`settlement_driver.rs`) and implements only `Held` (apply
//! a settlement, give a message back), so the rules are the same on every source.

#[cfg(any(feature = "rabbitmq", feature = "kafka"))]
pub mod delay_buckets;
pub mod embedded;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(any(feature = "nats", feature = "rabbitmq"))]
pub(crate) mod key_chains;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
mod settle_failures;
mod settlement_driver;
#[cfg(any(feature = "rabbitmq", feature = "kafka"))]
pub(crate) mod signed_history;
mod source;
mod store_outage;
mod supervise;

pub use settle_failures::MAX_SETTLE_FAILURES;
pub(crate) use settlement_driver::{Held, Settled, SettlementDriver, Unapplied, next_attempt};
pub use source::Source;
pub(crate) use store_outage::StoreOutage;
pub(crate) use supervise::{drained, supervise};

/// What a caught panic said, as text (a panic's payload is a `&str` or a `String` when it
/// has a message at all).
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// The DLQ tools on the DLQ topics of `config`'s Kafka routes (for the command line, on a
/// runtime of their own); an error in a build without the `kafka` feature.
pub fn kafka_dead_letters(
    config: &verdict_registry::GatewayConfig,
) -> Result<Box<dyn crate::dlq::DeadLetters>, crate::dlq::DlqError> {
    #[cfg(feature = "kafka")]
    {
        Ok(Box::new(kafka::KafkaDeadLetters::connect(config)?))
    }
    #[cfg(not(feature = "kafka"))]
    {
        let _ = config;
        Err(crate::dlq::DlqError::broker(
            "kafka",
            "this build has no Kafka source: build it with `--features kafka`",
        ))
    }
}

/// Aborts a background task (a depth poller, the bench's consumer) when its owner goes.
pub struct AbortOnDrop(
    /// The task.
    pub tokio::task::JoinHandle<()>,
);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The source topic of a DLQ named by `naming` (empty when the DLQ is global).
pub(crate) fn topic_of_dlq(naming: verdict_registry::DlqNaming, dlq: &str) -> String {
    match naming {
        verdict_registry::DlqNaming::Suffix => dlq.strip_suffix(".DLQ").unwrap_or(dlq).to_string(),
        verdict_registry::DlqNaming::Prefix => dlq.strip_prefix("DLQ.").unwrap_or(dlq).to_string(),
        verdict_registry::DlqNaming::DltSuffix => {
            dlq.strip_suffix(".DLT").unwrap_or(dlq).to_string()
        }
        verdict_registry::DlqNaming::Global => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dlq_names_its_topic_unless_it_is_global() {
        use verdict_registry::DlqNaming;
        assert_eq!(
            topic_of_dlq(DlqNaming::Suffix, "orders.eu.DLQ"),
            "orders.eu"
        );
        assert_eq!(topic_of_dlq(DlqNaming::Prefix, "DLQ.orders"), "orders");
        assert_eq!(topic_of_dlq(DlqNaming::DltSuffix, "orders.DLT"), "orders");
        assert_eq!(topic_of_dlq(DlqNaming::Global, "all"), "");
    }
}
