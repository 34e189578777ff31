//! `/groups/{id}`: one cause of the store's dead letters - what it is, its letters, and
//! the three things an operator does with a whole group: ask the current policy about it
//! (dry run), replay it (with a rate and a canary), or discard it with a reason. Each
//! starts a job, cut off at its start, and the page moves to the job's own page.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::html::{escape, form, message_page, page, table};
use crate::admin::AdminState;
use crate::admin::session::Viewer;
use crate::dlq::{DeadLetters, DlqGroup, groups, is_parked};
use crate::envelope::rfc3339;
use crate::pipeline::now_ms;
use crate::store::{DlqEntry, DlqFilter};

/// Letters of a group the page lists.
const SHOWN_LETTERS: usize = 200;

pub(super) async fn render(state: &AdminState, viewer: &Viewer, id: String) -> Response {
    if let Some(login) = super::html::unless_reader(viewer) {
        return login;
    }
    if let Err(e) = crate::admin::groups::check_group_id(&id) {
        return message_page(e.status, "Not a group", viewer, &e.message);
    }
    let pipeline = match crate::admin::dlq::gateway(state) {
        Ok(p) => p,
        Err(e) => return message_page(e.status, "No store", viewer, &e.message),
    };
    let park_after = pipeline.settings().park_after_repeats;
    let store = pipeline.store().clone();
    let filter = DlqFilter {
        group: Some(id.clone()),
        ..DlqFilter::default()
    };
    let read = tokio::task::spawn_blocking(move || {
        let now = now_ms();
        let found = groups(&[("embedded", store.as_ref())], &filter, park_after, now)?;
        let first = DlqFilter {
            limit: Some(SHOWN_LETTERS),
            ..filter
        };
        let letters = DeadLetters::page(store.as_ref(), &first, now)?.entries;
        Ok::<_, crate::dlq::DlqError>((found, letters))
    })
    .await;
    let (found, letters) = match read {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => {
            return message_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The store does not answer",
                viewer,
                &e.to_string(),
            );
        }
        Err(e) => {
            return message_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The read did not finish",
                viewer,
                &e.to_string(),
            );
        }
    };
    let Some(group) = found.into_iter().next() else {
        return message_page(
            StatusCode::NOT_FOUND,
            "No such group",
            viewer,
            &format!(
                "No dead letter of the store is in group {id} now (replayed, discarded, or \
                 the cause never seen)."
            ),
        );
    };
    let mut body = summary(&group);
    body += &actions(&group, viewer);
    let _ = write!(
        body,
        "<h2>Letters{}</h2>",
        if group.count as usize > SHOWN_LETTERS {
            format!(" (the first {SHOWN_LETTERS} of {})", group.count)
        } else {
            String::new()
        }
    );
    body += &letters_table(&letters, park_after);
    page(&format!("Group {}", group.id), viewer, &body)
}

fn summary(g: &DlqGroup) -> String {
    let f = &g.fingerprint;
    let mut out = format!(
        "<h1>Group <code>{}</code> <span class=\"pill\">{} dead letters</span></h1><dl>",
        escape(&g.id),
        g.count
    );
    let list = |set: &std::collections::BTreeSet<String>| {
        escape(&set.iter().cloned().collect::<Vec<_>>().join(", "))
    };
    for (k, v) in [
        ("topic", format!("<code>{}</code>", escape(&f.topic))),
        ("class", escape(&f.class)),
        ("kind", format!("<code>{}</code>", escape(&f.kind))),
        ("reason (normalised)", escape(&f.reason)),
        ("first seen", escape(&rfc3339(g.first_seen_ms))),
        ("last seen", escape(&rfc3339(g.last_seen_ms))),
        ("DLQs", list(&g.dlqs)),
        ("policy versions", list(&g.policy_versions)),
        (
            "parked",
            format!(
                "{} (bulk replays leave them out; act on them one by one)",
                g.parked
            ),
        ),
        (
            "sample",
            format!(
                "<a href=\"/letters/{}\">{}</a>: {}",
                g.sample.seq,
                escape(&g.sample.message_id),
                escape(&g.sample.reason)
            ),
        ),
    ] {
        let _ = write!(out, "<dt>{k}</dt><dd>{v}</dd>");
    }
    out + "</dl>"
}

fn actions(g: &DlqGroup, viewer: &Viewer) -> String {
    let session = viewer.session();
    let id = escape(&g.id);
    let mut out = String::from("<h2>Act on the group</h2>");
    if session.is_none() {
        out += "<p class=\"muted\"><a href=\"/login\">Log in</a> with the admin token to act. \
                A dry run moves nothing, but it runs the policy, so it needs a login too.</p>";
    }
    out += "<p class=\"muted\">Each action is a job on the letters dead-lettered before it \
            starts; letters that arrive meanwhile stay for the next look.</p>";
    out += "<div class=\"actions\">";
    out += &form(
        &format!("/groups/{id}/dry-run"),
        session,
        "action",
        "<span>What does the current policy decide for each letter now?</span>",
        "Dry run",
    );
    out += &form(
        &format!("/groups/{id}/replay"),
        session,
        "action",
        "<label>Canary <input name=\"canary\" inputmode=\"numeric\" size=\"4\" \
         placeholder=\"none\"></label>\
         <label>Rate per s <input name=\"rate_per_s\" inputmode=\"decimal\" size=\"5\" \
         placeholder=\"no limit\"></label>\
         <label>Note <input name=\"note\" maxlength=\"400\" placeholder=\"why (audited)\"></label>",
        "Replay group",
    );
    out += &form(
        &format!("/groups/{id}/discard"),
        session,
        "action danger",
        "<label>Reason <input name=\"reason\" maxlength=\"400\" required \
         placeholder=\"why (audited)\"></label>",
        "Discard group",
    );
    out + "</div>"
}

fn letters_table(letters: &[DlqEntry], park_after: u32) -> String {
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|e| {
            let parked = is_parked(e.repeats, park_after);
            vec![
                format!("<a href=\"/letters/{}\">{}</a>", e.seq, e.seq),
                format!("<code>{}</code>", escape(&e.message_id)),
                escape(&rfc3339(e.created_at_ms)),
                e.attempts.to_string(),
                if parked {
                    format!("<span class=\"bad\">{} (parked)</span>", e.repeats)
                } else {
                    e.repeats.to_string()
                },
                escape(&e.reason),
            ]
        })
        .collect();
    table(
        &[
            "seq",
            "message id",
            "dead-lettered",
            "attempts",
            "came back",
            "reason",
        ],
        &rows,
    )
}
