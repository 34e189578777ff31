//! `/jobs/{id}`: one DLQ job as it runs - progress, the canary's verdict, a dry run's
//! decisions - with a cancel button while it runs. The page reloads itself every second
//! until the job ends (a `<meta>` refresh: the console runs no script), so an operator
//! who closes it and comes back finds the job where it is.

use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};

use super::html::{form, message_page, page, refreshing_page, table};
use crate::admin::AdminState;
use crate::admin::session::Viewer;
use crate::dlq::{JobState, JobView};
use crate::envelope::rfc3339;

pub(super) fn render(state: &AdminState, viewer: &Viewer, id: &str) -> Response {
    if let Some(login) = super::html::unless_reader(viewer) {
        return login;
    }
    let Some(job) = state.jobs.get(id) else {
        let e = crate::admin::jobs::no_such_job(id);
        return message_page(StatusCode::NOT_FOUND, "No such job", viewer, &e.message);
    };
    let job = job.view();
    let body = body(&job, viewer);
    let title = format!("Job {}", job.id);
    if job.state == JobState::Running {
        refreshing_page(&title, viewer, body)
    } else {
        page(&title, viewer, body)
    }
}

/// A job state's name, as the API spells it.
pub(super) fn state_name(state: JobState) -> &'static str {
    match state {
        JobState::Running => "running",
        JobState::Succeeded => "succeeded",
        JobState::Failed => "failed",
        JobState::Cancelled => "cancelled",
    }
}

fn body(j: &JobView, viewer: &Viewer) -> Markup {
    let state = state_name(j.state);
    let group = j.filter.group.as_deref().unwrap_or("-");
    let decisions: Vec<Vec<Markup>> = j
        .decisions
        .iter()
        .map(|(action, n)| vec![html! { (action) }, html! { (n) }])
        .collect();
    html! {
        h1 {
            "Job " (j.id) " " span.pill { (j.action) } " "
            span class={ "pill state-" (state) } id="job-state" { (state) }
        }
        p {
            progress max=(j.total.max(1)) value=(j.done.min(j.total.max(1))) {}
            " " strong id="job-percent" { (j.percent) "%" }
            " - " (j.done) " of " (j.total) " dead letters"
        }
        dl {
            dt { "group" }
            dd { a href={ "/groups/" (group) } { code { (group) } } }
            @if let Some(cut) = j.filter.dead_before_ms {
                dt { "cut-off" }
                dd { "letters dead-lettered before " (rfc3339(cut)) }
            }
            dt { "started" }
            dd { (rfc3339(j.started_at_ms)) }
            @if let Some(at) = j.finished_at_ms {
                dt { "ended" }
                dd { (rfc3339(at)) }
            }
            dt { "note" }
            dd { (j.note) }
        }
        @if let Some(c) = &j.canary {
            @if c.passed {
                p.good {
                    "Canary passed: " (c.delivered) " of " (c.size)
                    " delivered; the rest was replayed."
                }
            } @else {
                p.bad {
                    "Canary failed: " (c.delivered) " of " (c.size)
                    " delivered. The rest stays in the DLQ."
                }
            }
        }
        @if let Some(e) = &j.error {
            p.bad { (e) }
        }
        @if !decisions.is_empty() {
            h2 { "What the current policy decides now" }
            (table(&["decision", "letters"], &decisions))
        }
        @if j.state == JobState::Running {
            (form(
                &format!("/jobs/{}/cancel", j.id),
                viewer.session(),
                "action danger",
                html! { span { "Stop at the next step; what is done stays done." } },
                "Cancel job",
            ))
        }
    }
}
