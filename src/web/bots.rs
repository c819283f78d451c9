//! Bot webhooks: `POST /api/v1/bots/telegram/{receiver}/webhook`,
//! `POST /api/v1/bots/mattermost/{receiver}/webhook`, and Slack's
//! `POST /api/v1/bots/slack/{receiver}/events` (Events API) and
//! `POST /api/v1/bots/slack/{receiver}/commands` (slash commands). No API key: each
//! receiver's own secret (Telegram's `X-Telegram-Bot-Api-Secret-Token` header, Mattermost's
//! `token`, Slack's signature over the timestamp and body) is checked before the body is
//! decoded. The answer is sent before the model runs.

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
use super::webhook_names::Named;
use crate::bots::host::{MAX_WEBHOOK_BYTES, WebhookError};
use crate::bots::slack::{SIGNATURE_HEADER, TIMESTAMP_HEADER};
use crate::bots::slack_bot::{COMMAND_ACK, EventAnswer};
use crate::bots::{Provider, Refusal};

/// The header Telegram sends the webhook's secret in.
const TELEGRAM_SECRET: &str = "x-telegram-bot-api-secret-token";

/// Path of the bot webhooks.
#[derive(Deserialize, JsonSchema)]
pub struct ReceiverPath {
    /// The name of a NotificationReceiver of the webhook namespace, or `namespace.name`.
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
    webhook(&state, Provider::Telegram, &named(&state, &receiver), &headers, &body.0).await
}

/// `POST /api/v1/bots/mattermost/{receiver}/webhook`.
pub async fn mattermost(
    State(state): State<AppState>,
    Path(ReceiverPath { receiver }): Path<ReceiverPath>,
    headers: HeaderMap,
    body: JsonBytes<Value>,
) -> Response {
    webhook(&state, Provider::Mattermost, &named(&state, &receiver), &headers, &body.0).await
}

/// Answer of a Slack call: the `url_verification` challenge echoed, or, for a slash
/// command, the text Slack shows at once (the answer follows through `response_url`).
#[derive(Serialize, JsonSchema)]
pub struct SlackAnswer {
    /// The challenge of a `url_verification` event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
    /// `ephemeral`: a slash command's immediate answer, seen by its sender only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_type: Option<&'static str>,
    /// A slash command's immediate answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<&'static str>,
    /// Taken for an answer.
    pub accepted: bool,
    /// Slack sent this message before (a retry or a replay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
}

/// `POST /api/v1/bots/slack/{receiver}/events`.
pub async fn slack_events(
    State(state): State<AppState>,
    Path(ReceiverPath { receiver }): Path<ReceiverPath>,
    headers: HeaderMap,
    body: JsonBytes<Value>,
) -> Response {
    let receiver = named(&state, &receiver);
    let (bots, body) = match checked(&state, Provider::Slack, &receiver, &body.0) {
        Ok(found) => found,
        Err(error) => return error.into_response(),
    };
    let (timestamp, signature) = signed(&headers);
    match bots.slack_event(&receiver.key(), timestamp, signature, body).await {
        Ok(EventAnswer::Challenge(challenge)) => Json(SlackAnswer {
            challenge: Some(challenge),
            response_type: None,
            text: None,
            accepted: true,
            duplicate: None,
        })
        .into_response(),
        Ok(EventAnswer::Taken(accepted)) => {
            Json(BotAnswer { accepted: true, duplicate: Some(accepted.duplicate) }).into_response()
        }
        Err(error) => refused(Provider::Slack, &receiver, error),
    }
}

/// `POST /api/v1/bots/slack/{receiver}/commands`.
pub async fn slack_commands(
    State(state): State<AppState>,
    Path(ReceiverPath { receiver }): Path<ReceiverPath>,
    headers: HeaderMap,
    body: JsonBytes<Value>,
) -> Response {
    let receiver = named(&state, &receiver);
    let (bots, body) = match checked(&state, Provider::Slack, &receiver, &body.0) {
        Ok(found) => found,
        Err(error) => return error.into_response(),
    };
    let (timestamp, signature) = signed(&headers);
    match bots.slack_command(&receiver.key(), timestamp, signature, body).await {
        Ok(accepted) => Json(SlackAnswer {
            challenge: None,
            response_type: Some("ephemeral"),
            text: Some(COMMAND_ACK),
            accepted: true,
            duplicate: Some(accepted.duplicate),
        })
        .into_response(),
        Err(error) => refused(Provider::Slack, &receiver, error),
    }
}

/// Slack's timestamp and signature headers.
fn signed(headers: &HeaderMap) -> (Option<&str>, Option<&str>) {
    (header_text(headers, TIMESTAMP_HEADER), header_text(headers, SIGNATURE_HEADER))
}

fn header_text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok())
}

/// The bots and the body, when bots run and the body is within bounds; else the answer.
fn checked<'s, 'b>(
    state: &'s AppState,
    provider: Provider,
    receiver: &Named<'_>,
    body: &'b [u8],
) -> Result<(&'s crate::bots::host::Bots, &'b [u8]), ApiError> {
    let Some(bots) = state.bots.as_deref() else {
        return Err(unknown(provider, receiver));
    };
    if body.len() > MAX_WEBHOOK_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("a bot webhook body is at most {MAX_WEBHOOK_BYTES} bytes"),
        ));
    }
    Ok((bots, body))
}

/// The receiver a webhook path names ([`super::webhook_names`]).
fn named<'a>(state: &'a AppState, segment: &'a str) -> Named<'a> {
    super::webhook_names::resolve(segment, &state.info.webhook_namespace)
}

/// 404: no receiver of this provider takes webhooks there.
fn unknown(provider: Provider, receiver: &Named<'_>) -> ApiError {
    ApiError::not_found(receiver.not_found(&format!("{} webhook receiver", provider.as_str())))
}

async fn webhook(
    state: &AppState,
    provider: Provider,
    receiver: &Named<'_>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let (bots, body) = match checked(state, provider, receiver, body) {
        Ok(found) => found,
        Err(error) => return error.into_response(),
    };
    let secret = header_text(headers, TELEGRAM_SECRET);
    let content_type = header_text(headers, header::CONTENT_TYPE.as_str());
    match bots.webhook(provider, &receiver.key(), secret, content_type, body).await {
        Ok(accepted) => Json(BotAnswer { accepted: true, duplicate: Some(accepted.duplicate) }).into_response(),
        Err(error) => refused(provider, receiver, error),
    }
}

/// The answer to a refused bot call.
fn refused(provider: Provider, receiver: &Named<'_>, error: WebhookError) -> Response {
    match error {
        WebhookError::UnknownReceiver { .. } => unknown(provider, receiver).into_response(),
        WebhookError::Refused(Refusal::Unauthorized) => {
            let message = match provider {
                Provider::Slack => {
                    "the X-Slack-Signature is missing or wrong; Slack signs v0:{timestamp}:{body} with the app's signing secret"
                }
                _ => "the bot webhook secret is missing or wrong",
            };
            ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response()
        }
        WebhookError::Refused(Refusal::Expired) => {
            ApiError::new(StatusCode::UNAUTHORIZED, "request_expired", Refusal::Expired.to_string()).into_response()
        }
        WebhookError::Refused(Refusal::Invalid(message)) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_update", message).into_response()
        }
        WebhookError::Refused(refusal) => {
            if matches!(refusal, Refusal::Forbidden) {
                tracing::info!(provider = provider.as_str(), receiver = %receiver.key(), event = "ingress_forbidden", "bot message from outside the allowlists");
            }
            Json(BotAnswer { accepted: false, duplicate: None }).into_response()
        }
        WebhookError::Busy(error) => {
            crate::slots::count_refusal("bot_queue", "bot queue", "");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "bot_queue_full", error.to_string())
                .retry_after("2")
                .into_response()
        }
        WebhookError::Unavailable(message) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "provider_unavailable", message)
                .retry_after("5")
                .into_response()
        }
    }
}
