//! Small context windows: a model with a 2,048-token window — set by
//! `model_context_tokens`, or reported by llama-server's `/props` — gets every request of a Run
//! fitted to it although the Run has a large runbook base, a long skill, many tools and a large
//! tool result, and what was cut is on the Run (API answer and audit). A context overflow the
//! server reports costs one retry with a smaller request, not the Run.

use akritas_testkit as support;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use akritas::audit::AuditLog;
use akritas::catalog::policy::ResourcePolicy;
use akritas::engine::retrieval::Retriever;
use akritas::engine::run::Engine;
use akritas::knowledge::bases::KnowledgeBases;
use akritas::llm::{LlmClient, LlmConfig};
use akritas::resources::mcp_adapter::Permission;
use akritas::tools::{RegistryBuilder, ToolLimits, ToolName, openai_alias};
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use support::brain::{Mode, asked};
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step};

const WINDOW: u64 = 2048;
const QUESTION: &str = "Why is the postgres database on db-7 slow, and are its connections saturated?";

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

/// A model that plans two checks of db-7 (as a tool call, or as JSON when the plan is asked for
/// so: llama-server's `/props` makes the host start with a JSON schema), then answers.
fn model() -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let plan = alias("local.investigation.submit_plan");
    move |_, request| {
        let check = |tool: &str| json!({"step": "Read it", "tool": tool, "arguments": {"host": "db-7"}, "reason": "r"});
        let checks = json!({"checks": [check("inventory.host"), check("postgres.activity")], "gaps": []});
        match asked(request) {
            Some((alias, Mode::ToolCall)) if alias == plan => {
                Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), checks)]))
            }
            Some((alias, _)) if alias == plan => Step::from(Reply::Content(checks.to_string())),
            _ => Step::from(Reply::Content("db-7 has 3 active queries; the longest runs for 1820 s.".into())),
        }
    }
}

/// A knowledge base of 40 long runbooks, a long PostgreSQL skill, 2 useful tools (one with a
/// 6 KB result) and 25 unrelated ones: far more than 2,048 tokens.
struct Rig {
    host: host::Host,
    audit: Arc<AuditLog>,
    _dir: tempfile::TempDir,
}

async fn rig(llm: &ScriptedLlm, context_tokens: Option<u32>) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let (resources, runbooks) = (dir.path().join("resources"), dir.path().join("runbooks"));
    std::fs::create_dir_all(&resources).unwrap();
    std::fs::create_dir_all(&runbooks).unwrap();
    for n in 0..40 {
        let paragraph =
            format!("When postgres on a database host is slow, check connections, locks and autovacuum (note {n}). ");
        let text = format!("# Runbook {n}: postgres latency\n\n{}", paragraph.repeat(30));
        std::fs::write(runbooks.join(format!("runbook-{n:02}.md")), text).unwrap();
    }
    let skill = "Check active queries, locks, connections against max_connections and autovacuum. ".repeat(25);
    std::fs::write(
        resources.join("resources.yaml"),
        format!(
            "apiVersion: akritas.io/v1alpha1\nkind: KnowledgeBase\nmetadata: {{name: runbooks, namespace: default}}\n\
             spec:\n  sources:\n    - directory: {{path: \"{}\"}}\n---\n\
             apiVersion: akritas.io/v1alpha1\nkind: Skill\nmetadata: {{name: postgresql, namespace: default}}\n\
             spec:\n  description: PostgreSQL latency\n  match: [postgres, postgresql]\n  content: \"{skill}\"\n",
            runbooks.display()
        ),
    )
    .unwrap();
    let catalog = host::catalog_from(&resources);
    let policy =
        ResourcePolicy { knowledge_roots: vec![runbooks], data_dir: dir.path().join("data"), ..Default::default() };
    let bases = Arc::new(KnowledgeBases::new(800, Some(dir.path().join("data/knowledge"))));
    assert!(bases.refresh(&catalog.current(), &policy)[0].outcome.is_ok());

    let mut tools = RegistryBuilder::new(ToolLimits::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let inventory = json!({"host": "db-7", "roles": ["postgresql"], "owner": "data-platform"});
    host::fixed_tool(&mut tools, "inventory.host", Permission::Read, inventory, calls.clone());
    let sessions: Vec<Value> =
        (0..60).map(|pid| json!({"pid": 4000 + pid, "state": "active", "query": "SELECT * FROM orders"})).collect();
    let activity = json!({"active": 3, "longest_query_seconds": 1820, "sessions": sessions});
    host::fixed_tool(&mut tools, "postgres.activity", Permission::Read, activity, calls.clone());
    for n in 0..25 {
        host::fixed_tool(&mut tools, &format!("mail.relay{n}"), Permission::Read, json!({}), calls.clone());
    }

    let audit = Arc::new(AuditLog::open(&dir.path().join("audit.jsonl")).unwrap());
    akritas::install_crypto_provider();
    let config = LlmConfig {
        system_instructions: Some(Arc::from(host::system_instructions())),
        context_tokens,
        ..LlmConfig::new(llm.url.clone())
    };
    let client = LlmClient::new(config, reqwest::Client::new()).unwrap();
    let retriever: Arc<dyn Retriever> = bases;
    let engine =
        Engine::new(host::settings(), client, tools.build(), Some(audit.clone()), catalog.clone(), Some(retriever));
    let host = host::serve(engine, catalog, ApiKeys::default()).await;
    Rig { host, audit, _dir: dir }
}

async fn chat(rig: &Rig) -> (u16, Value) {
    let body = json!({"messages": [{"role": "user", "content": QUESTION}], "context": {"service": "postgresql"}});
    let response =
        reqwest::Client::new().post(format!("{}/api/v1/chat", rig.host.url)).json(&body).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn run_record(rig: &Rig, answer: &Value) -> Value {
    let url = format!("{}/api/v1/runs/{}", rig.host.url, answer["run_id"].as_str().unwrap());
    let detail: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    detail["run"].clone()
}

/// Estimated prompt tokens of a request as the server received it (the fitter's estimate: its
/// messages and tools as JSON, three bytes a token).
fn prompt_tokens(request: &Value) -> u64 {
    let tools = request.get("tools").cloned().unwrap_or(json!([]));
    (serde_json::to_string(&(&request["messages"], tools)).unwrap().len() as u64).div_ceil(3)
}

fn events<'a>(record: &'a Value, kind: &str) -> Vec<&'a Value> {
    record["events"].as_array().unwrap().iter().filter(|e| e["type"] == kind).collect()
}

/// Every call of an assistant message has its tool message.
fn paired(request: &Value) -> bool {
    let messages = request["messages"].as_array().unwrap();
    let answered: Vec<&str> = messages.iter().filter_map(|m| m["tool_call_id"].as_str()).collect();
    messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .all(|call| answered.contains(&call["id"].as_str().unwrap()))
}

async fn a_small_window_run(llm: ScriptedLlm, context_tokens: Option<u32>, source: &str) {
    let rig = rig(&llm, context_tokens).await;
    let (status, answer) = chat(&rig).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["answer"].as_str().unwrap().contains("1820"));

    let requests = llm.requests();
    assert!(requests.len() >= 2, "a plan and an answer");
    for (n, request) in requests.iter().enumerate() {
        let (prompt, completion) = (prompt_tokens(request), request["max_tokens"].as_u64().unwrap());
        eprintln!("request {n}: {prompt} prompt tokens + {completion} completion tokens (window {WINDOW})");
        assert!(prompt + completion <= WINDOW, "request {n} does not fit: {prompt} + {completion}");
        assert!(paired(request), "request {n} lost a tool result");
    }
    // The planner still sees the question whole, the best runbook and the most related tool.
    let planner: Value = serde_json::from_str(requests[0]["messages"][1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(planner["request"], QUESTION);
    assert!(planner.to_string().contains("runbook-"), "the best-ranked runbook stays: {planner}");
    let offered: Vec<&str> =
        planner["available_execution_tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(offered.contains(&"postgres.activity") && !offered.iter().any(|t| t.starts_with("mail.")), "{offered:?}");
    let last = requests.last().unwrap()["messages"].as_array().unwrap();
    assert!(last.iter().any(|m| m["role"] == "user" && m["content"] == QUESTION), "the question is never cut");

    // The cuts, on the answer and in the audit (counts and sizes, never content).
    let cuts = &answer["context_cuts"];
    assert_eq!(cuts["window"], WINDOW, "{cuts}");
    assert_eq!(cuts["overflow_retries"], 0);
    assert_eq!(cuts["fitted_requests"].as_u64(), Some(requests.len() as u64), "{cuts}");
    for category in ["runbook_documents", "tools", "instruction_bytes", "completion_tokens"] {
        assert!(cuts[category].as_u64().unwrap() > 0, "{category}: {cuts}");
    }
    let record = run_record(&rig, &answer).await;
    let fitted = events(&record, "context_fitted");
    assert_eq!(fitted.len(), requests.len());
    for event in &fitted {
        let m = &event["metadata"];
        eprintln!(
            "context_fitted: prompt {} -> {} tokens, max_tokens {} -> {}, runbooks -{} tools -{} SYSTEM.md -{} B",
            m["prompt_tokens_before"],
            m["prompt_tokens_after"],
            m["max_tokens_before"],
            m["max_tokens_after"],
            m["runbook_documents"],
            m["tools"],
            m["instruction_bytes"]
        );
        assert_eq!((&m["window"], m["window_source"].as_str()), (&json!(WINDOW), Some(source)));
        assert!(m["prompt_tokens_before"].as_u64() > m["prompt_tokens_after"].as_u64());
        let text = event.to_string();
        assert!(!text.contains("db-7 slow") && !text.contains("autovacuum (note"), "no content: {text}");
    }
    assert!(
        rig.audit
            .get(&akritas::audit::RunId::parse(answer["run_id"].as_str().unwrap()).unwrap())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_run_fits_the_window_set_by_model_context_tokens() {
    a_small_window_run(ScriptedLlm::start_with(model()).await, Some(2048), "setting").await;
}

#[tokio::test]
async fn a_run_fits_the_window_llama_server_reports() {
    let llm = ScriptedLlm::start_with(model()).await;
    llm.set_props(Some(json!({"default_generation_settings": {"n_ctx": WINDOW, "params": {}}, "total_slots": 1})));
    a_small_window_run(llm, None, "server").await;
}

#[tokio::test]
async fn a_context_overflow_is_retried_once_with_a_smaller_request() {
    let overflows = [
        // llama-server before it named the numbers, and since.
        json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                         "type": "invalid_request_error"}}),
        json!({"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 5400, "n_ctx": 3000,
                         "message": "request (5400 tokens) exceeds the available context size (3000 tokens), try increasing it"}}),
    ];
    for overflow in overflows {
        let (answer_model, refusal) = (model(), overflow.clone());
        let llm = ScriptedLlm::start_with(move |index, request| match index {
            0 => Step::from(Reply::Error { status: 400, body: refusal.clone() }).with_usage(None),
            _ => answer_model(index, request),
        })
        .await;
        // No window is known: no setting, no /props.
        let rig = rig(&llm, None).await;
        let (status, answer) = chat(&rig).await;
        assert_eq!(status, 200, "{answer}");

        let requests = llm.requests();
        let sizes: Vec<u64> = requests.iter().map(prompt_tokens).collect();
        eprintln!("overflow {}: request prompt tokens {sizes:?}", overflow["error"]["type"]);
        let failed = sizes[0] + requests[0]["max_tokens"].as_u64().unwrap();
        let expected = match overflow["error"]["n_ctx"].as_u64() {
            Some(server) if server < failed => server,
            _ => failed * 3 / 4,
        };
        // The engine's estimate of the failed request also counts SYSTEM.md's frame: a few tokens more.
        let cuts = &answer["context_cuts"];
        let learned = cuts["window"].as_u64().unwrap();
        assert!(learned.abs_diff(expected) <= 20, "fitted to {learned}, expected about {expected}");
        for (n, request) in requests.iter().enumerate().skip(1) {
            let total = sizes[n] + request["max_tokens"].as_u64().unwrap();
            assert!(total <= learned, "request {n} ({total} tokens) is not fitted to {learned}");
        }
        assert!(sizes[1] < sizes[0], "the retry is smaller");
        let tool = |n: usize| requests[n]["tools"][0]["function"]["name"].clone();
        assert_eq!(tool(1), tool(0), "the same step, once more");

        assert_eq!(cuts["overflow_retries"].as_u64(), Some(1), "{cuts}");
        let record = run_record(&rig, &answer).await;
        let retried: Vec<_> =
            events(&record, "context_fitted").into_iter().filter(|e| e["status"] == "retried").collect();
        assert_eq!(retried.len(), 1);
        assert_eq!(retried[0]["metadata"]["window_source"], "overflow");
        assert_eq!(retried[0]["metadata"]["server_window"], overflow["error"]["n_ctx"]);
        let usage = &answer["budget"]["usage"];
        assert_eq!(usage["model_calls"].as_u64(), Some(requests.len() as u64), "the retry is a model call: {usage}");
    }
}
