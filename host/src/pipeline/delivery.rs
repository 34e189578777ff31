//! HTTP push: one POST per delivery, and the consumer's answer turned into a failure.
//!
//! | consumer answer | failure |
//! |---|---|
//! | 2xx | none: delivered |
//! | other status | kind `http.<status>` |
//! | JSON body `{"error": {"kind": ..., "message": ...}}` | that kind and message |
//! | `Retry-After: <seconds>` | the retry-after hint |
//! | `x-verdict-reject` header (any value; the value is the message) | an explicit reject |
//! | connection refused / reset, DNS | `transport.refused` / `transport.error` |
//! | no answer within `timeout_ms` | `transport.timeout` |

use std::time::Duration;

use crate::ConsumerConfig;
use crate::sources::Delivery;

/// The header that marks an explicit reject.
pub const REJECT_HEADER: &str = "x-verdict-reject";

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
}

/// A consumer's endpoint, its URL parsed once (not per delivery).
#[derive(Debug, Clone)]
pub(crate) struct Consumer {
    config: ConsumerConfig,
    url: Result<reqwest::Url, String>,
}

impl Consumer {
    pub(crate) fn new(config: &ConsumerConfig) -> Consumer {
        Consumer {
            config: config.clone(),
            // Config validation parsed it already; an error here is kept for each delivery.
            url: reqwest::Url::parse(&config.url).map_err(|e| e.to_string()),
        }
    }

    /// Whether this is the endpoint `config` describes.
    pub(crate) fn is(&self, config: &ConsumerConfig) -> bool {
        &self.config == config
    }
}

/// POST `message` to the consumer as delivery `attempt` (1-based).
pub(crate) async fn deliver(
    client: &reqwest::Client,
    consumer: &Consumer,
    message: &Delivery,
    attempt: u32,
) -> Result<(), DeliveryError> {
    let url = match &consumer.url {
        Ok(url) => url.clone(),
        Err(e) => {
            return Err(DeliveryError {
                kind: "transport.error".into(),
                message: format!("the consumer URL `{}` is invalid: {e}", consumer.config.url),
                retry_after_ms: None,
                rejected: false,
            });
        }
    };
    let mut request = client
        .post(url)
        .timeout(Duration::from_millis(consumer.config.timeout_ms))
        .header("x-verdict-message-id", &message.id)
        .header("x-verdict-topic", &message.topic)
        .header("x-verdict-attempt", attempt.to_string())
        .header(
            "content-type",
            message
                .content_type
                .as_deref()
                .unwrap_or("application/octet-stream"),
        );
    for (name, value) in &message.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let response = match request.body(message.payload.clone()).send().await {
        Ok(response) => response,
        Err(e) => return Err(transport(&e)),
    };
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let headers = response.headers().clone();
    let body = response.bytes().await.unwrap_or_default();
    Err(classify(status.as_u16(), &headers, &body))
}

fn transport(e: &reqwest::Error) -> DeliveryError {
    let kind = if e.is_timeout() {
        "transport.timeout"
    } else if e.is_connect() {
        "transport.refused"
    } else {
        "transport.error"
    };
    DeliveryError {
        kind: kind.into(),
        message: error_chain(e),
        retry_after_ms: None,
        rejected: false,
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

/// A non-2xx answer as a failure.
pub(crate) fn classify(
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: &[u8],
) -> DeliveryError {
    let mut kind = format!("http.{status}");
    let mut message = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) {
        let error = &json["error"];
        if let Some(k) = error["kind"]
            .as_str()
            .filter(|k| !k.is_empty() && k.len() <= 128)
        {
            kind = k.to_string();
        }
        if let Some(m) = error["message"].as_str() {
            message = m.chars().take(512).collect();
        }
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let retry_after_ms = header("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| s.saturating_mul(1_000));
    let rejected = headers.contains_key(REJECT_HEADER);
    if let Some(reason) = header(REJECT_HEADER).filter(|r| !r.is_empty()) {
        message = reason.chars().take(512).collect();
    }
    DeliveryError {
        kind,
        message,
        retry_after_ms,
        rejected,
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderMap, HeaderValue};

    use super::*;

    #[test]
    fn answers_become_kinds_hints_and_rejects() {
        let none = HeaderMap::new();
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
}
