//! The Slack Web API as the host uses it ([`SlackApi`]): `auth.test`, `chat.postMessage`
//! with Block Kit and a plain-text fallback, `apps.connections.open` for Socket Mode, and
//! slash-command answers through their `response_url`; and the text rule every Slack
//! message follows ([`slack_escape`]).
//!
//! Slack renders mrkdwn, where `<!channel>`, `<@U…>` and `<https://…|text>` are mentions
//! and links: every text is [`sanitise`]d (`@` neutralised) and then `&`, `<` and `>` are
//! escaped as Slack asks, so nothing an alert, a person or the model wrote can mention a
//! channel or forge a link.
//!
//! Slack answers errors with HTTP 200 and `{"ok": false, "error": "<code>"}`: the code is
//! kept (never the token). A 429 carries `Retry-After`, which the caller waits out
//! ([`ChatError::RateLimited`]). Posts to one channel are paced at Slack's rate for
//! `chat.postMessage` (one a second, with a short burst), shared by every sender in the
//! process.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use serde_json::{Value, json};

use super::chat::{
    ChatError, MAX_RESPONSE_BYTES, REDACTED, checked_base, http_client, json_header, read_capped, sanitise, scrub,
};
use crate::text::prefix_chars;

/// Default Slack Web API base URL.
pub const SLACK_DEFAULT_BASE_URL: &str = "https://slack.com/api";
/// Longest text of one `section` block (Slack's own limit).
pub const SECTION_LIMIT: usize = 3000;
/// Longest reply message, in characters: the rest goes in further messages (Slack
/// truncates a text over 40,000; blocks hold at most 50 sections).
pub const SLACK_LIMIT: usize = 12000;
/// The longest wait a `Retry-After` may ask for before the call fails instead.
pub const MAX_RETRY_AFTER: u64 = 60;
/// Tries of a reply's call while Slack answers 429.
const REPLY_ATTEMPTS: u32 = 3;
/// Channels whose pace is remembered before the idle ones are forgotten.
const MAX_PACED_CHANNELS: usize = 4096;
/// Posts one channel may take at once before the pace of one a second applies.
const CHANNEL_BURST: f64 = 5.0;

/// Escapes the three characters Slack's mrkdwn gives meaning to, as Slack's docs ask:
/// `&` → `&amp;`, `<` → `&lt;`, `>` → `&gt;`.
pub fn slack_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// The Block Kit of a message: its (already escaped) text in `section` blocks of at most
/// [`SECTION_LIMIT`] characters, split at line ends where it can be.
pub fn blocks(text: &str) -> Value {
    let sections: Vec<Value> = super::chat::chunk(text, SECTION_LIMIT)
        .into_iter()
        .map(|part| json!({ "type": "section", "text": { "type": "mrkdwn", "text": part, "verbatim": true } }))
        .collect();
    Value::Array(sections)
}

/// A slot per channel: when its next post may go and how many it may burst.
struct Bucket {
    tokens: f64,
    at: Instant,
}

static PACE: LazyLock<Mutex<HashMap<String, Bucket>>> = LazyLock::new(Mutex::default);

/// How long a post to `channel` must wait to keep to one a second (after a burst of
/// [`CHANNEL_BURST`]); takes its slot.
fn pace(channel: &str) -> Duration {
    let mut buckets = PACE.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    if buckets.len() >= MAX_PACED_CHANNELS {
        // A channel idle for the burst's refill time is full again: forgetting it changes nothing.
        buckets.retain(|_, b| now.saturating_duration_since(b.at).as_secs_f64() < CHANNEL_BURST);
    }
    let bucket = buckets.entry(channel.to_string()).or_insert(Bucket { tokens: CHANNEL_BURST, at: now });
    let refilled = (bucket.tokens + now.saturating_duration_since(bucket.at).as_secs_f64()).min(CHANNEL_BURST);
    bucket.tokens = refilled - 1.0;
    bucket.at = now;
    if bucket.tokens >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-bucket.tokens) }
}

/// Tries a reply's call up to [`REPLY_ATTEMPTS`] times while Slack answers 429, waiting
/// out each `Retry-After` (at most [`MAX_RETRY_AFTER`]).
async fn waiting_out_rate_limits<T, F, Fut>(mut call: F) -> Result<T, ChatError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ChatError>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Err(ChatError::RateLimited(seconds)) if seconds <= MAX_RETRY_AFTER && attempt < REPLY_ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(seconds)).await;
            }
            other => return other,
        }
    }
}

/// Sends a request: its 2xx response, a [`ChatError::RateLimited`] for a 429 (with its
/// `Retry-After`), or the HTTP error.
async fn send(request: reqwest::RequestBuilder) -> Result<reqwest::Response, ChatError> {
    let (client, request) = request.build_split();
    send_built(&client, request.map_err(|_| ChatError::EncodePayload)?).await
}

/// [`send`] of a built request.
async fn send_built(client: &reqwest::Client, request: reqwest::Request) -> Result<reqwest::Response, ChatError> {
    let endpoint = super::cause::endpoint(request.url().as_str());
    let resp = client.execute(request).await.map_err(|e| super::chat::failed(&e, &endpoint))?;
    let status = resp.status().as_u16();
    if status == 429 {
        let wait = resp.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()?.trim().parse().ok());
        return Err(ChatError::RateLimited(wait.unwrap_or(1)));
    }
    if !(200..300).contains(&status) {
        return Err(ChatError::HttpStatus { status, description: None });
    }
    Ok(resp)
}

/// A Slack Web API client for one token. `Debug` hides the token.
pub struct SlackApi {
    base_url: String,
    token: String,
    client: reqwest::Client,
}

impl std::fmt::Debug for SlackApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackApi").field("base_url", &self.base_url).field("token", &REDACTED).finish()
    }
}

/// Who the bot is, as `auth.test` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BotIdentity {
    /// The workspace (`T…`).
    pub team_id: String,
    /// The bot's own user id (`U…`): its messages are not answered.
    pub user_id: String,
}

impl SlackApi {
    /// A client for `base_url` (default [`SLACK_DEFAULT_BASE_URL`]) with a bot (`xoxb-…`)
    /// or app-level (`xapp-…`) token.
    pub fn new(base_url: &str, token: &str, timeout: Duration) -> Result<Self, ChatError> {
        let base_url = checked_base(base_url)?;
        let token = token.trim();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ChatError::InvalidToken);
        }
        Ok(SlackApi { base_url, token: token.to_string(), client: http_client(timeout)? })
    }

    /// Calls a Web API method with a JSON body; the `ok: true` answer, or the error.
    async fn call(&self, method: &str, body: &Value) -> Result<Value, ChatError> {
        let mut bearer =
            HeaderValue::from_str(&format!("Bearer {}", self.token)).map_err(|_| ChatError::InvalidToken)?;
        bearer.set_sensitive(true);
        let body = serde_json::to_vec(body).map_err(|_| ChatError::EncodePayload)?;
        let request = self
            .client
            .post(format!("{}/{method}", self.base_url))
            .header(CONTENT_TYPE, json_header("application/json; charset=utf-8"))
            .header(USER_AGENT, json_header("Akritas/slack"))
            .header(AUTHORIZATION, bearer)
            .body(body);
        let parsed = self.exchange(request).await?;
        if parsed.get("ok").and_then(Value::as_bool) != Some(true) {
            let description = parsed.get("error").and_then(Value::as_str).map(|d| scrub(d, &self.token));
            return Err(ChatError::RemoteRejected { description });
        }
        Ok(parsed)
    }

    /// Sends a request; its JSON answer, or the error.
    async fn exchange(&self, request: reqwest::RequestBuilder) -> Result<Value, ChatError> {
        let body = read_capped(send(request).await?, MAX_RESPONSE_BYTES).await?;
        serde_json::from_slice(&body).map_err(|_| ChatError::InvalidResponse("JSON body"))
    }

    /// `auth.test`: the workspace and the bot's own user id.
    pub async fn auth_test(&self) -> Result<BotIdentity, ChatError> {
        let answer = self.call("auth.test", &json!({})).await?;
        let field = |name: &'static str| {
            answer.get(name).and_then(Value::as_str).map(str::to_string).ok_or(ChatError::InvalidResponse(name))
        };
        Ok(BotIdentity { team_id: field("team_id")?, user_id: field("user_id")? })
    }

    /// `chat.postMessage` of an already escaped mrkdwn `text` to `channel` (in the thread
    /// `thread_ts` when given), as blocks with the text as fallback; the new message's `ts`.
    /// Waits its turn in the channel's pace first.
    pub async fn post_message(&self, channel: &str, text: &str, thread_ts: Option<&str>) -> Result<String, ChatError> {
        let wait = pace(channel);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let mut body = json!({
            "channel": channel,
            "text": prefix_chars(text, SLACK_LIMIT),
            "blocks": blocks(text),
            "unfurl_links": false,
            "unfurl_media": false,
        });
        if let Some(ts) = thread_ts.filter(|t| !t.is_empty()) {
            body["thread_ts"] = json!(ts);
        }
        let answer = self.call("chat.postMessage", &body).await?;
        answer.get("ts").and_then(Value::as_str).map(str::to_string).ok_or(ChatError::InvalidResponse("ts"))
    }

    /// A reply to a person: sanitised, escaped, split into messages of at most
    /// [`SLACK_LIMIT`] characters, each posted in `thread_ts` when given.
    pub async fn send_reply(
        &self,
        channel: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> Result<Vec<String>, ChatError> {
        let mut sent = Vec::new();
        for part in super::chat::split(&slack_escape(&sanitise(text)), SLACK_LIMIT) {
            sent.push(waiting_out_rate_limits(|| self.post_message(channel, &part, thread_ts)).await?);
        }
        Ok(sent)
    }

    /// `apps.connections.open` with an app-level token: the Socket Mode WebSocket URL.
    pub async fn open_connection(&self) -> Result<String, ChatError> {
        let answer = self.call("apps.connections.open", &json!({})).await?;
        answer.get("url").and_then(Value::as_str).map(str::to_string).ok_or(ChatError::InvalidResponse("url"))
    }

    /// Answers a slash command through its `response_url` (visible in the channel), split
    /// like [`Self::send_reply`]. The URL must be on an origin [`response_url_allowed`] takes.
    pub async fn respond(&self, response_url: &str, text: &str) -> Result<(), ChatError> {
        if !self.response_url_allowed(response_url) {
            return Err(ChatError::InvalidBaseUrl);
        }
        crate::egress::Egress::current()
            .check_credential_url(response_url)
            .map_err(|e| ChatError::EgressRefused(e.to_string()))?;
        for part in super::chat::split(&slack_escape(&sanitise(text)), SLACK_LIMIT) {
            let body = json!({ "response_type": "in_channel", "text": part, "blocks": blocks(&part) });
            let request = self
                .client
                .post(response_url)
                .header(CONTENT_TYPE, json_header("application/json; charset=utf-8"))
                .header(USER_AGENT, json_header("Akritas/slack"))
                .body(serde_json::to_vec(&body).map_err(|_| ChatError::EncodePayload)?);
            let request = request.build().map_err(|_| ChatError::EncodePayload)?;
            waiting_out_rate_limits(|| async {
                let again = request.try_clone().ok_or(ChatError::EncodePayload)?;
                send_built(&self.client, again).await.map(drop)
            })
            .await?;
        }
        Ok(())
    }

    /// Whether a slash command's `response_url` may be posted to: `https://hooks.slack.com`,
    /// or the origin of the configured Web API base URL (a Slack-compatible server). A
    /// signed request carries it, but the host never posts where its operator did not point.
    pub fn response_url_allowed(&self, response_url: &str) -> bool {
        let Ok(url) = reqwest::Url::parse(response_url) else { return false };
        let origin = url.origin().ascii_serialization();
        let base = reqwest::Url::parse(&self.base_url).map(|b| b.origin().ascii_serialization()).unwrap_or_default();
        url.username().is_empty() && url.password().is_none() && (origin == "https://hooks.slack.com" || origin == base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_makes_mentions_and_links_inert() {
        let escaped = slack_escape(&sanitise("<!channel> <https://evil|click> @here a&b <@U1>"));
        assert_eq!(escaped, "&lt;!channel&gt; &lt;https://evil|click&gt; ＠here a&amp;b &lt;＠U1&gt;");
        assert!(!escaped.contains('<') && !escaped.contains('>') && !escaped.contains('@'));
    }

    #[test]
    fn blocks_hold_at_most_a_section_each() {
        let text = "line\n".repeat(1500);
        let Value::Array(sections) = blocks(&text) else { panic!("an array") };
        assert!(sections.len() >= 3, "{}", sections.len());
        for section in &sections {
            assert!(section["text"]["text"].as_str().unwrap().chars().count() <= SECTION_LIMIT);
        }
    }

    #[test]
    fn a_channel_bursts_then_keeps_to_one_post_a_second() {
        let channel = "C0PACETEST";
        let waits: Vec<Duration> = (0..7).map(|_| pace(channel)).collect();
        assert!(waits[..5].iter().all(Duration::is_zero), "{waits:?}");
        assert!(waits[5] > Duration::from_millis(900) && waits[6] > Duration::from_millis(1900), "{waits:?}");
        assert!(pace("C0OTHER").is_zero());
    }

    #[test]
    fn idle_channels_are_forgotten_once_many_are_remembered() {
        let long_ago = Instant::now() - Duration::from_secs(60);
        {
            let mut buckets = PACE.lock().unwrap();
            for i in 0..MAX_PACED_CHANNELS {
                buckets.insert(format!("C0IDLE{i}"), Bucket { tokens: 0.0, at: long_ago });
            }
        }
        assert!(pace("C0FRESH").is_zero());
        let buckets = PACE.lock().unwrap();
        assert!(!buckets.keys().any(|k| k.starts_with("C0IDLE")), "{} remembered", buckets.len());
        assert!(buckets.contains_key("C0FRESH"));
    }

    #[test]
    fn response_urls_go_only_to_slack_or_the_configured_server() {
        let api = SlackApi::new("http://127.0.0.1:9/api", "xoxb-1", Duration::from_secs(1)).unwrap();
        assert!(api.response_url_allowed("https://hooks.slack.com/commands/T1/2/3"));
        assert!(api.response_url_allowed("http://127.0.0.1:9/response/1"));
        assert!(!api.response_url_allowed("https://evil.example/commands"));
        assert!(!api.response_url_allowed("https://user@hooks.slack.com/x"));
        assert!(format!("{api:?}").contains(REDACTED) && !format!("{api:?}").contains("xoxb"));
    }
}
