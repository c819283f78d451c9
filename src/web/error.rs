//! The JSON error envelope every route uses:
//! `{"error": {"message": "...", "type": "...", "code": "..."}}` (OpenAI-compatible).

use aide::openapi::{Operation, Response as OpenApiResponse};
use axum::Json;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;

/// Longest rejection text carried into an envelope.
const MAX_REJECTION_BYTES: usize = 1024;

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
    /// Extra fields merged into the error object (for example `run_id`); boxed, so that a
    /// `Result` carrying the error stays small.
    pub details: Box<serde_json::Map<String, serde_json::Value>>,
    /// The object's `type` when it is not the status's usual one.
    pub kind: Option<&'static str>,
    /// Seconds the client should wait before retrying, sent as `Retry-After`.
    pub retry_after: Option<&'static str>,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), details: Box::default(), kind: None, retry_after: None }
    }

    /// Asks the client to wait `seconds` before retrying (`Retry-After`).
    pub fn retry_after(mut self, seconds: &'static str) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Sets the object's `type` (OpenAI types an unknown model, a 404, `invalid_request_error`).
    pub fn of_type(mut self, kind: &'static str) -> Self {
        self.kind = Some(kind);
        self
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

    /// 401 for a wrong API key.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "invalid API key: the key sent in `Authorization: Bearer <key>` is none of this host's keys",
        )
        .with("param", serde_json::Value::Null)
    }

    /// 401 for a request that sent no API key (the same code as a wrong one, as OpenAI clients
    /// expect; the message tells them apart).
    pub fn missing_key() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "missing API key: this host requires one; send `Authorization: Bearer <key>`",
        )
        .with("param", serde_json::Value::Null)
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

/// The body of every error answer.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorObject,
}

/// What went wrong, OpenAI-compatible.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorObject {
    /// What was wrong and what to do.
    pub message: String,
    /// Class of the error (`invalid_request_error`, `authentication_error`, `not_found_error`, ...).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Facts some errors add (`run_id`, `dimension`, `usage`, `details`).
    #[serde(flatten)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl ApiError {
    /// The error object of the envelope (what an error event of a stream carries too).
    pub fn object(&self) -> ErrorObject {
        let mut details = (*self.details).clone();
        for reserved in ["message", "type", "code"] {
            details.remove(reserved);
        }
        let kind = self.kind.unwrap_or_else(|| error_type(self.status));
        ErrorObject { message: self.message.clone(), kind, code: self.code, details }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let error = self.object();
        let mut response = (self.status, Json(ErrorEnvelope { error })).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static(seconds));
        }
        response
    }
}

/// Documents an error as the envelope; as a handler's error type it is the
/// operation's `default` answer (every status not listed).
impl aide::OperationOutput for ApiError {
    type Inner = ErrorEnvelope;

    fn operation_response(ctx: &mut aide::generate::GenContext, operation: &mut Operation) -> Option<OpenApiResponse> {
        let mut response = Json::<ErrorEnvelope>::operation_response(ctx, operation)?;
        response.description = "Error envelope: the message says what to fix".into();
        Some(response)
    }

    fn inferred_responses(
        ctx: &mut aide::generate::GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<aide::openapi::StatusCode>, OpenApiResponse)> {
        Self::operation_response(ctx, operation).map(|r| (None, r)).into_iter().collect()
    }
}

/// Turns the plain-text answers of axum's extractors (a bad query string, a body
/// that passes the limit while streaming, a wrong content type) into the JSON
/// envelope every other error uses, keeping their status and text.
pub async fn envelope_rejections(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, MAX_REJECTION_BYTES * 4).await {
        Ok(bytes) => crate::text::one_line(&String::from_utf8_lossy(&bytes)),
        Err(_) => String::new(),
    };
    let text = crate::text::truncate_bytes(&text, MAX_REJECTION_BYTES, crate::text::ELLIPSIS);
    let message =
        if text.is_empty() { status.canonical_reason().unwrap_or("request failed").to_string() } else { text };
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        s if s.is_server_error() => "internal_error",
        _ => "invalid_request",
    };
    let mut enveloped = ApiError::new(status, code, message).into_response();
    for (name, value) in
        parts.headers.iter().filter(|(name, _)| *name != header::CONTENT_TYPE && *name != header::CONTENT_LENGTH)
    {
        enveloped.headers_mut().insert(name.clone(), value.clone());
    }
    enveloped
}
