//! `akritas ask` from a terminal: one Run in-process against a model server.

use akritas_testkit as support;

use std::process::Command;

use akritas::tools::{ToolName, openai_alias};
use serde_json::{Value, json};
use support::scripted_llm::{Reply, ScriptedLlm, Step};

fn ask(llm: &ScriptedLlm, data: &std::path::Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_akritas"))
        .arg("ask")
        .arg("service: postgresql is slow on db-7, why?")
        .args(["--base-url", &llm.url])
        .arg("--data-dir")
        .arg(data)
        .arg("--resources")
        .arg(support::root().join("config/samples"))
        .arg("--system-instructions")
        .arg(support::root().join("instructions/SYSTEM.md"))
        .args(extra)
        .env_remove("AKRITAS_CONFIG")
        .output()
        .unwrap()
}

fn plan_step() -> Step {
    let alias = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    Step::from(Reply::ToolCalls(vec![(
        "p".into(),
        alias,
        json!({"checks": [], "gaps": [{"step": "Read pg_stat_activity", "capability": "postgres.activity", "reason": "find long queries"}]}),
    )]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_prints_answer_tools_and_budget() {
    let llm =
        ScriptedLlm::start(vec![plan_step(), Step::from(Reply::Content("Long-running queries hold locks.".into()))])
            .await;
    let data = tempfile::tempdir().unwrap();
    let output = ask(&llm, data.path(), &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.starts_with("Long-running queries hold locks.\n"), "{stdout}");
    assert!(stdout.contains("knowledge.search · ok"), "{stdout}");
    assert!(stdout.contains("local.investigation.submit_plan · ok"), "{stdout}");
    assert!(stdout.contains("Unavailable check: Read pg_stat_activity (postgres.activity)"), "{stdout}");
    assert!(stdout.contains("Skills: postgresql"), "explicit service fact selects the skill:\n{stdout}");
    assert!(stdout.contains("Budget: model calls 2/12, tool calls 2/8"), "{stdout}");
    assert!(stdout.contains("Run: run_"), "{stdout}");
    // The Run is in the same audit journal the server uses.
    let journal = std::fs::read_to_string(data.path().join("audit/akritas.jsonl")).unwrap();
    assert!(journal.contains("\"source\":\"cli\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_json_is_machine_readable() {
    let llm = ScriptedLlm::start(vec![plan_step(), Step::from(Reply::Content("Answer.".into()))]).await;
    let data = tempfile::tempdir().unwrap();
    let output = ask(&llm, data.path(), &["--json"]);
    assert!(output.status.success());
    let body: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(body["answer"], "Answer.");
    assert_eq!(body["budget"]["usage"]["model_calls"], 2);
    assert_eq!(body["activity"][0]["id"], "call_akritas_rag_prefetch");
    let hits = body["activity"][0]["result"]["output"]["results"].as_array().unwrap();
    assert_eq!(hits[0]["document"], "postgres-connections.md", "the sample runbook is retrieved first");
    assert_eq!(hits[0]["knowledge_base"], "default/runbooks");
    assert!(hits[0]["score"].as_f64().unwrap() > 0.0 && hits[0]["excerpt"].as_str().unwrap().contains("PostgreSQL"));
    assert_eq!(body["activity"][1]["result"]["output"]["gaps"], 1);
    // The bundled VictoriaMetrics MCP adapter of the samples was started and offered to the planner.
    let planner: Value = serde_json::from_str(llm.requests()[0]["messages"][1]["content"].as_str().unwrap()).unwrap();
    let tools: Vec<&str> =
        planner["available_execution_tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(tools.contains(&"mcp.victoriametrics.query") && tools.contains(&"knowledge.search"), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_fails_clearly_when_the_model_fails() {
    let llm = ScriptedLlm::start(vec![Step::from(Reply::Error {
        status: 401,
        body: json!({"error": {"message": "bad key"}}),
    })])
    .await;
    let data = tempfile::tempdir().unwrap();
    let output = ask(&llm, data.path(), &[]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("model server error") && stderr.contains("HTTP 401"), "{stderr}");
}

/// `ask --help` lists what a one-off question uses (model connection, instructions,
/// what the Run reads, its budget), not the host's server settings.
#[test]
fn ask_help_lists_only_the_flags_ask_uses() {
    let output = Command::new(env!("CARGO_BIN_EXE_akritas")).args(["ask", "--help"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in ["--config", "--base-url", "--upstream-model", "--upstream-api-key-env", "--max-tokens", "--json"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    for flag in
        ["--alert-retention", "--audit-retention", "--alert-workers", "--dedup-window", "--address", "--api-key "]
    {
        assert!(!help.contains(flag), "{flag} listed in:\n{help}");
    }
    assert!(help.contains("AKRITAS_"), "{help}");
    // A server-only flag is refused rather than silently ignored.
    let output =
        Command::new(env!("CARGO_BIN_EXE_akritas")).args(["ask", "q", "--alert-workers", "3"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_run_continues_a_run_of_the_same_data_directory() {
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let llm = ScriptedLlm::start_with(move |_, request: &Value| {
        if support::scripted_llm::offers(request, &plan) {
            return plan_step();
        }
        let text = request.to_string();
        let answer = if text.contains("Continue the existing investigation") && text.contains("knowledge.search") {
            "Follow-up: the locks come from the nightly VACUUM FULL."
        } else {
            "Long-running queries hold locks."
        };
        Step::from(Reply::Content(answer.into()))
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let first = ask(&llm, data.path(), &[]);
    let stdout = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let run_id = stdout.lines().find_map(|l| l.strip_prefix("Run: ")).unwrap().to_owned();

    let next = ask(&llm, data.path(), &["--run", &run_id]);
    let (stdout, stderr) = (String::from_utf8_lossy(&next.stdout), String::from_utf8_lossy(&next.stderr));
    assert!(next.status.success(), "{stderr}");
    assert!(stdout.starts_with("Follow-up: the locks come from the nightly VACUUM FULL.\n"), "{stdout}");
    assert!(stdout.contains(&format!("Run: {run_id}")), "the follow-up is recorded on the same Run: {stdout}");
    let journal = std::fs::read_to_string(data.path().join("audit/akritas.jsonl")).unwrap();
    assert!(journal.contains("\"follow_up\""), "the journal records the follow-up");

    // A Run this data directory does not hold, and a value that is no Run id, say what to fix.
    let elsewhere = tempfile::tempdir().unwrap();
    let unknown = ask(&llm, elsewhere.path(), &["--run", &run_id]);
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(!unknown.status.success() && stderr.contains("--data-dir"), "{stderr}");
    let malformed = ask(&llm, data.path(), &["--run", "run-42"]);
    let stderr = String::from_utf8_lossy(&malformed.stderr);
    assert_eq!(malformed.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not a Run id"), "{stderr}");
}
