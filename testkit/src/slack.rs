//! A Slack stand-in that speaks the real wire formats (`https://docs.slack.dev`) and records
//! every request, plus builders and senders for what Slack itself sends to an app.
//!
//! - Web API, `POST {url}/api/{method}` ([`SlackStandIn::api_url`]): the body is
//!   `application/x-www-form-urlencoded` (blocks then arrive as a JSON string) or
//!   `application/json`; the token is `Authorization: Bearer <token>` or a `token` form field
//!   (the header only for `apps.connections.open`, as on Slack). Every answer is `200` with
//!   `{"ok": true, ...}` or `{"ok": false, "error": "<code>"}`, as Slack answers even errors.
//!   `auth.test` and `chat.postMessage` take the bot token, `apps.connections.open` the app
//!   token (`xapp-…`); another method is `unknown_method`. `chat.postMessage` checks its fields
//!   like Slack (`channel_not_found`, `no_text`, `msg_too_long`, `invalid_blocks`), and more
//!   strictly: a `thread_ts` must be the ts of a message of that channel (`thread_not_found`).
//!   [`SlackStandIn::script_next`] makes the next call answer something else (a `429` with
//!   `Retry-After`, ...).
//! - `response_url`, `POST {url}/response/{n}` ([`SlackStandIn::response_url`]): a JSON
//!   message, answered `200 ok` in plain text as Slack does (a body that is not a JSON object
//!   `400 invalid_payload`); a URL never issued is `404`.
//! - Events API: [`event_callback`], [`app_mention`], [`message`], [`slash_command_form`] and
//!   the rest build the bodies Slack posts to an app's Request URL, and [`send_event`] and
//!   [`send_command`] post them signed (`X-Slack-Signature: v0=<hex HMAC-SHA256 of
//!   "v0:{timestamp}:{body}">`, `X-Slack-Request-Timestamp`).
//! - Socket Mode, `GET /link/?ticket=<n>` (the URL `apps.connections.open` answers, one
//!   connection per ticket): a WebSocket that starts with a `hello` frame and carries each
//!   envelope pushed with [`SlackStandIn::push_event`] or [`SlackStandIn::push_command`] to the
//!   newest connection. An envelope stays unacknowledged until the app sends
//!   `{"envelope_id": "<id>", "payload"?: ...}`; those in flight on a connection that ends are
//!   sent again on the next one with `retry_attempt` one higher and `retry_reason: "timeout"`.
//!   [`SlackStandIn::disconnect`] and [`SlackStandIn::drop_connection`] end a connection the
//!   two ways Slack does: a `disconnect` frame then a close, or a lost TCP connection.
//!
//! Stops when dropped.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::task::AbortHandle;

/// The name [`SlackStandIn::script_next`] takes for the next post to any `response_url`.
pub const RESPONSE_URL: &str = "response_url";
/// The workspace.
pub const TEAM_ID: &str = "T0AKRITAS1";
/// The bot user (author of every message posted through the API).
pub const BOT_USER_ID: &str = "U0AKRITASBOT";
/// The bot.
pub const BOT_ID: &str = "B0AKRITAS1";
/// The app.
pub const APP_ID: &str = "A0AKRITAS1";
/// The deprecated verification token Slack still puts in every payload it sends.
pub const VERIFICATION_TOKEN: &str = "Jhj5dZrVaK7ZwHHjRyZWjbDl";
/// `chat.postMessage`'s text limit, in characters.
pub const TEXT_LIMIT: usize = 40_000;
/// The most blocks a message may have.
pub const BLOCKS_LIMIT: usize = 50;
/// The text limit of a `section` block, in characters.
pub const SECTION_TEXT_LIMIT: usize = 3_000;

/// One Web API request the stand-in got.
#[derive(Clone, Debug)]
pub struct SlackRequest {
    /// The Web API method, `chat.postMessage`, `auth.test`, ...
    pub method: String,
    /// Whether the token was the one the method takes (for an unknown method: either token).
    pub token_ok: bool,
    /// The form fields as a JSON object of strings, or the JSON body (`null` when neither).
    pub body: Value,
    /// When it arrived.
    pub at: Instant,
}

struct Scripted {
    status: u16,
    body: String,
    retry_after: Option<u32>,
}

impl Scripted {
    fn response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, [(header::CONTENT_TYPE, "application/json")], self.body).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Token {
    Missing,
    Wrong,
    Bot,
    App,
}

#[derive(Clone, Copy)]
enum ApiMethod {
    AuthTest,
    PostMessage,
    OpenConnection,
}

impl ApiMethod {
    fn named(name: &str) -> Option<ApiMethod> {
        match name {
            "auth.test" => Some(ApiMethod::AuthTest),
            "chat.postMessage" => Some(ApiMethod::PostMessage),
            "apps.connections.open" => Some(ApiMethod::OpenConnection),
            _ => None,
        }
    }

    fn token(self) -> Token {
        match self {
            ApiMethod::OpenConnection => Token::App,
            ApiMethod::AuthTest | ApiMethod::PostMessage => Token::Bot,
        }
    }
}

#[derive(Clone, Copy)]
enum EnvelopeKind {
    Event,
    Command,
}

struct Envelope {
    id: String,
    kind: EnvelopeKind,
    payload: Value,
    retry_attempt: u32,
    /// The connection it is in flight on; `None` while it waits for one.
    sent_on: Option<u64>,
}

impl Envelope {
    fn frame(&self) -> Value {
        match self.kind {
            EnvelopeKind::Event => json!({
                "envelope_id": self.id, "type": "events_api", "accepts_response_payload": false,
                "retry_attempt": self.retry_attempt,
                "retry_reason": if self.retry_attempt == 0 { "" } else { "timeout" },
                "payload": self.payload,
            }),
            EnvelopeKind::Command => json!({
                "envelope_id": self.id, "type": "slash_commands", "accepts_response_payload": true,
                "payload": self.payload,
            }),
        }
    }
}

struct Connection {
    generation: u64,
    outgoing: UnboundedSender<Message>,
    task: AbortHandle,
}

#[derive(Default)]
struct State {
    requests: Vec<SlackRequest>,
    /// Every message, posted or seeded, in order.
    messages: Vec<Value>,
    scripted: HashMap<String, VecDeque<Scripted>>,
    /// Issued response URL id → what was posted to it.
    responses: HashMap<String, Vec<Value>>,
    /// Socket Mode tickets issued and not yet used.
    tickets: HashSet<u64>,
    last_id: u64,
    connections_opened: usize,
    /// Live Socket Mode connections, oldest first; envelopes go to the last.
    connections: Vec<Connection>,
    /// Every connection task and close timer not known to have ended, to stop on drop.
    tasks: Vec<AbortHandle>,
    /// Envelopes not acknowledged yet, in push order.
    envelopes: Vec<Envelope>,
    deliveries: Vec<(String, u32)>,
    acked: Vec<String>,
    ack_payloads: Vec<(String, Value)>,
}

impl State {
    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    fn track(&mut self, task: AbortHandle) {
        self.tasks.retain(|t| !t.is_finished());
        self.tasks.push(task);
    }

    /// Registers a connection, greets it and sends it the waiting envelopes.
    fn connect(&mut self, outgoing: UnboundedSender<Message>, task: AbortHandle) -> u64 {
        let generation = self.next_id();
        self.track(task.clone());
        let _ = outgoing.send(text_frame(&hello(self.connections.len() + 1)));
        self.connections.push(Connection { generation, outgoing, task });
        self.deliver_waiting();
        generation
    }

    /// Forgets a live connection; the envelopes in flight on it go to the next one.
    fn end(&mut self, generation: u64) -> Option<Connection> {
        let index = self.connections.iter().position(|c| c.generation == generation)?;
        let connection = self.connections.remove(index);
        for envelope in self.envelopes.iter_mut().filter(|e| e.sent_on == Some(generation)) {
            envelope.sent_on = None;
            envelope.retry_attempt += 1;
        }
        self.deliver_waiting();
        Some(connection)
    }

    fn deliver_waiting(&mut self) {
        let Some(current) = self.connections.last() else {
            return;
        };
        for envelope in self.envelopes.iter_mut().filter(|e| e.sent_on.is_none()) {
            let _ = current.outgoing.send(text_frame(&envelope.frame()));
            envelope.sent_on = Some(current.generation);
            self.deliveries.push((envelope.id.clone(), envelope.retry_attempt));
        }
    }

    fn acknowledge(&mut self, ack: &Value) {
        let Some(id) = ack.get("envelope_id").and_then(Value::as_str) else {
            return;
        };
        self.acked.push(id.to_string());
        if let Some(payload) = ack.get("payload") {
            self.ack_payloads.push((id.to_string(), payload.clone()));
        }
        self.envelopes.retain(|e| e.id != id);
    }
}

struct Shared {
    bot_token: String,
    app_token: String,
    /// `127.0.0.1:PORT`.
    address: String,
    state: Mutex<State>,
}

impl Shared {
    fn token(&self, given: Option<&str>) -> Token {
        match given {
            None => Token::Missing,
            Some(token) if token == self.bot_token => Token::Bot,
            Some(token) if token == self.app_token => Token::App,
            Some(_) => Token::Wrong,
        }
    }

    /// Ends the connection with a close frame, unless it has ended already.
    fn close(&self, generation: u64) {
        if let Some(connection) = self.state.lock().unwrap().end(generation) {
            let frame = CloseFrame { code: close_code::NORMAL, reason: "".into() };
            let _ = connection.outgoing.send(Message::Close(Some(frame)));
        }
    }
}

/// A running stand-in; stops when dropped, Socket Mode connections included.
pub struct SlackStandIn {
    /// The server's base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    signing_secret: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlackStandIn {
    fn drop(&mut self) {
        self.task.abort();
        for task in &self.shared.state.lock().unwrap_or_else(PoisonError::into_inner).tasks {
            task.abort();
        }
    }
}

impl SlackStandIn {
    /// Serves a workspace where the app has the bot token `bot_token`, the app-level token
    /// `app_token` and the signing secret `signing_secret`, on a free loopback port.
    pub async fn start(bot_token: &str, app_token: &str, signing_secret: &str) -> SlackStandIn {
        // The senders and the tests' own clients are rustls clients without a default provider.
        akritas::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("local address").to_string();
        let shared = Arc::new(Shared {
            bot_token: bot_token.to_string(),
            app_token: app_token.to_string(),
            address: address.clone(),
            state: Mutex::new(State::default()),
        });
        let (link_state, handler_state) = (shared.clone(), shared.clone());
        let link = move |uri: Uri, upgrade: WebSocketUpgrade| {
            let shared = link_state.clone();
            async move { open_link(shared, &uri, upgrade) }
        };
        let app = axum::Router::new().route("/link/", axum::routing::get(link)).fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let shared = handler_state.clone();
                async move { handle(&shared, &method, uri.path(), &headers, &body) }
            },
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        SlackStandIn { url: format!("http://{address}"), signing_secret: signing_secret.to_string(), shared, task }
    }

    /// The Web API base URL, `{url}/api` (methods are `{api_url}/{method}`).
    pub fn api_url(&self) -> String {
        format!("{}/api", self.url)
    }

    /// The signing secret the stand-in was started with, for [`send_event`] and [`send_command`].
    pub fn signing_secret(&self) -> &str {
        &self.signing_secret
    }

    /// The next call of Web API `method` with the right token (or, for [`RESPONSE_URL`], the
    /// next post to any `response_url`) answers `status` with `body` (as `application/json`) and,
    /// when given, `Retry-After: retry_after`, instead of its normal answer; a Web API request is
    /// still recorded, but nothing is posted.
    pub fn script_next(&self, method: &str, status: u16, body: impl Into<String>, retry_after: Option<u32>) {
        let mut state = self.shared.state.lock().unwrap();
        let scripted = Scripted { status, body: body.into(), retry_after };
        state.scripted.entry(method.to_string()).or_default().push_back(scripted);
    }

    /// Every Web API request so far, in arrival order.
    pub fn requests(&self) -> Vec<SlackRequest> {
        self.shared.state.lock().unwrap().requests.clone()
    }

    /// Every message posted with `chat.postMessage` or seeded, in order.
    pub fn messages(&self) -> Vec<Value> {
        self.shared.state.lock().unwrap().messages.clone()
    }

    /// The replies in the thread of the message `ts` of `channel`, in order (without the parent).
    pub fn thread(&self, channel: &str, ts: &str) -> Vec<Value> {
        let state = self.shared.state.lock().unwrap();
        state.messages.iter().filter(|m| m["channel"] == channel && m["thread_ts"] == ts).cloned().collect()
    }

    /// Stores a message as if the person `user` had posted it in `channel`, so that replies can
    /// be threaded under it; returns its ts.
    pub fn seed_message(&self, channel: &str, user: &str, text: &str) -> String {
        let mut state = self.shared.state.lock().unwrap();
        let ts = new_ts();
        state.messages.push(json!({"type": "message", "channel": channel, "user": user, "text": text, "ts": ts}));
        ts
    }

    /// How many Socket Mode URLs `apps.connections.open` has handed out.
    pub fn connections_opened(&self) -> usize {
        self.shared.state.lock().unwrap().connections_opened
    }

    /// A new `response_url`, `{url}/response/{n}`, as Slack puts in a slash command.
    pub fn response_url(&self) -> String {
        let mut state = self.shared.state.lock().unwrap();
        let id = state.next_id().to_string();
        state.responses.insert(id.clone(), Vec::new());
        format!("{}/response/{id}", self.url)
    }

    /// What was posted to `url` (from [`Self::response_url`]), in order; `null` for a body that
    /// is not a JSON object.
    pub fn responses(&self, url: &str) -> Vec<Value> {
        let id = url.rsplit('/').next().unwrap_or_default();
        self.shared.state.lock().unwrap().responses.get(id).cloned().unwrap_or_default()
    }

    /// Queues an `events_api` envelope carrying `payload` (an [`event_callback`] body) for the
    /// Socket Mode connection.
    pub fn push_event(&self, payload: Value) {
        self.push(EnvelopeKind::Event, payload);
    }

    /// Queues a `slash_commands` envelope whose payload is the fields of `form` (a
    /// [`slash_command_form`]) as a JSON object of strings.
    pub fn push_command(&self, form: &str) {
        self.push(EnvelopeKind::Command, Value::Object(form_fields(form.as_bytes())));
    }

    fn push(&self, kind: EnvelopeKind, payload: Value) {
        let mut state = self.shared.state.lock().unwrap();
        state.envelopes.push(Envelope { id: uuid(), kind, payload, retry_attempt: 0, sent_on: None });
        state.deliver_waiting();
    }

    /// Sends `{"type": "disconnect", "reason": reason}` on the newest connection and closes it
    /// a second later unless the app has closed it by then, as Slack does with
    /// `refresh_requested`.
    pub fn disconnect(&self, reason: &str) {
        let mut state = self.shared.state.lock().unwrap();
        let Some(current) = state.connections.last() else {
            return;
        };
        let notice = json!({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-standin"}});
        let _ = current.outgoing.send(text_frame(&notice));
        let (shared, generation) = (self.shared.clone(), current.generation);
        let timer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            shared.close(generation);
        });
        state.track(timer.abort_handle());
    }

    /// Ends the newest connection abruptly: its TCP connection is dropped without a close frame.
    pub fn drop_connection(&self) {
        let mut state = self.shared.state.lock().unwrap();
        let newest = state.connections.last().map(|c| c.generation);
        if let Some(connection) = newest.and_then(|generation| state.end(generation)) {
            connection.task.abort();
        }
    }

    /// The envelope ids acknowledged, in order (an id acknowledged twice is here twice).
    pub fn acked(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().acked.clone()
    }

    /// The acknowledgements that carried a `payload`: (envelope id, payload), in order.
    pub fn ack_payloads(&self) -> Vec<(String, Value)> {
        self.shared.state.lock().unwrap().ack_payloads.clone()
    }

    /// How many envelopes have not been acknowledged.
    pub fn unacked(&self) -> usize {
        self.shared.state.lock().unwrap().envelopes.len()
    }

    /// Whether a Socket Mode connection is open.
    pub fn connected(&self) -> bool {
        !self.shared.state.lock().unwrap().connections.is_empty()
    }

    /// Every envelope sent: (envelope id, `retry_attempt`), in order.
    pub fn deliveries(&self) -> Vec<(String, u32)> {
        self.shared.state.lock().unwrap().deliveries.clone()
    }
}

fn handle(shared: &Shared, method: &Method, path: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    if method == Method::POST {
        if let Some(api_method) = path.strip_prefix("/api/") {
            return web_api(shared, api_method, headers, body);
        }
        if let Some(id) = path.strip_prefix("/response/") {
            return respond(shared, id, body);
        }
    }
    (StatusCode::NOT_FOUND, "Not Found").into_response()
}

fn json_response(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn ok(mut fields: Value) -> Response {
    fields["ok"] = json!(true);
    json_response(fields)
}

fn slack_error(code: &str) -> Response {
    json_response(json!({"ok": false, "error": code}))
}

fn form_fields(body: &[u8]) -> Map<String, Value> {
    url::form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), Value::String(v.into_owned()))).collect()
}

fn is_json(headers: &HeaderMap) -> bool {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    content_type.to_ascii_lowercase().starts_with("application/json")
}

/// A JSON body's object, or Slack's error code for it.
fn json_fields(body: &[u8]) -> Result<Map<String, Value>, &'static str> {
    if body.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err("json_not_object"),
        Err(_) => Err("invalid_json"),
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))
}

fn web_api(shared: &Shared, name: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    let json_body = is_json(headers);
    let fields = if json_body { json_fields(body) } else { Ok(form_fields(body)) };
    let method = ApiMethod::named(name);
    let form_token_allowed = !json_body && !matches!(method, Some(ApiMethod::OpenConnection));
    let form_token = fields.as_ref().ok().filter(|_| form_token_allowed).and_then(|f| f.get("token")?.as_str());
    let given = shared.token(bearer(headers).or(form_token));
    let mut state = shared.state.lock().unwrap();
    state.requests.push(SlackRequest {
        method: name.to_string(),
        token_ok: method.map_or(matches!(given, Token::Bot | Token::App), |m| m.token() == given),
        body: fields.clone().map_or(Value::Null, Value::Object),
        at: Instant::now(),
    });
    let Some(method) = method else {
        return slack_error("unknown_method");
    };
    if let Some(code) = token_error(given, method.token()) {
        return slack_error(code);
    }
    if let Some(scripted) = state.scripted.get_mut(name).and_then(VecDeque::pop_front) {
        return scripted.response();
    }
    let fields = match fields {
        Ok(fields) => fields,
        Err(code) => return slack_error(code),
    };
    match method {
        ApiMethod::AuthTest => auth_test(),
        ApiMethod::PostMessage => post_message(&mut state, &fields),
        ApiMethod::OpenConnection => open_connection(shared, &mut state),
    }
}

fn token_error(given: Token, needed: Token) -> Option<&'static str> {
    match given {
        _ if given == needed => None,
        Token::Missing => Some("not_authed"),
        Token::Wrong => Some("invalid_auth"),
        Token::Bot | Token::App => Some("not_allowed_token_type"),
    }
}

fn auth_test() -> Response {
    ok(json!({
        "url": "https://akritas-test.slack.com/", "team": "Akritas Test", "user": "akritas",
        "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID, "is_enterprise_install": false,
    }))
}

fn post_message(state: &mut State, fields: &Map<String, Value>) -> Response {
    match checked_message(state, fields) {
        Ok(message) => {
            state.messages.push(message.clone());
            ok(json!({"channel": message["channel"], "ts": message["ts"], "message": message}))
        }
        Err(code) => slack_error(code),
    }
}

fn text_field<'a>(fields: &'a Map<String, Value>, name: &str) -> &'a str {
    fields.get(name).and_then(Value::as_str).unwrap_or_default()
}

/// The message `chat.postMessage` would post, or Slack's error code for the request.
fn checked_message(state: &State, fields: &Map<String, Value>) -> Result<Value, &'static str> {
    let channel = text_field(fields, "channel");
    if !channel.starts_with(['C', 'G', 'D']) {
        return Err("channel_not_found");
    }
    let blocks = blocks(fields)?;
    let text = text_field(fields, "text");
    if text.is_empty() && blocks.as_ref().is_none_or(Vec::is_empty) {
        return Err("no_text");
    }
    if text.chars().count() > TEXT_LIMIT {
        return Err("msg_too_long");
    }
    let thread_ts = text_field(fields, "thread_ts");
    if !thread_ts.is_empty() && !state.messages.iter().any(|m| m["channel"] == channel && m["ts"] == thread_ts) {
        return Err("thread_not_found");
    }
    let mut message = json!({"type": "message", "channel": channel, "ts": new_ts(), "text": text,
                             "user": BOT_USER_ID, "bot_id": BOT_ID});
    if !thread_ts.is_empty() {
        message["thread_ts"] = json!(thread_ts);
    }
    if let Some(blocks) = blocks {
        message["blocks"] = Value::Array(blocks);
    }
    Ok(message)
}

/// The `blocks` field (a JSON array, or a string holding one), when present and valid.
fn blocks(fields: &Map<String, Value>) -> Result<Option<Vec<Value>>, &'static str> {
    let blocks = match fields.get("blocks") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(encoded)) => serde_json::from_str(encoded).map_err(|_| "invalid_blocks")?,
        Some(blocks) => blocks.clone(),
    };
    match blocks {
        Value::Array(blocks) if blocks.len() <= BLOCKS_LIMIT && !blocks.iter().any(oversized_section) => {
            Ok(Some(blocks))
        }
        _ => Err("invalid_blocks"),
    }
}

fn oversized_section(block: &Value) -> bool {
    block["type"] == "section"
        && block["text"]["text"].as_str().is_some_and(|text| text.chars().count() > SECTION_TEXT_LIMIT)
}

fn open_connection(shared: &Shared, state: &mut State) -> Response {
    let ticket = state.next_id();
    state.tickets.insert(ticket);
    state.connections_opened += 1;
    ok(json!({"url": format!("ws://{}/link/?ticket={ticket}&app_id={APP_ID}", shared.address)}))
}

fn respond(shared: &Shared, id: &str, body: &[u8]) -> Response {
    let posted = serde_json::from_slice::<Value>(body).ok().filter(Value::is_object);
    let mut state = shared.state.lock().unwrap();
    if !state.responses.contains_key(id) {
        return (StatusCode::NOT_FOUND, "no_service").into_response();
    }
    if let Some(scripted) = state.scripted.get_mut(RESPONSE_URL).and_then(VecDeque::pop_front) {
        return scripted.response();
    }
    let responses = state.responses.entry(id.to_string()).or_default();
    responses.push(posted.clone().unwrap_or(Value::Null));
    match posted {
        Some(_) => (StatusCode::OK, "ok").into_response(),
        None => (StatusCode::BAD_REQUEST, "invalid_payload").into_response(),
    }
}

/// Upgrades to a Socket Mode connection when the URL carries a ticket not used yet.
fn open_link(shared: Arc<Shared>, uri: &Uri, upgrade: WebSocketUpgrade) -> Response {
    let query = uri.query().unwrap_or_default();
    let ticket = url::form_urlencoded::parse(query.as_bytes()).find(|(name, _)| name == "ticket");
    let ticket = ticket.and_then(|(_, value)| value.parse::<u64>().ok());
    if !ticket.is_some_and(|ticket| shared.state.lock().unwrap().tickets.remove(&ticket)) {
        return (StatusCode::UNAUTHORIZED, "invalid_ticket").into_response();
    }
    upgrade.on_upgrade(move |socket| run_connection(shared, socket))
}

async fn run_connection(shared: Arc<Shared>, socket: WebSocket) {
    let (outgoing, frames) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(pump(shared.clone(), socket, frames));
    let generation = shared.state.lock().unwrap().connect(outgoing, task.abort_handle());
    let _ = task.await;
    shared.state.lock().unwrap().end(generation);
}

/// Sends the queued frames and records the acknowledgements; once the queue is closed (after a
/// close frame), reads until the app answers the close.
async fn pump(shared: Arc<Shared>, mut socket: WebSocket, mut frames: UnboundedReceiver<Message>) {
    loop {
        tokio::select! {
            frame = frames.recv() => match frame {
                Some(frame) => {
                    if socket.send(frame).await.is_err() {
                        return;
                    }
                }
                None => break,
            },
            received = socket.recv() => match received {
                Some(Ok(message)) => receive(&shared, &message),
                _ => return,
            },
        }
    }
    while let Some(Ok(message)) = socket.recv().await {
        receive(&shared, &message);
    }
}

fn receive(shared: &Shared, message: &Message) {
    let Message::Text(text) = message else {
        return;
    };
    if let Ok(ack) = serde_json::from_str::<Value>(text.as_str()) {
        shared.state.lock().unwrap().acknowledge(&ack);
    }
}

fn text_frame(value: &Value) -> Message {
    Message::Text(value.to_string().into())
}

fn hello(num_connections: usize) -> Value {
    json!({
        "type": "hello", "num_connections": num_connections,
        "debug_info": {"host": "applink-standin", "build_number": 1, "approximate_connection_time": 18060},
        "connection_info": {"app_id": APP_ID},
    })
}

/// A random version 4 UUID, lower-case, as Slack's envelope ids and `client_msg_id`s are.
fn uuid() -> String {
    let mut bits: u128 = rand::random();
    bits = (bits & !(0xf << 76)) | (0x4 << 76);
    bits = (bits & !(0x3 << 62)) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// `"v0=" + hex(HMAC-SHA256(signing_secret, "v0:{timestamp}:" + body))`, Slack's
/// `X-Slack-Signature`.
pub fn sign(signing_secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(signing_secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// The current time in Unix seconds, as in `X-Slack-Request-Timestamp`.
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A fresh message ts, `"{seconds}.{micros:06}"` from the wall clock; every ts this process
/// makes (these and the stand-in's) is unique and greater than the one before.
pub fn new_ts() -> String {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(0));
    let (Ok(last) | Err(last)) = LAST.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(now.max(last + 1)));
    let micros = now.max(last + 1);
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

/// The `event_callback` body Slack posts (or wraps in a Socket Mode envelope) for `event`.
pub fn event_callback(event_id: &str, event: Value) -> Value {
    json!({
        "token": VERIFICATION_TOKEN, "team_id": TEAM_ID, "api_app_id": APP_ID, "event": event,
        "type": "event_callback", "event_id": event_id, "event_time": now(),
        "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": true}],
        "is_ext_shared_channel": false, "event_context": "4-eyJldCI6ImFwcF9tZW50aW9uIn0",
    })
}

/// An `app_mention` event: `user` mentioned the bot in `channel` (`text` carries the
/// `<@U0AKRITASBOT>` mention itself), in the thread `thread_ts` when given.
pub fn app_mention(user: &str, channel: &str, text: &str, ts: &str, thread_ts: Option<&str>) -> Value {
    let mut event = json!({
        "type": "app_mention", "user": user, "text": text, "ts": ts, "channel": channel,
        "event_ts": ts, "team": TEAM_ID, "client_msg_id": uuid(),
    });
    if let Some(thread_ts) = thread_ts {
        event["thread_ts"] = json!(thread_ts);
    }
    event
}

/// A `message` event from the person `user`; `channel_type` is `im`, `channel` or `group`.
pub fn message(user: &str, channel: &str, channel_type: &str, text: &str, ts: &str, thread_ts: Option<&str>) -> Value {
    let mut event = json!({
        "type": "message", "user": user, "text": text, "ts": ts, "channel": channel,
        "channel_type": channel_type, "event_ts": ts, "team": TEAM_ID, "client_msg_id": uuid(),
    });
    if let Some(thread_ts) = thread_ts {
        event["thread_ts"] = json!(thread_ts);
    }
    event
}

/// A `message` event of subtype `bot_message`, posted by another bot.
pub fn bot_message(bot_id: &str, channel: &str, channel_type: &str, text: &str, ts: &str) -> Value {
    json!({
        "type": "message", "subtype": "bot_message", "bot_id": bot_id, "text": text, "ts": ts,
        "channel": channel, "channel_type": channel_type, "event_ts": ts,
    })
}

/// A `message` event for one of the bot's own posts, as Slack echoes them back to the app.
pub fn own_message(channel: &str, channel_type: &str, text: &str, ts: &str) -> Value {
    json!({
        "type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "app_id": APP_ID, "text": text,
        "ts": ts, "channel": channel, "channel_type": channel_type,
    })
}

/// The `url_verification` body Slack posts when a Request URL is configured.
pub fn url_verification(challenge: &str) -> Value {
    json!({"token": VERIFICATION_TOKEN, "challenge": challenge, "type": "url_verification"})
}

/// The `application/x-www-form-urlencoded` body of a slash command, as Slack posts it
/// (`/akritas why is api slow` → `command=/akritas`, `text=why is api slow`).
pub fn slash_command_form(command: &str, text: &str, user_id: &str, channel_id: &str, response_url: &str) -> String {
    let trigger_id = format!("{}.{}.{:032x}", rand::random::<u32>(), rand::random::<u32>(), rand::random::<u128>());
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("token", VERIFICATION_TOKEN)
        .append_pair("team_id", TEAM_ID)
        .append_pair("team_domain", "akritas-test")
        .append_pair("channel_id", channel_id)
        .append_pair("channel_name", "ops")
        .append_pair("user_id", user_id)
        .append_pair("user_name", "someone")
        .append_pair("command", command)
        .append_pair("text", text)
        .append_pair("api_app_id", APP_ID)
        .append_pair("is_enterprise_install", "false")
        .append_pair("response_url", response_url)
        .append_pair("trigger_id", &trigger_id)
        .finish()
}

fn signed_request(
    client: &reqwest::Client,
    url: &str,
    signing_secret: &str,
    timestamp: i64,
    content_type: &str,
    body: Vec<u8>,
    signature: Option<String>,
) -> reqwest::RequestBuilder {
    let signature = signature.unwrap_or_else(|| sign(signing_secret, timestamp, &body));
    client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .header(reqwest::header::USER_AGENT, "Slackbot 1.0 (+https://api.slack.com/robots)")
        .header("X-Slack-Request-Timestamp", timestamp.to_string())
        .header("X-Slack-Signature", signature)
        .body(body)
}

/// Posts the Events API `body` to `url` as Slack does: JSON, signed with the current time;
/// `retry_num` makes it a redelivery (`X-Slack-Retry-Num`, `X-Slack-Retry-Reason: http_timeout`).
pub async fn send_event(
    client: &reqwest::Client,
    url: &str,
    signing_secret: &str,
    body: &Value,
    retry_num: Option<u32>,
) -> reqwest::Response {
    let body = body.to_string().into_bytes();
    let mut request = signed_request(client, url, signing_secret, now(), "application/json", body, None);
    if let Some(retry_num) = retry_num {
        request =
            request.header("X-Slack-Retry-Num", retry_num.to_string()).header("X-Slack-Retry-Reason", "http_timeout");
    }
    request.send().await.expect("the event reaches the server")
}

/// Posts `body` to `url` with the given `timestamp` and `content_type`, signed with
/// `signing_secret` unless `signature` replaces the signature, for forged and replayed requests.
pub async fn send_signed(
    client: &reqwest::Client,
    url: &str,
    signing_secret: &str,
    timestamp: i64,
    content_type: &str,
    body: Vec<u8>,
    signature: Option<String>,
) -> reqwest::Response {
    let request = signed_request(client, url, signing_secret, timestamp, content_type, body, signature);
    request.send().await.expect("the request reaches the server")
}

/// Posts a [`slash_command_form`] to `url` as Slack does: form-encoded, signed with the current time.
pub async fn send_command(
    client: &reqwest::Client,
    url: &str,
    signing_secret: &str,
    form: String,
) -> reqwest::Response {
    let content_type = "application/x-www-form-urlencoded";
    send_signed(client, url, signing_secret, now(), content_type, form.into_bytes(), None).await
}
