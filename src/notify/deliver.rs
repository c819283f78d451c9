//! HTTP delivery of notifications to webhook / Telegram / Mattermost / Slack receivers.
//!
//! Errors are reported only as fixed error codes (see [`DeliveryError`]), so an
//! outcome can never leak a token or a URL containing one (Telegram puts the
//! bot token in the URL path). Response bodies are read up to 64 KiB and
//! discarded (never logged).

use super::cause::{Cause, endpoint};
use super::chat::{ChatError, MAX_RESPONSE_BYTES, read_capped};
pub use super::error::DeliveryError;
use super::message::{
    Notification, Payload, WEBHOOK_CHECKED_EVENT, WEBHOOK_EVENT, WEBHOOK_FAILED_EVENT, WEBHOOK_MAX_BODY_BYTES,
    WEBHOOK_RESOLVED_EVENT, checked_webhook_body, failed_webhook_body, resolved_webhook_body, webhook_body,
};
use super::slack::{MAX_RETRY_AFTER, SlackApi};
pub use super::target::{TELEGRAM_DEFAULT_BASE_URL, Target};
use futures_util::future::join_all;
use hmac::{Hmac, Mac};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, USER_AGENT};
use sha2::Sha256;

use crate::resources::notification_receiver::ReceiverType;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Retry policy: up to `attempts` tries (min 1), exponential backoff starting at
/// `base_delay`, each attempt bounded by `timeout` (request + response body).
/// Only connect errors, timeouts, 429 and 5xx are retried.
/// `attempts: 1` means a single try, no retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub base_delay: Duration,
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { attempts: 3, base_delay: Duration::from_millis(200), timeout: Duration::from_secs(10) }
    }
}

/// Result of delivering one notification to one receiver.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeliveryOutcome {
    pub receiver: String,
    /// `webhook` | `telegram` | `mattermost`.
    pub kind: ReceiverType,
    pub delivery_id: String,
    pub delivered: bool,
    /// Status of the last HTTP response received, if any.
    pub http_status: Option<u16>,
    /// Sanitised error code of the last attempt (never a token or URL).
    pub error: Option<String>,
    /// Why the last attempt failed, naming the receiver's host and port (never its path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    pub attempts: u32,
    pub duration_ms: u64,
    /// `host:port` of the receiver.
    #[serde(skip)]
    pub endpoint: String,
}

impl DeliveryOutcome {
    /// Nothing attempted yet.
    pub fn pending(receiver: &str, target: &Target, delivery_id: &str) -> Self {
        DeliveryOutcome {
            receiver: receiver.to_string(),
            kind: target.kind(),
            delivery_id: delivery_id.to_string(),
            delivered: false,
            http_status: None,
            error: None,
            cause: None,
            attempts: 0,
            duration_ms: 0,
            endpoint: target.endpoint(),
        }
    }
}

/// Random-looking 16-byte hex delivery id (32 hex chars). Unique per process
/// call; not a secret, so std's randomly keyed hasher is sufficient.
pub fn new_delivery_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut parts = [0u64; 2];
    for (i, part) in parts.iter_mut().enumerate() {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u64(count);
        h.write_usize(i);
        *part = h.finish();
    }
    format!("{:016x}{:016x}", parts[0], parts[1])
}

/// `sha256=<hex>` HMAC-SHA256 of `body` (value of `X-Akritas-Signature`).
pub fn signature_header(secret: &str, body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

struct PreparedRequest {
    url: String,
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
    user_agent: &'static str,
    bearer: Option<String>,
    telegram: bool,
}

fn prepare(target: &Target, payload: Payload<'_>, delivery_id: &str) -> Result<PreparedRequest, DeliveryError> {
    match target {
        Target::Webhook { url, bearer_token, hmac_secret } => {
            let (envelope, event, run_id) = match payload {
                Payload::Investigated(n) => (webhook_body(n, delivery_id), WEBHOOK_EVENT, n.run_id.as_deref()),
                Payload::Resolved(n) => (resolved_webhook_body(n, delivery_id), WEBHOOK_RESOLVED_EVENT, None),
                Payload::Failed(n) => (failed_webhook_body(n, delivery_id), WEBHOOK_FAILED_EVENT, n.run_id.as_deref()),
                Payload::Checked(n) => {
                    (checked_webhook_body(n, delivery_id), WEBHOOK_CHECKED_EVENT, n.run_id.as_deref())
                }
            };
            let body = serde_json::to_vec(&envelope).map_err(|_| DeliveryError::EncodePayload)?;
            if body.len() > WEBHOOK_MAX_BODY_BYTES {
                return Err(DeliveryError::EncodePayload);
            }
            let mut headers = vec![("x-akritas-event", event.to_string())];
            headers.push(("x-akritas-delivery", delivery_id.to_string()));
            if let Some(run_id) = run_id.filter(|r| !r.is_empty()) {
                headers.push(("x-akritas-run-id", run_id.to_string()));
            }
            if let Some(secret) = hmac_secret.as_deref() {
                headers.push(("x-akritas-signature", signature_header(secret, &body)));
            }
            Ok(PreparedRequest {
                url: url.clone(),
                body,
                headers,
                user_agent: "Akritas/incident-webhook",
                bearer: bearer_token.clone(),
                telegram: false,
            })
        }
        Target::Telegram { base_url, bot_token, chat_id, message_thread_id } => {
            let mut payload = serde_json::json!({ "chat_id": chat_id, "text": payload.telegram_text() });
            if let Some(id) = message_thread_id {
                payload["message_thread_id"] = serde_json::json!(id);
            }
            let body = serde_json::to_vec(&payload).map_err(|_| DeliveryError::EncodePayload)?;
            Ok(PreparedRequest {
                url: format!("{}/bot{}/sendMessage", base_url.trim_end_matches('/'), bot_token),
                body,
                headers: Vec::new(),
                user_agent: "Akritas/telegram",
                bearer: None,
                telegram: true,
            })
        }
        Target::Mattermost { base_url, bot_token, channel_id } => {
            let payload = serde_json::json!({ "channel_id": channel_id, "message": payload.mattermost_text() });
            let body = serde_json::to_vec(&payload).map_err(|_| DeliveryError::EncodePayload)?;
            Ok(PreparedRequest {
                url: format!("{}/api/v4/posts", base_url.trim_end_matches('/')),
                body,
                headers: Vec::new(),
                user_agent: "Akritas/mattermost",
                bearer: Some(bot_token.clone()),
                telegram: false,
            })
        }
        // Slack answers errors with HTTP 200 and paces posts: deliver_payload sends it with deliver_slack.
        Target::Slack { .. } => Err(DeliveryError::CreateRequest),
    }
}

fn build_request(client: &reqwest::Client, req: &PreparedRequest) -> Result<reqwest::Request, DeliveryError> {
    // An address in the URL is judged here; a name's addresses when the client connects.
    let policy = crate::egress::Egress::current();
    let carries_credential = req.bearer.is_some() || req.telegram;
    let checked = if carries_credential { policy.check_credential_url(&req.url) } else { policy.check_url(&req.url) };
    checked.map_err(|e| match e {
        crate::egress::EgressError::Cleartext { .. } => DeliveryError::CleartextCredential,
        _ => DeliveryError::EgressRefused,
    })?;
    let mut builder = client
        .post(&req.url)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(USER_AGENT, HeaderValue::from_static(req.user_agent))
        .body(req.body.clone());
    for (name, value) in &req.headers {
        let value = HeaderValue::from_str(value).map_err(|_| DeliveryError::CreateRequest)?;
        builder = builder.header(*name, value);
    }
    if let Some(token) = &req.bearer {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| DeliveryError::CreateRequest)?;
        value.set_sensitive(true);
        builder = builder.header(AUTHORIZATION, value);
    }
    // The built error would embed the URL (and thus a Telegram token): drop it.
    builder.build().map_err(|_| DeliveryError::CreateRequest)
}

/// Whether a failed attempt may be retried.
enum AttemptError {
    Retryable(DeliveryError, Option<u16>, Option<Cause>),
    Final(DeliveryError, Option<u16>, Option<Cause>),
}

fn telegram_ok(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("ok").and_then(serde_json::Value::as_bool))
        .unwrap_or(false)
}

async fn attempt(client: &reqwest::Client, req: &PreparedRequest) -> Result<u16, AttemptError> {
    let request = build_request(client, req).map_err(|e| AttemptError::Final(e, None, None))?;
    let endpoint = endpoint(&req.url);
    let resp = client.execute(request).await.map_err(|e| {
        let cause = Some(Cause::transport(&e, &endpoint));
        if e.is_timeout() {
            AttemptError::Retryable(DeliveryError::Timeout, None, cause)
        } else if e.is_connect() {
            AttemptError::Retryable(DeliveryError::RequestFailed, None, cause)
        } else {
            AttemptError::Final(DeliveryError::RequestFailed, None, cause)
        }
    })?;
    let status = resp.status();
    let code = status.as_u16();
    let body = read_capped(resp, MAX_RESPONSE_BYTES).await.map_err(|e| match e {
        ChatError::ResponseTooLarge { .. } => DeliveryError::ResponseTooLarge,
        _ => DeliveryError::ReadResponse,
    });
    if !status.is_success() {
        let (err, said) = (DeliveryError::HttpStatus, body.as_deref().unwrap_or_default());
        let cause = Some(Cause::status(code, &endpoint, &String::from_utf8_lossy(said)));
        return if code == 429 || status.is_server_error() {
            Err(AttemptError::Retryable(err, Some(code), cause))
        } else {
            Err(AttemptError::Final(err, Some(code), cause))
        };
    }
    let body = body.map_err(|e| AttemptError::Final(e, Some(code), None))?;
    if req.telegram && !telegram_ok(&body) {
        let cause = Cause::rejected(&endpoint, &String::from_utf8_lossy(&body));
        return Err(AttemptError::Final(DeliveryError::RemoteRejected, Some(code), Some(cause)));
    }
    Ok(code)
}

/// Delivers `n` to one receiver, retrying per `policy`. Never panics and never
/// returns secrets in the outcome.
pub async fn deliver(
    client: &reqwest::Client,
    receiver: &str,
    target: &Target,
    n: &Notification,
    delivery_id: &str,
    policy: RetryPolicy,
) -> DeliveryOutcome {
    deliver_payload(client, receiver, target, Payload::Investigated(n), delivery_id, policy).await
}

/// [`deliver`] for any [`Payload`].
pub async fn deliver_payload(
    client: &reqwest::Client,
    receiver: &str,
    target: &Target,
    payload: Payload<'_>,
    delivery_id: &str,
    policy: RetryPolicy,
) -> DeliveryOutcome {
    if let Target::Slack { .. } = target {
        return deliver_slack(receiver, target, payload, None, delivery_id, policy).await.0;
    }
    let started = Instant::now();
    let mut outcome = DeliveryOutcome::pending(receiver, target, delivery_id);
    match prepare(target, payload, delivery_id) {
        Err(e) => outcome.error = Some(e.code().to_string()),
        Ok(req) => {
            let max_attempts = policy.attempts.max(1);
            loop {
                outcome.attempts += 1;
                let result = match tokio::time::timeout(policy.timeout, attempt(client, &req)).await {
                    Ok(r) => r,
                    Err(_) => Err(AttemptError::Retryable(
                        DeliveryError::Timeout,
                        None,
                        Some(Cause::timeout(&outcome.endpoint)),
                    )),
                };
                match result {
                    Ok(code) => {
                        outcome.delivered = true;
                        outcome.http_status = Some(code);
                        (outcome.error, outcome.cause) = (None, None);
                        break;
                    }
                    Err(AttemptError::Final(e, code, cause)) => {
                        outcome.http_status = code;
                        (outcome.error, outcome.cause) = (Some(e.code().to_string()), cause);
                        break;
                    }
                    Err(AttemptError::Retryable(e, code, cause)) => {
                        outcome.http_status = code;
                        (outcome.error, outcome.cause) = (Some(e.code().to_string()), cause);
                        if outcome.attempts >= max_attempts {
                            break;
                        }
                        let shift = (outcome.attempts - 1).min(16);
                        tokio::time::sleep(policy.base_delay.saturating_mul(1u32 << shift)).await;
                    }
                }
            }
        }
    }
    finish(&mut outcome, started);
    outcome
}

/// Posts `payload` to a Slack channel (in the thread `root` when given) with
/// `chat.postMessage`, waiting out a 429's `Retry-After`; the outcome and the new message's `ts`.
pub(super) async fn deliver_slack(
    receiver: &str,
    target: &Target,
    payload: Payload<'_>,
    root: Option<&str>,
    delivery_id: &str,
    policy: RetryPolicy,
) -> (DeliveryOutcome, Option<String>) {
    let started = Instant::now();
    let mut outcome = DeliveryOutcome::pending(receiver, target, delivery_id);
    let sent = match target {
        Target::Slack { base_url, bot_token, channel_id } => {
            let text = payload.slack_text();
            match SlackApi::new(base_url, bot_token, policy.timeout) {
                Ok(api) => retry(&mut outcome, policy, || api.post_message(channel_id, &text, root)).await,
                Err(error) => Err(error),
            }
        }
        _ => Err(ChatError::InvalidBaseUrl),
    };
    let ts = settle(&mut outcome, sent, started);
    (outcome, ts)
}

/// Records what a chat call did on `outcome` (delivered, or the error's code and status) and
/// finishes it; the id of the message sent.
pub(super) fn settle(
    outcome: &mut DeliveryOutcome,
    sent: Result<String, ChatError>,
    started: Instant,
) -> Option<String> {
    let message_id = match sent {
        Ok(id) => {
            outcome.delivered = true;
            (outcome.error, outcome.cause) = (None, None);
            Some(id)
        }
        Err(error) => {
            let at = outcome.endpoint.as_str();
            outcome.cause = match &error {
                ChatError::HttpStatus { status, description } => {
                    outcome.http_status = Some(*status);
                    Some(Cause::status(*status, at, description.as_deref().unwrap_or_default()))
                }
                ChatError::RateLimited(seconds) => {
                    outcome.http_status = Some(429);
                    Some(Cause::status(429, at, &format!("rate limited; asked to wait {seconds} s")))
                }
                ChatError::RequestFailed(cause) => Some(cause.clone()),
                ChatError::Timeout => Some(Cause::timeout(at)),
                ChatError::RemoteRejected { description } => {
                    Some(Cause::rejected(at, description.as_deref().unwrap_or("no description")))
                }
                _ => None,
            };
            outcome.error = Some(error.code().to_string());
            None
        }
    };
    if outcome.delivered && outcome.http_status.is_none() {
        outcome.http_status = Some(200);
    }
    finish(outcome, started);
    message_id
}

/// Whether a failed chat call may be retried: timeouts, unreachable provider, 429 and 5xx.
fn retryable(error: &ChatError) -> bool {
    match error {
        ChatError::Timeout | ChatError::RequestFailed(_) => true,
        ChatError::RateLimited(seconds) => *seconds <= MAX_RETRY_AFTER,
        ChatError::HttpStatus { status, .. } => *status == 429 || *status >= 500,
        _ => false,
    }
}

/// Calls `send` up to `policy.attempts` times while it fails with a retryable error,
/// backing off exponentially; counts the attempts on `outcome`.
pub(super) async fn retry<T, F, Fut>(
    outcome: &mut DeliveryOutcome,
    policy: RetryPolicy,
    mut send: F,
) -> Result<T, ChatError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ChatError>>,
{
    let max_attempts = policy.attempts.max(1);
    loop {
        outcome.attempts += 1;
        let result = match tokio::time::timeout(policy.timeout, send()).await {
            Ok(result) => result,
            Err(_) => Err(ChatError::Timeout),
        };
        match result {
            Err(error) if retryable(&error) && outcome.attempts < max_attempts => {
                let shift = (outcome.attempts - 1).min(16);
                let backoff = policy.base_delay.saturating_mul(1u32 << shift);
                // A rate limit says how long to wait: at least that.
                let asked = match error {
                    ChatError::RateLimited(seconds) => std::time::Duration::from_secs(seconds),
                    _ => std::time::Duration::ZERO,
                };
                tokio::time::sleep(backoff.max(asked)).await;
            }
            other => return other,
        }
    }
}

/// Stamps the duration of a delivery, counts it on /metrics and logs a failure.
pub(crate) fn finish(outcome: &mut DeliveryOutcome, started: Instant) {
    let receiver = outcome.receiver.as_str();
    outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let result = if outcome.delivered { "delivered" } else { outcome.error.as_deref().unwrap_or("failed") };
    crate::telemetry::count(
        "akritas_notifications_total",
        "Notification deliveries (after retries) by receiver and outcome (delivered or the error code).",
        &[("receiver", receiver), ("outcome", result)],
        1.0,
    );
    crate::telemetry::observe(
        "akritas_notification_seconds",
        "Time of one notification delivery including retries, by receiver.",
        &[("receiver", receiver)],
        started.elapsed(),
    );
    if !outcome.delivered {
        let (class, detail) = match &outcome.cause {
            Some(cause) => (cause.class, cause.detail.as_str()),
            None => ("other", outcome.error.as_deref().unwrap_or("failed")),
        };
        crate::telemetry::count(
            "akritas_notification_failures_total",
            "Failed notification deliveries by receiver and cause: connection_refused, dns, tls, timeout, connect, \
             http_4xx, http_5xx, rejected, or other (the error code says which).",
            &[("receiver", receiver), ("cause", class)],
            1.0,
        );
        tracing::warn!(
            component = "akritas_notification",
            receiver = %outcome.receiver,
            r#type = %outcome.kind,
            delivery_id = %outcome.delivery_id,
            status_code = outcome.http_status.unwrap_or(0),
            error_code = outcome.error.as_deref().unwrap_or(""),
            cause = class,
            detail,
            attempts = outcome.attempts,
            "notification delivery failed"
        );
    }
}

/// Delivers to every receiver concurrently, each with its own fresh delivery
/// id; a failing receiver does not affect the others. Outcomes are returned in
/// receiver order.
pub async fn deliver_all(
    client: &reqwest::Client,
    targets: &[(String, Target)],
    n: &Notification,
    policy: RetryPolicy,
) -> Vec<DeliveryOutcome> {
    join_all(targets.iter().map(|(name, target)| {
        let id = new_delivery_id();
        async move { deliver(client, name, target, n, &id, policy).await }
    }))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_secrets() {
        let targets = [
            Target::Webhook {
                url: "https://hooks.example/secret-path?token=SECRET1".into(),
                bearer_token: Some("SECRET2".into()),
                hmac_secret: Some("SECRET3".into()),
            },
            Target::telegram("123:SECRET4", "-100", Some(7)),
            Target::Mattermost { base_url: "https://mm".into(), bot_token: "SECRET5".into(), channel_id: "c".into() },
            Target::Slack {
                base_url: "https://slack".into(),
                bot_token: "xoxb-SECRET6".into(),
                channel_id: "C1".into(),
            },
        ];
        for t in &targets {
            let d = format!("{t:?}");
            assert!(!d.contains("SECRET"), "{d}");
            assert!(!d.contains("secret-path"), "{d}");
        }
        assert!(format!("{:?}", targets[0]).contains("https://hooks.example"));
    }

    #[test]
    fn delivery_ids_are_unique_hex() {
        let a = new_delivery_id();
        let b = new_delivery_id();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn signature_known_vector() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature_header("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
