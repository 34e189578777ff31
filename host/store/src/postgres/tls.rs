//! TLS to PostgreSQL, spelt as libpq spells it in the store URL: `sslmode` (`disable`,
//! `prefer` - the default -, `require`, `verify-ca`, `verify-full`), `sslrootcert`,
//! `sslcert` and `sslkey`. The driver knows only the first three modes and none of the
//! files, so they are taken out of the URL here and become a connector on the one TLS
//! stack ([`verdict_tls`]).
//!
//! As with libpq, `prefer` and `require` encrypt without checking who answers unless
//! `sslrootcert` is given (then the chain is checked, as `verify-ca` does); only
//! `verify-full` checks the server's name too - the mode to use beyond a private network.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use postgres::Socket;
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use verdict_tls::{TlsConfig, Verify};

use crate::StoreError;

/// The URL's parameters this module takes out, by libpq's names.
const TAKEN: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// The driver's config for `url` without the TLS parameters, and the connector they
/// describe (`None`: `sslmode=disable`). Relative files are taken from `base`.
pub(super) fn split(
    url: &str,
    base: &Path,
) -> Result<(postgres::Config, Option<MakeRustls>), StoreError> {
    let bad = |e: String| StoreError::Url(format!("not a PostgreSQL URL: {e}"));
    let (rest, taken) = crate::url_params::take(url, &TAKEN).map_err(bad)?;
    let get = |name: &str| taken.get(name);
    let mode = get("sslmode").unwrap_or("prefer");
    let file = |name: &str| get(name).map(|v| base.join(v));
    let tls = TlsConfig {
        ca_file: file("sslrootcert"),
        client_cert: file("sslcert"),
        client_key: file("sslkey"),
        server_name: None,
    };
    let (driver_mode, verify) = match mode {
        "disable" => (postgres::config::SslMode::Disable, None),
        "prefer" | "require" => {
            let verify = if tls.ca_file.is_some() {
                Verify::ChainOnly
            } else {
                Verify::Nothing
            };
            let driver = if mode == "prefer" {
                postgres::config::SslMode::Prefer
            } else {
                postgres::config::SslMode::Require
            };
            (driver, Some(verify))
        }
        "verify-ca" => (postgres::config::SslMode::Require, Some(Verify::ChainOnly)),
        "verify-full" => (postgres::config::SslMode::Require, Some(Verify::Full)),
        other => {
            return Err(StoreError::Url(format!(
                "sslmode=`{}`: expected disable, prefer, require, verify-ca or verify-full",
                verdict_runtime::text::one_line(other, 32)
            )));
        }
    };
    let mut config: postgres::Config = rest
        .parse()
        .map_err(|e: postgres::Error| bad(e.to_string()))?;
    config.ssl_mode(driver_mode);
    let Some(verify) = verify else {
        return Ok((config, None));
    };
    let client = tls
        .client_config_verifying("gateway.store", verify)
        .map_err(|e| {
            let named = e
                .to_string()
                .replace("gateway.store.ca_file", "gateway.store sslrootcert")
                .replace("gateway.store.client_cert", "gateway.store sslcert")
                .replace("gateway.store.client_key", "gateway.store sslkey");
            StoreError::Url(named)
        })?;
    Ok((config, Some(MakeRustls { config: client })))
}

/// A connection to `target` that failed: a refused certificate is named as the URL's TLS
/// settings (not an outage), anything else as the driver says it.
pub(super) fn connect_failed(target: &str, error: postgres::Error) -> StoreError {
    let tls = verdict_tls::TlsFailure::of(&error).map(|f| {
        format!(
            "{} (gateway.store sslmode / sslrootcert / sslcert): ",
            f.kind()
        )
    });
    StoreError::Connect {
        target: target.to_string(),
        message: tls.unwrap_or_default() + &crate::error::postgres_message(&error),
        cause: Some(Box::new(error)),
    }
}

/// Makes a TLS connector per connection, on the one TLS stack.
#[derive(Clone)]
pub(super) struct MakeRustls {
    config: Arc<rustls::ClientConfig>,
}

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<RustlsConnect> {
        let name = ServerName::try_from(domain.to_string()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{domain}` is not a name TLS can check"),
            )
        })?;
        Ok(RustlsConnect {
            config: self.config.clone(),
            name,
        })
    }
}

/// One connection's handshake.
pub(super) struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = BoxFuture<'static, io::Result<RustlsStream>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let stream = tokio_rustls::TlsConnector::from(self.config)
                .connect(self.name, stream)
                .await?;
            Ok(RustlsStream(Box::new(stream)))
        })
    }
}

/// A TLS session over the driver's socket.
pub(super) struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM channel binding is not offered: the server's certificate hash would be
        // needed, and password authentication works without it.
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_parameters_are_taken_out_and_the_rest_kept() {
        let (config, tls) = split(
            "postgres://u:pw@127.0.0.1:5432/db?application_name=gw&sslmode=disable",
            Path::new(""),
        )
        .unwrap();
        assert!(tls.is_none());
        assert_eq!(config.get_application_name(), Some("gw"));
        assert_eq!(config.get_ssl_mode(), postgres::config::SslMode::Disable);
        let (config, tls) = split("postgres://u@127.0.0.1/db", Path::new("")).unwrap();
        assert!(tls.is_some(), "prefer by default, as libpq");
        assert_eq!(config.get_ssl_mode(), postgres::config::SslMode::Prefer);
        let error = split(
            "postgres://u@127.0.0.1/db?sslmode=verify-full&sslrootcert=missing.pem",
            Path::new("/nowhere"),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            error.contains("gateway.store sslrootcert") && error.contains("/nowhere/missing.pem"),
            "{error}"
        );
        let error = split("postgres://u@127.0.0.1/db?sslmode=allow", Path::new(""))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("sslmode=`allow`"), "{error}");
    }
}
