//! The golden flow over HTTP: an alert-like chat, planned checks, skill
//! selection from inventory, one adaptive call, the answer — with the exact model
//! calls and tool-call ids recorded in the Run, and exactly what the model was sent.

use akritas_testkit as support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use akritas::audit::AuditLog;
use akritas::tools::ToolName;
use akritas::tools::openai_alias;
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step};

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

fn plan() -> Value {
    json!({
        "checks": [
            {"step": "Identify the host and its role", "tool": "inventory.host", "arguments": {"host": "db-7"}, "reason": "find the owner and the database"},
            {"step": "Find the processes using the CPU", "tool": "linux.processes", "arguments": {"host": "db-7"}, "reason": "attribute the load"}
        ],
        "gaps": [
            {"step": "Read kernel messages", "capability": "linux.kernel.logs", "reason": "rule out throttling"}
        ]
    })
}

const QUESTION: &str = "Alert HostHighCpuLoad is firing for instance db-7:9100 (severity critical). Investigate.";

#[tokio::test]
async fn alert_like_chat_plans_checks_selects_skill_and_answers() {
    let llm = ScriptedLlm::start(vec![
        Step::from(Reply::ToolCalls(vec![("plan-1".into(), alias("local.investigation.submit_plan"), plan())])),
        Step::from(Reply::ToolCalls(vec![("call_pg".into(), alias("postgres.activity"), json!({"host": "db-7"}))])),
        Step::from(Reply::Content("db-7 is saturated by an autovacuum worker on a long-running query.".into())),
    ])
    .await;
    let data = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&data.path().join("audit.jsonl")).unwrap());
    let catalog = host::catalog_from(&support::root().join("config/samples"));
    let (tools, counters) = host::standard_tools();
    let engine = host::engine(&llm, host::settings(), tools, catalog.clone(), Some(audit.clone()), None);
    let server = host::serve(engine, catalog, ApiKeys::default()).await;
    let client = reqwest::Client::new();

    let response = client
        .post(format!("{}/api/v1/chat", server.url))
        .json(&json!({"messages": [{"role": "user", "content": QUESTION}], "debug": true}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["answer"], "db-7 is saturated by an autovacuum worker on a long-running query.");
    assert_eq!(body["skills"], json!(["postgresql"]));
    let ids: Vec<&str> = body["activity"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    // The host's own ids: the model's `call_pg` only pairs its call with the answer.
    assert_eq!(ids, ["call_akritas_investigation_plan", "call-1", "call-2", "call-3"]);
    assert!(body["activity"].as_array().unwrap().iter().all(|a| a["status"] == "ok"));
    assert_eq!(body["capability_gaps"][0]["capability"], "linux.kernel.logs");
    assert_eq!(body["budget"]["usage"]["model_calls"], 3);
    assert_eq!(body["budget"]["usage"]["tool_calls"], 4);

    // Exactly three model calls, and exactly what they carried.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let instructions = host::system_instructions();
    for request in &requests {
        let system = request["messages"][0]["content"].as_str().unwrap();
        assert!(system.starts_with(&instructions), "SYSTEM.md is prepended to every request");
        assert!(system.contains("BCP 47 tag \"en\""), "language instruction in every request");
    }
    let planner = &requests[0];
    assert_eq!(planner["tool_choice"], "required");
    assert_eq!(planner["tools"].as_array().unwrap().len(), 1);
    assert_eq!(planner["tools"][0]["function"]["name"], alias("local.investigation.submit_plan"));
    let planner_input: Value = serde_json::from_str(planner["messages"][1]["content"].as_str().unwrap()).unwrap();
    let offered: Vec<&str> = planner_input["available_execution_tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        ["inventory.host", "knowledge.list_skills", "knowledge.load_skill", "linux.processes", "postgres.activity"]
    );
    assert_eq!(planner_input["maximum_execution_checks"], 7);
    assert_eq!(planner_input["request"], QUESTION);

    let adaptive = &requests[1];
    assert_eq!(adaptive["tool_choice"], "auto");
    assert_eq!(adaptive["parallel_tool_calls"], false);
    let names: Vec<&str> =
        adaptive["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&alias("ops.restart").as_str()), "write tools are never offered");
    assert!(
        !names.contains(&alias("local.investigation.submit_plan").as_str()),
        "the plan tool is not offered after planning"
    );
    assert_eq!(names.len(), 5);
    let system = adaptive["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("<AKRITAS_SKILL name=\"postgresql\" source=\"Skill/default/postgresql\">"),
        "skill from inventory injected"
    );
    let tool_messages: Vec<&Value> =
        adaptive["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
    let tool_ids: Vec<&str> = tool_messages.iter().map(|m| m["tool_call_id"].as_str().unwrap()).collect();
    assert_eq!(tool_ids, ["call-1", "call-2"], "the planned checks' results, not the plan submission");
    // The checks are the assistant's calls under the host's ids, right before their results.
    let messages = adaptive["messages"].as_array().unwrap();
    let at = messages.iter().position(|m| m["role"] == "tool").unwrap();
    let calls = &messages[at - 1]["tool_calls"];
    let called: Vec<(&str, &str)> = calls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap(), c["function"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(called.iter().map(|(id, _)| *id).collect::<Vec<_>>(), ["call-1", "call-2"]);
    assert!(called.iter().all(|(_, name)| names.contains(name)), "under the aliases the tools are offered by");
    let final_request = &requests[2];
    let last = final_request["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["tool_call_id"], "call_pg");
    let content: Value = serde_json::from_str(last["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["longest_query_seconds"], 1820, "the output is the message: no wrapper to quote");
    assert!(content.get("id").is_none() && content.get("output").is_none(), "{content}");

    assert_eq!(counters.inventory.load(Ordering::SeqCst), 1);
    assert_eq!(counters.processes.load(Ordering::SeqCst), 1);
    assert_eq!(counters.postgres.load(Ordering::SeqCst), 1);
    assert_eq!(counters.restart.load(Ordering::SeqCst), 0);

    // The Run as recorded.
    let run_id = body["run_id"].as_str().unwrap();
    let run: Value =
        client.get(format!("{}/api/v1/runs/{run_id}", server.url)).send().await.unwrap().json().await.unwrap();
    let run = &run["run"];
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["source"], "chat");
    assert_eq!(run["actor"], "anonymous");
    assert_eq!(run["model"], "scripted-model");
    assert_eq!(run["catalog_version"], 1);
    assert_eq!(run["metadata"]["skills"], "postgresql");
    assert_eq!(run["metadata"]["model_calls"], 3);
    assert_eq!(run["metadata"]["tool_calls"], 4);
    assert_eq!(run["metadata"]["output_tokens"], 15, "usage counters survive redaction");
    let events = run["events"].as_array().unwrap();
    let calls: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool_call")
        .map(|e| e["metadata"]["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(calls, ids);
    let skill_events: Vec<&Value> = events.iter().filter(|e| e["type"] == "skill_selected").collect();
    assert_eq!(skill_events.len(), 1);
    assert_eq!(skill_events[0]["metadata"]["selected_by"], "inventory");
    let inventory_call = events.iter().find(|e| e["metadata"]["call_id"] == "call-1").unwrap();
    assert_eq!(inventory_call["metadata"]["call_kind"], "execution");
    assert_eq!(inventory_call["arguments"], json!({"host": "db-7"}));
    assert_eq!(inventory_call["result"]["output"]["roles"], json!(["postgresql"]));
    let text = std::fs::read_to_string(audit.path().unwrap()).unwrap();
    assert!(!text.contains(QUESTION), "prompts never reach the audit journal");
    assert!(
        !text.contains("autovacuum worker on a long-running query"),
        "model output never reaches the audit journal"
    );

    // Listing hides raw payloads.
    let list: Value =
        client.get(format!("{}/api/v1/runs?limit=5", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["runs"][0]["id"], run_id);
    assert!(
        list["runs"][0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e.get("result").is_none() && e.get("arguments").is_none())
    );

    // The tool catalog shows only authorized read-only tools.
    let tools: Value = client.get(format!("{}/api/v1/tools", server.url)).send().await.unwrap().json().await.unwrap();
    let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["inventory.host", "linux.processes", "postgres.activity"]);
}

#[tokio::test]
async fn a_run_cannot_call_a_tool_outside_its_read_only_catalog() {
    let llm = ScriptedLlm::start(vec![
        Step::from(Reply::ToolCalls(vec![(
            "plan-1".into(),
            alias("local.investigation.submit_plan"),
            json!({"checks": [], "gaps": []}),
        )])),
        Step::from(Reply::ToolCalls(vec![
            ("c1".into(), alias("ops.restart"), json!({"host": "db-7"})),
            ("c2".into(), "ops.restart".into(), json!({"host": "db-7"})),
        ])),
        Step::from(Reply::Content("I cannot restart anything.".into())),
    ])
    .await;
    let (tools, counters) = host::standard_tools();
    let engine = host::engine(&llm, host::settings(), tools, akritas::catalog::CatalogStore::new(), None, None);
    let request = akritas::engine::request::RunRequest {
        source: "chat".into(),
        actor: "test".into(),
        turns: vec![akritas::engine::conversation::Turn {
            role: akritas::engine::conversation::Speaker::User,
            content: "restart db-7".into(),
        }],
        ..Default::default()
    };
    let outcome = engine.run(request).await.unwrap();
    assert_eq!(counters.restart.load(Ordering::SeqCst), 0, "the write tool never ran");
    let statuses: Vec<(&str, &str)> = outcome.activity.iter().map(|a| (a.id.as_str(), a.status.as_str())).collect();
    assert_eq!(
        statuses,
        [("call_akritas_investigation_plan", "ok"), ("call-1", "unknown_tool"), ("call-2", "unknown_tool")]
    );
    // The refusal reached the model as a tool result.
    let last = llm.requests()[2]["messages"].as_array().unwrap().last().unwrap().clone();
    assert!(last["content"].as_str().unwrap().contains("unknown_tool"));
}

/// A plan the host refuses gets one repair turn that names the broken rule; both submissions
/// are recorded, the conversation keeps only the accepted one, and its checks run.
#[tokio::test]
async fn a_refused_plan_is_repaired_once_and_its_checks_run() {
    let mut refused = plan();
    refused["gaps"][0]["capability"] = json!("kernel messages of the host");
    let llm = ScriptedLlm::start(vec![
        Step::from(Reply::ToolCalls(vec![("plan-1".into(), alias("local.investigation.submit_plan"), refused)])),
        Step::from(Reply::ToolCalls(vec![("plan-2".into(), alias("local.investigation.submit_plan"), plan())])),
        Step::from(Reply::Content("db-7 is busy.".into())),
    ])
    .await;
    let (tools, counters) = host::standard_tools();
    let catalog = host::catalog_from(&support::root().join("config/samples"));
    let engine = host::engine(&llm, host::settings(), tools, catalog, None, None);
    let request = akritas::engine::request::RunRequest {
        source: "chat".into(),
        actor: "test".into(),
        turns: vec![akritas::engine::conversation::Turn {
            role: akritas::engine::conversation::Speaker::User,
            content: QUESTION.into(),
        }],
        ..Default::default()
    };
    let outcome = engine.run(request).await.unwrap();
    let statuses: Vec<(&str, &str)> = outcome.activity.iter().map(|a| (a.id.as_str(), a.status.as_str())).collect();
    assert_eq!(
        statuses,
        [
            ("call_akritas_investigation_plan", "invalid_arguments"),
            ("call_akritas_investigation_plan_2", "ok"),
            ("call-1", "ok"),
            ("call-2", "ok"),
        ]
    );
    assert_eq!(counters.inventory.load(Ordering::SeqCst), 1);
    assert_eq!(counters.processes.load(Ordering::SeqCst), 1);
    assert_eq!(outcome.gaps.len(), 1);
    assert_eq!(outcome.plan_error, None);

    let requests = llm.requests();
    let repair = requests[1]["messages"].as_array().unwrap();
    let last = repair.last().unwrap()["content"].as_str().unwrap();
    assert!(last.contains("gaps[0].capability") && last.contains("not a dot-separated capability id"), "{last}");
    let answer = requests[2]["messages"].as_array().unwrap();
    let plan_turns: Vec<&str> =
        answer.iter().filter(|m| m["role"] == "tool").map(|m| m["tool_call_id"].as_str().unwrap()).collect();
    assert_eq!(plan_turns, ["call-1", "call-2"], "the answer reads the checks' results, not the plan turns");
}
