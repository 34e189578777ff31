//! `verdict check --probe`: connect once to each peer a config names and say what was
//! there - a consumer's TLS version and certificate, the NATS server's version and whether
//! it took the credentials - without sending a message or creating anything.

use std::time::Duration;

use serde::Serialize;
use tokio::net::TcpStream;
use verdict_registry::{ConsumerConfig, GatewayConfig, SourceKind};
use verdict_runtime::text::redact_url;
use verdict_tls::{PeerCertificate, TlsFailure};

/// What connecting to one peer showed.
#[derive(Debug, Clone, Serialize)]
pub struct PeerProbe {
    /// What was probed (`consumer of routes[0]`, `nats`).
    pub peer: String,
    /// Where (its URL, passwords masked).
    pub url: String,
    /// Whether the connection was made (and TLS, when used, accepted both ways).
    pub ok: bool,
    /// The TLS protocol version (`TLSv1_3`), when TLS was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_version: Option<String>,
    /// The peer certificate's subject and expiry, when TLS was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateSeen>,
    /// What else the peer said (a NATS server's version, JetStream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Why it failed, naming the setting to look at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A peer certificate as an operator reads it.
#[derive(Debug, Clone, Serialize)]
pub struct CertificateSeen {
    /// Its subject (`CN=consumer.internal`).
    pub subject: String,
    /// When it expires (UTC).
    pub not_after: String,
    /// Days left until then (negative once expired).
    pub days_left: i64,
}

impl PeerProbe {
    fn new(peer: String, url: &str) -> PeerProbe {
        PeerProbe {
            peer,
            url: redact_url(url),
            ok: false,
            tls_version: None,
            certificate: None,
            detail: None,
            error: None,
        }
    }

    fn failed(mut self, error: impl Into<String>) -> PeerProbe {
        self.error = said(error.into());
        self
    }
}

/// What a peer said (a server's name and version, a driver's error), as it may be shown:
/// redacted and one line of at most 512 bytes - a hostile server chooses these strings.
fn said(text: String) -> Option<String> {
    Some(verdict_runtime::text::one_line(
        &verdict_runtime::redact::redact(&text),
        verdict_runtime::text::MAX_MESSAGE_BYTES,
    ))
}

/// What a probe of a source this build left out says (`{}`: the source, and its feature).
#[cfg(not(all(feature = "nats", feature = "rabbitmq", feature = "kafka")))]
const LEFT_OUT: &str =
    "this build has no {} source: verdict-gateway was built without its `{}` feature";

/// Probe every peer of `config`: each route's consumer (once per distinct consumer), the
/// brokers routes consume from, and a shared PostgreSQL or MariaDB store. Relative files in the store
/// URL are taken from `base` (the config file's directory).
pub async fn probe(config: &GatewayConfig, base: &std::path::Path) -> Vec<PeerProbe> {
    let mut seen = Vec::new();
    let mut probes = Vec::new();
    for (i, route) in config.routes.iter().enumerate() {
        let Some(consumer) = &route.consumer else {
            continue;
        };
        if seen.contains(&consumer) {
            continue;
        }
        seen.push(consumer);
        probes.push(probe_consumer(&format!("routes[{i}].consumer"), consumer).await);
    }
    if config.routes.iter().any(|r| r.source == SourceKind::Nats) {
        let mut probe = PeerProbe::new("nats".into(), &config.nats.url);
        #[cfg(not(feature = "nats"))]
        {
            probe = probe.failed(LEFT_OUT.replace("{}", "nats"));
        }
        #[cfg(feature = "nats")]
        let probe = match crate::sources::nats::probe(&config.nats, &config.gateway.instance).await
        {
            Ok(nats) => {
                probe.detail = said(format!(
                    "nats-server {} ({}), {}, {}",
                    nats.version,
                    nats.server_name,
                    if nats.tls { "TLS" } else { "plain TCP" },
                    if nats.jetstream {
                        "JetStream available".to_string()
                    } else {
                        format!(
                            "JetStream NOT available to this account: {}",
                            nats.jetstream_error.as_deref().unwrap_or("no answer")
                        )
                    }
                ));
                probe.ok = nats.jetstream;
                probe
            }
            Err(e) => probe.failed(e.to_string()),
        };
        probes.push(probe);
    }
    if config
        .routes
        .iter()
        .any(|r| r.source == SourceKind::Rabbitmq)
    {
        let probe = PeerProbe::new("rabbitmq".into(), &config.rabbitmq.url);
        #[cfg(not(feature = "rabbitmq"))]
        probes.push(probe.failed(LEFT_OUT.replace("{}", "rabbitmq")));
        #[cfg(feature = "rabbitmq")]
        probes.push(
            match crate::sources::rabbitmq::probe(&config.rabbitmq, &config.gateway.instance).await
            {
                Ok(detail) => PeerProbe {
                    ok: true,
                    detail: said(detail),
                    ..probe
                },
                Err(e) => probe.failed(e.to_string()),
            },
        );
    }
    if config.routes.iter().any(|r| r.source == SourceKind::Kafka) {
        let probe = PeerProbe::new("kafka".into(), &config.kafka.bootstrap_servers.join(","));
        #[cfg(not(feature = "kafka"))]
        probes.push(probe.failed(LEFT_OUT.replace("{}", "kafka")));
        #[cfg(feature = "kafka")]
        probes.push(match crate::sources::kafka::probe(&config.kafka).await {
            Ok(detail) => PeerProbe {
                ok: true,
                detail: said(detail),
                ..probe
            },
            Err(e) => probe.failed(e),
        });
    }
    if let Some(url) = config.gateway.store.as_deref().filter(|u| {
        ["postgres://", "postgresql://", "mysql://", "mariadb://"]
            .iter()
            .any(|s| u.starts_with(s))
    }) {
        let mut probe = PeerProbe::new("gateway.store".into(), url);
        let (url, base) = (url.to_string(), base.to_path_buf());
        let seen =
            tokio::task::spawn_blocking(move || crate::store::Store::probe(&url, &base)).await;
        probe = match seen {
            Ok(Ok(detail)) => PeerProbe {
                ok: true,
                detail: said(detail),
                ..probe
            },
            Ok(Err(e)) => probe.failed(e.to_string()),
            Err(e) => probe.failed(e.to_string()),
        };
        probes.push(probe);
    }
    probes
}

/// Connect to a consumer (TCP, then TLS for `https://`) with its settings; no request is
/// sent.
async fn probe_consumer(peer: &str, consumer: &ConsumerConfig) -> PeerProbe {
    let probe = PeerProbe::new(peer.to_string(), &consumer.url);
    let url = match url_parts(&consumer.url) {
        Ok(parts) => parts,
        Err(e) => return probe.failed(format!("{peer}.url: {e}")),
    };
    let timeout = Duration::from_millis(consumer.timeout_ms);
    let tcp = match tokio::time::timeout(timeout, TcpStream::connect((url.host.as_str(), url.port)))
        .await
    {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return probe.failed(format!("{peer}.url: cannot connect: {e}")),
        Err(_) => return probe.failed(format!("{peer}.url: no connection within {timeout:?}")),
    };
    if !url.https {
        return PeerProbe { ok: true, ..probe };
    }
    handshake(probe, peer, consumer, &url.host, tcp, timeout).await
}

async fn handshake(
    mut probe: PeerProbe,
    peer: &str,
    consumer: &ConsumerConfig,
    host: &str,
    tcp: TcpStream,
    timeout: Duration,
) -> PeerProbe {
    let setting = format!("{peer}.tls");
    let tls = consumer.tls.clone().unwrap_or_default();
    let config = match tls.client_config(&setting) {
        Ok(config) => config,
        Err(e) => return probe.failed(e.to_string()),
    };
    let name = tls.server_name.clone().unwrap_or_else(|| host.to_string());
    let Ok(name) = rustls::pki_types::ServerName::try_from(name) else {
        return probe.failed(format!("{peer}.url: `{host}` is not a name TLS can check"));
    };
    let connector = tokio_rustls::TlsConnector::from(config);
    let stream = match tokio::time::timeout(timeout, connector.connect(name, tcp)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            let kind = TlsFailure::of(&e).map_or("tls.handshake", TlsFailure::kind);
            return probe.failed(format!("{setting}: {kind}: {e}"));
        }
        Err(_) => return probe.failed(format!("{setting}: no TLS handshake within {timeout:?}")),
    };
    let (_, session) = stream.get_ref();
    probe.tls_version = session.protocol_version().map(|v| format!("{v:?}"));
    probe.certificate = session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|leaf| PeerCertificate::parse(leaf))
        .map(|c| CertificateSeen {
            days_left: (c.not_after_unix - crate::clock::now_ms() as i64 / 1_000)
                .div_euclid(86_400),
            subject: c.subject,
            not_after: c.not_after,
        });
    probe.ok = true;
    probe
}

struct UrlParts {
    https: bool,
    host: String,
    port: u16,
}

fn url_parts(url: &str) -> Result<UrlParts, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
    let https = match parsed.scheme() {
        "https" => true,
        "http" => false,
        other => return Err(format!("the gateway cannot speak `{other}`")),
    };
    let host = parsed
        .host_str()
        .ok_or("no host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = parsed.port_or_known_default().ok_or("no port")?;
    Ok(UrlParts { https, host, port })
}
