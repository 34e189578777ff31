//! # verdict-gateway: deliver, decide, settle
//!
//! The gateway consumes messages from a source - its embedded store ([`store`]), NATS
//! JetStream or RabbitMQ ([`sources`]) - and POSTs each to its route's HTTP consumer. A
//! failed delivery becomes a failure that the route's policy decides on (through the
//! [`verdict_registry::Registry`]); the [`pipeline`] turns the verdict into a settlement
//! (retry, delay, pause, dead-letter with the whole history in an [`envelope`], discard) that the
//! source applies. [`dlq`] lists, replays and discards dead letters on every source;
//! [`admin`] serves all of it over HTTP with `/metrics`.
//!
//! ```no_run
//! use verdict_gateway::Gateway;
//!
//! # async fn run() -> Result<(), verdict_gateway::GatewayError> {
//! let gateway = Gateway::start("verdict.toml".as_ref(), async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await?;
//! println!("admin API on {}", gateway.admin_url);
//! gateway.wait().await
//! # }
//! ```
//!
//! Every path a message takes keeps the delivery invariants: nothing is lost (a state
//! change is written before the old one is released), no duplicate happens without a fault
//! (leases are fenced, redeliveries counted), no poison message loops (attempts and history
//! come only from the gateway's own records), one route never stalls another (slots per
//! route), and every string from outside is bounded and cleaned before it reaches a
//! header, a label, a log line or an envelope.
//!
//! What this crate owns: the store, the sources, the pipeline, envelopes, the DLQ tools,
//! metrics and the admin server. What it must not depend on: the `verdict` binary, its
//! commands, `verdict bench` or the demo consumer.

#![forbid(unsafe_code)]
// A build that leaves a broker out (`--no-default-features`) leaves some of the brokers'
// shared helpers unused; the full build, the one linted, uses them all.
#![cfg_attr(
    not(all(feature = "nats", feature = "rabbitmq")),
    allow(
        dead_code,
        unused_imports,
        unused_variables,
        unused_mut,
        clippy::unused_async
    )
)]

pub mod admin;
pub mod dlq;
mod error;
#[cfg(test)]
mod fuzz;
mod gateway;
pub mod health;
mod metrics;
pub mod pipeline;
pub mod probe;
pub mod sources;
pub mod telemetry;
mod tls_sniff;

/// The store, its records and the message model live in their own crate, below this one.
pub use verdict_store as store;
use verdict_store::clock;
pub use verdict_store::{envelope, model};

pub use error::GatewayError;
pub use gateway::{Gateway, open_store};
pub use metrics::{METRICS_CONTENT_TYPE, Metrics};
