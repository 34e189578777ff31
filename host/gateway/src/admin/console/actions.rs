//! The console's actions: every form posts here, and every post passes the same guard
//! before it changes anything ([`checked`]):
//!
//! 1. the request comes from the console's own pages (`Origin`, when the browser sends
//!    one, names this listener; another site's page is refused with 403);
//! 2. it carries a live session (401 otherwise: "log in", or "your login expired");
//! 3. the session's identity has the role the action needs - the role the admin API asks
//!    for the same action (403 otherwise, naming it);
//! 4. its form parses (400, naming the field);
//! 5. its CSRF token is the session's (403 otherwise).
//!
//! Then the action runs through the same code as the admin API's (jobs, replays, discards,
//! repairs, rollbacks), with the identity's name in the audit note.

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::html::message_page;
use super::letter::Editable;
use crate::admin::host_check::AllowedHosts;
use crate::admin::identity::Role;
use crate::admin::session::{Session, Viewer};
use crate::admin::{AdminState, ApiError, auth, bodies, groups, handlers, jobs, repair};
use crate::dlq::ReplayOptions;
use crate::pipeline::now_ms;
use crate::store::DlqFilter;

/// A form that carries the session's CSRF token.
pub(super) trait CarriesCsrf {
    /// The token the form carried.
    fn csrf(&self) -> &str;
}

/// A form with nothing but the token (logout, cancel).
#[derive(Deserialize)]
pub(super) struct CsrfForm {
    csrf: String,
}

impl CarriesCsrf for CsrfForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// What the guard answers instead of running the action: a page saying why. Boxed, as
/// a response is large and the guard's happy path should not pay for it.
pub(super) type Refusal = Box<Response>;

/// Whether the request's `Origin` (when it has one) is this listener: a form on another
/// site's page posts with that site's origin, or `null` from a sandboxed frame. Compared
/// with the names the listener answers to, never with the request's own `Host` - a page
/// that rebinds its name to this machine sends its own name in both.
pub(super) fn same_origin(hosts: &AllowedHosts, headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        // Browsers send `Origin` with every form post; a client without one is not a
        // page, and still needs the session and its CSRF token.
        return true;
    };
    origin.to_str().is_ok_and(|o| hosts.allows_origin(o))
}

/// The guard every action passes (see the module's doc), for an action that needs
/// `needed`: the session and the parsed form.
pub(super) fn checked<T: CarriesCsrf>(
    state: &AdminState,
    headers: &HeaderMap,
    form: Result<Form<T>, FormRejection>,
    needed: Role,
) -> Result<(Session, T), Refusal> {
    let viewer = state.viewer(headers);
    let refuse = |status: StatusCode, title: &str, message: &str| -> Refusal {
        Box::new(message_page(status, title, &viewer, message))
    };
    if !same_origin(state.allowed_hosts(), headers) {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "Refused",
            "This form was not sent from the console's own pages.",
        ));
    }
    let session = match &viewer {
        Viewer::Operator(session) => session.clone(),
        Viewer::Expired => {
            return Err(refuse(
                StatusCode::UNAUTHORIZED,
                "Your login expired",
                "Nothing was changed. Log in again with your token, then repeat the action.",
            ));
        }
        Viewer::Anonymous => {
            return Err(refuse(
                StatusCode::UNAUTHORIZED,
                "This needs a login",
                "Nothing was changed: acting needs a login with a token.",
            ));
        }
    };
    if session.role < needed {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "Not your role",
            &format!(
                "Nothing was changed: this needs the role {needed} (or a stronger one); {} has \
                 the role {}.",
                session.who, session.role
            ),
        ));
    }
    let Form(form) = form.map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            "Bad form",
            &format!("Nothing was changed: {}", e.body_text()),
        )
    })?;
    if !auth::same(form.csrf(), &session.csrf) {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "Refused",
            "Nothing was changed: the form's token is not this login's (reload the page and try again).",
        ));
    }
    Ok((session, form))
}

/// An API error from the action, as a page.
fn failed(state: &AdminState, headers: &HeaderMap, e: ApiError) -> Response {
    message_page(
        e.status,
        "The action failed",
        &state.viewer(headers),
        &e.message,
    )
}

/// `text` with who did it, for the audit log; `default` when the operator wrote nothing.
fn by(text: &str, who: &str, default: &str) -> String {
    let text = text.trim();
    bodies::attributed(if text.is_empty() { default } else { text }, who, "console")
}

/// A group action's form: a replay's rate, canary and note, or a discard's reason.
#[derive(Deserialize)]
pub(super) struct GroupForm {
    csrf: String,
    #[serde(default)]
    rate_per_s: String,
    #[serde(default)]
    canary: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    reason: String,
}

impl CarriesCsrf for GroupForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The admin API's body for `form`: the same checks apply to both.
fn group_body(action: &str, form: &GroupForm, who: &str) -> Result<Vec<u8>, ApiError> {
    let mut body = Map::new();
    let number = |field: &str, text: &str| -> Result<Option<Value>, ApiError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        serde_json::from_str::<Value>(text)
            .ok()
            .filter(Value::is_number)
            .map(Some)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{field}: `{}` is not a number",
                    verdict_runtime::text::one_line(text, 32)
                ))
            })
    };
    match action {
        "replay" => {
            if let Some(rate) = number("rate_per_s", &form.rate_per_s)? {
                body.insert("rate_per_s".into(), rate);
            }
            if let Some(canary) = number("canary", &form.canary)? {
                body.insert("canary".into(), canary);
            }
            body.insert(
                "note".into(),
                by(&form.note, who, "group replayed from the console").into(),
            );
        }
        "discard" => {
            if form.reason.trim().is_empty() {
                return Err(ApiError::bad_request(
                    "reason: a discard needs a reason (it is audited)",
                ));
            }
            body.insert("reason".into(), by(&form.reason, who, "").into());
        }
        _ => {}
    }
    Ok(Value::Object(body).to_string().into_bytes())
}

/// `POST /groups/{id}/{replay|discard|dry-run}`: start the job, then show it.
pub(super) async fn group(
    state: &AdminState,
    headers: &HeaderMap,
    group: String,
    action: &str,
    form: Result<Form<GroupForm>, FormRejection>,
) -> Response {
    let (session, form) = match checked(state, headers, form, Role::Operate) {
        Ok(ok) => ok,
        Err(refusal) => return *refusal,
    };
    let started = groups::check_group_id(&group)
        .and_then(|()| group_body(action, &form, &session.who))
        .and_then(|body| bodies::group_action(action, &body))
        .and_then(|(_, job)| groups::start(state, group, None, job));
    match started {
        Ok(job) => Redirect::to(&format!("/jobs/{}", job.id)).into_response(),
        Err(e) => failed(state, headers, e),
    }
}

/// `POST /jobs/{id}/cancel`.
pub(super) async fn cancel_job(
    state: &AdminState,
    headers: &HeaderMap,
    id: &str,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    let (session, _) = match checked(state, headers, form, Role::Operate) {
        Ok(ok) => ok,
        Err(refusal) => return *refusal,
    };
    tracing::info!(identity = %session.who, job = %verdict_runtime::text::one_line(id, 64), "job cancelled from the console");
    match jobs::cancel_job(state, id) {
        Ok(job) => Redirect::to(&format!("/jobs/{}", job.id)).into_response(),
        Err(e) => failed(state, headers, e),
    }
}

/// One letter's replay or discard: a note, or a reason.
#[derive(Deserialize)]
pub(super) struct LetterForm {
    csrf: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    reason: String,
}

impl CarriesCsrf for LetterForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /letters/{seq}/{replay|discard}`: one dead letter of the store, parked or not
/// (acting on a parked letter one by one is what parking asks for).
pub(super) async fn letter(
    state: &AdminState,
    headers: &HeaderMap,
    seq: i64,
    action: &str,
    form: Result<Form<LetterForm>, FormRejection>,
) -> Response {
    let (session, form) = match checked(state, headers, form, Role::Operate) {
        Ok(ok) => ok,
        Err(refusal) => return *refusal,
    };
    let filter = DlqFilter {
        seq: Some(seq),
        ..DlqFilter::default()
    };
    let done = match action {
        "replay" => {
            let options = ReplayOptions {
                note: by(&form.note, &session.who, "replayed from the console"),
                ..ReplayOptions::default()
            };
            replay_one(state, filter, options).await
        }
        "discard" if form.reason.trim().is_empty() => Err(ApiError::bad_request(
            "reason: a discard needs a reason (it is audited)",
        )),
        "discard" => {
            let reason = by(&form.reason, &session.who, "");
            crate::admin::dlq::with_dlqs(state, None, move |d| {
                let entries = d.list(&filter, now_ms())?;
                d.discard(&entries, &reason)
            })
            .await
        }
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "a dead letter's actions are replay, discard and repair",
        )),
    };
    match done {
        Ok(0) => failed(
            state,
            headers,
            ApiError::new(
                StatusCode::CONFLICT,
                "no_such_dead_letter",
                format!("dead letter {seq} is no longer in the store's DLQs"),
            ),
        ),
        Ok(_) => Redirect::to("/").into_response(),
        Err(e) => failed(state, headers, e),
    }
}

/// Replay what `filter` matches now; how many were put back.
async fn replay_one(
    state: &AdminState,
    filter: DlqFilter,
    mut options: ReplayOptions,
) -> Result<u64, ApiError> {
    let pipeline = crate::admin::dlq::gateway(state)?;
    options.trace = crate::telemetry::ReplayTrace::new(pipeline.tracing().clone());
    let registry = state.registry.clone();
    crate::admin::dlq::with_dlqs(state, None, move |d| {
        let report = crate::dlq::replay(d, Some(&registry), &filter, &options, |_, _| {})?;
        pipeline.wake();
        Ok::<u64, crate::dlq::ReplayError>(report.replayed as u64)
    })
    .await
}

/// A repair: the payload, content type and headers as the operator left them.
#[derive(Deserialize)]
pub(super) struct RepairForm {
    csrf: String,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    content_type: String,
    #[serde(default)]
    headers: String,
    #[serde(default)]
    note: String,
}

impl CarriesCsrf for RepairForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /letters/{seq}/repair`: the changed fields only, through the API's checks, with
/// the operator's name in the audit line.
pub(super) async fn repair(
    state: &AdminState,
    headers: &HeaderMap,
    seq: i64,
    form: Result<Form<RepairForm>, FormRejection>,
) -> Response {
    let (session, form) = match checked(state, headers, form, Role::Edit) {
        Ok(ok) => ok,
        Err(refusal) => return *refusal,
    };
    let before = match super::letter::entry(state, seq).await {
        Ok(entry) => Editable::of(&entry),
        Err(e) => return failed(state, headers, e),
    };
    let applied = match edited(&before, &form) {
        Ok(body) => match repair::parse(&body) {
            Ok((change, note)) => {
                repair::apply(
                    state,
                    seq,
                    change,
                    note,
                    &format!("{} (console)", session.who),
                )
                .await
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match applied {
        // A page rather than a redirect: the operator sees the audit line that was kept
        // (posting again finds the letter gone and changes nothing).
        Ok(done) => message_page(
            StatusCode::OK,
            "Repaired and resubmitted",
            &Viewer::Operator(session),
            &format!(
                "Message {} is back for delivery. The audit log keeps: {}",
                done["message_id"].as_str().unwrap_or("?"),
                done["audit"].as_str().unwrap_or("?")
            ),
        ),
        Err(e) => failed(state, headers, e),
    }
}

/// The repair API's body for what `form` changed of `before`; 400 when nothing did.
fn edited(before: &Editable, form: &RepairForm) -> Result<Vec<u8>, ApiError> {
    let mut body = Map::new();
    let content_type = form.content_type.trim();
    if !content_type.is_empty() && content_type != before.content_type {
        body.insert("content_type".into(), content_type.into());
    }
    let headers = Editable::parse_headers(&form.headers)?;
    if headers != before.headers {
        body.insert("headers".into(), json!(headers));
    }
    if let (Some(text), Some(was)) = (&form.payload, &before.payload) {
        // Browsers send a textarea's line breaks as CRLF.
        let text = text.replace("\r\n", "\n");
        let is_json = content_type.is_empty() && before.content_type.contains("json")
            || content_type.contains("json");
        if is_json {
            let value: Value = serde_json::from_str(&text).map_err(|e| {
                ApiError::bad_request(format!(
                    "payload: not JSON ({e}), and the content type says JSON"
                ))
            })?;
            if serde_json::from_str::<Value>(was).ok().as_ref() != Some(&value) {
                body.insert("payload".into(), value);
            }
        } else if &text != was {
            body.insert("payload".into(), text.into());
            if content_type.is_empty() && !before.content_type.is_empty() {
                body.insert("content_type".into(), before.content_type.clone().into());
            }
        }
    }
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "nothing changed: edit the payload, the content type or the headers",
        ));
    }
    body.insert(
        "note".into(),
        verdict_runtime::text::one_line(
            if form.note.trim().is_empty() {
                "repaired from the console"
            } else {
                form.note.trim()
            },
            bodies::MAX_NOTE_CHARS,
        )
        .into(),
    );
    Ok(Value::Object(body).to_string().into_bytes())
}

/// The rollback form: one route's topic, or empty for every route.
#[derive(Deserialize)]
pub(super) struct RollbackForm {
    csrf: String,
    #[serde(default)]
    topic: String,
}

impl CarriesCsrf for RollbackForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /policies/rollback`.
pub(super) async fn rollback(
    state: &AdminState,
    headers: &HeaderMap,
    form: Result<Form<RollbackForm>, FormRejection>,
) -> Response {
    let (session, form) = match checked(state, headers, form, Role::Operate) {
        Ok(ok) => ok,
        Err(refusal) => return *refusal,
    };
    let topic = Some(form.topic.trim().to_string()).filter(|t| !t.is_empty());
    let what = topic.clone().unwrap_or_else(|| "every route".into());
    match handlers::roll_back(state, topic).await {
        Ok(generation) => {
            tracing::warn!(
                identity = %session.who,
                route = %verdict_runtime::text::one_line(&what, 128),
                generation,
                "rolled back from the console"
            );
            Redirect::to("/policies").into_response()
        }
        Err(e) => failed(state, headers, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn origin(origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        // The request's `Host` plays no part: under rebinding it is the attacker's too.
        h.insert(header::HOST, HeaderValue::from_static("evil.example:9474"));
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        h
    }

    #[test]
    fn only_the_consoles_own_origin_may_post() {
        let hosts = AllowedHosts::new("127.0.0.1:9474".parse().unwrap(), &[]);
        assert!(same_origin(&hosts, &origin(Some("http://127.0.0.1:9474"))));
        assert!(same_origin(&hosts, &origin(None)));
        assert!(!same_origin(&hosts, &origin(Some("http://evil.example"))));
        assert!(!same_origin(
            &hosts,
            &origin(Some("http://evil.example:9474"))
        ));
        assert!(!same_origin(&hosts, &origin(Some("null"))));
        assert!(!same_origin(&hosts, &origin(Some("http://127.0.0.1:9475"))));
    }

    fn form(payload: Option<&str>, content_type: &str, headers: &str) -> RepairForm {
        RepairForm {
            csrf: String::new(),
            payload: payload.map(str::to_string),
            content_type: content_type.into(),
            headers: headers.into(),
            note: String::new(),
        }
    }

    #[test]
    fn a_repair_sends_only_what_changed() {
        let before = Editable {
            payload: Some("{\n  \"a\": 1\n}".into()),
            content_type: "application/json".into(),
            headers: [("x-a".to_string(), "1".to_string())].into(),
        };
        let unchanged = edited(&before, &form(Some("{\"a\":1}"), "", "x-a: 1"));
        assert!(
            unchanged
                .unwrap_err()
                .message
                .starts_with("nothing changed")
        );
        let body: Value = serde_json::from_slice(
            &edited(
                &before,
                &form(Some("{\r\n\"a\": 2}"), "", "x-a: 1\r\nx-b: two"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(body["payload"], json!({"a": 2}));
        assert_eq!(body["headers"], json!({"x-a": "1", "x-b": "two"}));
        assert!(body.get("content_type").is_none(), "{body}");
        let e = edited(&before, &form(Some("{oops"), "", "x-a: 1")).unwrap_err();
        assert!(e.message.starts_with("payload: not JSON"), "{}", e.message);
        let e = edited(&before, &form(None, "", "no colon here")).unwrap_err();
        assert!(e.message.starts_with("headers:"), "{}", e.message);
    }

    #[test]
    fn notes_say_who_and_stay_bounded() {
        assert_eq!(by("  ", "ada", "replayed"), "replayed (by ada, console)");
        assert_eq!(by("fixed\nit", "ada", ""), "fixed it (by ada, console)");
        let long = by(&"x".repeat(5_000), "ada", "");
        assert!(long.len() <= bodies::MAX_NOTE_CHARS && long.ends_with("(by ada, console)"));
    }
}
