//! Whether a port that would not speak a plaintext protocol speaks TLS instead. A plaintext
//! URL (`amqp://`) pointed at a TLS listener otherwise looks like a server that resets
//! connections or answers garbage - something to reconnect to forever - when it is the
//! gateway's own configuration, to be named once at start.

use std::time::Duration;

use verdict_tls::{TlsConfig, Verify};

/// Whether `host:port` answers a TLS client hello within `within`: a completed handshake or
/// a TLS alert both say TLS is spoken there. The server's certificate is not checked - this
/// only tells what the port speaks, and nothing is sent over it.
pub(crate) async fn answers_tls(host: &str, port: u16, within: Duration) -> bool {
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        let config = TlsConfig::default()
            .client_config_verifying("sniff", Verify::Nothing)
            .ok()?;
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).ok()?;
        let handshake = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await;
        Some(match handshake {
            Ok(_) => true,
            Err(e) => matches!(
                e.get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
                Some(rustls::Error::AlertReceived(_))
            ),
        })
    };
    matches!(tokio::time::timeout(within, attempt).await, Ok(Some(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tls_listener_is_told_from_a_plaintext_one_and_from_nothing() {
        use tokio::io::AsyncWriteExt as _;
        let pki = verdict_tls::test_pki::Pki::new("tls-sniff");
        let leaf = pki.server("sniff", &["127.0.0.1"]);
        let config = verdict_tls::server_config("sniff", &leaf.cert, &leaf.key, None).unwrap();
        let tls = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tls_port = tls.local_addr().unwrap().port();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = tls.accept().await {
                let _ = acceptor.accept(tcp).await;
            }
        });
        // A plaintext server that answers every connection with a protocol header.
        let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain_port = plain.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = plain.accept().await {
                let _ = tcp.write_all(b"AMQP\x00\x00\x09\x01").await;
            }
        });
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let within = Duration::from_secs(5);
        assert!(answers_tls("127.0.0.1", tls_port, within).await);
        assert!(!answers_tls("127.0.0.1", plain_port, within).await);
        assert!(!answers_tls("127.0.0.1", closed, within).await);
    }
}
