//! Threaded delivery to chat receivers: the first notification of an incident to a
//! Telegram chat, Mattermost or Slack channel is a top-level message whose id (Telegram
//! `message_id`, Mattermost post id, Slack `ts`) becomes the incident's thread there; every
//! later one replies in that thread (Telegram `reply_parameters.message_id`, Mattermost
//! `root_id`, Slack `thread_ts`).
//! Webhook receivers have no threads and go through [`super::deliver_payload`].
//!
//! Same retry policy, error codes and metrics as [`super::deliver`]; errors are codes only.

use std::time::Instant;

use super::chat::{ChatError, MattermostApi, TelegramApi};
use super::deliver::{DeliveryOutcome, Payload, RetryPolicy, Target, deliver_payload, finish};
use super::slack::{MAX_RETRY_AFTER, SlackApi};

/// The outcome of a threaded delivery, and the id of the message it created.
#[derive(Debug, Clone)]
pub struct ThreadedOutcome {
    pub outcome: DeliveryOutcome,
    /// Telegram `message_id` (as text) or Mattermost post id of the message sent.
    pub message_id: Option<String>,
}

/// Whether a failed chat call may be retried: timeouts, unreachable provider, 429 and 5xx.
fn retryable(error: &ChatError) -> bool {
    match error {
        ChatError::Timeout | ChatError::RequestFailed => true,
        ChatError::RateLimited(seconds) => *seconds <= MAX_RETRY_AFTER,
        ChatError::HttpStatus { status, .. } => *status == 429 || *status >= 500,
        _ => false,
    }
}

/// Delivers `payload` to one receiver. For Telegram and Mattermost: as a reply in the
/// thread whose root is `root` (a message/post id), else as a new top-level message whose
/// id is returned. Webhooks ignore `root`.
pub async fn deliver_threaded(
    client: &reqwest::Client,
    receiver: &str,
    target: &Target,
    payload: Payload<'_>,
    root: Option<&str>,
    delivery_id: &str,
    policy: RetryPolicy,
) -> ThreadedOutcome {
    if let Target::Webhook { .. } = target {
        let outcome = deliver_payload(client, receiver, target, payload, delivery_id, policy).await;
        return ThreadedOutcome { outcome, message_id: None };
    }
    deliver_chat(receiver, target, payload, root, delivery_id, policy).await
}

/// [`deliver_threaded`] to a chat receiver (a webhook target is refused: `create_request`).
pub(super) async fn deliver_chat(
    receiver: &str,
    target: &Target,
    payload: Payload<'_>,
    root: Option<&str>,
    delivery_id: &str,
    policy: RetryPolicy,
) -> ThreadedOutcome {
    let started = Instant::now();
    let mut outcome = DeliveryOutcome::pending(receiver, target, delivery_id);
    let sent = match target {
        Target::Webhook { .. } => Err(ChatError::EncodePayload),
        Target::Telegram { base_url, bot_token, chat_id, message_thread_id } => {
            let text = payload.telegram_text();
            // A root that is not a Telegram message id cannot be replied to: send top-level.
            let reply_to = root.and_then(|r| r.parse::<i64>().ok());
            match TelegramApi::new(base_url, bot_token, policy.timeout) {
                Ok(api) => {
                    retry(&mut outcome, policy, || api.send_message(chat_id, &text, *message_thread_id, reply_to))
                        .await
                        .map(|id| id.to_string())
                }
                Err(error) => Err(error),
            }
        }
        Target::Mattermost { base_url, bot_token, channel_id } => {
            let text = payload.mattermost_text();
            match MattermostApi::new(base_url, bot_token, policy.timeout) {
                Ok(api) => retry(&mut outcome, policy, || api.create_post(channel_id, &text, root)).await,
                Err(error) => Err(error),
            }
        }
        Target::Slack { base_url, bot_token, channel_id } => {
            let text = payload.slack_text();
            match SlackApi::new(base_url, bot_token, policy.timeout) {
                Ok(api) => retry(&mut outcome, policy, || api.post_message(channel_id, &text, root)).await,
                Err(error) => Err(error),
            }
        }
    };
    let message_id = match sent {
        Ok(id) => {
            outcome.delivered = true;
            outcome.error = None;
            Some(id)
        }
        Err(error) => {
            match &error {
                ChatError::HttpStatus { status, .. } => outcome.http_status = Some(*status),
                ChatError::RateLimited(_) => outcome.http_status = Some(429),
                _ => {}
            }
            outcome.error = Some(error.code().to_string());
            None
        }
    };
    if outcome.delivered && outcome.http_status.is_none() {
        outcome.http_status = Some(200);
    }
    finish(&mut outcome, started);
    ThreadedOutcome { outcome, message_id }
}

/// Calls `send` up to `policy.attempts` times while it fails with a retryable error,
/// backing off exponentially; counts the attempts on `outcome`.
async fn retry<T, F, Fut>(outcome: &mut DeliveryOutcome, policy: RetryPolicy, mut send: F) -> Result<T, ChatError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ChatError>>,
{
    let max_attempts = policy.attempts.max(1);
    loop {
        outcome.attempts += 1;
        let result = match tokio::time::timeout(policy.timeout, send()).await {
            Ok(result) => result,
            Err(_) => Err(ChatError::Timeout),
        };
        match result {
            Err(error) if retryable(&error) && outcome.attempts < max_attempts => {
                let shift = (outcome.attempts - 1).min(16);
                let backoff = policy.base_delay.saturating_mul(1u32 << shift);
                // A rate limit says how long to wait: at least that.
                let asked = match error {
                    ChatError::RateLimited(seconds) => std::time::Duration::from_secs(seconds),
                    _ => std::time::Duration::ZERO,
                };
                tokio::time::sleep(backoff.max(asked)).await;
            }
            other => return other,
        }
    }
}
