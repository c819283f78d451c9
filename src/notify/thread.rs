//! Threaded delivery to chat receivers: the first notification of an incident to a
//! Telegram chat, Mattermost or Slack channel is a top-level message whose id (Telegram
//! `message_id`, Mattermost post id, Slack `ts`) becomes the incident's thread there; every
//! later one replies in that thread (Telegram `reply_parameters.message_id`, Mattermost
//! `root_id`, Slack `thread_ts`).
//! Webhook receivers have no threads and go through [`super::deliver_payload`].
//!
//! Same retry policy, error codes and metrics as [`super::deliver`]; errors are codes only.

use std::time::Instant;

use super::chat::{MattermostApi, TelegramApi};
use super::deliver::{DeliveryOutcome, RetryPolicy, Target, deliver_payload, deliver_slack, retry, settle};
use super::message::Payload;

/// The outcome of a threaded delivery, and the id of the message it created.
#[derive(Debug, Clone)]
pub struct ThreadedOutcome {
    pub outcome: DeliveryOutcome,
    /// Telegram `message_id` (as text) or Mattermost post id of the message sent.
    pub message_id: Option<String>,
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
    let started = Instant::now();
    let mut outcome = DeliveryOutcome::pending(receiver, target, delivery_id);
    let sent = match target {
        Target::Webhook { .. } => {
            let outcome = deliver_payload(client, receiver, target, payload, delivery_id, policy).await;
            return ThreadedOutcome { outcome, message_id: None };
        }
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
        Target::Slack { .. } => {
            let (outcome, message_id) = deliver_slack(receiver, target, payload, root, delivery_id, policy).await;
            return ThreadedOutcome { outcome, message_id };
        }
    };
    let message_id = settle(&mut outcome, sent, started);
    ThreadedOutcome { outcome, message_id }
}
