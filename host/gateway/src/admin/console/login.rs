//! `/login` and `/logout`. Logging in proves the operator holds the token of an identity;
//! its name goes into the audit notes of what they do, its role bounds what they may. A
//! wrong token is counted, logged as a warning and answered after a pause, so guessing one
//! through the form is slow and seen.

use std::time::Duration;

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::actions::{CsrfForm, checked, same_origin};
use super::html::{message_page, page};
use crate::admin::AdminState;
use crate::admin::identity::Role;
use crate::admin::session::{self, Viewer};

/// How long a wrong token waits for its answer.
const WRONG_TOKEN_DELAY: Duration = Duration::from_millis(300);

pub(super) fn render(viewer: &Viewer, error: Option<&str>) -> Response {
    let body = html! {
        h1 { "Log in" }
        @if let Some(s) = viewer.session() {
            p.muted {
                "You are signed in as " (s.who) " (role " (s.role) "); logging in again \
                 starts a new login."
            }
        }
        @if let Some(e) = error {
            p.bad { (e) }
        }
        form method="post" action="/login" class="login" {
            label {
                "Token "
                input type="password" name="token" autocomplete="current-password" required
                    autofocus;
            }
            button type="submit" { "Log in" }
        }
        p.muted {
            "Your token names you in the audit log and decides what you may do: "
            code { "read" } " shows dead letters, " code { "operate" } " replays and \
             discards them, " code { "edit" } " repairs them, " code { "admin" } " does \
             everything. Tokens come from " code { "verdict admin token new" } " (listed in "
            code { "admin.tokens_file" } "), or it is the gateway's admin token. It is \
             checked once and never kept in the page or a cookie."
        }
    };
    page("Log in", viewer, body)
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    token: String,
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
        let mut r = render(&viewer, Some("Give your token."));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return r;
    };
    let identities = state.credentials.current();
    if identities.is_empty() {
        return message_page(
            StatusCode::UNAUTHORIZED,
            "No identities",
            &viewer,
            "This gateway knows no identity, so no one can log in: set the variable named by \
             admin.token_env (VERDICT_ADMIN_TOKEN by default) or admin.token_file for the \
             admin token, or list identities in admin.tokens_file (verdict admin token new).",
        );
    }
    if !state.auth_failures.admits() {
        let mut r = render(
            &viewer,
            Some("Too many wrong tokens within a second: try again in a moment."),
        );
        *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        return r;
    }
    let Some(identity) = identities.find(&form.token) else {
        state.auth_failures.failed(peer, "console login");
        tracing::warn!("a console login gave a token that is no identity's");
        tokio::time::sleep(WRONG_TOKEN_DELAY).await;
        let mut r = render(&viewer, Some("That token belongs to no identity."));
        *r.status_mut() = StatusCode::UNAUTHORIZED;
        return r;
    };
    state.sessions.end(headers);
    let Some((id, session)) = state.sessions.create(identity) else {
        return message_page(
            StatusCode::SERVICE_UNAVAILABLE,
            "No login",
            &viewer,
            "The system's random source could not be read, so no session id could be made.",
        );
    };
    tracing::info!(identity = %session.who, role = %session.role, "console login");
    let mut response = Redirect::to("/").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session::set_cookie(&id, state.tls));
    response
}

pub(super) async fn logout(
    state: &AdminState,
    headers: &HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    if let Err(refusal) = checked(state, headers, form, Role::Read) {
        return *refusal;
    }
    state.sessions.end(headers);
    let mut response = Redirect::to("/").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session::clear_cookie());
    response
}
