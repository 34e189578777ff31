//! The gRPC channel to a collector, its TLS from `verdict-tls` rather than tonic's own: the
//! same roots, CA file, client certificate and server name as every other peer.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::StartError;
use crate::settings::Settings;

/// A connection to the collector: plaintext (`http://`, HTTP/2 with prior knowledge) or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// A lazily connecting channel to the collector `settings` name, over `tls` for `https://`.
/// Must be called inside the runtime the channel will run on.
pub(crate) fn channel(
    settings: &Settings,
    tls: Arc<rustls::ClientConfig>,
) -> Result<tonic::transport::Channel, StartError> {
    let invalid = |message: String| StartError::Exporter {
        endpoint: verdict_runtime::text::redact_urls(&settings.endpoint),
        message,
    };
    let url = url::Url::parse(&settings.endpoint).map_err(|e| invalid(e.to_string()))?;
    let https = url.scheme() == "https";
    let host = match url.host() {
        Some(url::Host::Domain(name)) => name.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => return Err(invalid("no host".into())),
    };
    let port = url
        .port_or_known_default()
        .unwrap_or(if https { 443 } else { 80 });
    let server_name = rustls::pki_types::ServerName::try_from(host.clone())
        .map_err(|_| invalid(format!("`{host}` is not a name TLS can check")))?;
    // gRPC over TLS is HTTP/2, agreed in the handshake.
    let mut config = rustls::ClientConfig::clone(&tls);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let endpoint = tonic::transport::Endpoint::from_shared(settings.endpoint.clone())
        .map_err(|e| invalid(e.to_string()))?
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout);
    let connect = tower::service_fn(move |_: http::Uri| {
        let (host, connector, server_name) = (host.clone(), connector.clone(), server_name.clone());
        async move {
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            let _ = tcp.set_nodelay(true);
            let stream = if https {
                Stream::Tls(Box::new(connector.connect(server_name, tcp).await?))
            } else {
                Stream::Plain(tcp)
            };
            Ok::<_, io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    Ok(endpoint.connect_with_connector_lazy(connect))
}
