//! The JSON error envelope every route uses:
//! `{"error": {"message": "...", "type": "...", "code": "..."}}` (OpenAI-compatible).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to an HTTP client. The message says what to fix and never
/// contains a secret.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Extra fields merged into the error object (for example `run_id`).
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), details: serde_json::Map::new() }
    }

    /// Adds a field to the error object.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// 404 for an unknown route or object.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 401 for a missing or wrong API key.
    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "invalid_api_key", "invalid API key: send `Authorization: Bearer <key>`")
    }
}

fn error_type(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::FORBIDDEN => "permission_error",
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        StatusCode::SERVICE_UNAVAILABLE => "service_unavailable_error",
        s if s.is_server_error() => "server_error",
        _ => "invalid_request_error",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = self.details;
        error.insert("message".into(), json!(self.message));
        error.insert("type".into(), json!(error_type(self.status)));
        error.insert("code".into(), json!(self.code));
        let body = json!({ "error": error });
        (self.status, Json(body)).into_response()
    }
}
