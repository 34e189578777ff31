//! How the gateway reaches RabbitMQ: `amqps://` on the one TLS stack (a private CA, a
//! client certificate - the login itself with `?auth_mechanism=external`), and a password
//! from a file or the environment. The same for the source and the DLQ tools. A connection
//! refused because of the gateway's own settings is told apart from a server that is down.

use lapin::tcp::{AsyncTcpStream, RustlsConnector};
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{Connection, ConnectionProperties};
use verdict_registry::RabbitmqConfig;
use verdict_registry::config::logs_in_with_certificate;
use verdict_runtime::text::redact_url;

/// Why the gateway could not connect to RabbitMQ.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct RabbitAccessError {
    /// The setting to look at (`rabbitmq.tls`, `rabbitmq.password`, `rabbitmq.url`).
    pub setting: String,
    /// What happened, redacted.
    pub message: String,
    /// The gateway's configuration (or the server's certificate) is at fault, not the
    /// server's availability: retrying will not help.
    pub configuration: bool,
}

fn refused(setting: &str, message: String) -> RabbitAccessError {
    RabbitAccessError {
        setting: setting.to_string(),
        message: verdict_runtime::redact::redact(&message),
        configuration: true,
    }
}

/// Connect to `config.url` with `properties`: TLS for `amqps://`, the password from
/// `config.password` when set.
pub(crate) async fn connect(
    config: &RabbitmqConfig,
    properties: ConnectionProperties,
) -> Result<Connection, RabbitAccessError> {
    let mut uri: AMQPUri = config.url.parse().map_err(|e: String| {
        refused(
            "rabbitmq.url",
            format!("`{}`: {e}", redact_url(&config.url)),
        )
    })?;
    if let Some(password) = &config.password {
        uri.authority.userinfo.password = password
            .read()
            .map_err(|e| refused("rabbitmq.password", format!("cannot be read: {e}")))?;
    }
    let (host, port) = (uri.authority.host.clone(), uri.authority.port);
    let scheme_is_plain = matches!(uri.scheme, AMQPScheme::AMQP);
    let tls = match uri.scheme {
        AMQPScheme::AMQPS => {
            let tls = config.tls.clone().unwrap_or_default();
            let client = tls
                .client_config("rabbitmq.tls")
                .map_err(|e| refused(e.setting(), e.problem()))?;
            Some((RustlsConnector::from(client), tls.server_name))
        }
        AMQPScheme::AMQP => None,
    };
    let runtime = lapin::runtime::default_runtime().map_err(|e| RabbitAccessError {
        setting: "rabbitmq.url".into(),
        message: e.to_string(),
        configuration: false,
    })?;
    let connected = Connection::connector(
        uri,
        runtime,
        async move |uri, runtime| {
            let address = runtime.to_socket_addrs((uri.authority.host.clone(), uri.authority.port));
            let stream = AsyncTcpStream::connect(&runtime, address)
                .await
                .map_err(lapin::Error::from)?;
            match &tls {
                None => Ok(stream),
                Some((connector, name)) => {
                    // With `server_name` the verifier checks that name whatever this says.
                    let name = name.as_deref().unwrap_or(&uri.authority.host);
                    stream
                        .into_rustls(connector, name)
                        .await
                        .map_err(lapin::Error::from)
                }
            }
        },
        properties,
    )
    .await;
    match connected {
        Ok(conn) => Ok(conn),
        Err(e) => {
            let mut failed = failure(config, &e);
            // Refused logins and TLS failures are named already; a reset or an answer in
            // another protocol may be a TLS port.
            if failed.setting == "rabbitmq.url"
                && scheme_is_plain
                && crate::tls_sniff::answers_tls(&host, port, SNIFF_WITHIN).await
            {
                failed = refused(
                    "rabbitmq.url",
                    format!(
                        "{} reached a TLS listener in plaintext: use `amqps://` (and \
                         `[rabbitmq] tls` for a private CA)",
                        redact_url(&config.url)
                    ),
                );
            }
            Err(failed)
        }
    }
}

/// How long a failed plaintext connection's port is given to show it speaks TLS.
const SNIFF_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// What a failed connection means, naming the setting to look at.
fn failure(config: &RabbitmqConfig, error: &lapin::Error) -> RabbitAccessError {
    let text = error.to_string();
    let url = redact_url(&config.url);
    let tls =
        verdict_tls::TlsFailure::of(error).or_else(|| verdict_tls::TlsFailure::of_text(&text));
    if let Some(tls) = tls {
        let setting = if config.tls.is_some() {
            "rabbitmq.tls"
        } else {
            "rabbitmq.tls (not set)"
        };
        return refused(
            setting,
            format!("{}: TLS with {url} failed: {text}", tls.kind()),
        );
    }
    if matches!(error.kind(), lapin::ErrorKind::ParsingError(_)) {
        // Something answered, and not in AMQP 0-9-1: the port of another service.
        // Reconnecting would only repeat it.
        return refused(
            "rabbitmq.url",
            format!("{url} does not answer in AMQP 0-9-1 (the port of another service?): {text}"),
        );
    }
    let lower = text.to_ascii_lowercase();
    if lower.contains("access_refused")
        || lower.contains("authentication")
        || lower.contains("login")
    {
        let setting = if logs_in_with_certificate(&config.url) {
            "rabbitmq.tls.client_cert (its subject is the user the login names)"
        } else if config.password.is_some() {
            "rabbitmq.password"
        } else {
            "rabbitmq.url (user and password)"
        };
        return refused(setting, format!("the server refused the login: {text}"));
    }
    RabbitAccessError {
        setting: "rabbitmq.url".into(),
        message: verdict_runtime::redact::redact(&format!("{url}: {text}")),
        configuration: false,
    }
}

/// Connect once with `config`'s settings and close: what the server is, or why not
/// (`verdict check --probe`, and the start's check that the settings are usable).
pub async fn probe(config: &RabbitmqConfig, name: &str) -> Result<String, RabbitAccessError> {
    let properties = ConnectionProperties::default()
        .with_connection_name(format!("verdict {name} probe").into());
    let conn = connect(config, properties).await?;
    let detail = format!(
        "RabbitMQ at {}, {}",
        redact_url(&config.url),
        if config.url.starts_with("amqps://") {
            "TLS"
        } else {
            "plain TCP"
        }
    );
    let _ = conn.close(200, "probe done".into()).await;
    Ok(detail)
}
