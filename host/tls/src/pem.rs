//! PEM files: certificate chains and private keys, read once and named in every error.

use std::path::Path;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::TlsError;

fn read(setting: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        setting: setting.to_string(),
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate in the PEM file `path` (at least one), in file order. `setting` names
/// the field in errors.
pub fn certificates(setting: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(setting, path)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::Pem {
            setting: setting.to_string(),
            path: path.to_path_buf(),
            expected: "holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
        });
    }
    Ok(chain)
}

/// The private key in the PEM file `path` (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(setting: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(setting, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::Pem {
        setting: setting.to_string(),
        path: path.to_path_buf(),
        expected: "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
    })
}
