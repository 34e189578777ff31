//! `/letters/{seq}`: one dead letter of the store, as an operator reads it, with what may
//! be done to it alone: replay or discard it (a parked letter too), or repair it when
//! `[console]` allows edits on its topic.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};

use super::html::{form, hex_dump, message_page, page, table};
use crate::admin::session::Viewer;
use crate::admin::{AdminState, ApiError, repair};
use crate::store::DlqEntry;

/// Bytes of a binary payload the page shows.
const HEX_BYTES: usize = 4_096;

pub(super) async fn render(state: &AdminState, viewer: &Viewer, seq: &str) -> Response {
    if let Some(login) = super::html::unless_reader(viewer) {
        return login;
    }
    let Ok(seq) = seq.parse::<i64>() else {
        return message_page(
            StatusCode::NOT_FOUND,
            "Not found",
            viewer,
            "That is not a dead letter's number.",
        );
    };
    let entry = match entry(state, seq).await {
        Ok(entry) => entry,
        Err(e) if e.status == StatusCode::NOT_FOUND => {
            return message_page(e.status, "Not found", viewer, &e.message);
        }
        Err(e) => return message_page(e.status, "The store does not answer", viewer, &e.message),
    };
    let may_edit = state
        .registry
        .current()
        .config()
        .console
        .may_edit(&entry.topic);
    let park_after = state
        .gateway
        .as_ref()
        .map_or(0, |p| p.settings().park_after_repeats);
    let out = html! {
        (body(&entry))
        @if crate::dlq::is_parked(entry.repeats, park_after) {
            p.bad {
                "Parked: it came back " (entry.repeats) " times after replays, so bulk \
                 replays leave it out. Replay it here, alone, once its cause is fixed."
            }
        }
        (actions(&entry, viewer, may_edit))
    };
    page(&format!("Dead letter {seq}"), viewer, out)
}

/// Dead letter `seq` of the store: 404 when it has left the DLQs, 503 when the store does
/// not answer.
pub(super) async fn entry(state: &AdminState, seq: i64) -> Result<DlqEntry, ApiError> {
    let pipeline = crate::admin::dlq::gateway(state)?;
    let store = pipeline.store().clone();
    let unavailable = |e: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store", e);
    match tokio::task::spawn_blocking(move || store.dlq_entry(seq)).await {
        Ok(Ok(Some(entry))) => Ok(entry),
        Ok(Ok(None)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_such_dead_letter",
            format!("No dead letter {seq} in the store (replayed, discarded or never there)."),
        )),
        Ok(Err(e)) => Err(unavailable(e.to_string())),
        Err(e) => Err(unavailable(e.to_string())),
    }
}

/// What a repair form shows and what the edit is compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Editable {
    /// The payload as text (JSON pretty-printed); `None` when binary or not kept, which
    /// the form cannot edit.
    pub(super) payload: Option<String>,
    /// The content type (empty when the message had none).
    pub(super) content_type: String,
    /// The headers.
    pub(super) headers: BTreeMap<String, String>,
}

impl Editable {
    pub(super) fn of(entry: &DlqEntry) -> Editable {
        let o = &entry.envelope.original;
        let payload = match (&o.payload_omitted, &o.payload, &o.payload_base64) {
            (Some(_), _, _) | (None, None, Some(_)) => None,
            (None, Some(serde_json::Value::String(text)), _) => Some(text.clone()),
            (None, Some(json), _) => serde_json::to_string_pretty(json).ok(),
            (None, None, None) => Some(String::new()),
        };
        Editable {
            payload,
            content_type: o.content_type.clone().unwrap_or_default(),
            headers: o.headers.clone(),
        }
    }

    /// Headers as the form shows them: `name: value`, one per line.
    fn headers_text(&self) -> String {
        self.headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The form's headers text back as headers; names and values are checked again by the
    /// repair itself.
    pub(super) fn parse_headers(text: &str) -> Result<BTreeMap<String, String>, ApiError> {
        let mut headers = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(ApiError::bad_request(format!(
                    "headers: line {}: `{}` is not `name: value`",
                    i + 1,
                    verdict_runtime::text::one_line(line, 64)
                )));
            };
            if headers.len() == repair::MAX_HEADERS {
                return Err(ApiError::bad_request(format!(
                    "headers: at most {}",
                    repair::MAX_HEADERS
                )));
            }
            headers.insert(name.trim().to_string(), value.trim().to_string());
        }
        Ok(headers)
    }
}

/// The forms that act on this letter alone.
fn actions(e: &DlqEntry, viewer: &Viewer, may_edit: bool) -> Markup {
    let session = viewer.session();
    let seq = e.seq;
    html! {
        h2 { "Act on this letter" }
        @if session.is_none() {
            p.muted { a href="/login" { "Log in" } " with the admin token to act." }
        }
        div.actions {
            (form(
                &format!("/letters/{seq}/replay"),
                session,
                "action",
                html! {
                    label {
                        "Note "
                        input name="note" maxlength="400" placeholder="why (audited)";
                    }
                },
                "Replay this letter",
            ))
            (form(
                &format!("/letters/{seq}/discard"),
                session,
                "action",
                html! {
                    label {
                        "Reason "
                        input name="reason" maxlength="400" required placeholder="why (audited)";
                    }
                },
                "Discard this letter",
            ))
        }
        h2 { "Repair and resubmit" }
        @if may_edit {
            (repair_form(e, session))
        } @else {
            p.muted {
                "Repairs are off for this topic: set " code { "[console] allow_edit = true" }
                " (or list the topic in " code { "allow_edit_topics" } ") in the gateway config."
            }
        }
    }
}

fn repair_form(e: &DlqEntry, session: Option<&crate::admin::session::Session>) -> Markup {
    let seq = e.seq;
    let editable = Editable::of(e);
    let fields = html! {
        @if let Some(text) = &editable.payload {
            label { "Payload" textarea name="payload" rows="12" { (text) } }
        } @else {
            p.muted {
                "A binary payload (or one not kept) is not edited here: send "
                code { "payload_base64" } " to " code { "POST /v1/dlq/" (seq) "/repair" } "."
            }
        }
        label { "Content type " input name="content_type" value=(editable.content_type); }
        label {
            "Headers, one " code { "name: value" } " per line"
            textarea name="headers" rows="4" { (editable.headers_text()) }
        }
        label {
            "Note "
            input name="note" maxlength="400" required placeholder="what you fixed (audited)";
        }
    };
    html! {
        (form(&format!("/letters/{seq}/repair"), session, "repair", fields, "Repair and resubmit"))
        p.muted { "The letter as it was stays in the audit log, with who changed what." }
    }
}

fn body(e: &DlqEntry) -> Markup {
    let env = &e.envelope;
    let o = &env.original;
    let v = &env.verdict;
    let p = &env.policy;
    let message = [
        ("message id", o.id.as_str()),
        ("topic", o.topic.as_str()),
        ("content type", o.content_type.as_deref().unwrap_or("-")),
        ("dead-lettered", env.dead_lettered_at.as_str()),
        ("gateway", env.gateway.as_str()),
        ("consumer group", env.consumer_group.as_str()),
    ];
    let verdict = [
        ("action", v.action.as_str()),
        ("class", v.class.as_str()),
        ("reason", v.reason.as_str()),
        ("alert", v.alert.as_str()),
    ];
    let headers: Vec<Vec<Markup>> = o
        .headers
        .iter()
        .map(|(k, v)| vec![html! { code { (k) } }, html! { (v) }])
        .collect();
    html! {
        h1 { "Dead letter " (e.seq) " " span.pill { (e.dlq) } }
        dl {
            @for (k, v) in message {
                dt { (k) }
                dd { (v) }
            }
            dt { "attempts" }
            dd { (env.attempts) }
            dt { "came back" }
            dd { (e.repeats) " time(s) after a replay" }
        }
        h2 { "Verdict" }
        dl {
            @for (k, v) in verdict {
                dt { (k) }
                dd { (v) }
            }
            dt { "policy" }
            dd {
                (p.name) " " (p.version) " " code { (p.sha256) }
                @if let Some(g) = p.generation {
                    ", generation " (g)
                }
            }
        }
        @if let Some(fault) = &p.fallback {
            p.bad { "The policy faulted; the fallback verdict applied: " (fault) }
        }
        h2 { "Attempts" }
        ol.timeline {
            @for err in &env.errors {
                li {
                    code { (err.at) } " " strong { (err.kind) }
                    br;
                    span.muted { (err.message) }
                }
            }
        }
        h2 { "Headers" }
        @if headers.is_empty() {
            p.muted { "None." }
        } @else {
            (table(&["name", "value"], &headers))
        }
        h2 { "Payload" }
        (payload(o))
    }
}

fn payload(o: &crate::envelope::Original) -> Markup {
    if let Some(omitted) = &o.payload_omitted {
        return html! {
            p.muted {
                "Not kept: " (omitted.reason) " (" (omitted.bytes) " bytes, sha256 "
                code { (omitted.sha256) } ")."
            }
        };
    }
    match (&o.payload, &o.payload_base64) {
        (Some(serde_json::Value::String(text)), _) => html! { pre { (text) } },
        (Some(json), _) => {
            html! { pre { (serde_json::to_string_pretty(json).unwrap_or_default()) } }
        }
        (None, Some(_)) => {
            let bytes = o.payload_bytes();
            html! {
                p.muted { "Binary, " (bytes.len()) " bytes." }
                pre { (hex_dump(&bytes, HEX_BYTES)) }
            }
        }
        (None, None) => html! { p.muted { "Empty." } },
    }
}
