//! Every admin API error is JSON: `{"error": {"code": "...", "message": "..."}}`, with a
//! status a client can act on.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use verdict_registry::RegistryError;

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code (`unauthorized`, `admission_refused`, ...).
    pub code: &'static str,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        // Every answer's message passes the one redactor: an error from a driver or a
        // client may quote a URL or a password.
        ApiError {
            status,
            code,
            message: verdict_runtime::redact::redact(&message.into()),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        use RegistryError as E;
        let (status, code) = match &e {
            E::NoSuchPolicy { .. } => (StatusCode::NOT_FOUND, "no_such_policy"),
            E::NotUploaded { .. } => (StatusCode::NOT_FOUND, "not_uploaded"),
            E::NoSuchRoute { .. } => (StatusCode::NOT_FOUND, "no_such_route"),
            E::NoHistory => (StatusCode::CONFLICT, "no_history"),
            E::Admission { .. } | E::Vectors { .. } => {
                (StatusCode::UNPROCESSABLE_ENTITY, "admission_refused")
            }
            E::Pin { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "pin_mismatch"),
            E::Load { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "load_failed"),
            E::Route { .. } | E::Routing(_) | E::UnknownPolicy { .. } | E::Config(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "config_refused")
            }
            E::Sandbox(_) | E::Storage { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        ApiError::new(status, code, e.to_string())
    }
}
