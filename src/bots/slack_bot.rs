//! Slack as the host runs it: the Events API and slash-command entry points the HTTP routes
//! call, the bot-token check, and the Socket Mode connection ([`socket_mode`]) that brings the same events over a WebSocket
//! the host opens, for clusters without ingress.
//!
//! Socket Mode: `apps.connections.open` with the app-level token gives a one-time URL; each
//! envelope is acknowledged by its `envelope_id` only once its message is durably queued (or
//! refused for good), so an envelope the host could not take is redelivered by Slack. A
//! `disconnect` (Slack refreshes connections every few hours) opens a new connection at once;
//! a dropped one reconnects under backoff (1 s doubling to 30 s). The host pings every 30 s
//! and gives a connection up after 90 s without a frame.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::gateway::{Accepted, SubmitError};
use super::host::{Bots, Client, Receiver, WebhookError};
use super::ingress::{Provider, Refusal};
use super::sessions::SessionKey;
use super::slack::{self, SlackBot, SlackEvent};
use crate::catalog::ObjectKey;
use crate::catalog::readiness::{Check, reasons};
use crate::notify::slack::BotIdentity;
use crate::resources::Kind;

/// The longest wait for `auth.test` while Slack waits for an answer.
const IDENTITY_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the host pings a Socket Mode connection.
const PING_EVERY: Duration = Duration::from_secs(30);
/// How long a Socket Mode connection may stay silent before it is given up.
const SILENT_FOR: Duration = Duration::from_secs(90);
/// Longest pause between failed connections.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// What a slash command is answered at once; the answer follows through its `response_url`.
pub const COMMAND_ACK: &str = "Working on it…";

/// What an Events API call is answered.
#[derive(Debug)]
pub enum EventAnswer {
    /// `url_verification`: the challenge, echoed.
    Challenge(String),
    /// A message taken for an answer.
    Taken(Accepted),
}

impl Bots {
    /// The Slack receiver `namespace/name` taking calls over HTTP (`inbound.mode: webhook`),
    /// with its signing secret.
    fn slack_receiver(&self, key: &str) -> Result<(Receiver, Arc<SlackBot>), WebhookError> {
        let unknown = || WebhookError::UnknownReceiver { provider: "slack", receiver: key.to_string() };
        let found = self.find(Provider::Slack, key).ok_or_else(unknown)?;
        match &found.client {
            Client::Slack(bot) => Ok((found.clone(), bot.clone())),
            _ => Err(unknown()),
        }
    }

    /// Whether the bot answers unmentioned replies in `thread` of `channel`: an incident's
    /// notification thread, or a conversation it has answered there.
    fn slack_thread_known(&self, receiver: &str, channel: &str, thread: &str) -> bool {
        let incident = receiver.split_once('/').is_some_and(|(namespace, name)| {
            self.alerts.as_ref().is_some_and(|store| store.incident_for_thread(namespace, name, thread).is_some())
        });
        let key = SessionKey {
            provider: Provider::Slack,
            receiver: receiver.to_string(),
            conversation: channel.to_string(),
            thread: Some(thread.to_string()),
        };
        incident || self.gateway.store().retained_messages(&key) > 0
    }

    /// `POST /api/v1/bots/slack/{receiver}/events`: the signature and timestamp first (before
    /// the body is decoded), then the challenge or the message, allowlists, dedup and the queue.
    pub async fn slack_event(
        &self,
        key: &str,
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
    ) -> Result<EventAnswer, WebhookError> {
        let (receiver, bot) = self.slack_receiver(key)?;
        let secret = receiver.secret.as_deref().unwrap_or_default();
        slack::verify(secret, timestamp, signature, body, jiff::Timestamp::now().as_second())
            .map_err(WebhookError::Refused)?;
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| WebhookError::Refused(Refusal::Invalid(format!("the Slack event is not JSON: {e}"))))?;
        if value.get("type").and_then(Value::as_str) == Some("url_verification") {
            let unknown = BotIdentity { team_id: String::new(), user_id: String::new() };
            return match slack::event(&receiver.key, &value, &unknown, &receiver.allow, &|_, _| false) {
                Ok(SlackEvent::Challenge(challenge)) => Ok(EventAnswer::Challenge(challenge)),
                Ok(SlackEvent::Message(_)) => Err(WebhookError::Refused(Refusal::Ignored("not a challenge"))),
                Err(refusal) => Err(WebhookError::Refused(refusal)),
            };
        }
        let identity = identity_now(&bot).await?;
        let known = |channel: &str, thread: &str| self.slack_thread_known(&receiver.key, channel, thread);
        match slack::event(&receiver.key, &value, identity, &receiver.allow, &known) {
            Ok(SlackEvent::Message(inbound)) => {
                self.gateway.submit(inbound).await.map(EventAnswer::Taken).map_err(WebhookError::Busy)
            }
            Ok(SlackEvent::Challenge(challenge)) => Ok(EventAnswer::Challenge(challenge)),
            Err(refusal) => Err(WebhookError::Refused(refusal)),
        }
    }

    /// `POST /api/v1/bots/slack/{receiver}/commands`: a signed slash command (form body).
    pub async fn slack_command(
        &self,
        key: &str,
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
    ) -> Result<Accepted, WebhookError> {
        let (receiver, _) = self.slack_receiver(key)?;
        let secret = receiver.secret.as_deref().unwrap_or_default();
        slack::verify(secret, timestamp, signature, body, jiff::Timestamp::now().as_second())
            .map_err(WebhookError::Refused)?;
        let fields: BTreeMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
        let inbound = slack::command(&receiver.key, &fields, &receiver.allow).map_err(WebhookError::Refused)?;
        self.gateway.submit(inbound).await.map_err(WebhookError::Busy)
    }
}

/// The bot's identity within the time Slack waits; a 503 (Slack retries) when it cannot be had.
async fn identity_now(bot: &SlackBot) -> Result<&BotIdentity, WebhookError> {
    match tokio::time::timeout(IDENTITY_TIMEOUT, bot.identity()).await {
        Ok(Ok(identity)) => Ok(identity),
        Ok(Err(error)) => Err(WebhookError::Unavailable(format!("auth.test failed: {error}"))),
        Err(_) => Err(WebhookError::Unavailable("auth.test did not answer in time".into())),
    }
}

/// How one Socket Mode connection ended.
enum Ended {
    /// Stopped by the host.
    Stopped,
    /// Slack asked for a new connection (`disconnect`).
    Refresh,
}

/// Shows a receiver's connection as its `Connected` condition (`None`: none).
fn report(bots: &Bots, receiver: &str, connection: Option<Check>) {
    let (Some(board), Some((namespace, name))) = (&bots.board, receiver.split_once('/')) else { return };
    let key = ObjectKey { kind: Kind::NotificationReceiver, namespace: namespace.to_string(), name: name.to_string() };
    board.set_connection(&key, connection);
}

/// A Slack receiver taking the Events API: its bot token checked with `auth.test` until it
/// answers (backing off to 30 s), shown as `Connected`.
pub(super) async fn identity_check(bots: Arc<Bots>, receiver: Receiver, stop: CancellationToken) {
    let Client::Slack(bot) = &receiver.client else { return };
    let mut backoff = Duration::from_secs(1);
    loop {
        let checked = tokio::select! {
            () = stop.cancelled() => break,
            checked = bot.identity() => checked,
        };
        match checked {
            Ok(identity) => {
                let message = format!("auth.test: bot {} in workspace {}", identity.user_id, identity.team_id);
                report(&bots, &receiver.key, Some(Check::passed(reasons::CONNECTED, message)));
                stop.cancelled().await;
                break;
            }
            Err(error) => {
                report(
                    &bots,
                    &receiver.key,
                    Some(Check::failed(reasons::NOT_CONNECTED, format!("auth.test: {error}"))),
                );
                tokio::select! { () = stop.cancelled() => break, () = tokio::time::sleep(backoff) => {} }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    report(&bots, &receiver.key, None);
}

fn set_connected(receiver: &str, connected: bool) {
    crate::telemetry::set(
        "akritas_slack_socket_connected",
        "Whether a Slack receiver's Socket Mode connection is open (1) or not (0).",
        &[("receiver", receiver)],
        if connected { 1.0 } else { 0.0 },
    );
}

/// One receiver's Socket Mode loop, until `stop`.
pub(super) async fn socket_mode(bots: Arc<Bots>, receiver: Receiver, stop: CancellationToken) {
    let Client::Slack(bot) = &receiver.client else { return };
    let mut backoff = Duration::from_secs(1);
    report(&bots, &receiver.key, Some(Check::pending(reasons::CONNECTING, "opening the Socket Mode connection")));
    while !stop.is_cancelled() {
        let ended = connection(&bots, &receiver, bot, &stop).await;
        set_connected(&receiver.key, false);
        match ended {
            Ok(Ended::Stopped) => break,
            Ok(Ended::Refresh) => {
                tracing::info!(receiver = %receiver.key, "slack asked for a new socket mode connection");
                backoff = Duration::from_secs(1);
            }
            Err(error) => {
                tracing::warn!(receiver = %receiver.key, %error, backoff_s = backoff.as_secs(), "slack socket mode connection failed");
                report(&bots, &receiver.key, Some(Check::failed(reasons::NOT_CONNECTED, error)));
                tokio::select! { () = stop.cancelled() => break, () = tokio::time::sleep(backoff) => {} }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    report(&bots, &receiver.key, None);
}

/// One connection: opened, then read until it ends. Errors are for the log (no secrets: the
/// URL holds a ticket and is never named).
async fn connection(
    bots: &Bots,
    receiver: &Receiver,
    bot: &SlackBot,
    stop: &CancellationToken,
) -> Result<Ended, String> {
    let identity = bot.identity().await.map_err(|e| format!("auth.test: {e}"))?;
    let app = bot.app.as_ref().ok_or("the receiver has no slack.appToken")?;
    let url = app.open_connection().await.map_err(|e| format!("apps.connections.open: {e}"))?;
    let mut socket = super::websocket::connect(&url).await?;
    let mut last_frame = Instant::now();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        let frame = tokio::select! {
            () = stop.cancelled() => {
                let _ = socket.close(None).await;
                return Ok(Ended::Stopped);
            }
            _ = ping.tick() => {
                if last_frame.elapsed() > SILENT_FOR {
                    return Err(format!("no frame for {} s", SILENT_FOR.as_secs()));
                }
                socket.send(Message::Ping(Default::default())).await.map_err(|e| format!("ping: {e}"))?;
                continue;
            }
            frame = socket.next() => frame,
        };
        last_frame = Instant::now();
        let text = match frame {
            None => return Err("the connection closed".into()),
            Some(Err(error)) => return Err(format!("read: {error}")),
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_))) => return Err("closed by Slack".into()),
            Some(Ok(_)) => continue,
        };
        let Ok(envelope) = serde_json::from_str::<Value>(text.as_str()) else {
            tracing::warn!(receiver = %receiver.key, "a socket mode frame that is not JSON was skipped");
            continue;
        };
        match envelope.get("type").and_then(Value::as_str).unwrap_or_default() {
            "hello" => {
                set_connected(&receiver.key, true);
                report(bots, &receiver.key, Some(Check::passed(reasons::CONNECTED, "Socket Mode connection open")));
            }
            "disconnect" => {
                let _ = socket.close(None).await;
                return Ok(Ended::Refresh);
            }
            _ => {
                if let Some(ack) = handle(bots, receiver, identity, &envelope).await {
                    socket.send(Message::text(ack.to_string())).await.map_err(|e| format!("ack: {e}"))?;
                }
            }
        }
    }
}

/// Takes one envelope: the acknowledgement to send, or `None` when it must not be
/// acknowledged yet (the queue is full or the store failed: Slack redelivers it).
async fn handle(bots: &Bots, receiver: &Receiver, identity: &BotIdentity, envelope: &Value) -> Option<Value> {
    let id = envelope.get("envelope_id").and_then(Value::as_str)?;
    let payload = envelope.get("payload").cloned().unwrap_or(Value::Null);
    let (taken, ack_payload) = match envelope.get("type").and_then(Value::as_str) {
        Some("events_api") => {
            let known = |channel: &str, thread: &str| bots.slack_thread_known(&receiver.key, channel, thread);
            match slack::event(&receiver.key, &payload, identity, &receiver.allow, &known) {
                Ok(SlackEvent::Message(inbound)) => (Some(inbound), None),
                Ok(SlackEvent::Challenge(_)) => (None, None),
                Err(refusal) => {
                    log_refusal(receiver, &refusal);
                    (None, None)
                }
            }
        }
        Some("slash_commands") => {
            let fields: BTreeMap<String, String> = payload
                .as_object()
                .map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
                .unwrap_or_default();
            match slack::command(&receiver.key, &fields, &receiver.allow) {
                Ok(inbound) => (Some(inbound), Some(json!({ "response_type": "ephemeral", "text": COMMAND_ACK }))),
                Err(refusal) => {
                    log_refusal(receiver, &refusal);
                    (None, None)
                }
            }
        }
        _ => (None, None),
    };
    if let Some(inbound) = taken {
        match bots.gateway.submit(inbound).await {
            Ok(_) => {}
            Err(error @ (SubmitError::Full { .. } | SubmitError::Store(_))) => {
                tracing::warn!(receiver = %receiver.key, %error, "a socket mode envelope is left for Slack to redeliver");
                return None;
            }
        }
    }
    let mut ack = json!({ "envelope_id": id });
    if let Some(payload) = ack_payload {
        ack["payload"] = payload;
    }
    Some(ack)
}

fn log_refusal(receiver: &Receiver, refusal: &Refusal) {
    match refusal {
        Refusal::Forbidden => {
            tracing::info!(receiver = %receiver.key, event = "ingress_forbidden", "slack message from outside the allowlists ignored")
        }
        refusal => tracing::debug!(receiver = %receiver.key, %refusal, "slack envelope skipped"),
    }
}
