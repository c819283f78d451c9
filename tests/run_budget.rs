//! Every budget dimension ends a Run with a clear, recorded reason.

use akritas_testkit as support;

use std::sync::Arc;
use std::time::Duration;

use akritas::audit::{AuditLog, RunStatus};
use akritas::catalog::CatalogStore;
use akritas::engine::budget::Dimension;
use akritas::engine::conversation::{Speaker, Turn};
use akritas::engine::request::{EngineSettings, RunError, RunRequest};
use akritas::engine::retrieval::Retriever;
use akritas::engine::run::Engine;
use std::sync::atomic::{AtomicUsize, Ordering};

use akritas::resources::mcp_adapter::Permission;
use akritas::tools::{RegistryBuilder, ToolFuture, ToolHandler, ToolLimits, ToolName, ToolSpec, openai_alias};
use serde_json::json;
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step};

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

fn request() -> RunRequest {
    RunRequest {
        source: "chat".into(),
        actor: "test".into(),
        turns: vec![Turn { role: Speaker::User, content: "Why is db-7 slow?".into() }],
        ..Default::default()
    }
}

fn empty_plan() -> Step {
    Step::from(Reply::ToolCalls(vec![(
        "p".into(),
        alias("local.investigation.submit_plan"),
        json!({"checks": [], "gaps": []}),
    )]))
}

fn inventory_call(id: &str, host: &str) -> Step {
    Step::from(Reply::ToolCalls(vec![(id.into(), alias("inventory.host"), json!({"host": host}))]))
}

struct Setup {
    engine: Engine,
    audit: Arc<AuditLog>,
    llm: ScriptedLlm,
    _dir: tempfile::TempDir,
}

async fn setup(steps: Vec<Step>, settings: EngineSettings, retriever: Option<Arc<dyn Retriever>>) -> Setup {
    let llm = ScriptedLlm::start(steps).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&dir.path().join("audit.jsonl")).unwrap());
    let (tools, _) = host::standard_tools();
    let engine = host::engine(&llm, settings, tools, CatalogStore::new(), Some(audit.clone()), retriever);
    Setup { engine, audit, llm, _dir: dir }
}

/// Runs and checks that the Run failed on `dimension`, recorded with its reason.
async fn assert_exhausted(setup: Setup, dimension: Dimension) {
    let error = setup.engine.run(request()).await.unwrap_err();
    let RunError::Budget { run_id, exhausted, .. } = &error else { panic!("expected budget exhaustion, got {error}") };
    assert_eq!(exhausted.dimension, dimension, "{error}");
    assert!(error.to_string().starts_with(&format!("run budget exhausted: {}", dimension.as_str())), "{error}");
    let run = setup.audit.get(run_id.as_ref().unwrap()).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error_code.as_deref(), Some("budget_exhausted"));
    assert_eq!(run.metadata["budget_dimension"], json!(dimension.as_str()));
    assert_eq!(run.error.as_deref(), Some(error.to_string().as_str()));
}

#[tokio::test]
async fn tool_calls_exhaust() {
    let mut settings = host::settings();
    settings.limits.max_tool_calls = 2;
    let steps = vec![empty_plan(), inventory_call("c1", "db-7"), inventory_call("c2", "db-8")];
    assert_exhausted(setup(steps, settings, None).await, Dimension::ToolCalls).await;
}

#[tokio::test]
async fn a_call_made_again_is_not_run_again_and_the_model_is_then_asked_to_answer() {
    let steps = vec![
        empty_plan(),
        inventory_call("c1", "db-7"),
        // The same call again, its arguments in another order and spacing.
        Step::from(Reply::ToolCalls(vec![("c2".into(), alias("inventory.host"), json!({ "host": "db-7" }))])),
        Step::from(Reply::Content("db-7 is busy.".into())),
    ];
    let setup = setup(steps, host::settings(), None).await;
    let outcome = setup.engine.run(request()).await.expect("the Run answers");
    assert_eq!(outcome.answer, "db-7 is busy.");
    let executed: Vec<&str> = outcome.activity.iter().skip(1).map(|a| a.id.as_str()).collect();
    assert_eq!(executed, ["call-1"], "the repeat is not run and costs no tool call");
    let requests = setup.llm.requests();
    // The request after the repeat: the repeat is left out, and the model is asked to answer
    // from the result it has.
    let last = requests.last().unwrap().clone();
    let messages = last["messages"].as_array().unwrap();
    let told = messages.iter().rfind(|m| m["role"] == "tool").unwrap().clone();
    assert_eq!(told["tool_call_id"], "c1", "the last tool turn is the call that ran: {last}");
    assert!(!last.to_string().contains("repeated_call") && !last.to_string().contains("\"c2\""), "{last}");
    assert_eq!(messages.last().unwrap()["role"], "user");
    assert_eq!(messages.last().unwrap()["content"], akritas::engine::ANSWER_FROM_RESULTS);
    assert!(last["tools"].as_array().is_none_or(Vec::is_empty), "after nothing but repeats, no tools: {last}");
    let run = setup.audit.get(outcome.run_id.as_ref().unwrap()).await.unwrap().unwrap();
    assert!(run.events.iter().any(|e| e.kind == "repeated_calls"), "the repeat is recorded");
    assert!(requests.iter().all(|r| !r.to_string().contains("repeated_call")), "a repeat alone is never shown");
}

#[tokio::test]
async fn a_reply_asking_for_more_calls_than_are_left_runs_those_that_fit_and_the_run_answers() {
    let mut settings = host::settings();
    settings.limits.max_tool_calls = 3;
    let three = Step::from(Reply::ToolCalls(
        [("c1", "db-7"), ("c2", "db-8"), ("c3", "db-9")]
            .iter()
            .map(|(id, host)| (id.to_string(), alias("inventory.host"), json!({"host": host})))
            .collect(),
    ));
    let steps = vec![empty_plan(), three, Step::from(Reply::Content("db-7 is busy.".into()))];
    let setup = setup(steps, settings, None).await;
    let outcome = setup.engine.run(request()).await.expect("the Run answers");
    assert_eq!(outcome.answer, "db-7 is busy.");
    let executed: Vec<&str> = outcome.activity.iter().skip(1).map(|a| a.status.as_str()).collect();
    assert_eq!(executed, ["ok", "ok"], "two calls fit after the plan; the third is not run");
    let last = setup.llm.requests().last().unwrap().clone();
    let told = last["messages"].as_array().unwrap().iter().rfind(|m| m["role"] == "tool").unwrap().clone();
    assert_eq!((told["tool_call_id"].as_str(), told["content"].as_str()), (Some("c3"), Some(akritas_not_run())));
    assert!(last.get("tools").is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)), "no tools are offered after");
}

/// The model's tool turn answering `id` in `request`.
fn tool_turn(request: &serde_json::Value, id: &str) -> String {
    let messages = request["messages"].as_array().unwrap();
    let turn = messages.iter().find(|m| m["role"] == "tool" && m["tool_call_id"] == id);
    turn.and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_call_refused_for_its_arguments_is_not_run_again_and_the_model_is_told_what_to_change() {
    let mut settings = host::settings();
    // The plan, the refused call and the corrected one: a charged repeat would leave no room.
    settings.limits.max_tool_calls = 3;
    let wrong = |id: &str| {
        Step::from(Reply::ToolCalls(vec![(id.into(), alias("inventory.host"), json!({"hostname": "db-7"}))]))
    };
    let steps = vec![
        empty_plan(),
        wrong("c1"),
        wrong("c2"),
        inventory_call("c3", "db-7"),
        Step::from(Reply::Content("db-7 is busy.".into())),
    ];
    let setup = setup(steps, settings, None).await;
    let outcome = setup.engine.run(request()).await.expect("the Run answers");
    assert_eq!(outcome.answer, "db-7 is busy.");
    let executed: Vec<(&str, &str)> =
        outcome.activity.iter().skip(1).map(|a| (a.id.as_str(), a.status.as_str())).collect();
    assert_eq!(executed, [("call-1", "invalid_arguments"), ("call-2", "ok")], "the repeat is not run");
    let requests = setup.llm.requests();
    let told = tool_turn(&requests[3], "c2");
    assert!(told.contains("repeated_failed_call") && told.contains("call call-1"), "{told}");
    assert!(told.contains("invalid_arguments") && told.contains("hostname"), "names the fault: {told}");
    assert!(requests[3]["tools"].as_array().is_some_and(|t| !t.is_empty()), "tools are offered again to fix it");
    let run = setup.audit.get(outcome.run_id.as_ref().unwrap()).await.unwrap().unwrap();
    let refused = run.events.iter().find(|e| e.kind == "repeated_calls" && e.status.as_deref() == Some("refused"));
    assert_eq!(refused.map(|e| e.metadata["call"].clone()), Some(json!("call-1")), "the refusal is recorded");
}

#[tokio::test]
async fn a_call_the_tool_failed_runs_once_more_then_is_refused_and_then_the_model_is_asked_to_answer() {
    let mut builder = RegistryBuilder::new(ToolLimits::default());
    let schema = json!({"type": "object", "properties": {"query": {"type": "string"}}});
    let spec = ToolSpec::new(ToolName::try_from("metrics.query").unwrap(), "Test metrics.", Permission::Read, schema);
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let handler: Arc<dyn ToolHandler> = Arc::new(move |_arguments: serde_json::Value| -> ToolFuture {
        counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Err("parse error: unexpected \"}\" in rate()".to_string()) })
    });
    builder.register(spec, handler).unwrap();
    let query =
        |id: &str| Step::from(Reply::ToolCalls(vec![(id.into(), alias("metrics.query"), json!({"query": "rate(x)"}))]));
    let steps = vec![
        empty_plan(),
        query("c1"),
        query("c2"),
        query("c3"),
        query("c4"),
        Step::from(Reply::Content("The query failed; nothing measured.".into())),
    ];
    let llm = ScriptedLlm::start(steps).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&dir.path().join("audit.jsonl")).unwrap());
    let engine = host::engine(&llm, host::settings(), builder.build(), CatalogStore::new(), Some(audit), None);
    let outcome = engine.run(request()).await.expect("the Run answers");
    assert_eq!(ran.load(Ordering::SeqCst), 2, "a tool's failure may pass: it runs once more, then not again");
    let requests = llm.requests();
    let told = tool_turn(&requests[4], "c3");
    assert!(told.contains("failed twice") && told.contains("call call-1") && told.contains("parse error"), "{told}");
    let last = requests.last().unwrap();
    assert_eq!(last["messages"].as_array().unwrap().last().unwrap()["content"], akritas::engine::ANSWER_FROM_RESULTS);
    assert!(last["tools"].as_array().is_none_or(Vec::is_empty), "after a refused repeat made again, no tools");
    assert_eq!(outcome.answer, "The query failed; nothing measured.");
}

fn akritas_not_run() -> &'static str {
    r#"{"error":{"code":"budget_exhausted","message":"not run: this Run's tool calls are spent; answer from the results above"}}"#
}

#[tokio::test]
async fn model_calls_exhaust() {
    let mut settings = host::settings();
    settings.limits.max_model_calls = 2;
    let steps = vec![empty_plan(), inventory_call("c1", "db-7"), inventory_call("c2", "db-8")];
    assert_exhausted(setup(steps, settings, None).await, Dimension::ModelCalls).await;
}

#[tokio::test]
async fn output_tokens_exhaust() {
    let mut settings = host::settings();
    settings.limits.max_output_tokens = 100;
    let steps = vec![
        empty_plan().with_usage(Some((10, 60))),
        inventory_call("c1", "db-7").with_usage(Some((10, 40))),
        inventory_call("c2", "db-8"),
    ];
    assert_exhausted(setup(steps, settings, None).await, Dimension::OutputTokens).await;
}

#[tokio::test]
async fn context_tokens_exhaust_per_request() {
    let mut settings = host::settings();
    // SYSTEM.md alone is about 2.5 KB, so 200 tokens (~800 bytes) cannot fit one request.
    settings.limits.max_context_tokens = 200;
    assert_exhausted(setup(vec![empty_plan()], settings, None).await, Dimension::ContextTokens).await;
}

#[tokio::test]
async fn tool_result_bytes_exhaust() {
    let mut settings = host::settings();
    settings.limits.max_tool_result_bytes = 150;
    let steps = vec![empty_plan(), inventory_call("c1", "db-7"), inventory_call("c2", "db-8")];
    assert_exhausted(setup(steps, settings, None).await, Dimension::ToolResultBytes).await;
}

#[tokio::test]
async fn wall_time_exhausts() {
    let mut settings = host::settings();
    settings.limits.max_duration_ms = 300;
    let steps = vec![empty_plan().with_delay(Duration::from_secs(2))];
    assert_exhausted(setup(steps, settings, None).await, Dimension::WallTime).await;
}

fn big_retriever() -> host::FixedRetriever {
    host::FixedRetriever {
        output: json!({"results": [{"document": "runbook.md", "text": "x".repeat(4096)}]}),
        documents: vec![("runbook.md".into(), "Runbook".into())],
        versions: [("akritas/runbooks".to_string(), "abc123".to_string())].into(),
    }
}

#[tokio::test]
async fn retrieved_context_bytes_exhaust() {
    let mut settings = host::settings();
    settings.limits.max_retrieved_context_bytes = 1024;
    assert_exhausted(setup(vec![], settings, Some(Arc::new(big_retriever()))).await, Dimension::RetrievedContextBytes)
        .await;
}

#[tokio::test]
async fn retrieval_is_recorded_and_given_to_the_model() {
    let steps = vec![empty_plan(), Step::from(Reply::Content("Answer.".into()))];
    let setup = setup(steps, host::settings(), Some(Arc::new(big_retriever()))).await;
    let outcome = setup.engine.run(request()).await.unwrap();
    assert_eq!(outcome.activity[0].id, "call_akritas_rag_prefetch");
    assert!(outcome.usage.retrieved_context_bytes > 4096);
    let run = setup.audit.get(outcome.run_id.as_ref().unwrap()).await.unwrap().unwrap();
    let retrieved: Vec<_> = run.events.iter().filter(|e| e.kind == "context_retrieved").collect();
    assert_eq!(retrieved.len(), 1);
    assert_eq!(retrieved[0].metadata["document_id"], json!("runbook.md"));
    assert_eq!(
        retrieved[0].metadata["knowledge_bases"],
        json!("akritas/runbooks@abc123"),
        "the Run records the version searched"
    );
}

/// An empty reply is asked again once, when the budget leaves a call for it; the Run records it.
#[tokio::test]
async fn an_empty_reply_is_asked_again_once_within_the_budget() {
    let empty = || Step::from(Reply::Content(String::new()));
    let setup =
        setup(vec![empty_plan(), empty(), Step::from(Reply::Content("Answer.".into()))], host::settings(), None).await;
    let outcome = setup.engine.run(request()).await.unwrap();
    assert_eq!(outcome.answer, "Answer.");
    let requests = setup.llm.requests();
    assert_eq!(requests.len(), 3);
    let last = requests[2]["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    assert!(last["content"].as_str().unwrap().starts_with("(Akritas) Your last reply was empty"), "{last}");
    let run = setup.audit.get(outcome.run_id.as_ref().unwrap()).await.unwrap().unwrap();
    assert_eq!(run.events.iter().filter(|e| e.kind == "empty_reply").count(), 1);

    // Once only: a second empty reply fails the Run, saying why.
    let steps = vec![empty_plan(), empty(), empty(), Step::from(Reply::Content("late".into()))];
    let setup = self::setup(steps, host::settings(), None).await;
    let error = setup.engine.run(request()).await.unwrap_err();
    assert_eq!(error.to_string(), "model error: the model returned neither an answer nor tool calls");
    assert_eq!(setup.llm.requests().len(), 3);

    // No call left for it: the Run fails at once.
    let mut settings = host::settings();
    settings.limits.max_model_calls = 2;
    let setup =
        self::setup(vec![empty_plan(), empty(), Step::from(Reply::Content("late".into()))], settings, None).await;
    let error = setup.engine.run(request()).await.unwrap_err();
    assert_eq!(error.to_string(), "model error: the model returned neither an answer nor tool calls");
    assert_eq!(setup.llm.requests().len(), 2);
}
