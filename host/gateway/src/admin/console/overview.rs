//! `/`: what runs and what is dead, on one page.

use axum::response::Response;
use maud::{Markup, html};

use super::chart;
use super::html::{page, table};
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
    let samples = state.dlq_history.samples();
    let depth: Vec<(u64, u64)> = samples.iter().map(|s| (s.at_ms, s.depth)).collect();
    let ingress: Vec<(u64, u64)> = samples.iter().map(|s| (s.at_ms, s.ingress)).collect();
    let running = html! {
        h1 { "Gateway " span.pill { "generation " (generation.number) } }
        h2 { "Routes" }
        (routes(&views::routes(&generation, state.gateway.as_deref())))
        h2 { "The store's DLQs, last hour" }
        (chart::line("Depth", "dead letters", &depth))
        (chart::line(
            &format!("Ingress per {} s", crate::dlq::SAMPLE_EVERY.as_secs()),
            "dead letters",
            &ingress,
        ))
        h2 { "Dead letters by cause" }
    };
    // Causes carry the policies' reasons and samples, which may quote message content.
    if !viewer.may(Role::Read) {
        let body = html! {
            (running)
            p.muted {
                a href="/login" { "Log in" }
                " (role read or stronger) to see the dead letters by cause and the jobs."
            }
        };
        return page("Gateway", viewer, body);
    }
    let dead = match dead_letter_groups(state).await {
        Ok(groups) => groups_table(&groups),
        Err(e) => html! { p.bad { (e) } },
    };
    let body = html! {
        (running)
        (dead)
        h2 { "Jobs" }
        (jobs(&state.jobs.list()))
    };
    page("Gateway", viewer, body)
}

/// What a paused route's badge says on hover.
fn pause_title(paused: &views::PausedView) -> String {
    if paused.probing {
        "paused by its policy: one probe delivery is out and decides whether the route resumes"
            .to_string()
    } else {
        let left_s = paused.until_ms.saturating_sub(now_ms()).div_ceil(1_000);
        format!(
            "paused by its policy: nothing is delivered for {left_s} s more, then one probe delivery"
        )
    }
}

/// What a route's parked-keys badge says on hover.
fn parked_title(parked: &views::ParkedView) -> String {
    let bound = match parked.max {
        Some(max) if parked.full => {
            format!("; at its bound of {max}: the route takes only retries until a key clears")
        }
        Some(max) => format!(" (bound {max})"),
        None => String::new(),
    };
    format!(
        "keys whose oldest unfinished message has failed, their later messages held back{bound}"
    )
}

fn routes(routes: &[views::RouteView]) -> Markup {
    if routes.is_empty() {
        return html! { p.muted { "No routes." } };
    }
    let rows: Vec<Vec<Markup>> = routes
        .iter()
        .map(|r| {
            let c = &r.component;
            vec![
                html! {
                    code { (r.topic) }
                    @if let Some(paused) = &r.paused {
                        " "
                        span.pill.warn title=(pause_title(paused)) {
                            @if paused.probing { "probing" } @else { "paused" }
                        }
                    }
                    @if let Some(parked) = r.parked_keys.filter(|p| p.keys > 0 || p.full) {
                        " "
                        @if parked.full {
                            span.pill.warn title=(parked_title(&parked)) {
                                (parked.keys) " keys parked (full)"
                            }
                        } @else {
                            span.pill title=(parked_title(&parked)) {
                                (parked.keys) " keys parked"
                            }
                        }
                    }
                },
                html! { (r.policy) },
                html! {
                    (c.name) " " (c.version) " "
                    code.muted { (c.sha256.get(..12).unwrap_or(&c.sha256)) }
                },
                html! { (r.stats.decisions) },
                html! { (r.stats.faults) },
                html! { (r.stats.clamped) },
                match &r.shadow {
                    Some(s) => html! {
                        (s.shadow) " (" (s.disagreements) " of " (s.compared) " disagree)"
                    },
                    None => html! { "-" },
                },
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

fn groups_table(groups: &[DlqGroup]) -> Markup {
    if groups.is_empty() {
        return html! { p.muted { "No dead letters in the store." } };
    }
    let rows: Vec<Vec<Markup>> = groups
        .iter()
        .map(|g| {
            let f = &g.fingerprint;
            vec![
                html! { a href={ "/groups/" (g.id) } { code { (g.id) } } },
                html! { (g.count) },
                html! { (g.parked) },
                html! { code { (f.topic) } },
                html! { (f.class) },
                html! { code { (f.kind) } },
                html! { (f.reason) },
                html! { (rfc3339(g.last_seen_ms)) },
                html! { a href={ "/letters/" (g.sample.seq) } { (g.sample.message_id) } },
            ]
        })
        .collect();
    html! {
        (table(
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
        ))
        p.muted {
            "Open a group to dry-run, replay or discard it (a login with the admin token \
             required), or use "
            code { "verdict jobs dry-run|replay|discard --group ID" }
            "."
        }
    }
}

fn jobs(jobs: &[JobView]) -> Markup {
    if jobs.is_empty() {
        return html! { p.muted { "No jobs since the gateway started." } };
    }
    let rows: Vec<Vec<Markup>> = jobs
        .iter()
        .map(|j| {
            // A replay whose canary was not delivered ends there, on purpose: say so.
            let state = match &j.canary {
                Some(c) if !c.passed => html! {
                    span.bad {
                        "canary failed (" (c.delivered) " of " (c.size)
                        " delivered); the rest stays"
                    }
                },
                _ => html! { (super::job::state_name(j.state)) },
            };
            vec![
                html! { a href={ "/jobs/" (j.id) } { (j.id) } },
                html! { (j.action) },
                state,
                html! {
                    progress max=(j.total.max(1)) value=(j.done.min(j.total.max(1))) {}
                    " " (j.percent) "%"
                },
                html! { (j.done) " / " (j.total) },
                html! { code { (j.filter.group.as_deref().unwrap_or("-")) } },
                html! { (j.error.as_deref().unwrap_or(&j.note)) },
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
