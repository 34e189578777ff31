//! `/login` and `/logout`. Logging in proves the operator holds the admin token; the name
//! they give goes into the audit notes of what they do. A wrong token is logged as a
//! warning and answered after a pause, so guessing it through the form is slow and seen.

use std::time::Duration;

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::actions::{CsrfForm, checked, same_origin};
use super::html::{escape, message_page, page};
use crate::admin::session::{self, MAX_NAME_CHARS, Viewer};
use crate::admin::{AdminState, auth};

/// How long a wrong token waits for its answer.
const WRONG_TOKEN_DELAY: Duration = Duration::from_millis(300);

pub(super) fn render(viewer: &Viewer, error: Option<&str>) -> Response {
    let error = error
        .map(|e| format!("<p class=\"bad\">{}</p>", escape(e)))
        .unwrap_or_default();
    let signed_in = viewer
        .session()
        .map(|s| {
            format!(
                "<p class=\"muted\">You are signed in as {}; logging in again starts a new \
                 login.</p>",
                escape(&s.who)
            )
        })
        .unwrap_or_default();
    page(
        "Log in",
        viewer,
        &format!(
            "<h1>Log in</h1>{signed_in}{error}<form method=\"post\" action=\"/login\" \
             class=\"login\"><label>Admin token <input type=\"password\" name=\"token\" \
             autocomplete=\"current-password\" required autofocus></label>\
             <label>Your name, for the audit log <input name=\"name\" maxlength=\"{MAX_NAME_CHARS}\" \
             autocomplete=\"username\" placeholder=\"operator\"></label>\
             <button type=\"submit\">Log in</button></form>\
             <p class=\"muted\">The token is the gateway's admin token (the variable named by \
             <code>admin.token_env</code>, or <code>admin.token_file</code>). It is checked \
             once and never kept in the page or a cookie.</p>"
        ),
    )
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    token: String,
    #[serde(default)]
    name: String,
}

pub(super) async fn login(
    state: &AdminState,
    peer: Option<std::net::SocketAddr>,
    headers: &HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let viewer = state.viewer(headers);
    if !same_origin(state.allowed_hosts(), headers) {
        return message_page(
            StatusCode::FORBIDDEN,
            "Refused",
            &viewer,
            "This form was not sent from the console's own pages.",
        );
    }
    let Ok(Form(form)) = form else {
        let mut r = render(&viewer, Some("Give the admin token."));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return r;
    };
    let Some(token) = &state.token else {
        return message_page(
            StatusCode::UNAUTHORIZED,
            "No admin token",
            &viewer,
            "This gateway has no admin token, so nothing can be changed through it: set the \
             variable named by admin.token_env (VERDICT_ADMIN_TOKEN by default) or \
             admin.token_file, and restart it.",
        );
    };
    if !state.auth_failures.admits() {
        let mut r = render(
            &viewer,
            Some("Too many wrong tokens within a second: try again in a moment."),
        );
        *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        return r;
    }
    if !auth::same(form.token.trim(), token) {
        state.auth_failures.failed(peer, "console login");
        tracing::warn!(
            name = %verdict_runtime::text::one_line(&form.name, MAX_NAME_CHARS),
            "a console login gave a wrong admin token"
        );
        tokio::time::sleep(WRONG_TOKEN_DELAY).await;
        let mut r = render(&viewer, Some("That is not the admin token."));
        *r.status_mut() = StatusCode::UNAUTHORIZED;
        return r;
    }
    state.sessions.end(headers);
    let Some((id, session)) = state.sessions.create(&form.name) else {
        return message_page(
            StatusCode::SERVICE_UNAVAILABLE,
            "No login",
            &viewer,
            "The system's random source could not be read, so no session id could be made.",
        );
    };
    tracing::info!(operator = %session.who, "console login");
    let mut response = Redirect::to("/").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session::set_cookie(&id));
    response
}

pub(super) async fn logout(
    state: &AdminState,
    headers: &HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    if let Err(refusal) = checked(state, headers, form) {
        return *refusal;
    }
    state.sessions.end(headers);
    let mut response = Redirect::to("/").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session::clear_cookie());
    response
}
