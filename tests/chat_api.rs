//! The native chat and Run API: input errors are 400 with a precise message,
//! upstream failures 502, budget exhaustion 422, saturation 503; follow-ups append
//! to the same Run; plans are validated strictly.

use akritas_testkit as support;

use std::sync::Arc;
use std::time::Duration;

use akritas::audit::AuditLog;
use akritas::catalog::CatalogStore;
use akritas::engine::request::EngineSettings;
use akritas::tools::{ToolName, openai_alias};
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step};

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

fn plan(value: Value) -> Step {
    Step::from(Reply::ToolCalls(vec![("p".into(), alias("local.investigation.submit_plan"), value)]))
}

struct Api {
    server: host::Host,
    llm: ScriptedLlm,
    audit: Arc<AuditLog>,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn api(steps: Vec<Step>, settings: EngineSettings) -> Api {
    let llm = ScriptedLlm::start(steps).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&dir.path().join("audit.jsonl")).unwrap());
    let (tools, _) = host::standard_tools();
    let engine = host::engine(&llm, settings, tools, CatalogStore::new(), Some(audit.clone()), None);
    let server = host::serve(engine, CatalogStore::new(), ApiKeys::default()).await;
    Api { server, llm, audit, client: reqwest::Client::new(), _dir: dir }
}

impl Api {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.client.post(format!("{}{path}", self.server.url)).json(&body).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(format!("{}{path}", self.server.url)).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }
}

fn user(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn input_errors_are_400_with_a_precise_message_and_reach_no_model() {
    let api = api(vec![], host::settings()).await;
    let cases = [
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}),
            "messages[1].role is \"user\" but \"assistant\" was expected: turns alternate user/assistant starting with user",
        ),
        (
            json!({"messages": [{"role": "tool", "content": "a"}]}),
            "invalid request body: messages[0].role: unknown variant `tool`, expected one of `system`, `user`, `assistant`",
        ),
        (json!({"messages": []}), "messages must contain at least one user message"),
        (
            json!({"messages": [{"role": "user", "content": "a"}], "max_tokens": 5000}),
            "max_tokens must be between 1 and 4096, got 5000",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}], "temperature": 3.0}),
            "temperature must be between 0 and 2, got 3",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}], "response_language": "en_US"}),
            "response_language \"en_US\" is not a valid BCP 47 tag",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}], "stream": true}),
            "invalid request body: stream: unknown field `stream`, expected one of `messages`, `context`, `max_tokens`, `temperature`, `debug`, `response_language`",
        ),
    ];
    for (body, message) in cases {
        let (status, answer) = api.post("/api/v1/chat", body).await;
        assert_eq!(status, 400, "{answer}");
        let got = answer["error"]["message"].as_str().unwrap();
        assert!(got.starts_with(message), "{got:?} does not start with {message:?}");
    }
    let response = api
        .client
        .post(format!("{}/api/v1/chat", api.server.url))
        .header("content-type", "application/json")
        .body("{\"messages\": [] } {}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(api.llm.chat_requests(), 0);
    assert!(api.audit.is_empty().await.unwrap(), "invalid requests open no Run");
}

#[tokio::test]
async fn upstream_failures_are_502_and_recorded() {
    let api = api(
        vec![Step::from(Reply::Error { status: 500, body: json!({"error": {"message": "model crashed"}}) })],
        host::settings(),
    )
    .await;
    let (status, body) = api.post("/api/v1/chat", user("hello")).await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["code"], "upstream_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("HTTP 500"), "{body}");
    let run_id = body["error"]["run_id"].as_str().unwrap();
    let (_, run) = api.get(&format!("/api/v1/runs/{run_id}")).await;
    assert_eq!(run["run"]["status"], "failed");
    assert_eq!(run["run"]["error_code"], "upstream_error");
}

#[tokio::test]
async fn budget_exhaustion_is_422_and_says_which_limit() {
    let mut settings = host::settings();
    settings.limits.max_model_calls = 1;
    let api = api(vec![plan(json!({"checks": [], "gaps": []}))], settings).await;
    let (status, body) = api.post("/api/v1/chat", user("hello")).await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["code"], "budget_exhausted");
    assert_eq!(body["error"]["dimension"], "model_calls");
    assert_eq!(body["error"]["message"], "run budget exhausted: model_calls (needed 2, limit 1)");
    assert_eq!(body["error"]["usage"]["model_calls"], 1);
}

#[tokio::test]
async fn saturation_is_503_with_retry_after() {
    let mut settings = host::settings();
    settings.max_concurrent_runs = 1;
    settings.queue_timeout = Duration::from_millis(50);
    let slow = Step::from(Reply::Content("late".into())).with_delay(Duration::from_millis(800));
    let api = Arc::new(
        api(vec![plan(json!({"checks": [], "gaps": []})).with_delay(Duration::from_millis(800)), slow], settings).await,
    );
    let first = {
        let api = api.clone();
        tokio::spawn(async move { api.post("/api/v1/chat", user("one")).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = api.client.post(format!("{}/api/v1/chat", api.server.url)).json(&user("two")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "5");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "server_busy");
    assert_eq!(first.await.unwrap().0, 200);
}

/// Chat keys of one namespace that keep Runs going fill neither the host nor the slot kept
/// for alert investigations: their next Run waits and is refused naming the limit, while
/// an alert investigation and another namespace's chat still start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_runs_never_take_the_alert_slot_nor_another_namespaces_share() {
    use akritas::engine::conversation::{Speaker, Turn};
    use akritas::engine::request::{RunError, RunRequest};
    let llm = ScriptedLlm::start_with(|_, request| {
        if request.to_string().contains("hold the slot") {
            Step::from(Reply::Content("late".into())).with_delay(Duration::from_secs(3))
        } else {
            Step::from(Reply::Content("done".into()))
        }
    })
    .await;
    let settings = EngineSettings {
        max_concurrent_runs: 3,
        alert_reserved_runs: 1,
        max_runs_per_namespace: 1,
        queue_timeout: Duration::from_millis(100),
        ..host::settings()
    };
    let (tools, _) = host::standard_tools();
    let engine = Arc::new(host::engine(&llm, settings, tools, CatalogStore::new(), None, None));
    let ask = |namespace: &str, source: &str, text: &str| RunRequest {
        namespace: namespace.into(),
        source: source.into(),
        actor: "k".into(),
        turns: vec![Turn { role: Speaker::User, content: text.into() }],
        ..RunRequest::default()
    };
    let holder = {
        let (engine, request) = (engine.clone(), ask("team-a", "chat", "hold the slot"));
        tokio::spawn(async move { engine.run(request).await })
    };
    while llm.chat_requests() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = engine.run(ask("team-a", "facade", "one more")).await.unwrap_err();
    let RunError::Busy(refused) = refused else { panic!("{refused}") };
    assert_eq!(refused.setting, "max_runs_per_namespace", "{refused}");
    let other = {
        let (engine, request) = (engine.clone(), ask("team-b", "mcp", "hold the slot"));
        tokio::spawn(async move { engine.run(request).await })
    };
    while llm.chat_requests() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = engine.run(ask("team-c", "bot", "a third tenant")).await.unwrap_err();
    let RunError::Busy(refused) = refused else { panic!("{refused}") };
    assert_eq!(refused.setting, "alert_reserved_runs", "the last slot is kept for alerts: {refused}");
    let alert = engine.run(ask("team-c", "alert:alertmanager", "investigate")).await;
    assert_eq!(alert.map(|outcome| outcome.answer).ok().as_deref(), Some("done"));
    assert!(holder.await.unwrap().is_ok() && other.await.unwrap().is_ok());
    let mut metrics = String::new();
    akritas::telemetry::render(&mut metrics);
    let refusal = "akritas_refusals_total{pool=\"runs\",setting=\"max_runs_per_namespace\",namespace=\"team-a\"}";
    assert!(metrics.contains(refusal), "{metrics}");
}

#[tokio::test]
async fn follow_up_appends_to_the_same_run() {
    let api = api(
        vec![
            plan(json!({"checks": [{"step": "Find the host", "tool": "inventory.host", "arguments": {"host": "db-7"}, "reason": "owner"}], "gaps": []})),
            Step::from(Reply::Content("db-7 belongs to data-platform.".into())),
            plan(json!({"checks": [], "gaps": []})),
            Step::from(Reply::Content("Ask data-platform.".into())),
        ],
        host::settings(),
    )
    .await;
    let (status, first) = api.post("/api/v1/chat", user("Who owns db-7?")).await;
    assert_eq!(status, 200, "{first}");
    let run_id = first["run_id"].as_str().unwrap().to_string();
    let (status, second) =
        api.post(&format!("/api/v1/runs/{run_id}/chat"), json!({"message": "Whom do I call?"})).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["run_id"], run_id.as_str());
    assert_eq!(second["answer"], "Ask data-platform.");
    // The follow-up prompt carries the Run record and the question.
    let prompt = api.llm.requests()[2]["messages"][1]["content"].as_str().unwrap().to_string();
    assert!(prompt.contains(&run_id) && prompt.contains("Whom do I call?"), "{prompt}");
    let (_, run) = api.get(&format!("/api/v1/runs/{run_id}")).await;
    let events = run["run"]["events"].as_array().unwrap();
    let follow: Vec<&str> =
        events.iter().filter(|e| e["type"] == "follow_up").map(|e| e["status"].as_str().unwrap()).collect();
    assert_eq!(follow, ["started", "succeeded"]);
    let scoped = events.iter().filter(|e| e["type"] == "tool_call" && e["metadata"]["scope"] == "follow_up").count();
    assert_eq!(scoped, 1, "the follow-up's plan call is scoped");
    assert_eq!(run["run"]["status"], "succeeded");

    let (status, body) =
        api.post("/api/v1/runs/run_00000000000000000000000000000000/chat", json!({"message": "x"})).await;
    assert_eq!((status, body["error"]["message"].as_str()), (404, Some("run not found")));
    let (status, body) = api.post(&format!("/api/v1/runs/{run_id}/chat"), json!({"message": "  "})).await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn run_listing_validates_its_limit() {
    let api = api(vec![], host::settings()).await;
    for bad in ["0", "1001", "x"] {
        let (status, body) = api.get(&format!("/api/v1/runs?limit={bad}")).await;
        assert_eq!(status, 400);
        assert_eq!(body["error"]["message"], "limit must be an integer from 1 to 1000");
    }
    assert_eq!(api.get("/api/v1/runs").await.0, 200);
    assert_eq!(api.get("/api/v1/runs/not-a-run-id").await.0, 404);
}

#[tokio::test]
async fn an_invalid_plan_runs_no_checks_and_the_run_continues() {
    let api = api(
        vec![
            plan(json!({"checks": [{"step": "Restart it", "tool": "ops.restart", "arguments": {"host": "db-7"}, "reason": "fix"}], "gaps": []})),
            // The repair turn names the rule; the model insists.
            plan(json!({"checks": [{"step": "Restart it", "tool": "ops.restart", "arguments": {"host": "db-7"}, "reason": "fix"}], "gaps": []})),
            Step::from(Reply::Content("No checks ran.".into())),
        ],
        host::settings(),
    )
    .await;
    let (status, body) =
        api.post("/api/v1/chat", json!({"messages": [{"role": "user", "content": "fix db-7"}], "debug": true})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["plan_error"], "checks[0]: \"ops.restart\" is not an available execution tool");
    assert_eq!(body["activity"].as_array().unwrap().len(), 2);
    assert!(body["activity"].as_array().unwrap().iter().all(|a| a["status"] == "invalid_arguments"), "{body}");
}

#[tokio::test]
async fn metrics_report_model_tool_run_and_journal_activity() {
    let api = api(
        vec![
            plan(json!({"checks": [{"step": "Find the host", "tool": "inventory.host", "arguments": {"host": "db-7"}, "reason": "owner"}], "gaps": []})),
            Step::from(Reply::Content("db-7 belongs to data-platform.".into())),
        ],
        host::settings(),
    )
    .await;
    let (status, body) = api.post("/api/v1/chat", user("Who owns db-7?")).await;
    assert_eq!(status, 200, "{body}");
    let metrics = reqwest::get(format!("{}/metrics", api.server.url)).await.unwrap().text().await.unwrap();
    for line in [
        "# TYPE akritas_model_calls_total counter",
        "akritas_model_calls_total{outcome=\"ok\"}",
        "akritas_model_call_seconds_bucket{outcome=\"ok\",le=\"+Inf\"}",
        "akritas_model_tokens_total{kind=\"prompt\"}",
        "akritas_tool_calls_total{tool=\"inventory.host\",outcome=\"ok\"}",
        "akritas_tool_call_seconds_count{tool=\"inventory.host\"}",
        "akritas_runs_total{source=\"chat\",outcome=\"ok\"}",
        "# TYPE akritas_journal_fsync_seconds histogram",
        "akritas_journal_fsync_seconds_count{journal=\"audit\"}",
        "akritas_journal_replay_seconds{journal=\"audit\"}",
        "akritas_journal_appended_bytes_total{journal=\"audit\"}",
        "akritas_metric_series_dropped_total 0",
    ] {
        assert!(metrics.contains(line), "{line} missing in:\n{metrics}");
    }
}
