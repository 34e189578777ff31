//! Consumer answers and producer headers: what a consumer's answer becomes, and which
//! producer headers reach the consumer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::pipeline::{MAX_ERROR_BODY_BYTES, REJECT_HEADER, classify, forwardable};
use proptest::prelude::*;
use serde_json::{Value, json};
use verdict_fuzz::*;
use verdict_runtime::text::{MAX_KIND_BYTES, MAX_MESSAGE_BYTES, is_kind};

// ---------------------------------------------------------------------------------------
// 6. Consumer answers: status + headers + body -> failure.

fn http_date(at: SystemTime) -> String {
    httpdate::fmt_http_date(at)
}

fn retry_after_value() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        2 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        1 => (0..100_000u64).prop_map(|n| format!("  {n}\t").into_bytes()),
        1 => Just(b"99999999999999999999999".to_vec()),
        2 => (0..4_102_444_800u64).prop_map(|s| http_date(UNIX_EPOCH + Duration::from_secs(s)).into_bytes()),
        1 => prop::sample::select(&[
            "Wed, 21 Oct 2015 07:28:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "soon", "-1", "1.5",
            "", "Fri, 31 Dec 9999 23:59:59 GMT", "Sat, 01 Jan 10000 00:00:00 GMT",
        ][..]).prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..40),
    ]
    .boxed()
}

fn answer_body() -> BoxedStrategy<Vec<u8>> {
    let kind = prop_oneof![
        3 => Just(Value::from("schema.unknown-version")),
        3 => nasty_string(140).prop_map(Value::String),
        1 => (0..=MAX_KIND_BYTES + 2).prop_map(|n| Value::String("k".repeat(n))),
        1 => json_leaf(),
    ];
    let message = prop_oneof![3 => nasty_string(600).prop_map(Value::String), 1 => json_value()];
    let error = (kind, message, any::<bool>()).prop_map(|(kind, message, nested)| {
        let body = json!({"error": {"kind": kind, "message": message}});
        if nested { body } else { json!({"error": kind}) }
    });
    prop_oneof![
        3 => any_bytes(),
        4 => error.prop_map(|v| v.to_string().into_bytes()),
        1 => (error_strategy_bytes(), edits(JSON_TOKENS)).prop_map(|(b, e)| mutate(&b, &e)),
        1 => (1..MAX_ERROR_BODY_BYTES / 100).prop_map(|n| {
            format!("{{\"error\": {{\"kind\": \"x\", \"message\": \"{}\"}}}}", "m\r\n".repeat(n * 30)).into_bytes()
        }),
    ]
    .boxed()
}

fn error_strategy_bytes() -> BoxedStrategy<Vec<u8>> {
    Just(br#"{"error": {"kind": "schema.bad", "message": "a\r\nb"}}"#.to_vec()).boxed()
}

fn header_pairs() -> BoxedStrategy<Vec<(String, Vec<u8>)>> {
    let name = prop_oneof![
        3 => prop::sample::select(&["retry-after", REJECT_HEADER, "content-type", "x-other"][..]).prop_map(String::from),
        1 => short_string(12),
    ];
    let value = prop_oneof![
        3 => retry_after_value(),
        2 => nasty_string(600).prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ];
    prop::collection::vec((name, value), 0..5).boxed()
}

proptest! {
    #![proptest_config(config())]

    /// `classify`: the failure made of any answer has a kind that is a plain bounded token
    /// (the consumer's when it is one, else `http.<status>`), a message of one line of at
    /// most 512 bytes, `rejected` exactly when the reject header is there, and the
    /// `Retry-After` hint an independent reading gives (seconds, or an HTTP-date; past is 0).
    #[test]
    fn consumer_answer(status in prop_oneof![100..600u16, any::<u16>()],
                       pairs in header_pairs(),
                       body in answer_body(),
                       now_s in 0..4_102_444_800u64) {
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &pairs {
            if let (Ok(n), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_bytes(value),
            ) {
                headers.append(n, v);
            }
        }
        let body = &body[..body.len().min(MAX_ERROR_BODY_BYTES)];
        let now = UNIX_EPOCH + Duration::from_secs(now_s);
        let e = classify(status, &headers, body, now);
        prop_assert!(is_kind(&e.kind), "kind {:?}", e.kind);
        prop_assert!(e.message.len() <= MAX_MESSAGE_BYTES, "{} bytes", e.message.len());
        prop_assert!(is_one_line(&e.message), "{:?}", e.message);
        prop_assert_eq!(e.rejected, headers.contains_key(REJECT_HEADER));
        let consumer_kind = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["error"]["kind"].as_str().map(String::from))
            .filter(|k| is_kind(k));
        prop_assert_eq!(&e.kind, &consumer_kind.unwrap_or_else(|| format!("http.{status}")));
        let want = headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let v = v.trim();
                match v.parse::<u64>() {
                    Ok(s) => Some(s.saturating_mul(1_000)),
                    Err(_) => httpdate::parse_http_date(v).ok().map(|at| {
                        at.duration_since(now).map_or(0, |d| d.as_millis().min(u128::from(u64::MAX)) as u64)
                    }),
                }
            });
        prop_assert_eq!(e.retry_after_ms, want);
    }

    /// `forwardable`: a producer header that reaches the consumer is a valid header, never
    /// the gateway's own (`x-verdict-*`), never one that addresses or authenticates the
    /// request or is hop-by-hop, and its value holds no CR, LF or NUL.
    #[test]
    fn producer_headers(name in prop_oneof![
                            2 => prop::sample::select(&[
                                "x-verdict-attempt", "X-Verdict-Topic", "Host", "authorization",
                                "Content-Length", "transfer-encoding", "proxy-x", "Cookie", "TE",
                                "tenant", "traceparent", "content-type", "Connection",
                            ][..]).prop_map(String::from),
                            1 => short_string(16),
                        ],
                        value in nasty_string(64)) {
        if forwardable(&name, &value) {
            let lower = name.to_ascii_lowercase();
            prop_assert!(!lower.starts_with("x-verdict-") && !lower.starts_with("proxy-"));
            for never in ["host", "authorization", "cookie", "content-length", "content-type",
                          "transfer-encoding", "connection", "keep-alive", "te", "trailer",
                          "upgrade", "expect"] {
                prop_assert_ne!(lower.as_str(), never);
            }
            prop_assert!(!value.contains(['\r', '\n', '\0']), "{value:?}");
            prop_assert!(reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok());
        }
    }
}
