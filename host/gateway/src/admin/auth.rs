//! Who may do what: every request past the `Host` check is sorted by what it reads or
//! changes, and the ones that need a credential get it checked here.
//!
//! | what | needs |
//! |---|---|
//! | `/healthz`, `/readyz`, `/metrics` | nothing |
//! | summaries without message content (status, routes, policies, generations, shadow reports, DLQ depths, decide) | nothing with `[admin] open_reads = "summary"` (the default); `read` with `"none"` |
//! | message content: dead letters, their groups, jobs | `read` |
//! | replay, discard, jobs, rollback, shadow, publish | `operate` |
//! | repair | `edit` |
//! | upload, activate, reload | `admin` |
//!
//! A credential is `Authorization: Bearer <token>` naming an identity of
//! [`super::identity`]; the identity rides on the request (an [`Identity`] extension) so
//! handlers can name it in audit notes.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use std::net::SocketAddr;

use sha2::{Digest, Sha256};
use verdict_registry::OpenReads;

use super::identity::{Identity, Role};
use super::{AdminState, ApiError};

/// Summaries: open unless `[admin] open_reads = "none"`.
pub(crate) async fn require_summary(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if state.open_reads() == OpenReads::Summary {
        return Ok(next.run(request).await);
    }
    require(&state, Role::Read, request, next).await
}

/// What needs a role: the role rides in the middleware's state beside the admin state.
pub(crate) async fn require_role(
    State((state, needed)): State<(AdminState, Role)>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(&state, needed, request, next).await
}

async fn require(
    state: &AdminState,
    needed: Role,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let peer = peer_of(request.extensions());
    let identity = authorized(state, request.headers(), peer, needed)?;
    if needed >= Role::Operate {
        // Changes are rare and each one is the operator's to answer for: one line each,
        // naming who (notes of DLQ actions name them in the audit log too).
        tracing::info!(
            identity = %identity.name,
            method = %request.method(),
            path = %verdict_runtime::text::one_line(request.uri().path(), 200),
            "admin change"
        );
    }
    request.extensions_mut().insert(identity);
    Ok(next.run(request).await)
}

/// Who sent a request, when the listener recorded it.
pub(crate) fn peer_of(extensions: &axum::http::Extensions) -> Option<SocketAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<super::Peer>>()
        .map(|c| c.0.0)
}

/// The identity whose bearer token `headers` carry, if it has `needed` (or a stronger
/// role): 401 without a token or with an unknown one, 403 naming the role needed. A wrong
/// token counts against the limiter on wrong credentials (see [`super::auth_limit`]), and
/// past its limit no token is checked: 429.
pub(crate) fn authorized(
    state: &AdminState,
    headers: &axum::http::HeaderMap,
    peer: Option<SocketAddr>,
    needed: Role,
) -> Result<Identity, ApiError> {
    let identities = state.credentials.current();
    if identities.is_empty() {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!(
                "this needs the role `{needed}`, and the gateway knows no identity: set the \
                 variable named by admin.token_env (VERDICT_ADMIN_TOKEN by default) or \
                 admin.token_file for the admin token, or list identities in \
                 admin.tokens_file (`verdict admin token new`)"
            ),
        ));
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(presented) = presented else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("this needs the role `{needed}`: send `Authorization: Bearer <token>`"),
        ));
    };
    if !state.auth_failures.admits() {
        return Err(too_many_failures());
    }
    let Some(identity) = identities.find(presented) else {
        state.auth_failures.failed(peer, "bearer token");
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the bearer token is no identity's token",
        ));
    };
    if !identity.may(needed) {
        return Err(forbidden(identity, needed));
    }
    Ok(identity.clone())
}

/// The answer to `identity` asking for what needs `needed`.
pub(crate) fn forbidden(identity: &Identity, needed: Role) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "this needs the role `{needed}` (or a stronger one); `{}` has `{}`",
            identity.name, identity.role
        ),
    )
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

/// Compare digests, so the time taken does not reveal how much of a secret matched.
pub(crate) fn same(presented: &str, secret: &str) -> bool {
    let (a, b) = (Sha256::digest(presented), Sha256::digest(secret));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}
