//! `/groups/{id}`: one cause of the store's dead letters - what it is, its letters, and
//! the three things an operator does with a whole group: ask the current policy about it
//! (dry run), replay it (with a rate and a canary), or discard it with a reason. Each
//! starts a job, cut off at its start, and the page moves to the job's own page.

use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};

use super::html::{form, message_page, page, table};
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
    let body = html! {
        (summary(&group))
        (actions(&group, viewer))
        h2 {
            "Letters"
            @if group.count as usize > SHOWN_LETTERS {
                " (the first " (SHOWN_LETTERS) " of " (group.count) ")"
            }
        }
        (letters_table(&letters, park_after))
    };
    page(&format!("Group {}", group.id), viewer, body)
}

fn summary(g: &DlqGroup) -> Markup {
    let f = &g.fingerprint;
    let list = |set: &std::collections::BTreeSet<String>| {
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    };
    let rows: [(&str, Markup); 10] = [
        ("topic", html! { code { (f.topic) } }),
        ("class", html! { (f.class) }),
        ("kind", html! { code { (f.kind) } }),
        ("reason (normalised)", html! { (f.reason) }),
        ("first seen", html! { (rfc3339(g.first_seen_ms)) }),
        ("last seen", html! { (rfc3339(g.last_seen_ms)) }),
        ("DLQs", html! { (list(&g.dlqs)) }),
        ("policy versions", html! { (list(&g.policy_versions)) }),
        (
            "parked",
            html! { (g.parked) " (bulk replays leave them out; act on them one by one)" },
        ),
        (
            "sample",
            html! {
                a href={ "/letters/" (g.sample.seq) } { (g.sample.message_id) }
                ": " (g.sample.reason)
            },
        ),
    ];
    html! {
        h1 { "Group " code { (g.id) } " " span.pill { (g.count) " dead letters" } }
        dl {
            @for (k, v) in &rows {
                dt { (k) }
                dd { (v) }
            }
        }
    }
}

fn actions(g: &DlqGroup, viewer: &Viewer) -> Markup {
    let session = viewer.session();
    let id = &g.id;
    html! {
        h2 { "Act on the group" }
        @if session.is_none() {
            p.muted {
                a href="/login" { "Log in" }
                " with the admin token to act. A dry run moves nothing, but it runs the \
                 policy, so it needs a login too."
            }
        }
        p.muted {
            "Each action is a job on the letters dead-lettered before it starts; letters \
             that arrive meanwhile stay for the next look."
        }
        div.actions {
            (form(
                &format!("/groups/{id}/dry-run"),
                session,
                "action",
                html! { span { "What does the current policy decide for each letter now?" } },
                "Dry run",
            ))
            (form(
                &format!("/groups/{id}/replay"),
                session,
                "action",
                html! {
                    label {
                        "Canary "
                        input name="canary" inputmode="numeric" size="4" placeholder="none";
                    }
                    label {
                        "Rate per s "
                        input name="rate_per_s" inputmode="decimal" size="5" placeholder="no limit";
                    }
                    label {
                        "Note "
                        input name="note" maxlength="400" placeholder="why (audited)";
                    }
                },
                "Replay group",
            ))
            (form(
                &format!("/groups/{id}/discard"),
                session,
                "action danger",
                html! {
                    label {
                        "Reason "
                        input name="reason" maxlength="400" required placeholder="why (audited)";
                    }
                },
                "Discard group",
            ))
        }
    }
}

fn letters_table(letters: &[DlqEntry], park_after: u32) -> Markup {
    let rows: Vec<Vec<Markup>> = letters
        .iter()
        .map(|e| {
            vec![
                html! { a href={ "/letters/" (e.seq) } { (e.seq) } },
                html! { code { (e.message_id) } },
                html! { (rfc3339(e.created_at_ms)) },
                html! { (e.attempts) },
                if is_parked(e.repeats, park_after) {
                    html! { span.bad { (e.repeats) " (parked)" } }
                } else {
                    html! { (e.repeats) }
                },
                html! { (e.reason) },
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
