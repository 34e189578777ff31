//! How the gateway reaches NATS: TLS and credentials from `[nats]`, the same for the
//! source, the DLQ tools and `verdict check --probe`. A connection refused because of the
//! gateway's own settings - a certificate, a credential - is told apart from a server that
//! is merely down: the first stops the start naming the setting, the second is waited out.

use std::time::Duration;

use async_nats::{ConnectErrorKind, ConnectOptions};
use verdict_registry::NatsConfig;
use verdict_runtime::text::redact_url;

/// Why the gateway could not connect to NATS.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct NatsAccessError {
    /// The setting to look at (`nats.tls`, `nats.token`, `nats.url`).
    pub setting: String,
    /// What happened, redacted.
    pub message: String,
    /// The gateway's configuration (or the server's certificate) is at fault, not the
    /// server's availability: retrying will not help.
    pub configuration: bool,
}

fn refused(setting: &str, message: String) -> NatsAccessError {
    NatsAccessError {
        setting: setting.to_string(),
        message: verdict_runtime::redact::redact(&message),
        configuration: true,
    }
}

/// Connect options for `config`: always the one TLS stack's client config (used when the
/// URL is `tls://`, `tls_required` is set, or the server asks for TLS), and the one
/// credential that is set. `name` is the connection's name on the server.
pub(crate) async fn options(
    config: &NatsConfig,
    name: String,
) -> Result<ConnectOptions, NatsAccessError> {
    let tls = config
        .tls
        .clone()
        .unwrap_or_default()
        .client_config("nats.tls")
        .map_err(|e| refused(e.setting(), e.problem()))?;
    let mut options = ConnectOptions::new()
        .name(name)
        .connection_timeout(Duration::from_secs(2))
        .tls_client_config(rustls::ClientConfig::clone(&tls))
        .require_tls(config.wants_tls());
    let secret = |setting: &str, secret: &verdict_registry::config::Secret| {
        secret
            .read()
            .map_err(|e| refused(setting, format!("cannot be read: {e}")))
    };
    if let Some(path) = &config.creds_file {
        options = options.credentials_file(path).await.map_err(|e| {
            refused(
                "nats.creds_file",
                format!("{}: not a usable credentials file: {e}", path.display()),
            )
        })?;
    }
    if let Some(seed) = &config.nkey_seed {
        options = options.nkey(secret("nats.nkey_seed", seed)?);
    }
    if let Some(token) = &config.token {
        options = options.token(secret("nats.token", token)?);
    }
    if let (Some(user), Some(password)) = (&config.user, &config.password) {
        options = options.user_and_password(user.clone(), secret("nats.password", password)?);
    }
    Ok(options)
}

/// Connect with `options` to `config.url`, the failure told apart by its cause.
pub(crate) async fn connect_with(
    config: &NatsConfig,
    options: ConnectOptions,
) -> Result<async_nats::Client, NatsAccessError> {
    options
        .connect(config.url.as_str())
        .await
        .map_err(|e| failure(config, &e))
}

/// What a failed connection means, naming the setting to look at.
fn failure(config: &NatsConfig, error: &async_nats::ConnectError) -> NatsAccessError {
    // Each cause once: the client's message often repeats its source's.
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    let credentials = config.credentials_set();
    // A refused certificate arrives as an I/O error from the TLS stream.
    let tls = error.kind() == ConnectErrorKind::Tls || verdict_tls::TlsFailure::of(error).is_some();
    match error.kind() {
        _ if tls => {
            let certificate =
                verdict_tls::TlsFailure::of(error) == Some(verdict_tls::TlsFailure::Certificate);
            let url = redact_url(&config.url);
            match (&config.tls, certificate) {
                (None, true) => refused(
                    "nats.tls",
                    format!(
                        "not set, and the certificate of {url} was refused ({text}): set \
                         nats.tls.ca_file to the CA that issued it"
                    ),
                ),
                (None, false) if config.wants_tls() => refused(
                    "nats.tls_required",
                    format!("TLS with {url} failed (does the server speak TLS?): {text}"),
                ),
                _ => refused("nats.tls", format!("TLS with {url} failed: {text}")),
            }
        }
        ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
            let setting = match credentials.first().copied() {
                Some("nats.user") => "nats.user / nats.password",
                Some(setting) => setting,
                None => "nats.url",
            };
            let what = if credentials.is_empty() && !config.url.contains('@') {
                "the server requires credentials and none is set (nats.creds_file, \
                 nats.nkey_seed, nats.token, or nats.user and nats.password)"
                    .to_string()
            } else {
                "the server refused the credentials".to_string()
            };
            refused(setting, format!("{what}: {text}"))
        }
        _ => NatsAccessError {
            setting: "nats.url".into(),
            message: verdict_runtime::redact::redact(&format!(
                "{}: {text}",
                redact_url(&config.url)
            )),
            configuration: false,
        },
    }
}

/// What a successful connection saw, for an operator (`verdict check --probe`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct NatsProbe {
    /// The server's version.
    pub version: String,
    /// The server's name.
    pub server_name: String,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// Whether the server asked for credentials.
    pub auth_required: bool,
    /// Whether JetStream answered on the connection's account.
    pub jetstream: bool,
    /// Why JetStream did not answer, when it did not.
    pub jetstream_error: Option<String>,
}

/// Connect once with `config`'s settings, look at the server, disconnect. A failure names
/// the setting to look at; `configuration` says whether a retry could help.
pub async fn probe(config: &NatsConfig, name: &str) -> Result<NatsProbe, NatsAccessError> {
    let options = options(config, format!("verdict {name} probe")).await?;
    let client = connect_with(config, options).await?;
    let info = client.server_info();
    // The raw account-info request: the client's typed answer expects fields older
    // servers do not send.
    let account: Result<(), String> = match client.request("$JS.API.INFO", "".into()).await {
        Ok(reply) => match serde_json::from_slice::<serde_json::Value>(&reply.payload) {
            Ok(info) if info.get("error").is_none() => Ok(()),
            Ok(info) => Err(info["error"]["description"]
                .as_str()
                .unwrap_or("refused")
                .to_string()),
            Err(e) => Err(format!("unreadable answer: {e}")),
        },
        Err(e) => Err(e.to_string()),
    };
    let seen = NatsProbe {
        version: info.version,
        server_name: info.server_name,
        tls: info.tls_required || config.wants_tls(),
        auth_required: info.auth_required,
        jetstream: account.is_ok(),
        jetstream_error: account.err().map(|e| verdict_runtime::redact::redact(&e)),
    };
    let _ = client.drain().await;
    Ok(seen)
}
