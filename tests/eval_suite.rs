//! `akritas eval` (issue 18) on the starter suite `evals/starter`, against a scripted
//! OpenAI-compatible model: the real binary replays every case (tools answered from
//! its recording), prints the table and the totals, writes the JSON results and
//! exits 0; a directory with a deliberately broken case (a required tool no plan
//! calls), run with `--repeat 2`, fails `--min-pass 1.0` and names the case in each repeat;
//! a case whose Run fails (no result submitted) still reports the calls and tokens it spent.
//!
//! The scripted model tests the harness, not intelligence: it finds the case by its
//! question, plans exactly the case's recorded calls, and submits the finding status
//! and actionability the case expects, citing the required facts it finds in the
//! recorded outputs as evidence quotes (which the host then verifies).

use akritas_testkit as support;

use std::path::{Path, PathBuf};

use akritas::replay::Case;
use akritas::tools::{ToolName, openai_alias};
use serde_json::{Value, json};
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

fn starter() -> PathBuf {
    support::root().join("evals/starter")
}

/// The question of a case as it appears inside a JSON request body.
fn escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap();
    quoted[1..quoted.len() - 1].to_string()
}

/// The case a request is about: its question (planning, answering) or its name (structuring).
fn case_of<'a>(cases: &'a [Case], request: &str) -> Option<&'a Case> {
    let question = |c: &Case| c.input.messages[0].content.clone();
    let found = |c: &Case| {
        let q = question(c);
        request.contains(&q) || request.contains(&escaped(&q)) || request.contains(&escaped(&escaped(&q)))
    };
    cases
        .iter()
        .filter(|c| found(c) || request.contains(&format!("[eval case {}]", c.name)))
        .max_by_key(|c| question(c).len())
}

fn responder(cases: Vec<Case>) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    move |_, request| {
        let text = request.to_string();
        let Some(case) = case_of(&cases, &text) else {
            return Step::from(Reply::Content("no case matches this request".into()));
        };
        if offers(request, &plan) {
            let checks: Vec<Value> = case
                .calls
                .iter()
                .map(|c| json!({"step": c.tool, "tool": c.tool, "arguments": c.arguments, "reason": "recorded"}))
                .collect();
            return Step::from(Reply::ToolCalls(vec![(
                "p".into(),
                plan.clone(),
                json!({"checks": checks, "gaps": []}),
            )]));
        }
        if offers(request, &submit) && case.name.starts_with("no-result-") {
            return Step::from(Reply::Content("no result this time".into()));
        }
        if offers(request, &submit) {
            let user = request["messages"].as_array().and_then(|m| m.last()).and_then(|m| m["content"].as_str());
            let offered: Value = user.and_then(|u| serde_json::from_str(u).ok()).unwrap_or_default();
            let mut evidence = Vec::new();
            for item in offered["host_owned_evidence"].as_array().into_iter().flatten() {
                let (reference, tool) = (item["reference"].as_str().unwrap(), item["tool"].as_str().unwrap());
                let output = case.calls.iter().find(|c| c.tool == tool).and_then(|c| c.output.clone());
                let output = output.map(|o| o.to_string()).unwrap_or_default();
                let quoted: Vec<String> = case
                    .expected
                    .required_facts
                    .iter()
                    .filter(|f| output.contains(f.as_str()))
                    .map(|f| format!("{reference} \"{f}\""))
                    .collect();
                if quoted.is_empty() {
                    evidence.push(reference.to_string());
                }
                evidence.extend(quoted);
            }
            let result = json!({
                "finding_status": case.expected.finding_status.unwrap(),
                "actionability": case.expected.actionability.unwrap(),
                "confidence": "medium",
                "summary": format!("{}: see the evidence", case.name),
                "evidence": evidence,
                "production_writes": 0,
            });
            return Step::from(Reply::ToolCalls(vec![("r".into(), submit.clone(), result)]));
        }
        let results = request["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "tool").count();
        Step::from(Reply::Content(format!("[eval case {}] {results} checks read.", case.name)))
    }
}

fn load(dir: &Path) -> Vec<Case> {
    akritas::eval::load_dir(dir).unwrap().into_iter().map(|(_, case)| case).collect()
}

async fn eval(llm: &ScriptedLlm, dir: &Path, output: &Path, extra: &[&str]) -> std::process::Output {
    let instructions = support::root().join("instructions/SYSTEM.md");
    tokio::process::Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["eval", dir.to_str().unwrap(), "--base-url", &llm.url, "--upstream-model", "scripted-model"])
        .args(["--system-instructions", instructions.to_str().unwrap(), "--concurrency", "4"])
        .args(["--output", output.to_str().unwrap()])
        .args(extra)
        .env_remove("AKRITAS_API_KEY")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_starter_suite_passes_and_a_broken_case_fails_the_threshold() {
    let cases = load(&starter());
    assert!(cases.len() >= 20, "the starter suite has {} cases", cases.len());
    assert!(cases.iter().all(|c| c.description.is_some()), "every case says what it is about");

    // A broken case: a copy of the first case that requires a tool no plan calls.
    let dir = tempfile::tempdir().unwrap();
    let broken_dir = dir.path().join("broken");
    std::fs::create_dir(&broken_dir).unwrap();
    let mut broken = cases[0].clone();
    broken.name = "broken-requires-unrecorded-tool".into();
    broken.input.messages[0].content.push_str(" (broken copy)");
    broken.expected.required_tools.push(serde_json::from_value(json!({"tool": "kubernetes.logs"})).unwrap());
    std::fs::write(broken_dir.join("broken.json"), serde_json::to_string(&broken).unwrap()).unwrap();
    std::fs::write(broken_dir.join("good.json"), serde_json::to_string(&cases[1]).unwrap()).unwrap();
    let mut no_result = cases[4].clone();
    no_result.name = "no-result-submitted".into();
    no_result.input.messages[0].content.push_str(" (no result)");
    std::fs::write(broken_dir.join("no-result.json"), serde_json::to_string(&no_result).unwrap()).unwrap();

    let mut all = cases.clone();
    all.push(broken);
    all.push(no_result.clone());
    let llm = ScriptedLlm::start_with(responder(all)).await;
    // A server with several models: without --upstream-model the first would answer.
    llm.set_models(vec!["first-listed-model".into(), "scripted-model".into()]);
    llm.set_recording(true);

    let results = dir.path().join("results.json");
    let run = eval(&llm, &starter(), &results, &[]).await;
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    println!("{stdout}");
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let header = stdout.lines().next().unwrap();
    for column in
        ["case", "pass", "protocol", "status", "tools", "unknown", "coverage", "tokens", "calls", "ms", "mode", "model"]
    {
        assert!(header.contains(column), "{header}");
    }
    let rows: Vec<&str> = stdout.lines().skip(1).take(cases.len()).collect();
    assert!(rows.iter().all(|row| row.ends_with("  scripted-model")), "each case line names its model:\n{stdout}");
    assert_eq!(rows.len(), cases.len());
    let requests = llm.requests();
    assert!(
        !requests.is_empty() && requests.iter().all(|r| r["model"] == "scripted-model"),
        "--upstream-model is asked for"
    );
    llm.set_recording(false);
    assert!(
        stdout.contains(&format!(
            "TOTAL {} cases, {} runs: pass rate 100.0%, protocol completion 100.0%",
            cases.len(),
            cases.len()
        )),
        "{stdout}"
    );
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(json["totals"]["pass_rate"], 1.0, "{json}");
    assert_eq!(json["totals"]["protocol_completion"], 1.0, "{json}");
    for attempt in json["cases"].as_array().unwrap().iter().map(|c| &c["attempts"][0]) {
        assert_eq!(attempt["protocol"], json!({"plan": "accepted", "result": "accepted"}), "{attempt}");
        assert_eq!(attempt["model_protocol"], "tool_call", "the scripted model answers forced calls: {attempt}");
    }
    assert_eq!(json["cases"].as_array().unwrap().len(), cases.len());
    assert!(json["totals"]["model_calls"].as_u64().unwrap() >= 3 * cases.len() as u64, "{json}");
    assert!(json["totals"]["evidence_coverage"].as_f64().unwrap() > 0.5, "{json}");
    let injection = json["cases"].as_array().unwrap().iter().find(|c| c["case"] == "injection-scale-to-zero").unwrap();
    let checks = injection["attempts"][0]["checks"].as_array().unwrap();
    assert!(checks.iter().any(|c| c["name"] == "forbidden_tool kubernetes.scale" && c["pass"] == true), "{injection}");

    let broken_results = dir.path().join("broken.json");
    let run = eval(&llm, &broken_dir, &broken_results, &["--repeat", "2"]).await;
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    println!("{stdout}");
    assert_eq!(run.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("TOTAL 3 cases, 6 runs: pass rate 33.3%, protocol completion 66.7%"), "{stdout}");
    for repeat in [1, 2] {
        assert!(
            stdout.contains(&format!(
                "FAIL broken-requires-unrecorded-tool (run {repeat}): required_tool kubernetes.logs: kubernetes.logs was not called"
            )),
            "{stdout}"
        );
    }
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&broken_results).unwrap()).unwrap();
    let attempts: Vec<usize> =
        json["cases"].as_array().unwrap().iter().map(|c| c["attempts"].as_array().unwrap().len()).collect();
    assert_eq!(attempts, [2, 2, 2], "--repeat 2 runs each case twice: {json}");
    assert!(stderr.contains("pass rate 33.3% is under --min-pass 100.0%"), "{stderr}");
    // A Run that failed still counts what it spent: its tool calls, tokens and model calls.
    let failed = json["cases"].as_array().unwrap().iter().find(|c| c["case"] == "no-result-submitted").unwrap();
    for attempt in failed["attempts"].as_array().unwrap() {
        assert_eq!(attempt["status"], "failed", "{attempt}");
        assert!(attempt["error"].as_str().unwrap().contains("did not submit exactly one result"), "{attempt}");
        assert_eq!(attempt["tool_calls"], no_result.calls.len(), "{attempt}");
        assert!(attempt["tokens"].as_u64().unwrap() > 0, "{attempt}");
        assert!(attempt["model_calls"].as_u64().unwrap() >= 3, "{attempt}");
        assert_eq!(attempt["model"], "scripted-model", "a failed Run still names its model: {attempt}");
        // Prose instead of the result: the plan ran, but no result reached validation.
        assert_eq!(attempt["protocol"], json!({"plan": "accepted", "result": "unparsed"}), "{attempt}");
        assert_eq!(attempt["protocol_complete"], false, "{attempt}");
    }
}

#[tokio::test]
async fn bad_arguments_and_bad_cases_say_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let akritas = |args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_akritas"));
        command.arg("eval").args(args).kill_on_drop(true);
        command
    };
    let path = dir.path().to_str().unwrap();
    for (args, message) in [
        (vec![path, "--repeat", "0"], "--repeat must be 1 to 100"),
        (vec![path, "--concurrency", "64"], "--concurrency must be 1 to 32"),
        (vec![path, "--min-pass", "1.5"], "--min-pass must be between 0.0 and 1.0"),
        (vec![path], "holds no case files"),
    ] {
        let out = akritas(&args).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    std::fs::write(dir.path().join("typo.yaml"), "version: 1\nname: x\ninput: {}\nexpected: {required_tool: []}\n")
        .unwrap();
    let out = akritas(&[path]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("typo.yaml: the case does not parse") && stderr.contains("required_tool"), "{stderr}");
}
