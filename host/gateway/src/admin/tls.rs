//! TLS on the admin listener (`[admin] tls_cert` / `tls_key`): rustls with its safe
//! defaults (TLS 1.2 and 1.3, no client certificates), the certificate chain and key read
//! once at start from PEM files.
//!
//! Handshakes run in tasks of their own, so a client that opens a connection and says
//! nothing holds up no one else; one that has not finished within [`HANDSHAKE_TIMEOUT`] is
//! dropped.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes finished and not yet served.
const READY_QUEUE: usize = 64;

/// Why the admin listener's TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("admin.{field} = {}: cannot be read", path.display())]
    Read {
        /// `tls_cert` or `tls_key`.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file holds no PEM object of the kind expected.
    #[error("admin.{field} = {}: {expected}", path.display())]
    Pem {
        /// `tls_cert` or `tls_key`.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What was expected in it.
        expected: &'static str,
    },
    /// rustls refused the pair (a key that does not match the certificate, say).
    #[error("admin.tls_cert and admin.tls_key")]
    Config(#[source] rustls::Error),
}

/// The server side of TLS for `cert` (a PEM chain, leaf first) and `key` (a PEM private
/// key: PKCS#8, PKCS#1 or SEC1).
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let read = |field: &'static str, path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            field,
            path: path.to_path_buf(),
            source,
        })
    };
    let pem = read("tls_cert", cert)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::Pem {
            field: "tls_cert",
            path: cert.to_path_buf(),
            expected: "holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
        });
    }
    let pem = read("tls_key", key)?;
    let key_der = PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::Pem {
        field: "tls_key",
        path: key.to_path_buf(),
        expected: "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(TlsError::Config)?;
    Ok(Arc::new(config))
}

/// A listener whose connections are TLS: what `axum::serve` accepts from.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accept on `listener`, handshaking with `config`.
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (done, ready) = mpsc::channel(READY_QUEUE);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                // Ends with the listener: the port is free once the server stops.
                let accepted = tokio::select! {
                    () = done.closed() => return,
                    accepted = listener.accept() => accepted,
                };
                let (tcp, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: pause rather than spin.
                        tracing::warn!(error = %e, "admin listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, handed) = (acceptor.clone(), done.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = handed.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "admin listener: TLS handshake failed");
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "admin listener: TLS handshake timed out");
                        }
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends when this listener is gone; wait for shutdown.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
