//! The Kafka source's settings (`[kafka]`): where the brokers are, the consumer group, how a
//! retry waits, and how the gateway proves who it is. A route's dead-letter topic is named
//! as every source's DLQ is (`[gateway] dlq_naming`: `<topic>.DLQ` by default).
//!
//! ```toml
//! [kafka]
//! bootstrap_servers = ["kafka-1.internal:9093", "kafka-2.internal:9093"]
//! group_id = "verdict"
//! mode = "retry-topics"              # or "blocking": the partition waits out the delay
//! route_modes = { payments = "blocking" }   # a route's own mode
//! tls = { ca_file = "kafka-ca.pem" }
//! sasl = { mechanism = "SCRAM-SHA-512", username = "verdict", password = { file = "kafka.pass" } }
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;
use verdict_tls::TlsConfig;

use super::secret::Secret;

/// Kafka: each route's topic is read by the consumer group `group_id`; an offset is
/// committed once every record before it is settled.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// The brokers the client first connects to (`host:port`); it learns the rest of the
    /// cluster from them.
    pub bootstrap_servers: Vec<String>,
    /// The consumer group every gateway on these routes joins: Kafka shares each topic's
    /// partitions among its members and keeps the group's committed offsets.
    pub group_id: String,
    /// How long the group waits to hear from a member before it gives that member's
    /// partitions to the others (Kafka's `session.timeout.ms`): after a crash, the records
    /// of a crashed gateway's partitions wait this long. Within the brokers'
    /// `group.min.session.timeout.ms` and `group.max.session.timeout.ms` (6 s to 30 min by
    /// default).
    pub session_timeout_ms: u64,
    /// How a retry waits for its delay, on every route not named in `route_modes`.
    pub mode: KafkaRetryMode,
    /// Routes whose retries wait otherwise than `mode`: a Kafka route's topic and its
    /// mode (`{ payments = "blocking" }` keeps the order of `payments` while the other
    /// routes' retries go through retry topics).
    pub route_modes: BTreeMap<String, KafkaRetryMode>,
    /// Prefix of the retry topics in `retry-topics` mode, one per delay bucket:
    /// `<prefix>.<bucket ms>` (the same buckets, 25% apart, as RabbitMQ's delay queues: a
    /// retry is never early and at most a quarter late).
    pub retry_topic_prefix: String,
    /// Partitions of the retry and dead-letter topics the gateway creates when missing.
    pub topic_partitions: i32,
    /// Replication factor of the topics the gateway creates when missing.
    pub topic_replication_factor: i32,
    /// The topic audit records (discards, replays) are written to; created when missing.
    pub audit_topic: String,
    /// The compacted topic where the DLQ tools mark a dead letter replayed or discarded (a
    /// letter cannot be taken out of a topic): listings skip a marked letter. Created when
    /// missing.
    pub dlq_settled_topic: String,
    /// The header a producer names a record's id in (UTF-8, at most 255 bytes); a record
    /// without one is named by where it was first read, `<topic>/<partition>@<offset>`.
    pub id_header: String,
    /// The key that signs the attempt history a retried record carries in its headers
    /// (relative to the config file). Every gateway in the group needs the same key; it may
    /// be the one RabbitMQ routes use.
    /// Empty: `<storage dir>/history.key`, created when missing.
    pub history_key_file: PathBuf,
    /// TLS to the brokers (librdkafka's OpenSSL): a private CA, a client certificate.
    pub tls: Option<TlsConfig>,
    /// SASL authentication (over TLS when `tls` is set).
    pub sasl: Option<SaslConfig>,
}

/// How a Kafka retry waits (`[kafka] mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaRetryMode {
    /// The record is written to a retry topic and read again when due; the partition goes
    /// on meanwhile (later records of the same key may overtake it).
    RetryTopics,
    /// The partition pauses for the delay and the record is delivered again in place:
    /// order is kept, and the partition waits.
    Blocking,
}

/// SASL credentials (`[kafka] sasl`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The user name.
    pub username: String,
    /// The password, from a file or the environment.
    pub password: Secret,
}

/// A SASL mechanism, by the name Kafka gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum SaslMechanism {
    /// User and password sent as they are: only over TLS.
    #[serde(rename = "PLAIN")]
    Plain,
    /// Salted challenge-response, SHA-256.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// Salted challenge-response, SHA-512.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// Kafka's name for it.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            bootstrap_servers: vec!["127.0.0.1:9092".into()],
            group_id: "verdict".into(),
            session_timeout_ms: 10_000,
            mode: KafkaRetryMode::RetryTopics,
            route_modes: BTreeMap::new(),
            retry_topic_prefix: "verdict.retry".into(),
            topic_partitions: 1,
            topic_replication_factor: 1,
            audit_topic: "verdict.audit".into(),
            dlq_settled_topic: "verdict.dlq-settled".into(),
            id_header: "message-id".into(),
            history_key_file: PathBuf::new(),
            tls: None,
            sasl: None,
        }
    }
}

impl KafkaConfig {
    /// The same settings with relative paths taken from `base` (the config file's
    /// directory).
    pub fn resolved(&self, base: &std::path::Path) -> KafkaConfig {
        let mut out = self.clone();
        out.tls = self.tls.as_ref().map(|t| t.resolved(base));
        if let Some(sasl) = &mut out.sasl {
            sasl.password = sasl.password.resolved(base);
        }
        out
    }

    /// The retry topic of the delay bucket of `bucket_ms`.
    pub fn retry_topic(&self, bucket_ms: u64) -> String {
        format!("{}.{bucket_ms}", self.retry_topic_prefix)
    }

    /// How the retries of the route reading `topic` wait.
    pub fn mode_of(&self, topic: &str) -> KafkaRetryMode {
        self.route_modes.get(topic).copied().unwrap_or(self.mode)
    }

    /// What is wrong with the settings, as `(field, message)`: what a broker would refuse
    /// or a client could not use, said before anything connects. `routes`: the topics of
    /// the Kafka routes.
    pub fn check(&self, routes: &[&str]) -> Result<(), (String, String)> {
        let bad = |field: &str, message: String| Err((format!("kafka.{field}"), message));
        if let Some(topic) = self
            .route_modes
            .keys()
            .find(|t| !routes.contains(&t.as_str()))
        {
            return bad(
                &format!("route_modes.{topic}"),
                format!(
                    "names no route with `source = \"kafka\"` (the Kafka routes read {})",
                    if routes.is_empty() {
                        "nothing".to_string()
                    } else {
                        routes
                            .iter()
                            .map(|r| format!("`{r}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            );
        }
        if self.bootstrap_servers.is_empty() {
            return bad(
                "bootstrap_servers",
                "name at least one broker (`host:port`)".into(),
            );
        }
        for server in &self.bootstrap_servers {
            let port = server.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
            if !matches!(port, Some(Ok(p)) if p > 0) || server.contains(',') {
                return bad(
                    "bootstrap_servers",
                    format!("`{server}` is not `host:port` (one broker per list entry)"),
                );
            }
        }
        if self.group_id.trim().is_empty() {
            return bad("group_id", "a consumer group needs a name".into());
        }
        if !(1_000..=3_600_000).contains(&self.session_timeout_ms) {
            return bad(
                "session_timeout_ms",
                format!(
                    "{} is not between 1000 and 3600000 (ms)",
                    self.session_timeout_ms
                ),
            );
        }
        for (field, name) in [
            ("retry_topic_prefix", self.retry_topic(u64::MAX)),
            ("audit_topic", self.audit_topic.clone()),
            ("dlq_settled_topic", self.dlq_settled_topic.clone()),
        ] {
            if let Err(why) = topic_name(&name) {
                return bad(
                    field,
                    format!("makes topic names like `{name}`, which {why}"),
                );
            }
        }
        if self.topic_partitions < 1 || self.topic_replication_factor < 1 {
            return bad(
                "topic_partitions",
                "partitions and the replication factor are at least 1".into(),
            );
        }
        if self.tls.as_ref().is_some_and(|t| t.server_name.is_some()) {
            return bad(
                "tls.server_name",
                "librdkafka checks the broker's certificate against the name it connects \
                 to and cannot be given another; connect by the name the certificate carries"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Whether `name` is a topic name Kafka accepts: 1 to 249 characters of ASCII letters,
/// digits, `.`, `_` and `-`, and neither `.` nor `..`.
pub fn topic_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > 249 {
        return Err("is not 1 to 249 characters long");
    }
    if name == "." || name == ".." {
        return Err("is reserved");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err("holds a character other than ASCII letters, digits, `.`, `_` and `-`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml: &str) -> Result<KafkaConfig, toml::de::Error> {
        toml::from_str(toml)
    }

    #[test]
    fn the_defaults_are_a_local_broker_and_retry_topics() {
        let c = KafkaConfig::default();
        assert_eq!(c.check(&[]), Ok(()));
        assert_eq!(c.retry_topic(1_000), "verdict.retry.1000");
        assert_eq!(c.mode, KafkaRetryMode::RetryTopics);
    }

    #[test]
    fn settings_parse_with_the_names_kafka_gives_them() {
        let c = parse(
            r#"
            bootstrap_servers = ["k1:9093", "k2:9093"]
            group_id = "payments"
            mode = "blocking"
            tls = { ca_file = "ca.pem" }
            sasl = { mechanism = "SCRAM-SHA-512", username = "verdict", password = { file = "pass" } }
            "#,
        )
        .unwrap();
        assert_eq!(c.mode, KafkaRetryMode::Blocking);
        let sasl = c.sasl.as_ref().unwrap();
        assert_eq!(sasl.mechanism.name(), "SCRAM-SHA-512");
        let resolved = c.resolved(std::path::Path::new("/etc/verdict"));
        assert_eq!(
            resolved.tls.unwrap().ca_file.unwrap(),
            PathBuf::from("/etc/verdict/ca.pem")
        );
        assert_eq!(c.check(&[]), Ok(()));
    }

    #[test]
    fn bad_settings_are_refused_naming_the_field() {
        assert!(
            parse("mechanism = 1").is_err(),
            "unknown fields are refused"
        );
        assert!(
            parse(r#"sasl = { mechanism = "GSSAPI", username = "u", password = { env = "P" } }"#)
                .is_err()
        );
        let field = |c: KafkaConfig| c.check(&["orders"]).unwrap_err().0;
        let with = |change: fn(&mut KafkaConfig)| {
            let mut c = KafkaConfig::default();
            change(&mut c);
            c
        };
        assert_eq!(
            field(with(|c| c.bootstrap_servers.clear())),
            "kafka.bootstrap_servers"
        );
        assert_eq!(
            field(with(
                |c| c.bootstrap_servers = vec!["k1:9092,k2:9092".into()]
            )),
            "kafka.bootstrap_servers"
        );
        assert_eq!(
            field(with(|c| c.bootstrap_servers = vec!["k1".into()])),
            "kafka.bootstrap_servers"
        );
        assert_eq!(field(with(|c| c.group_id = " ".into())), "kafka.group_id");
        assert_eq!(
            field(with(|c| c.session_timeout_ms = 10)),
            "kafka.session_timeout_ms"
        );
        assert_eq!(
            field(with(|c| c.retry_topic_prefix = "retry topics".into())),
            "kafka.retry_topic_prefix"
        );
        assert_eq!(
            field(with(|c| c.audit_topic = "audit/log".into())),
            "kafka.audit_topic"
        );
        assert_eq!(
            field(with(|c| c.topic_partitions = 0)),
            "kafka.topic_partitions"
        );
        assert_eq!(
            field(with(|c| {
                c.route_modes
                    .insert("payments".into(), KafkaRetryMode::Blocking);
            })),
            "kafka.route_modes.payments",
            "a mode for a topic no Kafka route reads"
        );
    }

    #[test]
    fn a_route_may_block_while_the_others_use_retry_topics() {
        let c = parse(r#"route_modes = { payments = "blocking" }"#).unwrap();
        assert_eq!(c.check(&["payments", "orders"]), Ok(()));
        assert_eq!(c.mode_of("payments"), KafkaRetryMode::Blocking);
        assert_eq!(c.mode_of("orders"), KafkaRetryMode::RetryTopics);
    }

    #[test]
    fn topic_names_follow_kafkas_rules() {
        assert_eq!(topic_name("orders.DLT"), Ok(()));
        assert!(topic_name("").is_err());
        assert!(topic_name("..").is_err());
        assert!(topic_name(&"x".repeat(250)).is_err());
        assert!(topic_name("orders\n").is_err());
        assert!(topic_name("örders").is_err());
    }
}
