//! The DLQ over HTTP: list, stats, replay (token) and discard (token) - the same operations
//! as `verdict dlq`, on the running gateway's store.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::{AdminState, ApiError, handlers::parse};
use crate::dlq::{ReplayOptions, ReplayReport};
use crate::pipeline::{Pipeline, now_ms};
use crate::store::{DlqEntry, DlqFilter, DlqStats};

fn gateway(state: &AdminState) -> Result<std::sync::Arc<Pipeline>, ApiError> {
    state.gateway.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server has no store (start it with `verdict run`)",
        )
    })
}

fn store_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store", e.to_string())
}

pub(crate) async fn list(
    State(state): State<AdminState>,
    filter: Result<Query<DlqFilter>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<DlqEntry>>, ApiError> {
    let Query(filter) = filter.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let store = gateway(&state)?.store().clone();
    tokio::task::spawn_blocking(move || store.dlq_list(&filter, now_ms()))
        .await
        .map_err(store_error)?
        .map(Json)
        .map_err(store_error)
}

pub(crate) async fn stats(
    State(state): State<AdminState>,
) -> Result<Json<Vec<DlqStats>>, ApiError> {
    let store = gateway(&state)?.store().clone();
    tokio::task::spawn_blocking(move || store.dlq_stats())
        .await
        .map_err(store_error)?
        .map(|mut s| {
            s.retain(|d| d.depth > 0);
            Json(s)
        })
        .map_err(store_error)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ReplayRequest {
    filter: DlqFilter,
    dry_run: bool,
    rate_per_s: Option<f64>,
    canary: Option<usize>,
    canary_timeout_ms: Option<u64>,
    note: Option<String>,
}

pub(crate) async fn replay(
    State(state): State<AdminState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ReplayReport>, ApiError> {
    let request: ReplayRequest = parse(body)?;
    let pipeline = gateway(&state)?;
    let registry = state.registry.clone();
    let options = ReplayOptions {
        dry_run: request.dry_run,
        rate_per_s: request.rate_per_s,
        canary: request.canary,
        canary_timeout: Duration::from_millis(request.canary_timeout_ms.unwrap_or(120_000)),
        note: request
            .note
            .unwrap_or_else(|| "replayed through the admin API".into()),
    };
    let report = tokio::task::spawn_blocking(move || {
        let report = crate::dlq::replay(
            pipeline.store().as_ref(),
            Some(&registry),
            &request.filter,
            &options,
            |_, _| {
                pipeline.wake();
            },
        );
        pipeline.wake();
        report
    })
    .await
    .map_err(store_error)?
    .map_err(store_error)?;
    Ok(Json(report))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiscardRequest {
    #[serde(default)]
    filter: DlqFilter,
    reason: String,
}

pub(crate) async fn discard(
    State(state): State<AdminState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let request: DiscardRequest = parse(body)?;
    if request.reason.trim().is_empty() {
        return Err(ApiError::bad_request(
            "request body: reason: say why (it is audited)",
        ));
    }
    let store = gateway(&state)?.store().clone();
    let discarded = tokio::task::spawn_blocking(move || {
        let now = now_ms();
        let seqs: Vec<i64> = store
            .dlq_list(&request.filter, now)?
            .iter()
            .map(|e| e.seq)
            .collect();
        store.dlq_discard(&seqs, now, &request.reason)
    })
    .await
    .map_err(store_error)?
    .map_err(store_error)?;
    Ok(Json(serde_json::json!({ "discarded": discarded })))
}

pub(crate) async fn ready(State(state): State<AdminState>) -> Result<&'static str, ApiError> {
    let Some(pipeline) = state.gateway.clone() else {
        return Ok("ready\n");
    };
    let down: Vec<&str> = pipeline
        .sources()
        .iter()
        .filter(|s| !s.is_up())
        .map(|s| s.name())
        .collect();
    if !down.is_empty() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "source_down",
            format!("not connected to: {}", down.join(", ")),
        ));
    }
    let store = pipeline.store().clone();
    match tokio::task::spawn_blocking(move || store.counts()).await {
        Ok(Ok(_)) => Ok("ready\n"),
        Ok(Err(e)) => Err(store_error(e)),
        Err(e) => Err(store_error(e)),
    }
}
