//! The bot gateway in-process, as `serve` builds it: Telegram webhook updates through
//! `Bots::webhook` (secret check, decoding, allowlists, durable dedup, queue), a Run on
//! the read-only engine per message against a zero-latency scripted model (plan +
//! answer), and the reply through the Telegram API to a stand-in. Prints per-message
//! latency (webhook call to the reply reaching the stand-in; the model answers at once,
//! so this is the host's overhead) and the drain time of 1,000 queued updates over 20
//! conversations, with the per-conversation order checked. Then the same for Slack against
//! the testkit's Slack stand-in: a signed Events API call and a Socket Mode envelope to the
//! reply, and 1,000 signed events over 20 conversations (Slack's pace of one post a second
//! per channel holds that drain). Asserts nothing about speed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use akritas::app::bots::{BotParts, Bots, start};
use akritas::bots::Provider;
use akritas::tools::{ToolName, openai_alias};
use akritas_testkit::host;
use akritas_testkit::percentile;
use akritas_testkit::scripted_llm::{Reply, ScriptedLlm, Step};
use akritas_testkit::slack::{self, SlackStandIn};
use akritas_testkit::telegram::{TelegramStandIn, text_update};
use serde_json::json;

const TOKEN: &str = "123456:bench-bot-token-0123456789";
const SECRET: &str = "bench-webhook-secret_0123";
const CONVERSATIONS: i64 = 20;
const QUEUED: i64 = 1_000;
const SINGLE: i64 = 50;
const SLACK_BOT: &str = "xoxb-bench-slack-bot-token";
const SLACK_APP: &str = "xapp-1-bench-slack-app-token";
const SLACK_SIGNING: &str = "bench-slack-signing-secret";

fn main() {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let telegram = TelegramStandIn::start(TOKEN).await;
    let slack = SlackStandIn::start(SLACK_BOT, SLACK_APP, SLACK_SIGNING).await;
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let llm = ScriptedLlm::start_with(move |_, body| {
        if body["tool_choice"] == "required" {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else {
            let messages = body["messages"].as_array();
            let question =
                messages.and_then(|m| m.iter().rev().find(|m| m["role"] == "user")).map(|m| m["content"].clone());
            Step::from(Reply::Content(format!("answer to {}", question.unwrap_or_default())))
        }
    })
    .await;
    llm.set_recording(false);
    let manifests = dir.path().join("resources");
    std::fs::create_dir_all(&manifests).unwrap();
    let chats: Vec<String> = (1..=CONVERSATIONS).map(|c| format!("\"{}\"", -1000 - c)).collect();
    std::fs::write(
        manifests.join("bot.yaml"),
        format!(
            "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: bench}}\nspec:\n  type: telegram\n  \
             telegram: {{botToken: {{env: BENCH_TG_TOKEN}}, chatId: \"-1001\", baseUrl: \"{}\"}}\n  \
             inbound: {{mode: webhook, secret: {{env: BENCH_TG_SECRET}}, allowedConversationIds: [{}]}}\n",
            telegram.url,
            chats.join(", ")
        ) + &format!(
            "---\napiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: slack-events}}\nspec:\n  type: slack\n  \
             slack: {{botToken: {{env: BENCH_SLACK_BOT}}, channelId: C0BENCH, baseUrl: \"{api}\"}}\n  \
             inbound: {{mode: webhook, secret: {{env: BENCH_SLACK_SIGNING}}, allowedUserIds: [U0BENCH]}}\n\
             ---\napiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: slack-socket}}\nspec:\n  type: slack\n  \
             slack: {{botToken: {{env: BENCH_SLACK_BOT}}, appToken: {{env: BENCH_SLACK_APP}}, channelId: C0BENCH, baseUrl: \"{api}\"}}\n  \
             inbound: {{mode: socket, allowedUserIds: [U0BENCH]}}\n",
            api = slack.api_url()
        ),
    )
    .unwrap();
    let catalog = host::catalog_from(&manifests);
    let audit = Arc::new(akritas::audit::AuditLog::open(&dir.path().join("audit/akritas.jsonl")).unwrap());
    let mut settings = host::settings();
    settings.max_concurrent_runs = 8;
    let engine = Arc::new(host::engine(&llm, settings, host::standard_tools().0, catalog.clone(), Some(audit), None));
    let secrets = akritas::catalog::secrets::EnvSecrets::with_lookup(|name: &str| match name {
        "BENCH_TG_TOKEN" => Some(TOKEN.to_string()),
        "BENCH_TG_SECRET" => Some(SECRET.to_string()),
        "BENCH_SLACK_BOT" => Some(SLACK_BOT.to_string()),
        "BENCH_SLACK_APP" => Some(SLACK_APP.to_string()),
        "BENCH_SLACK_SIGNING" => Some(SLACK_SIGNING.to_string()),
        _ => None,
    });
    let host_settings = akritas::config::Settings { data_dir: dir.path().join("data"), ..Default::default() };
    let parts = BotParts {
        store: catalog,
        secrets: Arc::new(secrets),
        secrets_changed: tokio::sync::watch::channel(0).1,
        engine,
        alerts: None,
        board: Default::default(),
    };
    let mut tasks = tokio::task::JoinSet::new();
    let cancel = tokio_util::sync::CancellationToken::new();
    let bots =
        start(&host_settings, parts, &akritas::app::storage::Stores::Embedded, &mut tasks, &cancel).await.unwrap();
    let submit = |update_id: i64, chat: i64, message_id: i64, text: String| {
        let bots = bots.clone();
        async move {
            let body = text_update(update_id, chat, 7, message_id, &text, None, None).to_string();
            bots.webhook(Provider::Telegram, "bench", Some(SECRET), Some("application/json"), body.as_bytes())
                .await
                .expect("accepted");
        }
    };
    let replies = || telegram.sent().len();

    // One message at a time: webhook call to reply received.
    let mut latencies = Vec::new();
    for i in 0..SINGLE {
        let before = replies();
        let started = Instant::now();
        submit(i + 1, -1001, 10_000 + i, format!("single {i}")).await;
        while replies() == before {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        latencies.push(started.elapsed());
    }
    println!(
        "one message (webhook → Run with plan + answer → reply): p50 {:.2} ms, p95 {:.2} ms over {SINGLE}",
        percentile(&mut latencies, 0.5).as_secs_f64() * 1000.0,
        percentile(&mut latencies, 0.95).as_secs_f64() * 1000.0
    );

    // 1,000 updates over 20 conversations, submitted as fast as the queue takes them.
    let base = replies();
    let started = Instant::now();
    let mut refused = 0_u64;
    for i in 0..QUEUED {
        let chat = -1000 - (i % CONVERSATIONS) - 1;
        let body = text_update(1_000 + i, chat, 7, 20_000 + i, &format!("q{i}"), None, None).to_string();
        loop {
            let outcome = bots
                .webhook(Provider::Telegram, "bench", Some(SECRET), Some("application/json"), body.as_bytes())
                .await;
            match outcome {
                Ok(accepted) => {
                    assert!(!accepted.duplicate, "update {i} taken for a duplicate");
                    break;
                }
                Err(_) => {
                    refused += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }
    }
    let submitted = started.elapsed();
    while replies() < base + QUEUED as usize {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drained = started.elapsed();
    // Per conversation, replies come in the order the messages were sent.
    let mut order: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for sent in telegram.sent().into_iter().skip(base) {
        let id = sent["reply_parameters"]["message_id"].as_i64().unwrap();
        order.entry(sent["chat_id"].to_string()).or_default().push(id);
    }
    let ordered = order.values().all(|ids| ids.windows(2).all(|w| w[0] < w[1]));
    println!(
        "{QUEUED} updates over {CONVERSATIONS} conversations: queued in {:.2} s ({refused} 503s while the 64-slot queue was full, retried), \
         drained in {:.2} s ({:.0} messages/s), per-conversation order kept: {ordered}",
        submitted.as_secs_f64(),
        drained.as_secs_f64(),
        QUEUED as f64 / drained.as_secs_f64()
    );
    slack_bench(&bots, &slack).await;
    cancel.cancel();
}

/// A signed Events API call through `Bots::slack_event`, as the route makes it.
async fn slack_event(bots: &Bots, event: serde_json::Value) {
    let body = slack::event_callback(&slack::new_ts(), event).to_string();
    let now = slack::now();
    let signature = slack::sign(SLACK_SIGNING, now, body.as_bytes());
    let answer = bots.slack_event("slack-events", Some(&now.to_string()), Some(&signature), body.as_bytes()).await;
    assert!(answer.is_ok(), "taken: {answer:?}");
}

/// Waits until the bot has posted `count` messages in `channel`.
async fn posted(slack: &SlackStandIn, channel: &str, count: usize) {
    while slack.messages().iter().filter(|m| m["channel"] == channel).count() < count {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

async fn slack_bench(bots: &Bots, slack: &SlackStandIn) {
    while !slack.connected() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One message at a time, each in its own direct conversation (Slack paces posts per channel).
    for (transport, prefix) in [("Events API", "D0E"), ("Socket Mode", "D0S")] {
        let mut latencies = Vec::new();
        for i in 0..SINGLE {
            let channel = format!("{prefix}{i:04}");
            let event = slack::message("U0BENCH", &channel, "im", &format!("single {i}"), &slack::new_ts(), None);
            let started = Instant::now();
            if prefix == "D0E" {
                slack_event(bots, event).await;
            } else {
                slack.push_event(slack::event_callback(&slack::new_ts(), event));
            }
            posted(slack, &channel, 1).await;
            latencies.push(started.elapsed());
        }
        println!(
            "slack, one message over the {transport} (→ Run with plan + answer → chat.postMessage): p50 {:.2} ms, p95 {:.2} ms over {SINGLE}",
            percentile(&mut latencies, 0.5).as_secs_f64() * 1000.0,
            percentile(&mut latencies, 0.95).as_secs_f64() * 1000.0
        );
    }

    // 1,000 signed events over 20 direct conversations.
    let started = Instant::now();
    for i in 0..QUEUED {
        let channel = format!("D0Q{:04}", i % CONVERSATIONS);
        let event = slack::message("U0BENCH", &channel, "im", &format!("q{i}"), &slack::new_ts(), None);
        let body = slack::event_callback(&format!("EvQ{i}"), event).to_string();
        loop {
            let now = slack::now();
            let signature = slack::sign(SLACK_SIGNING, now, body.as_bytes());
            let taken =
                bots.slack_event("slack-events", Some(&now.to_string()), Some(&signature), body.as_bytes()).await;
            if taken.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let submitted = started.elapsed();
    for c in 0..CONVERSATIONS {
        posted(slack, &format!("D0Q{c:04}"), (QUEUED / CONVERSATIONS) as usize).await;
    }
    let drained = started.elapsed();
    let mut order: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for message in slack.messages().into_iter().filter(|m| m["channel"].as_str().is_some_and(|c| c.starts_with("D0Q")))
    {
        let text = message["text"].as_str().unwrap_or_default();
        let n = text.rsplit_once('q').and_then(|(_, n)| n.trim_end_matches('"').parse::<i64>().ok()).unwrap_or(-1);
        order.entry(message["channel"].to_string()).or_default().push(n);
    }
    let ordered = order.values().all(|ids| ids.windows(2).all(|w| w[0] < w[1]));
    println!(
        "slack, {QUEUED} signed events over {CONVERSATIONS} conversations: queued in {:.2} s, drained in {:.2} s \
         ({:.0} messages/s; Slack's pace of one post a second per channel after a burst of 5 holds it), per-conversation order kept: {ordered}",
        submitted.as_secs_f64(),
        drained.as_secs_f64(),
        QUEUED as f64 / drained.as_secs_f64()
    );
}
