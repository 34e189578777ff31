//! `/`: what runs and what is dead, on one page.

use std::fmt::Write as _;

use axum::response::Response;

use super::chart;
use super::html::{escape, page, table};
use crate::admin::identity::Role;
use crate::admin::session::Viewer;
use crate::admin::{AdminState, views};
use crate::dlq::{DlqGroup, JobView, groups};
use crate::envelope::rfc3339;
use crate::pipeline::now_ms;
use crate::store::DlqFilter;

pub(super) async fn render(state: &AdminState, viewer: &Viewer) -> Response {
    if state.open_reads() == verdict_registry::OpenReads::None
        && let Some(login) = super::html::unless_reader(viewer)
    {
        return login;
    }
    let generation = state.registry.current();
    let mut body = format!(
        "<h1>Gateway <span class=\"pill\">generation {}</span></h1>",
        generation.number
    );
    body += "<h2>Routes</h2>";
    body += &routes(&views::routes(&generation));
    body += "<h2>The store's DLQs, last hour</h2>";
    let samples = state.dlq_history.samples();
    let depth: Vec<(u64, u64)> = samples.iter().map(|s| (s.at_ms, s.depth)).collect();
    let ingress: Vec<(u64, u64)> = samples.iter().map(|s| (s.at_ms, s.ingress)).collect();
    body += &chart::line("Depth", "dead letters", &depth);
    body += &chart::line(
        &format!("Ingress per {} s", crate::dlq::SAMPLE_EVERY.as_secs()),
        "dead letters",
        &ingress,
    );
    body += "<h2>Dead letters by cause</h2>";
    // Causes carry the policies' reasons and samples, which may quote message content.
    if !viewer.may(Role::Read) {
        body += "<p class=\"muted\"><a href=\"/login\">Log in</a> (role read or stronger) \
                 to see the dead letters by cause and the jobs.</p>";
        return page("Gateway", viewer, &body);
    }
    body += &match dead_letter_groups(state).await {
        Ok(groups) => groups_table(&groups),
        Err(e) => format!("<p class=\"bad\">{}</p>", escape(&e)),
    };
    body += "<h2>Jobs</h2>";
    body += &jobs(&state.jobs.list());
    page("Gateway", viewer, &body)
}

fn routes(routes: &[views::RouteView]) -> String {
    if routes.is_empty() {
        return "<p class=\"muted\">No routes.</p>".into();
    }
    let rows: Vec<Vec<String>> = routes
        .iter()
        .map(|r| {
            vec![
                format!("<code>{}</code>", escape(&r.topic)),
                escape(&r.policy),
                format!(
                    "{} {} <code class=\"muted\">{}</code>",
                    escape(&r.component.name),
                    escape(&r.component.version),
                    escape(r.component.sha256.get(..12).unwrap_or(&r.component.sha256))
                ),
                r.stats.decisions.to_string(),
                r.stats.faults.to_string(),
                r.stats.clamped.to_string(),
                r.shadow.as_ref().map_or_else(
                    || "-".into(),
                    |s| {
                        format!(
                            "{} ({} of {} disagree)",
                            escape(&s.shadow),
                            s.disagreements,
                            s.compared
                        )
                    },
                ),
            ]
        })
        .collect();
    table(
        &[
            "topic",
            "policy",
            "component",
            "decisions",
            "faults",
            "clamped",
            "shadow",
        ],
        &rows,
    )
}

async fn dead_letter_groups(state: &AdminState) -> Result<Vec<DlqGroup>, String> {
    let Some(pipeline) = state.gateway.clone() else {
        return Ok(Vec::new());
    };
    let park_after = pipeline.settings().park_after_repeats;
    let store = pipeline.store().clone();
    tokio::task::spawn_blocking(move || {
        groups(
            &[("embedded", store.as_ref())],
            &DlqFilter::default(),
            park_after,
            now_ms(),
        )
        .map_err(|e| format!("the store's dead letters could not be read: {e}"))
    })
    .await
    .map_err(|e| e.to_string())?
}

fn groups_table(groups: &[DlqGroup]) -> String {
    if groups.is_empty() {
        return "<p class=\"muted\">No dead letters in the store.</p>".into();
    }
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                format!(
                    "<a href=\"/groups/{0}\"><code>{0}</code></a>",
                    escape(&g.id)
                ),
                g.count.to_string(),
                g.parked.to_string(),
                format!("<code>{}</code>", escape(&g.fingerprint.topic)),
                escape(&g.fingerprint.class),
                format!("<code>{}</code>", escape(&g.fingerprint.kind)),
                escape(&g.fingerprint.reason),
                escape(&rfc3339(g.last_seen_ms)),
                format!(
                    "<a href=\"/letters/{}\">{}</a>",
                    g.sample.seq,
                    escape(&g.sample.message_id)
                ),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "group",
            "count",
            "parked",
            "topic",
            "class",
            "kind",
            "reason",
            "last seen",
            "sample",
        ],
        &rows,
    );
    let _ = write!(
        out,
        "<p class=\"muted\">Open a group to dry-run, replay or discard it (a login with the \
         admin token required), or use <code>verdict jobs dry-run|replay|discard --group \
         ID</code>.</p>"
    );
    out
}

fn jobs(jobs: &[JobView]) -> String {
    if jobs.is_empty() {
        return "<p class=\"muted\">No jobs since the gateway started.</p>".into();
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let state = serde_json::to_value(j.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            // A replay whose canary was not delivered ends there, on purpose: say so.
            let state = match &j.canary {
                Some(c) if !c.passed => format!(
                    "<span class=\"bad\">canary failed ({} of {} delivered); the rest stays</span>",
                    c.delivered, c.size
                ),
                _ => escape(&state),
            };
            vec![
                format!("<a href=\"/jobs/{0}\">{0}</a>", escape(&j.id)),
                escape(j.action),
                state,
                format!(
                    "<progress max=\"{}\" value=\"{}\"></progress> {}%",
                    j.total.max(1),
                    j.done.min(j.total.max(1)),
                    j.percent
                ),
                format!("{} / {}", j.done, j.total),
                format!(
                    "<code>{}</code>",
                    escape(j.filter.group.as_deref().unwrap_or("-"))
                ),
                escape(j.error.as_deref().unwrap_or(&j.note)),
            ]
        })
        .collect();
    table(
        &[
            "job", "action", "state", "progress", "done", "group", "note",
        ],
        &rows,
    )
}
