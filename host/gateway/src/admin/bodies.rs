//! The admin API's request bodies, parsed and checked exactly as the handlers do before
//! anything reaches the registry or the store: one function per endpoint that takes a
//! body (and what the gateway's fuzz targets feed).
//!
//! Every error is a 400 `bad_request` whose message starts with `request body` (or
//! `failure` for the failure inside a `POST /v1/decide`) and names the field.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ApiError;
use crate::dlq::{JobAction, ReplayOptions};
use crate::store::{DlqFilter, NewMessage};
use verdict_registry::ShadowConfig;
use verdict_runtime::FailureSpec;

/// Largest batch in one publish.
pub const MAX_BATCH: usize = 10_000;
/// Longest message id a publish accepts.
pub const MAX_ID_BYTES: usize = 256;

/// Parse a JSON body into `T`; errors name the field.
pub fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            String::new()
        } else {
            format!("{path}: ")
        };
        ApiError::bad_request(format!("request body: {at}{}", e.inner()))
    })?;
    de.end()
        .map_err(|e| ApiError::bad_request(format!("request body: {e}")))?;
    Ok(value)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideRequest {
    topic: String,
    failure: Value,
}

/// `POST /v1/decide`: the topic and the failure to decide.
pub fn decide(body: &[u8]) -> Result<(String, FailureSpec), ApiError> {
    let request: DecideRequest = json(body)?;
    let spec = FailureSpec::from_json(&request.failure.to_string())
        .map_err(|e| ApiError::bad_request(format!("failure: {e}")))?;
    Ok((request.topic, spec))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivateRequest {
    sha256: String,
}

/// `POST /v1/policies/{name}/activate`: the digest of the upload to activate.
pub fn activate(body: &[u8]) -> Result<String, ApiError> {
    json::<ActivateRequest>(body).map(|r| r.sha256)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RollbackRequest {
    #[serde(default)]
    topic: Option<String>,
}

/// `POST /v1/rollback`: the one route to roll back, or none for all (an empty body too).
pub fn rollback(body: &[u8]) -> Result<Option<String>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    json::<RollbackRequest>(body).map(|r| r.topic)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShadowRequest {
    topic: String,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    config: Option<Value>,
}

/// `POST /v1/shadow`: the route and its new shadow (none: the shadow off).
pub fn shadow(body: &[u8]) -> Result<(String, Option<ShadowConfig>), ApiError> {
    let request: ShadowRequest = json(body)?;
    let shadow = match (request.policy, request.config) {
        (Some(policy), config) => Some(ShadowConfig { policy, config }),
        (None, None) => None,
        (None, Some(_)) => {
            return Err(ApiError::bad_request(
                "request body: config: a shadow config needs a `policy` (omit both to turn the \
                 shadow off)",
            ));
        }
    };
    Ok((request.topic, shadow))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct ReplayRequest {
    filter: DlqFilter,
    dry_run: bool,
    rate_per_s: Option<f64>,
    canary: Option<usize>,
    canary_timeout_ms: Option<u64>,
    note: Option<String>,
}

/// `POST /v1/dlq/replay`: which dead letters, and how.
pub fn replay(body: &[u8]) -> Result<(DlqFilter, ReplayOptions), ApiError> {
    let request: ReplayRequest = json(body)?;
    let options = ReplayOptions {
        dry_run: request.dry_run,
        rate_per_s: request.rate_per_s,
        canary: request.canary,
        canary_timeout: Duration::from_millis(request.canary_timeout_ms.unwrap_or(120_000)),
        note: request
            .note
            .unwrap_or_else(|| "replayed through the admin API".into()),
        cancel: None,
        trace: crate::telemetry::ReplayTrace::default(),
    };
    Ok((request.filter, options))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscardRequest {
    #[serde(default)]
    filter: DlqFilter,
    reason: String,
}

/// `POST /v1/dlq/discard`: which dead letters, and why (required: it is audited).
pub fn discard(body: &[u8]) -> Result<(DlqFilter, String), ApiError> {
    let request: DiscardRequest = json(body)?;
    if request.reason.trim().is_empty() {
        return Err(ApiError::bad_request(
            "request body: reason: say why (it is audited)",
        ));
    }
    Ok((request.filter, request.reason))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageBody {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    payload: Value,
    #[serde(default)]
    content_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Body {
    Batch(Vec<Value>),
    One(Value),
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn make_id(now: u64) -> String {
    format!(
        "{now:x}-{:x}-{:x}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    )
}

/// `POST /v1/topics/{topic}/messages`: the messages to store for `topic` (one, or a batch of
/// 1 to [`MAX_BATCH`]), received at `now_ms` (a message without an id gets one made of it).
/// The messages of a publish `body` to `topic`; each one's key (its route orders by key) is
/// its `key_header` header's value, when it has one.
pub fn publish(
    topic: &str,
    body: &[u8],
    now_ms: u64,
    key_header: Option<&str>,
) -> Result<Vec<NewMessage>, ApiError> {
    let items = match serde_json::from_slice::<Body>(body) {
        Ok(Body::Batch(items)) => items,
        Ok(Body::One(item)) => vec![item],
        Err(e) => return Err(ApiError::bad_request(format!("request body: {e}"))),
    };
    if items.is_empty() || items.len() > MAX_BATCH {
        return Err(ApiError::bad_request(format!(
            "request body: a batch holds 1 to {MAX_BATCH} messages, not {}",
            items.len()
        )));
    }
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let m: MessageBody = serde_path_to_error::deserialize(item).map_err(|e| {
            ApiError::bad_request(format!(
                "request body: message {i}: {}: {}",
                e.path(),
                e.inner()
            ))
        })?;
        let (payload, default_type) = match m.payload {
            Value::String(text) => (text.into_bytes(), "text/plain"),
            other => (other.to_string().into_bytes(), "application/json"),
        };
        let id = m.id.unwrap_or_else(|| make_id(now_ms));
        if id.is_empty() || id.len() > MAX_ID_BYTES {
            return Err(ApiError::bad_request(format!(
                "request body: message {i}: id: 1 to {MAX_ID_BYTES} bytes"
            )));
        }
        let content_type = m.content_type.unwrap_or_else(|| default_type.into());
        // Every store keeps the same messages: PostgreSQL's text cannot hold U+0000, so no
        // store takes one in a text field (the payload is bytes and may hold anything).
        for (field, text) in [("id", &id), ("content_type", &content_type)] {
            if text.contains('\0') {
                return Err(ApiError::bad_request(format!(
                    "request body: message {i}: {field}: holds U+0000 (NUL), which no store \
                     keeps in text"
                )));
            }
        }
        let key = key_header.and_then(|name| message_key(&m.headers, name));
        messages.push(NewMessage {
            id,
            topic: topic.to_string(),
            headers: m.headers,
            payload,
            content_type: Some(content_type),
            key,
        });
    }
    Ok(messages)
}

/// A key longer than this is stored as its digest (`sha256:<hex>`): the same key still
/// gives the same stored key, and the store's index stays small.
pub const MAX_KEY_BYTES: usize = 128;

/// The key in `headers`' `name` header (matched without regard to case), bounded and
/// without NUL (no store keeps one in text): a longer or NUL-holding value is stored as its
/// digest. An empty value is no key.
fn message_key(headers: &BTreeMap<String, String>, name: &str) -> Option<String> {
    let value = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())?;
    if value.len() <= MAX_KEY_BYTES && !value.contains('\0') {
        return Some(value.to_string());
    }
    Some(format!(
        "sha256:{}",
        verdict_runtime::digest::sha256_hex(value.as_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_its_header_bounded() {
        let headers = |v: &str| BTreeMap::from([("Order-Id".to_string(), v.to_string())]);
        assert_eq!(
            message_key(&headers("o-1"), "order-id").as_deref(),
            Some("o-1")
        );
        assert_eq!(message_key(&headers(""), "order-id"), None);
        assert_eq!(message_key(&headers("o-1"), "tenant"), None);
        let long = "x".repeat(MAX_KEY_BYTES + 1);
        let stored = message_key(&headers(&long), "order-id").unwrap();
        assert!(
            stored.starts_with("sha256:") && stored.len() == 7 + 64,
            "{stored}"
        );
        assert_eq!(message_key(&headers(&long), "order-id").unwrap(), stored);
        let nul = message_key(&headers("a\0b"), "order-id").unwrap();
        assert!(!nul.contains('\0'));
        let published = publish(
            "orders",
            br#"[{"id": "m1", "payload": 1, "headers": {"order-id": "o-7"}},
                {"id": "m2", "payload": 2}]"#,
            0,
            Some("order-id"),
        )
        .unwrap();
        assert_eq!(published[0].key.as_deref(), Some("o-7"));
        assert_eq!(published[1].key, None);
    }

    #[test]
    fn a_body_is_one_json_document() {
        let sha = "0".repeat(64);
        assert_eq!(
            activate(format!(r#"{{"sha256": "{sha}"}}"#).as_bytes()).unwrap(),
            sha
        );
        // Text after the document was ignored: `{"topic": "a"}{"topic": "b"}` rolled back `a`.
        let e = rollback(br#"{"topic": "a"}{"topic": "b"}"#).unwrap_err();
        assert_eq!(e.code, "bad_request");
        assert!(
            e.message.starts_with("request body: trailing"),
            "{}",
            e.message
        );
        assert_eq!(rollback(b" \n").unwrap(), None);
        assert_eq!(
            rollback(br#"{"topic": "a"} "#).unwrap().as_deref(),
            Some("a")
        );
    }

    #[test]
    fn errors_name_the_field() {
        let e = decide(br#"{"topic": "t", "failure": {"attempt": "x"}}"#).unwrap_err();
        assert!(e.message.starts_with("failure: attempt:"), "{}", e.message);
        let e = publish(
            "t",
            br#"[{"payload": 1}, {"payload": 1, "id": 7}]"#,
            0,
            None,
        )
        .unwrap_err();
        assert!(
            e.message.starts_with("request body: message 1: id:"),
            "{}",
            e.message
        );
        let e = publish(
            "t",
            br#"[{"payload": "a\u0000b", "id": "x\r\ny"}, {"payload": 1, "id": "a\u0000"}]"#,
            0,
            None,
        )
        .unwrap_err();
        assert!(
            e.message
                .starts_with("request body: message 1: id: holds U+0000"),
            "{}",
            e.message
        );
        let e = publish(
            "t",
            br#"{"payload": 1, "content_type": "text/plain\u0000"}"#,
            0,
            None,
        )
        .unwrap_err();
        assert!(
            e.message.contains("content_type: holds U+0000"),
            "{}",
            e.message
        );
        let e = discard(br#"{"reason": " "}"#).unwrap_err();
        assert!(e.message.contains("reason"), "{}", e.message);
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct GroupActionRequest {
    source: Option<verdict_registry::SourceKind>,
    rate_per_s: Option<f64>,
    canary: Option<usize>,
    canary_timeout_ms: Option<u64>,
    note: Option<String>,
    reason: Option<String>,
}

/// The longest note or reason an action keeps: it goes into the audit log.
pub const MAX_NOTE_CHARS: usize = 500;

/// `text` with who did it and through what (`console`, `api`), for the audit log: on one
/// line, and bounded before who is added, so a long note never cuts off who wrote it.
pub fn attributed(text: &str, who: &str, via: &str) -> String {
    let text = verdict_runtime::text::one_line(text.trim(), MAX_NOTE_CHARS - 100);
    format!("{text} (by {who}, {via})")
}

/// `POST /v1/dlq/groups/{id}/{action}` (`replay`, `discard`, `dry-run`): the source and
/// how. A discard needs a `reason`; `rate_per_s`, `canary` and `canary_timeout_ms` are a
/// replay's. An empty body is `{}`.
pub fn group_action(
    action: &str,
    body: &[u8],
) -> Result<(Option<verdict_registry::SourceKind>, JobAction), ApiError> {
    let request: GroupActionRequest = if body.iter().all(u8::is_ascii_whitespace) {
        GroupActionRequest::default()
    } else {
        json(body)?
    };
    let bounded = |text: Option<String>| {
        text.map(|t| verdict_runtime::text::one_line(&t, MAX_NOTE_CHARS))
            .filter(|t| !t.trim().is_empty())
    };
    let only_replay = request.rate_per_s.is_some()
        || request.canary.is_some()
        || request.canary_timeout_ms.is_some();
    let job = match action {
        "replay" => JobAction::Replay(ReplayOptions {
            rate_per_s: request.rate_per_s,
            canary: request.canary,
            canary_timeout: Duration::from_millis(request.canary_timeout_ms.unwrap_or(120_000)),
            note: bounded(request.note)
                .unwrap_or_else(|| "group replayed through the admin API".into()),
            ..ReplayOptions::default()
        }),
        "discard" if only_replay => {
            return Err(ApiError::bad_request(
                "request body: rate_per_s, canary and canary_timeout_ms are a replay's; a \
                 discard takes `reason`",
            ));
        }
        "discard" => JobAction::Discard(bounded(request.reason).ok_or_else(|| {
            ApiError::bad_request("request body: reason: a discard needs a reason (it is audited)")
        })?),
        "dry-run" if only_replay => {
            return Err(ApiError::bad_request(
                "request body: a dry run moves nothing: rate_per_s, canary and \
                 canary_timeout_ms do not apply",
            ));
        }
        "dry-run" => JobAction::DryRun,
        other => {
            return Err(ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "not_found",
                format!(
                    "`{}` is not a group action (replay, discard, dry-run)",
                    verdict_runtime::text::one_line(other, 64)
                ),
            ));
        }
    };
    Ok((request.source, job))
}
