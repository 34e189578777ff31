//! The librdkafka settings every client of the source shares (consumer, producer, admin):
//! the brokers, TLS and SASL from `[kafka]`, with the password read from its file or
//! variable - and taught to the redactor - when the client is made, never written in the
//! config. And what librdkafka reports going wrong underneath a call (a TLS handshake
//! refused, a login failed, a broker out of reach), said where an operator looks
//! ([`Reporting`]), and `verdict check --probe`'s look at the cluster ([`probe`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::KafkaError;
use verdict_registry::{KafkaConfig, SaslMechanism};

use crate::health::Readiness;

/// What librdkafka reports as an error, as an operator reads it: redacted, one bounded
/// line, with the setting to look at when the text says which.
pub(crate) fn error_text(reason: &str) -> String {
    // librdkafka ends a line with how long it took and how many were suppressed: the same
    // failure, said again, must read the same.
    let reason = reason.split(" (after ").next().unwrap_or(reason);
    let text = verdict_runtime::text::one_line(
        &verdict_runtime::redact::redact(reason),
        verdict_runtime::text::MAX_MESSAGE_BYTES,
    );
    let lower = text.to_ascii_lowercase();
    // Not `ssl` or `sasl` alone: every line names its broker as `sasl_ssl://host:port`.
    let hint = if lower.contains("ssl handshake") || lower.contains("certificate") {
        " (check [kafka] tls)"
    } else if lower.contains("authentication") || lower.contains("scram") {
        " (check [kafka] sasl)"
    } else {
        ""
    };
    format!("kafka: {text}{hint}")
}

/// A client context that says what librdkafka reports going wrong: `/readyz`'s reason, and
/// a warning (see [`report`]).
#[derive(Clone)]
pub(crate) struct Reporting {
    pub(crate) ready: Readiness,
}

impl ClientContext for Reporting {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        report(&self.ready, &error, reason);
    }
}

impl ConsumerContext for Reporting {}

/// librdkafka's own log lines, at debug level: what an operator must see of them comes
/// through [`report`] once, not from each of its threads.
pub(crate) fn log(level: RDKafkaLogLevel, fac: &str, log_message: &str) {
    tracing::debug!(
        level = ?level,
        facility = %fac,
        "librdkafka: {}",
        verdict_runtime::text::one_line(
            &verdict_runtime::redact::redact(log_message),
            verdict_runtime::text::MAX_MESSAGE_BYTES
        )
    );
}

/// The least time between two warnings from librdkafka's errors: a broker going away makes
/// each of its threads say so, several times a second.
const WARN_EVERY_MS: u64 = 10_000;

/// When [`report`] last logged a warning (ms since the epoch), over every client.
static LAST_WARNED_MS: AtomicU64 = AtomicU64::new(0);

/// Say `reason` (what librdkafka said of `error`) where an operator looks: always as
/// `/readyz`'s reason; as a warning when the text is new to the readiness (or a minute old),
/// and no more than once every [`WARN_EVERY_MS`].
pub(crate) fn report(ready: &Readiness, error: &KafkaError, reason: &str) {
    let text = error_text(reason);
    if ready.warn(text.clone()) {
        let now = crate::pipeline::now_ms();
        let last = LAST_WARNED_MS.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= WARN_EVERY_MS
            && LAST_WARNED_MS
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(error = %error, "{text}");
        } else {
            tracing::debug!(error = %error, "{text}");
        }
    }
}

/// Collects what librdkafka reports, for a one-off call that wants to say why it failed.
#[derive(Clone, Default)]
struct Collecting(Arc<Mutex<Vec<String>>>);

impl ClientContext for Collecting {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log(level, fac, log_message);
    }

    fn error(&self, _error: KafkaError, reason: &str) {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() < 4 {
            seen.push(reason.to_string());
        }
    }
}

impl ConsumerContext for Collecting {}

/// Read the cluster's metadata once with `config`'s settings (TLS, SASL): what was there,
/// or why not, naming the setting to look at. Nothing is created or sent.
pub async fn probe(config: &KafkaConfig) -> Result<String, String> {
    let client = client_config(config)?;
    let collected = Collecting::default();
    let consumer: BaseConsumer<Collecting> = client
        .create_with_context(collected.clone())
        .map_err(|e| format!("kafka: {e}"))?;
    let metadata = tokio::task::spawn_blocking(move || {
        let metadata = consumer.fetch_metadata(None, Duration::from_secs(10));
        // librdkafka hands its errors to the context only when the client is polled.
        let _ = consumer.poll(Duration::from_millis(100));
        metadata
    })
    .await
    .map_err(|e| format!("kafka: {e}"))?;
    match metadata {
        Ok(metadata) => {
            let transport = if config.tls.is_some() {
                "TLS"
            } else {
                "plain TCP"
            };
            let login = config
                .sasl
                .as_ref()
                .map(|s| format!(", SASL {} as `{}`", s.mechanism.name(), s.username))
                .unwrap_or_default();
            Ok(format!(
                "{} broker(s), {} topic(s) visible, {transport}{login}",
                metadata.brokers().len(),
                metadata.topics().len()
            ))
        }
        Err(e) => {
            let seen = collected.0.lock().unwrap_or_else(PoisonError::into_inner);
            Err(match seen.first() {
                Some(reason) => format!("{e}: {}", error_text(reason)),
                None => error_text(&e.to_string()),
            })
        }
    }
}

/// The settings of a client of the brokers `config` names; the error names the setting
/// that could not be read.
pub(crate) fn client_config(config: &KafkaConfig) -> Result<ClientConfig, String> {
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", config.bootstrap_servers.join(","))
        .set("client.id", "verdict")
        // librdkafka's own log lines go to stderr at this level and above: its errors
        // reach the gateway as errors of the calls that failed.
        .set("log_level", "3");
    let tls = config.tls.is_some();
    let protocol = match (tls, &config.sasl) {
        (false, None) => "plaintext",
        (true, None) => "ssl",
        (false, Some(_)) => "sasl_plaintext",
        (true, Some(_)) => "sasl_ssl",
    };
    client.set("security.protocol", protocol);
    if let Some(t) = &config.tls {
        let path = |p: &std::path::PathBuf| p.display().to_string();
        if let Some(ca) = &t.ca_file {
            client.set("ssl.ca.location", path(ca));
        }
        if let (Some(cert), Some(key)) = (&t.client_cert, &t.client_key) {
            client
                .set("ssl.certificate.location", path(cert))
                .set("ssl.key.location", path(key));
        }
    }
    if let Some(sasl) = &config.sasl {
        let password = sasl
            .password
            .read()
            .map_err(|e| format!("kafka.sasl.password: {e}"))?;
        client
            .set("sasl.mechanism", sasl.mechanism.name())
            .set("sasl.username", &sasl.username)
            .set("sasl.password", password);
        if sasl.mechanism == SaslMechanism::Plain && !tls {
            tracing::warn!(
                "kafka: SASL PLAIN without TLS sends the password in the clear; set [kafka] tls"
            );
        }
    }
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_registry::SaslConfig;

    #[test]
    fn what_librdkafka_says_names_the_setting_to_look_at() {
        let tls = error_text(
            "sasl_ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL \
             routines::certificate verify failed",
        );
        assert!(tls.ends_with("(check [kafka] tls)"), "{tls}");
        let sasl = error_text(
            "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication \
             failed during authentication due to invalid credentials with SASL mechanism \
             SCRAM-SHA-512",
        );
        assert!(sasl.ends_with("(check [kafka] sasl)"), "{sasl}");
        let down = error_text("127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed");
        assert!(!down.contains("check"), "{down}");
        let hostile = error_text("line\nbreak\u{1b}[31m");
        assert!(
            !hostile.contains('\n') && !hostile.contains('\u{1b}'),
            "{hostile:?}"
        );
    }
    use verdict_registry::config::{Secret, TlsConfig};

    #[test]
    fn tls_and_sasl_choose_the_protocol_and_the_password_comes_from_its_file() {
        let dir = std::env::temp_dir().join(format!("verdict-kafka-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pass"), "s3cret-kafka-password\n").unwrap();
        let mut config = KafkaConfig::default();
        assert_eq!(
            client_config(&config).unwrap().get("security.protocol"),
            Some("plaintext")
        );
        config.tls = Some(TlsConfig {
            ca_file: Some(dir.join("ca.pem")),
            ..TlsConfig::default()
        });
        config.sasl = Some(SaslConfig {
            mechanism: SaslMechanism::ScramSha256,
            username: "verdict".into(),
            password: Secret::File(dir.join("pass")),
        });
        let client = client_config(&config).unwrap();
        assert_eq!(client.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(client.get("sasl.mechanism"), Some("SCRAM-SHA-256"));
        assert_eq!(client.get("sasl.password"), Some("s3cret-kafka-password"));
        assert!(client.get("ssl.ca.location").unwrap().ends_with("ca.pem"));
        assert!(
            !verdict_runtime::redact::redact("login s3cret-kafka-password").contains("s3cret"),
            "the redactor knows the password once read"
        );
        config.sasl.as_mut().unwrap().password = Secret::File(dir.join("missing"));
        let e = client_config(&config).unwrap_err();
        assert!(e.starts_with("kafka.sasl.password: file "), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
