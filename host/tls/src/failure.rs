//! What a failed TLS connection means: the peer's certificate (or ours) was refused, or the
//! two sides could not agree. Either way it is configuration - the gateway's or the
//! peer's - and a retry does not heal it.

use std::error::Error;

use rustls::AlertDescription;

/// Why a connection's TLS failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// A certificate was refused: the peer's (unknown issuer, expired, another name) or
    /// the gateway's (the peer wants a client certificate, or refused the one it got).
    Certificate,
    /// The handshake failed otherwise: no common version or cipher, or the peer does not
    /// speak TLS at all.
    Handshake,
}

impl TlsFailure {
    /// The failure kind the gateway records (`tls.certificate`, `tls.handshake`).
    pub fn kind(self) -> &'static str {
        match self {
            TlsFailure::Certificate => "tls.certificate",
            TlsFailure::Handshake => "tls.handshake",
        }
    }

    /// The TLS failure somewhere in `error`'s chain of sources, if there is one. Looks
    /// inside `std::io::Error`s too, which is how async TLS streams report rustls' errors.
    pub fn of(error: &(dyn Error + 'static)) -> Option<TlsFailure> {
        let mut next = Some(error);
        // A chain is short; the bound only guards against a cycle.
        for _ in 0..32 {
            let e = next?;
            if let Some(rustls) = e.downcast_ref::<rustls::Error>() {
                return Some(Self::from_rustls(rustls));
            }
            if let Some(inner) = e
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                && let Some(found) = Self::of(inner)
            {
                return Some(found);
            }
            next = e.source();
        }
        None
    }

    /// The TLS failure a driver reported only as text (one that flattens its errors into a
    /// message, keeping no source): recognised by rustls' own wording.
    pub fn of_text(text: &str) -> Option<TlsFailure> {
        const CERTIFICATE: [&str; 4] = [
            "invalid peer certificate",
            "peer sent no certificates",
            "received fatal alert: BadCertificate",
            "received fatal alert: CertificateRequired",
        ];
        const HANDSHAKE: [&str; 3] = [
            "received corrupt message",
            "peer is incompatible",
            "received fatal alert",
        ];
        if CERTIFICATE.iter().any(|m| text.contains(m))
            || text.contains("received fatal alert: UnknownCA")
        {
            Some(TlsFailure::Certificate)
        } else if HANDSHAKE.iter().any(|m| text.contains(m)) {
            Some(TlsFailure::Handshake)
        } else {
            None
        }
    }

    /// What a rustls error means.
    pub fn from_rustls(error: &rustls::Error) -> TlsFailure {
        use AlertDescription as A;
        match error {
            rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::UnsupportedNameType
            | rustls::Error::InvalidCertRevocationList(_) => TlsFailure::Certificate,
            rustls::Error::AlertReceived(
                A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA
                | A::CertificateRequired
                | A::AccessDenied,
            ) => TlsFailure::Certificate,
            _ => TlsFailure::Handshake,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rustls_error_is_found_behind_io_errors_and_sources() {
        let refused = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, refused);
        #[derive(Debug, thiserror::Error)]
        #[error("connecting")]
        struct Outer(#[source] std::io::Error);
        assert_eq!(TlsFailure::of(&Outer(io)), Some(TlsFailure::Certificate));
        let alert = std::io::Error::other(rustls::Error::AlertReceived(
            AlertDescription::HandshakeFailure,
        ));
        assert_eq!(TlsFailure::of(&alert), Some(TlsFailure::Handshake));
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(TlsFailure::of(&plain), None, "not TLS at all");
        assert_eq!(TlsFailure::Certificate.kind(), "tls.certificate");
        let flattened = format!(
            "CodecError {{ IO error: `{}' }}",
            rustls::Error::InvalidCertificate(rustls::CertificateError::Expired)
        );
        assert_eq!(
            TlsFailure::of_text(&flattened),
            Some(TlsFailure::Certificate)
        );
        assert_eq!(TlsFailure::of_text("Access denied for user"), None);
    }
}
