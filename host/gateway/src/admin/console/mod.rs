//! The operator console: pages served by the admin listener, rendered on the server from
//! the same data the admin API returns, with forms for the actions. A page needs what the
//! API's read of the same data needs (summaries open unless `open_reads = "none"`, message
//! content the role `read`); every action needs a login whose identity has the action's
//! role (see [`actions`] for the guard every form passes).
//!
//! | path | page |
//! |---|---|
//! | `/` | routes (policy, version, decisions, faults), the store's DLQ depth and ingress over the last hour, its dead letters grouped by cause, the DLQ jobs with their progress |
//! | `/groups/{id}` | one cause: what it is, its letters (parked ones marked), and forms to dry-run, replay (rate, canary) or discard it as a job |
//! | `/jobs/{id}` | one job: progress (the page reloads itself while it runs), cut-off, canary, dry-run decisions, cancel |
//! | `/letters/{seq}` | one dead letter: the original (headers, payload pretty-printed as JSON, hex for binary), the attempt timeline, the verdict and the policy that gave it; replay or discard it alone; repair and resubmit it when `[console]` allows |
//! | `/policies` | the policies (component, loaded, routes, decisions, faults, uploads), the generations kept with the rollback form, the shadow report |
//! | `/login`, `/logout` | a login with an identity's token (an `HttpOnly`, `SameSite=Strict` session cookie; `Secure` over TLS) |
//! | `/console.css` | the stylesheet |
//!
//! Actions post to the page's path plus the action: `/groups/{id}/{dry-run|replay|discard}`,
//! `/jobs/{id}/cancel`, `/letters/{seq}/{replay|discard|repair}`, `/policies/rollback`.

mod actions;
mod chart;
mod group;
mod html;
mod job;
mod letter;
mod login;
mod overview;
mod policies;

use axum::Form;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};

use super::AdminState;

/// The console's pages and actions.
pub(crate) fn router() -> Router<AdminState> {
    Router::new()
        .route("/", get(overview))
        .route("/groups/{id}", get(group))
        .route("/groups/{id}/{action}", post(group_action))
        .route("/jobs/{id}", get(job))
        .route("/jobs/{id}/cancel", post(cancel_job))
        .route("/letters/{seq}", get(letter))
        .route("/letters/{seq}/repair", post(repair))
        .route("/letters/{seq}/{action}", post(letter_action))
        .route("/policies", get(policies))
        .route("/policies/rollback", post(rollback))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route(html::STYLESHEET_PATH, get(stylesheet))
}

async fn overview(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    overview::render(&state, &state.viewer(&headers)).await
}

async fn group(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    group::render(&state, &state.viewer(&headers), id).await
}

async fn group_action(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    form: Result<Form<actions::GroupForm>, FormRejection>,
) -> Response {
    actions::group(&state, &headers, id, &action, form).await
}

async fn job(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    job::render(&state, &state.viewer(&headers), &id)
}

async fn cancel_job(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<actions::CsrfForm>, FormRejection>,
) -> Response {
    actions::cancel_job(&state, &headers, &id, form).await
}

async fn letter(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path(seq): Path<String>,
) -> Response {
    letter::render(&state, &state.viewer(&headers), &seq).await
}

async fn letter_action(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((seq, action)): Path<(i64, String)>,
    form: Result<Form<actions::LetterForm>, FormRejection>,
) -> Response {
    actions::letter(&state, &headers, seq, &action, form).await
}

async fn repair(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path(seq): Path<i64>,
    form: Result<Form<actions::RepairForm>, FormRejection>,
) -> Response {
    actions::repair(&state, &headers, seq, form).await
}

async fn policies(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    policies::render(&state, &state.viewer(&headers))
}

async fn rollback(
    State(state): State<AdminState>,
    headers: HeaderMap,
    form: Result<Form<actions::RollbackForm>, FormRejection>,
) -> Response {
    actions::rollback(&state, &headers, form).await
}

async fn login_page(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    login::render(&state.viewer(&headers), None)
}

async fn login(
    State(state): State<AdminState>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<crate::admin::Peer>>>,
    headers: HeaderMap,
    form: Result<Form<login::LoginForm>, FormRejection>,
) -> Response {
    let peer = peer.map(|axum::Extension(info)| info.0.0);
    login::login(&state, peer, &headers, form).await
}

async fn logout(
    State(state): State<AdminState>,
    headers: HeaderMap,
    form: Result<Form<actions::CsrfForm>, FormRejection>,
) -> Response {
    login::logout(&state, &headers, form).await
}

async fn stylesheet() -> Response {
    html::stylesheet()
}
