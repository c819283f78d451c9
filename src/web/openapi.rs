//! The OpenAPI document of the native API. It is generated from the handlers'
//! types (aide over schemars) by the same router that serves them, so a route
//! cannot be served without being described; `GET /api/v1/openapi.json` and
//! `akritas openapi` answer it.

use std::sync::Arc;

use aide::openapi::{OpenApi, SecurityScheme, Tag};
use aide::transform::{TransformOpenApi, TransformOperation};
use axum::Json;
use axum::extract::Extension;
use serde_json::Value;

use super::error::ApiError;

/// Name of the API-key security scheme.
pub const API_KEY_SCHEME: &str = "apiKey";

/// The tags operations are grouped by: (name, what it holds).
const TAGS: &[(&str, &str)] = &[
    ("status", "Health, the loaded resources, this document"),
    ("runs", "Chat, follow-ups, Runs and the tools a Run may call"),
    ("alerts", "Alert ingestion (authenticated by each AlertSource), incidents, events and jobs"),
    ("change", "Workspaces and file changes that only a human applies"),
    ("bots", "Telegram and Mattermost webhooks (authenticated by each receiver's secret)"),
];

/// Title, version, tags, the API-key scheme and the error envelope as every operation's default answer.
pub fn describe(api: TransformOpenApi<'_>) -> TransformOpenApi<'_> {
    let api = api
        .title("Akritas native API")
        .version(env!("CARGO_PKG_VERSION"))
        .description(
            "The native HTTP API of Akritas. Every error answer is the envelope \
             `{\"error\": {\"message\", \"type\", \"code\"}}`; the message says what to fix.",
        )
        .security_scheme(
            API_KEY_SCHEME,
            SecurityScheme::Http {
                scheme: "bearer".into(),
                bearer_format: Some("API key".into()),
                description: Some(
                    "An API key from the service configuration: `Authorization: Bearer <key>`. \
                     Not needed when the host runs without keys."
                        .into(),
                ),
                extensions: Default::default(),
            },
        );
    // Every route answers errors (bad input, a missing object, a full disk) in the envelope.
    let api = api.default_response::<ApiError>();
    TAGS.iter().fold(api, |api, (name, description)| {
        api.tag(Tag { name: (*name).into(), description: Some((*description).into()), ..Default::default() })
    })
}

/// An operation behind an API key: the scheme and its 401 answer.
pub fn keyed<'a>(op: TransformOperation<'a>) -> TransformOperation<'a> {
    op.security_requirement(API_KEY_SCHEME)
        .response_with::<401, ApiError, _>(|r| r.description("Missing or wrong API key"))
        .response_with::<403, ApiError, _>(|r| {
            r.description("The key lacks the scope this route needs (`read`, `chat`, or `admin` to apply)")
        })
}

/// An operation whose caller authenticates with the credentials of the object it
/// posts to (an AlertSource or a bot receiver), not with an API key.
pub fn own_credentials<'a>(op: TransformOperation<'a>) -> TransformOperation<'a> {
    op.response_with::<401, ApiError, _>(|r| r.description("Missing or wrong credentials of the source or receiver"))
        .response_with::<404, ApiError, _>(|r| r.description("No such source or receiver"))
}

/// The generated document, rendered once.
#[derive(Clone)]
pub struct Document(Arc<Value>);

impl Document {
    /// Renders `api`.
    pub fn new(api: &OpenApi) -> Self {
        Self(Arc::new(serde_json::to_value(api).unwrap_or(Value::Null)))
    }
}

/// `GET /api/v1/openapi.json`: no API key, the contract holds no secrets.
pub async fn openapi_json(Extension(document): Extension<Document>) -> Json<Value> {
    Json(document.0.as_ref().clone())
}
