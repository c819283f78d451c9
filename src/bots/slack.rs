//! Decoding what Slack sends a bot into one [`Inbound`] message: Events API callbacks
//! (over HTTP or a Socket Mode envelope) and `/akritas` slash commands; and a receiver's
//! Web API clients ([`SlackBot`]), which reply.
//!
//! Over HTTP the request is checked first ([`verify`]): the `X-Slack-Signature` v0 HMAC over
//! `v0:{timestamp}:{body}` in constant time, and a `X-Slack-Request-Timestamp` at most five
//! minutes from the host's clock, so a signed request replayed later is refused, and one
//! replayed within the window is a duplicate: a message's event id is its channel and `ts`,
//! which Slack's retries, a replay, and the `app_mention` and `message` events of one
//! message all share.
//!
//! Answered: `app_mention`s, direct messages (`message` with `channel_type: im`), and
//! replies in a thread the bot knows (an incident's notification thread or a conversation
//! it answered). Ignored: messages with a `subtype` or a `bot_id` (other bots, edits, joins),
//! the bot's own messages (its user id from `auth.test`), and channel messages that do not
//! mention it.

use std::collections::BTreeMap;
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::ingress::{Allowlists, Inbound, MAX_ID_BYTES, MAX_TEXT_BYTES, Provider, Refusal, slash_text};
use crate::notify::chat::ChatError;
use crate::notify::slack::{BotIdentity, SlackApi};

/// The header Slack signs requests in.
pub const SIGNATURE_HEADER: &str = "x-slack-signature";
/// The header with the time Slack signed the request at (Unix seconds).
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
/// How far a request's timestamp may be from the host's clock, in seconds.
pub const WINDOW_SECONDS: i64 = 300;
/// Longest `url_verification` challenge answered.
const MAX_CHALLENGE_BYTES: usize = 256;

/// Checks a Slack request before its body is read: the timestamp within
/// [`WINDOW_SECONDS`] of `now`, then the v0 signature (constant time).
pub fn verify(
    signing_secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), Refusal> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(Refusal::Unauthorized);
    };
    let Ok(at) = timestamp.trim().parse::<i64>() else {
        return Err(Refusal::Unauthorized);
    };
    if (now - at).abs() > WINDOW_SECONDS {
        return Err(Refusal::Expired);
    }
    let Some(expected) = signature.trim().strip_prefix("v0=").and_then(|hex_mac| hex::decode(hex_mac).ok()) else {
        return Err(Refusal::Unauthorized);
    };
    if signing_secret.is_empty() {
        return Err(Refusal::Unauthorized);
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(signing_secret.as_bytes()).map_err(|_| Refusal::Unauthorized)?;
    mac.update(b"v0:");
    mac.update(timestamp.trim().as_bytes());
    mac.update(b":");
    mac.update(body);
    mac.verify_slice(&expected).map_err(|_| Refusal::Unauthorized)
}

/// What an Events API body holds.
#[derive(Debug, PartialEq, Eq)]
pub enum SlackEvent {
    /// `url_verification`: answer with this challenge.
    Challenge(String),
    /// A message for the bot.
    Message(Inbound),
}

fn text_field<'v>(value: &'v Value, name: &str) -> Option<&'v str> {
    value.get(name).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

fn checked_id<'v>(what: &str, id: Option<&'v str>) -> Result<&'v str, Refusal> {
    let id = id.ok_or_else(|| Refusal::Invalid(format!("the Slack event has no {what}")))?;
    if id.len() > MAX_ID_BYTES {
        return Err(Refusal::Invalid(format!("the Slack {what} is longer than {MAX_ID_BYTES} bytes")));
    }
    Ok(id)
}

/// Removes every mention of the bot (`<@U…>`, `<@U…|name>`) from a message's text.
fn without_mention(text: &str, bot_user: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let opening = format!("<@{bot_user}");
    while let Some(at) = rest.find(&opening) {
        let after = &rest[at + opening.len()..];
        match after.find('>') {
            Some(end) if after[..end].is_empty() || after[..end].starts_with('|') => {
                out.push_str(&rest[..at]);
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str(&rest[..at + opening.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An Events API body (an HTTP callback, or a Socket Mode `events_api` payload). `known_thread`
/// says whether a thread (channel, thread `ts`) is one the bot answers unmentioned in.
pub fn event(
    receiver: &str,
    body: &Value,
    bot: &BotIdentity,
    allow: &Allowlists,
    known_thread: &dyn Fn(&str, &str) -> bool,
) -> Result<SlackEvent, Refusal> {
    match body.get("type").and_then(Value::as_str) {
        Some("url_verification") => {
            let challenge = text_field(body, "challenge").unwrap_or_default();
            if challenge.len() > MAX_CHALLENGE_BYTES {
                return Err(Refusal::Invalid(format!("the challenge is longer than {MAX_CHALLENGE_BYTES} bytes")));
            }
            return Ok(SlackEvent::Challenge(challenge.to_owned()));
        }
        Some("event_callback") => {}
        Some(_) => return Err(Refusal::Ignored("not an event callback")),
        None => return Err(Refusal::Invalid("the Slack body has no type".into())),
    }
    let event = body.get("event").filter(|e| e.is_object()).ok_or(Refusal::Ignored("no event"))?;
    let kind = event.get("type").and_then(Value::as_str).unwrap_or_default();
    if !matches!(kind, "app_mention" | "message") {
        return Err(Refusal::Ignored("not a message event"));
    }
    if event.get("subtype").is_some() || event.get("bot_id").is_some() {
        return Err(Refusal::Ignored("sent by a bot, or not a new message"));
    }
    let Some(user) = text_field(event, "user") else {
        return Err(Refusal::Ignored("no sender"));
    };
    if user == bot.user_id {
        return Err(Refusal::Ignored("the bot's own message"));
    }
    let channel = checked_id("channel", text_field(event, "channel"))?;
    let ts = checked_id("ts", text_field(event, "ts"))?;
    let thread_ts = text_field(event, "thread_ts").map(|t| checked_id("thread_ts", Some(t))).transpose()?;
    let direct = event.get("channel_type").and_then(Value::as_str) == Some("im");
    let answered = kind == "app_mention" || direct || thread_ts.is_some_and(|thread| known_thread(channel, thread));
    if !answered {
        return Err(Refusal::Ignored("a channel message that does not mention the bot"));
    }
    let raw = event.get("text").and_then(Value::as_str).unwrap_or_default();
    if raw.len() > MAX_TEXT_BYTES {
        return Err(Refusal::Invalid(format!("the message text is longer than {MAX_TEXT_BYTES} bytes")));
    }
    let text = without_mention(raw, &bot.user_id);
    if text.is_empty() {
        return Err(Refusal::Ignored("no text"));
    }
    let team = text_field(body, "team_id").or_else(|| text_field(event, "team")).unwrap_or(&bot.team_id);
    checked_id("team", Some(team))?;
    allow.check(channel, user)?;
    // In a channel the answer starts a thread under the message; a direct message is answered
    // in place, or in its thread.
    let thread_id = thread_ts.or((!direct).then_some(ts)).map(str::to_owned);
    Ok(SlackEvent::Message(Inbound {
        provider: Provider::Slack,
        receiver: receiver.to_owned(),
        event_id: format!("slack:{receiver}:{channel}:{ts}"),
        conversation_id: channel.to_owned(),
        user_id: format!("{team}/{user}"),
        message_id: Some(ts.to_owned()),
        thread_id,
        reply_to: None,
        response_url: None,
        text,
    }))
}

/// A slash command (`/akritas …`, form fields as Slack posts them): the same commands as the
/// other bots, answered through its `response_url`.
pub fn command(receiver: &str, fields: &BTreeMap<String, String>, allow: &Allowlists) -> Result<Inbound, Refusal> {
    let field = |name: &str| fields.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let (Some(channel), Some(user)) = (field("channel_id"), field("user_id")) else {
        return Err(Refusal::Ignored("no channel or user"));
    };
    if field("command").is_none() {
        return Err(Refusal::Invalid("the slash command has no command".into()));
    }
    let team = field("team_id").unwrap_or("T");
    for (what, id) in [("channel_id", channel), ("user_id", user), ("team_id", team)] {
        checked_id(what, Some(id))?;
    }
    let text = field("text").unwrap_or_default();
    if text.len() > MAX_TEXT_BYTES {
        return Err(Refusal::Invalid(format!("the command text is longer than {MAX_TEXT_BYTES} bytes")));
    }
    let response_url = field("response_url").map(str::to_owned);
    if response_url.as_ref().is_some_and(|u| u.len() > 2048) {
        return Err(Refusal::Invalid("the response_url is longer than 2048 bytes".into()));
    }
    allow.check(channel, user)?;
    let event = match field("trigger_id") {
        Some(trigger) => checked_id("trigger_id", Some(trigger))?.to_owned(),
        None => {
            let encoded: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
            hex::encode(&Sha256::digest(encoded.join("&").as_bytes())[..16])
        }
    };
    Ok(Inbound {
        provider: Provider::Slack,
        receiver: receiver.to_owned(),
        event_id: format!("slack:{receiver}:command:{event}"),
        conversation_id: channel.to_owned(),
        user_id: format!("{team}/{user}"),
        message_id: None,
        thread_id: None,
        reply_to: None,
        response_url,
        text: if text.is_empty() { "/help".to_owned() } else { slash_text(text) },
    })
}

/// A Slack receiver's clients: the bot token's, and the app-level token's for Socket Mode.
pub struct SlackBot {
    /// `chat.postMessage`, `auth.test`, `response_url`.
    api: SlackApi,
    /// `apps.connections.open` (Socket Mode only).
    pub(super) app: Option<SlackApi>,
    identity: tokio::sync::OnceCell<BotIdentity>,
}

impl SlackBot {
    /// Clients for `base_url` with the bot token and, for Socket Mode, the app-level token.
    pub fn new(base_url: &str, bot_token: &str, app_token: Option<&str>, timeout: Duration) -> Result<Self, ChatError> {
        let app = app_token.map(|token| SlackApi::new(base_url, token, timeout)).transpose()?;
        Ok(SlackBot { api: SlackApi::new(base_url, bot_token, timeout)?, app, identity: Default::default() })
    }

    /// Who the bot is (`auth.test`, asked once).
    pub async fn identity(&self) -> Result<&BotIdentity, ChatError> {
        self.identity.get_or_try_init(|| self.api.auth_test()).await
    }

    /// Replies to a Slack message: a slash command through its `response_url`, anything else
    /// in its channel and thread.
    pub async fn reply(&self, inbound: &Inbound, text: &str) -> Result<(), ChatError> {
        match &inbound.response_url {
            Some(url) => self.api.respond(url, text).await,
            None => self.api.send_reply(&inbound.conversation_id, text, inbound.thread_id.as_deref()).await.map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

    fn sign(timestamp: &str, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
        mac.update(format!("v0:{timestamp}:").as_bytes());
        mac.update(body);
        format!("v0={}", hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn slacks_documented_example_verifies() {
        // The worked example of Slack's "Verifying requests from Slack".
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let signature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(verify(SECRET, Some("1531420618"), Some(signature), body, 1_531_420_618 + 10), Ok(()));
        assert_eq!(sign("1531420618", body), signature);
    }

    #[test]
    fn a_wrong_signature_an_old_timestamp_or_missing_headers_are_refused() {
        let body = br#"{"type":"event_callback"}"#;
        let good = sign("1000", body);
        assert_eq!(verify(SECRET, Some("1000"), Some(&good), body, 1000), Ok(()));
        assert_eq!(verify(SECRET, Some("1000"), Some(&good), b"{}", 1000), Err(Refusal::Unauthorized));
        assert_eq!(verify("other", Some("1000"), Some(&good), body, 1000), Err(Refusal::Unauthorized));
        assert_eq!(verify(SECRET, Some("1000"), Some(&good), body, 1301), Err(Refusal::Expired));
        assert_eq!(verify(SECRET, Some("1000"), Some(&good), body, 699), Err(Refusal::Expired));
        assert_eq!(verify(SECRET, None, Some(&good), body, 1000), Err(Refusal::Unauthorized));
        assert_eq!(verify(SECRET, Some("1000"), None, body, 1000), Err(Refusal::Unauthorized));
        assert_eq!(verify(SECRET, Some("1000"), Some("v0=zz"), body, 1000), Err(Refusal::Unauthorized));
        assert_eq!(verify("", Some("1000"), Some(&good), body, 1000), Err(Refusal::Unauthorized));
    }

    fn bot() -> BotIdentity {
        BotIdentity { team_id: "T1".into(), user_id: "UBOT".into() }
    }

    fn callback(event: Value) -> Value {
        json!({"type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event": event})
    }

    #[test]
    fn mentions_direct_messages_and_known_threads_are_answered() {
        let allow = Allowlists::default();
        let never = |_: &str, _: &str| false;
        let mention = callback(
            json!({"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1.1", "text": "<@UBOT> why is  it down?"}),
        );
        let Ok(SlackEvent::Message(inbound)) = event("ops/slack", &mention, &bot(), &allow, &never) else {
            panic!("a message")
        };
        assert_eq!(inbound.text, "why is it down?");
        assert_eq!(inbound.event_id, "slack:ops/slack:C1:1.1");
        assert_eq!((inbound.user_id.as_str(), inbound.thread_id.as_deref()), ("T1/U1", Some("1.1")));

        let direct = callback(
            json!({"type": "message", "channel_type": "im", "user": "U1", "channel": "D1", "ts": "2.1", "text": "hi"}),
        );
        let Ok(SlackEvent::Message(inbound)) = event("ops/slack", &direct, &bot(), &allow, &never) else {
            panic!("a message")
        };
        assert_eq!(inbound.thread_id, None);

        let reply = callback(json!({"type": "message", "channel_type": "channel", "user": "U1", "channel": "C1",
            "ts": "3.1", "thread_ts": "1.0", "text": "and now?"}));
        assert_eq!(
            event("ops/slack", &reply, &bot(), &allow, &never),
            Err(Refusal::Ignored("a channel message that does not mention the bot"))
        );
        let known = |c: &str, t: &str| c == "C1" && t == "1.0";
        let Ok(SlackEvent::Message(inbound)) = event("ops/slack", &reply, &bot(), &allow, &known) else {
            panic!("a message")
        };
        assert_eq!(inbound.thread_id.as_deref(), Some("1.0"));
    }

    #[test]
    fn bots_edits_and_the_bots_own_messages_are_ignored() {
        let allow = Allowlists::default();
        let never = |_: &str, _: &str| false;
        for ignored in [
            json!({"type": "message", "subtype": "bot_message", "bot_id": "B2", "channel_type": "im", "channel": "D1", "ts": "1", "text": "x"}),
            json!({"type": "message", "channel_type": "im", "user": "UBOT", "bot_id": "B1", "channel": "D1", "ts": "1", "text": "x"}),
            json!({"type": "message", "channel_type": "im", "user": "UBOT", "channel": "D1", "ts": "1", "text": "x"}),
            json!({"type": "message", "subtype": "message_changed", "channel_type": "im", "channel": "D1", "ts": "1"}),
            json!({"type": "reaction_added", "user": "U1"}),
        ] {
            assert!(
                matches!(
                    event("ops/slack", &callback(ignored.clone()), &bot(), &allow, &never),
                    Err(Refusal::Ignored(_))
                ),
                "{ignored}"
            );
        }
    }

    #[test]
    fn the_allowlists_apply_and_the_challenge_is_answered() {
        let allow = Allowlists { conversations: ["C1".to_string()].into(), users: Default::default() };
        let never = |_: &str, _: &str| false;
        let elsewhere =
            callback(json!({"type": "app_mention", "user": "U1", "channel": "C9", "ts": "1", "text": "<@UBOT> hi"}));
        assert_eq!(event("ops/slack", &elsewhere, &bot(), &allow, &never), Err(Refusal::Forbidden));
        let challenge = json!({"type": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "token": "x"});
        assert_eq!(
            event("ops/slack", &challenge, &bot(), &allow, &never),
            Ok(SlackEvent::Challenge("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into()))
        );
    }

    #[test]
    fn slash_commands_name_the_bot_commands() {
        let fields = |text: &str| -> BTreeMap<String, String> {
            [
                ("command", "/akritas"),
                ("text", text),
                ("channel_id", "C1"),
                ("user_id", "U1"),
                ("team_id", "T1"),
                ("trigger_id", "13345224609.738474920.8088930838d88f008e0"),
                ("response_url", "https://hooks.slack.com/commands/1234/5678"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
        };
        let allow = Allowlists::default();
        let status = command("ops/slack", &fields("status"), &allow).unwrap();
        assert_eq!(status.text, "/status");
        assert_eq!(status.response_url.as_deref(), Some("https://hooks.slack.com/commands/1234/5678"));
        assert_eq!(status.event_id, "slack:ops/slack:command:13345224609.738474920.8088930838d88f008e0");
        assert_eq!(command("ops/slack", &fields("incident inc_1"), &allow).unwrap().text, "/incident inc_1");
        assert_eq!(command("ops/slack", &fields("why is it slow"), &allow).unwrap().text, "why is it slow");
        assert_eq!(command("ops/slack", &fields(""), &allow).unwrap().text, "/help");
    }

    #[test]
    fn only_the_bots_own_mention_is_removed() {
        assert_eq!(without_mention("<@UBOT> hi <@U2> <@UBOT|akritas>", "UBOT"), "hi <@U2>");
        assert_eq!(without_mention("<@UBOTX> hi", "UBOT"), "<@UBOTX> hi");
    }
}
