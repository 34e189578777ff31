//! `[admin]`: where the admin HTTP API listens and how changes are authorised.

use std::net::SocketAddr;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

/// The admin API. Reads (routes, policies, history, shadow reports, decisions) are open on
/// the listen address; every change needs `Authorization: Bearer <token>`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Address to listen on. Anything but a loopback address is refused unless
    /// `allow_remote` is set.
    #[schemars(with = "String")]
    pub listen: SocketAddr,
    /// Allow a non-loopback `listen` address (put TLS and a firewall in front of it).
    pub allow_remote: bool,
    /// Environment variable holding the bearer token.
    pub token_env: String,
    /// File holding the bearer token (relative to the config file); read when the
    /// environment variable is unset.
    pub token_file: Option<PathBuf>,
    /// Largest request body (an uploaded component is one).
    pub max_body_bytes: usize,
    /// Names the listener answers to besides its listen address and `localhost`,
    /// `127.0.0.1`, `[::1]` with its port: `host` (any port) or `host:port`, such as the name
    /// of a proxy in front. A request whose `Host` is none of them gets 421 - a web page that
    /// rebinds its own name to this machine (DNS rebinding) reads nothing.
    pub allowed_hosts: Vec<String>,
}

impl AdminConfig {
    /// Why an `allowed_hosts` entry cannot be one (`None` when it can).
    pub fn allowed_host_error(entry: &str) -> Option<&'static str> {
        if entry.is_empty() {
            Some("is empty")
        } else if entry.contains("://") {
            Some("is a URL: name the host (and port) only, as a Host header would")
        } else if entry
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '/' | '@' | '?' | '#'))
        {
            Some("holds a space, `/`, `@`, `?` or `#`: name the host (and port) only")
        } else if entry.len() > 255 {
            Some("is longer than 255 bytes")
        } else {
            None
        }
    }
}

/// The admin API's default port.
pub const DEFAULT_ADMIN_PORT: u16 = 9474;

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_ADMIN_PORT)),
            allow_remote: false,
            token_env: "VERDICT_ADMIN_TOKEN".into(),
            token_file: None,
            max_body_bytes: 32 << 20,
            allowed_hosts: Vec::new(),
        }
    }
}
