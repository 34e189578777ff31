//! HTTP push: one POST per delivery, and the consumer's answer turned into a failure.
//!
//! | consumer answer | failure |
//! |---|---|
//! | 2xx | none: delivered |
//! | other status | kind `http.<status>` |
//! | JSON body `{"error": {"kind": ..., "message": ...}}` | that kind and message |
//! | `Retry-After: <seconds>` or `Retry-After: <HTTP-date>` | the retry-after hint |
//! | `x-verdict-reject` header (any value; the value is the message) | an explicit reject |
//! | 3xx (a redirect) | `http.3xx`: redirects are never followed |
//! | connection refused / reset, DNS | `transport.refused` / `transport.error` |
//! | no answer within `timeout_ms` | `transport.timeout` |
//! | the TLS handshake refused a certificate / failed | `tls.certificate` / `tls.handshake` |
//!
//! A TLS failure is configuration - the gateway's CA, client certificate or server name, or
//! the consumer's certificate - never something a retry heals, and it never reaches the
//! policy: the pipeline keeps the message without spending an attempt and reports the route
//! (see [`DeliveryError::is_configuration`]). Only the gateway's own TLS stack sets it; a
//! consumer's answer cannot claim it, whatever kind its body names.
//!
//! Everything taken from an answer is bounded and cleaned ([`verdict_runtime::text`]): at most
//! [`MAX_ERROR_BODY_BYTES`] of the body are read, a kind that is not a plain token is
//! ignored (the status kind stands), messages are one line of at most 512 bytes.
//!
//! The request carries the message's own headers first, then the gateway's
//! (`x-verdict-message-id`, `-topic`, `-attempt`, `content-type`), which replace any of the
//! same name; a producer's `x-verdict-*`, hop-by-hop, `host`, `authorization`, `cookie`
//! and `content-length` headers are never forwarded.

use std::time::{Duration, SystemTime};

use crate::model::Delivery;
use crate::telemetry::DeliveryTrace;
use verdict_registry::ConsumerConfig;
use verdict_runtime::text::{MAX_MESSAGE_BYTES, is_kind, one_line};
use verdict_telemetry::propagation;

/// The header that marks an explicit reject.
pub const REJECT_HEADER: &str = "x-verdict-reject";

/// The most of a failed answer's body the gateway reads (for its error kind and message).
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Whether a message header may be forwarded to the consumer: not the gateway's own, not
/// one that addresses or authenticates the request, not hop-by-hop, and a valid header.
pub fn forwardable(name: &str, value: &str) -> bool {
    const NEVER: [&str; 13] = [
        "host",
        "authorization",
        "proxy-authorization",
        "cookie",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
    ];
    let lower = name.to_ascii_lowercase();
    !lower.starts_with("x-verdict-")
        && !lower.starts_with("proxy-")
        && !NEVER.contains(&lower.as_str())
        && reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
        && reqwest::header::HeaderValue::from_str(value).is_ok()
}

/// Why a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryError {
    /// Error kind.
    pub kind: String,
    /// Error message.
    pub message: String,
    /// The consumer's `Retry-After`, in ms.
    pub retry_after_ms: Option<u64>,
    /// The consumer rejected the message explicitly.
    pub rejected: bool,
    /// The request never reached the consumer because TLS failed (set by the gateway's TLS
    /// stack only, never from an answer).
    pub tls: Option<verdict_tls::TlsFailure>,
    /// The answer's status, when one came.
    pub status: Option<u16>,
}

impl DeliveryError {
    /// A failure of the gateway's configuration (or the consumer's certificate), not of the
    /// message: kept without spending an attempt, never decided by the policy.
    pub fn is_configuration(&self) -> bool {
        self.tls.is_some()
    }
}

/// A consumer's endpoint: its URL parsed and its HTTP client (with the route's TLS
/// settings) made once, not per delivery.
#[derive(Debug, Clone)]
pub struct Consumer {
    config: ConsumerConfig,
    url: Result<reqwest::Url, String>,
    client: Result<reqwest::Client, String>,
}

impl Consumer {
    /// The endpoint a route's `consumer` config describes.
    pub fn new(config: &ConsumerConfig) -> Consumer {
        Consumer {
            config: config.clone(),
            // Config validation parsed it already; an error here is kept for each delivery.
            url: reqwest::Url::parse(&config.url).map_err(|e| e.to_string()),
            client: http_client(config.tls.as_ref()),
        }
    }

    /// Deliveries in flight at most.
    pub(crate) fn concurrency(&self) -> usize {
        self.config.concurrency.max(1)
    }

    /// Whether this is the endpoint `config` describes.
    pub(crate) fn is(&self, config: &ConsumerConfig) -> bool {
        &self.config == config
    }
}

/// The HTTP client for a consumer with `tls` settings: the one TLS stack
/// ([`verdict_tls`]), redirects never followed (the gateway must not forward payloads
/// wherever a consumer points). The config was checked when it was loaded; an error here
/// (a file removed since) is kept for each delivery.
pub(crate) fn http_client(tls: Option<&verdict_tls::TlsConfig>) -> Result<reqwest::Client, String> {
    let tls = tls
        .cloned()
        .unwrap_or_default()
        .client_config("consumer.tls")
        .map_err(|e| e.to_string())?;
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .tls_backend_preconfigured(rustls::ClientConfig::clone(&tls))
        .build()
        .map_err(|e| error_chain(&e))
}

/// POST `message` to the consumer as delivery `attempt` (1-based).
pub async fn deliver(
    consumer: &Consumer,
    message: &Delivery,
    attempt: u32,
) -> Result<(), DeliveryError> {
    deliver_traced(consumer, message, attempt, &DeliveryTrace::off()).await
}

/// [`deliver`], the push a span of `trace` whose context the consumer receives as
/// `traceparent` (in place of the producer's, whose trace it continues).
pub(crate) async fn deliver_traced(
    consumer: &Consumer,
    message: &Delivery,
    attempt: u32,
    trace: &DeliveryTrace,
) -> Result<(), DeliveryError> {
    let push = trace.push(&consumer.config.url, attempt);
    let result = post(consumer, message, attempt, push.traceparent()).await;
    match &result {
        Ok(status) => push.finish(Some(*status), None),
        Err(e) => push.finish(e.status, Some(&e.kind)),
    }
    result.map(drop)
}

/// The POST itself: the answer's status when it is a success.
async fn post(
    consumer: &Consumer,
    message: &Delivery,
    attempt: u32,
    traceparent: Option<String>,
) -> Result<u16, DeliveryError> {
    let failed = |kind: &str, message: String, tls| DeliveryError {
        kind: kind.into(),
        message: one_line(
            &verdict_runtime::redact::redact(&message),
            MAX_MESSAGE_BYTES,
        ),
        retry_after_ms: None,
        rejected: false,
        tls,
        status: None,
    };
    let url = match &consumer.url {
        Ok(url) => url.clone(),
        Err(e) => {
            return Err(failed(
                "transport.error",
                format!("the consumer URL `{}` is invalid: {e}", consumer.config.url),
                None,
            ));
        }
    };
    let client = match &consumer.client {
        Ok(client) => client,
        Err(e) => {
            return Err(failed(
                "tls.config",
                format!("the consumer's TLS settings cannot be used: {e}"),
                Some(verdict_tls::TlsFailure::Handshake),
            ));
        }
    };
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
    let mut headers = HeaderMap::new();
    for (name, value) in &message.headers {
        if forwardable(name, value)
            && let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            )
        {
            headers.append(name, value);
        }
    }
    // The gateway's own headers last, replacing any of the same name; values from the
    // message are made one line first (an id or topic is the producer's text).
    let own = |text: &str| {
        HeaderValue::from_str(&one_line(text, 1_024)).unwrap_or(HeaderValue::from_static(""))
    };
    headers.insert("x-verdict-message-id", own(&message.id));
    headers.insert("x-verdict-topic", own(&message.topic));
    headers.insert("x-verdict-attempt", HeaderValue::from(attempt));
    if let Some(value) = traceparent.and_then(|v| HeaderValue::from_str(&v).ok()) {
        headers.insert(propagation::TRACEPARENT, value);
    }
    headers.insert(
        "content-type",
        message
            .content_type
            .as_deref()
            .and_then(|ct| HeaderValue::from_str(ct).ok())
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    let request = client
        .post(url)
        .timeout(Duration::from_millis(consumer.config.timeout_ms))
        .headers(headers);
    let request = request.body(message.payload.clone());
    // A pooled connection can close between being picked and being written to (a server
    // that refuses the gateway's certificate closes it just after the TLS 1.3 handshake):
    // the client then cancels the request unsent, naming no cause. Unsent, it is sent again
    // - a few times, as the next pooled connection may be closing too (many deliveries at
    // once to such a server) - until a connection's failure names its cause.
    let mut request = request;
    let mut resent = 0;
    let response = loop {
        let again = request.try_clone();
        match request.send().await {
            Ok(response) => break response,
            Err(e) => match again {
                Some(again) if resent < MAX_UNSENT_RESENDS && canceled_unsent(&e) => {
                    resent += 1;
                    request = again;
                }
                _ => return Err(transport(&e)),
            },
        }
    };
    let status = response.status();
    if status.is_success() {
        return Ok(status.as_u16());
    }
    let headers = response.headers().clone();
    let body = read_capped(response, MAX_ERROR_BODY_BYTES).await;
    Err(classify(
        status.as_u16(),
        &headers,
        &body,
        SystemTime::now(),
    ))
}

/// At most `max` bytes of a body: a consumer cannot make the gateway buffer more.
async fn read_capped(mut response: reqwest::Response, max: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = max - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= max {
            break;
        }
    }
    body
}

/// How many times a request the HTTP client canceled before sending any of it is sent again.
const MAX_UNSENT_RESENDS: u32 = 3;

/// Whether the HTTP client canceled the request before sending any of it.
fn canceled_unsent(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        source = s.source();
    }
    false
}

fn transport(e: &reqwest::Error) -> DeliveryError {
    let tls = verdict_tls::TlsFailure::of(e);
    let kind = if let Some(tls) = tls {
        tls.kind()
    } else if e.is_timeout() {
        "transport.timeout"
    } else if e.is_connect() {
        "transport.refused"
    } else {
        "transport.error"
    };
    DeliveryError {
        kind: kind.into(),
        // The client quotes the consumer's URL, whose userinfo or query may hold a key; a
        // refused certificate quotes the names the consumer's certificate carries (as many
        // as it likes): redacted, then one bounded line like every answer.
        message: one_line(
            &verdict_runtime::redact::redact(&error_chain(e)),
            MAX_MESSAGE_BYTES,
        ),
        retry_after_ms: None,
        rejected: false,
        tls,
        status: None,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text += ": ";
        text += &s.to_string();
        source = s.source();
    }
    text
}

/// A non-2xx answer (received at `now`) as a failure: `body` is what was read of it (at most
/// [`MAX_ERROR_BODY_BYTES`]).
pub fn classify(
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> DeliveryError {
    let mut kind = format!("http.{status}");
    let mut message = one_line(
        &String::from_utf8_lossy(&body[..body.len().min(MAX_MESSAGE_BYTES)]),
        MAX_MESSAGE_BYTES,
    );
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) {
        let error = &json["error"];
        match error["kind"].as_str() {
            Some(k) if is_kind(k) => kind = k.to_string(),
            // Not a usable kind (too long, control characters, ...): the status kind
            // stands, and what the consumer sent is kept, cleaned, in the message.
            Some(k) => message = one_line(&format!("unusable kind {k:?}"), MAX_MESSAGE_BYTES),
            None => {}
        }
        if let Some(m) = error["message"].as_str() {
            message = one_line(m, MAX_MESSAGE_BYTES);
        }
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let retry_after_ms = header("retry-after").and_then(|v| retry_after(v, now));
    let rejected = headers.contains_key(REJECT_HEADER);
    if let Some(reason) = header(REJECT_HEADER).filter(|r| !r.is_empty()) {
        message = one_line(reason, MAX_MESSAGE_BYTES);
    }
    DeliveryError {
        kind,
        message,
        retry_after_ms,
        rejected,
        tls: None,
        status: Some(status),
    }
}

/// `Retry-After` in ms: delay-seconds, or an HTTP-date (a date already past is 0).
fn retry_after(value: &str, now: SystemTime) -> Option<u64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds.saturating_mul(1_000));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let wait = at.duration_since(now).unwrap_or_default();
    Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderMap, HeaderValue};

    use super::*;

    #[test]
    fn a_consumer_naming_a_tls_kind_is_judged_like_any_answer() {
        // Only the gateway's TLS stack marks a failure as configuration (kept unjudged,
        // no attempt spent); a consumer claiming it would loop its messages forever.
        for kind in ["tls.handshake", "tls.certificate", "tls.config"] {
            let body = format!(r#"{{"error": {{"kind": "{kind}", "message": "trust me"}}}}"#);
            let failure = classify(500, &HeaderMap::new(), body.as_bytes(), SystemTime::now());
            assert_eq!(failure.kind, kind, "the kind is the consumer's to name");
            assert!(!failure.is_configuration(), "{kind} from an answer");
        }
    }

    #[test]
    fn answers_become_kinds_hints_and_rejects() {
        let none = HeaderMap::new();
        let classify = |status, headers: &HeaderMap, body: &[u8]| {
            classify(status, headers, body, SystemTime::UNIX_EPOCH)
        };
        assert_eq!(classify(503, &none, b"busy").kind, "http.503");
        assert_eq!(classify(503, &none, b"busy").message, "busy");
        let refined = classify(
            422,
            &none,
            br#"{"error": {"kind": "schema.unknown-version", "message": "v9"}}"#,
        );
        assert_eq!(
            (refined.kind.as_str(), refined.message.as_str()),
            ("schema.unknown-version", "v9")
        );
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("7"));
        headers.insert(REJECT_HEADER, HeaderValue::from_static("duplicate order"));
        let e = classify(429, &headers, b"");
        assert_eq!(e.retry_after_ms, Some(7_000));
        assert!(e.rejected);
        assert_eq!(e.message, "duplicate order");
        // A kind the consumer cannot be trusted with is ignored.
        let long = format!(r#"{{"error": {{"kind": "{}"}}}}"#, "x".repeat(500));
        assert_eq!(classify(500, &none, long.as_bytes()).kind, "http.500");
    }

    #[test]
    fn hostile_answers_are_cleaned_before_they_go_anywhere() {
        let none = HeaderMap::new();
        let injected =
            br#"{"error": {"kind": "schema.bad\r\nx-injected: 1", "message": "a\r\nb"}}"#;
        let e = classify(422, &none, injected, SystemTime::UNIX_EPOCH);
        assert_eq!(e.kind, "http.422", "a kind with CR/LF is not used");
        assert_eq!(e.message, "a  b");
        let huge = format!(
            r#"{{"error": {{"kind": "x", "message": "{}"}}}}"#,
            "m".repeat(100_000)
        );
        let e = classify(500, &none, huge.as_bytes(), SystemTime::UNIX_EPOCH);
        assert_eq!(e.message.len(), MAX_MESSAGE_BYTES);
        let mut headers = HeaderMap::new();
        headers.insert(REJECT_HEADER, HeaderValue::from_static("no\tway"));
        assert_eq!(
            classify(409, &headers, b"", SystemTime::UNIX_EPOCH).message,
            "no way"
        );
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2099 07:27:00 GMT").unwrap();
        assert_eq!(retry_after("120", now), Some(120_000));
        assert_eq!(
            retry_after("Wed, 21 Oct 2099 07:28:00 GMT", now),
            Some(60_000)
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(0),
            "past: now"
        );
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("99999999999999999999", now), None);
    }

    #[test]
    fn producer_headers_cannot_speak_for_the_gateway() {
        for name in [
            "x-verdict-attempt",
            "X-Verdict-Topic",
            "Host",
            "authorization",
            "Content-Length",
            "transfer-encoding",
            "proxy-authorization",
        ] {
            assert!(!forwardable(name, "1"), "{name}");
        }
        assert!(!forwardable("tenant", "a\r\nb: c"), "not a valid value");
        assert!(!forwardable("bad name", "v"));
        assert!(forwardable("tenant", "eu"));
        assert!(forwardable("traceparent", "00-abc-def-01"));
    }
}
