//! The `Host` check, before any routing: the admin listener answers only to the names it is
//! meant to be reached by.
//!
//! A web page the operator has open can point its own name at 127.0.0.1 (DNS rebinding)
//! and read whatever the listener answers, since the browser then treats the listener as
//! that page's own origin. Its requests still name the page's host in `Host` (and in
//! `Origin`), so a listener that refuses every name but its own refuses them: 421
//! Misdirected Request, nothing else, counted in `verdict_admin_misdirected_requests_total`.
//! Origin checks compare against the same names, never against the request's own `Host`,
//! which under rebinding the attacker controls as much as `Origin`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::metrics::AdminCounters;

/// The names a listener answers to.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    /// `host:port` authorities, lowercase.
    exact: Vec<String>,
    /// Hosts allowed with any port (or none), lowercase.
    any_port: Vec<String>,
}

impl AllowedHosts {
    /// The names of a listener bound to `listen`: `localhost`, `127.0.0.1` and `[::1]` with
    /// its port, its own address when it is not a wildcard, and `extra` (`host` for any port,
    /// `host:port` for one).
    pub fn new(listen: SocketAddr, extra: &[String]) -> AllowedHosts {
        let port = listen.port();
        let mut exact: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|h| format!("{h}:{port}"))
            .collect();
        if !listen.ip().is_unspecified() {
            exact.push(listen.to_string());
        }
        let mut any_port = Vec::new();
        for entry in extra {
            let entry = normalise(entry);
            if split_port(&entry).is_some() {
                exact.push(entry);
            } else {
                any_port.push(entry);
            }
        }
        AllowedHosts { exact, any_port }
    }

    /// Loopback names on any port: for an API not bound to a known listener (tests, and
    /// embedders that serve the router themselves).
    pub fn loopback() -> AllowedHosts {
        AllowedHosts {
            exact: Vec::new(),
            any_port: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
        }
    }

    /// Whether `authority` (a `Host` header's value, or an origin's `host[:port]`) names
    /// this listener.
    pub fn allows(&self, authority: &str) -> bool {
        let authority = normalise(authority);
        if self.exact.contains(&authority) {
            return true;
        }
        let host = split_port(&authority).map_or(authority.as_str(), |(host, _)| host);
        self.any_port.iter().any(|h| h == host)
    }

    /// Whether an `Origin` header's value is a page served by this listener.
    pub fn allows_origin(&self, origin: &str) -> bool {
        let rest = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        rest.is_some_and(|authority| !authority.contains('/') && self.allows(authority))
    }
}

/// Lowercase, without a trailing dot on the name (`localhost.` is `localhost`).
fn normalise(authority: &str) -> String {
    let lower = authority.trim().to_ascii_lowercase();
    match split_port(&lower) {
        Some((host, port)) => format!("{}:{port}", host.trim_end_matches('.')),
        None => lower.trim_end_matches('.').to_string(),
    }
}

/// `host:port` as its host and port; `None` without a port (`[::1]` alone has colons
/// inside its brackets, not a port).
fn split_port(authority: &str) -> Option<(&str, &str)> {
    let (host, port) = authority.rsplit_once(':')?;
    let is_port = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    (is_port && (!host.starts_with('[') || host.ends_with(']'))).then_some((host, port))
}

/// What the check needs: the names, and where to count a refusal.
#[derive(Clone)]
pub(crate) struct HostCheck {
    pub(crate) hosts: Arc<AllowedHosts>,
    pub(crate) counters: AdminCounters,
}

/// Let the request through only when it names this listener: its `Host` header (HTTP/1.1)
/// or its URI's authority (HTTP/2). A request naming none is refused too: every HTTP/1.1
/// client sends one.
pub(crate) async fn require_known_host(
    State(check): State<HostCheck>,
    request: Request,
    next: Next,
) -> Response {
    let named = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        });
    if named.is_some_and(|host| check.hosts.allows(&host)) {
        return next.run(request).await;
    }
    check.counters.misdirected_requests.inc();
    (
        StatusCode::MISDIRECTED_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "misdirected request: this listener does not answer to that host\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(extra: &[&str]) -> AllowedHosts {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        AllowedHosts::new("127.0.0.1:9474".parse().unwrap(), &extra)
    }

    #[test]
    fn loopback_names_with_the_listeners_port_are_allowed() {
        let h = hosts(&[]);
        for ok in [
            "127.0.0.1:9474",
            "localhost:9474",
            "LOCALHOST:9474",
            "localhost.:9474",
            "[::1]:9474",
        ] {
            assert!(h.allows(ok), "{ok}");
        }
        for refused in [
            "evil.example:9474",
            "evil.example",
            "localhost",
            "localhost:80",
            "127.0.0.1:9475",
            "127.0.0.1.evil.example:9474",
            "",
            "[::1]",
        ] {
            assert!(!h.allows(refused), "{refused}");
        }
    }

    #[test]
    fn configured_names_allow_any_port_or_the_one_they_name() {
        let h = hosts(&["verdict.internal", "proxy.example:8443"]);
        assert!(h.allows("verdict.internal"));
        assert!(h.allows("verdict.internal:443"));
        assert!(h.allows("proxy.example:8443"));
        assert!(!h.allows("proxy.example"));
        assert!(!h.allows("proxy.example:8080"));
        assert!(!h.allows("sub.verdict.internal"));
    }

    #[test]
    fn a_wildcard_listener_answers_only_to_loopback_and_configured_names() {
        let h = AllowedHosts::new("0.0.0.0:9474".parse().unwrap(), &[]);
        assert!(h.allows("127.0.0.1:9474"));
        assert!(!h.allows("0.0.0.0:9474"));
        assert!(!h.allows("10.0.0.5:9474"));
        let h = AllowedHosts::new("10.0.0.5:9474".parse().unwrap(), &[]);
        assert!(h.allows("10.0.0.5:9474"));
    }

    #[test]
    fn origins_are_checked_against_the_same_names_never_the_requests_host() {
        let h = hosts(&[]);
        assert!(h.allows_origin("http://127.0.0.1:9474"));
        assert!(h.allows_origin("https://localhost:9474"));
        // Under rebinding the page's origin is its own name, whatever `Host` says.
        assert!(!h.allows_origin("http://evil.example:9474"));
        assert!(!h.allows_origin("null"));
        assert!(!h.allows_origin("ftp://127.0.0.1:9474"));
        assert!(!h.allows_origin("http://127.0.0.1:9474/path"));
    }
}
