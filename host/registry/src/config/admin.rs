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
    /// Allow a non-loopback `listen` address. Needs TLS (`tls_cert` and `tls_key`), or
    /// `allow_remote_plaintext` when a TLS proxy terminates in front.
    pub allow_remote: bool,
    /// With `allow_remote`, serve plain HTTP beyond loopback: only behind a TLS proxy on a
    /// network no one else reaches, and then `allowed_hosts` must name the proxy's host.
    pub allow_remote_plaintext: bool,
    /// PEM certificate chain (leaf first) for HTTPS on `listen` (relative to the config
    /// file); with it, the console's session cookie is `Secure` and answers carry HSTS.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    pub tls_key: Option<PathBuf>,
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
    /// Whether the listener serves HTTPS.
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some() && self.tls_key.is_some()
    }

    /// Why the listener's address, TLS and names do not fit together (`(field, problem)`),
    /// or `None`.
    pub fn exposure_error(&self) -> Option<(&'static str, String)> {
        let loopback = self.listen.ip().is_loopback();
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            let field = if self.tls_cert.is_some() {
                "admin.tls_key"
            } else {
                "admin.tls_cert"
            };
            return Some((
                field,
                "TLS needs both admin.tls_cert and admin.tls_key".into(),
            ));
        }
        if !self.allow_remote && !loopback {
            return Some((
                "admin.listen",
                format!(
                    "{} is not a loopback address; set admin.allow_remote = true (with TLS) to \
                     listen beyond this machine",
                    self.listen
                ),
            ));
        }
        if !loopback && !self.tls() && !self.allow_remote_plaintext {
            return Some((
                "admin.allow_remote",
                format!(
                    "{} is reachable beyond this machine without TLS: tokens and dead letters \
                     would cross the network in plain text. Set admin.tls_cert and \
                     admin.tls_key, or admin.allow_remote_plaintext = true if a TLS proxy in \
                     front terminates it",
                    self.listen
                ),
            ));
        }
        if self.allow_remote_plaintext && !self.tls() && self.allowed_hosts.is_empty() {
            return Some((
                "admin.allowed_hosts",
                "admin.allow_remote_plaintext needs the name the TLS proxy in front reaches \
                 the listener by, in admin.allowed_hosts"
                    .into(),
            ));
        }
        None
    }

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
            allow_remote_plaintext: false,
            tls_cert: None,
            tls_key: None,
            token_env: "VERDICT_ADMIN_TOKEN".into(),
            token_file: None,
            tokens_file: None,
            open_reads: OpenReads::Summary,
            max_body_bytes: 32 << 20,
            allowed_hosts: Vec::new(),
        }
    }
}
