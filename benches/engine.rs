//! Host overhead per tool-loop iteration: a zero-latency scripted model asks for a
//! no-op tool again and again. Reported without the audit journal (pure host work:
//! request building, HTTP on loopback, tool execution, budget) and with it (each
//! tool call is an fsynced journal record). Prints numbers; asserts nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use akritas::audit::AuditLog;
use akritas::catalog::CatalogStore;
use akritas::engine::budget::BudgetLimits;
use akritas::engine::conversation::{Speaker, Turn};
use akritas::engine::request::{EngineSettings, RunRequest};
use akritas::engine::run::Engine;
use akritas::llm::{LlmClient, LlmConfig};
use akritas::resources::mcp_adapter::Permission;
use akritas::tools::{RegistryBuilder, ToolFuture, ToolHandler, ToolLimits, ToolName, ToolSpec, openai_alias};
use akritas_testkit::scripted_llm::{Reply, ScriptedLlm, Step};
use serde_json::{Value, json};

const ITERATIONS: usize = 20;
const RUNS: usize = 15;

fn main() {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
        let noop = openai_alias(&ToolName::try_from("bench.noop").unwrap());
        let llm = ScriptedLlm::start_with(move |_, body: &Value| {
            if body["tool_choice"] == "required" {
                return Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]));
            }
            let done = body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
            if done > ITERATIONS {
                Step::from(Reply::Content("done".into()))
            } else {
                Step::from(Reply::ToolCalls(vec![(format!("c{done}"), noop.clone(), json!({}))]))
            }
        })
        .await;
        llm.set_recording(false);
        let dir = std::env::temp_dir().join(format!("akritas-bench-engine-{}", std::process::id()));
        let audit = Arc::new(AuditLog::open(&dir.join("audit.jsonl")).unwrap());
        for (label, audit) in [("no audit", None), ("audit, fsync per record", Some(audit))] {
            let engine = engine(&llm, audit);
            let mut per_iteration = Vec::new();
            for run in 0..RUNS + 2 {
                let started = Instant::now();
                let outcome = engine.run(request()).await.unwrap();
                let elapsed = started.elapsed();
                assert_eq!(outcome.usage.tool_calls as usize, ITERATIONS + 1, "plan + no-op calls");
                if run >= 2 {
                    per_iteration.push(elapsed / (outcome.usage.model_calls));
                }
            }
            per_iteration.sort();
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            println!(
                "engine tool loop ({label}): {ITERATIONS} tool iterations per Run, {RUNS} Runs, per iteration p50 {:.0} µs, p90 {:.0} µs, max {:.0} µs",
                us(per_iteration[RUNS / 2]),
                us(per_iteration[RUNS * 9 / 10]),
                us(per_iteration[RUNS - 1]),
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}

fn request() -> RunRequest {
    RunRequest {
        source: "bench".into(),
        actor: "bench".into(),
        turns: vec![Turn { role: Speaker::User, content: "Loop over the no-op tool.".into() }],
        ..Default::default()
    }
}

fn engine(llm: &ScriptedLlm, audit: Option<Arc<AuditLog>>) -> Engine {
    let mut builder = RegistryBuilder::new(ToolLimits::default());
    let spec = ToolSpec::new(
        ToolName::try_from("bench.noop").unwrap(),
        "Does nothing.",
        Permission::Read,
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
    );
    let handler: Arc<dyn ToolHandler> =
        Arc::new(|_: Value| -> ToolFuture { Box::pin(async { Ok("{\"ok\":true}".to_string()) }) });
    builder.register(spec, handler).unwrap();
    let settings = EngineSettings {
        limits: BudgetLimits {
            max_duration_ms: 60_000,
            max_model_calls: 100,
            max_tool_calls: 100,
            max_tool_result_bytes: 16 * 1024 * 1024,
            max_retrieved_context_bytes: 1024 * 1024,
            max_context_tokens: 1_000_000,
            max_output_tokens: 1_000_000,
        },
        default_max_tokens: 1024,
        max_tokens_limit: 4096,
        temperature: 0.0,
        response_language: "en".into(),
        max_concurrent_runs: 4,
        alert_reserved_runs: 0,
        max_runs_per_namespace: 4,
        queue_timeout: Duration::from_secs(5),
        search_top_k: 5,
        keep_input_namespaces: Default::default(),
    };
    let client = LlmClient::new(
        LlmConfig { system_instructions: Some(Arc::from("Be careful.")), ..LlmConfig::new(llm.url.clone()) },
        reqwest::Client::new(),
    )
    .unwrap();
    Engine::new(settings, client, builder.build(), audit, CatalogStore::new(), None)
}
