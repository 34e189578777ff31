//! The client side: whom the gateway trusts and what it presents.

use std::sync::{Arc, LazyLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::{TlsConfig, TlsError, pem};

/// The one crypto provider of every TLS connection the gateway makes or accepts (`ring`:
/// what the NATS client builds anyway, so there is no second crypto stack). The first call
/// also makes it the process's default (see [`install_default_provider`]).
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: LazyLock<Arc<CryptoProvider>> = LazyLock::new(|| {
        install_default_provider();
        Arc::new(rustls::crypto::ring::default_provider())
    });
    PROVIDER.clone()
}

/// Make `ring` the process's default rustls provider, for clients built without a config
/// of ours (an HTTP client made with its defaults, a driver that builds its own config):
/// they then use the same provider instead of failing for want of one. Idempotent; a
/// default installed earlier stays.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The platform's root certificates, read once per process (`SSL_CERT_FILE` and
/// `SSL_CERT_DIR` are honoured).
fn platform_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: LazyLock<Vec<CertificateDer<'static>>> = LazyLock::new(|| {
        let found = rustls_native_certs::load_native_certs();
        for error in found.errors.iter().take(3) {
            tracing::debug!(%error, "reading the platform's root certificates");
        }
        if found.certs.is_empty() {
            tracing::warn!(
                "no root certificates found on this machine: TLS peers are trusted only \
                 through a `ca_file`"
            );
        }
        found.certs
    });
    &ROOTS
}

/// How much of the peer's certificate is checked. Everything but [`Verify::Full`] exists
/// for protocols whose operators expect it (PostgreSQL's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// The chain up to a trusted root, and the name (the default everywhere).
    Full,
    /// The chain up to a trusted root, any name (`sslmode=verify-ca`).
    ChainOnly,
    /// Nothing but the handshake's own signatures: encryption against a passive listener,
    /// no proof of who answers (`sslmode=require` without a root certificate).
    Nothing,
}

impl TlsConfig {
    /// The rustls client config these settings describe: the platform's roots and
    /// `ca_file` trusted, `client_cert` presented, `server_name` checked instead of the
    /// host. Reads every file now; `setting` is where the table sits in the config
    /// (`routes[0].consumer.tls`) and prefixes every error's setting.
    pub fn client_config(&self, setting: &str) -> Result<Arc<ClientConfig>, TlsError> {
        self.client_config_verifying(setting, Verify::Full)
    }

    /// [`TlsConfig::client_config`], checking only as much as `verify` says.
    pub fn client_config_verifying(
        &self,
        setting: &str,
        verify: Verify,
    ) -> Result<Arc<ClientConfig>, TlsError> {
        let field = |name: &str| format!("{setting}.{name}");
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(platform_roots().iter().cloned());
        if let Some(ca) = &self.ca_file {
            for cert in pem::certificates(&field("ca_file"), ca)? {
                roots.add(cert).map_err(|_| TlsError::Pem {
                    setting: field("ca_file"),
                    path: ca.clone(),
                    expected: "holds a certificate that cannot be a trust anchor",
                })?;
            }
        }
        let roots = Arc::new(roots);
        let rustls_error = |name: &str| {
            let setting = field(name);
            move |source| TlsError::Rustls { setting, source }
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(rustls_error("(protocol versions)"))?;
        let builder = match (&self.server_name, verify) {
            (_, Verify::Nothing) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider()))),
            (_, Verify::ChainOnly) => {
                let inner = WebPkiServerVerifier::builder_with_provider(roots, provider())
                    .build()
                    .map_err(|e| TlsError::Incomplete {
                        setting: field("ca_file"),
                        message: format!("no usable trust anchors: {e}"),
                    })?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyName { inner }))
            }
            (None, Verify::Full) => builder.with_root_certificates(roots),
            (Some(name), Verify::Full) => {
                let server_name =
                    ServerName::try_from(name.clone()).map_err(|_| TlsError::ServerName {
                        setting: field("server_name"),
                        name: name.clone(),
                    })?;
                let inner = WebPkiServerVerifier::builder_with_provider(roots, provider())
                    .build()
                    .map_err(|e| TlsError::Incomplete {
                        setting: field("ca_file"),
                        message: format!("no usable trust anchors: {e}"),
                    })?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(NamedVerifier {
                        inner,
                        name: server_name,
                    }))
            }
        };
        let config = match (&self.client_cert, &self.client_key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(
                    pem::certificates(&field("client_cert"), cert)?,
                    pem::private_key(&field("client_key"), key)?,
                )
                .map_err(rustls_error("client_key"))?,
            (Some(_), None) => {
                return Err(TlsError::Incomplete {
                    setting: field("client_cert"),
                    message: "needs client_key beside it".into(),
                });
            }
            (None, Some(_)) => {
                return Err(TlsError::Incomplete {
                    setting: field("client_key"),
                    message: "needs client_cert beside it".into(),
                });
            }
        };
        Ok(Arc::new(config))
    }
}

/// The chain checked, the name not (`verify-ca`).
#[derive(Debug)]
struct AnyName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError as C;
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                C::NotValidForName | C::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Any certificate: only the handshake's signatures are checked (`require` without a root).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The standard verification, against a configured name instead of the host connected to.
#[derive(Debug)]
struct NamedVerifier {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for NamedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TlsFailure;
    use crate::test_pki::{Leaf, Pki};
    use rustls::{ClientConnection, ServerConfig, ServerConnection};

    fn server(leaf: &Leaf, verify_clients_of: Option<&Pki>) -> Arc<ServerConfig> {
        crate::server_config(
            "test",
            &leaf.cert,
            &leaf.key,
            verify_clients_of.map(Pki::ca_file),
        )
        .unwrap()
    }

    /// A whole handshake in memory: what the client's side concluded.
    fn handshake(
        client: &TlsConfig,
        host: &str,
        server: Arc<ServerConfig>,
    ) -> Result<(), TlsFailure> {
        let config = client.client_config("t").unwrap();
        let name = ServerName::try_from(host.to_string()).unwrap();
        let mut c = ClientConnection::new(config, name).unwrap();
        let mut s = ServerConnection::new(server).unwrap();
        exchange(&mut c, &mut s)
    }

    fn exchange(c: &mut ClientConnection, s: &mut ServerConnection) -> Result<(), TlsFailure> {
        for _ in 0..20 {
            let mut wire = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut wire).unwrap();
            }
            let mut read = &wire[..];
            while !read.is_empty() {
                s.read_tls(&mut read).unwrap();
            }
            // The server's refusal reaches the client as an alert.
            let server_error = s.process_new_packets().err();
            let mut wire = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut wire).unwrap();
            }
            let mut read = &wire[..];
            while !read.is_empty() {
                c.read_tls(&mut read).unwrap();
            }
            if let Err(e) = c.process_new_packets() {
                return Err(TlsFailure::from_rustls(&e));
            }
            if let Some(e) = server_error {
                return Err(TlsFailure::from_rustls(&e));
            }
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn the_configured_ca_is_trusted_and_every_refusal_is_a_certificate_failure() {
        let pki = Pki::new("client-ca");
        let other = Pki::new("client-other");
        let leaf = pki.server("consumer", &["localhost", "127.0.0.1"]);
        let trusting = TlsConfig {
            ca_file: Some(pki.ca_file().to_path_buf()),
            ..TlsConfig::default()
        };
        assert_eq!(
            handshake(&trusting, "localhost", server(&leaf, None)),
            Ok(())
        );
        assert_eq!(
            handshake(&trusting, "127.0.0.1", server(&leaf, None)),
            Ok(())
        );
        // Platform roots only, or another CA: the issuer is unknown.
        let platform = TlsConfig::default();
        assert_eq!(
            handshake(&platform, "localhost", server(&leaf, None)),
            Err(TlsFailure::Certificate)
        );
        let wrong_ca = TlsConfig {
            ca_file: Some(other.ca_file().to_path_buf()),
            ..TlsConfig::default()
        };
        assert_eq!(
            handshake(&wrong_ca, "localhost", server(&leaf, None)),
            Err(TlsFailure::Certificate)
        );
        // Another name, and an expired certificate.
        assert_eq!(
            handshake(&trusting, "db.internal", server(&leaf, None)),
            Err(TlsFailure::Certificate)
        );
        let expired = pki.expired_server("old", &["localhost"]);
        assert_eq!(
            handshake(&trusting, "localhost", server(&expired, None)),
            Err(TlsFailure::Certificate)
        );
    }

    #[test]
    fn chain_only_ignores_the_name_and_nothing_ignores_the_issuer_too() {
        let pki = Pki::new("client-verify");
        let other = Pki::new("client-verify-other");
        let leaf = pki.server("db", &["db.internal"]);
        let shake = |config: &TlsConfig, verify: Verify| {
            let config = config.client_config_verifying("t", verify).unwrap();
            let name = ServerName::try_from("127.0.0.1").unwrap();
            let mut c = ClientConnection::new(config, name).unwrap();
            let mut s = ServerConnection::new(server(&leaf, None)).unwrap();
            exchange(&mut c, &mut s)
        };
        let trusting = TlsConfig {
            ca_file: Some(pki.ca_file().to_path_buf()),
            ..TlsConfig::default()
        };
        let stranger = TlsConfig {
            ca_file: Some(other.ca_file().to_path_buf()),
            ..TlsConfig::default()
        };
        assert_eq!(shake(&trusting, Verify::Full), Err(TlsFailure::Certificate));
        assert_eq!(shake(&trusting, Verify::ChainOnly), Ok(()));
        assert_eq!(
            shake(&stranger, Verify::ChainOnly),
            Err(TlsFailure::Certificate)
        );
        assert_eq!(shake(&stranger, Verify::Nothing), Ok(()));
    }

    #[test]
    fn server_name_is_checked_instead_of_the_host_connected_to() {
        let pki = Pki::new("client-name");
        let leaf = pki.server("consumer", &["consumer.internal"]);
        let named = TlsConfig {
            ca_file: Some(pki.ca_file().to_path_buf()),
            server_name: Some("consumer.internal".into()),
            ..TlsConfig::default()
        };
        assert_eq!(handshake(&named, "10.0.0.7", server(&leaf, None)), Ok(()));
        let misnamed = TlsConfig {
            server_name: Some("other.internal".into()),
            ..named.clone()
        };
        assert_eq!(
            handshake(&misnamed, "consumer.internal", server(&leaf, None)),
            Err(TlsFailure::Certificate)
        );
        let bad = TlsConfig {
            server_name: Some("not a name".into()),
            ..named
        };
        let error = bad.client_config("routes[1].consumer.tls").unwrap_err();
        assert_eq!(error.setting(), "routes[1].consumer.tls.server_name");
    }

    #[test]
    fn a_server_that_verifies_clients_takes_the_client_certificate_and_refuses_its_absence() {
        let pki = Pki::new("client-mtls");
        let leaf = pki.server("consumer", &["localhost"]);
        let me = pki.client("gateway");
        let with_cert = TlsConfig {
            ca_file: Some(pki.ca_file().to_path_buf()),
            client_cert: Some(me.cert.clone()),
            client_key: Some(me.key.clone()),
            ..TlsConfig::default()
        };
        assert_eq!(
            handshake(&with_cert, "localhost", server(&leaf, Some(&pki))),
            Ok(())
        );
        let without = TlsConfig {
            client_cert: None,
            client_key: None,
            ..with_cert.clone()
        };
        assert_eq!(
            handshake(&without, "localhost", server(&leaf, Some(&pki))),
            Err(TlsFailure::Certificate)
        );
        // Half a client identity, a key that is not a key: named before any connection.
        let half = TlsConfig {
            client_key: None,
            ..with_cert.clone()
        };
        let error = half.client_config("nats.tls").unwrap_err().to_string();
        assert_eq!(error, "nats.tls.client_cert: needs client_key beside it");
        let not_a_key = TlsConfig {
            client_key: Some(me.cert.clone()),
            ..with_cert
        };
        let error = not_a_key.client_config("nats.tls").unwrap_err();
        assert_eq!(error.setting(), "nats.tls.client_key");
        assert!(
            error.problem().contains("holds no PEM private key"),
            "{error}"
        );
    }
}
