//! The OpenAI-compatible facade: the official `openai` Python package lists the model,
//! completes with and without streaming (progress lines and answer chunks arrive
//! before the Run ends), sends text parts and meets the error envelope; the engine's
//! progress sink reports a Run in order; a client that goes away mid-stream leaves
//! the Run recorded to its end; decoding edge cases answer 400 with `param`, an unknown
//! model 404 `model_not_found` as OpenAI does (the SDK's NotFoundError).

use akritas_testkit as support;

use std::sync::Arc;
use std::time::Duration;

use akritas::audit::{AuditLog, RunStatus};
use akritas::catalog::CatalogStore;
use akritas::config::ApiKeyRef;
use akritas::engine::conversation::{Speaker, Turn};
use akritas::engine::progress::{self, RunProgress};
use akritas::engine::request::RunRequest;
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use support::host;
use support::scripted_llm::{self, Reply, ScriptedLlm, Step};

const API_KEY: &str = "facade-key-0123456789abcdef";
const ANSWER: &str = "Autovacuum on db-7 holds the CPU; the longest query has run for 1820 s.";
/// The scripted model waits this long before each answer, so a stream's first chunk
/// comes measurably before its end.
const ANSWER_DELAY: Duration = Duration::from_millis(600);

/// A model that plans one `postgres.activity` check, then answers (after `delay`).
fn investigator(delay: Duration) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let script = scripted_llm::investigator(Value::Null, ANSWER);
    move |index, request| {
        let step = script(index, request);
        match step.reply {
            Reply::Content(_) => step.with_usage(Some((90, 20))).with_delay(delay),
            _ => step.with_usage(Some((40, 12))),
        }
    }
}

struct Facade {
    server: host::Host,
    llm: ScriptedLlm,
    audit: Arc<AuditLog>,
    _dir: tempfile::TempDir,
}

async fn facade(delay: Duration) -> Facade {
    let llm = ScriptedLlm::start_with(investigator(delay)).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&dir.path().join("audit.jsonl")).unwrap());
    let (tools, _) = host::standard_tools();
    let engine = host::engine(&llm, host::settings(), tools, CatalogStore::new(), Some(audit.clone()), None);
    let refs = [ApiKeyRef::admin("ops", "OPS_KEY")];
    let keys = ApiKeys::from_env(&refs, &|name: &str| (name == "OPS_KEY").then(|| API_KEY.to_string())).unwrap();
    let server = host::serve(engine, CatalogStore::new(), keys).await;
    Facade { server, llm, audit, _dir: dir }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_client_lists_completes_streams_and_meets_errors() {
    let facade = facade(ANSWER_DELAY).await;
    let script = support::root().join("tests/clients/openai_facade.py");
    let output = tokio::process::Command::new(support::clients::python())
        .arg(&script)
        .args([&facade.server.url, API_KEY, ANSWER])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(output.status.success(), "openai_facade.py failed ({}):\n{stdout}\n{stderr}", output.status);

    // Every accepted request was one Run of the key, recorded as an OpenAI chat.
    let runs = facade.audit.list_where(100, |_| true).await.unwrap();
    assert_eq!(runs.len(), 5, "a completion, a stream with and one without progress, text parts, history");
    for run in &runs {
        assert_eq!((run.source.as_str(), run.actor.as_str()), ("openai_chat", "ops"));
        assert_eq!(run.status, RunStatus::Succeeded, "{}", run.id);
    }
    let requests = facade.llm.requests().iter().map(Value::to_string).collect::<Vec<_>>().join("\n");
    assert!(requests.contains(r#"why is\ndb-7 slow?"#), "text parts are joined for the model");
    assert!(!requests.contains("> plan:") && !requests.contains("> ✓"), "progress lines never feed the model");
}

#[tokio::test]
async fn the_progress_sink_reports_the_run_in_order_and_streams_the_answer() {
    let facade = facade(Duration::ZERO).await;
    let (sink, mut receiver) = progress::channel(64);
    let request = RunRequest {
        source: "openai_chat".into(),
        actor: "ops".into(),
        turns: vec![Turn { role: Speaker::User, content: "Why is db-7 slow?".into() }],
        progress: Some(sink),
        ..RunRequest::default()
    };
    let engine = facade.server.engine.clone();
    let run = tokio::spawn(async move { engine.run(request).await });
    let mut events = Vec::new();
    while let Some(event) = receiver.recv().await {
        events.push(event);
    }
    let outcome = run.await.unwrap().unwrap();
    assert!(receiver.complete());
    assert_eq!(events[0], RunProgress::Started { run_id: outcome.run_id.clone() });
    assert_eq!(events[1], RunProgress::Plan { checks: vec!["postgres.activity".into()] });
    assert!(
        matches!(&events[2], RunProgress::Tool { name, id, status, .. }
            if name == "postgres.activity" && id == "call-1" && status == "ok"),
        "{:?}",
        events[2]
    );
    let deltas: Vec<&str> = events[3..]
        .iter()
        .map(|event| match event {
            RunProgress::AnswerDelta(text) => text.as_str(),
            other => panic!("only answer text after the tool: {other:?}"),
        })
        .collect();
    assert!(deltas.len() > 1, "the answer streamed in pieces: {deltas:?}");
    assert_eq!(deltas.concat(), outcome.answer);
    assert_eq!(outcome.answer, ANSWER);
    // The answer was streamed from the model; the budget counted both calls' usage.
    let streamed: Vec<bool> = facade.llm.requests().iter().map(|r| r["stream"] == json!(true)).collect();
    assert_eq!(streamed, [false, true], "the plan is not streamed, the answer is");
    assert_eq!((outcome.usage.prompt_tokens, outcome.usage.completion_tokens), (130, 32));
    assert_eq!(outcome.usage.model_calls, 2);
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_leaves_the_run_recorded_to_its_end() {
    let facade = facade(ANSWER_DELAY).await;
    let mut response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", facade.server.url))
        .bearer_auth(API_KEY)
        .json(&json!({"model": "akritas", "stream": true,
                      "messages": [{"role": "user", "content": "Why is db-7 slow?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let run_id = response.headers()["x-akritas-run-id"].to_str().unwrap().to_string();
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains(r#""role":"assistant""#));
    drop(response);
    // The model answers after the client left; the Run still ends and is recorded.
    let id = akritas::audit::RunId::parse(&run_id).unwrap();
    let mut run = facade.audit.get(&id).await.unwrap().unwrap();
    for _ in 0..100 {
        if run.status != RunStatus::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        run = facade.audit.get(&id).await.unwrap().unwrap();
    }
    assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
    assert!(
        run.events.iter().any(|e| e.metadata.get("tool").is_some_and(|t| t == "postgres.activity")),
        "the planned check is recorded: {run:?}"
    );
    assert_eq!(facade.llm.chat_requests(), 2, "plan and answer both ran");
}

/// Status and `error` object of a raw request.
async fn raw(facade: &Facade, body: reqwest::Body, key: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", facade.server.url))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let json: Value = response.json().await.unwrap_or(Value::Null);
    (status, json["error"].clone())
}

#[tokio::test]
async fn decoding_edge_cases_and_an_unknown_model_answer_in_the_openai_envelope() {
    let facade = facade(Duration::ZERO).await;
    let ok = json!({"model": "akritas", "messages": [{"role": "user", "content": "hi"}], "unknown": {"x": 1}});

    // Trailing JSON.
    let (status, error) = raw(&facade, format!("{ok} {{}}").into(), API_KEY).await;
    assert_eq!((status, error["code"].clone(), error["param"].clone()), (400, json!("invalid_json"), Value::Null));
    assert_eq!(error["type"], "invalid_request_error");

    // A body without Content-Length (chunked) is read like any other.
    let chunks: Vec<Result<String, std::io::Error>> =
        vec![Ok(ok.to_string()[..10].to_string()), Ok(ok.to_string()[10..].to_string())];
    let (status, error) = raw(&facade, reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)), API_KEY).await;
    assert_eq!(status, 200, "{error}");

    // Conversation rules are the caller's mistake: 400, not 502, and nothing reached the model.
    let before = facade.llm.chat_requests();
    let alternation =
        json!({"model": "akritas", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]});
    let (status, error) = raw(&facade, alternation.to_string().into(), API_KEY).await;
    assert_eq!((status, error["param"].clone()), (400, json!("messages")), "{error}");
    let blank = json!({"model": "akritas", "messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}]});
    let (status, _) = raw(&facade, blank.to_string().into(), API_KEY).await;
    assert_eq!(status, 400);
    let audio = json!({"model": "akritas", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]});
    let (status, error) = raw(&facade, audio.to_string().into(), API_KEY).await;
    assert_eq!((status, error["param"].clone()), (400, json!("messages[0].content")));
    let tool = json!({"model": "akritas", "messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b", "tool_call_id": "c"}]});
    let (status, error) = raw(&facade, tool.to_string().into(), API_KEY).await;
    assert_eq!((status, error["param"].clone()), (400, json!("messages[1].role")));
    // An unknown model is answered as OpenAI answers it: 404, typed invalid_request_error.
    let unknown = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "a"}]});
    let (status, error) = raw(&facade, unknown.to_string().into(), API_KEY).await;
    assert_eq!(status, 404, "{error}");
    assert_eq!(
        (&error["type"], &error["code"], &error["param"]),
        (&json!("invalid_request_error"), &json!("model_not_found"), &json!("model")),
        "{error}"
    );
    assert!(error["message"].as_str().unwrap().starts_with("The model `gpt-4o` does not exist"), "{error}");
    assert_eq!(facade.llm.chat_requests(), before, "refused requests reach no model");

    // The key check speaks the same envelope, `param` included.
    let (status, error) = raw(&facade, ok.to_string().into(), "wrong-key-0123456789").await;
    assert_eq!(status, 401);
    assert_eq!(
        error,
        json!({"message": error["message"], "type": "authentication_error", "param": null, "code": "invalid_api_key"})
    );
}
