//! Why a TLS setting cannot be used: always naming the setting and its file.

use std::fmt;
use std::path::PathBuf;

/// A TLS setting that cannot be used. `setting` is the full path of the field in the
/// config (`routes[0].consumer.tls.ca_file`); it prefixes the error's text, and
/// [`TlsError::problem`] is the rest.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    Read {
        /// The setting.
        setting: String,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holds nothing of the kind expected.
    Pem {
        /// The setting.
        setting: String,
        /// The file.
        path: PathBuf,
        /// What was expected in it.
        expected: &'static str,
    },
    /// A setting that needs another one alone (`client_cert` without `client_key`).
    Incomplete {
        /// The setting.
        setting: String,
        /// What is missing.
        message: String,
    },
    /// `server_name` is not a DNS name or an IP address.
    ServerName {
        /// The setting.
        setting: String,
        /// The value.
        name: String,
    },
    /// rustls refused the settings (a key that does not match its certificate, say).
    Rustls {
        /// The setting.
        setting: String,
        /// Why.
        #[source]
        source: rustls::Error,
    },
}

impl TlsError {
    /// The setting the error is about.
    pub fn setting(&self) -> &str {
        match self {
            TlsError::Read { setting, .. }
            | TlsError::Pem { setting, .. }
            | TlsError::Incomplete { setting, .. }
            | TlsError::ServerName { setting, .. }
            | TlsError::Rustls { setting, .. } => setting,
        }
    }

    /// What is wrong with the setting, without its name.
    pub fn problem(&self) -> String {
        match self {
            TlsError::Read { path, source, .. } => {
                format!("{}: cannot be read: {source}", path.display())
            }
            TlsError::Pem { path, expected, .. } => format!("{}: {expected}", path.display()),
            TlsError::Incomplete { message, .. } => message.clone(),
            TlsError::ServerName { name, .. } => {
                format!("{name:?} is not a DNS name or an IP address")
            }
            TlsError::Rustls { source, .. } => source.to_string(),
        }
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.setting(), self.problem())
    }
}
