//! Delivery tests against local axum stand-ins that speak the Telegram Bot
//! API, Mattermost API v4 and the Akritas webhook wire formats and record every
//! request they receive.

use akritas::notify::{DeliveryOutcome, Notification, RetryPolicy, Target, deliver, deliver_all, signature_header};
use akritas::resources::notification_receiver::ReceiverType;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TG_TOKEN: &str = "123456:AAH-super-secret-telegram-token";
const MM_TOKEN: &str = "mm-secret-bot-token-xyz";
const WH_BEARER: &str = "wh-secret-bearer";
const WH_HMAC: &str = "wh-secret-hmac";

#[derive(Debug, Clone)]
struct Recorded {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Webhook,
    Telegram,
    Mattermost,
}

#[derive(Clone)]
struct Stand {
    kind: Kind,
    requests: Arc<Mutex<Vec<Recorded>>>,
    /// Scripted status overrides consumed one per request (front first).
    script: Arc<Mutex<VecDeque<StatusCode>>>,
    delay: Duration,
}

async fn handle(State(s): State<Stand>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    s.requests.lock().unwrap().push(Recorded {
        method: method.clone(),
        path: uri.path().to_string(),
        headers: headers.clone(),
        body: body.clone(),
    });
    if !s.delay.is_zero() {
        tokio::time::sleep(s.delay).await;
    }
    if let Some(status) = s.script.lock().unwrap().pop_front() {
        if status.is_redirection() {
            return (status, [("location", "http://127.0.0.1:1/elsewhere")]).into_response();
        }
        return (status, "stand-in scripted failure").into_response();
    }
    if method != Method::POST {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
    match s.kind {
        Kind::Webhook => {
            if auth != format!("Bearer {WH_BEARER}") {
                return StatusCode::UNAUTHORIZED.into_response();
            }
            let sig = headers.get("x-akritas-signature").and_then(|v| v.to_str().ok()).unwrap_or("");
            if sig != signature_header(WH_HMAC, &body) {
                return (StatusCode::UNAUTHORIZED, "bad signature").into_response();
            }
            StatusCode::NO_CONTENT.into_response()
        }
        Kind::Telegram => {
            // Real Bot API: POST /bot<token>/<method>, JSON body.
            let Some(rest) = uri.path().strip_prefix("/bot") else {
                return (
                    StatusCode::NOT_FOUND,
                    axum::Json(json!({"ok":false,"error_code":404,"description":"Not Found"})),
                )
                    .into_response();
            };
            let Some((token, api_method)) = rest.split_once('/') else {
                return StatusCode::NOT_FOUND.into_response();
            };
            if token != TG_TOKEN {
                return (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(json!({"ok":false,"error_code":401,"description":"Unauthorized"})),
                )
                    .into_response();
            }
            let v: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(_) => return StatusCode::BAD_REQUEST.into_response(),
            };
            if api_method != "sendMessage" || v["text"].as_str().is_none_or(str::is_empty) {
                return (
                    StatusCode::BAD_REQUEST,
                    axum::Json(json!({"ok":false,"error_code":400,"description":"Bad Request: message text is empty"})),
                )
                    .into_response();
            }
            if v["chat_id"] == "-1009999" {
                // Telegram answers 200 with ok:false in some proxy setups; treat as rejection.
                return axum::Json(json!({"ok":false,"error_code":400,"description":"Bad Request: chat not found"}))
                    .into_response();
            }
            axum::Json(json!({"ok":true,"result":{"message_id":42,"chat":{"id":v["chat_id"]},"text":v["text"]}}))
                .into_response()
        }
        Kind::Mattermost => {
            if uri.path() != "/api/v4/posts" {
                return StatusCode::NOT_FOUND.into_response();
            }
            if auth != format!("Bearer {MM_TOKEN}") {
                return (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(json!({"id":"api.context.session_expired.app_error","status_code":401})),
                )
                    .into_response();
            }
            let v: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(_) => return StatusCode::BAD_REQUEST.into_response(),
            };
            (StatusCode::CREATED, axum::Json(json!({"id":"post1","channel_id":v["channel_id"],"message":v["message"]})))
                .into_response()
        }
    }
}

impl Stand {
    async fn start(kind: Kind, script: &[u16], delay: Duration) -> (Self, String) {
        let stand = Stand {
            kind,
            requests: Arc::default(),
            script: Arc::new(Mutex::new(script.iter().map(|c| StatusCode::from_u16(*c).unwrap()).collect())),
            delay,
        };
        let app = Router::new().fallback(handle).with_state(stand.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (stand, format!("http://{addr}"))
    }
    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn client() -> reqwest::Client {
    akritas::install_crypto_provider();
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

fn fast() -> RetryPolicy {
    RetryPolicy { attempts: 3, base_delay: Duration::from_millis(10), timeout: Duration::from_secs(5) }
}

fn notification() -> Notification {
    akritas_testkit::host::sample_notification()
}

fn webhook_target(base: &str) -> Target {
    Target::Webhook {
        url: format!("{base}/hooks/akritas?tenant=a"),
        bearer_token: Some(WH_BEARER.into()),
        hmac_secret: Some(WH_HMAC.into()),
    }
}

fn telegram_target(base: &str, chat_id: &str) -> Target {
    Target::Telegram {
        base_url: format!("{base}/"),
        bot_token: TG_TOKEN.into(),
        chat_id: chat_id.into(),
        message_thread_id: Some(17),
    }
}

fn mattermost_target(base: &str) -> Target {
    Target::Mattermost { base_url: base.into(), bot_token: MM_TOKEN.into(), channel_id: "chan-ops".into() }
}

fn assert_no_secrets(o: &DeliveryOutcome) {
    let rendered = format!("{o:?} {}", serde_json::to_string(o).unwrap());
    for secret in [TG_TOKEN, "super-secret", MM_TOKEN, WH_BEARER, WH_HMAC] {
        assert!(!rendered.contains(secret), "secret leaked: {rendered}");
    }
}

#[tokio::test]
async fn webhook_signed_envelope_with_bearer() {
    let (stand, base) = Stand::start(Kind::Webhook, &[], Duration::ZERO).await;
    let n = notification();
    let o = deliver(&client(), "incident-automation", &webhook_target(&base), &n, "d-1", fast()).await;
    assert!(o.delivered, "{o:?}");
    assert_eq!((o.http_status, o.attempts, o.error.as_deref()), (Some(204), 1, None));
    assert_eq!(o.kind, ReceiverType::Webhook);
    let reqs = stand.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.method, Method::POST);
    assert_eq!(r.path, "/hooks/akritas");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("user-agent"), Some("Akritas/incident-webhook"));
    assert_eq!(r.header("x-akritas-event"), Some("incident.investigated"));
    assert_eq!(r.header("x-akritas-delivery"), Some("d-1"));
    assert_eq!(r.header("x-akritas-run-id"), Some("run-7"));
    assert_eq!(r.header("authorization"), Some("Bearer wh-secret-bearer"));
    assert_eq!(r.header("x-akritas-signature"), Some(signature_header(WH_HMAC, &r.body).as_str()));
    let v = r.json();
    assert_eq!(v["version"], 1);
    assert_eq!(v["event"], "incident.investigated");
    assert_eq!(v["delivery_id"], "d-1");
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(v["incident"]["incident_id"], "inc-7");
    assert_eq!(v["incident"]["run_url"], "https://akritas.test/runs/run-7");
    assert_eq!(v["incident"]["status"], "firing");
}

#[tokio::test]
async fn webhook_wrong_hmac_is_rejected_without_retry() {
    let (stand, base) = Stand::start(Kind::Webhook, &[], Duration::ZERO).await;
    let target = Target::Webhook {
        url: format!("{base}/hook"),
        bearer_token: Some(WH_BEARER.into()),
        hmac_secret: Some("other-secret".into()),
    };
    let o = deliver(&client(), "wh", &target, &notification(), "d-2", fast()).await;
    assert!(!o.delivered);
    assert_eq!((o.http_status, o.attempts, o.error.as_deref()), (Some(401), 1, Some("http_status")));
    assert_eq!(stand.requests().len(), 1);
}

#[tokio::test]
async fn telegram_send_message_wire_format() {
    let (stand, base) = Stand::start(Kind::Telegram, &[], Duration::ZERO).await;
    let n = notification();
    let o = deliver(&client(), "telegram-ops", &telegram_target(&base, "-100123"), &n, "d-3", fast()).await;
    assert!(o.delivered, "{o:?}");
    assert_eq!((o.http_status, o.attempts), (Some(200), 1));
    assert_no_secrets(&o);
    let reqs = stand.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, format!("/bot{TG_TOKEN}/sendMessage"));
    assert_eq!(r.header("user-agent"), Some("Akritas/telegram"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("authorization").is_none());
    let v = r.json();
    assert_eq!(v["chat_id"], "-100123");
    assert_eq!(v["message_thread_id"], 17);
    assert!(v.get("parse_mode").is_none(), "plain text, no parse_mode");
    assert_eq!(v["text"], akritas::notify::telegram_text(&n));
    let text = v["text"].as_str().unwrap();
    assert!(text.contains("ping ＠channel") && !text.contains('@'));
    assert!(text.contains("Run: https://akritas.test/runs/run-7"));
}

#[tokio::test]
async fn telegram_without_thread_omits_field_and_ok_false_is_rejected() {
    let (stand, base) = Stand::start(Kind::Telegram, &[], Duration::ZERO).await;
    let mut target = telegram_target(&base, "-1009999");
    if let Target::Telegram { message_thread_id, .. } = &mut target {
        *message_thread_id = None;
    }
    let o = deliver(&client(), "tg", &target, &notification(), "d-4", fast()).await;
    assert!(!o.delivered);
    assert_eq!((o.http_status, o.attempts, o.error.as_deref()), (Some(200), 1, Some("remote_rejected")));
    assert!(stand.requests()[0].json().get("message_thread_id").is_none());
}

#[tokio::test]
async fn telegram_bad_token_error_never_contains_token() {
    let (_stand, base) = Stand::start(Kind::Telegram, &[], Duration::ZERO).await;
    let target = Target::Telegram {
        base_url: base,
        bot_token: "999:wrong-super-secret".into(),
        chat_id: "1".into(),
        message_thread_id: None,
    };
    let o = deliver(&client(), "tg", &target, &notification(), "d-5", fast()).await;
    assert!(!o.delivered);
    assert_eq!((o.http_status, o.attempts, o.error.as_deref()), (Some(401), 1, Some("http_status")));
    assert_no_secrets(&o);
}

#[tokio::test]
async fn connect_error_is_retried_and_sanitised() {
    // Bind then drop a listener to get a port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let target = telegram_target(&format!("http://127.0.0.1:{port}"), "1");
    let o = deliver(&client(), "tg", &target, &notification(), "d-6", fast()).await;
    assert!(!o.delivered);
    assert_eq!((o.http_status, o.attempts, o.error.as_deref()), (None, 3, Some("request_failed")));
    assert_no_secrets(&o);
    assert!(!o.error.as_deref().unwrap().contains("127.0.0.1"));
    let cause = o.cause.expect("a cause");
    assert_eq!((cause.class, cause.detail), ("connection_refused", format!("connection refused by 127.0.0.1:{port}")));
}

#[tokio::test]
async fn mattermost_post_wire_format() {
    let (stand, base) = Stand::start(Kind::Mattermost, &[], Duration::ZERO).await;
    let n = notification();
    let o = deliver(&client(), "mattermost-ops", &mattermost_target(&base), &n, "d-7", fast()).await;
    assert!(o.delivered, "{o:?}");
    assert_eq!((o.http_status, o.attempts), (Some(201), 1));
    let reqs = stand.requests();
    let r = &reqs[0];
    assert_eq!(r.path, "/api/v4/posts");
    assert_eq!(r.header("authorization"), Some(format!("Bearer {MM_TOKEN}").as_str()));
    assert_eq!(r.header("user-agent"), Some("Akritas/mattermost"));
    let v = r.json();
    assert_eq!(v["channel_id"], "chan-ops");
    let msg = v["message"].as_str().unwrap();
    assert_eq!(msg, akritas::notify::mattermost_text(&n));
    assert!(msg.contains("\\*CPU\\* saturated, ping ＠channel"), "{msg}");
    assert!(msg.contains("- Scale \\`api\\` to 4 replicas"), "{msg}");
    assert!(!msg.contains('@'));
}

#[tokio::test]
async fn parallel_delivery_isolates_failing_receiver() {
    let (bad, bad_base) = Stand::start(Kind::Webhook, &[502, 502, 502], Duration::ZERO).await;
    let (mm, mm_base) = Stand::start(Kind::Mattermost, &[], Duration::ZERO).await;
    let (tg, tg_base) = Stand::start(Kind::Telegram, &[], Duration::ZERO).await;
    let targets = vec![
        ("incident-automation".to_string(), webhook_target(&bad_base)),
        ("mattermost-ops".to_string(), mattermost_target(&mm_base)),
        ("telegram-ops".to_string(), telegram_target(&tg_base, "-100123")),
    ];
    let out = deliver_all(&client(), &targets, &notification(), fast()).await;
    assert_eq!(out.len(), 3);
    assert_eq!(
        out.iter().map(|o| o.receiver.as_str()).collect::<Vec<_>>(),
        ["incident-automation", "mattermost-ops", "telegram-ops"]
    );
    assert!(!out[0].delivered);
    assert_eq!((out[0].http_status, out[0].attempts, out[0].error.as_deref()), (Some(502), 3, Some("http_status")));
    assert!(out[1].delivered && out[2].delivered, "{out:?}");
    assert_eq!(bad.requests().len(), 3);
    assert_eq!(mm.requests().len(), 1);
    assert_eq!(tg.requests().len(), 1);
    // Each receiver gets its own delivery id; the webhook retries reuse one id.
    let ids: std::collections::HashSet<_> = out.iter().map(|o| o.delivery_id.clone()).collect();
    assert_eq!(ids.len(), 3);
    assert!(bad.requests().iter().all(|r| r.header("x-akritas-delivery") == Some(out[0].delivery_id.as_str())));
    for o in &out {
        assert_no_secrets(o);
    }
}

#[tokio::test]
async fn parallel_delivery_runs_concurrently() {
    let slow = Duration::from_millis(300);
    let (_a, a) = Stand::start(Kind::Mattermost, &[], slow).await;
    let (_b, b) = Stand::start(Kind::Mattermost, &[], slow).await;
    let (_c, c) = Stand::start(Kind::Mattermost, &[], slow).await;
    let targets: Vec<_> =
        [a, b, c].iter().enumerate().map(|(i, base)| (format!("mm{i}"), mattermost_target(base))).collect();
    let started = std::time::Instant::now();
    let out = deliver_all(&client(), &targets, &notification(), fast()).await;
    assert!(out.iter().all(|o| o.delivered));
    assert!(started.elapsed() < Duration::from_millis(800), "not parallel: {:?}", started.elapsed());
}

#[tokio::test]
async fn retry_then_success() {
    let (stand, base) = Stand::start(Kind::Mattermost, &[503], Duration::ZERO).await;
    let o = deliver(&client(), "mm", &mattermost_target(&base), &notification(), "d-8", fast()).await;
    assert!(o.delivered, "{o:?}");
    assert_eq!((o.http_status, o.attempts, o.error.as_deref()), (Some(201), 2, None));
    assert_eq!(stand.requests().len(), 2);
}

#[tokio::test]
async fn rate_limited_is_retried_client_errors_are_not() {
    let (_s, base) = Stand::start(Kind::Mattermost, &[429, 429], Duration::ZERO).await;
    let o = deliver(&client(), "mm", &mattermost_target(&base), &notification(), "d-9", fast()).await;
    assert!(o.delivered);
    assert_eq!(o.attempts, 3);

    let (s, base) = Stand::start(Kind::Mattermost, &[400], Duration::ZERO).await;
    let o = deliver(&client(), "mm", &mattermost_target(&base), &notification(), "d-10", fast()).await;
    assert!(!o.delivered);
    assert_eq!((o.http_status, o.attempts), (Some(400), 1));
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (s, base) = Stand::start(Kind::Telegram, &[302], Duration::ZERO).await;
    let o = deliver(&client(), "tg", &telegram_target(&base, "1"), &notification(), "d-11", fast()).await;
    assert!(!o.delivered);
    assert_eq!((o.http_status, o.attempts, o.error.as_deref()), (Some(302), 1, Some("http_status")));
    assert_eq!(s.requests().len(), 1);
    assert_no_secrets(&o);
}

#[tokio::test]
async fn per_attempt_timeout_is_retried() {
    let (s, base) = Stand::start(Kind::Webhook, &[], Duration::from_millis(500)).await;
    let policy =
        RetryPolicy { attempts: 2, base_delay: Duration::from_millis(10), timeout: Duration::from_millis(100) };
    let o = deliver(&client(), "wh", &webhook_target(&base), &notification(), "d-12", policy).await;
    assert!(!o.delivered);
    assert_eq!((o.http_status, o.attempts, o.error.as_deref()), (None, 2, Some("timeout")));
    assert_eq!(s.requests().len(), 2);
    assert!(o.duration_ms < 500, "{o:?}");
}
