//! `POST /v1/dlq/{seq}/repair` (token): edit one dead letter of the store - its payload,
//! content type or headers - and put it back for delivery. Off unless `[console]
//! allow_edit` (or `allow_edit_topics` names its topic). The dead letter is kept as it was
//! (state `replayed`, its envelope unchanged) and the audit log records who changed what.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::dlq::gateway;
use super::handlers::body_bytes;
use super::identity::Identity;
use super::{AdminState, ApiError, bodies};
use crate::store::Repair;

/// Headers a repaired message may carry.
pub const MAX_HEADERS: usize = 64;
/// Longest header name.
pub const MAX_HEADER_NAME: usize = 128;
/// Longest header value.
pub const MAX_HEADER_VALUE: usize = 4_096;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RepairRequest {
    /// The new body: JSON (a string is sent as text).
    payload: Option<Value>,
    /// The new body as base64, for binary payloads.
    payload_base64: Option<String>,
    content_type: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    note: Option<String>,
}

/// What a repair request asks for, checked: the change and the operator's note.
pub fn parse(body: &[u8]) -> Result<(Repair, String), ApiError> {
    let request: RepairRequest = bodies::json(body)?;
    let (payload, default_type) = match (request.payload, request.payload_base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "request body: give `payload` or `payload_base64`, not both",
            ));
        }
        (Some(Value::String(text)), None) => (Some(text.into_bytes()), Some("text/plain")),
        (Some(json), None) => (
            Some(json.to_string().into_bytes()),
            Some("application/json"),
        ),
        (None, Some(b64)) => (
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .map_err(|e| {
                        ApiError::bad_request(format!("request body: payload_base64: {e}"))
                    })?,
            ),
            None,
        ),
        (None, None) => (None, None),
    };
    if let Some(headers) = &request.headers {
        check_headers(headers)?;
    }
    if payload.is_none() && request.headers.is_none() && request.content_type.is_none() {
        return Err(ApiError::bad_request(
            "request body: nothing to repair: give `payload` (or `payload_base64`), \
             `content_type` or `headers`",
        ));
    }
    let content_type = match request.content_type {
        Some(t) if t.is_empty() || t.len() > 255 || t.chars().any(char::is_control) => {
            return Err(ApiError::bad_request(
                "request body: content_type: 1 to 255 characters, no control characters",
            ));
        }
        Some(t) => Some(t),
        None => default_type.map(str::to_string),
    };
    let note = request
        .note
        .map(|n| verdict_runtime::text::one_line(&n, bodies::MAX_NOTE_CHARS))
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| {
            ApiError::bad_request("request body: note: say why (it goes into the audit log)")
        })?;
    Ok((
        Repair {
            payload,
            content_type,
            headers: request.headers,
        },
        note,
    ))
}

fn check_headers(headers: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if headers.len() > MAX_HEADERS {
        return Err(ApiError::bad_request(format!(
            "request body: headers: at most {MAX_HEADERS}, not {}",
            headers.len()
        )));
    }
    for (name, value) in headers {
        let shown = verdict_runtime::text::one_line(name, 64);
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || name.len() > MAX_HEADER_NAME || !name.chars().all(token) {
            return Err(ApiError::bad_request(format!(
                "request body: headers: `{shown}` is not a header name (1 to {MAX_HEADER_NAME} \
                 letters, digits or !#$%&'*+-.^_`|~)"
            )));
        }
        if value.len() > MAX_HEADER_VALUE || value.chars().any(char::is_control) {
            return Err(ApiError::bad_request(format!(
                "request body: headers: {shown}: at most {MAX_HEADER_VALUE} bytes, no control \
                 characters"
            )));
        }
    }
    Ok(())
}

/// `by <who>: payload 120 B (sha256 1a2b3c4d) -> 98 B (sha256 5e6f7a8b); headers set: a;
/// removed: b; note: ...` - what the audit log keeps of a repair.
pub fn describe(
    who: &str,
    before_payload: &[u8],
    before_headers: &BTreeMap<String, String>,
    repair: &Repair,
    note: &str,
) -> String {
    let digest = |b: &[u8]| -> String {
        Sha256::digest(b)[..4]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    let mut parts = Vec::new();
    if let Some(after) = &repair.payload {
        parts.push(format!(
            "payload {} B (sha256 {}) -> {} B (sha256 {})",
            before_payload.len(),
            digest(before_payload),
            after.len(),
            digest(after)
        ));
    }
    if let Some(t) = &repair.content_type {
        parts.push(format!("content type {t}"));
    }
    if let Some(after) = &repair.headers {
        let set: Vec<&str> = after
            .iter()
            .filter(|(k, v)| before_headers.get(*k) != Some(v))
            .map(|(k, _)| k.as_str())
            .collect();
        let removed: Vec<&str> = before_headers
            .keys()
            .filter(|k| !after.contains_key(*k))
            .map(String::as_str)
            .collect();
        parts.push(format!(
            "headers set: {}; removed: {}",
            list(&set),
            list(&removed)
        ));
    }
    verdict_runtime::text::one_line(
        &format!("by {who}: {}; note: {note}", parts.join("; ")),
        2_000,
    )
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

pub(crate) async fn repair(
    State(state): State<AdminState>,
    Extension(identity): Extension<Identity>,
    Path(seq): Path<i64>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let (repair, note) = parse(&body_bytes(body)?)?;
    apply(
        &state,
        seq,
        repair,
        note,
        &format!("{} (api)", identity.name),
    )
    .await
    .map(Json)
}

/// Apply `repair` to dead letter `seq` of the store and put it back for delivery, if
/// `[console]` allows edits on its topic; the audit log records `who` and `note`. The new
/// message's id and the audit line.
pub(crate) async fn apply(
    state: &AdminState,
    seq: i64,
    repair: Repair,
    note: String,
    who: &str,
) -> Result<Value, ApiError> {
    let who = who.to_string();
    let pipeline = gateway(state)?;
    let console = state.registry.current().config().console;
    let store = pipeline.store().clone();
    let repaired = tokio::task::spawn_blocking(move || -> Result<Value, ApiError> {
        let unavailable =
            |e: &dyn std::fmt::Display| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store", e.to_string());
        let entry = store
            .dlq_entry(seq)
            .map_err(|e| unavailable(&e))?
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "no_such_dead_letter",
                    format!("no dead letter {seq} in the store's DLQs (replayed, discarded or never there)"),
                )
            })?;
        if !console.may_edit(&entry.topic) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "edit_disabled",
                format!(
                    "repairs are off for topic `{}`: set `[console] allow_edit = true` (or list \
                     the topic in `allow_edit_topics`) in the gateway config",
                    verdict_runtime::text::one_line(&entry.topic, 128)
                ),
            ));
        }
        let original = &entry.envelope.original;
        let detail = describe(
            &who,
            &original.payload_bytes(),
            &original.headers,
            &repair,
            &note,
        );
        let id = store
            .dlq_repair(seq, &repair, store.now_ms(), &detail)
            .map_err(|e| unavailable(&e))?
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::CONFLICT,
                    "no_such_dead_letter",
                    format!("dead letter {seq} left the DLQ meanwhile"),
                )
            })?;
        Ok(serde_json::json!({"message_id": id, "audit": detail}))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))??;
    pipeline.wake();
    Ok(repaired)
}
