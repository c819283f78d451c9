//! Bots through the real `akritas serve` binary against Telegram and Mattermost
//! stand-ins that speak the providers' wire formats and record every request:
//! Telegram long polling and webhooks, Mattermost outgoing webhooks and slash
//! commands, conversations on the read-only engine (a tool through MCP in the second
//! turn), history kept across a restart, nothing answered twice, secrets checked
//! before bodies are decoded.

use akritas_testkit as support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use akritas::tools::{ToolName, openai_alias};
use serde_json::{Value, json};
use support::everything;
use support::mattermost::{MattermostStandIn, outgoing_webhook_form, outgoing_webhook_json, slash_command_form};
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use support::telegram::{TelegramStandIn, bot_text_update, text_update};

const TG_TOKEN: &str = "123456:telegram-bot-token-0123456789";
const TG_SECRET: &str = "telegram-webhook-secret_0123";
const MM_TOKEN: &str = "mattermost-bot-token-0123456789";
const MM_SECRET: &str = "mattermost-outgoing-token-0123";
const CHAT: i64 = -1001234567890;
const USER: i64 = 4242;
const MM_CHANNEL: &str = "channel0000000000000000001";
const AM_TOKEN: &str = "bots-alertmanager-token-0123";
const MM_USER: &str = "user00000000000000000000001";

/// Answers by phase: 0 plans nothing and answers; 1 plans `get-sum` through MCP and
/// answers with its result; 2 answers a long text with mentions.
fn model(phase: Arc<AtomicU8>) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let submit = openai_alias(&ToolName::try_from("local.investigation.submit_result").unwrap());
    move |_, request| {
        let phase = phase.load(Ordering::SeqCst);
        if offers(request, &submit) {
            let result = json!({"finding_status": "inconclusive", "actionability": "requires_human", "confidence": "low",
                "summary": "db-7 ran out of connections", "impact": "", "evidence": [], "ruled_out": [],
                "affected_components": ["db-7"], "recommended_actions": ["check db-7"], "production_writes": 0});
            return Step::from(Reply::ToolCalls(vec![("r".into(), submit.clone(), result)]));
        }
        if offers(request, &plan) {
            let checks = if phase == 1 {
                json!([{"step": "Add the numbers", "tool": "mcp.everything.get-sum", "arguments": {"a": 2, "b": 40},
                        "reason": "the person asked for the sum"}])
            } else {
                json!([])
            };
            return Step::from(Reply::ToolCalls(vec![(
                "p".into(),
                plan.clone(),
                json!({"checks": checks, "gaps": []}),
            )]));
        }
        if phase == 3 {
            return Step::from(Reply::Content("slow answer".into())).with_delay(Duration::from_secs(20));
        }
        let text = match phase {
            0 => "db-7 looks healthy.".to_string(),
            1 => "The sum is 42 (from get-sum).".to_string(),
            _ => format!("@channel {}", "long answer line\n".repeat(1200)),
        };
        Step::from(Reply::Content(text))
    }
}

fn manifests(dir: &Path, telegram: &str, mattermost: &str) -> PathBuf {
    let resources = dir.join("resources");
    std::fs::create_dir_all(&resources).unwrap();
    let yaml = format!(
        r#"apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {{name: tg-poll}}
spec:
  type: telegram
  telegram: {{botToken: {{env: BOTS_TG_TOKEN}}, chatId: "{CHAT}", baseUrl: "{telegram}"}}
  inbound: {{mode: polling, allowedUserIds: ["{USER}"]}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {{name: tg-hook}}
spec:
  type: telegram
  telegram: {{botToken: {{env: BOTS_TG_TOKEN}}, chatId: "-1009", baseUrl: "{telegram}"}}
  inbound: {{mode: webhook, secret: {{env: BOTS_TG_SECRET}}, allowedConversationIds: ["{CHAT}"]}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {{name: mm}}
spec:
  type: mattermost
  mattermost: {{baseUrl: "{mattermost}", botToken: {{env: BOTS_MM_TOKEN}}, channelId: {MM_CHANNEL}}}
  inbound: {{mode: webhook, secret: {{env: BOTS_MM_SECRET}}, allowedUserIds: [{MM_USER}]}}
---
{adapter}---
apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {{name: am}}
spec: {{provider: alertmanager, auth: {{bearerToken: {{env: BOTS_AM_TOKEN}}}}}}
"#,
        adapter = everything::adapter_manifest(),
    );
    std::fs::write(resources.join("bots.yaml"), yaml).unwrap();
    resources
}

struct Host {
    data: PathBuf,
    resources: PathBuf,
    llm: String,
}

impl Host {
    fn new(dir: &Path, telegram: &TelegramStandIn, mattermost: &MattermostStandIn, llm: &ScriptedLlm) -> Host {
        Host { data: dir.join("data"), resources: manifests(dir, &telegram.url, &mattermost.url), llm: llm.url.clone() }
    }

    async fn start(&self) -> support::Server {
        let mut command = support::serve_command(env!("CARGO_BIN_EXE_akritas"));
        command
            .env("AKRITAS_DATA_DIR", &self.data)
            .env("AKRITAS_BASE_URL", &self.llm)
            .env("AKRITAS_RESOURCE_ENV", "BOTS_*")
            .env("AKRITAS_STDIO_COMMANDS", everything::node())
            .env("BOTS_TG_TOKEN", TG_TOKEN)
            .env("BOTS_TG_SECRET", TG_SECRET)
            .env("BOTS_MM_TOKEN", MM_TOKEN)
            .env("BOTS_MM_SECRET", MM_SECRET)
            .env("BOTS_AM_TOKEN", AM_TOKEN)
            .arg("--resources")
            .arg(&self.resources);
        let server = tokio::task::spawn_blocking(move || support::Server::start(command)).await.unwrap();
        // The MCP adapter's tools are offered once it is connected.
        support::wait_for_tool(&server.url, "mcp.everything.get-sum").await;
        server
    }
}

async fn wait<T, F: std::future::Future<Output = Option<T>>>(what: &str, check: impl FnMut() -> F) -> T {
    support::wait_for(what, Duration::from_secs(30), check).await
}

/// The Telegram replies sent to message `message_id`.
fn replies_to(telegram: &TelegramStandIn, message_id: i64) -> Vec<Value> {
    telegram.sent().into_iter().filter(|m| m["reply_parameters"]["message_id"] == message_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_conversation_by_polling_uses_mcp_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let telegram = TelegramStandIn::start(TG_TOKEN).await;
    let mattermost = MattermostStandIn::start(MM_TOKEN).await;
    let phase = Arc::new(AtomicU8::new(0));
    let llm = ScriptedLlm::start_with(model(phase.clone())).await;
    let host = Host::new(dir.path(), &telegram, &mattermost, &llm);
    let server = host.start().await;

    // Turn 1, and a message from another bot that is ignored.
    telegram.push_update(bot_text_update(1, CHAT, 999, 9, "I am a bot"));
    telegram.push_update(text_update(2, CHAT, USER, 10, "Is db-7 healthy?", None, None));
    let first = wait("the first reply", || async { replies_to(&telegram, 10).into_iter().next() }).await;
    assert_eq!(first["text"], "db-7 looks healthy.");
    assert_eq!(first["chat_id"].to_string().trim_matches('"'), CHAT.to_string());
    assert!(replies_to(&telegram, 9).is_empty(), "a bot sender is ignored");

    // Turn 2 uses a tool through MCP.
    phase.store(1, Ordering::SeqCst);
    telegram.push_update(text_update(3, CHAT, USER, 11, "What is 2 + 40?", None, None));
    let second = wait("the second reply", || async { replies_to(&telegram, 11).into_iter().next() }).await;
    assert_eq!(second["text"], "The sum is 42 (from get-sum).");
    let all = support::runs(&server.url).await;
    let bot_runs: Vec<&Value> = all.iter().filter(|r| r["source"] == "telegram_bot").collect();
    assert_eq!(bot_runs.len(), 2, "one Run per message: {all:?}");
    for run in &bot_runs {
        assert_eq!(
            (run["actor"].as_str(), run["namespace"].as_str()),
            (Some(&*format!("telegram:{USER}")), Some("default"))
        );
    }
    let detail = support::run_detail(&server.url, bot_runs[0]["id"].as_str().unwrap()).await;
    let tool = detail["events"].as_array().unwrap().iter().find(|e| e["metadata"]["tool"] == "mcp.everything.get-sum");
    assert!(tool.is_some_and(|e| e["status"] == "succeeded"), "the tool ran through MCP: {detail}");

    // Restart in the middle of the conversation: history kept, nothing answered twice.
    assert_eq!(server.terminate(), Some(0));
    phase.store(0, Ordering::SeqCst);
    let server = host.start().await;
    telegram.push_update(text_update(4, CHAT, USER, 12, "Thanks, and db-8?", None, None));
    wait("the third reply", || async { replies_to(&telegram, 12).into_iter().next() }).await;
    let third_request = llm.requests().into_iter().rev().find(|r| r.to_string().contains("Thanks, and db-8?")).unwrap();
    let text = third_request["messages"].to_string();
    assert!(text.contains("Is db-7 healthy?") && text.contains("The sum is 42"), "the history came back: {text}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    for message_id in [10, 11, 12] {
        assert_eq!(replies_to(&telegram, message_id).len(), 1, "message {message_id} answered exactly once");
    }
    assert_eq!(support::runs(&server.url).await.iter().filter(|r| r["source"] == "telegram_bot").count(), 3);
    let log = server.log_text();
    assert!(!log.contains(TG_TOKEN) && !log.contains("telegram-bot-token"), "the bot token is not logged");
    // Bot Runs are offered read-only tools only: nothing that could reach the change pipeline.
    for request in llm.requests() {
        for tool in request["tools"].as_array().into_iter().flatten() {
            let name = tool["function"]["name"].as_str().unwrap_or_default();
            assert!(!name.contains("apply") && !name.contains("propose") && !name.starts_with("change"), "{name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_webhook_checks_its_secret_before_the_body_and_answers_each_update_once() {
    let dir = tempfile::tempdir().unwrap();
    let telegram = TelegramStandIn::start(TG_TOKEN).await;
    let mattermost = MattermostStandIn::start(MM_TOKEN).await;
    let llm = ScriptedLlm::start_with(model(Arc::new(AtomicU8::new(0)))).await;
    let host = Host::new(dir.path(), &telegram, &mattermost, &llm);
    let server = host.start().await;
    let url = format!("{}/api/v1/bots/telegram/tg-hook/webhook", server.url);
    let client = reqwest::Client::new();
    let send = |secret: Option<&str>, body: String| {
        let mut request = client.post(&url).header("content-type", "application/json").body(body);
        if let Some(secret) = secret {
            request = request.header("x-telegram-bot-api-secret-token", secret);
        }
        request.send()
    };
    // A forged secret is refused before the body is read: this body would not parse.
    let forged = send(Some("forged-secret"), "{not json".into()).await.unwrap();
    assert_eq!(forged.status(), 401);
    assert_eq!(send(None, "{not json".into()).await.unwrap().status(), 401);
    assert_eq!(send(Some(TG_SECRET), "{not json".into()).await.unwrap().status(), 400);

    let update = text_update(70, CHAT, USER, 20, "Is db-7 healthy?", None, None).to_string();
    let accepted: Value = send(Some(TG_SECRET), update.clone()).await.unwrap().json().await.unwrap();
    assert_eq!(accepted, json!({"accepted": true, "duplicate": false}));
    let again: Value = send(Some(TG_SECRET), update).await.unwrap().json().await.unwrap();
    assert_eq!(again, json!({"accepted": true, "duplicate": true}));
    // Another chat is not on the allowlist.
    let other = text_update(71, -100999, USER, 21, "hello", None, None).to_string();
    let refused: Value = send(Some(TG_SECRET), other).await.unwrap().json().await.unwrap();
    assert_eq!(refused, json!({"accepted": false}));
    // An unknown receiver, and a polling receiver, take no webhooks.
    let unknown =
        client.post(format!("{}/api/v1/bots/telegram/nobody/webhook", server.url)).body("{}").send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    let polling =
        client.post(format!("{}/api/v1/bots/telegram/tg-poll/webhook", server.url)).body("{}").send().await.unwrap();
    assert_eq!(polling.status(), 404);

    wait("the reply", || async { replies_to(&telegram, 20).into_iter().next() }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(replies_to(&telegram, 20).len(), 1, "a duplicate update is not answered twice");
    assert!(replies_to(&telegram, 21).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mattermost_conversation_in_a_thread_uses_mcp_and_neutralises_mentions() {
    let dir = tempfile::tempdir().unwrap();
    let telegram = TelegramStandIn::start(TG_TOKEN).await;
    let mattermost = MattermostStandIn::start(MM_TOKEN).await;
    let phase = Arc::new(AtomicU8::new(0));
    let llm = ScriptedLlm::start_with(model(phase.clone())).await;
    let host = Host::new(dir.path(), &telegram, &mattermost, &llm);
    let server = host.start().await;
    let url = format!("{}/api/v1/bots/mattermost/mm/webhook", server.url);
    let client = reqwest::Client::new();
    let post_json = |body: Value| client.post(&url).json(&body).send();
    let post_form =
        |body: String| client.post(&url).header("content-type", "application/x-www-form-urlencoded").body(body).send();
    let replies =
        |root: &str| -> Vec<Value> { mattermost.posts().into_iter().filter(|p| p["root_id"] == root).collect() };

    // A wrong token is refused; a user off the allowlist is not answered.
    let wrong = post_json(outgoing_webhook_json(
        "wrong",
        MM_CHANNEL,
        MM_USER,
        "post00000000000000000000001",
        "akritas hi",
        "akritas",
    ));
    assert_eq!(wrong.await.unwrap().status(), 401);
    let stranger = post_json(outgoing_webhook_json(
        MM_SECRET,
        MM_CHANNEL,
        "stranger0000000000000000001",
        "post00000000000000000000002",
        "akritas hi",
        "akritas",
    ));
    assert_eq!(stranger.await.unwrap().json::<Value>().await.unwrap(), json!({"accepted": false}));

    // The person's posts exist on the server (replies are threaded under them).
    let user_post = |message: &'static str| {
        let (client, base) = (client.clone(), mattermost.url.clone());
        async move {
            let created: Value = client
                .post(format!("{base}/api/v4/posts"))
                .bearer_auth(MM_TOKEN)
                .json(&json!({"channel_id": MM_CHANNEL, "message": message}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            created["id"].as_str().unwrap().to_string()
        }
    };
    // Turn 1 (JSON outgoing webhook), turn 2 (form body, a tool through MCP).
    let root = user_post("akritas Is db-7 healthy?").await;
    let root = root.as_str();
    let first =
        post_json(outgoing_webhook_json(MM_SECRET, MM_CHANNEL, MM_USER, root, "akritas Is db-7 healthy?", "akritas"));
    assert_eq!(first.await.unwrap().json::<Value>().await.unwrap()["accepted"], true);
    wait("the first reply", || async { replies(root).into_iter().next() }).await;
    phase.store(1, Ordering::SeqCst);
    let second_post = user_post("akritas What is 2 + 40?").await;
    let second = post_form(outgoing_webhook_form(
        MM_SECRET,
        MM_CHANNEL,
        MM_USER,
        &second_post,
        "akritas What is 2 + 40?",
        "akritas",
    ));
    assert_eq!(second.await.unwrap().status(), 200);
    let answer = wait("the second reply", || async {
        mattermost.posts().into_iter().find(|p| p["message"].as_str().is_some_and(|m| m.contains("42")))
    })
    .await;
    assert_eq!(answer["channel_id"], MM_CHANNEL);
    // Turn 3 (slash command): a long answer with a mention is split and neutralised.
    phase.store(2, Ordering::SeqCst);
    let third = post_form(slash_command_form(MM_SECRET, MM_CHANNEL, MM_USER, "summarise please", "/akritas"));
    assert_eq!(third.await.unwrap().status(), 200);
    let parts = wait("the long reply", || async {
        let parts: Vec<Value> = mattermost
            .posts()
            .into_iter()
            .filter(|p| p["message"].as_str().is_some_and(|m| m.contains("long answer line")))
            .collect();
        (parts.len() >= 2).then_some(parts)
    })
    .await;
    assert!(
        parts[0]["message"].as_str().unwrap().starts_with("(1/2)\n"),
        "{}",
        &parts[0]["message"].as_str().unwrap()[..40]
    );
    for part in &parts {
        let message = part["message"].as_str().unwrap();
        assert!(message.chars().count() <= 16000);
        assert!(!message.contains("@channel"), "mentions are neutralised");
    }
    let all = support::runs(&server.url).await;
    let bot_runs: Vec<&Value> = all.iter().filter(|r| r["source"] == "mattermost_bot").collect();
    assert_eq!(bot_runs.len(), 3, "{all:?}");
    assert!(bot_runs.iter().all(|r| r["actor"] == format!("mattermost:{MM_USER}") && r["namespace"] == "default"));
    let log = server.log_text();
    assert!(!log.contains(MM_TOKEN) && !log.contains(MM_SECRET), "no secret in the log");
}

/// An incident's notification opens a thread; a reply to it is answered with the
/// incident as context, and the Run records which incident it was about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_to_an_incident_notification_is_answered_with_the_incident() {
    let dir = tempfile::tempdir().unwrap();
    let telegram = TelegramStandIn::start(TG_TOKEN).await;
    let mattermost = MattermostStandIn::start(MM_TOKEN).await;
    let llm = ScriptedLlm::start_with(model(Arc::new(AtomicU8::new(0)))).await;
    let host = Host::new(dir.path(), &telegram, &mattermost, &llm);
    let server = host.start().await;
    let alert = json!({"version": "4", "status": "firing", "receiver": "akritas", "groupKey": "{}:{alertname=\"PostgresDown\"}",
        "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am", "truncatedAlerts": 0,
        "alerts": [{"status": "firing", "labels": {"alertname": "PostgresDown", "severity": "critical", "instance": "db-7"},
                    "annotations": {"summary": "db-7 is down"}, "startsAt": "2026-12-01T00:00:00Z",
                    "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prom", "fingerprint": "00000000000000aa"}]});
    let posted = reqwest::Client::new()
        .post(format!("{}/api/v1/alerts/am/webhook", server.url))
        .bearer_auth(AM_TOKEN)
        .json(&alert)
        .send()
        .await
        .unwrap();
    assert!(posted.status().is_success(), "{}", posted.text().await.unwrap());
    // The polling receiver's chat gets the notification: the thread's root.
    let root = wait("the incident notification", || async {
        telegram.sent().into_iter().find(|m| {
            m["chat_id"].to_string().trim_matches('"') == CHAT.to_string()
                && m["text"].as_str().is_some_and(|t| t.contains("db-7 ran out of connections"))
        })
    })
    .await;
    // The host journals a new thread as soon as its message is out, and before it records the
    // job's deliveries: once those are recorded, the thread is linked to its incident (the
    // link not waiting for the slowest receiver is tests/alert_worker.rs's).
    wait("the deliveries recorded", || async {
        let incidents: Value =
            reqwest::get(format!("{}/api/v1/incidents", server.url)).await.ok()?.json().await.ok()?;
        let id = incidents["incidents"][0]["id"].as_str()?.to_string();
        let detail: Value =
            reqwest::get(format!("{}/api/v1/incidents/{id}", server.url)).await.ok()?.json().await.ok()?;
        let deliveries = detail["deliveries"].as_array()?;
        (!deliveries.is_empty() && deliveries.iter().all(|d| d["delivery"]["status"] != "pending")).then_some(())
    })
    .await;
    // The id the stand-in gave the root (not its place among the requests: the other
    // receiver's notification is sent at the same time, and either may be numbered first).
    let root_message_id = telegram.message_id_of(&root).unwrap();
    let reply = text_update(90, CHAT, USER, 30, "What should I check first?", None, Some(root_message_id));
    assert_eq!(reply["message"]["reply_to_message"]["message_id"], root_message_id, "{reply}");
    telegram.push_update(reply);
    wait("the follow-up answer", || async { replies_to(&telegram, 30).into_iter().next() }).await;
    let asked =
        llm.requests().into_iter().rev().find(|r| r.to_string().contains("What should I check first?")).unwrap();
    let incidents: Value =
        reqwest::get(format!("{}/api/v1/incidents", server.url)).await.unwrap().json().await.unwrap();
    let incident = incidents["incidents"][0]["id"].as_str().unwrap().to_string();
    assert!(asked["messages"].to_string().contains(&incident), "the follow-up carries the incident: {asked}");
    let run = support::runs(&server.url).await.into_iter().find(|r| r["source"] == "telegram_bot").unwrap();
    assert_eq!(run["metadata"]["incident_id"], incident.as_str());
}

/// A full queue answers 503 with `Retry-After`, so the provider retries; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_bot_queue_answers_503_so_the_provider_retries() {
    let dir = tempfile::tempdir().unwrap();
    let telegram = TelegramStandIn::start(TG_TOKEN).await;
    let mattermost = MattermostStandIn::start(MM_TOKEN).await;
    // Every answer takes 20 s: the 64-message queue fills.
    let llm = ScriptedLlm::start_with(model(Arc::new(AtomicU8::new(3)))).await;
    let host = Host::new(dir.path(), &telegram, &mattermost, &llm);
    let server = host.start().await;
    let url = format!("{}/api/v1/bots/telegram/tg-hook/webhook", server.url);
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for i in 0..80 {
        let update = text_update(1000 + i, CHAT, USER, 500 + i, &format!("question {i}"), None, None);
        let response =
            client.post(&url).header("x-telegram-bot-api-secret-token", TG_SECRET).json(&update).send().await.unwrap();
        let retry = response.headers().get("retry-after").is_some();
        statuses.push((response.status().as_u16(), retry));
    }
    let accepted = statuses.iter().filter(|(s, _)| *s == 200).count();
    let refused: Vec<_> = statuses.iter().filter(|(s, _)| *s == 503).collect();
    assert_eq!(accepted, 64, "the queue holds 64 messages: {statuses:?}");
    assert_eq!(refused.len(), 16, "{statuses:?}");
    assert!(refused.iter().all(|(_, retry)| *retry), "503s carry Retry-After");
    // A refused update was not recorded: sent again, it is not taken for a duplicate.
    let again = text_update(1079, CHAT, USER, 579, "question 79", None, None);
    let response =
        client.post(&url).header("x-telegram-bot-api-secret-token", TG_SECRET).json(&again).send().await.unwrap();
    assert_eq!(response.status(), 503, "still full, and still not recorded");
}
