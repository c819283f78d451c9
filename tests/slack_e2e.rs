//! Slack through the real `akritas serve` binary against the testkit's Slack stand-in (Web API,
//! signed Events API sender, Socket Mode WebSocket server, `response_url`): conversations over
//! the Events API and over Socket Mode (an MCP tool in the second turn, a restart in the
//! middle), signature attacks, retries and replays answered once, allowlists and bots ignored,
//! the slash command, a Socket Mode connection refreshed and dropped without a lost envelope,
//! and a real Prometheus → Alertmanager alert whose Slack thread gets the resolve notice and
//! whose replies are answered with the incident as context.

use akritas_testkit as support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use akritas::tools::{ToolName, openai_alias};
use serde_json::{Value, json};
use support::everything;
use support::prom;
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use support::slack::{
    self, BOT_ID, BOT_USER_ID, SlackStandIn, TEAM_ID, app_mention, bot_message, event_callback, message, own_message,
};

const BOT_TOKEN: &str = "xoxb-1111-2222-akritas-e2e-bot-token";
const APP_TOKEN: &str = "xapp-1-A0AKRITAS1-3333-akritas-e2e-app-token";
const SIGNING: &str = "e2e0signing0secret0akritas0000001";
const AM_TOKEN: &str = "slack-alertmanager-token-0123";
const PERSON: &str = "U0PERSON01";
const CHAT: &str = "C0CHAT0001";
const ALERTS: &str = "C0ALERTS01";
const DM: &str = "D0DIRECT01";

/// Answers by phase: 0 plans nothing and answers; 1 plans `get-sum` through MCP and answers
/// with its result; 2 answers with mentions and a forged link.
fn model(phase: Arc<AtomicU8>) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let submit = openai_alias(&ToolName::try_from("local.investigation.submit_result").unwrap());
    move |_, request| {
        let phase = phase.load(Ordering::SeqCst);
        if offers(request, &submit) {
            let result = json!({"finding_status": "inconclusive", "actionability": "requires_human", "confidence": "low",
                "summary": "db-7 ran out of connections <!channel>", "impact": "", "evidence": [], "ruled_out": [],
                "affected_components": ["db-7"], "recommended_actions": ["check db-7 @here"], "production_writes": 0});
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
        let text = match phase {
            0 => "db-7 looks healthy.",
            1 => "The sum is 42 (from get-sum).",
            _ => "<!channel> see <https://evil.example|the fix> @here",
        };
        Step::from(Reply::Content(text.into()))
    }
}

fn manifests(dir: &Path, slack: &SlackStandIn) -> PathBuf {
    let resources = dir.join("resources");
    std::fs::create_dir_all(&resources).unwrap();
    let api = slack.api_url();
    let yaml = format!(
        r#"apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {{name: slack-events}}
spec:
  type: slack
  slack: {{botToken: {{env: SLACK_BOT_TOKEN}}, channelId: {ALERTS}, baseUrl: "{api}"}}
  inbound: {{mode: webhook, secret: {{env: SLACK_SIGNING}}, allowedUserIds: [{PERSON}]}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {{name: slack-socket}}
spec:
  type: slack
  slack: {{botToken: {{env: SLACK_BOT_TOKEN}}, appToken: {{env: SLACK_APP_TOKEN}}, channelId: {ALERTS}, baseUrl: "{api}"}}
  inbound: {{mode: socket, allowedUserIds: [{PERSON}]}}
  routing: {{alertSources: [nothing-here]}}
---
{adapter}---
apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {{name: am}}
spec: {{provider: alertmanager, auth: {{bearerToken: {{env: SLACK_AM_TOKEN}}}}}}
"#,
        adapter = everything::adapter_manifest(),
    );
    std::fs::write(resources.join("slack.yaml"), yaml).unwrap();
    resources
}

struct Host {
    data: PathBuf,
    resources: PathBuf,
    llm: String,
}

impl Host {
    fn new(dir: &Path, slack: &SlackStandIn, llm: &ScriptedLlm) -> Host {
        Host { data: dir.join("data"), resources: manifests(dir, slack), llm: llm.url.clone() }
    }

    async fn start(&self) -> support::Server {
        let mut command = support::serve_command(env!("CARGO_BIN_EXE_akritas"));
        command
            .env("AKRITAS_DATA_DIR", &self.data)
            .env("AKRITAS_BASE_URL", &self.llm)
            .env("AKRITAS_RESOURCE_ENV", "SLACK_*")
            .env("AKRITAS_STDIO_COMMANDS", everything::node())
            .env("SLACK_BOT_TOKEN", BOT_TOKEN)
            .env("SLACK_APP_TOKEN", APP_TOKEN)
            .env("SLACK_SIGNING", SIGNING)
            .env("SLACK_AM_TOKEN", AM_TOKEN)
            .arg("--resources")
            .arg(&self.resources);
        let server = tokio::task::spawn_blocking(move || support::Server::start(command)).await.unwrap();
        support::wait_for_tool(&server.url, "mcp.everything.get-sum").await;
        server
    }
}

/// Sends `signal` to the server's process.
fn signal(server: &support::Server, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(server.pid()).unwrap();
    // SAFETY: sending a signal to our own child process has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// A temporary directory, the Slack stand-in, the model (with its phase) and the host.
struct Fixture {
    _dir: tempfile::TempDir,
    slack: SlackStandIn,
    phase: Arc<AtomicU8>,
    llm: ScriptedLlm,
    host: Host,
}

impl Fixture {
    async fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let slack = SlackStandIn::start(BOT_TOKEN, APP_TOKEN, SIGNING).await;
        let phase = Arc::new(AtomicU8::new(0));
        let llm = ScriptedLlm::start_with(model(phase.clone())).await;
        let host = Host::new(dir.path(), &slack, &llm);
        Fixture { _dir: dir, slack, phase, llm, host }
    }
}

async fn wait<T, F: std::future::Future<Output = Option<T>>>(what: &str, check: impl FnMut() -> F) -> T {
    support::wait_for(what, Duration::from_secs(60), check).await
}

fn events_url(server: &support::Server) -> String {
    format!("{}/api/v1/bots/slack/slack-events/events", server.url)
}

/// Sends a signed event callback; its answer's JSON body.
async fn send(server: &support::Server, event_id: &str, event: Value, retry: Option<u32>) -> Value {
    let client = reqwest::Client::new();
    let response =
        slack::send_event(&client, &events_url(server), SIGNING, &event_callback(event_id, event), retry).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// The bot's replies in a thread, or (with `None`) its top-level messages in a channel.
fn replies(slack: &SlackStandIn, channel: &str, thread: Option<&str>) -> Vec<Value> {
    match thread {
        Some(ts) => slack.thread(channel, ts),
        None => slack
            .messages()
            .into_iter()
            .filter(|m| m["channel"] == channel && m.get("thread_ts").is_none() && m["user"] == BOT_USER_ID)
            .collect(),
    }
}

async fn wait_replies(slack: &SlackStandIn, channel: &str, thread: Option<&str>, count: usize) -> Vec<Value> {
    wait(&format!("{count} replies in {channel}"), || async {
        let found = replies(slack, channel, thread);
        (found.len() >= count).then_some(found)
    })
    .await
}

/// Bot Runs of a source, oldest first.
async fn bot_runs(url: &str) -> Vec<Value> {
    let mut found: Vec<Value> = support::runs(url).await.into_iter().filter(|r| r["source"] == "slack_bot").collect();
    found.reverse();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_over_the_events_api_uses_mcp_and_survives_a_restart() {
    let Fixture { _dir, slack, phase, llm, host } = Fixture::new().await;
    let server = host.start().await;

    // Turn 1: a mention starts a thread under the message. The bot's own messages and other
    // bots' are not answered.
    let root = slack.seed_message(CHAT, PERSON, "<@U0AKRITASBOT> is db-7 healthy?");
    let own = send(&server, "Ev0OWN", own_message(CHAT, "channel", "an answer", &slack::new_ts()), None).await;
    let other = send(&server, "Ev0BOT", bot_message("B0OTHER", CHAT, "channel", "beep", &slack::new_ts()), None).await;
    assert_eq!((own["accepted"].as_bool(), other["accepted"].as_bool()), (Some(false), Some(false)));
    let mention = app_mention(PERSON, CHAT, "<@U0AKRITASBOT> is db-7 healthy?", &root, None);
    assert_eq!(send(&server, "Ev01", mention, None).await, json!({"accepted": true, "duplicate": false}));
    let first = wait_replies(&slack, CHAT, Some(&root), 1).await;
    assert_eq!(first[0]["text"], "db-7 looks healthy.");

    // Turn 2, a reply in that thread without a mention, uses a tool through MCP.
    phase.store(1, Ordering::SeqCst);
    let ts = slack::new_ts();
    send(&server, "Ev02", message(PERSON, CHAT, "channel", "and what is 2 + 40?", &ts, Some(&root)), None).await;
    let second = wait_replies(&slack, CHAT, Some(&root), 2).await;
    assert_eq!(second[1]["text"], "The sum is 42 (from get-sum).");
    let done = bot_runs(&server.url).await;
    assert_eq!(done.len(), 2, "one Run per message: {done:?}");
    for run in &done {
        assert_eq!(run["actor"], format!("slack:{TEAM_ID}/{PERSON}"));
        assert_eq!(run["namespace"], "default");
    }
    let detail = support::run_detail(&server.url, done[1]["id"].as_str().unwrap()).await;
    let tool = detail["events"].as_array().unwrap().iter().find(|e| e["metadata"]["tool"] == "mcp.everything.get-sum");
    assert!(tool.is_some_and(|e| e["status"] == "succeeded"), "the tool ran through MCP: {detail}");

    // A restart in the middle of the conversation: history kept, nothing answered twice.
    assert_eq!(server.terminate(), Some(0));
    phase.store(0, Ordering::SeqCst);
    let server = host.start().await;
    let ts = slack::new_ts();
    send(&server, "Ev03", message(PERSON, CHAT, "channel", "thanks, and db-8?", &ts, Some(&root)), None).await;
    wait_replies(&slack, CHAT, Some(&root), 3).await;
    let third = llm.requests().into_iter().rev().find(|r| r.to_string().contains("thanks, and db-8?")).unwrap();
    let text = third["messages"].to_string();
    assert!(text.contains("is db-7 healthy?") && text.contains("The sum is 42"), "the history came back: {text}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(replies(&slack, CHAT, Some(&root)).len(), 3, "each message answered exactly once");
    assert_eq!(bot_runs(&server.url).await.len(), 3);
    let log = server.log_text();
    assert!(!log.contains(BOT_TOKEN) && !log.contains(SIGNING), "no secret is logged");
    for request in llm.requests() {
        for tool in request["tools"].as_array().into_iter().flatten() {
            let name = tool["function"]["name"].as_str().unwrap_or_default();
            assert!(!name.contains("apply") && !name.contains("propose") && !name.starts_with("change"), "{name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_replays_retries_allowlists_and_the_slash_command() {
    let Fixture { _dir, slack, phase, llm: _llm, host } = Fixture::new().await;
    let server = host.start().await;
    let client = reqwest::Client::new();
    let url = events_url(&server);

    // A wrong signature over a body that would not parse: 401 before the body is decoded.
    let garbage = b"{not json".to_vec();
    let wrong =
        slack::send_signed(&client, &url, SIGNING, slack::now(), "application/json", garbage, Some("v0=00".into()));
    let wrong = wrong.await;
    assert_eq!(wrong.status(), 401);
    assert_eq!(wrong.json::<Value>().await.unwrap()["error"]["code"], "unauthorized");
    // Signed with another secret.
    let other =
        slack::send_signed(&client, &url, "another-secret", slack::now(), "application/json", b"{}".to_vec(), None);
    assert_eq!(other.await.status(), 401);
    // A correct signature six minutes old: refused, so a captured request cannot be replayed later.
    let root = slack.seed_message(CHAT, PERSON, "<@U0AKRITASBOT> hello");
    let body =
        serde_json::to_vec(&event_callback("Ev10", app_mention(PERSON, CHAT, "<@U0AKRITASBOT> hello", &root, None)))
            .unwrap();
    let old =
        slack::send_signed(&client, &url, SIGNING, slack::now() - 360, "application/json", body.clone(), None).await;
    assert_eq!(old.status(), 401);
    assert_eq!(old.json::<Value>().await.unwrap()["error"]["code"], "request_expired");
    assert!(replies(&slack, CHAT, Some(&root)).is_empty());

    // The URL check.
    let challenge = slack::send_event(&client, &url, SIGNING, &slack::url_verification("ch4ll3nge"), None).await;
    assert_eq!(challenge.json::<Value>().await.unwrap()["challenge"], "ch4ll3nge");

    // Within the window: the request, the same request replayed byte for byte, and Slack's
    // retries (the same event three times in all) are answered once.
    let now = slack::now();
    let signature = slack::sign(SIGNING, now, &body);
    for _ in 0..2 {
        let sent =
            slack::send_signed(&client, &url, SIGNING, now, "application/json", body.clone(), Some(signature.clone()));
        assert_eq!(sent.await.status(), 200);
    }
    let mention = app_mention(PERSON, CHAT, "<@U0AKRITASBOT> hello", &root, None);
    for retry in [1, 2] {
        let again = send(&server, "Ev10", mention.clone(), Some(retry)).await;
        assert_eq!(again, json!({"accepted": true, "duplicate": true}));
    }
    // The same message as a `message.channels` event (another event id) is the same message.
    let same =
        send(&server, "Ev11", message(PERSON, CHAT, "channel", "<@U0AKRITASBOT> hello", &root, None), None).await;
    assert_eq!(same["accepted"], false, "a channel message is answered through its mention");
    wait_replies(&slack, CHAT, Some(&root), 1).await;

    // Someone off the allowlist.
    let stranger_ts = slack.seed_message(CHAT, "U0STRANGER", "<@U0AKRITASBOT> hi");
    let stranger =
        send(&server, "Ev12", app_mention("U0STRANGER", CHAT, "<@U0AKRITASBOT> hi", &stranger_ts, None), None);
    assert_eq!(stranger.await["accepted"], false);

    // The model's mentions and a forged link come out inert.
    phase.store(2, Ordering::SeqCst);
    let dm_ts = slack::new_ts();
    send(&server, "Ev13", message(PERSON, DM, "im", "what should I do?", &dm_ts, None), None).await;
    let direct = wait_replies(&slack, DM, None, 1).await;
    let text = direct[0]["text"].as_str().unwrap();
    assert_eq!(text, "&lt;!channel&gt; see &lt;https://evil.example|the fix&gt; ＠here");
    assert_eq!(direct[0]["blocks"][0]["text"]["text"], text);

    // The slash command: answered at once, the answer through its response_url.
    phase.store(0, Ordering::SeqCst);
    let response_url = slack.response_url();
    let commands = format!("{}/api/v1/bots/slack/slack-events/commands", server.url);
    let form = slack::slash_command_form("/akritas", "status", PERSON, CHAT, &response_url);
    let acked = slack::send_command(&client, &commands, SIGNING, form).await;
    assert_eq!(acked.status(), 200);
    let acked: Value = acked.json().await.unwrap();
    assert_eq!((acked["response_type"].as_str(), acked["accepted"].as_bool()), (Some("ephemeral"), Some(true)));
    let answered = wait("the status answer", || async { slack.responses(&response_url).into_iter().next() }).await;
    assert_eq!(answered["response_type"], "in_channel");
    assert!(answered["text"].as_str().unwrap().contains("message"), "{answered}");
    let question_url = slack.response_url();
    let form = slack::slash_command_form("/akritas", "is db-7 healthy?", PERSON, CHAT, &question_url);
    slack::send_command(&client, &commands, SIGNING, form).await;
    let answered = wait("the answer", || async { slack.responses(&question_url).into_iter().next() }).await;
    assert_eq!(answered["text"], "db-7 looks healthy.");
    // A command with an unsigned body is refused like an event.
    let unsigned = client.post(&commands).body("command=%2Fakritas&text=status").send().await.unwrap();
    assert_eq!(unsigned.status(), 401);

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(replies(&slack, CHAT, Some(&root)).len(), 1, "answered once");
    assert!(replies(&slack, CHAT, Some(&stranger_ts)).is_empty(), "the stranger is not answered");
    assert_eq!(bot_runs(&server.url).await.len(), 3, "hello, the direct question, the slash question");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_mode_keeps_a_conversation_through_refreshes_drops_and_a_restart() {
    let Fixture { _dir, slack, phase, llm, host } = Fixture::new().await;
    let server = host.start().await;
    wait("the socket", || async { slack.connected().then_some(()) }).await;
    let status = |server: &support::Server| {
        let url = format!("{}/api/v1/resources", server.url);
        async move {
            let body: Value = reqwest::get(url).await.ok()?.json().await.ok()?;
            let receiver = body["resources"].as_array()?.iter().find(|r| r["name"] == "slack-socket")?.clone();
            receiver["conditions"].as_array()?.iter().find(|c| c["type"] == "Connected").cloned()
        }
    };
    let connected = wait("Connected", || async { status(&server).await.filter(|c| c["status"] == "True") }).await;
    assert_eq!(connected["reason"], "Connected");

    let say = |id: &str, text: &str| {
        slack.push_event(event_callback(id, message(PERSON, DM, "im", text, &slack::new_ts(), None)));
    };
    say("EvS1", "is db-7 healthy?");
    assert_eq!(wait_replies(&slack, DM, None, 1).await[0]["text"], "db-7 looks healthy.");

    // Slack refreshes the connection; an envelope pushed meanwhile is not lost.
    phase.store(1, Ordering::SeqCst);
    slack.disconnect("refresh_requested");
    say("EvS2", "what is 2 + 40?");
    assert_eq!(wait_replies(&slack, DM, None, 2).await[1]["text"], "The sum is 42 (from get-sum).");

    // A dropped connection; an envelope pushed meanwhile waits for the next one.
    phase.store(0, Ordering::SeqCst);
    slack.drop_connection();
    say("EvS3", "and db-8?");
    wait_replies(&slack, DM, None, 3).await;

    // An envelope in flight when the connection drops: Slack sent it while the host was frozen
    // (SIGSTOP), so it was not acknowledged, and Slack sends it again on the next connection.
    wait("the socket", || async { slack.connected().then_some(()) }).await;
    let sent = slack.deliveries().len();
    signal(&server, libc::SIGSTOP);
    say("EvS4", "and db-10?");
    wait("the envelope on the wire", || async { (slack.deliveries().len() > sent).then_some(()) }).await;
    slack.drop_connection();
    signal(&server, libc::SIGCONT);
    wait_replies(&slack, DM, None, 4).await;
    wait("the envelope again", || async { slack.deliveries().iter().any(|(_, attempt)| *attempt > 0).then_some(()) })
        .await;

    // A restart: history kept, the next message answered with it.
    assert_eq!(server.terminate(), Some(0));
    say("EvS5", "and db-9?");
    let server = host.start().await;
    wait_replies(&slack, DM, None, 5).await;
    let fourth = llm.requests().into_iter().rev().find(|r| r.to_string().contains("and db-9?")).unwrap();
    let text = fourth["messages"].to_string();
    assert!(text.contains("is db-7 healthy?") && text.contains("The sum is 42"), "the history came back: {text}");

    // A slash command over the socket: acknowledged with the immediate answer.
    let response_url = slack.response_url();
    slack.push_command(&slack::slash_command_form("/akritas", "status", PERSON, DM, &response_url));
    wait("the status answer", || async { slack.responses(&response_url).into_iter().next() }).await;
    assert!(slack.ack_payloads().iter().any(|(_, p)| p["text"] == "Working on it…"));

    // The receiver changes (another allowed user): its connection is replaced, the old one
    // ends before the new one opens, and the condition stays with the new one.
    let opened = slack.connections_opened();
    let manifest = host.resources.join("slack.yaml");
    let yaml = std::fs::read_to_string(&manifest).unwrap();
    let widened = format!("inbound: {{mode: socket, allowedUserIds: [{PERSON}, U0OTHER01]}}");
    std::fs::write(
        &manifest,
        yaml.replace(&format!("inbound: {{mode: socket, allowedUserIds: [{PERSON}]}}"), &widened),
    )
    .unwrap();
    wait("a new connection", || async { (slack.connections_opened() > opened && slack.connected()).then_some(()) })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let connected = status(&server).await.expect("the Connected condition stays");
    assert_eq!(connected["status"], "True", "{connected}");
    say("EvS6", "and db-11?");
    wait_replies(&slack, DM, None, 6).await;

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(replies(&slack, DM, None).len(), 6, "every message answered exactly once");
    let runs = bot_runs(&server.url).await;
    let shown: Vec<String> =
        runs.iter().map(|r| format!("{} {} {} {}", r["id"], r["status"], r["error_code"], r["started_at"])).collect();
    assert_eq!(
        runs.len(),
        6,
        "{shown:#?}\nreplies: {:#?}\ndeliveries: {:?}",
        replies(&slack, DM, None),
        slack.deliveries()
    );
    assert_eq!(slack.unacked(), 0, "every envelope acknowledged");
    assert!(slack.connections_opened() >= 4, "{} connections", slack.connections_opened());
    let redelivered = slack.deliveries().iter().filter(|(_, attempt)| *attempt > 0).count();
    eprintln!("socket mode: {} connections, {redelivered} envelopes redelivered", slack.connections_opened());
    assert!(!server.log_text().contains(APP_TOKEN), "the app token is not logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_alertmanager_alert_opens_one_slack_thread_with_its_resolve_notice_and_answers_replies_there() {
    let Fixture { _dir, slack, llm: _llm, host, .. } = Fixture::new().await;
    let server = host.start().await;
    let am = prom::Alertmanager::start(&format!("{}/api/v1/alerts/am/webhook", server.url), Some(AM_TOKEN)).await;
    let switch = prom::MetricSwitch::start("akritas_slack_load", 7.0).await;
    let rules = "groups:\n- name: akritas-slack\n  rules:\n  - alert: SlackHighLoad\n    expr: akritas_slack_load > 5\n    \
                 labels: {severity: critical, service: postgresql}\n    \
                 annotations: {summary: \"<!channel> load is high <https://evil.example|click> @here\"}\n";
    let _prometheus = prom::Prometheus::start(&am.url(), Some(&switch.target()), rules).await;

    // The investigation's notification is the thread root in the receiver's channel.
    let top = wait_replies(&slack, ALERTS, None, 1).await;
    let root = top[0]["ts"].as_str().unwrap().to_string();
    let text = top[0]["text"].as_str().unwrap();
    assert!(text.starts_with("Akritas incident investigation"), "{text}");
    for inert in ["<!channel>", "<https://", "@here"] {
        assert!(!text.contains(inert), "{inert} survived: {text}");
    }

    // A reply in the thread is answered there, with the incident as context.
    let ts = slack::new_ts();
    send(&server, "EvA1", message(PERSON, ALERTS, "channel", "what changed on db-7?", &ts, Some(&root)), None).await;
    let answer = wait_replies(&slack, ALERTS, Some(&root), 1).await;
    assert_eq!(answer[0]["text"], "db-7 looks healthy.");
    let run = bot_runs(&server.url).await.pop().expect("the reply's Run");
    let detail = support::run_detail(&server.url, run["id"].as_str().unwrap()).await;
    assert!(detail["metadata"]["incident_id"].as_str().is_some_and(|id| !id.is_empty()), "{detail}");

    // Resolved: the notice lands in the same thread, and nothing else is posted top-level.
    switch.set(0.0);
    let thread = wait("the resolve notice", || async {
        let thread = slack.thread(ALERTS, &root);
        thread.iter().any(|m| m["text"].as_str().is_some_and(|t| t.starts_with("Resolved: "))).then_some(thread)
    })
    .await;
    assert_eq!(replies(&slack, ALERTS, None).len(), 1, "one thread for the incident: {:?}", slack.messages());
    let resolved = thread.iter().find(|m| m["text"].as_str().unwrap().starts_with("Resolved: ")).unwrap();
    assert!(resolved["text"].as_str().unwrap().contains("SlackHighLoad"), "{resolved}");
    assert!(slack.messages().iter().all(|m| m["bot_id"] == BOT_ID));
}
