//! The operator's TLS settings for one peer.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// TLS to one peer: whom to trust and who the gateway is. Every field is optional; the empty
/// table trusts the platform's root certificates and presents no client certificate. Paths
/// are relative to the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of CA certificates trusted besides the platform's roots (a private CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain (leaf first) the gateway presents, for peers that verify
    /// clients (mutual TLS). Needs `client_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert` (PKCS#8, PKCS#1 or SEC1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
    /// The name the peer's certificate must carry, when it is not the host the gateway
    /// connects to (an IP address, or a name behind a load balancer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

impl TlsConfig {
    /// The same settings with relative paths taken from `base` (the config file's
    /// directory).
    pub fn resolved(&self, base: &Path) -> TlsConfig {
        let join = |p: &Option<PathBuf>| p.as_ref().map(|p| base.join(p));
        TlsConfig {
            ca_file: join(&self.ca_file),
            client_cert: join(&self.client_cert),
            client_key: join(&self.client_key),
            server_name: self.server_name.clone(),
        }
    }

    /// Whether the settings add nothing to the defaults.
    pub fn is_default(&self) -> bool {
        self == &TlsConfig::default()
    }
}
