//! Which source a route consumes from: the config's word for it, shared by the registry that
//! reads the file and the gateway that consumes.

use serde::{Deserialize, Serialize};

/// Which source a route consumes from.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// The embedded store: messages published through the admin API.
    #[default]
    Embedded,
    /// A RabbitMQ queue (`[rabbitmq]`).
    Rabbitmq,
    /// A NATS JetStream stream (`[nats]`).
    Nats,
    /// A Kafka topic read by a consumer group (`[kafka]`).
    Kafka,
}

impl SourceKind {
    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Embedded => "embedded",
            SourceKind::Rabbitmq => "rabbitmq",
            SourceKind::Nats => "nats",
            SourceKind::Kafka => "kafka",
        }
    }
}
