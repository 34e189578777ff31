//! A throwaway certificate authority for tests (feature `test-pki`): a CA, server and
//! client certificates signed by it, and the broken ones a test needs (expired, another
//! name). Files are written under the system temp directory, one directory per `Pki`.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA and the directory its files are written to.
pub struct Pki {
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    ca_file: PathBuf,
}

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

impl Pki {
    /// A fresh CA whose files go to `<temp>/verdict-pki-<name>-<pid>` (emptied first).
    pub fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("verdict-pki-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory for the test PKI");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("verdict test CA {name}"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a CA key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, cert.pem()).expect("ca.pem written");
        Pki {
            dir,
            issuer: Issuer::new(params, key),
            ca_file,
        }
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM): what a `ca_file` names.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// A server certificate for `names` (DNS names or IP addresses), subject `CN=<file>`.
    pub fn server(&self, file: &str, names: &[&str]) -> Leaf {
        self.leaf(file, names, ExtendedKeyUsagePurpose::ServerAuth, false)
    }

    /// A client certificate, subject `CN=<file>`.
    pub fn client(&self, file: &str) -> Leaf {
        self.leaf(file, &[], ExtendedKeyUsagePurpose::ClientAuth, false)
    }

    /// A server certificate for `names` that expired on 2020-01-02.
    pub fn expired_server(&self, file: &str, names: &[&str]) -> Leaf {
        self.leaf(file, names, ExtendedKeyUsagePurpose::ServerAuth, true)
    }

    fn leaf(
        &self,
        file: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        expired: bool,
    ) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, file);
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 2);
        }
        let key = KeyPair::generate().expect("a leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("a signed leaf");
        let leaf = Leaf {
            cert: self.dir.join(format!("{file}.pem")),
            key: self.dir.join(format!("{file}.key")),
        };
        std::fs::write(&leaf.cert, cert.pem()).expect("certificate written");
        std::fs::write(&leaf.key, key.serialize_pem()).expect("key written");
        leaf
    }
}
