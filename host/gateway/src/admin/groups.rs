//! Dead letters grouped by cause over HTTP: `GET /v1/dlq/groups` lists the groups of one
//! source's DLQs (`?source=all`: the store's and every broker's a route uses, folded
//! together; role `read`), largest first, [`DEFAULT_GROUPS`] a page (`limit`, `after`; the
//! next page's `after` in `x-verdict-next`). Groups are counted anew for each page, so a
//! DLQ that changes between pages may move a group across a page boundary.
//!
//! `POST /v1/dlq/groups/{id}/{replay|discard|dry-run}` (role `operate`) starts a job on one
//! group, cut off at the instant it starts (see [`crate::dlq::Jobs`]). A replay leaves
//! parked letters out; the job answers at once (202) and runs on.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};

use super::dlq::{NEXT_HEADER, gateway, with_dlqs};
use super::handlers::body_bytes;
use super::identity::Identity;
use super::{AdminState, ApiError, bodies};
use serde::Deserialize;

use crate::dlq::{DlqGroup, Grouping, JobAction, JobView, groups, leaving_parked_out};
use crate::pipeline::now_ms;
use crate::store::DlqFilter;
use verdict_registry::SourceKind;

/// The longest group id accepted in a path: ids are 16 hex digits.
const MAX_GROUP_ID: usize = 64;

/// `GET /v1/dlq/groups`'s query: a DLQ filter's fields, and `source` - one source's name,
/// or `all` for the store and every broker a route uses.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct GroupsQuery {
    source: Option<String>,
    topic: Option<String>,
    dlq: Option<String>,
    class: Option<String>,
    kind: Option<String>,
    min_age_ms: Option<u64>,
    /// Groups an answer holds at most ([`DEFAULT_GROUPS`] when absent, never more than
    /// [`MAX_GROUPS`]).
    limit: Option<usize>,
    /// Groups to skip: the `x-verdict-next` of the page before.
    after: Option<usize>,
}

/// Groups a page holds when the request names no `limit`: each group is bounded (its
/// reason normalised and cut, its sample without payload), so a page is too.
pub const DEFAULT_GROUPS: usize = 100;

/// The most groups a request may ask a page to hold.
pub const MAX_GROUPS: usize = 1_000;

pub(crate) async fn list(
    State(state): State<AdminState>,
    query: Result<Query<GroupsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<(axum::http::HeaderMap, Json<Vec<DlqGroup>>), ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let sources: Vec<SourceKind> = match query.source.as_deref() {
        None => vec![SourceKind::Embedded],
        Some("all") => {
            let mut kinds = vec![SourceKind::Embedded];
            for route in state.registry.current().config().routes {
                if !kinds.contains(&route.source) {
                    kinds.push(route.source);
                }
            }
            kinds
        }
        Some(name) => vec![
            serde_json::from_value(serde_json::Value::String(name.to_string())).map_err(|_| {
                ApiError::bad_request(format!(
                    "source: `{}`: expected embedded, nats, rabbitmq, kafka or all",
                    verdict_runtime::text::one_line(name, 32)
                ))
            })?,
        ],
    };
    let filter = DlqFilter {
        topic: query.topic,
        dlq: query.dlq,
        class: query.class,
        kind: query.kind,
        min_age_ms: query.min_age_ms,
        ..DlqFilter::default()
    };
    let park_after = gateway(&state)?.settings().park_after_repeats;
    let mut all = Grouping::default();
    for source in sources {
        let filter = filter.clone();
        let found = with_dlqs(&state, Some(source), move |d| {
            groups(&[(source.name(), d)], &filter, park_after, now_ms())
        })
        .await?;
        found.into_iter().for_each(|g| all.absorb(g));
    }
    let limit = query.limit.unwrap_or(DEFAULT_GROUPS).clamp(1, MAX_GROUPS);
    let skip = query.after.unwrap_or(0);
    let groups = all.into_groups();
    let mut headers = axum::http::HeaderMap::new();
    let end = skip.saturating_add(limit);
    if end < groups.len() {
        headers.insert(NEXT_HEADER, end.into());
    }
    let page = groups.into_iter().skip(skip).take(limit).collect();
    Ok((headers, Json(page)))
}

pub(crate) async fn act(
    State(state): State<AdminState>,
    Extension(identity): Extension<Identity>,
    Path((group, action)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<JobView>), ApiError> {
    check_group_id(&group)?;
    let (source, mut action) = bodies::group_action(&action, &body_bytes(body)?)?;
    match &mut action {
        JobAction::Replay(options) => {
            options.note = bodies::attributed(&options.note, &identity.name, "api");
        }
        JobAction::Discard(reason) => *reason = bodies::attributed(reason, &identity.name, "api"),
        JobAction::DryRun => {}
    }
    let view = start(&state, group, source, action)?;
    Ok((StatusCode::ACCEPTED, Json(view)))
}

/// `group` if it looks like a group id.
pub(crate) fn check_group_id(group: &str) -> Result<(), ApiError> {
    if group.is_empty()
        || group.len() > MAX_GROUP_ID
        || !group.chars().all(|c| c.is_ascii_hexdigit())
    {
        return Err(ApiError::bad_request(format!(
            "`{}` is not a group id (16 hex digits, from GET /v1/dlq/groups)",
            verdict_runtime::text::one_line(group, MAX_GROUP_ID)
        )));
    }
    Ok(())
}

/// Start a job doing `action` on `group` of `source`'s DLQs, cut off now; the job as it
/// starts. The API and the console both start group jobs here.
pub(crate) fn start(
    state: &AdminState,
    group: String,
    source: Option<SourceKind>,
    mut action: JobAction,
) -> Result<JobView, ApiError> {
    let pipeline = gateway(state)?;
    if let JobAction::Replay(options) = &mut action {
        options.trace = crate::telemetry::ReplayTrace::new(pipeline.tracing().clone());
    }
    let park_after = pipeline.settings().park_after_repeats;
    let filter = DlqFilter {
        group: Some(group),
        source,
        ..DlqFilter::default()
    };
    // A bulk replay leaves parked letters for an operator to replay one by one.
    let filter = match action {
        JobAction::Replay(_) => leaving_parked_out(filter, park_after),
        _ => filter,
    };
    let job = state.jobs.create(action, filter);
    let view = job.view();
    let registry = state.registry.clone();
    let run_state = state.clone();
    tokio::spawn(async move {
        let worker = job.clone();
        let woken = pipeline.clone();
        let ran = with_dlqs(&run_state, source, move |d| {
            worker.run(d, Some(&registry), &|| woken.wake());
            Ok::<(), std::convert::Infallible>(())
        })
        .await;
        if let Err(e) = ran {
            job.fail(e.message);
        }
    });
    Ok(view)
}
