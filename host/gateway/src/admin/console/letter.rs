//! `/letters/{seq}`: one dead letter of the store, as an operator reads it, with what may
//! be done to it alone: replay or discard it (a parked letter too), or repair it when
//! `[console]` allows edits on its topic.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::html::{escape, form, hex_dump, message_page, page, table};
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
    let mut out = body(&entry);
    let park_after = state
        .gateway
        .as_ref()
        .map_or(0, |p| p.settings().park_after_repeats);
    if crate::dlq::is_parked(entry.repeats, park_after) {
        out += &format!(
            "<p class=\"bad\">Parked: it came back {} times after replays, so bulk replays \
             leave it out. Replay it here, alone, once its cause is fixed.</p>",
            entry.repeats
        );
    }
    out += &actions(&entry, viewer, may_edit);
    page(&format!("Dead letter {seq}"), viewer, &out)
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
fn actions(e: &DlqEntry, viewer: &Viewer, may_edit: bool) -> String {
    let session = viewer.session();
    let seq = e.seq;
    let mut out = String::from("<h2>Act on this letter</h2>");
    if viewer.session().is_none() {
        out += "<p class=\"muted\"><a href=\"/login\">Log in</a> with the admin token to act.</p>";
    }
    out += "<div class=\"actions\">";
    out += &form(
        &format!("/letters/{seq}/replay"),
        session,
        "action",
        "<label>Note <input name=\"note\" maxlength=\"400\" placeholder=\"why (audited)\"></label>",
        "Replay this letter",
    );
    out += &form(
        &format!("/letters/{seq}/discard"),
        session,
        "action",
        "<label>Reason <input name=\"reason\" maxlength=\"400\" required placeholder=\"why (audited)\"></label>",
        "Discard this letter",
    );
    out += "</div>";
    out += "<h2>Repair and resubmit</h2>";
    if !may_edit {
        out += "<p class=\"muted\">Repairs are off for this topic: set <code>[console] \
                allow_edit = true</code> (or list the topic in <code>allow_edit_topics</code>) \
                in the gateway config.</p>";
        return out;
    }
    let editable = Editable::of(e);
    let payload = match &editable.payload {
        Some(text) => format!(
            "<label>Payload<textarea name=\"payload\" rows=\"12\">{}</textarea></label>",
            escape(text)
        ),
        None => "<p class=\"muted\">A binary payload (or one not kept) is not edited here: \
                 send <code>payload_base64</code> to <code>POST /v1/dlq/{seq}/repair</code>.</p>"
            .into(),
    };
    out += &form(
        &format!("/letters/{seq}/repair"),
        session,
        "repair",
        &format!(
            "{payload}<label>Content type <input name=\"content_type\" value=\"{}\"></label>\
             <label>Headers, one <code>name: value</code> per line\
             <textarea name=\"headers\" rows=\"4\">{}</textarea></label>\
             <label>Note <input name=\"note\" maxlength=\"400\" required placeholder=\"what you fixed (audited)\"></label>",
            escape(&editable.content_type),
            escape(&editable.headers_text())
        ),
        "Repair and resubmit",
    );
    out += "<p class=\"muted\">The letter as it was stays in the audit log, with who changed \
            what.</p>";
    out
}

fn body(e: &DlqEntry) -> String {
    let env = &e.envelope;
    let o = &env.original;
    let mut out = format!(
        "<h1>Dead letter {} <span class=\"pill\">{}</span></h1><dl>",
        e.seq,
        escape(&e.dlq)
    );
    for (k, v) in [
        ("message id", o.id.as_str()),
        ("topic", o.topic.as_str()),
        ("content type", o.content_type.as_deref().unwrap_or("-")),
        ("dead-lettered", env.dead_lettered_at.as_str()),
        ("gateway", env.gateway.as_str()),
        ("consumer group", env.consumer_group.as_str()),
    ] {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(v));
    }
    let _ = write!(
        out,
        "<dt>attempts</dt><dd>{}</dd><dt>came back</dt><dd>{} time(s) after a replay</dd></dl>",
        env.attempts, e.repeats
    );

    out += "<h2>Verdict</h2><dl>";
    let v = &env.verdict;
    for (k, val) in [
        ("action", v.action.as_str()),
        ("class", v.class.as_str()),
        ("reason", v.reason.as_str()),
        ("alert", v.alert.as_str()),
    ] {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(val));
    }
    let p = &env.policy;
    let _ = write!(
        out,
        "<dt>policy</dt><dd>{} {} <code>{}</code>{}</dd></dl>",
        escape(&p.name),
        escape(&p.version),
        escape(&p.sha256),
        p.generation
            .map(|g| format!(", generation {g}"))
            .unwrap_or_default()
    );
    if let Some(fault) = &p.fallback {
        let _ = write!(
            out,
            "<p class=\"bad\">The policy faulted; the fallback verdict applied: {}</p>",
            escape(fault)
        );
    }

    out += "<h2>Attempts</h2><ol class=\"timeline\">";
    for err in &env.errors {
        let _ = write!(
            out,
            "<li><code>{}</code> <strong>{}</strong><br><span class=\"muted\">{}</span></li>",
            escape(&err.at),
            escape(&err.kind),
            escape(&err.message)
        );
    }
    out += "</ol>";

    out += "<h2>Headers</h2>";
    if o.headers.is_empty() {
        out += "<p class=\"muted\">None.</p>";
    } else {
        let rows: Vec<Vec<String>> = o
            .headers
            .iter()
            .map(|(k, v)| vec![format!("<code>{}</code>", escape(k)), escape(v)])
            .collect();
        out += &table(&["name", "value"], &rows);
    }

    out += "<h2>Payload</h2>";
    out += &payload(o);
    out
}

fn payload(o: &crate::envelope::Original) -> String {
    if let Some(omitted) = &o.payload_omitted {
        return format!(
            "<p class=\"muted\">Not kept: {} ({} bytes, sha256 <code>{}</code>).</p>",
            escape(&omitted.reason),
            omitted.bytes,
            escape(&omitted.sha256)
        );
    }
    match (&o.payload, &o.payload_base64) {
        (Some(serde_json::Value::String(text)), _) => format!("<pre>{}</pre>", escape(text)),
        (Some(json), _) => format!(
            "<pre>{}</pre>",
            escape(&serde_json::to_string_pretty(json).unwrap_or_default())
        ),
        (None, Some(_)) => {
            let bytes = o.payload_bytes();
            format!(
                "<p class=\"muted\">Binary, {} bytes.</p><pre>{}</pre>",
                bytes.len(),
                escape(&hex_dump(&bytes, HEX_BYTES))
            )
        }
        (None, None) => "<p class=\"muted\">Empty.</p>".into(),
    }
}
