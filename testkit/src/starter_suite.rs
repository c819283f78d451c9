//! The brain that plays the starter suite `evals/starter` (and copies of its cases).
//!
//! It tests the harness, not intelligence: it finds the case by its question, plans exactly
//! the case's recorded calls, answers `[eval case NAME] N checks read.`, and submits the finding
//! status and actionability the case expects, citing the required facts it finds in the
//! recorded outputs as evidence quotes (which the host then verifies). A case whose name starts
//! with `no-result-` answers the result request with prose instead. Every answer is an
//! [`Answer`], so the suite runs under any [`Personality`](crate::personality::Personality) and
//! any structured-step mode.

use std::path::{Path, PathBuf};

use akritas::replay::Case;
use akritas::tools::{ToolName, openai_alias};
use serde_json::{Value, json};

use crate::brain::{Answer, structured_target, tool_results, user_data};

/// `evals/starter`.
pub fn dir() -> PathBuf {
    crate::root().join("evals/starter")
}

/// The cases of a directory, in file order.
pub fn load(dir: &Path) -> Vec<Case> {
    akritas::eval::load_dir(dir).expect("the cases load").into_iter().map(|(_, case)| case).collect()
}

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).expect("a valid tool name"))
}

/// `text` as it appears inside a JSON string.
fn escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted[1..quoted.len() - 1].to_string()
}

/// The case a request is about: its question (planning, answering; possibly escaped once more
/// inside a JSON user message or a flattened tool exchange) or its name (structuring).
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

/// The brain of the starter suite over `cases`.
pub fn brain(cases: Vec<Case>) -> impl Fn(&Value) -> Answer + Send + Sync + 'static {
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    move |request| {
        let Some(case) = case_of(&cases, &request.to_string()) else {
            return Answer::Text("no case matches this request".into());
        };
        let target = structured_target(request);
        if target.as_ref() == Some(&plan) {
            let checks: Vec<Value> = case
                .calls
                .iter()
                .map(|c| json!({"step": c.tool, "tool": c.tool, "arguments": c.arguments, "reason": "recorded"}))
                .collect();
            return Answer::Structured { alias: plan.clone(), arguments: json!({"checks": checks, "gaps": []}) };
        }
        if target.as_ref() == Some(&submit) {
            if case.name.starts_with("no-result-") {
                return Answer::Text("no result this time".into());
            }
            return Answer::Structured { alias: submit.clone(), arguments: result(case, request) };
        }
        Answer::Text(format!("[eval case {}] {} checks read.", case.name, tool_results(request)))
    }
}

/// The expected finding, citing each offered call with the values the host lists for it that
/// hold a required fact (or its first value when none does).
fn result(case: &Case, request: &Value) -> Value {
    let offered = user_data(request, "host_owned_evidence").unwrap_or_default();
    let mut evidence = Vec::new();
    for item in offered["host_owned_evidence"].as_array().into_iter().flatten() {
        let call = item["call"].as_str().unwrap_or_default();
        let values: Vec<&str> = item["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let quoted: Vec<Value> = values
            .iter()
            .filter(|v| case.expected.required_facts.iter().any(|f| v.contains(f.as_str())))
            .map(|v| json!({"call": call, "value": v}))
            .collect();
        match (quoted.is_empty(), values.first()) {
            (false, _) => evidence.extend(quoted),
            (true, Some(first)) => evidence.push(json!({"call": call, "value": first})),
            (true, None) => {}
        }
    }
    json!({
        "finding_status": case.expected.finding_status,
        "actionability": case.expected.actionability,
        "confidence": "medium",
        "summary": format!("{}: see the evidence", case.name),
        "hypothesis": "",
        "impact": "",
        "evidence": evidence,
        "ruled_out": [],
        "affected_components": [],
        "recommended_actions": [],
        "production_writes": 0,
    })
}
