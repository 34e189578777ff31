//! `[admin]`: where the admin HTTP API listens and how changes are authorised.

use std::net::SocketAddr;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

/// The admin API and the console. Health, readiness and metrics are open; summaries
/// without message content (routes, policies, counts) are open unless `open_reads =
/// "none"`; message content and every change need `Authorization: Bearer <token>` of an
/// identity whose role allows it (the admin token is the identity `admin`, role `admin`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Address to listen on. Anything but a loopback address is refused unless
    /// `allow_remote` is set.
    #[schemars(with = "String")]
    pub listen: SocketAddr,
    /// Allow a non-loopback `listen` address (put TLS and a firewall in front of it).
    pub allow_remote: bool,
    /// Environment variable holding the admin token (the identity `admin`, role `admin`).
    pub token_env: String,
    /// File holding the admin token (relative to the config file); read when the
    /// environment variable is unset.
    pub token_file: Option<PathBuf>,
    /// File of named identities (relative to the config file): one per line, `NAME ROLE
    /// sha256:DIGEST`, roles `read`, `operate`, `edit`, `admin`. `verdict admin token new
    /// NAME --role ROLE` makes a token and its line. Edits take effect within a second.
    pub tokens_file: Option<PathBuf>,
    /// What is open without a credential besides health, readiness and metrics:
    /// `"summary"` (routes, policies, generations, shadow reports, DLQ depths, decide) or
    /// `"none"`. Message content always needs the role `read`.
    pub open_reads: OpenReads,
    /// Largest request body (an uploaded component is one).
    pub max_body_bytes: usize,
    /// Names the listener answers to besides its listen address and `localhost`,
    /// `127.0.0.1`, `[::1]` with its port: `host` (any port) or `host:port`, such as the name
    /// of a proxy in front. A request whose `Host` is none of them gets 421 - a web page that
    /// rebinds its own name to this machine (DNS rebinding) reads nothing.
    pub allowed_hosts: Vec<String>,
}

/// What the admin listener answers without a credential.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OpenReads {
    /// Summaries without message content.
    #[default]
    Summary,
    /// Only health, readiness and metrics.
    None,
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
            tokens_file: None,
            open_reads: OpenReads::Summary,
            max_body_bytes: 32 << 20,
            allowed_hosts: Vec::new(),
        }
    }
}
