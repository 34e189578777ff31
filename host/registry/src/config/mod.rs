//! The operator's gateway config (`verdict.toml`): sandbox limits, policies, routes.
//!
//! ```toml
//! [sandbox]
//! decide_timeout_ms = 10
//!
//! [policies.rules]
//! path = "policies/rules.component.wasm"
//! vectors = ["policies/rules/vectors/limits.json"]
//!
//! [[routes]]
//! topic = "payments.>"
//! policy = "rules"
//! config = { max_attempts = 5 }
//!
//! [[routes]]
//! topic = ">"            # the default route: every other topic
//! policy = "rules"
//! config = { max_attempts = 3 }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use verdict_runtime::Limits;

mod admin;
mod admission;
mod brokers;
mod console;
mod defaults;
mod gateway;
mod kafka;
mod secret;
mod source_kind;
mod storage;
mod telemetry;

pub use admin::{AdminConfig, DEFAULT_ADMIN_PORT, OpenReads};
pub use admission::AdmissionConfig;
pub use brokers::{DelayQueues, NatsConfig, RabbitmqConfig};
pub use brokers::{
    MAX_DELAY_BUCKET_MS, covers_subject, logs_in_with_certificate, subjects_overlap,
};
pub use console::ConsoleConfig;
pub use defaults::Defaults;
pub use gateway::{ConsumerConfig, DlqFormat, DlqNaming, GatewaySection};
pub use kafka::{KafkaConfig, KafkaRetryMode, SaslConfig, SaslMechanism, topic_name};
pub use secret::Secret;
pub use source_kind::SourceKind;
pub use storage::StorageConfig;
pub use telemetry::{OtlpProtocol, TelemetryConfig};
pub use verdict_tls::TlsConfig;

/// The whole file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Limits every policy runs under.
    #[serde(default)]
    pub sandbox: Limits,
    /// Guardrails, fallback and consumer TLS every route starts from.
    #[serde(default)]
    pub defaults: Defaults,
    /// The admission gate every policy passes before it goes live.
    #[serde(default)]
    pub admission: AdmissionConfig,
    /// The admin HTTP API.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Repairs of dead letters: off unless enabled.
    #[serde(default)]
    pub console: ConsoleConfig,
    /// The state directory.
    #[serde(default)]
    pub storage: StorageConfig,
    /// The gateway process: consumption, delivery, dead-lettering.
    #[serde(default)]
    pub gateway: GatewaySection,
    /// The NATS JetStream source (routes with `source = "nats"`).
    #[serde(default)]
    pub nats: NatsConfig,
    /// The RabbitMQ source (routes with `source = "rabbitmq"`).
    #[serde(default)]
    pub rabbitmq: RabbitmqConfig,
    /// The Kafka source (routes with `source = "kafka"`; a build with the feature `kafka`).
    #[serde(default)]
    pub kafka: KafkaConfig,
    /// Traces of every delivery over OTLP (off unless an endpoint is set here or in the
    /// standard `OTEL_*` variables).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Policy components by name.
    pub policies: BTreeMap<String, PolicyConfig>,
    /// Topic routes. `topic = ">"` is the default route (it matches every topic, least
    /// specifically).
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

/// One policy component.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// The component, relative to the config file's directory.
    pub path: PathBuf,
    /// Pin: refuse the component unless its SHA-256 (hex) is this (an uploaded component
    /// too).
    #[serde(default)]
    pub sha256: Option<String>,
    /// Vector files it must pass before it goes live (relative to the config file).
    #[serde(default)]
    pub vectors: Vec<PathBuf>,
}

/// One route.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Topic pattern: dot-separated, `*` one token, `>` the rest.
    pub topic: String,
    /// Name of a policy in `[policies]`.
    pub policy: String,
    /// The policy's per-topic config (any table the policy accepts).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub config: Option<serde_json::Value>,
    /// Guardrails and fallback for this route, replacing `[defaults]`.
    #[serde(default)]
    pub settings: Option<verdict_runtime::TopicSettings>,
    /// A core topic: its DLQ depth alerts critical at 500 instead of 1,000 (the alert tiers;
    /// exported as the `core` label of `verdict_dlq_depth`).
    #[serde(default)]
    pub core: bool,
    /// Where this route's messages come from: `embedded` (published through the admin API),
    /// `nats` (`[nats]`) or `rabbitmq` (`[rabbitmq]`; the topic is a queue name, no
    /// wildcards).
    #[serde(default)]
    pub source: SourceKind,
    /// Where the gateway delivers this route's messages. A route without one only decides
    /// (`POST /v1/decide`); publishing to it is refused.
    #[serde(default)]
    pub consumer: Option<ConsumerConfig>,
    /// A second policy that decides alongside the active one without its verdict being
    /// applied; disagreements are counted and logged, so a candidate is promoted with
    /// evidence.
    #[serde(default)]
    pub shadow: Option<ShadowConfig>,
    /// `none` (the default): each message is delivered when it falls due, and a retry
    /// holds nothing else back. `key`: messages with the same key are delivered one at a
    /// time, in publish order - a failed message holds its key's later messages back,
    /// undelivered, until it is delivered, dead-lettered or discarded - while other keys
    /// flow. On the embedded source (whichever store holds it: SQLite, PostgreSQL,
    /// MariaDB) the key is the value of the header `key_header` names, as published. On
    /// Kafka it is the record's own key, and the unit held is its partition: the route's
    /// retries wait in place (blocking mode), so a failed record holds every key of its
    /// partition while other partitions flow. On RabbitMQ and NATS the key is the
    /// `key_header` value: one gateway at a time delivers the route (RabbitMQ: the queue's
    /// exclusive consumer; NATS: the holder of a record in the history bucket; others stand
    /// by), and a failed message retries in place, unacknowledged, with its key's later
    /// messages held behind it. Read when the source starts consuming (on NATS also at a
    /// reload that changes the NATS routes or their ordering): turn it on or off on every
    /// gateway of the route together.
    #[serde(default)]
    pub ordering: RouteOrdering,
    /// With `ordering = "key"` on the embedded source, RabbitMQ or NATS: the header whose value is
    /// a message's key (its name matched without regard to case). A message without it is
    /// not ordered.
    #[serde(default)]
    pub key_header: Option<String>,
    /// With `ordering = "key"` on the embedded source, what a dead letter does to its key
    /// (a Kafka, RabbitMQ or NATS route always releases it). `release` (the default): the key's
    /// next message is delivered. `dead-letter-key`: the key's later messages follow it to
    /// the DLQ undelivered, each with its own envelope (kind `key.dead-lettered`), until an
    /// operator replays or discards the key's dead letters.
    #[serde(default)]
    pub on_dead_letter: OnDeadLetter,
    /// With `ordering = "key"` on the embedded source: how many keys may be parked at once
    /// (their oldest unfinished message has failed: their later messages are held back). At
    /// the bound the route takes only its retries - no message delivered for the first
    /// time, so no new key parks - until a parked key clears;
    /// `verdict_route_parked_keys_full` says so. Checked about every second, so a route may
    /// pass it by what it takes in that second. None: no bound.
    #[serde(default)]
    pub max_parked_keys: Option<u64>,
}

/// What a dead letter does to its key on a route ordered by key (see
/// [`RouteConfig::on_dead_letter`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnDeadLetter {
    /// The key's next message is delivered.
    #[default]
    Release,
    /// The key's later messages follow the dead letter to the DLQ, undelivered.
    DeadLetterKey,
}

/// How a route orders its messages (see [`RouteConfig::ordering`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RouteOrdering {
    /// Each message when it falls due.
    #[default]
    None,
    /// One message of a key at a time, in publish order.
    Key,
}

/// The shadow of a route.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShadowConfig {
    /// Name of a policy in `[policies]`.
    pub policy: String,
    /// Its per-topic config.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub config: Option<serde_json::Value>,
}

/// A config file that could not be read or is invalid; names the file and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {field}: {message}")]
pub struct GatewayConfigError {
    /// The file.
    pub file: String,
    /// The field path (`routes[2].policy`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// Key ordering needs a key and a source that can hold a key back: the embedded source,
/// whose store's claims skip a key while an older message of it is unfinished; Kafka,
/// whose route holds a partition (and so each key on it) behind a record in flight; and
/// RabbitMQ, whose route's one consumer holds a key's later messages behind a failed one.
/// The shortest `[nats] history_ttl_ms` a NATS route ordered by key accepts.
const MIN_ORDERED_HISTORY_TTL_MS: u64 = 60_000;

fn check_ordering(route: &RouteConfig) -> Result<(), (&'static str, String)> {
    match route.ordering {
        RouteOrdering::None => {
            if route.max_parked_keys.is_some() {
                return Err((
                    "max_parked_keys",
                    "needs `ordering = \"key\"`: only a route ordered by key parks keys".into(),
                ));
            }
            if route.on_dead_letter != OnDeadLetter::Release {
                return Err((
                    "on_dead_letter",
                    "\"dead-letter-key\" needs `ordering = \"key\"`: without keys there is no \
                     key to dead-letter"
                        .into(),
                ));
            }
            if route.key_header.is_some() {
                return Err((
                    "key_header",
                    "is set, but `ordering` is not \"key\": set `ordering = \"key\"` to order \
                     by it, or remove it"
                        .into(),
                ));
            }
            Ok(())
        }
        RouteOrdering::Key => match route.source {
            SourceKind::Embedded => check_embedded_ordering(route),
            SourceKind::Kafka => check_kafka_ordering(route),
            SourceKind::Rabbitmq => check_held_ordering(route, "rabbitmq", "`[rabbitmq] prefetch`"),
            SourceKind::Nats => check_held_ordering(
                route,
                "nats",
                "the route's room (twice its concurrency, at least 64)",
            ),
        },
    }
}

fn check_embedded_ordering(route: &RouteConfig) -> Result<(), (&'static str, String)> {
    if route.max_parked_keys == Some(0) {
        return Err((
            "max_parked_keys",
            "must be at least 1 (leave it out for no bound): at 0 no key could ever retry".into(),
        ));
    }
    check_key_header(route)
}

fn check_key_header(route: &RouteConfig) -> Result<(), (&'static str, String)> {
    match route.key_header.as_deref().map(str::trim) {
        None | Some("") => Err((
            "key_header",
            "`ordering = \"key\"` needs the header that holds a message's key (e.g. \
             `key_header = \"order-id\"`)"
                .into(),
        )),
        Some(_) => Ok(()),
    }
}

/// A RabbitMQ or NATS route keeps order with one gateway delivering it at a time, holding
/// a key's later messages unacknowledged behind a failed one: `bound` limits what waits.
fn check_held_ordering(
    route: &RouteConfig,
    source: &str,
    bound: &str,
) -> Result<(), (&'static str, String)> {
    if route.on_dead_letter != OnDeadLetter::Release {
        return Err((
            "on_dead_letter",
            format!(
                "\"dead-letter-key\" is supported on embedded routes only for now, not on a \
                 {source} route (a dead letter there lets its key go on)"
            ),
        ));
    }
    if route.max_parked_keys.is_some() {
        return Err((
            "max_parked_keys",
            format!(
                "is not used on a {source} route: what waits behind a failed key is held \
                 unacknowledged, so {bound} bounds it - remove it"
            ),
        ));
    }
    check_key_header(route)
}

/// A Kafka route keeps order by its partitions: the record's key picks the partition, and
/// the route holds a partition while one of its records is in flight or waiting to retry.
fn check_kafka_ordering(route: &RouteConfig) -> Result<(), (&'static str, String)> {
    if route.key_header.is_some() {
        return Err((
            "key_header",
            "a Kafka route is ordered by each record's own key, which also picks its \
             partition: remove `key_header` (a header could put one key on two partitions, \
             read by two gateways, and nothing could order them)"
                .into(),
        ));
    }
    if route.on_dead_letter != OnDeadLetter::Release {
        return Err((
            "on_dead_letter",
            "\"dead-letter-key\" is supported on embedded routes only for now, not on a kafka \
             route (a dead letter there lets its partition go on)"
                .into(),
        ));
    }
    if route.max_parked_keys.is_some() {
        return Err((
            "max_parked_keys",
            "is not used on a Kafka route: it holds at most one record per partition, so its \
             partitions bound what waits - remove it"
                .into(),
        ));
    }
    Ok(())
}

fn check_consumer(c: &ConsumerConfig, lease_ms: u64) -> Result<(), (&'static str, String)> {
    if !(c.url.starts_with("http://") || c.url.starts_with("https://")) {
        return Err(("url", format!("`{}` is not an http(s) URL", c.url)));
    }
    if let Err(e) = url::Url::parse(&c.url) {
        return Err(("url", format!("`{}` is not a valid URL: {e}", c.url)));
    }
    if c.timeout_ms == 0 || c.timeout_ms >= lease_ms {
        return Err((
            "timeout_ms",
            format!(
                "{} must be at least 1 and below gateway.lease_ms ({lease_ms}), or a slow \
                 delivery would be handed out twice",
                c.timeout_ms
            ),
        ));
    }
    if c.concurrency == 0 {
        return Err(("concurrency", "must be at least 1".into()));
    }
    Ok(())
}

impl GatewayConfig {
    /// Read and validate `path`.
    pub fn load(path: &Path) -> Result<GatewayConfig, GatewayConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| GatewayConfigError {
            file: file.clone(),
            field: "(file)".into(),
            message: e.to_string(),
        })?;
        Self::parse(&text, &file)
    }

    /// Tell the one redactor ([`verdict_runtime::redact`]) what in this config is secret:
    /// the passwords and query values of the broker, store and consumer URLs.
    pub fn remember_secrets(&self) {
        let consumers = self.routes.iter().filter_map(|r| r.consumer.as_ref());
        let urls = [self.nats.url.as_str(), self.rabbitmq.url.as_str()]
            .into_iter()
            .chain(self.gateway.store.as_deref())
            .chain(self.telemetry.endpoint.as_deref())
            .chain(consumers.map(|c| c.url.as_str()));
        for url in urls {
            verdict_runtime::redact::remember_url(url);
        }
    }

    /// Relative paths (TLS files, credentials) taken from `base`, the config file's
    /// directory, so a reload or a `verdict check` from elsewhere reads the same files.
    fn resolve_paths(&mut self, base: &Path) {
        if let Some(tls) = &mut self.defaults.consumer_tls {
            *tls = tls.resolved(base);
        }
        for consumer in self.routes.iter_mut().filter_map(|r| r.consumer.as_mut()) {
            consumer.tls = consumer.tls.as_ref().map(|t| t.resolved(base));
        }
        self.nats.resolve_paths(base);
        self.rabbitmq.resolve_paths(base);
        self.kafka = self.kafka.resolved(base);
        self.telemetry = self.telemetry.resolved(base);
    }

    /// Check every consumer's TLS settings (their files read, the key matching its
    /// certificate) where they are written, then give each `https://` consumer without its
    /// own the `[defaults] consumer_tls`.
    fn settle_consumer_tls(&mut self) -> Result<(), (String, String)> {
        let usable = |tls: &TlsConfig, setting: &str| {
            tls.client_config(setting)
                .map(drop)
                .map_err(|e| (e.setting().to_string(), e.problem()))
        };
        if let Some(tls) = &self.defaults.consumer_tls {
            usable(tls, "defaults.consumer_tls")?;
        }
        for (i, route) in self.routes.iter_mut().enumerate() {
            let Some(consumer) = &mut route.consumer else {
                continue;
            };
            let https = consumer.url.starts_with("https://");
            match &consumer.tls {
                Some(_) if !https => {
                    return Err((
                        format!("routes[{i}].consumer.tls"),
                        format!(
                            "set for `{}`, which is not an https:// URL: TLS settings would \
                             be ignored",
                            verdict_runtime::text::redact_url(&consumer.url)
                        ),
                    ));
                }
                Some(tls) => usable(tls, &format!("routes[{i}].consumer.tls"))?,
                None if https => consumer.tls = self.defaults.consumer_tls.clone(),
                None => {}
            }
        }
        Ok(())
    }

    /// Parse and validate TOML; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<GatewayConfig, GatewayConfigError> {
        let err = |field: String, message: String| GatewayConfigError {
            file: file.to_string(),
            field,
            message,
        };
        let de = toml::Deserializer::parse(text)
            .map_err(|e| err("(syntax)".into(), e.message().to_string()))?;
        let mut config: GatewayConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            err(
                if path == "." { "(root)".into() } else { path },
                e.inner().message().to_string(),
            )
        })?;
        // Before anything can fail quoting them: the one redactor learns this config's
        // secrets, so no error, answer or log line of this process shows them.
        config.remember_secrets();
        config.resolve_paths(Path::new(file).parent().unwrap_or(Path::new("")));
        config
            .settle_consumer_tls()
            .map_err(|(field, message)| err(field, message))?;
        config
            .sandbox
            .validate()
            .map_err(|e| err("sandbox".into(), e.to_string()))?;
        for (i, route) in config.routes.iter().enumerate() {
            if !config.policies.contains_key(&route.policy) {
                let known: Vec<&str> = config.policies.keys().map(String::as_str).collect();
                return Err(err(
                    format!("routes[{i}].policy"),
                    format!(
                        "no policy named `{}` (defined: {})",
                        route.policy,
                        known.join(", ")
                    ),
                ));
            }
            if let Some(shadow) = &route.shadow
                && !config.policies.contains_key(&shadow.policy)
            {
                return Err(err(
                    format!("routes[{i}].shadow.policy"),
                    format!("no policy named `{}`", shadow.policy),
                ));
            }
            crate::TopicPattern::parse(&route.topic)
                .map_err(|e| err(format!("routes[{i}].topic"), e.to_string()))?;
            if route.source != SourceKind::Embedded && route.consumer.is_none() {
                return Err(err(
                    format!("routes[{i}].consumer"),
                    format!(
                        "a route consuming from {} needs a consumer to deliver to",
                        route.source.name()
                    ),
                ));
            }
            if route.source == SourceKind::Rabbitmq
                && route.topic.split('.').any(|t| t == "*" || t == ">")
            {
                return Err(err(
                    format!("routes[{i}].topic"),
                    format!(
                        "`{}`: a RabbitMQ route's topic is a queue name; wildcards are not \
                         allowed",
                        route.topic
                    ),
                ));
            }
            if route.source == SourceKind::Kafka
                && let Err(why) = topic_name(&route.topic)
            {
                return Err(err(
                    format!("routes[{i}].topic"),
                    format!(
                        "`{}`: a Kafka route's topic is a topic name, which {why}; wildcards \
                         are not allowed",
                        route.topic
                    ),
                ));
            }
            if matches!(route.source, SourceKind::Rabbitmq | SourceKind::Kafka) {
                // A copy waits in a delay bucket; no bucket is longer than a day, and a
                // longer delay cut to it would come back early.
                let (field, max) = match &route.settings {
                    Some(s) => (
                        format!("routes[{i}].settings.guardrails.max_delay_ms"),
                        s.guardrails.max_delay_ms,
                    ),
                    None => (
                        "defaults.guardrails.max_delay_ms".to_string(),
                        config.defaults.guardrails.max_delay_ms,
                    ),
                };
                if max > MAX_DELAY_BUCKET_MS {
                    return Err(err(
                        field,
                        format!(
                            "{max} ms: {} route `{}` delays in buckets of at most \
                             {MAX_DELAY_BUCKET_MS} ms (a day); a longer delay would come back \
                             early, so cap delays at a day on this route",
                            if route.source == SourceKind::Kafka {
                                "Kafka"
                            } else {
                                "RabbitMQ"
                            },
                            route.topic
                        ),
                    ));
                }
            }
            if let Some(consumer) = &route.consumer {
                check_consumer(consumer, config.gateway.lease_ms).map_err(|(field, message)| {
                    err(format!("routes[{i}].consumer.{field}"), message)
                })?;
            }
            check_ordering(route)
                .map_err(|(field, message)| err(format!("routes[{i}].{field}"), message))?;
            // The gateway delivering a NATS route ordered by key holds a record in the
            // history bucket, rewritten every 2 s and taken over once unchanged for 10 s:
            // the bucket's age limit must outlast that by far.
            let ttl_ms = config.nats.history_ttl_ms;
            if route.source == SourceKind::Nats
                && route.ordering == RouteOrdering::Key
                && ttl_ms != 0
                && ttl_ms < MIN_ORDERED_HISTORY_TTL_MS
            {
                return Err(err(
                    "nats.history_ttl_ms".into(),
                    format!(
                        "{ttl_ms} ms is too short for routes[{i}], ordered by key: the record \
                         naming the gateway that delivers it lives in the history bucket - \
                         use at least {MIN_ORDERED_HISTORY_TTL_MS} ms (or 0, no limit)"
                    ),
                ));
            }
        }
        if let Some((field, problem)) = config.admin.exposure_error() {
            return Err(err(field.into(), problem));
        }
        for (i, entry) in config.admin.allowed_hosts.iter().enumerate() {
            if let Some(why) = AdminConfig::allowed_host_error(entry) {
                return Err(err(
                    format!("admin.allowed_hosts[{i}]"),
                    format!("`{}` {why}", verdict_runtime::text::one_line(entry, 64)),
                ));
            }
        }
        if config.admission.fuel_per_decision == 0 {
            return Err(err(
                "admission.fuel_per_decision".into(),
                "must be at least 1".into(),
            ));
        }
        if config.console.session_idle_s == 0 {
            return Err(err(
                "console.session_idle_s".into(),
                "must be at least 1 (seconds a console login lasts without use)".into(),
            ));
        }
        brokers::check(&config).map_err(|(field, message)| err(field, message))?;
        config
            .telemetry
            .check()
            .map_err(|(field, message)| err(field, message))?;
        let kafka_routes: Vec<&str> = config
            .routes
            .iter()
            .filter(|r| r.source == SourceKind::Kafka)
            .map(|r| r.topic.as_str())
            .collect();
        if !kafka_routes.is_empty() || !config.kafka.route_modes.is_empty() {
            config
                .kafka
                .check(&kafka_routes)
                .map_err(|(field, message)| err(field, message))?;
        }
        if let Some(route) = config.routes.iter().find(|r| {
            r.source == SourceKind::Kafka
                && r.ordering == RouteOrdering::Key
                && config.kafka.route_modes.get(&r.topic) == Some(&KafkaRetryMode::RetryTopics)
        }) {
            return Err(err(
                format!("kafka.route_modes.{}", route.topic),
                "is \"retry-topics\", but the route orders by key (`ordering = \"key\"`), whose \
                 retries wait in place, holding the partition: remove the entry"
                    .into(),
            ));
        }

        for (name, policy) in &config.policies {
            if let Some(pin) = &policy.sha256
                && (pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(err(
                    format!("policies.{name}.sha256"),
                    "must be 64 hex digits".into(),
                ));
            }
        }
        Ok(config)
    }

    /// The JSON Schema of this file, as checked in at `host/registry/verdict.schema.json`.
    pub fn schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(GatewayConfig)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        [sandbox]
        decide_timeout_ms = 20
        max_functions = 20000
        [policies.rules]
        path = "rules.wasm"
        [[routes]]
        topic = "payments.>"
        policy = "rules"
        config = { max_attempts = 5 }
        [[routes]]
        topic = ">"
        policy = "rules"
        settings = { guardrails = { max_attempts = 10 } }
    "#;

    #[test]
    fn a_good_config_parses_with_defaults() {
        let c = GatewayConfig::parse(GOOD, "verdict.toml").unwrap();
        let mut sandbox = Limits::new();
        sandbox.decide_timeout_ms(20).max_functions(20_000);
        assert_eq!(c.sandbox, sandbox);
        assert_eq!(
            c.routes[0].config,
            Some(serde_json::json!({"max_attempts": 5}))
        );
        assert_eq!(
            c.routes[1]
                .settings
                .as_ref()
                .unwrap()
                .guardrails
                .max_attempts,
            10
        );
        assert_eq!(
            c.routes[1]
                .settings
                .as_ref()
                .unwrap()
                .guardrails
                .max_delay_ms,
            6 * 3_600_000
        );
    }

    #[test]
    fn the_admin_api_stays_on_loopback_unless_allowed() {
        let c = GatewayConfig::parse(GOOD, "verdict.toml").unwrap();
        assert!(c.admin.listen.ip().is_loopback());
        let remote = format!("[admin]\nlisten = \"0.0.0.0:9474\"\n{GOOD}");
        let e = GatewayConfig::parse(&remote, "verdict.toml").unwrap_err();
        assert_eq!(e.field, "admin.listen");
        assert!(e.message.contains("allow_remote"), "{e}");
        let v6 = format!("[admin]\nlisten = \"[::1]:9474\"\n{GOOD}");
        assert!(GatewayConfig::parse(&v6, "verdict.toml").is_ok());
    }

    #[test]
    fn the_admin_api_beyond_loopback_needs_tls_or_a_named_proxy() {
        let admin = |lines: &str| {
            let text = format!("[admin]\nlisten = \"0.0.0.0:9474\"\n{lines}\n{GOOD}");
            GatewayConfig::parse(&text, "verdict.toml").map(|c| c.admin)
        };
        let e = admin("allow_remote = true").unwrap_err();
        assert_eq!(e.field, "admin.allow_remote");
        assert!(e.message.contains("without TLS"), "{e}");
        let with_tls = admin("allow_remote = true\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"");
        assert!(with_tls.unwrap().tls());
        let half = admin("allow_remote = true\ntls_cert = \"c.pem\"").unwrap_err();
        assert_eq!(half.field, "admin.tls_key");
        let e = admin("allow_remote = true\nallow_remote_plaintext = true").unwrap_err();
        assert_eq!(e.field, "admin.allowed_hosts");
        let proxied = admin(
            "allow_remote = true\nallow_remote_plaintext = true\nallowed_hosts = [\"verdict.internal\"]",
        );
        assert!(!proxied.unwrap().tls());
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let cases = [
            (
                GOOD.replace("decide_timeout_ms = 20", "decide_timeout_ms = \"soon\""),
                "sandbox.decide_timeout_ms",
            ),
            (
                GOOD.replace("decide_timeout_ms = 20", "decide_timeout = 20"),
                "sandbox",
            ),
            (
                GOOD.replace("decide_timeout_ms = 20", "decide_timeout_ms = 0"),
                "sandbox",
            ),
            (
                GOOD.replace(
                    "policy = \"rules\"\n        config",
                    "policy = \"rulez\"\n        config",
                ),
                "routes[0].policy",
            ),
            (GOOD.replace("payments.>", "payments..x"), "routes[0].topic"),
            (
                GOOD.replace(
                    "path = \"rules.wasm\"",
                    "path = \"rules.wasm\"\n        sha256 = \"abc\"",
                ),
                "policies.rules.sha256",
            ),
            (
                GOOD.replace("max_attempts = 10", "max_atempts = 10"),
                "routes[1].settings.guardrails",
            ),
            ("[[routes]\n".to_string(), "(syntax)"),
            (
                GOOD.replace("topic = \">\"", "topic = \">\"\n        source = \"sqs\""),
                "routes[1].source",
            ),
            (format!("[nats]\nack_wait = 5\n{GOOD}"), "nats"),
            (
                format!("[console]\nsession_idle_s = 0\n{GOOD}"),
                "console.session_idle_s",
            ),
            (
                GOOD.replace(
                    "max_attempts = 10",
                    "max_attempts = 10, retry_budget = { min_per_s = 0 }",
                ),
                "routes[1].settings.guardrails.retry_budget",
            ),
        ];
        for (text, field) in cases {
            let e = GatewayConfig::parse(&text, "verdict.toml").unwrap_err();
            assert!(e.field.starts_with(field), "want {field}, got {e}");
            assert!(e.to_string().starts_with("verdict.toml: "), "{e}");
        }
    }

    #[test]
    fn key_ordering_needs_a_key_and_a_source_that_can_hold_it_back() {
        let config = |route: &str, gateway: &str| {
            format!(
                r#"
        [gateway]
        {gateway}
        [policies.rules]
        path = "rules.wasm"
        [[routes]]
        topic = "orders"
        policy = "rules"
        consumer = {{ url = "http://127.0.0.1:1/" }}
        {route}
        "#
            )
        };
        let ok = GatewayConfig::parse(
            &config("ordering = \"key\"\nkey_header = \"order-id\"", ""),
            "v.toml",
        )
        .unwrap();
        assert_eq!(ok.routes[0].ordering, RouteOrdering::Key);
        assert_eq!(ok.routes[0].on_dead_letter, OnDeadLetter::Release);
        let whole_keys = GatewayConfig::parse(
            &config(
                "ordering = \"key\"\nkey_header = \"order-id\"\non_dead_letter = \"dead-letter-key\"",
                "",
            ),
            "v.toml",
        )
        .unwrap();
        assert_eq!(
            whole_keys.routes[0].on_dead_letter,
            OnDeadLetter::DeadLetterKey
        );
        // A shared store holds keys back as the embedded one does.
        let shared = GatewayConfig::parse(
            &config(
                "ordering = \"key\"\nkey_header = \"order-id\"",
                "store = \"postgres://verdict@127.0.0.1/verdict\"",
            ),
            "v.toml",
        )
        .unwrap();
        assert_eq!(shared.routes[0].key_header.as_deref(), Some("order-id"));
        // Kafka orders by the record's key, holding its partition.
        let kafka = GatewayConfig::parse(
            &config("ordering = \"key\"\nsource = \"kafka\"", ""),
            "v.toml",
        )
        .unwrap();
        assert_eq!(kafka.routes[0].ordering, RouteOrdering::Key);
        // RabbitMQ orders by a header, with one consumer per queue.
        let rabbitmq = GatewayConfig::parse(
            &config(
                "ordering = \"key\"\nkey_header = \"order-id\"\nsource = \"rabbitmq\"",
                "",
            ),
            "v.toml",
        )
        .unwrap();
        assert_eq!(rabbitmq.routes[0].key_header.as_deref(), Some("order-id"));
        // NATS too: one gateway delivers the route at a time.
        let nats = GatewayConfig::parse(
            &config(
                "ordering = \"key\"\nkey_header = \"order-id\"\nsource = \"nats\"",
                "",
            ),
            "v.toml",
        )
        .unwrap();
        assert_eq!(nats.routes[0].ordering, RouteOrdering::Key);
        let short_ttl = config(
            "ordering = \"key\"\nkey_header = \"order-id\"\nsource = \"nats\"\n\
             [nats]\nhistory_ttl_ms = 5000",
            "",
        );
        let e = GatewayConfig::parse(&short_ttl, "v.toml").unwrap_err();
        assert_eq!(e.field, "nats.history_ttl_ms", "{e}");
        assert!(e.message.contains("at least 60000 ms"), "{e}");
        let kafka_blocking = "ordering = \"key\"\nsource = \"kafka\"\n[kafka]\n\
                              route_modes = { orders = \"blocking\" }";
        GatewayConfig::parse(&config(kafka_blocking, ""), "v.toml").unwrap();
        let cases = [
            (
                config(
                    "ordering = \"key\"\nsource = \"kafka\"\n[kafka]\n\
                     route_modes = { orders = \"retry-topics\" }",
                    "",
                ),
                "kafka.route_modes.orders",
                "wait in place",
            ),
            (
                config(
                    "ordering = \"key\"\nsource = \"kafka\"\nkey_header = \"order-id\"",
                    "",
                ),
                "routes[0].key_header",
                "record's own key",
            ),
            (
                config(
                    "ordering = \"key\"\nsource = \"kafka\"\non_dead_letter = \"dead-letter-key\"",
                    "",
                ),
                "routes[0].on_dead_letter",
                "embedded routes only",
            ),
            (
                config(
                    "ordering = \"key\"\nsource = \"kafka\"\nmax_parked_keys = 0",
                    "",
                ),
                "routes[0].max_parked_keys",
                "one record per partition",
            ),
            (
                config("ordering = \"key\"\nsource = \"rabbitmq\"", ""),
                "routes[0].key_header",
                "needs the header",
            ),
            (
                config(
                    "ordering = \"key\"\nkey_header = \"order-id\"\nsource = \"rabbitmq\"\n\
                     on_dead_letter = \"dead-letter-key\"",
                    "",
                ),
                "routes[0].on_dead_letter",
                "not on a rabbitmq route",
            ),
            (
                config(
                    "ordering = \"key\"\nkey_header = \"order-id\"\nsource = \"rabbitmq\"\n\
                     max_parked_keys = 10",
                    "",
                ),
                "routes[0].max_parked_keys",
                "prefetch",
            ),
            (
                config("ordering = \"key\"", ""),
                "routes[0].key_header",
                "needs the header",
            ),
            (
                config("key_header = \"order-id\"", ""),
                "routes[0].key_header",
                "`ordering` is not",
            ),
            (
                config("ordering = \"key\"\nsource = \"nats\"", ""),
                "routes[0].key_header",
                "needs the header",
            ),
            (
                config(
                    "ordering = \"key\"\nkey_header = \"order-id\"\nsource = \"nats\"\n\
                     max_parked_keys = 10",
                    "",
                ),
                "routes[0].max_parked_keys",
                "route's room",
            ),
            (
                config(
                    "ordering = \"key\"\nkey_header = \"order-id\"\nsource = \"nats\"\n\
                     on_dead_letter = \"dead-letter-key\"",
                    "",
                ),
                "routes[0].on_dead_letter",
                "not on a nats route",
            ),
            (
                config("ordering = \"fifo\"", ""),
                "routes[0].ordering",
                "unknown variant",
            ),
            (
                config("max_parked_keys = 10", ""),
                "routes[0].max_parked_keys",
                "needs `ordering = \"key\"`",
            ),
            (
                config(
                    "ordering = \"key\"\nkey_header = \"order-id\"\nmax_parked_keys = 0",
                    "",
                ),
                "routes[0].max_parked_keys",
                "at least 1",
            ),
            (
                config("on_dead_letter = \"dead-letter-key\"", ""),
                "routes[0].on_dead_letter",
                "needs `ordering = \"key\"`",
            ),
            (
                config(
                    "ordering = \"key\"\nkey_header = \"order-id\"\non_dead_letter = \"park\"",
                    "",
                ),
                "routes[0].on_dead_letter",
                "unknown variant",
            ),
        ];
        for (text, field, says) in cases {
            let e = GatewayConfig::parse(&text, "v.toml").unwrap_err();
            assert!(e.field.starts_with(field), "want {field}, got {e}");
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn a_rabbitmq_route_may_not_delay_longer_than_its_longest_bucket() {
        let config = r#"
        [policies.rules]
        path = "rules.wasm"
        [[routes]]
        topic = "orders"
        source = "rabbitmq"
        policy = "rules"
        consumer = { url = "http://127.0.0.1:1/" }
        settings = { guardrails = { max_delay_ms = 90000000 } }
        "#;
        let e = GatewayConfig::parse(config, "v.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("routes[0].settings.guardrails.max_delay_ms") && e.contains("a day"),
            "{e}"
        );
        let day = config.replace("90000000", "86400000");
        assert!(GatewayConfig::parse(&day, "v.toml").is_ok());
        let embedded = config.replace("source = \"rabbitmq\"", "");
        let embedded = embedded.replace("consumer = { url = \"http://127.0.0.1:1/\" }", "");
        assert!(GatewayConfig::parse(&embedded, "v.toml").is_ok());
    }

    #[test]
    fn broker_routes_need_a_consumer_and_rabbitmq_topics_are_queue_names() {
        let consumer = "consumer = { url = \"http://127.0.0.1:8081/\" }";
        let route = |topic: &str, source: &str, consumer: &str| {
            format!(
                "[policies.rules]\npath = \"r.wasm\"\n[[routes]]\ntopic = \"{topic}\"\n\
                 policy = \"rules\"\nsource = \"{source}\"\n{consumer}\n"
            )
        };
        let ok = GatewayConfig::parse(&route("orders.>", "nats", consumer), "v.toml").unwrap();
        assert_eq!(ok.routes[0].source, SourceKind::Nats);
        assert_eq!(ok.nats.url, "nats://127.0.0.1:4222");
        assert!(GatewayConfig::parse(&route("orders", "rabbitmq", consumer), "v.toml").is_ok());
        let e =
            GatewayConfig::parse(&route("orders.*", "rabbitmq", consumer), "v.toml").unwrap_err();
        assert_eq!(e.field, "routes[0].topic");
        assert!(e.message.contains("queue name"), "{e}");
        let e = GatewayConfig::parse(&route("orders", "nats", ""), "v.toml").unwrap_err();
        assert_eq!(e.field, "routes[0].consumer");
        assert!(e.message.contains("nats"), "{e}");
    }

    #[test]
    fn the_shipped_examples_are_valid() {
        // The examples ship with the `verdict` binary.
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        for name in ["quickstart.toml", "brokers.toml"] {
            let config =
                GatewayConfig::load(&examples.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!config.routes.is_empty(), "{name}");
        }
        let brokers = GatewayConfig::load(&examples.join("brokers.toml")).unwrap();
        let sources: Vec<_> = brokers.routes.iter().map(|r| r.source).collect();
        use SourceKind::{Nats, Rabbitmq};
        assert_eq!(sources, [Nats, Rabbitmq]);
    }
}
