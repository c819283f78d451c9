//! The audit journal stays replayable and prompt-free under attack: concurrent
//! follow-ups on one Run, a journal with a duplicated event sequence, a user message
//! and plan text carrying a marker, and evidence that names calls the host did not
//! run successfully.

use akritas_testkit as support;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use akritas::audit::AuditLog;
use akritas::engine::conversation::{Speaker, Turn};
use akritas::engine::request::{RunError, RunRequest};
use akritas::investigation::{FindingStatus, InvestigationResult};
use akritas::journal::{Journal, JournalOptions};
use akritas::tools::{ToolName, openai_alias};
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

fn akritas() -> Command {
    Command::new(env!("CARGO_BIN_EXE_akritas"))
}

/// Replays a copy of the journal the way `serve` does at start, and runs `audit verify` on it.
fn replay_copy(path: &Path) -> (Result<AuditLog, String>, std::process::Output) {
    let copy = path.with_extension("copy.jsonl");
    std::fs::copy(path, &copy).unwrap();
    let output = akritas().args(["audit", "verify"]).arg(&copy).output().unwrap();
    (AuditLog::open(&copy).map_err(|e| e.to_string()), output)
}

// ---- 2: concurrent follow-ups -------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_follow_ups_on_one_run_leave_a_replayable_journal() {
    let plan = alias("local.investigation.submit_plan");
    // Every model answer takes a moment, so the follow-ups overlap.
    let llm = ScriptedLlm::start_with(move |_, request| {
        let step = if offers(request, &plan) {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else {
            Step::from(Reply::Content("Nothing to do.".into()))
        };
        step.with_delay(Duration::from_millis(150))
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&data.path().join("audit.jsonl")).unwrap());
    let (tools, _) = host::standard_tools();
    let catalog = akritas::catalog::CatalogStore::new();
    let engine = host::engine(&llm, host::settings(), tools, catalog.clone(), Some(audit.clone()), None);
    let server = host::serve(engine, catalog, ApiKeys::default()).await;
    let client = reqwest::Client::new();

    let body: Value = client
        .post(format!("{}/api/v1/chat", server.url))
        .json(&json!({"messages": [{"role": "user", "content": "Is db-7 fine?"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = body["run_id"].as_str().expect("a Run id").to_string();

    let follow_ups = (0..4).map(|n| {
        let client = client.clone();
        let url = format!("{}/api/v1/runs/{run_id}/chat", server.url);
        async move {
            let response = client.post(url).json(&json!({"message": format!("And now? ({n})")})).send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    });
    let answers = futures_util::future::join_all(follow_ups).await;
    let succeeded = answers.iter().filter(|(status, _)| *status == 200).count();
    assert!(succeeded >= 1, "{answers:?}");
    for (status, body) in &answers {
        match status {
            200 => {}
            409 => {
                assert_eq!(body["error"]["code"], "run_busy", "{body}");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains(&run_id) && message.contains("retry"), "{message}");
            }
            other => panic!("a follow-up answered {other}: {body}"),
        }
    }

    // The journal replays as `serve` would replay it at start, and `audit verify` agrees.
    let (replayed, verify) = replay_copy(audit.path().unwrap());
    let replayed = replayed.expect("the journal replays after concurrent follow-ups");
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stderr));
    let run = replayed.get(&akritas::audit::RunId::parse(&run_id).unwrap()).await.unwrap().unwrap();
    let ends = run.events.iter().filter(|e| e.kind == "follow_up" && e.status.as_deref() == Some("succeeded")).count();
    assert_eq!(ends, succeeded, "every answered follow-up is on the Run");
    let sequences: Vec<u32> = run.events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=run.events.len() as u32).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_events_on_one_run_get_consecutive_sequences_in_journal_order() {
    let dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&dir.path().join("akritas.jsonl")).unwrap());
    let new = akritas::audit::NewRun {
        namespace: "default".into(),
        source: "chat".into(),
        actor: "a".into(),
        model: None,
        catalog_version: 1,
        metadata: Default::default(),
    };
    let id = audit.start(new).await.unwrap();
    let writes = (0..32).map(|n| {
        let (audit, id) = (audit.clone(), id.clone());
        tokio::spawn(async move {
            let event = akritas::audit::NewEvent { kind: format!("note_{n}"), ..Default::default() };
            audit.event(&id, event).await.unwrap()
        })
    });
    let mut sequences: Vec<u32> =
        futures_util::future::join_all(writes).await.into_iter().map(Result::unwrap).collect();
    sequences.sort_unstable();
    assert_eq!(sequences, (1..=32).collect::<Vec<_>>());
    let (replayed, verify) = replay_copy(audit.path().unwrap());
    assert_eq!(replayed.expect("the journal replays").get(&id).await.unwrap().unwrap().events.len(), 32);
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stderr));
}

#[tokio::test]
async fn a_duplicated_event_sequence_fails_audit_verify_like_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("akritas.jsonl");
    let run_id = "run_0123456789abcdef0123456789abcdef";
    {
        let (journal, _) = Journal::open(&path, JournalOptions::default()).unwrap();
        let run = json!({"id": run_id, "namespace": "default", "source": "chat", "actor": "a",
                         "catalog_version": 1, "status": "running"});
        journal.append("run_started", &json!({"run": run})).await.unwrap();
        for _ in 0..2 {
            let event = json!({"sequence": 1, "type": "follow_up", "status": "started"});
            journal.append("run_event", &json!({"run_id": run_id, "event": event})).await.unwrap();
        }
        journal.close().await.unwrap();
    }
    let output = akritas().args(["audit", "verify"]).arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "audit verify accepted a duplicated sequence: {stderr}");
    assert!(stderr.contains("record 3") && stderr.contains("sequence 1"), "{stderr}");
    let error = AuditLog::open(&path).err().expect("start refuses it too").to_string();
    assert!(error.contains("record 3"), "{error}");
}

// ---- 10: no prompts in the audit ----------------------------------------------------------

const MARKER: &str = "zqxmarker4711";

fn echo_retriever() -> host::FixedRetriever {
    host::FixedRetriever {
        output: json!({"results": [{"document": "db.md", "text": "check the database"}]}),
        documents: vec![("db.md".into(), "Database".into())],
        versions: [("ops/runbooks".to_string(), "abc".to_string())].into(),
    }
}

fn question() -> RunRequest {
    RunRequest {
        source: "chat".into(),
        actor: "test".into(),
        turns: vec![Turn { role: Speaker::User, content: format!("Why is db-7 slow? ({MARKER} in the prompt)") }],
        ..RunRequest::default()
    }
}

/// A Run whose model submits `plan` (and, when the host refuses it, the same plan again in
/// its one repair turn), then answers.
async fn run_with_plan(plan: Value) -> (String, Result<akritas::engine::request::RunOutcome, RunError>) {
    let submit = alias("local.investigation.submit_plan");
    let llm = ScriptedLlm::start_with(move |_, request| {
        if offers(request, &submit) {
            return Step::from(Reply::ToolCalls(vec![("p".into(), submit.clone(), plan.clone())]));
        }
        Step::from(Reply::Content("db-7 is busy.".into()))
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&data.path().join("audit.jsonl")).unwrap());
    let (tools, _) = host::standard_tools();
    let catalog = akritas::catalog::CatalogStore::new();
    let engine =
        host::engine(&llm, host::settings(), tools, catalog, Some(audit.clone()), Some(Arc::new(echo_retriever())));
    let outcome = engine.run(question()).await;
    (std::fs::read_to_string(audit.path().unwrap()).unwrap(), outcome)
}

#[tokio::test]
async fn the_prompt_and_plan_text_never_reach_the_journal() {
    let text = |what: &str| format!("{what} {MARKER}");
    let plan = json!({
        "checks": [{"step": text("Read activity"), "tool": "postgres.activity", "arguments": {"host": "db-7"},
                    "reason": text("the alert names db-7")}],
        "gaps": [{"step": text("Read logs"), "capability": format!("logs.{MARKER}"), "reason": text("rule out")}]
    });
    let (journal, outcome) = run_with_plan(plan).await;
    let outcome = outcome.unwrap();
    assert!(outcome.plan_error.is_none(), "{:?}", outcome.plan_error);
    assert!(!journal.contains(MARKER), "the journal holds prompt or plan text:\n{journal}");
    // What the audit keeps instead: the query's hash and length, the plan's validated structure.
    let records: Vec<Value> = journal.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let calls: Vec<&Value> = records
        .iter()
        .filter(|r| r["kind"] == "run_event" && r["data"]["event"]["type"] == "tool_call")
        .map(|r| &r["data"]["event"])
        .collect();
    let search = calls.iter().find(|e| e["metadata"]["tool"] == "knowledge.search").unwrap();
    let query = question().turns[0].content.clone();
    assert_eq!(search["arguments"]["query_chars"], query.chars().count());
    assert_eq!(search["arguments"]["query_sha256"].as_str().unwrap().len(), 64);
    let plan = calls.iter().find(|e| e["metadata"]["tool"] == "local.investigation.submit_plan").unwrap();
    assert_eq!(plan["arguments"]["checks"][0]["tool"], "postgres.activity");
    assert_eq!(plan["arguments"]["checks"][0]["arguments"], json!({"host": "db-7"}));
}

#[tokio::test]
async fn a_rejected_plan_keeps_its_text_out_of_the_journal() {
    let check = json!({"step": format!("Read {MARKER}"), "tool": format!("no.such.{MARKER}"),
                       "arguments": {}, "reason": format!("why {MARKER}")});
    let (journal, outcome) = run_with_plan(json!({"checks": [check], "gaps": []})).await;
    let outcome = outcome.unwrap();
    assert!(outcome.plan_error.is_some(), "the plan is rejected");
    let refused = outcome.activity.iter().filter(|a| a.status == "invalid_arguments").count();
    assert_eq!(refused, 2, "the plan and its repair are both refused");
    assert!(!journal.contains(MARKER), "the journal holds plan text:\n{journal}");
}

// ---- 11: evidence only from successful execution calls with host-assigned ids ---------------

fn result_citing(evidence: &[String]) -> Value {
    json!({
        "finding_status": "suspected", "actionability": "requires_human", "confidence": "low",
        "summary": "db-7 is busy", "impact": "", "evidence": evidence, "ruled_out": [],
        "affected_components": ["db-7"], "recommended_actions": [], "production_writes": 0
    })
}

/// The ids the host gives the calls of [`investigate`]: the plan submission, then `call-<n>` in
/// the order it executes them (planned, failed, adaptive).
const HOST_IDS: [&str; 4] = ["call_akritas_investigation_plan", "call-1", "call-2", "call-3"];

/// The call ids the structuring request offers as evidence.
fn offered_ids(request: &Value) -> Vec<String> {
    let Some(data) = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| serde_json::from_str::<Value>(m["content"].as_str()?).ok())
        .find(|content| content.get("host_owned_evidence").is_some())
    else {
        return Vec::new();
    };
    data["host_owned_evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["call"].as_str())
        .map(str::to_string)
        .collect()
}

/// An investigation: one planned `postgres.activity` check, then the model calls
/// `linux.processes` with invalid arguments (a failed call) and `inventory.host` under
/// its own id `call_zz9`, answers, and cites what `cite` picks from the ids the host
/// reported (planned, failed, adaptive).
async fn investigate(cite: fn(&[String]) -> Vec<String>) -> Result<InvestigationResult, String> {
    let plan = alias("local.investigation.submit_plan");
    let submit = alias("local.investigation.submit_result");
    let offered = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = offered.clone();
    let llm = ScriptedLlm::start_with(move |index, request| {
        if offers(request, &plan) {
            let check = json!({"step": "Read activity", "tool": "postgres.activity", "arguments": {"host": "db-7"},
                               "reason": "the alert names db-7"});
            return Step::from(Reply::ToolCalls(vec![(
                "p".into(),
                plan.clone(),
                json!({"checks": [check], "gaps": []}),
            )]));
        }
        if offers(request, &submit) {
            seen.lock().unwrap().extend(offered_ids(request));
            let ids: Vec<String> = HOST_IDS.iter().map(|id| id.to_string()).collect();
            return Step::from(Reply::ToolCalls(vec![("r".into(), submit.clone(), result_citing(&cite(&ids)))]));
        }
        match index {
            1 => Step::from(Reply::ToolCalls(vec![(
                "bad1".into(),
                alias("linux.processes"),
                json!({"not_a_field": true}),
            )])),
            2 => Step::from(Reply::ToolCalls(vec![(
                "call_zz9".into(),
                alias("inventory.host"),
                json!({"host": "db-7"}),
            )])),
            _ => Step::from(Reply::Content("db-7 is busy.".into())),
        }
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&data.path().join("audit.jsonl")).unwrap());
    let (tools, _) = host::standard_tools();
    let engine = host::engine(&llm, host::settings(), tools, akritas::catalog::CatalogStore::new(), Some(audit), None);
    let request = RunRequest { investigate: true, ..question() };
    match engine.run(request).await {
        Ok(outcome) => {
            let statuses: Vec<&str> = outcome.activity.iter().map(|a| a.status.as_str()).collect();
            assert_eq!(statuses, ["ok", "ok", "invalid_arguments", "ok"], "plan, planned, failed, adaptive");
            let ids: Vec<&str> = outcome.activity.iter().map(|a| a.id.as_str()).collect();
            assert_eq!(ids, HOST_IDS);
            let offered = offered.lock().unwrap().clone();
            assert_eq!(offered[..2], ["call-1", "call-3"], "only successful execution calls are offered as evidence");
            Ok(outcome.investigation.expect("a result"))
        }
        Err(error) => Err(error.to_string()),
    }
}

#[tokio::test]
async fn evidence_may_cite_a_successful_execution_call_by_its_host_id() {
    let result = investigate(|ids| vec![format!("tool-call:{}", ids[1]), format!("tool-call:{}", ids[3])]).await;
    let result = result.expect("successful execution calls are evidence");
    assert_eq!(result.evidence, ["tool-call:call-1", "tool-call:call-3"]);
    assert!(result.refused_evidence.is_empty() && result.status_downgrade.is_none());
}

/// A result citing only `cited` (no successful call): the item is refused with `reason`,
/// recorded, and the status lowered to inconclusive.
async fn assert_refused(cite: fn(&[String]) -> Vec<String>, cited: &str, reason: &str) {
    let result = investigate(cite).await.expect("the Run keeps its result");
    assert!(result.evidence.is_empty(), "{result:?}");
    assert_eq!(result.refused_evidence.len(), 1, "{result:?}");
    assert_eq!(result.refused_evidence[0].item, format!("tool-call:{cited}"));
    assert!(result.refused_evidence[0].reason.contains(reason), "{result:?}");
    assert_eq!(result.finding_status, FindingStatus::Inconclusive, "suspected is lowered: nothing backs it");
    assert_eq!(result.status_downgrade.map(|d| d.from), Some(FindingStatus::Suspected));
}

#[tokio::test]
async fn evidence_naming_a_failed_call_is_refused() {
    assert_refused(|ids| vec![format!("tool-call:{}", ids[2])], "call-2", "names no successful tool call").await;
}

#[tokio::test]
async fn evidence_naming_the_plan_submission_is_refused() {
    let plan = "call_akritas_investigation_plan";
    assert_refused(|ids| vec![format!("tool-call:{}", ids[0])], plan, "names no successful tool call").await;
}

#[tokio::test]
async fn evidence_naming_a_model_chosen_call_id_is_refused() {
    assert_refused(|_| vec!["tool-call:call_zz9".into()], "call_zz9", "names no successful tool call").await;
}

#[tokio::test]
async fn a_journaled_result_citing_a_failed_call_is_refused_at_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("akritas.jsonl");
    let run_id = "run_0123456789abcdef0123456789abcdef";
    {
        let (journal, _) = Journal::open(&path, JournalOptions::default()).unwrap();
        let run = json!({"id": run_id, "namespace": "default", "source": "alert:generic", "actor": "a",
                         "catalog_version": 1, "status": "running"});
        journal.append("run_started", &json!({"run": run})).await.unwrap();
        let event = json!({"sequence": 1, "type": "tool_call", "status": "failed",
                           "metadata": {"tool": "postgres.activity", "call_id": "call-1", "call_kind": "execution"},
                           "arguments": {"host": "db-7"},
                           "result": {"id": "call-1", "name": "postgres.activity",
                                      "error": {"code": "timeout", "message": "timed out"}}});
        journal.append("run_event", &json!({"run_id": run_id, "event": event})).await.unwrap();
        let result = result_citing(&["tool-call:call-1".into()]);
        journal.append("investigation_result", &json!({"run_id": run_id, "result": result})).await.unwrap();
        journal.close().await.unwrap();
    }
    let error = AuditLog::open(&path).err().expect("a result citing a failed call is refused").to_string();
    assert!(error.contains("record 3") && error.contains("tool-call:call-1"), "{error}");
}

#[tokio::test]
async fn a_result_journaled_before_host_assigned_ids_still_replays() {
    // Journals written before calls carried `call_kind` cited the host's old ids; they keep
    // the rule they were accepted under, so an upgrade does not stop `serve` from starting.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("akritas.jsonl");
    let run_id = "run_0123456789abcdef0123456789abcdef";
    {
        let (journal, _) = Journal::open(&path, JournalOptions::default()).unwrap();
        let run = json!({"id": run_id, "source": "alert:generic", "actor": "a", "catalog_version": 1,
                         "status": "running"});
        journal.append("run_started", &json!({"run": run})).await.unwrap();
        let event = json!({"sequence": 1, "type": "tool_call", "status": "succeeded",
                           "metadata": {"tool": "postgres.activity", "call_id": "call_akritas_planned_1"}});
        journal.append("run_event", &json!({"run_id": run_id, "event": event})).await.unwrap();
        let result = result_citing(&["tool-call:call_akritas_planned_1".into()]);
        journal.append("investigation_result", &json!({"run_id": run_id, "result": result})).await.unwrap();
        journal.close().await.unwrap();
    }
    let audit = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let run = audit.get(&akritas::audit::RunId::parse(run_id).unwrap()).await.unwrap().unwrap();
    assert_eq!(run.investigation.unwrap().evidence, ["tool-call:call_akritas_planned_1"]);
}

#[tokio::test]
async fn recording_a_result_the_run_does_not_support_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&dir.path().join("akritas.jsonl")).unwrap();
    let new = akritas::audit::NewRun {
        namespace: "default".into(),
        source: "alert:generic".into(),
        actor: "a".into(),
        model: None,
        catalog_version: 1,
        metadata: Default::default(),
    };
    let id = audit.start(new).await.unwrap();
    let result = akritas::investigation::validate(
        &result_citing(&["tool-call:call-1".into()]).to_string(),
        &akritas::investigation::Evidence::from([("call-1".to_string(), json!({}))]),
    )
    .unwrap();
    let before = std::fs::read(audit.path().unwrap()).unwrap();
    let error = audit.record_investigation(&id, &result).await.expect_err("the Run made no call-1");
    assert!(error.to_string().contains("names no successful tool call"), "{error}");
    assert_eq!(std::fs::read(audit.path().unwrap()).unwrap(), before, "nothing reached the journal");
    let (replayed, _) = replay_copy(audit.path().unwrap());
    assert!(replayed.is_ok());
}

/// A journal whose Run made one succeeded execution call returning `{"restarts": 7}`,
/// then recorded `result` as the Run's structured result (hash chain intact).
async fn journal_with_result(path: &Path, result: Value) {
    let run_id = "run_0123456789abcdef0123456789abcdef";
    let (journal, _) = Journal::open(path, JournalOptions::default()).unwrap();
    let run = json!({"id": run_id, "namespace": "default", "source": "alert:generic", "actor": "a",
                     "catalog_version": 1, "status": "running"});
    journal.append("run_started", &json!({"run": run})).await.unwrap();
    let event = json!({"sequence": 1, "type": "tool_call", "status": "succeeded",
                       "metadata": {"tool": "inventory.host", "call_id": "call-1", "call_kind": "execution"},
                       "arguments": {"host": "db-7"},
                       "result": {"id": "call-1", "name": "inventory.host", "output": {"restarts": 7, "pods": 17}}});
    journal.append("run_event", &json!({"run_id": run_id, "event": event})).await.unwrap();
    journal.append("investigation_result", &json!({"run_id": run_id, "result": result})).await.unwrap();
    journal.close().await.unwrap();
}

#[tokio::test]
async fn a_journaled_result_quoting_a_value_absent_from_the_output_is_refused_at_replay() {
    let evidence = akritas::investigation::Evidence::from([("call-1".to_string(), json!({"restarts": 7, "pods": 17}))]);
    let honest = akritas::investigation::validate(
        &result_citing(&["tool-call:call-1 \"restarts=7\"".into()]).to_string(),
        &evidence,
    )
    .unwrap();
    let recorded = serde_json::to_value(&honest).unwrap();
    assert_eq!(recorded["evidence_coverage"], json!({"claims": 1, "verified": 1, "ratio": 1.0, "backs_status": true}));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("honest.jsonl");
    journal_with_result(&path, recorded.clone()).await;
    let (replayed, verify) = replay_copy(&path);
    let id = akritas::audit::RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap();
    let run = replayed.unwrap().get(&id).await.unwrap();
    assert_eq!(run.unwrap().investigation, Some(honest));
    assert!(verify.status.success(), "{verify:?}");

    // The same record with the quote changed to a value the call never returned (17 is
    // another field's value; 7 would only be its substring).
    let mut forged = recorded;
    forged["evidence"] = json!(["tool-call:call-1 \"restarts=17\""]);
    let path = dir.path().join("forged.jsonl");
    journal_with_result(&path, forged).await;
    let (replayed, verify) = replay_copy(&path);
    let error = replayed.err().expect("the forged quote is refused").to_string();
    assert!(
        error.contains("record 3")
            && error.contains("quotes a value that does not occur in that call's output")
            && error.contains("restarts=17"),
        "{error}"
    );
    assert!(!verify.status.success(), "audit verify refuses it too");
}

#[tokio::test]
async fn a_confirmed_finding_without_a_verified_quote_is_refused_at_replay_unless_written_before_the_rule() {
    let confirmed = |evidence: &[String]| {
        let mut result = result_citing(evidence);
        result["finding_status"] = json!("confirmed");
        result
    };
    let evidence = akritas::investigation::Evidence::from([("call-1".to_string(), json!({"restarts": 7, "pods": 17}))]);
    let refused = akritas::investigation::validate(&confirmed(&["tool-call:call-1".into()]).to_string(), &evidence)
        .expect_err("a cited call without a quoted value does not confirm");
    assert!(refused.to_string().starts_with("finding_status confirmed needs at least one evidence item quoting"));

    // A record this version wrote (`backs_status`) that was edited to drop its quote.
    let dir = tempfile::tempdir().unwrap();
    let mut unbacked = confirmed(&["tool-call:call-1".into()]);
    unbacked["evidence_coverage"] = json!({"claims": 1, "verified": 0, "ratio": 0.0, "backs_status": true});
    let path = dir.path().join("unbacked.jsonl");
    journal_with_result(&path, unbacked.clone()).await;
    let (replayed, verify) = replay_copy(&path);
    let error = replayed.err().expect("the unbacked status is refused").to_string();
    assert!(error.contains("record 3") && error.contains("finding_status confirmed needs"), "{error}");
    assert!(!verify.status.success(), "audit verify refuses it too");

    // The same result recorded by a version before the rule (coverage without
    // `backs_status`, or no coverage at all) replays under the rule it was accepted by.
    for (name, coverage) in
        [("before-rule", Some(json!({"claims": 1, "verified": 0, "ratio": 0.0}))), ("before-coverage", None)]
    {
        let mut old = confirmed(&["tool-call:call-1".into()]);
        match coverage {
            Some(coverage) => old["evidence_coverage"] = coverage,
            None => _ = old.as_object_mut().unwrap().remove("evidence_coverage"),
        }
        let path = dir.path().join(format!("{name}.jsonl"));
        journal_with_result(&path, old).await;
        let (replayed, verify) = replay_copy(&path);
        assert!(replayed.is_ok(), "{name}: {:?}", replayed.err());
        assert!(verify.status.success(), "{name}: {verify:?}");
    }
}
