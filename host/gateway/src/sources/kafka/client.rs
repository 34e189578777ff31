//! The librdkafka settings every client of the source shares (consumer, producer, admin):
//! the brokers, TLS and SASL from `[kafka]`, with the password read from its file or
//! variable - and taught to the redactor - when the client is made, never written in the
//! config.

use rdkafka::config::ClientConfig;
use verdict_registry::{KafkaConfig, SaslMechanism};

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
