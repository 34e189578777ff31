//! The Kafka source (feature `kafka`, being built): routes' topics read by a consumer group,
//! retries through retry topics, dead letters to a DLT Spring Kafka users read as their own.
//!
//! - [`source`]: the consumer, the delivery tasks, what each settlement writes.
//! - [`offsets`]: what a partition may commit when its records finish out of order.
//! - [`read_ahead`]: how far the source reads ahead of its slots.
//! - [`record`]: a record as the gateway reads it, and the retry and dead-letter records.
//! - [`dlt_headers`]: Spring Kafka's `kafka_dlt-*` headers.
//! - [`client`]: the librdkafka settings (brokers, TLS, SASL).
//! - [`dlq`]: the DLQ tools on the DLQ topics ([`KafkaDeadLetters`]).

pub(crate) mod client;
pub mod dlq;
pub(crate) mod dlt_headers;
pub(crate) mod offsets;
pub(crate) mod read_ahead;
pub(crate) mod record;
mod source;

pub use client::probe;
pub use dlq::KafkaDeadLetters;
pub use source::KafkaSource;

/// The source's name in metrics, log lines and `/readyz`.
pub const NAME: &str = "kafka";
