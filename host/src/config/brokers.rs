//! `[nats]` and `[rabbitmq]`: the brokers routes with `source = "nats"` or
//! `source = "rabbitmq"` consume from.

use schemars::JsonSchema;
use serde::Deserialize;

/// NATS JetStream: one stream, and a durable pull consumer per route (each shared by every
/// gateway of the group, so they compete for the route's messages).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    /// The server (`nats://host:port`).
    pub url: String,
    /// The stream holding the routes' messages; created when missing, capturing `subjects`.
    pub stream: String,
    /// Subjects the stream captures when the gateway creates it. Empty: the topics of the
    /// routes with `source = "nats"`.
    pub subjects: Vec<String>,
    /// The prefix of the durable consumers' names (one per route:
    /// `<durable>-<route>-<hash>`). Empty: `[gateway] consumer_group`.
    pub durable: String,
    /// How long a delivery may go unacknowledged before JetStream redelivers it. While the
    /// consumer works, the gateway sends in-progress acks every half of this.
    pub ack_wait_ms: u64,
    /// Messages delivered and not yet acknowledged, per route's durable consumer (all
    /// gateways together); -1: no limit. JetStream counts a message waiting out a retry
    /// delay as pending, so a limit here caps a route's retry backlog - at the limit, the
    /// route's new messages wait for retries to end. The gateway bounds what it delivers at
    /// once itself (`max_in_flight`, each consumer's `concurrency`).
    pub max_ack_pending: i64,
    /// The dead-letter stream; created when missing, capturing `<dlq_subject_prefix>.>`.
    pub dlq_stream: String,
    /// Dead letters go to `<dlq_subject_prefix>.<dlq name>`. Must not overlap the source
    /// stream's subjects.
    pub dlq_subject_prefix: String,
    /// The audit stream (discards and replays); created when missing, capturing
    /// `<audit_subject_prefix>.>`.
    pub audit_stream: String,
    /// Audit records go to `<audit_subject_prefix>.<event>`.
    pub audit_subject_prefix: String,
    /// The key-value bucket holding each retried message's attempt history, shared by every
    /// gateway of the group (the next delivery may go to another gateway).
    pub history_bucket: String,
    /// How long a history outlives its last write (a message acknowledged elsewhere leaves
    /// none behind for long).
    pub history_ttl_ms: u64,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            url: "nats://127.0.0.1:4222".into(),
            stream: "VERDICT".into(),
            subjects: Vec::new(),
            durable: String::new(),
            ack_wait_ms: 30_000,
            max_ack_pending: -1,
            dlq_stream: "VERDICT_DLQ".into(),
            dlq_subject_prefix: "verdict.dlq".into(),
            audit_stream: "VERDICT_AUDIT".into(),
            audit_subject_prefix: "verdict.audit".into(),
            history_bucket: "verdict-history".into(),
            history_ttl_ms: 7 * 24 * 3_600_000,
        }
    }
}

/// RabbitMQ: each route's topic is a queue (declared durable when missing) consumed with
/// manual acks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RabbitmqConfig {
    /// The server (`amqp://user:password@host:port/vhost`).
    pub url: String,
    /// Deliveries unacknowledged at once per queue (the consumer's `basic.qos`).
    pub prefetch: u16,
    /// Prefix of the delay exchanges and queues (`<prefix>.<ms>`), one per delay bucket.
    pub delay_prefix: String,
    /// The queue audit records (discards) are published to; declared durable.
    pub audit_queue: String,
    /// The key that signs the attempt history a retried message carries in its headers
    /// (relative to the config file). Every gateway consuming the same queues needs the
    /// same key. Empty: `<storage dir>/history.key`, created (32 random bytes, mode 0600)
    /// when missing.
    pub history_key_file: std::path::PathBuf,
}

impl Default for RabbitmqConfig {
    fn default() -> Self {
        RabbitmqConfig {
            url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            prefetch: 64,
            delay_prefix: "verdict.delay".into(),
            audit_queue: "verdict.audit".into(),
            history_key_file: std::path::PathBuf::new(),
        }
    }
}
