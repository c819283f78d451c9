//! Decoding what Telegram and Mattermost send into one [`Inbound`] message (Slack's in
//! [`super::slack`]), with the secret checked first: a caller without the secret learns
//! nothing about how its body would have been read.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Largest accepted message text.
pub const MAX_TEXT_BYTES: usize = 32 * 1024;
/// Largest accepted id (conversation, user, message, thread, post).
pub const MAX_ID_BYTES: usize = 256;
/// The header Telegram sends with the webhook's secret token.
pub const TELEGRAM_SECRET_HEADER: &str = "X-Telegram-Bot-Api-Secret-Token";

/// The chat service a message came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// Telegram Bot API.
    Telegram,
    /// Mattermost outgoing webhook or slash command.
    Mattermost,
    /// Slack Events API, Socket Mode or slash command.
    Slack,
}

impl Provider {
    /// `telegram`, `mattermost` or `slack`.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Telegram => "telegram",
            Provider::Mattermost => "mattermost",
            Provider::Slack => "slack",
        }
    }
}

/// One message a person sent to a bot, decoded and checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbound {
    /// Where it came from.
    pub provider: Provider,
    /// The receiving NotificationReceiver, `namespace/name`.
    pub receiver: String,
    /// Provider-derived idempotency key (`telegram:<receiver>:<update_id>`, `mattermost:<receiver>:<post_id>`).
    pub event_id: String,
    /// Telegram chat id / Mattermost channel id.
    pub conversation_id: String,
    /// The sender's provider user id.
    pub user_id: String,
    /// The message to reply to (Telegram message_id / Mattermost post_id), when there is one.
    pub message_id: Option<String>,
    /// Telegram topic (message_thread_id) / Mattermost thread root (root_id).
    pub thread_id: Option<String>,
    /// The message this one answers (Telegram `reply_to_message`), when it is a reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Where a Slack slash command's answer goes (its `response_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_url: Option<String>,
    /// What the person wrote (trigger word stripped).
    pub text: String,
}

impl Inbound {
    /// The namespace of the receiver (`namespace/name`).
    pub fn namespace(&self) -> &str {
        self.receiver.split_once('/').map_or(self.receiver.as_str(), |(ns, _)| ns)
    }
}

/// Why a delivery is not accepted as a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The secret is wrong or missing (HTTP 401).
    #[error(
        "the bot secret is missing or wrong; send the configured webhook secret (Telegram: the {TELEGRAM_SECRET_HEADER} header, Mattermost: the token field)"
    )]
    Unauthorized,
    /// Not a message for the bot (HTTP 200 `{"accepted":false}`).
    #[error("ignored: {0}")]
    Ignored(&'static str),
    /// The conversation or user is not on the receiver's allowlist (HTTP 200 `{"accepted":false}`, logged).
    #[error("the conversation or user is not on the receiver's allowlist")]
    Forbidden,
    /// A signed request (Slack) whose timestamp is too far from the host's clock (HTTP 401).
    #[error(
        "the X-Slack-Request-Timestamp is more than 5 minutes from the host's clock; Slack signs each request with the time it sends it, so an old request is refused (check the host's clock if every request is)"
    )]
    Expired,
    /// The body is malformed or over a limit (HTTP 400).
    #[error("invalid bot request: {0}")]
    Invalid(String),
}

/// Who may talk to a receiver; each set is enforced only when non-empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowlists {
    /// Allowed conversation ids (Telegram chat ids, Mattermost channel ids).
    pub conversations: BTreeSet<String>,
    /// Allowed provider user ids.
    pub users: BTreeSet<String>,
}

impl Allowlists {
    /// Conversation first, then user.
    pub fn check(&self, conversation: &str, user: &str) -> Result<(), Refusal> {
        if !self.conversations.is_empty() && !self.conversations.contains(conversation) {
            return Err(Refusal::Forbidden);
        }
        if !self.users.is_empty() && !self.users.contains(user) {
            return Err(Refusal::Forbidden);
        }
        Ok(())
    }
}

/// Constant-time comparison of a presented secret with the configured one; an empty
/// configured secret never matches.
fn secret_matches(secret: &str, presented: Option<&str>) -> bool {
    match presented {
        Some(presented) if !secret.is_empty() => bool::from(secret.as_bytes().ct_eq(presented.as_bytes())),
        _ => false,
    }
}

fn check_id(what: &str, id: &str) -> Result<(), Refusal> {
    if id.len() > MAX_ID_BYTES {
        return Err(Refusal::Invalid(format!("{what} is longer than {MAX_ID_BYTES} bytes")));
    }
    Ok(())
}

fn check_text(text: &str) -> Result<(), Refusal> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(Refusal::Invalid(format!("the message text is longer than {MAX_TEXT_BYTES} bytes")));
    }
    Ok(())
}

/// A Telegram webhook delivery: the secret header is checked (constant time) before the body
/// is looked at, then the update is decoded as [`telegram_update`] does.
pub fn telegram_webhook(
    receiver: &str,
    secret: &str,
    header: Option<&str>,
    body: &[u8],
    allow: &Allowlists,
) -> Result<Inbound, Refusal> {
    if !secret_matches(secret, header) {
        return Err(Refusal::Unauthorized);
    }
    let update: Value =
        serde_json::from_slice(body).map_err(|e| Refusal::Invalid(format!("the Telegram update is not JSON: {e}")))?;
    telegram_update(receiver, &update, allow)
}

/// An integer id that Telegram sends as a number (a string of digits is accepted too).
fn int_field(value: Option<&Value>) -> Option<i64> {
    match value? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A Telegram update (from `getUpdates` or a webhook): only text messages from people count.
pub fn telegram_update(receiver: &str, update: &Value, allow: &Allowlists) -> Result<Inbound, Refusal> {
    if !update.is_object() {
        return Err(Refusal::Invalid("the Telegram update is not a JSON object".into()));
    }
    let update_id = int_field(update.get("update_id"))
        .ok_or_else(|| Refusal::Invalid("the Telegram update has no integer update_id".into()))?;
    if update_id < 0 {
        return Err(Refusal::Invalid("the Telegram update_id is negative".into()));
    }
    let Some(message) = update.get("message").filter(|m| m.is_object()) else {
        return Err(Refusal::Ignored("not a message"));
    };
    let Some(from) = message.get("from").filter(|f| f.is_object()) else {
        return Err(Refusal::Ignored("no sender"));
    };
    if from.get("is_bot").and_then(Value::as_bool) == Some(true) {
        return Err(Refusal::Ignored("sent by a bot"));
    }
    let chat = int_field(message.get("chat").and_then(|c| c.get("id"))).unwrap_or(0);
    if chat == 0 {
        return Err(Refusal::Ignored("no chat"));
    }
    let message_id = int_field(message.get("message_id")).unwrap_or(0);
    if message_id <= 0 {
        return Err(Refusal::Ignored("no message id"));
    }
    let Some(user) = int_field(from.get("id")) else {
        return Err(Refusal::Ignored("no sender id"));
    };
    let text = match message.get("text") {
        Some(Value::String(text)) if !text.trim().is_empty() => text,
        _ => return Err(Refusal::Ignored("not a text message")),
    };
    check_text(text)?;
    let thread_id = int_field(message.get("message_thread_id")).filter(|t| *t > 0).map(|t| t.to_string());
    let inbound = Inbound {
        provider: Provider::Telegram,
        receiver: receiver.to_owned(),
        event_id: format!("telegram:{receiver}:{update_id}"),
        conversation_id: chat.to_string(),
        user_id: user.to_string(),
        message_id: Some(message_id.to_string()),
        thread_id,
        reply_to: int_field(message.get("reply_to_message").and_then(|r| r.get("message_id")))
            .filter(|id| *id > 0)
            .map(|id| id.to_string()),
        response_url: None,
        text: text.clone(),
    };
    allow.check(&inbound.conversation_id, &inbound.user_id)?;
    Ok(inbound)
}

/// The fields of a Mattermost body, whatever its encoding.
fn mattermost_fields(content_type: Option<&str>, body: &[u8]) -> Result<Option<BTreeMap<String, String>>, Refusal> {
    let mime = content_type.map(|c| c.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
    match mime.as_deref() {
        Some("application/json") => {
            let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(body) else {
                return Ok(None);
            };
            let fields = object
                .into_iter()
                .filter_map(|(k, v)| match v {
                    Value::String(s) => Some((k, s)),
                    Value::Number(n) => Some((k, n.to_string())),
                    _ => None,
                })
                .collect();
            Ok(Some(fields))
        }
        None | Some("" | "application/x-www-form-urlencoded") => {
            Ok(Some(url::form_urlencoded::parse(body).into_owned().collect()))
        }
        Some(other) => Err(Refusal::Invalid(format!(
            "unsupported content type {other:?}; Mattermost sends application/json or application/x-www-form-urlencoded"
        ))),
    }
}

/// Removes a leading trigger word (and the space after it); text equal to the trigger becomes empty.
fn strip_trigger<'t>(text: &'t str, trigger: &str) -> &'t str {
    let trimmed = text.trim_start();
    if trigger.is_empty() {
        return trimmed.trim_end();
    }
    match trimmed.strip_prefix(trigger) {
        Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => rest.trim(),
        _ => trimmed.trim_end(),
    }
}

/// A Mattermost outgoing webhook or slash command (JSON or form body). The `token` field is
/// compared (constant time) with `secret` before any other field is used; a body that cannot
/// be read has no token and is refused the same way. Posts by `self_user_id` (the bot's own
/// account) are ignored.
pub fn mattermost(
    receiver: &str,
    secret: &str,
    self_user_id: Option<&str>,
    content_type: Option<&str>,
    body: &[u8],
    allow: &Allowlists,
) -> Result<Inbound, Refusal> {
    let fields = mattermost_fields(content_type, body)?;
    let field = |name: &str| fields.as_ref().and_then(|f| f.get(name)).map(String::as_str);
    if !secret_matches(secret, field("token")) {
        return Err(Refusal::Unauthorized);
    }
    let nonblank = |name: &str| field(name).map(str::trim).filter(|v| !v.is_empty());
    let (Some(channel), Some(user)) = (nonblank("channel_id"), nonblank("user_id")) else {
        return Err(Refusal::Ignored("no channel or user"));
    };
    let slash_command = nonblank("command").is_some();
    let raw_text = field("text").unwrap_or_default();
    if !slash_command && raw_text.trim().is_empty() {
        return Err(Refusal::Ignored("no text"));
    }
    if self_user_id.is_some_and(|own| own == user) {
        return Err(Refusal::Ignored("the bot's own post"));
    }
    let post_id = nonblank("post_id");
    let root_id = nonblank("root_id");
    for (what, id) in
        [("channel_id", Some(channel)), ("user_id", Some(user)), ("post_id", post_id), ("root_id", root_id)]
    {
        if let Some(id) = id {
            check_id(what, id)?;
        }
    }
    check_text(raw_text)?;
    let text = if slash_command {
        slash_text(raw_text.trim())
    } else {
        strip_trigger(raw_text, field("trigger_word").unwrap_or_default().trim()).to_owned()
    };
    let event = match post_id {
        Some(post) => post.to_owned(),
        None => hex::encode(&Sha256::digest(body)[..16]),
    };
    let inbound = Inbound {
        provider: Provider::Mattermost,
        receiver: receiver.to_owned(),
        event_id: format!("mattermost:{receiver}:{event}"),
        conversation_id: channel.to_owned(),
        user_id: user.to_owned(),
        message_id: post_id.map(str::to_owned),
        thread_id: root_id.map(str::to_owned),
        reply_to: None,
        response_url: None,
        text,
    };
    allow.check(&inbound.conversation_id, &inbound.user_id)?;
    Ok(inbound)
}

/// Bot commands a slash command may name alone, without their own slash: `/akritas status`.
const BARE_COMMANDS: &[&str] = &["help", "start", "new", "reset", "status"];
/// Bot commands a slash command may name before their argument: `/akritas incident inc_1`.
const BARE_COMMANDS_WITH_ARGUMENT: &[&str] = &["ask", "incident"];

/// The arguments of a slash command (`/akritas <text>`): a lone word naming a bot command, or
/// `ask`/`incident` followed by more, is that command (`status` → `/status`); anything else
/// (`status of the api?`) is the question.
pub(super) fn slash_text(args: &str) -> String {
    let mut words = args.split_whitespace();
    let first = words.next().unwrap_or_default().to_ascii_lowercase();
    let alone = words.next().is_none();
    let command =
        (alone && BARE_COMMANDS.contains(&first.as_str())) || BARE_COMMANDS_WITH_ARGUMENT.contains(&first.as_str());
    if command { format!("/{args}") } else { args.to_owned() }
}
