//! `[gateway]` and a route's `consumer`: how the gateway consumes, delivers and dead-letters.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

/// The gateway process.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GatewaySection {
    /// This gateway's name, written into every dead-letter envelope.
    pub instance: String,
    /// The consumer group named in failures and envelopes.
    pub consumer_group: String,
    /// The embedded store (SQLite), relative to `[storage] dir`; used when `store` is
    /// not set.
    pub database: PathBuf,
    /// Where the gateway keeps the messages it delivers itself, as a URL: unset for the
    /// SQLite file `database`, `sqlite://<path>` (relative to this file) for another one,
    /// or `postgres://user@host:port/database` for a PostgreSQL database that several
    /// gateways share (each claims with `SKIP LOCKED`, leases fence the settlements). The
    /// schema is created or migrated at start.
    pub store: Option<String>,
    /// How long a claimed message stays leased without renewal. A running delivery renews
    /// its lease every third of this, so a lease expires only when the gateway holding it
    /// stopped or stalled that long; the message is then delivered again (a counted
    /// duplicate). Must exceed every consumer's `timeout_ms`.
    pub lease_ms: u64,
    /// How often the store is polled for due messages when idle.
    pub poll_ms: u64,
    /// Deliveries in flight across all routes (each route also stays within its consumer's
    /// `concurrency`).
    pub max_in_flight: usize,
    /// How dead-letter queues are named.
    pub dlq_naming: DlqNaming,
    /// The one DLQ's name when `dlq_naming = "global"`.
    pub global_dlq: String,
    /// Encoding of dead-letter envelopes.
    pub dlq_format: DlqFormat,
    /// A dead letter that was replayed this many times and failed again each time is
    /// *parked*: bulk replays (`verdict dlq replay`, a group's replay) leave it out until an
    /// operator replays it by itself. 0 parks nothing. The store counts the replays; a
    /// broker's DLQ does not keep them, so nothing there is parked.
    pub park_after_repeats: u32,
}

impl Default for GatewaySection {
    fn default() -> Self {
        GatewaySection {
            instance: std::env::var("HOSTNAME").unwrap_or_else(|_| "verdict".into()),
            consumer_group: "verdict".into(),
            database: PathBuf::from("verdict.db"),
            store: None,
            lease_ms: 60_000,
            poll_ms: 50,
            max_in_flight: 64,
            dlq_naming: DlqNaming::Suffix,
            global_dlq: "DLQ".into(),
            dlq_format: DlqFormat::Json,
            park_after_repeats: 3,
        }
    }
}

/// DLQ naming: `<topic>.DLQ`, `DLQ.<topic>`, `<topic>.DLT`, or one DLQ for every topic
/// (the source topic is in the envelope).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DlqNaming {
    /// `<topic>.DLQ`.
    Suffix,
    /// `DLQ.<topic>`.
    Prefix,
    /// `<topic>.DLT`: Spring Kafka's name for a topic's dead-letter topic.
    DltSuffix,
    /// `global_dlq` for every topic.
    Global,
}

impl DlqNaming {
    /// The DLQ of `topic`.
    pub fn dlq_for(self, topic: &str, global: &str) -> String {
        match self {
            DlqNaming::Suffix => format!("{topic}.DLQ"),
            DlqNaming::Prefix => format!("DLQ.{topic}"),
            DlqNaming::DltSuffix => format!("{topic}.DLT"),
            DlqNaming::Global => global.to_string(),
        }
    }
}

/// How envelopes are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DlqFormat {
    /// JSON.
    Json,
    /// MessagePack (rmp-serde), the same fields.
    Msgpack,
}

/// Where a route's messages are delivered: HTTP push.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumerConfig {
    /// The consumer's URL; each message is POSTed to it with `x-verdict-message-id`,
    /// `x-verdict-topic` and `x-verdict-attempt` headers.
    pub url: String,
    /// Per-delivery timeout; a timeout is the failure kind `transport.timeout`.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Deliveries of this route in flight at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// TLS to an `https://` consumer: a private CA, a client certificate for a consumer
    /// that verifies the gateway, the name its certificate carries. Replaces `[defaults]
    /// consumer_tls`; without either, the platform's roots are trusted.
    #[serde(default)]
    pub tls: Option<verdict_tls::TlsConfig>,
}

fn default_timeout_ms() -> u64 {
    10_000
}

fn default_concurrency() -> usize {
    16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlq_names_follow_the_naming_scheme() {
        assert_eq!(DlqNaming::Suffix.dlq_for("orders", "DLQ"), "orders.DLQ");
        assert_eq!(DlqNaming::Prefix.dlq_for("orders", "DLQ"), "DLQ.orders");
        assert_eq!(DlqNaming::DltSuffix.dlq_for("orders", "DLQ"), "orders.DLT");
        assert_eq!(DlqNaming::Global.dlq_for("orders", "all.DLQ"), "all.DLQ");
    }
}
