//! Bearer-token authorisation of changes. Reads stay open on the (loopback) listen address;
//! every change needs the token, and with no token configured changes are refused outright.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use std::net::SocketAddr;

use sha2::{Digest, Sha256};

use super::{AdminState, ApiError};

/// Let the request through only with `Authorization: Bearer <token>`.
pub(crate) async fn require_token(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let peer = peer_of(request.extensions());
    authorized(&state, request.headers(), peer, "this changes the gateway")?;
    Ok(next.run(request).await)
}

/// Who sent a request, when the listener recorded it.
pub(crate) fn peer_of(extensions: &axum::http::Extensions) -> Option<SocketAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

/// Whether `headers` carry the admin token; the error says what needs it (`what`). A wrong
/// token counts against the limiter on wrong credentials (see [`super::auth_limit`]), and
/// past its limit no token is checked: 429.
pub(crate) fn authorized(
    state: &AdminState,
    headers: &axum::http::HeaderMap,
    peer: Option<SocketAddr>,
    what: &str,
) -> Result<(), ApiError> {
    let Some(token) = &state.token else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!(
                "{what}, and no admin token is configured (set the variable named by \
                 admin.token_env, VERDICT_ADMIN_TOKEN by default, or admin.token_file)"
            ),
        ));
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.is_some() && !state.auth_failures.admits() {
        return Err(too_many_failures());
    }
    match presented {
        Some(p) if same(p.trim(), token) => Ok(()),
        Some(_) => {
            state.auth_failures.failed(peer, "bearer token");
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the bearer token is not the admin token",
            ))
        }
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("{what}: send `Authorization: Bearer <admin token>`"),
        )),
    }
}

/// The answer to a credential presented past the limiter's limit.
pub(crate) fn too_many_failures() -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_failures",
        format!(
            "more than {} wrong credentials within a second: try again in a second",
            super::auth_limit::MAX_FAILURES_PER_SECOND
        ),
    )
}

/// Compare digests, so the time taken does not reveal how much of the token matched.
pub(crate) fn same(presented: &str, token: &str) -> bool {
    let (a, b) = (Sha256::digest(presented), Sha256::digest(token));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}
