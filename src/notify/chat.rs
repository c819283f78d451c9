//! Chat replies through the provider APIs: the text rules every
//! bot reply goes through ([`sanitise`], [`mattermost_escape`], [`split`]) and thin
//! clients for the Telegram Bot API ([`TelegramApi`]) and the Mattermost REST API
//! ([`MattermostApi`]).
//!
//! Telegram messages are sent as plain text (no `parse_mode`), so Telegram needs no
//! escaping: only [`sanitise`]. Mattermost renders Markdown, so its replies are
//! sanitised and then escaped.
//!
//! Errors ([`ChatError`]) are a fixed code plus, at most, the HTTP status and the
//! provider's own short description with the bot token scrubbed out: Telegram puts
//! the token in the URL path, so no `reqwest` error text (which names the URL) is
//! ever kept. Responses are read up to a cap (64 KiB, 1 MiB for `getUpdates`);
//! redirects are never followed.

use futures_util::StreamExt;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, USER_AGENT};
use serde_json::{Value, json};
use std::time::Duration;

use crate::text::prefix_chars;

/// Longest Telegram reply message, in characters (Telegram's own limit is 4096).
pub const TELEGRAM_LIMIT: usize = 4000;
/// Longest Mattermost reply post, in characters (Mattermost's own limit is 16383).
pub const MATTERMOST_LIMIT: usize = 16000;
/// Reply text used when the answer is empty after [`sanitise`].
pub const EMPTY_REPLY: &str = "Akritas returned an empty response.";
/// Largest response read from `sendMessage`, `editMessageText` and the Mattermost API.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Largest `getUpdates` response read.
pub const MAX_UPDATES_BYTES: usize = 1024 * 1024;
/// Extra time a `getUpdates` request gets on top of its long-poll timeout.
pub const POLL_GRACE: Duration = Duration::from_secs(10);
/// Longest provider description kept in an error.
const MAX_DESCRIPTION_CHARS: usize = 200;
pub(super) const REDACTED: &str = "<redacted>";

/// Trims, turns `\r\n` and `\r` into `\n`, removes control characters other than
/// `\n` and `\t`, and replaces `@` by `＠` (U+FF20) so `@channel`, `@all`, `@here`
/// and `@user` never notify anyone. Empty text becomes [`EMPTY_REPLY`].
pub fn sanitise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push('\n');
            }
            '\n' | '\t' => out.push(c),
            '@' => out.push('＠'),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    let trimmed = out.trim();
    if trimmed.is_empty() { EMPTY_REPLY.to_string() } else { trimmed.to_string() }
}

/// Backslash-escapes the Markdown metacharacters `\` `` ` `` `*` `_` `~` `[` `]` `<`
/// `>` `#` `|`, so text from a model or an alert cannot render links, images, HTML,
/// headings or tables in Mattermost.
pub fn mattermost_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        if matches!(c, '\\' | '`' | '*' | '_' | '~' | '[' | ']' | '<' | '>' | '#' | '|') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits `text` into messages of at most `limit_chars` characters each.
///
/// Text that fits is returned unchanged as one message. Otherwise every part is
/// prefixed `(i/n)\n` and the prefix counts towards the limit. A part ends at a line
/// break when one lies in its last 20 % (the break itself is dropped), otherwise at
/// exactly the budget; cuts fall on character boundaries and never separate a
/// backslash from the character it escapes (see [`mattermost_escape`]).
pub fn split(text: &str, limit_chars: usize) -> Vec<String> {
    if text.chars().nth(limit_chars).is_none() {
        return vec![text.to_string()];
    }
    let mut digits = 1u32;
    loop {
        // "(" + i + "/" + n + ")\n" with i, n of at most `digits` digits.
        let prefix = 2 * digits as usize + 4;
        let parts = chunk(text, limit_chars.saturating_sub(prefix).max(1));
        if (parts.len() as u128) < 10u128.pow(digits) {
            let n = parts.len();
            return parts.into_iter().enumerate().map(|(i, part)| format!("({}/{n})\n{part}", i + 1)).collect();
        }
        digits += 1;
    }
}

/// Cuts `text` into pieces of at most `budget` (≥ 1) characters.
pub(super) fn chunk(text: &str, budget: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let head = prefix_chars(rest, budget);
        if head.len() == rest.len() {
            parts.push(rest);
            break;
        }
        // A line break within the last 20 % of the part, or right after it.
        let window = budget / 5;
        let window_start = head.char_indices().nth(budget - window).map_or(head.len(), |(i, _)| i);
        let after = rest[head.len()..].chars().next();
        let line_break = if after == Some('\n') && window > 0 {
            Some(head.len())
        } else {
            head[window_start..].rfind('\n').map(|i| window_start + i).filter(|&i| i > 0)
        };
        if let Some(at) = line_break {
            parts.push(&rest[..at]);
            rest = &rest[at + 1..];
            continue;
        }
        let mut end = head.len();
        let backslashes = head.bytes().rev().take_while(|&b| b == b'\\').count();
        if backslashes % 2 == 1 && end > 1 {
            end -= 1;
        }
        parts.push(&rest[..end]);
        rest = &rest[end..];
    }
    parts
}

/// Why a chat request failed. Messages never contain the bot token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    #[error(
        "invalid_base_url: the provider base URL must be an absolute http(s) URL without user info, query or fragment"
    )]
    InvalidBaseUrl,
    #[error("egress_refused: {0}")]
    EgressRefused(String),
    #[error(
        "invalid_token: the bot token is empty or contains characters a token cannot have; check the secret it comes from"
    )]
    InvalidToken,
    #[error("invalid_id: the {0} must be 1 to 64 ASCII letters, digits, '-' or '_'")]
    InvalidId(&'static str),
    #[error("create_client: the HTTP client could not be built")]
    CreateClient,
    #[error("encode_payload: the request body could not be encoded")]
    EncodePayload,
    #[error("timeout: the provider did not answer in time")]
    Timeout,
    #[error("request_failed: {0}; check the base URL and the network")]
    RequestFailed(super::cause::Cause),
    #[error("http_status: the provider answered HTTP {status}{}", describe(.description))]
    HttpStatus { status: u16, description: Option<String> },
    #[error("read_response: the provider's answer could not be read")]
    ReadResponse,
    #[error("response_too_large: the provider's answer is larger than {limit} bytes")]
    ResponseTooLarge { limit: usize },
    #[error("remote_rejected: the provider answered ok:false{}", describe(.description))]
    RemoteRejected { description: Option<String> },
    #[error("invalid_response: the provider's answer has no {0}")]
    InvalidResponse(&'static str),
    /// HTTP 429 with the seconds the provider asked to wait (`Retry-After`).
    #[error("rate_limited: the provider asked to wait {0} s")]
    RateLimited(u64),
}

fn describe(description: &Option<String>) -> String {
    description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default()
}

impl ChatError {
    /// The stable error code (first word of the message), for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            ChatError::InvalidBaseUrl => "invalid_base_url",
            ChatError::EgressRefused(_) => "egress_refused",
            ChatError::InvalidToken => "invalid_token",
            ChatError::InvalidId(_) => "invalid_id",
            ChatError::CreateClient => "create_client",
            ChatError::EncodePayload => "encode_payload",
            ChatError::Timeout => "timeout",
            ChatError::RequestFailed(_) => "request_failed",
            ChatError::HttpStatus { .. } => "http_status",
            ChatError::ReadResponse => "read_response",
            ChatError::ResponseTooLarge { .. } => "response_too_large",
            ChatError::RemoteRejected { .. } => "remote_rejected",
            ChatError::InvalidResponse(_) => "invalid_response",
            ChatError::RateLimited(_) => "rate_limited",
        }
    }
}

/// A provider's text cut short, on one line, with `token` removed.
pub(super) fn scrub(text: &str, token: &str) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let clean = if token.is_empty() { flat } else { flat.replace(token, REDACTED) };
    prefix_chars(clean.trim(), MAX_DESCRIPTION_CHARS).to_string()
}

/// `base_url` without its trailing `/`, when it is an absolute http(s) URL without
/// user info, query or fragment.
pub(super) fn checked_base(base_url: &str) -> Result<String, ChatError> {
    let trimmed = base_url.trim().trim_end_matches('/');
    let url = reqwest::Url::parse(trimmed).map_err(|_| ChatError::InvalidBaseUrl)?;
    let plain = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some()
        && url.username().is_empty()
        && url.password().is_none()
        && url.query().is_none()
        && url.fragment().is_none();
    if !plain {
        return Err(ChatError::InvalidBaseUrl);
    }
    // The bot token travels with every request (in the path for Telegram).
    crate::egress::Egress::current()
        .check_credential_url(trimmed)
        .map_err(|e| ChatError::EgressRefused(e.to_string()))?;
    Ok(trimmed.to_string())
}

fn checked_id<'a>(id: &'a str, what: &'static str) -> Result<&'a str, ChatError> {
    let ok =
        !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok { Ok(id) } else { Err(ChatError::InvalidId(what)) }
}

pub(super) fn http_client(timeout: Duration) -> Result<reqwest::Client, ChatError> {
    crate::outbound::resource_client(timeout).map_err(|_| ChatError::CreateClient)
}

/// Reads at most `limit` bytes of the body (also used by outbound delivery).
pub(super) async fn read_capped(resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, ChatError> {
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(piece) = stream.next().await {
        let piece = piece.map_err(|e| if e.is_timeout() { ChatError::Timeout } else { ChatError::ReadResponse })?;
        if body.len() + piece.len() > limit {
            return Err(ChatError::ResponseTooLarge { limit });
        }
        body.extend_from_slice(&piece);
    }
    Ok(body)
}

/// The error of a request that got no response.
pub(super) fn failed(error: &reqwest::Error, endpoint: &str) -> ChatError {
    if error.is_timeout() {
        ChatError::Timeout
    } else {
        ChatError::RequestFailed(super::cause::Cause::transport(error, endpoint))
    }
}

/// Sends `req` and returns the status and the (capped) body. The `reqwest` error is
/// dropped: its text names the URL, which holds the Telegram token.
pub(super) async fn exchange(req: reqwest::RequestBuilder, limit: usize) -> Result<(u16, Vec<u8>), ChatError> {
    let (client, request) = req.build_split();
    let request = request.map_err(|_| ChatError::EncodePayload)?;
    let endpoint = super::cause::endpoint(request.url().as_str());
    let resp = client.execute(request).await.map_err(|e| failed(&e, &endpoint))?;
    let status = resp.status().as_u16();
    let body = read_capped(resp, limit).await;
    match body {
        Ok(body) => Ok((status, body)),
        // A failed status says more than an unreadable error body.
        Err(_) if !(200..300).contains(&status) => Ok((status, Vec::new())),
        Err(e) => Err(e),
    }
}

pub(super) fn json_header(value: &'static str) -> HeaderValue {
    HeaderValue::from_static(value)
}

/// A Telegram Bot API client for one bot. `Debug` never shows the token.
pub struct TelegramApi {
    base_url: String,
    token: String,
    client: reqwest::Client,
}

impl std::fmt::Debug for TelegramApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramApi").field("base_url", &self.base_url).field("token", &REDACTED).finish()
    }
}

impl TelegramApi {
    /// A client for `base_url` (e.g. `https://api.telegram.org`) and the bot `token`;
    /// every call except `getUpdates` is bounded by `timeout`.
    pub fn new(base_url: &str, token: &str, timeout: Duration) -> Result<Self, ChatError> {
        let base_url = checked_base(base_url)?;
        let token = token.trim();
        // A token is `<bot id>:<secret>`; anything else would change the URL path.
        let ok =
            !token.is_empty() && token.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'-'));
        if !ok {
            return Err(ChatError::InvalidToken);
        }
        Ok(TelegramApi { base_url, token: token.to_string(), client: http_client(timeout)? })
    }

    /// Calls `method` with a JSON body; needs a 2xx answer with `"ok":true` and
    /// returns its `result`.
    async fn call(
        &self,
        method: &str,
        body: &Value,
        timeout: Option<Duration>,
        limit: usize,
    ) -> Result<Value, ChatError> {
        let body = serde_json::to_vec(body).map_err(|_| ChatError::EncodePayload)?;
        let mut req = self
            .client
            .post(format!("{}/bot{}/{method}", self.base_url, self.token))
            .header(CONTENT_TYPE, json_header("application/json"))
            .header(USER_AGENT, json_header("Akritas/telegram-chat"))
            .body(body);
        if let Some(timeout) = timeout {
            req = req.timeout(timeout);
        }
        let (status, body) = exchange(req, limit).await?;
        let parsed: Option<Value> = serde_json::from_slice(&body).ok();
        let description =
            parsed.as_ref().and_then(|v| v.get("description")).and_then(Value::as_str).map(|d| scrub(d, &self.token));
        if !(200..300).contains(&status) {
            return Err(ChatError::HttpStatus { status, description });
        }
        let Some(mut parsed) = parsed else {
            return Err(ChatError::InvalidResponse("JSON body"));
        };
        if parsed.get("ok").and_then(Value::as_bool) != Some(true) {
            return Err(ChatError::RemoteRejected { description });
        }
        Ok(parsed.get_mut("result").map(Value::take).unwrap_or(Value::Null))
    }

    /// `sendMessage` `{chat_id, text, message_thread_id?, reply_parameters?: {message_id,
    /// allow_sending_without_reply: true}}` as plain text; needs a 2xx answer with
    /// `ok:true` and returns `result.message_id`.
    pub async fn send_message(
        &self,
        chat_id: &str,
        text: &str,
        thread_id: Option<i64>,
        reply_to: Option<i64>,
    ) -> Result<i64, ChatError> {
        let mut body = json!({ "chat_id": chat_id, "text": text });
        if let Some(thread_id) = thread_id {
            body["message_thread_id"] = json!(thread_id);
        }
        if let Some(message_id) = reply_to {
            body["reply_parameters"] = json!({ "message_id": message_id, "allow_sending_without_reply": true });
        }
        let result = self.call("sendMessage", &body, None, MAX_RESPONSE_BYTES).await?;
        result.get("message_id").and_then(Value::as_i64).ok_or(ChatError::InvalidResponse("result.message_id"))
    }

    /// `editMessageText` `{chat_id, message_id, text}` as plain text.
    pub async fn edit_message_text(&self, chat_id: &str, message_id: i64, text: &str) -> Result<(), ChatError> {
        let body = json!({ "chat_id": chat_id, "message_id": message_id, "text": text });
        self.call("editMessageText", &body, None, MAX_RESPONSE_BYTES).await.map(drop)
    }

    /// `getUpdates` `{offset, timeout, allowed_updates: ["message"]}`: waits up to
    /// `timeout_seconds` for updates with `update_id >= offset` (and confirms every
    /// update below `offset`). The request may take [`POLL_GRACE`] longer; the answer
    /// is read up to [`MAX_UPDATES_BYTES`]. Returns the raw updates for the caller to
    /// decode.
    pub async fn get_updates(&self, offset: i64, timeout_seconds: u32) -> Result<Vec<Value>, ChatError> {
        let body = json!({ "offset": offset, "timeout": timeout_seconds, "allowed_updates": ["message"] });
        let timeout = Duration::from_secs(u64::from(timeout_seconds)) + POLL_GRACE;
        match self.call("getUpdates", &body, Some(timeout), MAX_UPDATES_BYTES).await? {
            Value::Array(updates) => Ok(updates),
            _ => Err(ChatError::InvalidResponse("result array")),
        }
    }

    /// Sends a reply: [`sanitise`]d, [`split`] at [`TELEGRAM_LIMIT`], each part in
    /// order in `thread_id` as a reply to the user's message `reply_to`. Returns the
    /// ids of the messages sent; stops at the first failure.
    pub async fn send_reply(
        &self,
        chat_id: &str,
        text: &str,
        thread_id: Option<i64>,
        reply_to: Option<i64>,
    ) -> Result<Vec<i64>, ChatError> {
        let mut sent = Vec::new();
        for part in split(&sanitise(text), TELEGRAM_LIMIT) {
            sent.push(self.send_message(chat_id, &part, thread_id, reply_to).await?);
        }
        Ok(sent)
    }
}

/// A Mattermost REST API client for one bot account. `Debug` never shows the token.
pub struct MattermostApi {
    base_url: String,
    token: String,
    client: reqwest::Client,
}

impl std::fmt::Debug for MattermostApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MattermostApi").field("base_url", &self.base_url).field("token", &REDACTED).finish()
    }
}

impl MattermostApi {
    /// A client for the Mattermost server at `base_url` with the bot account's access
    /// `token`; every call is bounded by `timeout`.
    pub fn new(base_url: &str, token: &str, timeout: Duration) -> Result<Self, ChatError> {
        let base_url = checked_base(base_url)?;
        let token = token.trim();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ChatError::InvalidToken);
        }
        Ok(MattermostApi { base_url, token: token.to_string(), client: http_client(timeout)? })
    }

    /// Sends `body` to `path` with the bearer token; needs a 2xx answer and returns it
    /// as JSON.
    async fn call(&self, method: reqwest::Method, path: &str, body: &Value) -> Result<Value, ChatError> {
        let mut bearer =
            HeaderValue::from_str(&format!("Bearer {}", self.token)).map_err(|_| ChatError::InvalidToken)?;
        bearer.set_sensitive(true);
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base_url))
            .header(USER_AGENT, json_header("Akritas/mattermost-chat"))
            .header(AUTHORIZATION, bearer);
        if !body.is_null() {
            let body = serde_json::to_vec(body).map_err(|_| ChatError::EncodePayload)?;
            req = req.header(CONTENT_TYPE, json_header("application/json")).body(body);
        }
        let (status, body) = exchange(req, MAX_RESPONSE_BYTES).await?;
        let parsed: Option<Value> = serde_json::from_slice(&body).ok();
        if !(200..300).contains(&status) {
            // Mattermost's error `id` (e.g. `api.context.session_expired.app_error`) names the cause.
            let description =
                parsed.as_ref().and_then(|v| v.get("id")).and_then(Value::as_str).map(|d| scrub(d, &self.token));
            return Err(ChatError::HttpStatus { status, description });
        }
        parsed.ok_or(ChatError::InvalidResponse("JSON body"))
    }

    /// `POST /api/v4/posts` `{channel_id, message, root_id?}`; returns the new post's id.
    /// The message is sent as given: escape model text with [`mattermost_escape`]
    /// (or use [`MattermostApi::send_reply`]).
    pub async fn create_post(
        &self,
        channel_id: &str,
        message: &str,
        root_id: Option<&str>,
    ) -> Result<String, ChatError> {
        let mut body = json!({ "channel_id": channel_id, "message": message });
        if let Some(root_id) = root_id.filter(|r| !r.is_empty()) {
            body["root_id"] = json!(root_id);
        }
        let post = self.call(reqwest::Method::POST, "/api/v4/posts", &body).await?;
        post.get("id").and_then(Value::as_str).map(str::to_string).ok_or(ChatError::InvalidResponse("post id"))
    }

    /// `GET /api/v4/posts/{post_id}`: the thread root of a post (`None` when the post
    /// is itself a root). Outgoing webhooks do not say which thread a post is in.
    pub async fn thread_root(&self, post_id: &str) -> Result<Option<String>, ChatError> {
        let path = format!("/api/v4/posts/{}", checked_id(post_id, "post id")?);
        let post = self.call(reqwest::Method::GET, &path, &Value::Null).await?;
        Ok(post.get("root_id").and_then(Value::as_str).filter(|r| !r.is_empty()).map(str::to_string))
    }

    /// `PUT /api/v4/posts/{post_id}/patch` `{message}`.
    pub async fn patch_post(&self, post_id: &str, message: &str) -> Result<(), ChatError> {
        let path = format!("/api/v4/posts/{}/patch", checked_id(post_id, "post id")?);
        self.call(reqwest::Method::PUT, &path, &json!({ "message": message })).await.map(drop)
    }

    /// Sends a reply: [`sanitise`]d, [`mattermost_escape`]d, [`split`] at
    /// [`MATTERMOST_LIMIT`], each part in order in the thread of `root_id`, or of the
    /// user's post `post_id` when the post is not in a thread. Returns the ids of the
    /// posts created; stops at the first failure.
    pub async fn send_reply(
        &self,
        channel_id: &str,
        text: &str,
        root_id: Option<&str>,
        post_id: Option<&str>,
    ) -> Result<Vec<String>, ChatError> {
        let root = root_id.filter(|r| !r.is_empty()).or(post_id.filter(|p| !p.is_empty()));
        let mut sent = Vec::new();
        for part in split(&mattermost_escape(&sanitise(text)), MATTERMOST_LIMIT) {
            sent.push(self.create_post(channel_id, &part, root).await?);
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitise_neutralises_mentions_and_controls() {
        let s = sanitise("  hi @channel @all @here @alice\r\nnext\rline\u{0}\u{7}\u{1b}[31m\ttab  ");
        assert_eq!(s, "hi ＠channel ＠all ＠here ＠alice\nnext\nline[31m\ttab");
        assert!(!s.contains('@'));
        assert_eq!(sanitise(""), EMPTY_REPLY);
        assert_eq!(sanitise(" \r\n\t\u{0} "), EMPTY_REPLY);
    }

    #[test]
    fn escape_defuses_links_images_and_html() {
        assert_eq!(mattermost_escape("[x](http://evil)"), "\\[x\\](http://evil)");
        assert_eq!(mattermost_escape("![img](http://evil/p.png)"), "!\\[img\\](http://evil/p.png)");
        assert_eq!(mattermost_escape("<script>alert(1)</script>"), "\\<script\\>alert(1)\\</script\\>");
        assert_eq!(mattermost_escape("# h | *b* _i_ ~s~ `c` \\"), "\\# h \\| \\*b\\* \\_i\\_ \\~s\\~ \\`c\\` \\\\");
        assert_eq!(mattermost_escape("plain text."), "plain text.");
    }

    #[test]
    fn split_leaves_fitting_text_alone() {
        assert_eq!(split("short", 10), vec!["short".to_string()]);
        assert_eq!(split("exactly10!", 10), vec!["exactly10!".to_string()]);
        assert_eq!(split("", 10), vec![String::new()]);
    }

    #[test]
    fn split_prefixes_stay_within_the_limit() {
        let text = "x".repeat(10_000);
        let parts = split(&text, TELEGRAM_LIMIT);
        assert_eq!(parts.len(), 3);
        for (i, part) in parts.iter().enumerate() {
            assert!(part.starts_with(&format!("({}/3)\n", i + 1)), "{}", &part[..10]);
            assert!(part.chars().count() <= TELEGRAM_LIMIT);
        }
        let joined: String = parts.iter().map(|p| p.split_once('\n').unwrap().1).collect();
        assert_eq!(joined, text);
        // Ten or more parts need wider prefixes, still within the limit.
        let many = split(&"y".repeat(2_000), 100);
        assert!(many.len() >= 10);
        assert!(many[0].starts_with(&format!("(1/{})\n", many.len())));
        assert!(many.iter().all(|p| p.chars().count() <= 100));
        assert_eq!(many.iter().map(|p| p.split_once('\n').unwrap().1).collect::<String>(), "y".repeat(2_000));
    }

    #[test]
    fn split_prefers_line_breaks_near_the_end() {
        // Budget is 100 - 6 = 94 characters; a break at 85 lies in the last 20 %.
        let text = format!("{}\n{}", "a".repeat(85), "b".repeat(150));
        let parts = split(&text, 100);
        assert_eq!(parts[0], format!("(1/3)\n{}", "a".repeat(85)));
        assert!(parts[1].starts_with("(2/3)\nbbb"));
        // A break early in the part is not used: the cut is at the budget.
        let early = format!("{}\n{}", "a".repeat(10), "b".repeat(300));
        let parts = split(&early, 100);
        assert_eq!(parts[0].chars().count(), 100);
        assert!(parts[0].contains('\n'));
    }

    #[test]
    fn split_never_cuts_inside_a_character_or_an_escape() {
        let text = "é🚀ж".repeat(3_000);
        let parts = split(&text, TELEGRAM_LIMIT);
        assert!(parts.iter().all(|p| p.chars().count() <= TELEGRAM_LIMIT));
        assert_eq!(parts.iter().map(|p| p.split_once('\n').unwrap().1).collect::<String>(), text);
        // Budget 12 - 6 = 6: "aaaaa\\" would end on an escaping backslash.
        let escaped = mattermost_escape("aaaaa*bbbbbbbbbbbb");
        let parts = split(&escaped, 12);
        assert_eq!(parts[0], "(1/4)\naaaaa");
        assert!(parts[1].starts_with("(2/4)\n\\*"));
        assert!(parts.iter().all(|p| p.chars().count() <= 12));
    }

    #[test]
    fn scrub_removes_the_token() {
        let s = scrub("Bad Request: bot123:SECRET is\nwrong", "123:SECRET");
        assert_eq!(s, "Bad Request: bot<redacted> is wrong");
        assert_eq!(scrub(&"d".repeat(500), "t").chars().count(), MAX_DESCRIPTION_CHARS);
    }

    #[test]
    fn construction_checks_url_and_token_without_echoing_them() {
        let t = Duration::from_secs(5);
        assert_eq!(TelegramApi::new("ftp://x", "1:a", t).unwrap_err(), ChatError::InvalidBaseUrl);
        assert_eq!(TelegramApi::new("https://u:p@x", "1:a", t).unwrap_err(), ChatError::InvalidBaseUrl);
        assert_eq!(TelegramApi::new("https://x?q=1", "1:a", t).unwrap_err(), ChatError::InvalidBaseUrl);
        let err = TelegramApi::new("https://x", "1:a/../SECRET", t).unwrap_err();
        assert_eq!(err, ChatError::InvalidToken);
        assert!(!err.to_string().contains("SECRET"));
        assert_eq!(MattermostApi::new("https://mm", "tok en", t).unwrap_err(), ChatError::InvalidToken);
        let api = TelegramApi::new("https://api.telegram.org/", "1:SECRET", t).unwrap();
        assert!(!format!("{api:?}").contains("SECRET"));
        assert_eq!(api.base_url, "https://api.telegram.org");
    }
}
