//! `[nats]` and `[rabbitmq]`: the brokers routes with `source = "nats"` or
//! `source = "rabbitmq"` consume from.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use super::Secret;
use verdict_tls::TlsConfig;

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
    /// Refuse to talk to the server without TLS. Implied by a `tls://` URL or a `tls`
    /// table.
    pub tls_required: bool,
    /// TLS to the server: a private CA, a client certificate for a server that verifies
    /// clients, the name its certificate carries.
    pub tls: Option<TlsConfig>,
    /// A credentials file: a user JWT and its NKey seed, as `nsc` writes them (servers in
    /// operator mode). Relative to the config file.
    pub creds_file: Option<PathBuf>,
    /// An NKey seed (`SU...`) for a server that authenticates users by NKey.
    pub nkey_seed: Option<Secret>,
    /// The token a server with token authentication expects.
    pub token: Option<Secret>,
    /// A user name, logged in with `password`.
    pub user: Option<String>,
    /// The password of `user`.
    pub password: Option<Secret>,
}

impl NatsConfig {
    /// Whether connections to the server must use TLS.
    pub fn wants_tls(&self) -> bool {
        self.tls_required || self.tls.is_some() || self.url.starts_with("tls://")
    }

    /// The credential settings that are set, by name: at most one may be.
    pub fn credentials_set(&self) -> Vec<&'static str> {
        [
            ("nats.creds_file", self.creds_file.is_some()),
            ("nats.nkey_seed", self.nkey_seed.is_some()),
            ("nats.token", self.token.is_some()),
            ("nats.user", self.user.is_some() || self.password.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }

    pub(crate) fn resolve_paths(&mut self, base: &std::path::Path) {
        self.tls = self.tls.as_ref().map(|t| t.resolved(base));
        self.creds_file = self.creds_file.as_ref().map(|p| base.join(p));
        for secret in [&mut self.nkey_seed, &mut self.token, &mut self.password] {
            *secret = secret.as_ref().map(|s| s.resolved(base));
        }
    }
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
            tls_required: false,
            tls: None,
            creds_file: None,
            nkey_seed: None,
            token: None,
            user: None,
            password: None,
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
    /// Prefix of the delay exchanges and queues, one per delay bucket:
    /// `<prefix>.wait.<ms>` (classic buckets, expiring into the due queue `<prefix>.due`)
    /// or `<prefix>.qq.<ms>` (quorum).
    pub delay_prefix: String,
    /// The kind of queue a retry waits in. `classic` (the default): at its expiry the
    /// broker moves it to the gateways' due queue, from which a gateway moves it to its
    /// route's queue with a publisher confirm - a route queue that is deleted or refusing
    /// keeps it waiting, never drops it. `quorum`: the broker moves it back itself with
    /// at-least-once dead-lettering (RabbitMQ 3.10 or later; see the README for a broker
    /// fault to know about first).
    pub delay_queues: DelayQueues,
    /// The queue audit records (discards) are published to; declared durable.
    pub audit_queue: String,
    /// The key that signs the attempt history a retried message carries in its headers
    /// (relative to the config file). Every gateway consuming the same queues needs the
    /// same key. Empty: `<storage dir>/history.key`, created (32 random bytes, mode 0600)
    /// when missing.
    pub history_key_file: PathBuf,
    /// TLS to the server (an `amqps://` URL): a private CA, a client certificate (with
    /// `?auth_mechanism=external` in the URL, the certificate is the login), the name its
    /// certificate carries.
    pub tls: Option<TlsConfig>,
    /// The password of the URL's user, from a file or the environment (then the URL holds
    /// none).
    pub password: Option<Secret>,
}

/// The kind of queue RabbitMQ retries wait in (`[rabbitmq] delay_queues`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DelayQueues {
    /// Quorum queues moving expired retries with at-least-once dead-lettering.
    Quorum,
    /// Classic queues expiring into the due queue; a gateway moves each retry on from
    /// there with a confirm.
    Classic,
}

impl RabbitmqConfig {
    pub(crate) fn resolve_paths(&mut self, base: &std::path::Path) {
        self.tls = self.tls.as_ref().map(|t| t.resolved(base));
        self.password = self.password.as_ref().map(|s| s.resolved(base));
    }
}

impl RabbitmqConfig {
    /// The name of the delay bucket of `bucket_ms` (its exchange and its queue). Quorum and
    /// classic buckets have names of their own: a queue's kind cannot change, and buckets
    /// left by a gateway set the other way drain on their own.
    pub fn bucket_name(&self, bucket_ms: u64) -> String {
        match self.delay_queues {
            DelayQueues::Quorum => format!("{}.qq.{bucket_ms}", self.delay_prefix),
            DelayQueues::Classic => format!("{}.wait.{bucket_ms}", self.delay_prefix),
        }
    }

    /// The queue classic buckets expire into: every gateway with classic buckets consumes
    /// it and moves each retry on to the queue it names.
    pub fn due_queue(&self) -> String {
        format!("{}.due", self.delay_prefix)
    }

    /// Where the due queue's gateways put a message that names no queue to go back to
    /// (published there by hand, not by a gateway): kept for an operator, never dropped.
    pub fn due_invalid_queue(&self) -> String {
        format!("{}.due.invalid", self.delay_prefix)
    }

    /// Every queue and exchange name a gateway may create under `delay_prefix`: the buckets
    /// of both kinds for every delay up to `max_bucket_ms` (`buckets` lists them, rounded
    /// as delays are), the due queues, and the buckets of earlier versions
    /// (`<prefix>.<ms>`). For tools that clean a prefix away.
    pub fn delay_names(&self, buckets: &[u64]) -> Vec<String> {
        let p = &self.delay_prefix;
        let mut names = vec![self.due_queue(), self.due_invalid_queue()];
        for b in buckets {
            names.push(format!("{p}.wait.{b}"));
            names.push(format!("{p}.qq.{b}"));
            names.push(format!("{p}.{b}"));
        }
        names
    }
}

impl Default for RabbitmqConfig {
    fn default() -> Self {
        RabbitmqConfig {
            url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            prefetch: 64,
            delay_prefix: "verdict.delay".into(),
            delay_queues: DelayQueues::Classic,
            audit_queue: "verdict.audit".into(),
            history_key_file: PathBuf::new(),
            tls: None,
            password: None,
        }
    }
}

/// What can be known about the broker settings without a connection: subjects that would
/// overlap (JetStream refuses a stream whose subjects overlap another's, and the gateway
/// would retry that forever), names a broker refuses. `(field, message)` on error.
pub(crate) fn check(config: &super::GatewayConfig) -> Result<(), (String, String)> {
    use crate::config::SourceKind;
    let topics = |kind| {
        config
            .routes
            .iter()
            .filter(move |r| r.source == kind)
            .map(|r| r.topic.clone())
    };
    let nats_routes: Vec<String> = topics(SourceKind::Nats).collect();
    if !nats_routes.is_empty() {
        let n = &config.nats;
        check_nats_access(n)?;
        for (field, name) in [
            ("nats.stream", &n.stream),
            ("nats.dlq_stream", &n.dlq_stream),
            ("nats.audit_stream", &n.audit_stream),
        ] {
            if name.is_empty()
                || name
                    .chars()
                    .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
            {
                return Err((
                    field.into(),
                    format!(
                        "`{name}`: a stream name may not be empty or hold spaces, `.`, `*`, `>`, `/` or `\\`"
                    ),
                ));
            }
        }
        let bucket_ok = !n.history_bucket.is_empty()
            && n.history_bucket
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !bucket_ok {
            return Err((
                "nats.history_bucket".into(),
                format!(
                    "`{}`: a bucket name holds only letters, digits, `-` and `_`",
                    n.history_bucket
                ),
            ));
        }
        let source: Vec<String> = if n.subjects.is_empty() {
            nats_routes.clone()
        } else {
            n.subjects.clone()
        };
        let own = [
            (
                "nats.dlq_subject_prefix",
                format!("{}.>", n.dlq_subject_prefix),
            ),
            (
                "nats.audit_subject_prefix",
                format!("{}.>", n.audit_subject_prefix),
            ),
            ("nats.history_bucket", format!("$KV.{}.>", n.history_bucket)),
        ];
        for (field, subjects) in &own {
            if let Some(clash) = source.iter().find(|s| subjects_overlap(s, subjects)) {
                return Err((
                    (*field).into(),
                    format!(
                        "`{subjects}` overlaps the source stream's subject `{clash}`: \
                         JetStream refuses overlapping streams (choose another prefix)"
                    ),
                ));
            }
        }
        if subjects_overlap(&own[0].1, &own[1].1) {
            return Err((
                "nats.audit_subject_prefix".into(),
                format!("`{}` overlaps the DLQ subjects `{}`", own[1].1, own[0].1),
            ));
        }
        for route in &nats_routes {
            if !source.iter().any(|s| covers_subject(s, route)) {
                return Err((
                    "nats.subjects".into(),
                    format!("no subject of the source stream captures route `{route}`"),
                ));
            }
        }
    }
    if topics(SourceKind::Rabbitmq).next().is_some() {
        // Declared by name as AMQP short strings (255 bytes): a longer one panics in the
        // client when the first delay or audit record needs it, long after startup.
        let r = &config.rabbitmq;
        check_rabbitmq_access(r)?;
        let longest_bucket = r.bucket_name(MAX_DELAY_BUCKET_MS);
        for (field, name) in [
            ("rabbitmq.delay_prefix", &longest_bucket),
            ("rabbitmq.audit_queue", &r.audit_queue),
        ] {
            if name.len() > 255 {
                return Err((
                    field.into(),
                    format!(
                        "RabbitMQ name `{}...` is {} bytes, past 255",
                        verdict_runtime::text::one_line(name, 32),
                        name.len()
                    ),
                ));
            }
        }
    }
    for queue in topics(SourceKind::Rabbitmq) {
        let dlq = config
            .gateway
            .dlq_naming
            .dlq_for(&queue, &config.gateway.global_dlq);
        for name in [&queue, &dlq] {
            if name.len() > 255 {
                return Err((
                    "routes.topic".into(),
                    format!("RabbitMQ queue `{name}` is longer than 255 bytes"),
                ));
            }
        }
    }
    Ok(())
}

/// Whether some subject matches both patterns.
pub fn subjects_overlap(a: &str, b: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    let mut i = 0;
    loop {
        match (a.get(i), b.get(i)) {
            (Some(&">"), Some(_)) | (Some(_), Some(&">")) => return true,
            (None, None) => return true,
            (Some(x), Some(y)) if *x == "*" || *y == "*" || x == y => i += 1,
            _ => return false,
        }
    }
}

/// The longest RabbitMQ delay bucket (a day): bucket queues are named after their delay
/// ([`RabbitmqConfig::bucket_name`]), so this sets the longest queue name the config must
/// allow.
pub const MAX_DELAY_BUCKET_MS: u64 = 24 * 3_600_000;

/// Whether every subject `narrow` matches, `wide` matches too.
pub fn covers_subject(wide: &str, narrow: &str) -> bool {
    let (wide, narrow): (Vec<&str>, Vec<&str>) =
        (wide.split('.').collect(), narrow.split('.').collect());
    for (i, w) in wide.iter().enumerate() {
        match (*w, narrow.get(i)) {
            (">", Some(_)) => return true,
            (_, None) | (_, Some(&">")) => return false,
            ("*", Some(_)) => {}
            (w, Some(n)) if w == *n => {}
            _ => return false,
        }
    }
    wide.len() == narrow.len()
}

/// TLS and credentials of `[rabbitmq]`: the TLS files usable and meant for `amqps://`, the
/// password in one place.
fn check_rabbitmq_access(r: &RabbitmqConfig) -> Result<(), (String, String)> {
    let tls_url = r.url.starts_with("amqps://");
    if !(tls_url || r.url.starts_with("amqp://")) {
        return Err((
            "rabbitmq.url".into(),
            format!(
                "`{}`: the gateway speaks `amqp://` and `amqps://`",
                verdict_runtime::text::redact_url(&r.url)
            ),
        ));
    }
    if let Some(tls) = &r.tls {
        if !tls_url {
            return Err((
                "rabbitmq.tls".into(),
                "set for an `amqp://` URL: TLS settings would be ignored (use `amqps://`)".into(),
            ));
        }
        tls.client_config("rabbitmq.tls")
            .map_err(|e| (e.setting().to_string(), e.problem()))?;
    }
    if logs_in_with_certificate(&r.url) {
        if !tls_url || r.tls.as_ref().is_none_or(|t| t.client_cert.is_none()) {
            return Err((
                "rabbitmq.tls.client_cert".into(),
                "not set, and the URL logs in with `auth_mechanism=external`: the client \
                 certificate (over `amqps://`) is the login"
                    .into(),
            ));
        }
        if r.password.is_some() {
            return Err((
                "rabbitmq.password".into(),
                "set, and the URL logs in with the client certificate \
                 (`auth_mechanism=external`): the password would be ignored"
                    .into(),
            ));
        }
    }
    let authority = r
        .url
        .split_once("://")
        .map_or("", |(_, rest)| rest.split(['/', '?']).next().unwrap_or(""));
    if r.password.is_some()
        && authority
            .rsplit_once('@')
            .is_some_and(|(user, _)| user.contains(':'))
    {
        return Err((
            "rabbitmq.password".into(),
            "set, and the URL holds a password too: keep it out of the URL".into(),
        ));
    }
    Ok(())
}

/// Whether an AMQP URL asks for the `EXTERNAL` login (the client certificate's subject is
/// the user).
pub fn logs_in_with_certificate(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        query
            .split('&')
            .any(|pair| pair.eq_ignore_ascii_case("auth_mechanism=external"))
    })
}

/// TLS and credentials of `[nats]`: the TLS files readable and usable, one way to log in.
fn check_nats_access(n: &NatsConfig) -> Result<(), (String, String)> {
    if let Some(tls) = &n.tls {
        tls.client_config("nats.tls")
            .map_err(|e| (e.setting().to_string(), e.problem()))?;
    }
    if !(n.url.starts_with("nats://") || n.url.starts_with("tls://")) {
        return Err((
            "nats.url".into(),
            format!(
                "`{}`: the gateway speaks `nats://` and `tls://`",
                verdict_runtime::text::redact_url(&n.url)
            ),
        ));
    }
    let set = n.credentials_set();
    if set.len() > 1 {
        return Err((
            set[1].into(),
            format!("only one way to log in may be set; {} is set too", set[0]),
        ));
    }
    if n.user.is_some() != n.password.is_some() {
        let field = if n.user.is_some() {
            "nats.user"
        } else {
            "nats.password"
        };
        return Err((
            field.into(),
            "needs nats.user and nats.password together".into(),
        ));
    }
    if !set.is_empty() && n.url.contains('@') {
        return Err((
            "nats.url".into(),
            format!(
                "holds credentials and {} is set too: keep them out of the URL",
                set[0]
            ),
        ));
    }
    if let Some(path) = &n.creds_file
        && let Err(e) = std::fs::metadata(path)
    {
        return Err((
            "nats.creds_file".into(),
            format!("{}: cannot be read: {e}", path.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_overlap_when_one_subject_matches_both() {
        assert!(subjects_overlap("orders.>", "orders.eu"));
        assert!(subjects_overlap("verdict.dlq.>", ">"));
        assert!(subjects_overlap("a.*.c", "a.b.*"));
        assert!(!subjects_overlap("orders.>", "verdict.dlq.>"));
        assert!(!subjects_overlap("a.b", "a.b.c"));
        assert!(!subjects_overlap("a.*", "a.b.c"));
    }

    /// A config with one RabbitMQ route and `section` in `[rabbitmq]`, parsed.
    fn parse(section: &str) -> Result<crate::GatewayConfig, crate::GatewayConfigError> {
        let config = format!(
            "[rabbitmq]\n{section}\n[policies.rules]\npath = \"r.wasm\"\n[[routes]]\n\
             topic = \"orders\"\npolicy = \"rules\"\nsource = \"rabbitmq\"\n\
             consumer = {{ url = \"http://127.0.0.1:8081/\" }}\n"
        );
        crate::GatewayConfig::parse(&config, "v.toml")
    }

    #[test]
    fn rabbitmq_names_past_a_short_string_are_refused_when_the_config_is_read() {
        // Found by `tests/fuzz.rs`: accepted, then a panic in the client at the first delay
        // bucket or audit record.
        for (section, field) in [
            (
                format!("delay_prefix = \"{}\"", "d".repeat(250)),
                "rabbitmq.delay_prefix",
            ),
            (
                format!("audit_queue = \"{}\"", "a".repeat(256)),
                "rabbitmq.audit_queue",
            ),
        ] {
            let e = parse(&section).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.len() < 100, "{e}");
        }
        assert!(parse(&format!("delay_prefix = \"{}\"", "d".repeat(200))).is_ok());
    }

    #[test]
    fn a_certificate_login_without_a_client_certificate_is_refused_naming_it() {
        for section in [
            "url = \"amqps://127.0.0.1:5671/%2f?auth_mechanism=external\"",
            "url = \"amqps://127.0.0.1:5671/%2f?heartbeat=10&AUTH_MECHANISM=EXTERNAL\"\ntls = {}",
            "url = \"amqp://127.0.0.1:5672/%2f?auth_mechanism=external\"",
        ] {
            let e = parse(section).unwrap_err();
            assert_eq!(e.field, "rabbitmq.tls.client_cert", "{section}: {e}");
            assert!(e.message.contains("auth_mechanism=external"), "{e}");
        }
        assert!(parse("url = \"amqps://u@127.0.0.1:5671/%2f?heartbeat=10\"\ntls = {}").is_ok());
        assert!(!logs_in_with_certificate(
            "amqps://h/%2f?auth_mechanism=plain"
        ));
    }
}
