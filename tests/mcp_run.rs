//! End to end through the host: the scripted model plans `mcp.victoriametrics.query`,
//! the host executes it through the McpAdapter (the bundled server as a child
//! process) against a real VictoriaMetrics, and the Run's audit record holds the
//! real result. Against a stopped VictoriaMetrics, the server's `isError` result is a failed
//! call: shown and audited as failed, never citable as evidence, its text still read by the
//! model.

use akritas_testkit as support;
use akritas_testkit::vm;

use std::sync::Arc;
use std::time::Duration;

use akritas::audit::AuditLog;
use akritas::catalog::policy::ResourcePolicy;
use akritas::catalog::secrets::EnvSecrets;
use akritas::engine::conversation::{Speaker, Turn};
use akritas::engine::request::RunRequest;
use akritas::mcp::{HostOptions, McpHost, from_catalog};
use akritas::tools::{ToolName, openai_alias};
use serde_json::json;
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step};

/// An McpHost with the bundled VictoriaMetrics server (a child process of this build) as the
/// McpAdapter `ops/victoriametrics`, pointed at `base_url`, connected; the Catalog it came from.
async fn connect(base_url: &str) -> (akritas::catalog::CatalogStore, McpHost, tempfile::TempDir) {
    let manifests = tempfile::tempdir().unwrap();
    std::fs::write(
        manifests.path().join("adapter.yaml"),
        format!(
            "apiVersion: akritas.io/v1alpha1\nkind: McpAdapter\nmetadata: {{name: victoriametrics, namespace: ops}}\nspec:\n  \
             transport:\n    stdio:\n      command: {}\n      args: [mcp, victoriametrics, --base-url, \"{base_url}\"]\n  \
             namespace: mcp.victoriametrics\n  allow: [read]\n  callTimeoutSeconds: 20\n",
            env!("CARGO_BIN_EXE_akritas"),
        ),
    )
    .unwrap();
    let catalog = host::catalog_from(manifests.path());
    let policy = ResourcePolicy { stdio_commands: vec![env!("CARGO_BIN_EXE_akritas").into()], ..Default::default() };
    let (configs, failures) = from_catalog::adapters(&catalog.current(), &EnvSecrets::process(), &policy);
    assert!(failures.is_empty(), "{failures:?}");
    let mcp = McpHost::new(HostOptions::default());
    let mut changes = mcp.subscribe();
    mcp.reconcile(configs).await;
    tokio::time::timeout(Duration::from_secs(20), async {
        while !mcp.status().iter().all(|s| s.connected) {
            changes.changed().await.unwrap();
        }
    })
    .await
    .expect("adapter connected");
    (catalog, mcp, manifests)
}

/// One chat Run of `question` on `llm` with the adapter's tools, audited into `data`.
async fn chat_run(
    llm: &ScriptedLlm,
    mcp: &McpHost,
    catalog: akritas::catalog::CatalogStore,
    question: &str,
    data: &std::path::Path,
) -> (akritas::engine::request::RunOutcome, Arc<AuditLog>) {
    let audit = Arc::new(AuditLog::open(&data.join("audit.jsonl")).unwrap());
    let engine = host::engine(llm, host::settings(), mcp.registry(), catalog, Some(audit.clone()), None);
    let outcome = engine
        .run(RunRequest {
            source: "chat".into(),
            actor: "test".into(),
            turns: vec![Turn { role: Speaker::User, content: question.into() }],
            ..Default::default()
        })
        .await
        .unwrap();
    (outcome, audit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_victoriametrics_query_runs_against_the_real_server_and_is_audited() {
    let vm = vm::VictoriaMetrics::start().await;
    let ts = vm::now_ms() - 60_000;
    vm.import_prometheus(&format!("node_load1{{instance=\"db-7:9100\",job=\"node\"}} 7.25 {ts}\n")).await;
    vm.wait_for_series("node_load1", 1).await;

    let (catalog, mcp, _manifests) = connect(&vm.url()).await;

    let query = openai_alias(&ToolName::try_from("mcp.victoriametrics.query").unwrap());
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let llm = ScriptedLlm::start(vec![
        Step::from(Reply::ToolCalls(vec![(
            "p".into(),
            plan,
            json!({"checks": [{"step": "Read the load of db-7", "tool": "mcp.victoriametrics.query",
                               "arguments": {"query": "node_load1{instance=\"db-7:9100\"}"}, "reason": "confirm the alert"}],
                   "gaps": []}),
        )])),
        Step::from(Reply::ToolCalls(vec![("c1".into(), query, json!({"query": "up{job=\"absent\"}"}))])),
        Step::from(Reply::Content("db-7 has a load of 7.25.".into())),
    ])
    .await;
    let data = tempfile::tempdir().unwrap();
    let (outcome, audit) = chat_run(&llm, &mcp, catalog, "Why is db-7 loaded?", data.path()).await;
    let statuses: Vec<(&str, &str)> = outcome.activity.iter().map(|a| (a.name.as_str(), a.status.as_str())).collect();
    assert_eq!(
        statuses,
        [
            ("local.investigation.submit_plan", "ok"),
            ("mcp.victoriametrics.query", "ok"),
            ("mcp.victoriametrics.query", "ok")
        ]
    );

    let run = audit.get(outcome.run_id.as_ref().unwrap()).await.unwrap().unwrap();
    let planned = run.events.iter().find(|e| e.metadata.get("call_id") == Some(&json!("call-1"))).unwrap();
    assert_eq!(planned.arguments, Some(json!({"query": "node_load1{instance=\"db-7:9100\"}"})));
    let output = &planned.result.as_ref().unwrap()["output"];
    assert_eq!(output["isError"], false);
    let series = &output["structuredContent"]["data"]["result"][0];
    assert_eq!(series["metric"]["instance"], "db-7:9100");
    assert_eq!(series["value"][1], "7.25", "the real VictoriaMetrics value is in the audit record");
    mcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_result_of_an_mcp_tool_is_a_failed_call_that_no_evidence_can_cite() {
    let address = format!("127.0.0.1:{}", support::free_port()); // nothing listens there
    let stopped = format!("http://{address}");
    let (catalog, mcp, _manifests) = connect(&stopped).await;

    let query = openai_alias(&ToolName::try_from("mcp.victoriametrics.query").unwrap());
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let llm = ScriptedLlm::start(vec![
        Step::from(Reply::ToolCalls(vec![(
            "p".into(),
            plan,
            json!({"checks": [{"step": "Is it up", "tool": "mcp.victoriametrics.query", "arguments": {"query": "up"},
                               "reason": "the question"}], "gaps": []}),
        )])),
        Step::from(Reply::ToolCalls(vec![("c1".into(), query, json!({"query": "up"}))])),
        Step::from(Reply::Content("VictoriaMetrics cannot be reached.".into())),
    ])
    .await;
    let data = tempfile::tempdir().unwrap();
    let (outcome, audit) = chat_run(&llm, &mcp, catalog, "Is the cluster up?", data.path()).await;
    let call = outcome.activity.iter().find(|a| a.name == "mcp.victoriametrics.query").expect("the query ran");
    assert_eq!(call.status, "tool_error", "the error result is a failed call: {call:?}");
    let error = call.result.error.as_ref().expect("recorded as an error");
    assert!(error.message.contains("cannot connect") && error.message.contains(&address), "{}", error.message);
    assert!(call.result.output.is_none(), "no output to cite");

    // The model read the error's text to adapt its plan.
    let told = llm.requests().into_iter().last().unwrap();
    let tool_message = told["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap().clone();
    assert!(tool_message["content"].as_str().unwrap().contains("cannot connect"), "{tool_message}");

    // The audit shows it failed, and evidence citing it is refused as naming no successful call.
    let run = audit.get(outcome.run_id.as_ref().unwrap()).await.unwrap().unwrap();
    let recorded = run.events.iter().find(|e| e.metadata.get("call_id") == Some(&json!(call.id))).unwrap();
    assert_eq!(recorded.status.as_deref(), Some("failed"), "{recorded:?}");
    let cited = json!({
        "finding_status": "confirmed", "actionability": "requires_human", "confidence": "high",
        "summary": "VictoriaMetrics is down", "evidence": [format!("tool-call:{} \"cannot connect\"", call.id)],
        "production_writes": 0
    });
    let successful: akritas::investigation::Evidence = outcome
        .activity
        .iter()
        .filter(|a| a.result.is_ok())
        .map(|a| (a.id.clone(), a.result.output.clone().unwrap_or_default()))
        .collect();
    let refused = akritas::investigation::validate(&cited.to_string(), &successful).unwrap_err();
    assert!(refused.to_string().contains("names no successful tool call"), "{refused}");
    mcp.shutdown().await;
}
