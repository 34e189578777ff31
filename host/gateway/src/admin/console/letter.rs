//! `/letters/{seq}`: one dead letter of the store, as an operator reads it.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::html::{escape, hex_dump, page, table};
use crate::admin::AdminState;
use crate::store::DlqEntry;

/// Bytes of a binary payload the page shows.
const HEX_BYTES: usize = 4_096;

pub(super) async fn render(state: &AdminState, seq: &str) -> Response {
    let Ok(seq) = seq.parse::<i64>() else {
        return not_found("That is not a dead letter's number.");
    };
    let Some(pipeline) = state.gateway.clone() else {
        return not_found("This server has no store.");
    };
    let store = pipeline.store().clone();
    let entry = match tokio::task::spawn_blocking(move || store.dlq_entry(seq)).await {
        Ok(Ok(Some(entry))) => entry,
        Ok(Ok(None)) => {
            return not_found(&format!(
                "No dead letter {seq} in the store (replayed, discarded or never there)."
            ));
        }
        Ok(Err(e)) => return unavailable(&e.to_string()),
        Err(e) => return unavailable(&e.to_string()),
    };
    page(&format!("Dead letter {seq}"), &body(&entry))
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

fn not_found(message: &str) -> Response {
    let mut r = page(
        "Not found",
        &format!("<h1>Not found</h1><p>{}</p>", escape(message)),
    );
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.into_response()
}

fn unavailable(message: &str) -> Response {
    let mut r = page(
        "Store unavailable",
        &format!(
            "<h1>The store does not answer</h1><p>{}</p>",
            escape(message)
        ),
    );
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r
}
