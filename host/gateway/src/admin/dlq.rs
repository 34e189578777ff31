//! The DLQ over HTTP: list, stats, replay (token) and discard (token) - the same operations
//! as `verdict dlq`, on the running gateway's store or, with `source = "nats" | "rabbitmq" | "kafka"`
//! (query or body), on the broker its config names, through one connection per broker kept
//! between requests. Reading a broker's DLQ touches the broker, so it needs the token too,
//! and never creates anything there. A listing is a page of at most [`DEFAULT_LIMIT`]
//! entries and [`PAGE_BYTES`] of them as JSON (`max_bytes`, up to [`PAGE_BYTES_MAX`]; a
//! letter bigger than that comes alone); when more follow, [`NEXT_HEADER`] holds the
//! `after` of the next one. A payload past [`INLINE_PAYLOAD_BYTES`] is listed as its size
//! and digest (`payload_summary`) unless the request says `payloads=full`; `GET
//! /v1/dlq/{seq}` answers one letter whole. No answer carries a broker password.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;

use super::handlers::body_bytes;
use super::identity::{Identity, Role};
use super::{AdminState, ApiError, bodies};
use crate::dlq::{DeadLetters, PAGE_BYTES, PAGE_BYTES_MAX, ReplayReport, page_within};
use crate::pipeline::{Pipeline, now_ms};
#[cfg(doc)]
use crate::store::INLINE_PAYLOAD_BYTES;
use crate::store::{DlqEntry, DlqFilter, DlqStats};
use verdict_registry::SourceKind;

/// Entries a listing returns when the request names no `limit`, and at most.
pub const DEFAULT_LIMIT: usize = 1_000;

pub(super) fn gateway(state: &AdminState) -> Result<std::sync::Arc<Pipeline>, ApiError> {
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

/// Run `op` on the DLQs of `source` on a blocking thread: the store, or the broker's DLQs
/// through the connection the API keeps to it.
pub(super) async fn with_dlqs<T: Send + 'static, E: std::fmt::Display>(
    state: &AdminState,
    source: Option<SourceKind>,
    op: impl FnOnce(&dyn DeadLetters) -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError> {
    let pipeline = gateway(state)?;
    let config_path = state.config_path.clone();
    let fixed_config = state.fixed_config.clone();
    let kept = state.broker_connections.clone();
    let handle = tokio::runtime::Handle::current();
    let source = source.unwrap_or_default();
    tokio::task::spawn_blocking(move || -> Result<T, ApiError> {
        if source == SourceKind::Embedded {
            return op(pipeline.store().as_ref()).map_err(store_error);
        }
        let config = match (config_path, fixed_config) {
            (Some(path), _) => verdict_registry::GatewayConfig::load(&path)
                .map_err(|e| ApiError::new(StatusCode::CONFLICT, "config", e.to_string()))?,
            (None, Some(config)) => (*config).clone(),
            (None, None) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "no_config",
                    "this server has no config file",
                ));
            }
        };
        // The message is redacted (as every answer's is): loading the config remembered
        // the brokers' passwords.
        let broker = |e: &dyn std::fmt::Display| {
            kept.forget(source);
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "broker", e.to_string())
        };
        match source {
            #[cfg(feature = "nats")]
            SourceKind::Nats => op(kept
                .nats(&handle, &config)
                .map_err(|e| broker(&e))?
                .as_ref())
            .map_err(|e| broker(&e)),
            #[cfg(feature = "rabbitmq")]
            SourceKind::Rabbitmq => op(kept
                .rabbitmq(&handle, &config)
                .map_err(|e| broker(&e))?
                .as_ref())
            .map_err(|e| broker(&e)),
            #[cfg(feature = "kafka")]
            SourceKind::Kafka => op(kept
                .kafka(&handle, &config)
                .map_err(|e| broker(&e))?
                .as_ref())
            .map_err(|e| broker(&e)),
            other => {
                let _ = (&handle, &config, &broker);
                Err(ApiError::new(
                    StatusCode::NOT_IMPLEMENTED,
                    "source_left_out",
                    format!(
                        "this gateway was built without the {other:?} source; its DLQ cannot \
                         be read here"
                    ),
                ))
            }
        }
    })
    .await
    .map_err(store_error)?
}

/// A broker's DLQ is read through a connection to the broker: its depths (a summary
/// otherwise) only for the role `read`, whatever `open_reads` says. Listing and grouping
/// letters need `read` at the router already.
pub(super) fn broker_read(
    state: &AdminState,
    headers: &axum::http::HeaderMap,
    source: Option<SourceKind>,
) -> Result<(), ApiError> {
    match source {
        None | Some(SourceKind::Embedded) => Ok(()),
        Some(_) => super::auth::authorized(state, headers, None, Role::Read).map(drop),
    }
}

/// The header that carries the next page's `after`.
pub(crate) const NEXT_HEADER: &str = "x-verdict-next";

pub(crate) async fn list(
    State(state): State<AdminState>,
    filter: Result<Query<DlqFilter>, axum::extract::rejection::QueryRejection>,
) -> Result<(axum::http::HeaderMap, Json<Vec<DlqEntry>>), ApiError> {
    let Query(mut filter) = filter.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let source = filter.source;
    filter.limit = Some(filter.limit.unwrap_or(DEFAULT_LIMIT).min(DEFAULT_LIMIT));
    let max_bytes = filter
        .max_bytes
        .unwrap_or(PAGE_BYTES)
        .clamp(1, PAGE_BYTES_MAX);
    let page = with_dlqs(&state, source, move |d| {
        page_within(d, &filter, now_ms(), max_bytes)
    })
    .await?;
    let mut headers = axum::http::HeaderMap::new();
    if let Some(next) = page.next.and_then(|n| n.parse().ok()) {
        headers.insert(NEXT_HEADER, next);
    }
    Ok((headers, Json(page.entries)))
}

/// `GET /v1/dlq/{seq}`: one dead letter with its whole payload (a listing summarises large
/// ones), from the store or `?source=` a broker's DLQs.
pub(crate) async fn show(
    State(state): State<AdminState>,
    Path(seq): Path<String>,
    query: Result<Query<SourceQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DlqEntry>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let seq: i64 = seq.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "seq: `{}`: expected a dead letter's number, as listings show it",
            verdict_runtime::text::one_line(&seq, 32)
        ))
    })?;
    let filter = DlqFilter {
        seq: Some(seq),
        limit: Some(1),
        ..DlqFilter::default()
    };
    let found = with_dlqs(&state, query.source, move |d| d.list(&filter, now_ms())).await?;
    found.into_iter().next().map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no_such_letter",
            format!("no dead letter {seq} in these DLQs (see GET /v1/dlq)"),
        )
    })
}

/// Which source's DLQs.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct SourceQuery {
    source: Option<SourceKind>,
}

pub(crate) async fn stats(
    State(state): State<AdminState>,
    headers: axum::http::HeaderMap,
    query: Result<Query<SourceQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<DlqStats>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    broker_read(&state, &headers, query.source)?;
    let mut stats = with_dlqs(&state, query.source, |d| d.stats()).await?;
    stats.retain(|d| d.depth > 0);
    Ok(Json(stats))
}

pub(crate) async fn replay(
    State(state): State<AdminState>,
    Extension(identity): Extension<Identity>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ReplayReport>, ApiError> {
    let (filter, mut options) = bodies::replay(&body_bytes(body)?)?;
    options.note = bodies::attributed(&options.note, &identity.name, "api");
    let pipeline = gateway(&state)?;
    options.trace = crate::telemetry::ReplayTrace::new(pipeline.tracing().clone());
    let filter = crate::dlq::leaving_parked_out(filter, pipeline.settings().park_after_repeats);
    let registry = state.registry.clone();
    let source = filter.source;
    let report = with_dlqs(&state, source, move |dlqs| {
        let report = crate::dlq::replay(dlqs, Some(&registry), &filter, &options, |_, _| {
            pipeline.wake();
        });
        pipeline.wake();
        report
    })
    .await?;
    Ok(Json(report))
}

pub(crate) async fn discard(
    State(state): State<AdminState>,
    Extension(identity): Extension<Identity>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (filter, reason) = bodies::discard(&body_bytes(body)?)?;
    let reason = bodies::attributed(&reason, &identity.name, "api");
    let source = filter.source;
    let discarded = with_dlqs(&state, source, move |dlqs| {
        let entries = dlqs.list(&filter, now_ms())?;
        dlqs.discard(&entries, &reason)
    })
    .await?;
    Ok(Json(serde_json::json!({ "discarded": discarded })))
}

/// `/readyz`: the health module's answer, as the API says it.
pub(crate) async fn ready(State(state): State<AdminState>) -> Result<String, ApiError> {
    // A server with no gateway behind it (the API alone) is ready.
    let Some(pipeline) = state.gateway.clone() else {
        return Ok("ready\n".into());
    };
    let (sources, warnings) = (pipeline.sources(), pipeline.consumer_warnings());
    crate::health::ready(&sources, warnings, pipeline.store().clone())
        .await
        .map_err(|unready| match unready {
            crate::health::Unready::SourcesDown(down) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "source_down",
                format!("not connected to: {}", down.join(", ")),
            ),
            crate::health::Unready::Store(why) => store_error(why),
        })
}
