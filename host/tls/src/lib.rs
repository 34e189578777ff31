//! Verdict's one TLS stack.
//!
//! Every connection the gateway makes - to an HTTPS consumer, to NATS, to RabbitMQ, to
//! PostgreSQL or MariaDB - takes its TLS from this crate: rustls on the `ring` provider, the
//! platform's root certificates plus the CA file the operator names, and an optional client
//! certificate. The operator writes the same table for each peer:
//!
//! ```toml
//! tls = { ca_file = "certs/ca.pem", client_cert = "certs/gw.pem", client_key = "certs/gw.key" }
//! ```
//!
//! [`TlsConfig`] is that table; [`TlsConfig::client_config`] reads its files once and
//! returns a rustls [`ClientConfig`](rustls::ClientConfig), or a [`TlsError`] that names the
//! setting and what was wrong with its file. When a connection later fails,
//! [`TlsFailure::of`] tells a certificate problem from a handshake problem - both the
//! gateway's configuration (or the peer's), never something a retry heals.
//!
//! ```
//! use verdict_tls::TlsConfig;
//!
//! // No settings: the platform's roots, no client certificate.
//! let config = TlsConfig::default().client_config("routes[0].consumer.tls")?;
//! assert!(!config.client_auth_cert_resolver.has_certs());
//!
//! // A CA file that does not exist is named with its setting.
//! let broken: TlsConfig = toml::from_str(r#"ca_file = "/nonexistent/ca.pem""#)?;
//! let error = broken.client_config("nats.tls").unwrap_err().to_string();
//! assert!(error.starts_with("nats.tls.ca_file: /nonexistent/ca.pem: cannot be read"), "{error}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod client;
mod config;
mod error;
mod failure;
mod peer;
pub mod pem;
mod server;
#[cfg(feature = "test-pki")]
pub mod test_pki;

pub use client::{Verify, install_default_provider, provider};
pub use config::TlsConfig;
pub use error::TlsError;
pub use failure::TlsFailure;
pub use peer::PeerCertificate;
pub use rustls;
pub use server::server_config;
