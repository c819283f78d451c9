//! A Mattermost stand-in for the two REST calls a bot account makes, speaking the real wire
//! format (`https://api.mattermost.com`) and recording every request, plus builders for what
//! Mattermost itself sends to an integration (outgoing webhook, slash command).
//!
//! - `POST /api/v4/posts` `{channel_id, message, root_id?}` with `Authorization: Bearer
//!   <token>`: `201` and the created post (26-character id, `create_at` in ms). A reply's
//!   `root_id` must name an existing root post of the same channel, as on Mattermost.
//! - `PUT /api/v4/posts/{id}/patch` `{message?}`: `200` and the updated post (`edit_at` set).
//!
//! A missing or wrong token answers `401` with Mattermost's error body
//! (`api.context.session_expired.app_error`). [`MattermostStandIn::script_next`] makes the
//! next call of a route answer something else. Stops when dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The bot account's user id (author of every post created through the API).
pub const BOT_USER_ID: &str = "b0tuser1d000000000000000aa";
/// Mattermost's post length limit, in characters.
pub const MESSAGE_LIMIT: usize = 16383;
/// The team in the payloads Mattermost sends.
pub const TEAM_ID: &str = "kwoknj9nwpypzgzy78wkw516qe";

/// One request the stand-in got.
#[derive(Clone, Debug)]
pub struct MattermostRequest {
    /// `POST`, `PUT`, ...
    pub method: String,
    pub path: String,
    /// Whether `Authorization: Bearer <token>` was right.
    pub authorized: bool,
    /// The `User-Agent` header, empty when absent.
    pub user_agent: String,
    /// The JSON body (`null` when it is not JSON).
    pub body: Value,
}

#[derive(Default)]
struct State {
    requests: Vec<MattermostRequest>,
    /// Posts in creation order.
    posts: Vec<Value>,
    scripted: HashMap<String, VecDeque<(u16, String)>>,
}

struct Shared {
    token: String,
    state: Mutex<State>,
}

/// A running stand-in; stops when dropped.
pub struct MattermostStandIn {
    /// The server's base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MattermostStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MattermostStandIn {
    /// Serves a Mattermost whose bot account has the access `token`, on a free loopback port.
    pub async fn start(token: &str) -> MattermostStandIn {
        let shared = Arc::new(Shared { token: token.to_string(), state: Mutex::new(State::default()) });
        let handler_state = shared.clone();
        let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let shared = handler_state.clone();
            async move { handle(&shared, &method, uri.path(), &headers, &body) }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MattermostStandIn { url, shared, task }
    }

    /// The next authorized call of `route` (`create_post` or `patch_post`) answers `status`
    /// with `body` (as `application/json`) instead; the request is still recorded.
    pub fn script_next(&self, route: &str, status: u16, body: impl Into<String>) {
        let mut state = self.shared.state.lock().unwrap();
        state.scripted.entry(route.to_string()).or_default().push_back((status, body.into()));
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<MattermostRequest> {
        self.shared.state.lock().unwrap().requests.clone()
    }

    /// Every post created, as it is now (patches applied), in creation order.
    pub fn posts(&self) -> Vec<Value> {
        self.shared.state.lock().unwrap().posts.clone()
    }
}

/// A new 26-character Mattermost id (lower-case base32, Mattermost's alphabet).
pub fn new_id() -> String {
    const ALPHABET: &[u8] = b"ybndrfg8ejkmcpqxot1uwisza345h769";
    (0..26).map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char).collect()
}

fn now_millis() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Mattermost's `AppError` body.
fn error(status: u16, id: &str, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let body =
        json!({"id": id, "message": message, "detailed_error": "", "request_id": new_id(), "status_code": status});
    (code, axum::Json(body)).into_response()
}

fn handle(shared: &Shared, method: &Method, path: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .is_some_and(|t| t == shared.token);
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let mut state = shared.state.lock().unwrap();
    state.requests.push(MattermostRequest {
        method: method.to_string(),
        path: path.to_string(),
        authorized,
        user_agent,
        body: parsed.clone().unwrap_or(Value::Null),
    });
    let route = match (method, path.strip_prefix("/api/v4/posts")) {
        (&Method::POST, Some("")) => "create_post",
        (&Method::GET, Some(rest)) if rest.starts_with('/') && !rest[1..].contains('/') => "get_post",
        (&Method::PUT, Some(rest)) if rest.ends_with("/patch") => "patch_post",
        _ => return error(404, "api.context.404.app_error", "Sorry, we could not find the page."),
    };
    if !authorized {
        return error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.");
    }
    if let Some((status, body)) = state.scripted.get_mut(route).and_then(VecDeque::pop_front) {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    if route == "get_post" {
        let id = &path["/api/v4/posts/".len()..];
        return match state.posts.iter().find(|p| p["id"] == id) {
            Some(post) => (StatusCode::OK, axum::Json(post.clone())).into_response(),
            None => error(404, "app.post.get.app_error", "Unable to get the post."),
        };
    }
    let Some(params @ Value::Object(_)) = parsed else {
        return error(400, "api.context.invalid_body_param.app_error", "Invalid or missing post in request body.");
    };
    if route == "create_post" {
        create_post(&mut state, &params)
    } else {
        let id = path.trim_start_matches("/api/v4/posts/").trim_end_matches("/patch");
        patch_post(&mut state, id, &params)
    }
}

fn valid_message(message: &str) -> Option<Response> {
    if message.trim().is_empty() {
        return Some(error(
            400,
            "api.post.create_post.message_and_files.app_error",
            "Post must have a message or a file.",
        ));
    }
    if message.chars().count() > MESSAGE_LIMIT {
        return Some(error(400, "model.post.is_valid.message_length.app_error", "Message is too long."));
    }
    None
}

fn create_post(state: &mut State, params: &Value) -> Response {
    let channel_id = params["channel_id"].as_str().unwrap_or_default();
    if channel_id.len() != 26 || !channel_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return error(
            400,
            "api.context.invalid_body_param.app_error",
            "Invalid or missing channel_id in request body.",
        );
    }
    let message = params["message"].as_str().unwrap_or_default();
    if let Some(response) = valid_message(message) {
        return response;
    }
    let root_id = params["root_id"].as_str().unwrap_or_default();
    if !root_id.is_empty() {
        let Some(root) = state.posts.iter().find(|p| p["id"] == root_id) else {
            return error(400, "api.post.create_post.root_id.app_error", "Invalid RootId parameter.");
        };
        if root["channel_id"] != channel_id {
            return error(
                400,
                "api.post.create_post.channel_root_id.app_error",
                "Invalid ChannelId for RootId parameter.",
            );
        }
        if root["root_id"].as_str().is_some_and(|r| !r.is_empty()) {
            return error(400, "api.post.create_post.root_id.app_error", "Invalid RootId parameter.");
        }
    }
    let now = now_millis();
    let post = json!({
        "id": new_id(), "create_at": now, "update_at": now, "edit_at": 0, "delete_at": 0,
        "is_pinned": false, "user_id": BOT_USER_ID, "channel_id": channel_id, "root_id": root_id,
        "original_id": "", "message": message, "type": "", "props": {}, "hashtags": "",
        "pending_post_id": "", "reply_count": 0, "metadata": {},
    });
    state.posts.push(post.clone());
    (StatusCode::CREATED, axum::Json(post)).into_response()
}

fn patch_post(state: &mut State, id: &str, params: &Value) -> Response {
    let Some(post) = state.posts.iter_mut().find(|p| p["id"] == id) else {
        return error(404, "app.post.get.app_error", "Unable to get the post.");
    };
    if let Some(message) = params.get("message").and_then(Value::as_str) {
        if let Some(response) = valid_message(message) {
            return response;
        }
        post["message"] = json!(message);
    }
    let now = now_millis();
    post["edit_at"] = json!(now);
    post["update_at"] = json!(now);
    (StatusCode::OK, axum::Json(post.clone())).into_response()
}

/// The JSON body of an outgoing webhook (`Content-Type: application/json`), as Mattermost
/// sends it when a message in a public channel matches the trigger word: `timestamp` in
/// milliseconds, `file_ids` a comma-separated string.
pub fn outgoing_webhook_json(
    token: &str,
    channel_id: &str,
    user_id: &str,
    post_id: &str,
    text: &str,
    trigger_word: &str,
) -> Value {
    json!({
        "token": token, "team_id": TEAM_ID, "team_domain": "ops", "channel_id": channel_id,
        "channel_name": "town-square", "timestamp": now_millis(), "user_id": user_id,
        "user_name": "alice", "post_id": post_id, "text": text, "trigger_word": trigger_word, "file_ids": "",
    })
}

/// The same outgoing webhook as `application/x-www-form-urlencoded` (Mattermost's default
/// content type), where `timestamp` is in seconds.
pub fn outgoing_webhook_form(
    token: &str,
    channel_id: &str,
    user_id: &str,
    post_id: &str,
    text: &str,
    trigger_word: &str,
) -> String {
    let seconds = (now_millis() / 1000).to_string();
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("token", token)
        .append_pair("team_id", TEAM_ID)
        .append_pair("team_domain", "ops")
        .append_pair("channel_id", channel_id)
        .append_pair("channel_name", "town-square")
        .append_pair("timestamp", &seconds)
        .append_pair("user_id", user_id)
        .append_pair("user_name", "alice")
        .append_pair("post_id", post_id)
        .append_pair("text", text)
        .append_pair("trigger_word", trigger_word)
        .append_pair("file_ids", "")
        .finish()
}

/// The `application/x-www-form-urlencoded` body of a custom slash command request
/// (`/akritas why is api slow` → `command=/akritas`, `text=why is api slow`). Mattermost also
/// sends the token as `Authorization: Token <token>`; there is no `post_id`.
pub fn slash_command_form(token: &str, channel_id: &str, user_id: &str, text: &str, command: &str) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("channel_id", channel_id)
        .append_pair("channel_name", "town-square")
        .append_pair("command", command)
        .append_pair("response_url", "http://127.0.0.1:1/hooks/commands/xbrkb8p393gjpq5cawei7npije")
        .append_pair("team_domain", "ops")
        .append_pair("team_id", TEAM_ID)
        .append_pair("text", text)
        .append_pair("token", token)
        .append_pair("trigger_id", "bjZ4NG9pZ2Z4amdxYmM6dXNlcjpzbGFzaA==")
        .append_pair("user_id", user_id)
        .append_pair("user_name", "alice")
        .finish()
}
