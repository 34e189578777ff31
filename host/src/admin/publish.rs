//! `POST /v1/topics/{topic}/messages`: messages enter the embedded store. The body is one
//! message or an array of them:
//!
//! ```json
//! {"id": "order-7", "headers": {"tenant": "eu"}, "payload": {"order": 7}}
//! ```
//!
//! `payload` is any JSON: a string is sent as its text, anything else as compact JSON
//! (`content_type` defaults to `application/json` then). `id` is optional (one is made); a
//! message whose id is already stored is reported as a duplicate and not stored again, so a
//! producer may safely retry a publish. The whole batch is one transaction.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::{AdminState, ApiError};
use crate::pipeline::now_ms;
use crate::store::{NewMessage, Published};

/// Largest batch in one request.
const MAX_BATCH: usize = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageBody {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    payload: serde_json::Value,
    #[serde(default)]
    content_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Body {
    Batch(Vec<serde_json::Value>),
    One(serde_json::Value),
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn make_id(now: u64) -> String {
    format!(
        "{now:x}-{:x}-{:x}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) async fn publish(
    State(state): State<AdminState>,
    Path(topic): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Published>), ApiError> {
    let Some(pipeline) = state.gateway.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server has no store (start it with `verdict run`)",
        ));
    };
    crate::TopicPattern::parse(&topic)
        .ok()
        .filter(|_| !topic.contains(['*', '>']))
        .ok_or_else(|| ApiError::bad_request(format!("`{topic}` is not a topic name")))?;
    let routed = state
        .registry
        .current()
        .route(&topic)
        .is_some_and(|r| r.consumer.is_some());
    if !routed {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_route",
            format!("no route with a consumer matches topic `{topic}`; nothing was stored"),
        ));
    }
    let body = body.map_err(|e| ApiError::new(e.status(), "bad_body", e.body_text()))?;
    let items = match serde_json::from_slice::<Body>(&body) {
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
    let now = now_ms();
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
            serde_json::Value::String(text) => (text.into_bytes(), "text/plain"),
            other => (other.to_string().into_bytes(), "application/json"),
        };
        let id = m.id.unwrap_or_else(|| make_id(now));
        if id.is_empty() || id.len() > 256 {
            return Err(ApiError::bad_request(format!(
                "request body: message {i}: id: 1 to 256 bytes"
            )));
        }
        messages.push(NewMessage {
            id,
            topic: topic.clone(),
            headers: m.headers,
            payload,
            content_type: Some(m.content_type.unwrap_or_else(|| default_type.into())),
        });
    }
    let store = pipeline.store().clone();
    let published = tokio::task::spawn_blocking(move || store.publish(&messages, now))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store", e.to_string()))?;
    pipeline.wake();
    Ok((StatusCode::ACCEPTED, Json(published)))
}
