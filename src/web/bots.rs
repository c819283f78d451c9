//! Bot webhooks: `POST /api/v1/bots/telegram/{receiver}/webhook` and
//! `POST /api/v1/bots/mattermost/{receiver}/webhook`. No API key: each receiver's own
//! secret (Telegram's `X-Telegram-Bot-Api-Secret-Token` header, Mattermost's `token`)
//! is checked before the body is decoded. The answer is sent before the model runs.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::body::JsonBytes;
use super::error::ApiError;
use crate::bots::host::{MAX_WEBHOOK_BYTES, WebhookError};
use crate::bots::{Provider, Refusal};

/// The header Telegram sends the webhook's secret in.
const TELEGRAM_SECRET: &str = "x-telegram-bot-api-secret-token";

/// Path of the bot webhooks.
#[derive(Deserialize, JsonSchema)]
pub struct ReceiverPath {
    /// Name of the NotificationReceiver.
    pub receiver: String,
}

/// Answer of a bot webhook: whether the message was taken (an update from outside
/// the allowlists, or one that is not a message, is answered `accepted: false`).
#[derive(Serialize, JsonSchema)]
pub struct BotAnswer {
    /// Taken for an answer.
    pub accepted: bool,
    /// The provider sent this update before (only when accepted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
}

/// `POST /api/v1/bots/telegram/{receiver}/webhook`.
pub async fn telegram(
    State(state): State<AppState>,
    Path(ReceiverPath { receiver }): Path<ReceiverPath>,
    headers: HeaderMap,
    body: JsonBytes<Value>,
) -> Response {
    webhook(&state, Provider::Telegram, &receiver, &headers, &body.0).await
}

/// `POST /api/v1/bots/mattermost/{receiver}/webhook`.
pub async fn mattermost(
    State(state): State<AppState>,
    Path(ReceiverPath { receiver }): Path<ReceiverPath>,
    headers: HeaderMap,
    body: JsonBytes<Value>,
) -> Response {
    webhook(&state, Provider::Mattermost, &receiver, &headers, &body.0).await
}

async fn webhook(state: &AppState, provider: Provider, receiver: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    let Some(bots) = state.bots.as_ref() else {
        return ApiError::not_found(format!("no {} bot receiver {receiver:?} takes webhooks", provider.as_str()))
            .into_response();
    };
    if body.len() > MAX_WEBHOOK_BYTES {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("a bot webhook body is at most {MAX_WEBHOOK_BYTES} bytes"),
        )
        .into_response();
    }
    let text = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    let secret = text(TELEGRAM_SECRET);
    let content_type = text(header::CONTENT_TYPE.as_str());
    match bots.webhook(provider, receiver, secret, content_type, body).await {
        Ok(accepted) => Json(BotAnswer { accepted: true, duplicate: Some(accepted.duplicate) }).into_response(),
        Err(WebhookError::UnknownReceiver { .. }) => {
            ApiError::not_found(format!("no {} bot receiver {receiver:?} takes webhooks", provider.as_str()))
                .into_response()
        }
        Err(WebhookError::Refused(Refusal::Unauthorized)) => {
            ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "the bot webhook secret is missing or wrong")
                .into_response()
        }
        Err(WebhookError::Refused(Refusal::Invalid(message))) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_update", message).into_response()
        }
        Err(WebhookError::Refused(refusal)) => {
            if matches!(refusal, Refusal::Forbidden) {
                tracing::info!(provider = provider.as_str(), %receiver, event = "ingress_forbidden", "bot message from outside the allowlists");
            }
            Json(BotAnswer { accepted: false, duplicate: None }).into_response()
        }
        Err(WebhookError::Busy(error)) => {
            crate::slots::count_refusal("bot_queue", "bot queue", "");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "bot_queue_full", error.to_string())
                .retry_after("2")
                .into_response()
        }
    }
}
