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

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::{AdminState, ApiError, bodies};
use crate::store::Published;

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
    verdict_registry::TopicPattern::parse(&topic)
        .ok()
        .filter(|_| !topic.contains(['*', '>']))
        .ok_or_else(|| ApiError::bad_request(format!("`{topic}` is not a topic name")))?;
    let generation = state.registry.current();
    let route = generation.route(&topic).filter(|r| r.consumer.is_some());
    let key_header = route.and_then(|r| r.key_header.clone());
    if route.is_none() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_route",
            format!("no route with a consumer matches topic `{topic}`; nothing was stored"),
        ));
    }
    let body = body.map_err(|e| ApiError::new(e.status(), "bad_body", e.body_text()))?;
    let store = pipeline.store().clone();
    // The store's clock: on a shared store, due times are compared on the database's.
    let now = store.now_ms();
    let messages = bodies::publish(&topic, &body, now, key_header.as_deref())?;
    let published = tokio::task::spawn_blocking(move || store.publish(&messages, now))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store", e.to_string()))?;
    pipeline.wake();
    Ok((StatusCode::ACCEPTED, Json(published)))
}
