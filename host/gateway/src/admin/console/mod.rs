//! The operator console: pages served by the admin listener, rendered on the server from
//! the same data the admin API returns. Reading is open, as the API's reads are; the pages
//! change nothing (a group is acted on with `verdict jobs ...` or the API, with the token).
//!
//! | path | page |
//! |---|---|
//! | `/` | routes (policy, version, decisions, faults), the store's DLQ depth and ingress over the last hour, its dead letters grouped by cause, the DLQ jobs with their progress |
//! | `/policies` | the policies (component, loaded, routes, decisions, faults, uploads), the generations kept for rollback, the shadow report |
//! | `/letters/{seq}` | one dead letter: the original (headers, payload pretty-printed as JSON, hex for binary), the attempt timeline, the verdict and the policy that gave it |
//! | `/console.css` | the stylesheet |

mod chart;
mod html;
mod letter;
mod overview;
mod policies;

use axum::extract::{Path, State};
use axum::response::Response;

use super::AdminState;

pub(crate) async fn overview(State(state): State<AdminState>) -> Response {
    overview::render(&state).await
}

pub(crate) async fn letter(State(state): State<AdminState>, Path(seq): Path<String>) -> Response {
    letter::render(&state, &seq).await
}

pub(crate) async fn policies(State(state): State<AdminState>) -> Response {
    policies::render(&state)
}

pub(crate) async fn stylesheet() -> Response {
    html::stylesheet()
}

/// Where the stylesheet is served (the router mounts [`stylesheet`] there).
pub(crate) const STYLESHEET_PATH: &str = html::STYLESHEET_PATH;
