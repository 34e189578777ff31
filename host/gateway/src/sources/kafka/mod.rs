//! The Kafka source, being built: what a partition may commit when its records finish out
//! of order ([`offsets`]), and the headers of a dead-letter record in Spring Kafka's names
//! and encodings ([`dlt_headers`]). Routes cannot name it yet (`source = "kafka"` is not a
//! source a config accepts); the feature `kafka` builds these parts and their tests.

#![allow(dead_code)] // the consumer that uses these parts comes next

pub(crate) mod dlt_headers;
pub(crate) mod offsets;
pub(crate) mod record;

/// The source's name in metrics, log lines and `/readyz`.
pub const NAME: &str = "kafka";
