//! The bot gateway in-process, as `serve` builds it: Telegram webhook updates through
//! `Bots::webhook` (secret check, decoding, allowlists, durable dedup, queue), a Run on
//! the read-only engine per message against a zero-latency scripted model (plan +
//! answer), and the reply through the Telegram API to a stand-in. Prints per-message
//! latency (webhook call to the reply reaching the stand-in; the model answers at once,
//! so this is the host's overhead) and the drain time of 1,000 queued updates over 20
//! conversations, with the per-conversation order checked. Asserts nothing about speed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use akritas::app::bots::{BotParts, start};
use akritas::bots::Provider;
use akritas::tools::{ToolName, openai_alias};
use akritas_testkit::host;
use akritas_testkit::percentile;
use akritas_testkit::scripted_llm::{Reply, ScriptedLlm, Step};
use akritas_testkit::telegram::{TelegramStandIn, text_update};
use serde_json::json;

const TOKEN: &str = "123456:bench-bot-token-0123456789";
const SECRET: &str = "bench-webhook-secret_0123";
const CONVERSATIONS: i64 = 20;
const QUEUED: i64 = 1_000;
const SINGLE: i64 = 50;

fn main() {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let telegram = TelegramStandIn::start(TOKEN).await;
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let llm = ScriptedLlm::start_with(move |_, body| {
        if body["tool_choice"] == "required" {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else {
            let question = body["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].clone());
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
    cancel.cancel();
}
