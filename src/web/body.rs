//! Request bodies: the strict JSON decoder every route uses and the extractor that
//! hands a handler the raw bytes while the OpenAPI document names their type.

use std::marker::PhantomData;

use aide::OperationInput;
use aide::generate::GenContext;
use aide::openapi::Operation;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The raw bytes of a JSON request body, documented as `T`. The handler decodes
/// them itself (after the checks that must come first, such as whether the Run
/// exists), with [`JsonBytes::decode`] or its own provider decoder.
pub struct JsonBytes<T>(pub Bytes, PhantomData<T>);

impl<T: DeserializeOwned> JsonBytes<T> {
    /// Refuses a body labelled as anything but JSON, then decodes it strictly.
    pub fn decode(&self, headers: &HeaderMap) -> Result<T, ApiError> {
        require_json(headers)?;
        decode(&self.0)
    }
}

impl<S: Send + Sync, T> FromRequest<S> for JsonBytes<T> {
    type Rejection = <Bytes as FromRequest<S>>::Rejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(request, state).await.map(|bytes| JsonBytes(bytes, PhantomData))
    }
}

impl<T: JsonSchema> OperationInput for JsonBytes<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        axum::Json::<T>::operation_input(ctx, operation);
    }
}

/// Decodes a strict JSON body with a message naming the offending field.
pub fn decode<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let message = if path == "." || path.is_empty() { inner.to_string() } else { format!("{path}: {inner}") };
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", format!("invalid request body: {message}"))
    })?;
    deserializer.end().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "invalid request body: trailing data after the JSON value",
        )
    })?;
    Ok(value)
}

/// Refuses a body not labelled as JSON (`application/json` or `application/*+json`):
/// an unlabelled body too, as a browser's cross-site form or `fetch` sends one.
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let essence = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    match essence.as_deref() {
        Some(m) if m == "application/json" || (m.starts_with("application/") && m.ends_with("+json")) => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the request body must be JSON: send it with `Content-Type: application/json`",
        )),
    }
}
