//! The eval checks of one replay: each expectation of the case yields pass or fail
//! with a reason.

use serde::Serialize;
use serde_json::Value;

use crate::investigation::EVIDENCE_PREFIX;
use crate::replay::ReplayOutcome;
use crate::replay::case::Case;

/// One expectation's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked (`required_tool postgres.activity`).
    pub name: String,
    /// Whether it holds.
    pub pass: bool,
    /// Why not (empty when it holds).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl Check {
    fn new(name: String, pass: bool, reason: impl FnOnce() -> String) -> Check {
        Check { name, pass, reason: if pass { String::new() } else { reason() } }
    }
}

/// The quoted values of the result's evidence (`tool-call:ID "value"` → `value`).
pub fn evidence_quotes(outcome: &ReplayOutcome) -> Vec<String> {
    let Some(result) = &outcome.investigation else { return Vec::new() };
    result
        .evidence
        .iter()
        .filter_map(|item| item.strip_prefix(EVIDENCE_PREFIX))
        .filter_map(|rest| rest.split_once(' '))
        .filter_map(|(_, quoted)| quoted.trim().strip_prefix('"')?.strip_suffix('"').map(str::to_string))
        .collect()
}

/// The evidence coverage the host recorded on the result (items with a verified quote /
/// all items); `None` without a result or without evidence.
pub fn evidence_coverage(outcome: &ReplayOutcome) -> Option<f64> {
    let coverage = outcome.investigation.as_ref()?.evidence_coverage.as_ref()?;
    (coverage.claims > 0).then_some(coverage.ratio)
}

/// Whether `arguments` holds every key of `subset` with the same value.
fn includes(arguments: &Value, subset: &serde_json::Map<String, Value>) -> bool {
    subset.iter().all(|(key, value)| arguments.get(key) == Some(value))
}

/// The recorded outputs (as JSON text) the Run's answered calls read: those of the recorded
/// calls of the same tool whose arguments each answered call carries.
fn outputs_read(case: &Case, outcome: &ReplayOutcome) -> Vec<String> {
    let answered: Vec<_> = outcome.tool_calls.iter().filter(|c| c.recorded && c.status == "ok").collect();
    case.calls
        .iter()
        .filter(|recorded| {
            let arguments = recorded.arguments.as_object();
            answered.iter().any(|c| c.tool == recorded.tool && arguments.is_none_or(|a| includes(&c.arguments, a)))
        })
        .filter_map(|recorded| recorded.output.as_ref().map(Value::to_string))
        .collect()
}

/// Every expectation of the case against the outcome.
pub fn checks(case: &Case, outcome: &ReplayOutcome) -> Vec<Check> {
    let expected = &case.expected;
    let mut out = Vec::new();
    if let Some(status) = &expected.status {
        out.push(Check::new(format!("status {status}"), outcome.status == *status, || {
            format!("the Run {}: {}", outcome.status, outcome.error.as_deref().unwrap_or("no error"))
        }));
    }
    for required in &expected.required_tools {
        let pass = outcome.tool_calls.iter().any(|call| {
            call.tool == required.tool && required.arguments.as_ref().is_none_or(|s| includes(&call.arguments, s))
        });
        out.push(Check::new(format!("required_tool {}", required.tool), pass, || match &required.arguments {
            Some(subset) => {
                format!("no call of {} with arguments including {}", required.tool, Value::from(subset.clone()))
            }
            None => format!("{} was not called", required.tool),
        }));
    }
    for forbidden in &expected.forbidden_tools {
        let calls = outcome.tool_calls.iter().filter(|c| c.tool == *forbidden).count();
        out.push(Check::new(format!("forbidden_tool {forbidden}"), calls == 0, || {
            format!("{forbidden} was called {calls} time(s)")
        }));
    }
    let result = outcome.investigation.as_ref();
    if let Some(status) = expected.finding_status {
        let got = result.map(|r| r.finding_status);
        out.push(Check::new(format!("finding_status {}", name_of(&status)), got == Some(status), || {
            format!("got {}", got.map_or("no structured result".into(), |s| name_of(&s)))
        }));
    }
    if let Some(actionability) = expected.actionability {
        let got = result.map(|r| r.actionability);
        out.push(Check::new(format!("actionability {}", name_of(&actionability)), got == Some(actionability), || {
            format!("got {}", got.map_or("no structured result".into(), |a| name_of(&a)))
        }));
    }
    let quotes = evidence_quotes(outcome);
    let answer = outcome.answer.as_deref().unwrap_or_default();
    let read = outputs_read(case, outcome);
    for fact in &expected.required_facts {
        // The answer counts for a fact the Run read: one it repeats from its guidance (a skill,
        // SYSTEM.md) shows nothing about what the tools returned.
        let answered = answer.contains(fact.as_str()) && read.iter().any(|output| output.contains(fact.as_str()));
        let pass = quotes.iter().any(|q| q.contains(fact.as_str())) || answered;
        out.push(Check::new(format!("required_fact {fact:?}"), pass, || {
            format!(
                "{fact:?} is neither in a verified evidence quote nor in the answer with a tool output that holds it"
            )
        }));
    }
    // The calls the model made through the case's tools, answered or not: the plan's
    // submission, the host's own retrieval and the knowledge tools are the Run's overhead, not
    // the investigation's (the Run's budget still counts them).
    if let Some(max) = expected.max_tool_calls {
        let used = outcome.tool_calls.len();
        out.push(Check::new(format!("max_tool_calls {max}"), used <= max as usize, || {
            format!("{used} calls through the case's tools")
        }));
    }
    let usage = outcome.usage.as_ref();
    if let Some(max) = expected.max_model_tokens {
        let used = usage.map_or(0, |u| u.prompt_tokens + u.output_tokens);
        out.push(Check::new(format!("max_model_tokens {max}"), used <= max, || format!("{used} tokens")));
    }
    out
}

/// The snake_case name of a result enum.
fn name_of(value: &impl Serialize) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::case::Case;

    fn case(expected: &str) -> Case {
        let text = format!(
            "version: 2\nname: c\ninput:\n  messages: [{{role: user, content: why}}]\ntools:\n  - name: postgres.activity\n    \
             description: d\n    read_only: true\n    input_schema: {{type: object, properties: {{host: {{type: string}}}}}}\n\
             calls:\n  - tool: postgres.activity\n    arguments: {{host: db-7}}\n    output: {{wait_event: lock}}\n  \
             - tool: postgres.activity\n    arguments: {{host: db-8}}\n    output: {{state: unread}}\nexpected:\n{expected}"
        );
        Case::parse(&text).unwrap()
    }

    fn outcome(answer: &str, evidence: &[&str]) -> ReplayOutcome {
        let result = serde_json::json!({
            "finding_status": "suspected", "actionability": "requires_human", "confidence": "low",
            "summary": "s", "evidence": evidence, "production_writes": 0,
            "evidence_coverage": {"claims": 2, "verified": 1, "ratio": 0.5},
        });
        ReplayOutcome {
            case: "c".into(),
            model: None,
            model_protocol: None,
            instructions_sha256: None,
            status: "succeeded".into(),
            error: None,
            error_code: None,
            answer: Some(answer.into()),
            tool_calls: vec![crate::replay::run::ReplayedCall {
                tool: "postgres.activity".into(),
                arguments: serde_json::json!({"host": "db-7", "limit": 5}),
                status: "ok".into(),
                recorded: true,
            }],
            unknown_calls: 0,
            skills: Vec::new(),
            investigation: Some(serde_json::from_value(result).unwrap()),
            usage: None,
            protocol: crate::replay::Protocol {
                plan: crate::replay::PlanStep::Accepted,
                plan_refused: None,
                result: Some(crate::replay::ResultStep::Accepted),
            },
            comparison: crate::replay::run::Comparison {
                same_tool_calls: true,
                same_skills: true,
                same_status: true,
                same_investigation: None,
            },
        }
    }

    #[test]
    fn each_expectation_passes_or_fails_with_a_reason() {
        let expected = "  required_tools: [{tool: postgres.activity, arguments: {host: db-7}}, {tool: postgres.activity, arguments: {host: db-8}}]\n  \
                        forbidden_tools: [kubernetes.scale, postgres.activity]\n  finding_status: confirmed\n  actionability: requires_human\n  \
                        required_facts: [\"1820\", \"lock\", \"absent\", \"unread\", \"slow\"]\n";
        // "slow" is in the answer and in no output the Run read; "unread" only in one it did not.
        let outcome = outcome("a slow lock wait, unread", &["tool-call:call-1 \"1820\"", "tool-call:call-2"]);
        let verdicts: Vec<(String, bool, String)> =
            checks(&case(expected), &outcome).into_iter().map(|c| (c.name, c.pass, c.reason)).collect();
        let failed: Vec<&str> = verdicts.iter().filter(|v| !v.1).map(|v| v.0.as_str()).collect();
        assert_eq!(
            failed,
            [
                "required_tool postgres.activity",
                "forbidden_tool postgres.activity",
                "finding_status confirmed",
                "required_fact \"absent\"",
                "required_fact \"unread\"",
                "required_fact \"slow\""
            ]
        );
        assert!(verdicts.iter().any(|v| v.2 == "got suspected"), "{verdicts:?}");
        assert_eq!(verdicts.len(), 11);
        assert_eq!(evidence_coverage(&outcome), Some(0.5));
    }

    #[test]
    fn max_tool_calls_counts_the_calls_through_the_case_tools_not_the_runs_overhead() {
        let expected = "  max_tool_calls: 1\n";
        let mut outcome = outcome("a lock wait", &[]);
        // The plan's submission, the automatic retrieval and a skill read are in the Run's budget.
        outcome.usage = Some(crate::engine::budget::BudgetUsage { tool_calls: 4, ..Default::default() });
        let verdict = |outcome: &ReplayOutcome| {
            let checks = checks(&case(expected), outcome);
            let check = checks.into_iter().find(|c| c.name == "max_tool_calls 1").unwrap();
            (check.pass, check.reason)
        };
        assert_eq!(verdict(&outcome), (true, String::new()));
        // A second call through the case's tools, refused before the tool ran, counts.
        let refused = crate::replay::run::ReplayedCall {
            tool: "postgres.activity".into(),
            arguments: Value::Null,
            status: "invalid_arguments".into(),
            recorded: true,
        };
        outcome.tool_calls.push(refused);
        assert_eq!(verdict(&outcome), (false, "2 calls through the case's tools".to_string()));
    }
}
