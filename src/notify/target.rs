//! The receivers a notification is delivered to, as resolved from NotificationReceivers: their
//! addresses and secrets, and a `Debug` that shows neither a secret nor a URL's path.

use std::fmt;

use super::cause::endpoint;
use crate::resources::notification_receiver::ReceiverType;

/// Default Telegram Bot API base URL.
pub const TELEGRAM_DEFAULT_BASE_URL: &str = "https://api.telegram.org";

/// A configured receiver. `Debug` redacts every secret (tokens, HMAC secret,
/// webhook URL path/query).
#[derive(Clone)]
pub enum Target {
    Webhook {
        url: String,
        bearer_token: Option<String>,
        hmac_secret: Option<String>,
    },
    Telegram {
        base_url: String,
        bot_token: String,
        chat_id: String,
        message_thread_id: Option<i64>,
    },
    Mattermost {
        base_url: String,
        bot_token: String,
        channel_id: String,
    },
    /// `chat.postMessage` with a bot token (`xoxb-…`); delivered through [`super::deliver_threaded`].
    Slack {
        base_url: String,
        bot_token: String,
        channel_id: String,
    },
}

const REDACTED: &str = "<redacted>";

fn redacted_opt(v: &Option<String>) -> Option<&'static str> {
    v.as_ref().map(|_| REDACTED)
}

/// `scheme://host[:port]` only; the path and query of a webhook URL may be secret.
fn origin_only(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => u.origin().ascii_serialization(),
        Err(_) => REDACTED.to_string(),
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Webhook { url, bearer_token, hmac_secret } => f
                .debug_struct("Webhook")
                .field("url", &origin_only(url))
                .field("bearer_token", &redacted_opt(bearer_token))
                .field("hmac_secret", &redacted_opt(hmac_secret))
                .finish(),
            Target::Telegram { base_url, chat_id, message_thread_id, .. } => f
                .debug_struct("Telegram")
                .field("base_url", base_url)
                .field("bot_token", &REDACTED)
                .field("chat_id", chat_id)
                .field("message_thread_id", message_thread_id)
                .finish(),
            Target::Mattermost { base_url, channel_id, .. } => f
                .debug_struct("Mattermost")
                .field("base_url", base_url)
                .field("bot_token", &REDACTED)
                .field("channel_id", channel_id)
                .finish(),
            Target::Slack { base_url, channel_id, .. } => f
                .debug_struct("Slack")
                .field("base_url", base_url)
                .field("bot_token", &REDACTED)
                .field("channel_id", channel_id)
                .finish(),
        }
    }
}

impl Target {
    /// The receiver type this target delivers to.
    pub fn kind(&self) -> ReceiverType {
        match self {
            Target::Webhook { .. } => ReceiverType::Webhook,
            Target::Telegram { .. } => ReceiverType::Telegram,
            Target::Mattermost { .. } => ReceiverType::Mattermost,
            Target::Slack { .. } => ReceiverType::Slack,
        }
    }

    /// `host:port` of the receiver (its URL's path and query may hold a secret).
    pub fn endpoint(&self) -> String {
        match self {
            Target::Webhook { url, .. } => endpoint(url),
            Target::Telegram { base_url, .. }
            | Target::Mattermost { base_url, .. }
            | Target::Slack { base_url, .. } => endpoint(base_url),
        }
    }

    /// Telegram target with the default `https://api.telegram.org` base URL.
    pub fn telegram(bot_token: impl Into<String>, chat_id: impl Into<String>, message_thread_id: Option<i64>) -> Self {
        Target::Telegram {
            base_url: TELEGRAM_DEFAULT_BASE_URL.to_string(),
            bot_token: bot_token.into(),
            chat_id: chat_id.into(),
            message_thread_id,
        }
    }
}
