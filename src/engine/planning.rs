//! The planning step: one structured request (through the structured-step port) in which
//! the model may only submit the plan, given the authorized read-only tools and their
//! schemas. The host validates the plan strictly and keeps its checks; a rejected plan gets
//! one repair turn, and a missing or still rejected plan is recorded on the Run, not fatal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::knowledge_tools;
use super::plan::{
    self, NamedArguments, PLAN_CALL_ID, PLAN_TOOL, PLANNER_PROMPT, Plan, PlanError, PlanRoom, PlannedCheck,
};
use super::record::CallKind;
use super::skills::SkillEntry;
use super::state::{RunState, Stop};
use super::submit_tool;
use crate::language::language_instruction;
use crate::llm::Message;
use crate::tools::{ArgumentsError, ErrorCode, Registry, ToolError, ToolResult, ToolSpec};

/// Output-token cap of the planning request.
pub const PLANNER_MAX_TOKENS: u32 = 2048;

/// Asks for the plan and returns the checks to execute (none when the plan was
/// missing or rejected; `state.plan_error` then says why). A plan the host refuses gets one
/// repair turn naming the rule it broke, when the budget leaves room for it and for the
/// steps after; each submission is recorded. An argument the Run's `facts` name takes one of
/// their values; without facts, an argument that names a machine takes one the question
/// mentions ([`NamedArguments`]).
pub async fn plan(
    state: &mut RunState<'_>,
    execution: &Registry,
    question: &str,
    retrieved: &Value,
    facts: &BTreeMap<String, String>,
    investigate: bool,
) -> Result<Vec<PlannedCheck>, Stop> {
    let named = match facts.is_empty() {
        true => NamedArguments::from_mentions(question),
        false => NamedArguments::from_facts(facts),
    };
    let ranking = Ranking::new(facts, &state.skills.selected());
    let language = state.params.language.clone();
    let skilled = !state.skills.selected().is_empty();
    let max_checks = state.budget.tool_calls_left().saturating_sub(1) as usize;
    let input = planner_input(
        question,
        retrieved,
        &state.skills.selected(),
        execution,
        (&named, &ranking),
        max_checks,
        &language,
    );
    let mut messages = vec![
        Message::system(format!("{PLANNER_PROMPT}\n\n{}", language_instruction(&language))),
        Message::user(input.to_string()),
    ];
    let max_tokens = state.params.max_tokens.min(PLANNER_MAX_TOKENS);
    for attempt in 1..=MAX_PLAN_ATTEMPTS {
        let max_checks = state.budget.tool_calls_left().saturating_sub(1) as usize;
        let room = PlanRoom::fitting(max_checks, max_tokens, investigate);
        let (mut step, alias) = submit_tool::step(
            PLAN_TOOL,
            "Submit the investigation plan: read-only checks with exact arguments, and capability gaps.",
            plan::plan_schema(&language, &tool_shapes(execution, skilled, (&named, &ranking)), room),
            messages.clone(),
            max_tokens,
        )?;
        step.grammar = Some(plan::plan_grammar(&step.schema, step.max_tokens));
        let response = state.call_structured("plan", step).await?;
        let calls = &response.message.tool_calls;
        let Some(submitted) = submit_tool::sole_submission(calls, &alias) else {
            state.plan_error =
                Some(format!("the model did not submit exactly one plan (it made {} tool calls)", calls.len()));
            return Ok(Vec::new());
        };
        let submitted = submitted.clone();
        let raw_arguments = &submitted.function.arguments;
        state.budget.begin_tool_call(Instant::now())?;
        let started = Instant::now();
        let validated = plan::validate_plan(raw_arguments, max_checks, &|tool, arguments| {
            // A tool the plan was not offered is unknown to it.
            if skilled && is_skill_tool(tool) {
                return Err(ArgumentsError::UnknownTool(tool.to_owned()));
            }
            execution.check_arguments(tool, arguments)?;
            let spec = execution.get(tool);
            spec.map_or(Ok(()), |spec| named.check(&spec.input_schema, arguments).map_err(ArgumentsError::Schema))
        });
        let validated = validated.map(|plan| take_gaps_as_checks(plan, execution, skilled, &named, max_checks));
        let duration = started.elapsed();
        let id = plan_call_id(attempt);
        // The model reads the full rejection; the audit keeps what the host validated.
        let text = plan_call_result(&validated, &id, duration, PlanError::to_string).to_json_string();
        let recorded = plan_call_result(&validated, &id, duration, PlanError::audit_reason);
        let arguments = validated.as_ref().map_or_else(|_| json!({}), recorded_plan);
        state.budget.record_tool_result(text.len())?;
        state.record_call(CallKind::Plan, Some(arguments), recorded).await?;
        let error = match validated {
            Ok(plan) => {
                state.plan_error = None;
                state.gaps = plan.gaps;
                return Ok(plan.checks);
            }
            Err(error) => error,
        };
        if attempt == MAX_PLAN_ATTEMPTS || !room_for_repair(state, investigate) {
            state.plan_error = Some(error.to_string());
            push_refused_plan(state, submitted, id, text);
            return Ok(Vec::new());
        }
        messages.push(Message::assistant(raw_arguments.clone()));
        messages.push(Message::user(format!(
            "The host refused that plan: {error}. Submit the corrected plan; change only what this names."
        )));
    }
    Ok(Vec::new())
}

/// A gap whose capability is an available tool (a small model was seen listing
/// `kubernetes.pod_status` as a step it could not perform, with the pod named by the alert) is
/// a check the model did not know how to write: when the Run's facts fix every argument the
/// tool requires, the host plans it as a check, within the plan's room, once.
fn take_gaps_as_checks(
    mut plan: Plan,
    execution: &Registry,
    skilled: bool,
    named: &NamedArguments,
    max_checks: usize,
) -> Plan {
    let tools = plannable(execution, skilled);
    let mut gaps = Vec::with_capacity(plan.gaps.len());
    for gap in std::mem::take(&mut plan.gaps) {
        let arguments = tools
            .iter()
            .find(|spec| spec.name.as_str() == gap.capability)
            .and_then(|spec| named.complete(&spec.input_schema))
            .filter(|arguments| execution.check_arguments(&gap.capability, arguments).is_ok());
        match arguments {
            Some(arguments)
                if plan.checks.len() < max_checks
                    && !plan.checks.iter().any(|c| c.tool == gap.capability && c.arguments == arguments) =>
            {
                plan.checks.push(PlannedCheck { step: gap.step, tool: gap.capability, arguments, reason: gap.reason });
                plan.gaps_taken_as_checks += 1;
            }
            _ => gaps.push(gap),
        }
    }
    plan.gaps = gaps;
    plan
}

/// Plan submissions a Run may make: the first and one repair.
const MAX_PLAN_ATTEMPTS: usize = 2;

/// The call id of the `attempt`th plan submission (1-based).
fn plan_call_id(attempt: usize) -> String {
    if attempt == 1 { PLAN_CALL_ID.to_string() } else { format!("{PLAN_CALL_ID}_{attempt}") }
}

/// A repair needs a model call and a tool call, and must leave the answer (and, for an
/// investigation, the result) a model call each and the checks a tool call.
fn room_for_repair(state: &RunState<'_>, investigate: bool) -> bool {
    state.budget.model_calls_left() >= 2 + u32::from(investigate) && state.budget.tool_calls_left() >= 2
}

/// A plan the host refused for good stays in the conversation with the reason, so the model
/// does not ask for the same tools again. An accepted plan is not kept: its checks are (as the
/// assistant's calls, `steps::answer`).
fn push_refused_plan(state: &mut RunState<'_>, mut call: crate::llm::ToolCall, id: String, text: String) {
    call.id = id.clone();
    state.history.push(Message::assistant_tool_calls(vec![call]));
    state.history.push(Message::tool(id, text));
}

/// Each execution tool's host name and input schema, with the arguments the facts name bound
/// to their values, for the plan schema.
fn tool_shapes(
    execution: &Registry,
    skilled: bool,
    (named, ranking): (&NamedArguments, &Ranking),
) -> Vec<(String, Value)> {
    let tools = ranking.order(plannable(execution, skilled));
    tools.into_iter().map(|spec| (spec.name.to_string(), named.bind(&spec.input_schema))).collect()
}

/// The order the plan offers its tools in: by how many words their name shares with the alert's
/// name (`postgres.connections` first for `PostgresTooManyConnections`), then those the selected
/// skills name, in the order they first name them, then the rest by name. A small model takes the
/// first fitting tool it is shown: measured with Qwen2.5-Coder-1.5B, the alphabetical order
/// made it plan `postgres.activity` for every PostgreSQL alert, connections ones included.
#[derive(Debug, Default)]
struct Ranking {
    alert_words: Vec<String>,
    guidance: String,
}

impl Ranking {
    fn new(facts: &BTreeMap<String, String>, skills: &[SkillEntry]) -> Self {
        let alert_words = facts.get("alertname").map(|name| words(name)).unwrap_or_default();
        let guidance = skills.iter().map(|s| s.content.as_ref()).collect::<Vec<_>>().join("\n");
        Self { alert_words, guidance }
    }

    fn order<'r>(&self, mut tools: Vec<&'r ToolSpec>) -> Vec<&'r ToolSpec> {
        tools.sort_by_cached_key(|spec| {
            let name = spec.name.as_str();
            let shared = words(name).iter().filter(|w| self.alert_words.iter().any(|a| alike(w, a))).count();
            let named_at = self.guidance.find(name).unwrap_or(usize::MAX);
            (std::cmp::Reverse(shared), named_at, name.to_string())
        });
        tools
    }
}

/// The lowercase words of a name, split at non-alphanumerics and lower-to-upper case changes
/// (`KubePodCrashLooping` → kube, pod, crash, looping); words of three letters or more.
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        let split = !c.is_ascii_alphanumeric() || (c.is_ascii_uppercase() && previous_lower);
        if split && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if c.is_ascii_alphanumeric() {
            word.push(c.to_ascii_lowercase());
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
    }
    if !word.is_empty() {
        out.push(word);
    }
    out.retain(|w| w.len() >= 3);
    out
}

/// The same word, or one a plural or a longer form of the other (`connection`, `connections`).
fn alike(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.len() >= 4 && long.starts_with(short) && long.len() - short.len() <= 2 || a == b
}

/// The tools a plan may use: every execution tool, but the skill tools only while the Run has
/// no skill (`skilled` false). A plan is the checks that gather evidence, and a skill is
/// guidance, never evidence: once the host selected skills, a plan that spent its checks
/// loading them (measured: Qwen2.5-Coder-1.5B planned nothing but `knowledge.load_skill` of the
/// skill it had been given) would gather nothing. They stay callable after the plan.
fn plannable(execution: &Registry, skilled: bool) -> Vec<&ToolSpec> {
    let mut tools = execution.definitions();
    tools.retain(|spec| !(skilled && is_skill_tool(spec.name.as_str())));
    tools
}

fn is_skill_tool(name: &str) -> bool {
    [knowledge_tools::LIST_SKILLS, knowledge_tools::LOAD_SKILL].contains(&name)
}

/// The plan as the audit records it: the host-validated structure only (each
/// check's number, tool and schema-checked arguments, and how many gaps), never
/// the model's step, reason or gap text.
fn recorded_plan(plan: &Plan) -> Value {
    let checks: Vec<Value> = plan
        .checks
        .iter()
        .enumerate()
        .map(|(i, check)| json!({"check": i + 1, "tool": check.tool, "arguments": check.arguments}))
        .collect();
    json!({"checks": checks, "gaps": plan.gaps.len()})
}

/// What the planner is given: the request, the retrieved runbooks, the selected
/// skills, the execution tools with their schemas, and the bounds.
fn planner_input(
    question: &str,
    retrieved: &Value,
    selected: &[SkillEntry],
    execution: &Registry,
    (named, ranking): (&NamedArguments, &Ranking),
    max_checks: usize,
    language: &str,
) -> Value {
    let tools: Vec<Value> = ranking
        .order(plannable(execution, !selected.is_empty()))
        .into_iter()
        .map(|spec| json!({"name": spec.name.as_str(), "description": spec.description, "input_schema": named.bind(&spec.input_schema)}))
        .collect();
    let skills: Vec<Value> = selected
        .iter()
        .map(|s| json!({"name": s.name, "source": s.source, "instructions": super::verdicts::prose(&s.content)}))
        .collect();
    json!({
        "request": question,
        "knowledge_search_result": retrieved,
        "selected_operational_skills": skills,
        "available_execution_tools": tools,
        "maximum_execution_checks": max_checks,
        "response_language": language,
    })
}

/// The plan call's result: its size when accepted, the reason (as `reason` words
/// it) when rejected (invalid arguments).
fn plan_call_result(
    validated: &Result<Plan, PlanError>,
    id: &str,
    duration: Duration,
    reason: fn(&PlanError) -> String,
) -> ToolResult {
    let (output, error) = match validated {
        Ok(plan) => {
            let mut output = json!({"checks": plan.checks.len(), "gaps": plan.gaps.len()});
            if !plan.set_aside.is_empty() {
                output["set_aside_as_redundant"] = json!(plan.set_aside);
            }
            if plan.gaps_taken_as_checks > 0 {
                output["gaps_taken_as_checks"] = json!(plan.gaps_taken_as_checks);
            }
            (Some(output), None)
        }
        Err(error) => (None, Some(ToolError { code: ErrorCode::InvalidArguments, message: reason(error) })),
    };
    ToolResult { id: id.into(), name: PLAN_TOOL.into(), output, error, duration }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::engine::plan::CapabilityGap;

    #[test]
    fn the_planner_sees_tools_with_schemas_skills_and_bounds() {
        let schema = json!({"type": "object", "properties": {"host": {"type": "string"}}});
        let tools = submit_tool::registry("inventory.host", "Find a host.", schema.clone()).unwrap();
        let skill = SkillEntry::fixture("postgres", "check autovacuum");
        let retrieved = json!({"output": {"results": []}});
        let input = planner_input(
            "why is db-7 slow?",
            &retrieved,
            &[skill],
            &tools,
            (&NamedArguments::default(), &Ranking::default()),
            3,
            "de",
        );
        assert_eq!(input["request"], "why is db-7 slow?");
        assert_eq!(input["knowledge_search_result"], retrieved);
        assert_eq!(
            input["available_execution_tools"],
            json!([{"name": "inventory.host", "description": "Find a host.", "input_schema": schema}])
        );
        assert_eq!(
            input["selected_operational_skills"],
            json!([{"name": "postgres", "source": "Skill/ops/postgres", "instructions": "check autovacuum"}])
        );
        assert_eq!(input["maximum_execution_checks"], 3);
        assert_eq!(input["response_language"], "de");
    }

    #[test]
    fn a_run_with_skills_plans_without_the_skill_tools() {
        let skill = SkillEntry::fixture("postgres", "check autovacuum");
        let catalog = std::sync::Arc::new(std::collections::BTreeMap::from([("postgres".to_string(), skill.clone())]));
        let mut builder = crate::tools::RegistryBuilder::new(crate::tools::ToolLimits::default());
        knowledge_tools::register(&mut builder, catalog, Default::default()).unwrap();
        let tools = builder.build();
        let names = |input: Value| -> Vec<String> {
            input["available_execution_tools"].as_array().unwrap().iter().map(|t| t["name"].to_string()).collect()
        };
        let unskilled = names(planner_input(
            "q",
            &Value::Null,
            &[],
            &tools,
            (&NamedArguments::default(), &Ranking::default()),
            3,
            "en",
        ));
        assert_eq!(unskilled.len(), 2, "{unskilled:?}");
        assert!(
            names(planner_input(
                "q",
                &Value::Null,
                &[skill],
                &tools,
                (&NamedArguments::default(), &Ranking::default()),
                3,
                "en"
            ))
            .is_empty()
        );
        let shapes: Vec<String> = tool_shapes(&tools, true, (&NamedArguments::default(), &Ranking::default()))
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert!(shapes.is_empty(), "{shapes:?}");
        assert_eq!(tool_shapes(&tools, false, (&NamedArguments::default(), &Ranking::default())).len(), 2);
    }

    #[test]
    fn an_accepted_plan_is_recorded_by_its_size() {
        let gap = CapabilityGap { step: "logs".into(), capability: "kubernetes.pods.logs".into(), reason: "r".into() };
        let plan = Plan { checks: Vec::new(), gaps: vec![gap], ..Plan::default() };
        let result = plan_call_result(&Ok(plan), PLAN_CALL_ID, Duration::from_millis(1), PlanError::to_string);
        assert_eq!((result.id.as_str(), result.name.as_str()), (PLAN_CALL_ID, PLAN_TOOL));
        assert_eq!(result.output, Some(json!({"checks": 0, "gaps": 1})));
        assert!(result.error.is_none());
    }

    #[test]
    fn a_rejected_plan_is_a_failed_call_with_the_reason() {
        let rejected = plan::validate_plan("[]", 3, &|_: &str, _: &Value| Ok::<(), String>(()));
        let reason = rejected.as_ref().unwrap_err().to_string();
        let result = plan_call_result(&rejected, PLAN_CALL_ID, Duration::ZERO, PlanError::to_string);
        let error = result.error.expect("an error");
        assert_eq!(error.code, ErrorCode::InvalidArguments);
        assert_eq!(error.message, reason);
        assert!(reason.starts_with("plan is not valid: "), "{reason}");
        assert_eq!(result.output, None);
    }

    #[test]
    fn the_recorded_plan_is_its_validated_structure_without_model_text() {
        let arguments = json!({"checks": [{"step": "s-marker", "tool": "inventory.host", "arguments": {"host": "db-7"},
                                          "reason": "r-marker"}],
                               "gaps": [{"step": "g-marker", "capability": "logs.marker", "reason": "x-marker"}]});
        let plan = plan::validate_plan(&arguments.to_string(), 3, &|_: &str, _: &Value| Ok::<(), String>(())).unwrap();
        assert_eq!(
            recorded_plan(&plan),
            json!({"checks": [{"check": 1, "tool": "inventory.host", "arguments": {"host": "db-7"}}], "gaps": 1})
        );
    }

    #[test]
    fn a_gap_naming_a_tool_the_facts_fix_becomes_a_check() {
        let schema = json!({"type": "object", "properties": {"namespace": {"type": "string"}, "pod": {"type": "string"}},
                            "required": ["namespace", "pod"]});
        let tools = submit_tool::registry("kubernetes.pod_status", "Pod status.", schema).unwrap();
        let gap =
            |capability: &str| CapabilityGap { step: "s".into(), capability: capability.into(), reason: "r".into() };
        let plan = || Plan { gaps: vec![gap("kubernetes.pod_status"), gap("kubernetes.pods.logs")], ..Plan::default() };
        let facts = std::collections::BTreeMap::from([
            ("namespace".to_string(), "shop".to_string()),
            ("pod".to_string(), "cart-7d9f".to_string()),
        ]);
        let named = NamedArguments::from_facts(&facts);

        let taken = take_gaps_as_checks(plan(), &tools, false, &named, 3);
        assert_eq!(taken.checks.len(), 1);
        assert_eq!(taken.checks[0].tool, "kubernetes.pod_status");
        assert_eq!(taken.checks[0].arguments, json!({"namespace": "shop", "pod": "cart-7d9f"}));
        assert_eq!(taken.gaps, vec![gap("kubernetes.pods.logs")], "a gap no tool performs stays");
        assert_eq!(taken.gaps_taken_as_checks, 1);
        let result = plan_call_result(&Ok(taken), PLAN_CALL_ID, Duration::ZERO, PlanError::to_string);
        assert_eq!(result.output.unwrap()["gaps_taken_as_checks"], 1);

        assert_eq!(take_gaps_as_checks(plan(), &tools, false, &named, 0).checks.len(), 0, "no room");
        assert_eq!(take_gaps_as_checks(plan(), &tools, false, &NamedArguments::default(), 3).gaps.len(), 2, "no facts");
    }

    #[test]
    fn tools_the_alert_or_its_skills_name_are_offered_first() {
        assert_eq!(words("PostgresTooManyConnections"), ["postgres", "too", "many", "connections"]);
        assert_eq!(words("postgres.connections"), ["postgres", "connections"]);
        assert_eq!(words("KubeNodeDiskPressure"), ["kube", "node", "disk", "pressure"]);
        let mut builder = crate::tools::RegistryBuilder::new(crate::tools::ToolLimits::default());
        for name in ["postgres.activity", "postgres.connections", "postgres.waits", "linux.disk_usage"] {
            let spec = ToolSpec::new(
                crate::tools::ToolName::try_from(name).unwrap(),
                "d",
                crate::resources::mcp_adapter::Permission::Read,
                json!({"type": "object", "properties": {}}),
            );
            let handler: std::sync::Arc<dyn crate::tools::ToolHandler> =
                std::sync::Arc::new(|_: Value| -> crate::tools::ToolFuture {
                    Box::pin(async { Ok("{}".to_string()) })
                });
            builder.register(spec, handler).unwrap();
        }
        let tools = builder.build();
        let order = |alert: &str, skill: &str| -> Vec<String> {
            let facts = BTreeMap::from([("alertname".to_string(), alert.to_string())]);
            let ranking = Ranking::new(&facts, &[SkillEntry::fixture("s", skill)]);
            tool_shapes(&tools, false, (&NamedArguments::default(), &ranking)).into_iter().map(|(n, _)| n).collect()
        };
        assert_eq!(
            order("PostgresTooManyConnections", "Use `postgres.waits`."),
            ["postgres.connections", "postgres.waits", "postgres.activity", "linux.disk_usage"]
        );
        assert_eq!(
            order("HighCPU", "Use `postgres.waits`, then `linux.disk_usage`."),
            ["postgres.waits", "linux.disk_usage", "postgres.activity", "postgres.connections"]
        );
    }
}
