//! `/jobs/{id}`: one DLQ job as it runs - progress, the canary's verdict, a dry run's
//! decisions - with a cancel button while it runs. The page reloads itself every second
//! until the job ends (a `<meta>` refresh: the console runs no script), so an operator
//! who closes it and comes back finds the job where it is.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::html::{escape, form, message_page, page, refreshing_page, table};
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
        refreshing_page(&title, viewer, &body)
    } else {
        page(&title, viewer, &body)
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

fn body(j: &JobView, viewer: &Viewer) -> String {
    let mut out = format!(
        "<h1>Job {} <span class=\"pill\">{}</span> <span class=\"pill state-{}\" \
         id=\"job-state\">{}</span></h1>",
        escape(&j.id),
        escape(j.action),
        state_name(j.state),
        state_name(j.state)
    );
    let _ = write!(
        out,
        "<p><progress max=\"{}\" value=\"{}\"></progress> <strong id=\"job-percent\">{}%</strong> \
         - {} of {} dead letters</p>",
        j.total.max(1),
        j.done.min(j.total.max(1)),
        j.percent,
        j.done,
        j.total
    );
    out += "<dl>";
    let group = j.filter.group.as_deref().unwrap_or("-");
    let _ = write!(
        out,
        "<dt>group</dt><dd><a href=\"/groups/{0}\"><code>{0}</code></a></dd>",
        escape(group)
    );
    if let Some(cut) = j.filter.dead_before_ms {
        let _ = write!(
            out,
            "<dt>cut-off</dt><dd>letters dead-lettered before {}</dd>",
            escape(&rfc3339(cut))
        );
    }
    let _ = write!(
        out,
        "<dt>started</dt><dd>{}</dd>",
        escape(&rfc3339(j.started_at_ms))
    );
    if let Some(at) = j.finished_at_ms {
        let _ = write!(out, "<dt>ended</dt><dd>{}</dd>", escape(&rfc3339(at)));
    }
    let _ = write!(out, "<dt>note</dt><dd>{}</dd></dl>", escape(&j.note));
    if let Some(c) = &j.canary {
        if c.passed {
            let _ = write!(
                out,
                "<p class=\"good\">Canary passed: {} of {} delivered; the rest was replayed.</p>",
                c.delivered, c.size
            );
        } else {
            let _ = write!(
                out,
                "<p class=\"bad\">Canary failed: {} of {} delivered. The rest stays in the DLQ.</p>",
                c.delivered, c.size
            );
        }
    }
    if let Some(e) = &j.error {
        let _ = write!(out, "<p class=\"bad\">{}</p>", escape(e));
    }
    if !j.decisions.is_empty() {
        out += "<h2>What the current policy decides now</h2>";
        let rows: Vec<Vec<String>> = j
            .decisions
            .iter()
            .map(|(action, n)| vec![escape(action), n.to_string()])
            .collect();
        out += &table(&["decision", "letters"], &rows);
    }
    if j.state == JobState::Running {
        out += &form(
            &format!("/jobs/{}/cancel", j.id),
            viewer.session(),
            "action danger",
            "<span>Stop at the next step; what is done stays done.</span>",
            "Cancel job",
        );
    }
    out
}
