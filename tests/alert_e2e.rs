//! The whole alert pipeline with real programs: a Prometheus 2.42 rule fires →
//! Alertmanager 0.25 posts its webhook to the real `akritas serve` → an Incident and
//! an investigation job → the worker investigates with the scripted model and the
//! bundled VictoriaMetrics MCP server against a real VictoriaMetrics → the
//! InvestigationResult's evidence is checked against the Run's tool calls → the
//! webhook, Telegram and Mattermost stand-ins receive their messages. Akritas is
//! killed with SIGKILL while the job runs; after the restart the job resumes and
//! completes once. Then the rule stops firing and the Incident closes.

use akritas_testkit as support;
use akritas_testkit::prom;
use akritas_testkit::vm;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use akritas::tools::{ToolName, openai_alias};
use axum::http::{HeaderMap, Method, Uri};
use serde_json::{Value, json};
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use support::{Server, serve_command};

const AM_TOKEN: &str = "am-e2e-token-0123456789";
const HOOK_TOKEN: &str = "hook-e2e-token-0123456789";
const HOOK_HMAC: &str = "hook-e2e-hmac-0123456789";
const TG_TOKEN: &str = "123456:tg-e2e-token";
const MM_SECRET: &str = "e2e-mattermost-outgoing-token-0123";
const MM_TOKEN: &str = "mm-e2e-token-0123456789";

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

/// Plans the VictoriaMetrics query, answers, submits a result citing it. The very
/// first request (attempt 1's plan) hangs, so the test can kill Akritas mid-job.
fn model(requests: Arc<AtomicUsize>) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let plan = alias("local.investigation.submit_plan");
    let submit = alias("local.investigation.submit_result");
    move |_, request| {
        let n = requests.fetch_add(1, Ordering::SeqCst);
        let step = if offers(request, &plan) {
            Step::from(Reply::ToolCalls(vec![(
                "p".into(),
                plan.clone(),
                json!({"checks": [{"step": "Read the load of db-7", "tool": "mcp.victoriametrics.query",
                                   "arguments": {"query": "node_load1{instance=\"db-7:9100\"}"},
                                   "reason": "confirm what the alert reports"}], "gaps": []}),
            )]))
        } else if offers(request, &submit) {
            Step::from(Reply::ToolCalls(vec![(
                "r".into(),
                submit.clone(),
                json!({"finding_status": "confirmed", "actionability": "requires_human", "confidence": "high",
                       "summary": "db-7 runs at a load of 7.25 (_autovacuum_ backlog)", "impact": "slow checkout",
                       "evidence": ["tool-call:call-1 \"7.25\""], "ruled_out": [],
                       "affected_components": ["db-7"], "recommended_actions": ["ask @dba to review autovacuum"],
                       "production_writes": 0}),
            )]))
        } else {
            // A follow-up in the incident's thread names the incident the host gave as context.
            let text = request["messages"].to_string();
            let incident = text.find("notification thread of incident ").map(|at| {
                let rest = &text[at + "notification thread of incident ".len()..];
                rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or_default().to_string()
            });
            match incident {
                Some(id) => Step::from(Reply::Content(format!("Incident {id}: db-7 ran at a load of 7.25."))),
                None => Step::from(Reply::Content("node_load1 on db-7 is 7.25.".into())),
            }
        };
        if n == 0 { step.with_delay(Duration::from_secs(120)) } else { step }
    }
}

/// One request a stand-in received.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// Webhook (`/hook`), Telegram (`/bot<token>/sendMessage`) and Mattermost
/// (`/api/v4/posts`) stand-ins speaking the real response formats.
async fn stand_ins(received: Arc<Mutex<Vec<Received>>>) -> String {
    let app =
        axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: axum::body::Bytes| {
            let received = received.clone();
            async move {
                let path = uri.path().to_string();
                if method == Method::GET {
                    // Which thread a post is in (a person's follow-up in the incident's thread).
                    assert_eq!(path, "/api/v4/posts/followup-post-1");
                    let post = json!({"id": "followup-post-1", "root_id": "p8xq1", "channel_id": "chan-ops"});
                    return (axum::http::StatusCode::OK, axum::Json(post));
                }
                assert_eq!(method, Method::POST);
                received.lock().unwrap().push(Received { path: path.clone(), headers, body: body.to_vec() });
                let body = if path.ends_with("/sendMessage") {
                    json!({"ok": true, "result": {"message_id": 7, "chat": {"id": -100123}}})
                } else if path == "/api/v4/posts" {
                    json!({"id": "p8xq1", "channel_id": "chan-ops"})
                } else {
                    json!({"received": true})
                };
                let status = if path == "/api/v4/posts" { 201 } else { 200 };
                (axum::http::StatusCode::from_u16(status).unwrap(), axum::Json(body))
            }
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

fn resources(dir: &std::path::Path, vm_url: &str, stand_in: &str) {
    std::fs::write(
        dir.join("e2e.yaml"),
        format!(
            r#"apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {{name: am, namespace: ops}}
spec: {{provider: alertmanager, auth: {{bearerToken: {{env: E2E_AM_TOKEN}}}}}}
---
apiVersion: akritas.io/v1alpha1
kind: McpAdapter
metadata: {{name: victoriametrics, namespace: ops}}
spec:
  transport:
    stdio:
      command: akritas
      args: [mcp, victoriametrics, --base-url, "{vm_url}"]
  namespace: mcp.victoriametrics
  allow: [read]
  callTimeoutSeconds: 20
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {{name: incident-hook, namespace: ops}}
spec: {{type: webhook, webhook: {{url: "{stand_in}/hook", bearerToken: {{env: E2E_HOOK_TOKEN}}, hmacSecret: {{env: E2E_HOOK_HMAC}}}}}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {{name: telegram-ops, namespace: ops}}
spec: {{type: telegram, telegram: {{botToken: {{env: E2E_TG_TOKEN}}, chatId: "-100123", baseUrl: "{stand_in}"}}}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {{name: mattermost-ops, namespace: ops}}
spec:
  type: mattermost
  mattermost: {{baseUrl: "{stand_in}", botToken: {{env: E2E_MM_TOKEN}}, channelId: chan-ops}}
  inbound: {{mode: webhook, secret: {{env: E2E_MM_SECRET}}, allowedUserIds: [user-alice]}}
"#
        ),
    )
    .unwrap();
}

fn akritas(port: u16, data: &std::path::Path, resources: &std::path::Path, llm: &str) -> Server {
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .env("AKRITAS_ADDRESS", format!("127.0.0.1:{port}"))
        .env("AKRITAS_DATA_DIR", data)
        .env("AKRITAS_BASE_URL", llm)
        .env("AKRITAS_PUBLIC_URL", "https://akritas.example")
        .env("AKRITAS_ALERT_JOB_BACKOFF", "1s")
        // The resources are in `ops`: the one-segment webhook URLs name its resources.
        .env("AKRITAS_WEBHOOK_NAMESPACE", "ops")
        // The resources below read these variables.
        .env("AKRITAS_RESOURCE_ENV", "ops/E2E_*")
        .env("E2E_AM_TOKEN", AM_TOKEN)
        .env("E2E_HOOK_TOKEN", HOOK_TOKEN)
        .env("E2E_HOOK_HMAC", HOOK_HMAC)
        .env("E2E_TG_TOKEN", TG_TOKEN)
        .env("E2E_MM_TOKEN", MM_TOKEN)
        .env("E2E_MM_SECRET", MM_SECRET)
        .arg("--resources")
        .arg(resources);
    Server::start(command)
}

async fn get(url: &str) -> Value {
    let response = reqwest::get(url).await.unwrap();
    assert!(response.status().is_success(), "GET {url}: {}", response.status());
    response.json().await.unwrap()
}

/// Polls `url` until `pick` finds something, for at most `limit`.
async fn wait_for(limit: Duration, url: &str, what: &str, pick: impl Fn(&Value) -> Option<Value>) -> Value {
    let started = Instant::now();
    loop {
        if let Ok(response) = reqwest::get(url).await
            && let Ok(body) = response.json::<Value>().await
            && let Some(found) = pick(&body)
        {
            return found;
        }
        assert!(started.elapsed() < limit, "timed out after {limit:?} waiting for {what} at {url}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_alert_is_investigated_with_real_metrics_notified_survives_kill_and_resolves() {
    let started = Instant::now();
    let vm = vm::VictoriaMetrics::start().await;
    vm.import_prometheus(&format!(
        "node_load1{{instance=\"db-7:9100\",job=\"node\"}} 7.25 {}\n",
        vm::now_ms() - 60_000
    ))
    .await;
    vm.wait_for_series("node_load1", 1).await;

    let requests = Arc::new(AtomicUsize::new(0));
    let llm = ScriptedLlm::start_with(model(requests.clone())).await;
    let received = Arc::new(Mutex::new(Vec::new()));
    let stand_in = stand_ins(received.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let (data, manifests) = (dir.path().join("data"), dir.path().join("resources"));
    std::fs::create_dir_all(&manifests).unwrap();
    resources(&manifests, &vm.url(), &stand_in);
    let port = akritas_testkit::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let server = akritas(port, &data, &manifests, &llm.url);

    let am = prom::Alertmanager::start(&format!("{base}/api/v1/alerts/am/webhook"), Some(AM_TOKEN)).await;
    let switch = prom::MetricSwitch::start("akritas_e2e_load", 7.25).await;
    let rules = "groups:\n- name: akritas-e2e\n  rules:\n  - alert: HighLoad\n    expr: akritas_e2e_load > 5\n    \
                 labels: {severity: critical, instance: \"db-7:9100\", service: postgresql}\n    \
                 annotations: {summary: \"Load on db-7 is high\", description: \"node_load1 above 5\"}\n";
    let _prometheus = prom::Prometheus::start(&am.url(), Some(&switch.target()), rules).await;

    // The alert arrives, opens an incident and a job; the job's first model request hangs.
    let incidents = format!("{base}/api/v1/incidents");
    let incident = wait_for(Duration::from_secs(60), &incidents, "the incident", |body| {
        body["incidents"].as_array()?.iter().find(|i| i["name"] == "HighLoad").cloned()
    })
    .await;
    let incident_url = format!("{base}/api/v1/incidents/{}", incident["id"].as_str().unwrap());
    eprintln!("incident opened after {:?}", started.elapsed());
    support::poll(Duration::from_secs(30), || async { (requests.load(Ordering::SeqCst) > 0).then_some(()) })
        .await
        .expect("the investigation reached the model");

    // SIGKILL in the middle of the job, then the same data directory again.
    drop(server);
    let server = akritas(port, &data, &manifests, &llm.url);
    let detail = wait_for(Duration::from_secs(60), &incident_url, "the job to finish", |body| {
        let job = &body["jobs"][0];
        let done =
            job["status"] == "succeeded" && job["deliveries"].as_array()?.iter().all(|d| d["status"] != "pending");
        (done || job["status"] == "failed").then(|| body.clone())
    })
    .await;
    eprintln!("investigated and notified after {:?}", started.elapsed());
    let jobs = detail["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "one job per incident");
    let job = &jobs[0];
    assert_eq!(job["status"], "succeeded", "{job:#}");
    assert_eq!(job["attempts"], 2, "the interrupted attempt and the resumed one");
    let runs: Vec<&str> = job["runs"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert_eq!(runs.len(), 2);
    assert_eq!(detail["runs"], json!(runs));

    let interrupted = get(&format!("{base}/api/v1/runs/{}", runs[0])).await;
    assert_eq!(
        (interrupted["run"]["status"].as_str(), interrupted["run"]["error_code"].as_str()),
        (Some("failed"), Some("interrupted"))
    );
    let run = get(&format!("{base}/api/v1/runs/{}", runs[1])).await["run"].clone();
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["source"], "alert:alertmanager");
    assert_eq!(run["metadata"]["job_id"], job["id"]);
    assert_eq!(run["investigation"]["evidence"], json!(["tool-call:call-1 \"7.25\""]));
    let planned = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["metadata"]["call_id"] == "call-1")
        .expect("the planned query is recorded");
    assert_eq!(planned["metadata"]["tool"], "mcp.victoriametrics.query");
    assert_eq!(planned["result"]["output"]["structuredContent"]["data"]["result"][0]["value"][1], "7.25");

    // The Run exports over HTTP as a case whose input the alert store rebuilt (the
    // alert, its incident, the labels as context), and replays offline with the same
    // query and the same structured result.
    let case = get(&format!("{base}/api/v1/runs/{}/export", runs[1])).await;
    assert_eq!(case["origin"]["run_id"], runs[1], "{case:#}");
    let prompt = case["input"]["messages"][0]["content"].as_str().expect("the input is rebuilt");
    assert!(prompt.contains(incident["id"].as_str().unwrap()), "{prompt}");
    assert_eq!(case["input"]["context"]["alertname"], "HighLoad", "{case:#}");
    assert_eq!(case["calls"].as_array().map(Vec::len), Some(1), "{case:#}");
    let case_file = dir.path().join("case.json");
    std::fs::write(&case_file, case.to_string()).unwrap();
    let instructions = support::root().join("instructions/SYSTEM.md");
    let replayed = tokio::process::Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["run", "replay", case_file.to_str().unwrap(), "--json", "--base-url", &llm.url])
        .args(["--system-instructions", instructions.to_str().unwrap()])
        .env_remove("AKRITAS_API_KEY")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(replayed.status.success(), "{}", String::from_utf8_lossy(&replayed.stderr));
    let outcome: Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(outcome["unknown_calls"], 0, "{outcome:#}");
    assert_eq!(outcome["comparison"]["same_tool_calls"], true, "{outcome:#}");
    assert_eq!(outcome["comparison"]["same_investigation"], true, "{outcome:#}");

    // Each receiver got exactly one correctly formatted message.
    let messages = received.lock().unwrap().clone();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    let hook = messages.iter().find(|m| m.path == "/hook").expect("webhook delivery");
    assert_eq!(hook.headers["authorization"], format!("Bearer {HOOK_TOKEN}"));
    assert_eq!(hook.headers["x-akritas-signature"], akritas::notify::deliver::signature_header(HOOK_HMAC, &hook.body));
    let envelope: Value = serde_json::from_slice(&hook.body).unwrap();
    assert_eq!((envelope["version"].as_u64(), envelope["event"].as_str()), (Some(1), Some("incident.investigated")));
    assert_eq!(envelope["incident"]["incident_id"], incident["id"]);
    assert_eq!(envelope["incident"]["run_url"], json!(format!("https://akritas.example/runs/{}", runs[1])));
    assert_eq!(envelope["incident"]["finding"], "confirmed");

    let telegram = messages.iter().find(|m| m.path == format!("/bot{TG_TOKEN}/sendMessage")).expect("Telegram");
    let telegram: Value = serde_json::from_slice(&telegram.body).unwrap();
    assert_eq!(telegram["chat_id"], "-100123");
    let text = telegram["text"].as_str().unwrap();
    assert!(text.starts_with("Akritas incident investigation\nAlert status: firing\nFinding: confirmed\n"), "{text}");
    for line in [
        "Alert: HighLoad",
        "Severity: critical",
        "Source: alertmanager:am",
        "\nEvidence\n- tool-call:call-1 \"7.25\"",
        "Production writes: 0",
    ] {
        assert!(text.contains(line), "{line:?} missing in {text}");
    }
    assert!(text.contains("ask ＠dba") && !text.contains('@'), "mentions are neutralised: {text}");

    let mattermost = messages.iter().find(|m| m.path == "/api/v4/posts").expect("Mattermost");
    assert_eq!(mattermost.headers["authorization"], format!("Bearer {MM_TOKEN}"));
    let post: Value = serde_json::from_slice(&mattermost.body).unwrap();
    assert_eq!(post["channel_id"], "chan-ops");
    let message = post["message"].as_str().unwrap();
    assert!(message.contains("tool-call:call-1"), "{message}");
    assert!(message.contains("(\\_autovacuum\\_ backlog)"), "{message}");

    let deliveries = detail["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 3);
    assert!(deliveries.iter().all(|d| d["delivery"]["status"] == "delivered"), "{deliveries:#?}");

    // The rule stops firing: Alertmanager sends the resolution and the incident closes.
    switch.set(0.0);
    let closed = wait_for(Duration::from_secs(60), &incident_url, "the incident to close", |body| {
        (body["incident"]["state"] == "resolved").then(|| body.clone())
    })
    .await;
    eprintln!("resolved after {:?}", started.elapsed());
    assert_eq!(closed["jobs"].as_array().unwrap().len(), 1, "a resolution starts no investigation");
    assert!(closed["events"].as_array().unwrap().iter().any(|e| e["event"]["state"] == "resolved"));
    // Each receiver gets one resolve notice: the chat receivers in the incident's thread
    // (a reply to the first message), the webhook an `incident.resolved` event; no second
    // top-level post.
    support::poll(Duration::from_secs(30), || async { (received.lock().unwrap().len() >= 6).then_some(()) })
        .await
        .unwrap_or_else(|| panic!("resolve notices: {:#?}", received.lock().unwrap()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let messages = received.lock().unwrap().clone();
    assert_eq!(messages.len(), 6, "one investigation result and one resolve notice per receiver: {messages:#?}");
    let bodies = |path: &str| -> Vec<Value> {
        messages.iter().filter(|m| m.path == path).map(|m| serde_json::from_slice(&m.body).unwrap()).collect()
    };
    let telegram = bodies(&format!("/bot{TG_TOKEN}/sendMessage"));
    assert_eq!(telegram.len(), 2);
    assert!(telegram[0].get("reply_parameters").is_none(), "the result opens the thread");
    assert_eq!(telegram[1]["reply_parameters"]["message_id"], 7, "the notice replies to it: {:?}", telegram[1]);
    assert!(telegram[1]["text"].as_str().unwrap().starts_with("Resolved: HighLoad"), "{:?}", telegram[1]);
    let posts = bodies("/api/v4/posts");
    assert_eq!(posts.len(), 2);
    assert!(posts[0].get("root_id").is_none_or(|r| r.is_null() || r == ""), "the result opens the thread");
    assert_eq!(posts[1]["root_id"], "p8xq1", "the notice is in its thread");
    let hooks = bodies("/hook");
    assert_eq!(hooks.len(), 2);
    assert_eq!(hooks[1]["event"], "incident.resolved");
    assert_eq!(hooks[1]["incident"]["incident_id"], incident["id"]);

    // A person asks a follow-up in the incident's Mattermost thread: the answer, in that
    // thread, names the incident.
    let followup = json!({"token": MM_SECRET, "channel_id": "chan-ops", "user_id": "user-alice",
                          "post_id": "followup-post-1", "text": "what happened?"});
    let accepted: Value = reqwest::Client::new()
        .post(format!("{base}/api/v1/bots/mattermost/mattermost-ops/webhook"))
        .json(&followup)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(accepted["accepted"], true, "{accepted}");
    let id = incident["id"].as_str().unwrap().to_string();
    let answer = support::poll(Duration::from_secs(30), || async {
        received.lock().unwrap().iter().skip(6).find_map(|m| {
            let body: Value = serde_json::from_slice(&m.body).ok()?;
            (m.path == "/api/v4/posts" && body["root_id"] == "p8xq1").then_some(body)
        })
    })
    .await
    .map(|(answer, _)| answer)
    .unwrap_or_else(|| panic!("no follow-up answer: {:#?}", received.lock().unwrap()));
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.contains(&id.replace('_', "\\_")) || message.contains(&id),
        "the answer names the incident: {message}"
    );

    let resources = get(&format!("{base}/api/v1/resources")).await;
    let source = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "AlertSource")
        .expect("the AlertSource is listed")
        .clone();
    assert_eq!(source["status"]["webhookPath"], "/api/v1/alerts/ops/am/webhook");
    assert!(source["status"]["accepted"].as_u64().unwrap() >= 2, "{source:#}");
    assert_eq!(source["status"]["rejected"], 0);
    let log = server.log_text();
    for secret in [AM_TOKEN, HOOK_TOKEN, HOOK_HMAC, TG_TOKEN, MM_TOKEN, MM_SECRET] {
        assert!(!log.contains(secret), "a secret reached the log");
    }
    let journals = std::fs::read_to_string(data.join("alerts/alerts.jsonl")).unwrap()
        + &std::fs::read_to_string(data.join("audit/akritas.jsonl")).unwrap();
    for secret in [AM_TOKEN, HOOK_TOKEN, HOOK_HMAC, TG_TOKEN, MM_TOKEN] {
        assert!(!journals.contains(secret), "a secret reached a journal");
    }
}
