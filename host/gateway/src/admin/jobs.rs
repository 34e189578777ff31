//! The gateway's DLQ jobs over HTTP: `GET /v1/jobs` (newest first, at most `limit`, 100 by
//! default and at most), `GET /v1/jobs/{id}`,
//! and `POST /v1/jobs/{id}/cancel` (token), which stops a running job at its next step.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::{AdminState, ApiError};
use crate::dlq::{JobView, KEPT_JOBS};

pub(crate) fn no_such_job(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_such_job",
        format!(
            "no job `{}` (jobs are kept in memory: a restart forgets them)",
            verdict_runtime::text::one_line(id, 64)
        ),
    )
}

/// `GET /v1/jobs`'s query.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct JobsQuery {
    /// Jobs an answer holds at most, newest first ([`KEPT_JOBS`] when absent).
    limit: Option<usize>,
}

/// The jobs, newest first: at most `limit` of them, so the answer stays bounded however
/// many run at once (each job's fields are bounded: its note and filter by the request
/// that started it).
pub(crate) async fn list(
    State(state): State<AdminState>,
    query: Result<axum::extract::Query<JobsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<JobView>>, ApiError> {
    let axum::extract::Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = query.limit.unwrap_or(KEPT_JOBS).clamp(1, KEPT_JOBS);
    let mut jobs = state.jobs.list();
    jobs.truncate(limit);
    Ok(Json(jobs))
}

pub(crate) async fn get(
    State(state): State<AdminState>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let job = state.jobs.get(&id).ok_or_else(|| no_such_job(&id))?;
    Ok(Json(job.view()))
}

pub(crate) async fn cancel(
    State(state): State<AdminState>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    cancel_job(&state, &id).map(Json)
}

/// Cancel job `id`: 404 when there is none, 409 when it has ended.
pub(crate) fn cancel_job(state: &AdminState, id: &str) -> Result<JobView, ApiError> {
    let job = state.jobs.get(id).ok_or_else(|| no_such_job(id))?;
    if !job.cancel() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "job_ended",
            format!("job {id} has already ended"),
        ));
    }
    Ok(job.view())
}
