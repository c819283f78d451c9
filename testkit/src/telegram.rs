//! A Telegram Bot API stand-in (`https://core.telegram.org/bots/api`) that speaks the real
//! wire format for the three methods Akritas calls and records every request.
//!
//! - `POST /bot<token>/getUpdates` `{offset, timeout, allowed_updates}`: confirms (drops)
//!   every pushed update below `offset`, returns those at or above it, and when there are
//!   none long-polls up to `timeout` seconds (capped, 2 s unless [`TelegramStandIn::set_max_poll`])
//!   for a [`TelegramStandIn::push_update`].
//! - `POST /bot<token>/sendMessage` `{chat_id, text, message_thread_id?, reply_parameters?}`:
//!   checks the fields like Telegram, numbers messages from 1 and answers the sent `Message`.
//! - `POST /bot<token>/editMessageText` `{chat_id, message_id, text}`: only messages this bot
//!   sent; an unchanged text is `400 message is not modified`, as on Telegram.
//!
//! A wrong token answers `401 {"ok":false,"error_code":401,"description":"Unauthorized"}`.
//! [`TelegramStandIn::script_next`] makes the next call of a method answer something else
//! (an `ok:false`, a huge body, ...). Stops when dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The bot's own user id (the number before `:` in a real token).
pub const BOT_USER_ID: i64 = 7_000_000_001;
/// The bot's username.
pub const BOT_USERNAME: &str = "akritas_test_bot";
/// Telegram's message length limit, in characters.
pub const MESSAGE_LIMIT: usize = 4096;

/// One request the stand-in got.
#[derive(Clone, Debug)]
pub struct TelegramRequest {
    /// Bot API method (`getUpdates`, `sendMessage`, ...).
    pub method: String,
    /// Whether the path carried the right token.
    pub authorized: bool,
    /// The `User-Agent` header, empty when absent.
    pub user_agent: String,
    /// The JSON body (`null` when it is not JSON).
    pub body: Value,
}

#[derive(Default)]
struct State {
    updates: Vec<Value>,
    requests: Vec<TelegramRequest>,
    /// `(chat id, message id)` → current text.
    messages: HashMap<(String, i64), String>,
    next_message_id: i64,
    scripted: HashMap<String, VecDeque<(u16, String)>>,
    max_poll: Duration,
}

struct Shared {
    token: String,
    state: Mutex<State>,
    pushed: tokio::sync::Notify,
}

/// A running stand-in; stops when dropped.
pub struct TelegramStandIn {
    /// The Bot API base URL, `http://127.0.0.1:PORT` (requests go to `{url}/bot<token>/<method>`).
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TelegramStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TelegramStandIn {
    /// Serves the bot with `token` on a free loopback port.
    pub async fn start(token: &str) -> TelegramStandIn {
        let state = State { next_message_id: 1, max_poll: Duration::from_secs(2), ..State::default() };
        let shared =
            Arc::new(Shared { token: token.to_string(), state: Mutex::new(state), pushed: Default::default() });
        let handler_state = shared.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let shared = handler_state.clone();
            async move { handle(&shared, uri.path(), &headers, &body).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TelegramStandIn { url, shared, task }
    }

    /// Queues an update (see [`text_update`]) for `getUpdates`; wakes a waiting long poll.
    pub fn push_update(&self, update: Value) {
        self.shared.state.lock().unwrap().updates.push(update);
        self.shared.pushed.notify_waiters();
    }

    /// The longest a `getUpdates` waits, whatever `timeout` it asks for (default 2 s).
    pub fn set_max_poll(&self, max: Duration) {
        self.shared.state.lock().unwrap().max_poll = max;
    }

    /// The next authorized call of `method` answers `status` with `body` (sent as
    /// `application/json`) instead of its normal answer; the request is still recorded.
    pub fn script_next(&self, method: &str, status: u16, body: impl Into<String>) {
        let mut state = self.shared.state.lock().unwrap();
        state.scripted.entry(method.to_string()).or_default().push_back((status, body.into()));
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<TelegramRequest> {
        self.shared.state.lock().unwrap().requests.clone()
    }

    /// The bodies of the authorized `sendMessage` requests, in order.
    pub fn sent(&self) -> Vec<Value> {
        self.requests().into_iter().filter(|r| r.authorized && r.method == "sendMessage").map(|r| r.body).collect()
    }

    /// The id this stand-in gave the message `sent` (a body from [`Self::sent`]): ids follow the
    /// order messages were accepted in, which under concurrent sends is not the order their
    /// requests arrived in.
    pub fn message_id_of(&self, sent: &Value) -> Option<i64> {
        let (chat, text) = (chat_id(sent)?, sent.get("text")?.as_str()?);
        let state = self.shared.state.lock().unwrap();
        state.messages.iter().filter(|((c, _), t)| *c == chat && t.as_str() == text).map(|((_, id), _)| *id).min()
    }

    /// Updates still held (not yet confirmed by an offset).
    pub fn pending_updates(&self) -> usize {
        self.shared.state.lock().unwrap().updates.len()
    }
}

fn reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn error(code: u16, description: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    reply(status, json!({"ok": false, "error_code": code, "description": description}))
}

fn ok(result: Value) -> Response {
    reply(StatusCode::OK, json!({"ok": true, "result": result}))
}

async fn handle(shared: &Shared, path: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    let Some((token, method)) = path.strip_prefix("/bot").and_then(|rest| rest.split_once('/')) else {
        return error(404, "Not Found");
    };
    let authorized = token == shared.token;
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let scripted = {
        let mut state = shared.state.lock().unwrap();
        let body = parsed.clone().unwrap_or(Value::Null);
        state.requests.push(TelegramRequest { method: method.to_string(), authorized, user_agent, body });
        if !authorized {
            return error(401, "Unauthorized");
        }
        state.scripted.get_mut(method).and_then(VecDeque::pop_front)
    };
    if let Some((status, body)) = scripted {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    let Some(Value::Object(params)) = parsed else {
        return error(400, "Bad Request: the request body must be a JSON object");
    };
    let params = Value::Object(params);
    match method {
        "getUpdates" => get_updates(shared, &params).await,
        "sendMessage" => send_message(shared, &params),
        "editMessageText" => edit_message_text(shared, &params),
        _ => error(404, "Not Found"),
    }
}

async fn get_updates(shared: &Shared, params: &Value) -> Response {
    let offset = params.get("offset").and_then(Value::as_i64).unwrap_or(0);
    let Some(timeout) = params.get("timeout").map_or(Some(0), Value::as_u64) else {
        return error(400, "Bad Request: field \"timeout\" must be a non-negative integer");
    };
    let limit = params.get("limit").and_then(Value::as_u64).unwrap_or(100).clamp(1, 100) as usize;
    let deadline = {
        let state = shared.state.lock().unwrap();
        tokio::time::Instant::now() + Duration::from_secs(timeout).min(state.max_poll)
    };
    loop {
        let pushed = shared.pushed.notified();
        let ready: Vec<Value> = {
            let mut state = shared.state.lock().unwrap();
            // Like Telegram: an offset confirms every update below it.
            state.updates.retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
            state.updates.iter().take(limit).cloned().collect()
        };
        if !ready.is_empty() || tokio::time::Instant::now() >= deadline {
            return ok(Value::Array(ready));
        }
        let _ = tokio::time::timeout_at(deadline, pushed).await;
    }
}

/// `chat_id` as Telegram takes it: an integer or a string (a number or `@channel`).
fn chat_id(params: &Value) -> Option<String> {
    match params.get("chat_id")? {
        Value::Number(n) => n.as_i64().map(|n| n.to_string()),
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        _ => None,
    }
}

/// The `text` field, or Telegram's description of what is wrong with it.
fn text(params: &Value) -> Result<String, &'static str> {
    let text = params.get("text").and_then(Value::as_str).unwrap_or_default();
    if text.trim().is_empty() {
        return Err("Bad Request: message text is empty");
    }
    if text.chars().count() > MESSAGE_LIMIT {
        return Err("Bad Request: message is too long");
    }
    Ok(text.to_string())
}

fn chat_json(chat_id: &str) -> Value {
    match chat_id.parse::<i64>() {
        Ok(id) if id > 0 => json!({"id": id, "first_name": "Alice", "username": "alice", "type": "private"}),
        Ok(id) => json!({"id": id, "title": "Ops", "type": "supergroup", "is_forum": true}),
        Err(_) => {
            json!({"id": -1_001_000_000_999i64, "title": chat_id, "username": chat_id.trim_start_matches('@'), "type": "channel"})
        }
    }
}

fn now_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

fn bot_user() -> Value {
    json!({"id": BOT_USER_ID, "is_bot": true, "first_name": "Akritas", "username": BOT_USERNAME})
}

fn send_message(shared: &Shared, params: &Value) -> Response {
    let Some(chat) = chat_id(params) else {
        return error(400, "Bad Request: chat_id is empty");
    };
    let text = match text(params) {
        Ok(text) => text,
        Err(description) => return error(400, description),
    };
    let thread_id = match params.get("message_thread_id") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_i64() {
            Some(id) if id > 0 => Some(id),
            _ => return error(400, "Bad Request: message thread not found"),
        },
    };
    let mut state = shared.state.lock().unwrap();
    let reply_to = match params.get("reply_parameters") {
        None | Some(Value::Null) => None,
        Some(p) => {
            let Some(id) = p.get("message_id").and_then(Value::as_i64) else {
                return error(400, "Bad Request: field \"message_id\" must be an integer");
            };
            let lenient = p.get("allow_sending_without_reply").and_then(Value::as_bool) == Some(true);
            // Users' messages are not stored here; only a missing bot message can be checked.
            if id <= 0 && !lenient {
                return error(400, "Bad Request: message to be replied not found");
            }
            Some(id)
        }
    };
    let message_id = state.next_message_id;
    state.next_message_id += 1;
    state.messages.insert((chat.clone(), message_id), text.clone());
    let mut message = json!({"message_id": message_id, "from": bot_user(), "chat": chat_json(&chat),
                             "date": now_seconds(), "text": text});
    if let Some(thread_id) = thread_id {
        message["message_thread_id"] = json!(thread_id);
        message["is_topic_message"] = json!(true);
    }
    if let Some(reply_to) = reply_to {
        message["reply_to_message"] =
            json!({"message_id": reply_to, "chat": chat_json(&chat), "date": now_seconds(), "text": ""});
    }
    ok(message)
}

fn edit_message_text(shared: &Shared, params: &Value) -> Response {
    let Some(chat) = chat_id(params) else {
        return error(400, "Bad Request: chat_id is empty");
    };
    let Some(message_id) = params.get("message_id").and_then(Value::as_i64) else {
        return error(400, "Bad Request: message identifier is not specified");
    };
    let text = match text(params) {
        Ok(text) => text,
        Err(description) => return error(400, description),
    };
    let mut state = shared.state.lock().unwrap();
    let Some(current) = state.messages.get_mut(&(chat.clone(), message_id)) else {
        return error(400, "Bad Request: message to edit not found");
    };
    if *current == text {
        return error(
            400,
            "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
        );
    }
    current.clone_from(&text);
    ok(json!({"message_id": message_id, "from": bot_user(), "chat": chat_json(&chat), "date": now_seconds(),
              "edit_date": now_seconds(), "text": text}))
}

/// An `Update` with a text `message` from a person, as Telegram sends it: `chat_id` > 0 is
/// a private chat, otherwise a forum supergroup; `thread_id` is the forum topic;
/// `reply_to` the message replied to (taken to be one of the bot's); a text starting with
/// `/` carries a `bot_command` entity.
pub fn text_update(
    update_id: i64,
    chat_id: i64,
    user_id: i64,
    message_id: i64,
    text: &str,
    thread_id: Option<i64>,
    reply_to: Option<i64>,
) -> Value {
    let from = json!({"id": user_id, "is_bot": false, "first_name": "Alice", "last_name": "Ops",
                      "username": format!("user{user_id}"), "language_code": "en"});
    message_update(update_id, chat_id, from, message_id, text, thread_id, reply_to)
}

/// Like [`text_update`], but sent by another bot (`from.is_bot: true`), which Akritas ignores.
pub fn bot_text_update(update_id: i64, chat_id: i64, bot_id: i64, message_id: i64, text: &str) -> Value {
    let from =
        json!({"id": bot_id, "is_bot": true, "first_name": "Other bot", "username": format!("other{bot_id}_bot")});
    message_update(update_id, chat_id, from, message_id, text, None, None)
}

fn message_update(
    update_id: i64,
    chat_id: i64,
    from: Value,
    message_id: i64,
    text: &str,
    thread_id: Option<i64>,
    reply_to: Option<i64>,
) -> Value {
    let chat = chat_json(&chat_id.to_string());
    let date = now_seconds();
    let mut message = json!({"message_id": message_id, "from": from, "chat": chat, "date": date, "text": text});
    if text.starts_with('/') {
        let length = text.split_whitespace().next().map_or(0, |c| c.encode_utf16().count());
        message["entities"] = json!([{"offset": 0, "length": length, "type": "bot_command"}]);
    }
    if let Some(thread_id) = thread_id {
        message["message_thread_id"] = json!(thread_id);
        message["is_topic_message"] = json!(true);
    }
    if let Some(reply_to) = reply_to {
        let mut replied = json!({"message_id": reply_to, "from": bot_user(), "chat": chat, "date": date, "text": "…"});
        if let Some(thread_id) = thread_id {
            replied["message_thread_id"] = json!(thread_id);
        }
        message["reply_to_message"] = replied;
    }
    json!({"update_id": update_id, "message": message})
}
