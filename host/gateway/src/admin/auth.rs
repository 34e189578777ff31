//! Bearer-token authorisation of changes. Reads stay open on the (loopback) listen address;
//! every change needs the token, and with no token configured changes are refused outright.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};

use super::{AdminState, ApiError};

/// Let the request through only with `Authorization: Bearer <token>`.
pub(crate) async fn require_token(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    authorized(&state, request.headers(), "this changes the gateway")?;
    Ok(next.run(request).await)
}

/// Whether `headers` carry the admin token; the error says what needs it (`what`).
pub(crate) fn authorized(
    state: &AdminState,
    headers: &axum::http::HeaderMap,
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
    match presented {
        Some(p) if same(p.trim(), token) => Ok(()),
        Some(_) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the bearer token is not the admin token",
        )),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("{what}: send `Authorization: Bearer <admin token>`"),
        )),
    }
}

/// Compare digests, so the time taken does not reveal how much of the token matched.
pub(crate) fn same(presented: &str, token: &str) -> bool {
    let (a, b) = (Sha256::digest(presented), Sha256::digest(token));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}
