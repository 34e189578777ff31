//! The admin API's handlers: thin translations between HTTP and the [`Registry`]. Work that
//! compiles components (upload, activate, reload, shadow) runs on the blocking pool, so a
//! slow compile never stalls the decisions served on the async workers.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::{AdminState, ApiError, bodies, views};
use verdict_registry::{Registry, RegistryError};

type ApiResult<T> = Result<T, ApiError>;

/// The body, or the rejection as an API error.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
    body.map_err(body_error)
}

fn body_error(e: BytesRejection) -> ApiError {
    ApiError::new(e.status(), "bad_body", e.body_text())
}

/// Run a registry change on the blocking pool.
async fn blocking<T: Send + 'static>(
    state: &AdminState,
    change: impl FnOnce(&Registry) -> Result<T, RegistryError> + Send + 'static,
) -> ApiResult<T> {
    let registry = state.registry.clone();
    tokio::task::spawn_blocking(move || change(&registry))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("the change did not finish: {e}"),
            )
        })?
        .map_err(ApiError::from)
}

fn activated(generation: u64) -> Json<Value> {
    Json(json!({ "generation": generation }))
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint (see `GET /v1/status`, `/v1/routes`, `/v1/policies`)",
    )
}

pub(crate) async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    // Rendering reads the store, which blocks (a shared database's driver must not run on
    // an async worker at all).
    let metrics = state.metrics.clone();
    let text = tokio::task::spawn_blocking(move || metrics.render())
        .await
        .unwrap_or_else(|_| String::from("# the metrics task stopped\n"));
    ([(header::CONTENT_TYPE, crate::METRICS_CONTENT_TYPE)], text)
}

pub(crate) async fn status(State(state): State<AdminState>) -> Json<views::StatusView> {
    Json(views::status(&state.registry))
}

pub(crate) async fn routes(State(state): State<AdminState>) -> Json<Vec<views::RouteView>> {
    Json(views::routes(
        &state.registry.current(),
        state.gateway.as_deref(),
    ))
}

pub(crate) async fn policies(State(state): State<AdminState>) -> Json<Vec<views::PolicyView>> {
    Json(views::policies(&state.registry))
}

pub(crate) async fn generations(
    State(state): State<AdminState>,
) -> Json<Vec<views::GenerationView>> {
    let mut out: Vec<_> = state
        .registry
        .history()
        .iter()
        .map(|g| views::generation(g, false))
        .collect();
    out.push(views::generation(&state.registry.current(), true));
    Json(out)
}

pub(crate) async fn shadow_report(
    State(state): State<AdminState>,
) -> Json<Vec<verdict_registry::ShadowReport>> {
    Json(state.registry.shadow_report())
}

pub(crate) async fn decide(
    State(state): State<AdminState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<verdict_runtime::Decision>> {
    let (topic, spec) = bodies::decide(&body_bytes(body)?)?;
    state
        .registry
        .decide(&topic, &spec.into_failure())
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no_route",
                format!("no route matches topic `{topic}` (add a `>` route as the default)"),
            )
        })
}

pub(crate) async fn upload(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<verdict_registry::Upload>)> {
    let bytes = body.map_err(body_error)?;
    let upload = blocking(&state, move |r| r.upload(&name, &bytes)).await?;
    Ok((StatusCode::CREATED, Json(upload)))
}

pub(crate) async fn activate(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let sha256 = bodies::activate(&body_bytes(body)?)?;
    let generation = blocking(&state, move |r| r.activate(&name, &sha256)).await?;
    Ok(activated(generation))
}

pub(crate) async fn rollback(
    State(state): State<AdminState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let topic = bodies::rollback(&body_bytes(body)?)?;
    let one_route = topic.is_some();
    let generation = roll_back(&state, topic).await?;
    let mut answer = activated(generation);
    if one_route {
        answer.0["note"] = Value::from(ROLLBACK_TOPIC_NOTE);
    }
    Ok(answer)
}

/// Roll `topic`'s route (none: every route) back to the previous generation; the
/// generation now active.
pub(crate) async fn roll_back(state: &AdminState, topic: Option<String>) -> ApiResult<u64> {
    blocking(state, move |r| match &topic {
        Some(topic) => r.rollback_topic(topic),
        None => r.rollback(),
    })
    .await
}

/// What a one-route rollback does not do, said with every answer to one: it changes the
/// running generation only.
pub(crate) const ROLLBACK_TOPIC_NOTE: &str = "the route stays rolled back until the next \
    change of any route (a reload of the config file, an activation, a shadow change) or a \
    restart, which rebuild it from the config file; to keep it, change the route in the file";

pub(crate) async fn shadow(
    State(state): State<AdminState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let (topic, shadow) = bodies::shadow(&body_bytes(body)?)?;
    let generation = blocking(&state, move |r| r.set_shadow(&topic, shadow)).await?;
    Ok(activated(generation))
}

pub(crate) async fn reload(State(state): State<AdminState>) -> ApiResult<Json<Value>> {
    let Some(path) = state.config_path.clone() else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_config_file",
            "this gateway was not started from a config file",
        ));
    };
    let generation = blocking(&state, move |r| r.reload_file(&path)).await?;
    Ok(activated(generation))
}
