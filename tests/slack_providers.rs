//! Slack delivery (`akritas::notify`) against the testkit's Slack stand-in, which speaks the
//! Web API's wire format and records every request: Block Kit with a plain-text fallback,
//! mrkdwn made inert, a thread per incident, `{ok: false, error}` refusals, a 429's
//! `Retry-After` waited out, the channel pace — and no error ever carries the token.

use std::time::{Duration, Instant};

use akritas::notify::chat::ChatError;
use akritas::notify::slack::SlackApi;
use akritas::notify::{
    Payload, ResolvedNotice, RetryPolicy, Target, ThreadedOutcome, deliver_threaded, new_delivery_id,
};
use akritas_testkit::slack::{BOT_USER_ID, RESPONSE_URL, SlackStandIn, TEAM_ID};
use serde_json::Value;

const BOT_TOKEN: &str = "xoxb-1111-2222-slackbottokensecret";
const APP_TOKEN: &str = "xapp-1-A0AKRITAS1-3333-appleveltokensecret";
const SIGNING: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const TIMEOUT: Duration = Duration::from_secs(5);

fn target(slack: &SlackStandIn, channel: &str) -> Target {
    Target::Slack { base_url: slack.api_url(), bot_token: BOT_TOKEN.into(), channel_id: channel.into() }
}

/// Delivers `payload` to `channel` of the stand-in, in the thread `root` when given.
async fn deliver(slack: &SlackStandIn, channel: &str, payload: Payload<'_>, root: Option<&str>) -> ThreadedOutcome {
    let client = reqwest::Client::new();
    deliver_threaded(&client, "ops/slack", &target(slack, channel), payload, root, &new_delivery_id(), policy()).await
}

fn policy() -> RetryPolicy {
    RetryPolicy { attempts: 3, base_delay: Duration::from_millis(10), timeout: TIMEOUT }
}

/// A notification whose alert and model text try to mention the channel and forge a link.
fn hostile() -> akritas::notify::Notification {
    let mut n = akritas_testkit::host::sample_notification();
    n.title = "<!channel> disk full".into();
    n.summary = "click <https://evil.example|here> @here & <@U123>".into();
    n.recommended_actions = vec!["ping <!here> now".into()];
    n
}

fn all_text(message: &Value) -> String {
    let mut text = message["text"].as_str().unwrap_or_default().to_string();
    for block in message["blocks"].as_array().into_iter().flatten() {
        text.push('\n');
        text.push_str(block["text"]["text"].as_str().unwrap_or_default());
    }
    text
}

#[tokio::test]
async fn an_incident_opens_a_thread_whose_later_notices_reply_in_it_with_mrkdwn_inert() {
    let slack = SlackStandIn::start(BOT_TOKEN, APP_TOKEN, SIGNING).await;
    let notification = hostile();
    let first = deliver(&slack, "C0INCIDENTS", Payload::Investigated(&notification), None).await;
    assert!(first.outcome.delivered, "{:?}", first.outcome);
    let root = first.message_id.expect("the first notification's ts is the thread root");
    let resolved = ResolvedNotice {
        incident_id: notification.incident_id.clone(),
        alert_name: "<!channel> disk full".into(),
        source: "alertmanager:prod".into(),
        severity: akritas::severity::Severity::Critical,
        alert_status: akritas::notify::AlertStatus::Resolved,
        resolved_at: "2026-12-05T10:00:00Z".into(),
    };
    let second = deliver(&slack, "C0INCIDENTS", Payload::Resolved(&resolved), Some(&root)).await;
    assert!(second.outcome.delivered, "{:?}", second.outcome);

    let messages = slack.messages();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["ts"], root.as_str());
    assert!(messages[0].get("thread_ts").is_none(), "the first notification is top-level");
    assert_eq!(slack.thread("C0INCIDENTS", &root).len(), 1, "the resolve notice replies in the thread");
    let body = &slack.requests().into_iter().find(|r| r.method == "chat.postMessage").unwrap().body;
    assert_eq!(body["unfurl_links"], false);
    assert!(body["blocks"][0]["type"] == "section" && body["blocks"][0]["text"]["type"] == "mrkdwn", "{body}");
    for message in &messages {
        let text = all_text(message);
        assert!(text.starts_with("Akritas incident investigation") || text.starts_with("Resolved: "), "{text}");
        for inert in ["<!channel>", "<!here>", "<https://", "<@", "@here"] {
            assert!(!text.contains(inert), "{inert} survived: {text}");
        }
        assert!(text.contains("&lt;!channel&gt;"), "{text}");
    }
    assert!(all_text(&messages[0]).contains("&lt;https://evil.example|here&gt; ＠here &amp; &lt;＠U123&gt;"));
}

#[tokio::test]
async fn a_rate_limit_is_waited_out_and_refusals_keep_slacks_code_without_the_token() {
    let slack = SlackStandIn::start(BOT_TOKEN, APP_TOKEN, SIGNING).await;
    let notification = hostile();
    slack.script_next("chat.postMessage", 429, r#"{"ok":false,"error":"ratelimited"}"#, Some(1));
    let started = Instant::now();
    let sent = deliver(&slack, "C0RATE", Payload::Investigated(&notification), None).await;
    assert!(sent.outcome.delivered && sent.outcome.attempts == 2, "{:?}", sent.outcome);
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After: 1 was waited out: {:?}", started.elapsed());
    let posts: Vec<Instant> =
        slack.requests().into_iter().filter(|r| r.method == "chat.postMessage").map(|r| r.at).collect();
    assert!(posts[1] - posts[0] >= Duration::from_secs(1), "{posts:?}");

    // A Retry-After beyond a minute fails the delivery instead of holding it.
    slack.script_next("chat.postMessage", 429, r#"{"ok":false,"error":"ratelimited"}"#, Some(3600));
    let held = deliver(&slack, "C0RATE", Payload::Investigated(&notification), None).await;
    assert_eq!(
        (held.outcome.delivered, held.outcome.error.as_deref(), held.outcome.http_status),
        (false, Some("rate_limited"), Some(429))
    );

    let wrong = SlackApi::new(&slack.api_url(), "xoxb-wrong-token-secret", TIMEOUT).unwrap();
    let refused = wrong.post_message("C0RATE", "hi", None).await.unwrap_err();
    assert_eq!(refused, ChatError::RemoteRejected { description: Some("invalid_auth".into()) });
    let api = SlackApi::new(&slack.api_url(), BOT_TOKEN, TIMEOUT).unwrap();
    let nowhere = api.post_message("#general", "hi", None).await.unwrap_err();
    assert_eq!(nowhere, ChatError::RemoteRejected { description: Some("channel_not_found".into()) });
    let no_thread = api.post_message("C0RATE", "hi", Some("1.000001")).await.unwrap_err();
    assert_eq!(no_thread, ChatError::RemoteRejected { description: Some("thread_not_found".into()) });
    for error in [refused, nowhere, no_thread] {
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains("secret"), "{text}");
        }
    }
    let identity = api.auth_test().await.unwrap();
    assert_eq!((identity.team_id.as_str(), identity.user_id.as_str()), (TEAM_ID, BOT_USER_ID));
    let app = SlackApi::new(&slack.api_url(), APP_TOKEN, TIMEOUT).unwrap();
    assert!(app.open_connection().await.unwrap().starts_with("ws://127.0.0.1:"));
    assert_eq!(
        api.open_connection().await.unwrap_err(),
        ChatError::RemoteRejected { description: Some("not_allowed_token_type".into()) },
        "Socket Mode needs the app-level token"
    );
}

#[tokio::test]
async fn posts_to_one_channel_keep_to_one_a_second_after_a_burst() {
    let slack = SlackStandIn::start(BOT_TOKEN, APP_TOKEN, SIGNING).await;
    let api = SlackApi::new(&slack.api_url(), BOT_TOKEN, TIMEOUT).unwrap();
    for i in 0..7 {
        api.post_message("C0BURST", &format!("message {i}"), None).await.unwrap();
    }
    api.post_message("C0OTHER", "another channel is not held", None).await.unwrap();
    let at: Vec<Instant> = slack.requests().into_iter().map(|r| r.at).collect();
    assert!(at[4] - at[0] < Duration::from_millis(500), "a burst of five goes at once");
    assert!(at[6] - at[0] >= Duration::from_millis(1900), "then one a second: {:?}", at[6] - at[0]);
    assert!(at[7] - at[6] < Duration::from_millis(500), "another channel has its own pace");
}

#[tokio::test]
async fn a_reply_waits_out_a_rate_limit() {
    let slack = SlackStandIn::start(BOT_TOKEN, APP_TOKEN, SIGNING).await;
    let api = SlackApi::new(&slack.api_url(), BOT_TOKEN, TIMEOUT).unwrap();
    let root = slack.seed_message("C0LIMITED", "U0PERSON", "why?");
    slack.script_next("chat.postMessage", 429, r#"{"ok":false,"error":"ratelimited"}"#, Some(1));
    let started = Instant::now();
    let sent = api.send_reply("C0LIMITED", "because", Some(&root)).await.unwrap();
    assert_eq!(sent.len(), 1);
    assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(slack.thread("C0LIMITED", &root).len(), 1);
    let response_url = slack.response_url();
    slack.script_next(RESPONSE_URL, 429, "rate_limited", Some(1));
    api.respond(&response_url, "the status").await.unwrap();
    assert_eq!(slack.responses(&response_url).len(), 1);
}

#[tokio::test]
async fn long_replies_are_split_escaped_and_threaded() {
    let slack = SlackStandIn::start(BOT_TOKEN, APP_TOKEN, SIGNING).await;
    let api = SlackApi::new(&slack.api_url(), BOT_TOKEN, TIMEOUT).unwrap();
    let root = slack.seed_message("C0CHAT", "U0PERSON", "why is db-7 slow?");
    let long = format!("@channel <b>\n{}", "a line of the answer\n".repeat(1500));
    let sent = api.send_reply("C0CHAT", &long, Some(&root)).await.unwrap();
    assert!(sent.len() >= 3, "{} parts", sent.len());
    let replies = slack.thread("C0CHAT", &root);
    assert_eq!(replies.len(), sent.len());
    assert!(replies[0]["text"].as_str().unwrap().starts_with(&format!("(1/{})\n＠channel &lt;b&gt;", sent.len())));
    for reply in &replies {
        for block in reply["blocks"].as_array().unwrap() {
            assert!(block["text"]["text"].as_str().unwrap().chars().count() <= 3000);
        }
    }
}
