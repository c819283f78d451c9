//! Export and replay: a finished Run exported through
//! `GET /api/v1/runs/{id}/export` replays on the same scripted model with the same
//! tool calls and answer, tools answered from the recording (the real tools are not
//! called again); a changed SKILL.md changes the plan, the extra call is answered
//! "not found", as a real tool with no data would, and counted, and both the case
//! and the outcome name the skill version that ran. The export is case version 2
//! with every tool read-only. Another tenant's key cannot export the Run.

use akritas_testkit as support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use akritas::audit::AuditLog;
use akritas::catalog::directory::DirectorySource;
use akritas::catalog::status::StatusBoard;
use akritas::catalog::{CatalogStore, merge};
use akritas::config::ApiKeyRef;
use akritas::llm::{LlmClient, LlmConfig};
use akritas::replay::{Case, CaseError, SkillSource, replay};
use akritas::tools::{ToolName, openai_alias};
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use sha2::Digest;
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};

const QUESTION: &str = "service: postgresql - why is db-7 slow?";
const SKILL: &str = "Check database activity before anything else.";
const CHANGED_SKILL: &str = "Check database activity, then CHECK-PROCESSES: read the top processes too.";
const OPS_KEY: &str = "ops-key-for-replay-0001";
const OTHER_KEY: &str = "other-tenant-key-00002";

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

fn sha256(text: &str) -> String {
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// A deterministic model: it plans the inventory and database checks (and the
/// processes when a skill says CHECK-PROCESSES), then answers from the tool results.
fn model(_: usize, request: &Value) -> Step {
    if offers(request, &alias("local.investigation.submit_plan")) {
        let check = |tool: &str| json!({"step": tool, "tool": tool, "arguments": {"host": "db-7"}, "reason": "db-7"});
        let mut checks = vec![check("inventory.host"), check("postgres.activity")];
        if request.to_string().contains("CHECK-PROCESSES") {
            checks.push(check("linux.processes"));
        }
        let plan = json!({"checks": checks, "gaps": []});
        return Step::from(Reply::ToolCalls(vec![("p".into(), alias("local.investigation.submit_plan"), plan)]));
    }
    let results: Vec<&str> = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    let long_query = results.iter().any(|r| r.contains("1820"));
    let unanswered = results.iter().filter(|r| r.contains("not found: no data: linux.processes")).count();
    let answer = format!("db-7: {} tool results, {unanswered} not found; long query seen: {long_query}", results.len());
    Step::from(Reply::Content(answer))
}

fn write_skill(dir: &Path, content: &str) {
    std::fs::create_dir_all(dir.join("postgresql")).unwrap();
    let text = format!("---\ndescription: PostgreSQL triage\nmatch:\n  - postgresql\n---\n{content}\n");
    std::fs::write(dir.join("postgresql/SKILL.md"), text).unwrap();
}

fn keys() -> ApiKeys {
    let parse = |text: &str| -> ApiKeyRef {
        let flags = akritas::config::ServeFlags { api_keys: vec![text.to_string()], ..Default::default() };
        akritas::config::load(&flags, &|_| None).unwrap().api_keys.remove(0)
    };
    let refs = [parse("ops=KEY_OPS:chat@default"), parse("other=KEY_OTHER:chat@team-b")];
    let lookup = |env: &str| match env {
        "KEY_OPS" => Some(OPS_KEY.to_string()),
        "KEY_OTHER" => Some(OTHER_KEY.to_string()),
        _ => None,
    };
    ApiKeys::from_env(&refs, &lookup).unwrap()
}

fn client(llm: &ScriptedLlm) -> LlmClient {
    let config = LlmConfig {
        system_instructions: Some(Arc::from(host::system_instructions())),
        ..LlmConfig::new(llm.url.clone())
    };
    LlmClient::new(config, reqwest::Client::new()).unwrap()
}

async fn get(url: &str, key: &str) -> (u16, String) {
    let response = reqwest::Client::new().get(url).bearer_auth(key).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn an_exported_run_replays_with_the_same_calls_and_a_changed_skill_changes_the_plan() {
    let llm = ScriptedLlm::start_with(model).await;
    let dir = tempfile::tempdir().unwrap();
    let skills_dir = dir.path().join("skills");
    write_skill(&skills_dir, SKILL);
    let catalog = CatalogStore::new();
    let reload = DirectorySource::new(Vec::new(), Some(skills_dir)).reload();
    merge::apply(reload, &catalog, &StatusBoard::default());
    let audit = Arc::new(AuditLog::open(&dir.path().join("audit.jsonl")).unwrap());
    let (tools, counters) = host::standard_tools();
    let engine = host::engine(&llm, host::settings(), tools, catalog.clone(), Some(audit), None);
    let server = host::serve(engine, catalog, keys()).await;

    // The original Run, over the API.
    let chat = json!({"messages": [{"role": "user", "content": QUESTION}]});
    let response = reqwest::Client::new()
        .post(format!("{}/api/v1/chat", server.url))
        .bearer_auth(OPS_KEY)
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let run_id = answer["run_id"].as_str().unwrap().to_string();
    assert!(answer["answer"].as_str().unwrap().ends_with("0 not found; long query seen: true"), "{answer}");
    let real_calls = (counters.inventory.load(Ordering::SeqCst), counters.postgres.load(Ordering::SeqCst));
    assert_eq!(real_calls, (1, 1));

    // Export: another tenant's key does not see the Run; the owner gets the case.
    let export_url = format!("{}/api/v1/runs/{run_id}/export", server.url);
    assert_eq!(get(&export_url, OTHER_KEY).await.0, 404, "another namespace's Run does not exist for this key");
    let (status, text) = get(&export_url, OPS_KEY).await;
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("why is db-7 slow"), "the export holds no prompt: the audit keeps only its hash");
    let journal = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(!journal.contains("why is db-7 slow"), "the audit journal holds no prompt");
    let mut case = Case::parse(&text).unwrap();
    let origin = case.origin.clone().unwrap();
    assert_eq!(origin.run_id, run_id);
    assert_eq!(origin.instructions_sha256, Some(sha256(&host::system_instructions())));
    let recorded: Vec<(String, Value)> = case.calls.iter().map(|c| (c.tool.clone(), c.arguments.clone())).collect();
    assert_eq!(
        recorded,
        [
            ("inventory.host".to_string(), json!({"host": "db-7"})),
            ("postgres.activity".to_string(), json!({"host": "db-7"}))
        ]
    );
    assert_eq!(case.calls[1].output, Some(json!({"active": 3, "longest_query_seconds": 1820, "waiting": 0})));
    let tool_names: Vec<&str> = case.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tool_names, ["inventory.host", "linux.processes", "postgres.activity"], "read-only tools only");
    let exported: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(exported["version"], 2, "{exported}");
    assert!(exported["tools"].as_array().unwrap().iter().all(|t| t["read_only"] == true), "{exported}");
    assert_eq!(case.skills[0].sha256, sha256(SKILL));
    assert_eq!(case.expected.skills.len(), 1);
    assert_eq!(
        (case.expected.skills[0].name.as_str(), &case.expected.skills[0].sha256),
        ("postgresql", &sha256(SKILL))
    );
    assert_eq!(case.expected.status.as_deref(), Some("succeeded"));

    // The input must be supplied, and must be what the Run was asked.
    let no_input = replay(&case, client(&llm), host::settings(), &SkillSource::Case).await.unwrap_err();
    assert!(no_input.to_string().contains("--question"), "{no_input}");
    let wrong = case.supply_input("why is db-8 slow?", Default::default()).unwrap_err();
    assert!(matches!(wrong, CaseError::InputMismatch { .. }), "{wrong}");
    case.supply_input(QUESTION, Default::default()).unwrap();

    // Same model, same skills: the same calls, answered from the recording, and the same answer.
    let same = replay(&case, client(&llm), host::settings(), &SkillSource::Case).await.unwrap();
    assert_eq!(same.status, "succeeded", "{:?}", same.error);
    assert_eq!(same.answer.as_deref(), answer["answer"].as_str());
    let replayed: Vec<(String, Value)> =
        same.tool_calls.iter().map(|c| (c.tool.clone(), c.arguments.clone())).collect();
    assert_eq!(replayed, recorded);
    assert!(same.tool_calls.iter().all(|c| c.recorded && c.status == "ok"));
    assert_eq!(same.unknown_calls, 0);
    assert!(same.comparison.same_tool_calls && same.comparison.same_skills && same.comparison.same_status);
    assert_eq!(same.skills, case.expected.skills);
    assert_eq!(same.instructions_sha256, origin.instructions_sha256);
    let after = (counters.inventory.load(Ordering::SeqCst), counters.postgres.load(Ordering::SeqCst));
    assert_eq!(after, real_calls, "a replay never calls the real tools");

    // A changed SKILL.md: the plan adds a check nobody recorded.
    let changed_dir = dir.path().join("changed-skills");
    write_skill(&changed_dir, CHANGED_SKILL);
    let changed = replay(&case, client(&llm), host::settings(), &SkillSource::Directory(changed_dir)).await.unwrap();
    assert_eq!(changed.status, "succeeded", "{:?}", changed.error);
    let plan: Vec<(&str, bool)> = changed.tool_calls.iter().map(|c| (c.tool.as_str(), c.recorded)).collect();
    assert_eq!(plan, [("inventory.host", true), ("postgres.activity", true), ("linux.processes", false)]);
    assert_eq!(changed.unknown_calls, 1);
    assert_eq!(changed.tool_calls[2].status, "tool_error");
    assert!(!changed.comparison.same_tool_calls && !changed.comparison.same_skills);
    assert_eq!(changed.skills[0].sha256, sha256(CHANGED_SKILL), "the outcome names the skill version that ran");
    assert_eq!(counters.processes.load(Ordering::SeqCst), 0, "the unrecorded call reached no real tool");
    assert!(changed.answer.unwrap().ends_with("1 not found; long query seen: true"));

    // The same round trip through the CLI: `run export` (HTTP client, question checked
    // against the hash) then `run replay` on the same model.
    let akritas = env!("CARGO_BIN_EXE_akritas");
    let cli = |args: &[&str]| {
        let mut command = tokio::process::Command::new(akritas);
        command.args(args).env("REPLAY_TEST_KEY", OPS_KEY).env_remove("AKRITAS_API_KEY").kill_on_drop(true);
        command
    };
    let case_file = dir.path().join("case.json");
    let common = ["run", "export", &run_id, "--url", &server.url, "--api-key-env", "REPLAY_TEST_KEY"];
    let wrong = cli(&[&common[..], &["--question", "why is db-8 slow?"]].concat()).output().await.unwrap();
    assert!(!wrong.status.success(), "a question that is not the Run's is refused");
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("hash"), "{}", String::from_utf8_lossy(&wrong.stderr));
    let exported = cli(&[&common[..], &["--question", QUESTION, "-o", case_file.to_str().unwrap()]].concat())
        .output()
        .await
        .unwrap();
    assert!(exported.status.success(), "{}", String::from_utf8_lossy(&exported.stderr));
    let instructions = support::root().join("instructions/SYSTEM.md");
    let replayed = cli(&[
        "run",
        "replay",
        case_file.to_str().unwrap(),
        "--json",
        "--base-url",
        &llm.url,
        "--upstream-model",
        "scripted-model",
        "--system-instructions",
        instructions.to_str().unwrap(),
    ])
    .output()
    .await
    .unwrap();
    assert!(replayed.status.success(), "{}", String::from_utf8_lossy(&replayed.stderr));
    let outcome: Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(outcome["unknown_calls"], 0, "{outcome}");
    assert_eq!(outcome["comparison"]["same_tool_calls"], true, "{outcome}");
    assert_eq!(outcome["answer"], answer["answer"], "{outcome}");
}

#[tokio::test]
async fn a_namespace_that_keeps_inputs_exports_its_runs_ready_to_replay_with_secrets_redacted() {
    let llm = ScriptedLlm::start_with(model).await;
    let dir = tempfile::tempdir().unwrap();
    let catalog = CatalogStore::new();
    let audit = Arc::new(AuditLog::open(&dir.path().join("audit.jsonl")).unwrap());
    let (tools, _) = host::standard_tools();
    let settings = akritas::engine::request::EngineSettings {
        keep_input_namespaces: ["default".to_string()].into(),
        ..host::settings()
    };
    let engine = host::engine(&llm, settings, tools, catalog.clone(), Some(audit), None);
    let server = host::serve(engine, catalog, keys()).await;
    let chat = |key: &'static str, question: &'static str| {
        let url = format!("{}/api/v1/chat", server.url);
        async move {
            let body = json!({"messages": [{"role": "user", "content": question}]});
            let response = reqwest::Client::new().post(url).bearer_auth(key).json(&body).send().await.unwrap();
            assert_eq!(response.status(), 200);
            let answer: Value = response.json().await.unwrap();
            (answer["run_id"].as_str().unwrap().to_string(), answer["answer"].as_str().unwrap().to_string())
        }
    };
    let export = |run_id: String, key: &'static str| {
        let url = format!("{}/api/v1/runs/{run_id}/export", server.url);
        async move {
            let (status, text) = get(&url, key).await;
            assert_eq!(status, 200, "{text}");
            Case::parse(&text).unwrap()
        }
    };

    // `default` keeps its inputs: the export needs no question, and replays as recorded.
    let (run_id, answer) = chat(OPS_KEY, QUESTION).await;
    let case = export(run_id, OPS_KEY).await;
    let messages: Vec<(&str, &str)> =
        case.input.messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
    assert_eq!(messages, [("user", QUESTION)]);
    assert!(!case.input.redacted);
    let replayed = replay(&case, client(&llm), host::settings(), &SkillSource::Case).await.unwrap();
    assert_eq!((replayed.status.as_str(), replayed.answer.as_deref()), ("succeeded", Some(answer.as_str())));
    assert!(replayed.comparison.same_tool_calls, "{:?}", replayed.tool_calls);

    // A credential in the question is redacted before it is kept: the journal never holds it,
    // and the case says its input no longer hashes to the recorded value.
    let (run_id, _) = chat(OPS_KEY, "db-7 is slow since I set password: hunter2-db7 on it, why?").await;
    let mut case = export(run_id, OPS_KEY).await;
    assert_eq!(case.input.messages[0].content, "db-7 is slow since I set password: [redacted] on it, why?");
    assert!(case.input.redacted);
    let journal = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(journal.contains(QUESTION), "the kept input is in the journal");
    assert!(!journal.contains("hunter2-db7"), "a credential in a question never reaches the journal");
    let redacted = replay(&case, client(&llm), host::settings(), &SkillSource::Case).await.unwrap();
    assert_eq!(redacted.status, "succeeded", "{:?}", redacted.error);
    case.supply_input("db-7 is slow since I set password: hunter2-db7 on it, why?", Default::default()).unwrap();
    assert!(!case.input.redacted, "the original supplied replaces what was kept");

    // Another namespace keeps only the hash.
    let (run_id, _) = chat(OTHER_KEY, "why is db-9 slow?").await;
    let case = export(run_id, OTHER_KEY).await;
    assert!(case.input.messages.is_empty() && case.input.sha256.is_some(), "{:?}", case.input);
    let journal = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(!journal.contains("why is db-9 slow"));
}
