//! The server side, for the gateway's admin listener and for test and demo consumers.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;

use crate::{TlsError, pem, provider};

/// A rustls server config presenting `cert` (a PEM chain, leaf first) with `key` (PEM:
/// PKCS#8, PKCS#1 or SEC1), TLS 1.2 and 1.3. With `client_ca`, clients must present a
/// certificate that CA issued. `setting` prefixes the fields in errors (`admin` gives
/// `admin.tls_cert`); the fields are `tls_cert`, `tls_key` and `client_ca`.
pub fn server_config(
    setting: &str,
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let field = |name: &str| format!("{setting}.{name}");
    let chain = pem::certificates(&field("tls_cert"), cert)?;
    let key_der = pem::private_key(&field("tls_key"), key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            setting: field("tls_cert"),
            source,
        })?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in pem::certificates(&field("client_ca"), ca)? {
                roots.add(cert).map_err(|source| TlsError::Rustls {
                    setting: field("client_ca"),
                    source,
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider())
                .build()
                .map_err(|e| TlsError::Incomplete {
                    setting: field("client_ca"),
                    message: format!("cannot verify clients with it: {e}"),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key_der)
        .map_err(|source| TlsError::Rustls {
            setting: format!("{} and {}", field("tls_cert"), field("tls_key")),
            source,
        })?;
    Ok(Arc::new(config))
}
