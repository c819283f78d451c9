//! The forced planning step: the plan tool's schema, the planner prompt, and the
//! strict validation of the plan the model submits. Pure functions over values.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

mod named;
mod room;

pub use named::NamedArguments;
pub(crate) use room::plan_grammar;

/// Host name of the plan tool.
pub const PLAN_TOOL: &str = "local.investigation.submit_plan";
/// Call id the host gives the plan call.
pub const PLAN_CALL_ID: &str = "call_akritas_investigation_plan";
/// Most checks plus gaps in one plan.
pub const MAX_PLAN_ITEMS: usize = 16;
/// Longest text field in a plan, in characters.
pub const MAX_FIELD_CHARS: usize = 240;

/// A check the host will execute.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedCheck {
    /// What the step establishes.
    pub step: String,
    /// Host tool name.
    pub tool: String,
    /// Exact arguments.
    pub arguments: Value,
    /// The model's reason for the check (trimmed, at most [`MAX_FIELD_CHARS`] characters).
    pub reason: String,
}

/// A step no authorized tool can perform.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CapabilityGap {
    /// The step.
    pub step: String,
    /// Dot-separated capability id, for example `kubernetes.pods.logs`.
    pub capability: String,
    /// Why it matters.
    pub reason: String,
}

/// A validated plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Plan {
    /// Checks, in order.
    pub checks: Vec<PlannedCheck>,
    /// Unavailable capabilities.
    pub gaps: Vec<CapabilityGap>,
    /// Items the host left out as redundant rather than refusing the plan for them.
    pub set_aside: SetAside,
    /// Gaps that named an available tool whose arguments the Run's facts fix, planned as
    /// checks by the host ([`NamedArguments::complete`]).
    pub gaps_taken_as_checks: usize,
}

/// Redundant plan items, left out: nothing in them could change what the host executes.
/// Weak models repeat themselves (measured: SmolLM2-135M under a grammar wrote a step as both
/// a check and a gap in 9 of 22 plans, and a check twice in 5), and refusing a whole plan for
/// a repetition cost the Run its checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SetAside {
    /// Checks with the same tool and the same arguments as an earlier one (it would run twice).
    pub duplicate_checks: usize,
    /// Gaps with the same step and capability as an earlier one.
    pub duplicate_gaps: usize,
    /// Gaps whose step is also a check's: the check performs it.
    pub gaps_with_a_check: usize,
}

impl SetAside {
    /// Whether nothing was left out.
    pub fn is_empty(&self) -> bool {
        *self == SetAside::default()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    checks: Vec<RawCheck>,
    gaps: Vec<RawGap>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    step: String,
    tool: String,
    arguments: Value,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGap {
    step: String,
    capability: String,
    reason: String,
}

/// How many checks and gaps the plan schema admits. The host's validation allows more
/// ([`MAX_PLAN_ITEMS`]); the schema is what a grammar-constrained server lets the model write,
/// so it never admits a plan longer than the completion budget can hold (a weak model under a
/// grammar fills arrays to their bound, and a plan cut off at `max_tokens` is no plan).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanRoom {
    /// At least this many checks (1 for an investigation with tools: it cannot cite evidence
    /// without one).
    pub min_checks: usize,
    /// At most this many checks.
    pub max_checks: usize,
    /// At most this many gaps.
    pub max_gaps: usize,
}

/// Output tokens counted for one plan item (a short step and reason, a tool name and its
/// arguments; an item at every bound takes about twice as many).
pub const TOKENS_PER_PLAN_ITEM: u32 = 100;
/// Gaps the schema admits whatever the checks take.
const MIN_GAPS_ROOM: usize = 2;

impl PlanRoom {
    /// The room for a Run that may make `max_checks` checks, answering within `max_tokens`:
    /// as many items as fit (at least two), checks first, then gaps (at least two).
    pub fn fitting(max_checks: usize, max_tokens: u32, investigate: bool) -> Self {
        let items = usize::try_from(max_tokens / TOKENS_PER_PLAN_ITEM).unwrap_or(usize::MAX).clamp(2, MAX_PLAN_ITEMS);
        let max_checks = max_checks.min(items);
        let max_gaps = items.saturating_sub(max_checks).max(MIN_GAPS_ROOM);
        Self { min_checks: usize::from(investigate && max_checks > 0), max_checks, max_gaps }
    }

    /// Room for `max_checks` checks and every gap the host accepts.
    pub fn unbounded(max_checks: usize) -> Self {
        Self { min_checks: 0, max_checks: max_checks.min(MAX_PLAN_ITEMS), max_gaps: MAX_PLAN_ITEMS }
    }
}

/// A capability id as the schema asks for it: lower-case words joined by dots (the host's
/// validation also takes upper case, `_` and `-`).
pub const CAPABILITY_PATTERN: &str = "^[a-z0-9]+([._-][a-z0-9]+)*$";

/// The plan tool's input schema; `language` is the response language tag.
/// `tools` are the execution tools (host name, input schema): a check names one
/// of them (an `enum`, one branch per tool with that tool's argument schema), so
/// a server that turns the schema into a grammar cannot produce an unknown tool
/// or an open-ended object. The lists are bounded by `room`; without tools there are
/// no checks.
pub fn plan_schema(language: &str, tools: &[(String, Value)], room: PlanRoom) -> Value {
    let text = |what: &str| {
        json!({"type": "string", "minLength": 1, "maxLength": MAX_FIELD_CHARS,
               "description": format!("{what} Write it in the language of BCP 47 tag \"{language}\".")})
    };
    let check = |tool: &str, arguments: Value| {
        json!({
            "type": "object",
            "additionalProperties": false,
            // The tool first: a model that names a tool in a text field before choosing one
            // (measured with Qwen2.5-Coder-1.5B) then often chooses another.
            "required": ["tool", "arguments", "step", "reason"],
            "properties": {
                "tool": {"type": "string", "enum": [tool], "description": "Exact name of one of the available execution tools."},
                "arguments": arguments,
                "step": text("What this check establishes."),
                "reason": text("Why this check matters."),
            }
        })
    };
    let branches: Vec<Value> = tools.iter().map(|(name, schema)| check(name, closed(schema, 0))).collect();
    let items = match branches.len() {
        0 => check("none", json!({"type": "object", "properties": {}, "additionalProperties": false})),
        1 => branches.into_iter().next().unwrap_or_default(),
        _ => json!({"anyOf": branches}),
    };
    let (min_checks, max_checks) = if tools.is_empty() {
        (0, 0)
    } else {
        (room.min_checks.min(room.max_checks), room.max_checks.min(MAX_PLAN_ITEMS))
    };
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["checks", "gaps"],
        "properties": {
            "checks": {
                "type": "array",
                "minItems": min_checks,
                "maxItems": max_checks,
                "description": "Read-only checks the host will run, in order, with exact arguments.",
                "items": items,
            },
            "gaps": {
                "type": "array",
                "maxItems": room.max_gaps.min(MAX_PLAN_ITEMS),
                "description": "Steps no available tool can perform.",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["step", "capability", "reason"],
                    "properties": {
                        "step": text("The step that cannot be performed."),
                        "capability": {"type": "string", "minLength": 1, "maxLength": MAX_FIELD_CHARS, "pattern": CAPABILITY_PATTERN, "description": "Dot-separated capability id, for example kubernetes.pods.logs."},
                        "reason": text("Why the step matters."),
                    }
                }
            }
        }
    })
}

/// System prompt of the planning request.
pub const PLANNER_PROMPT: &str = "You plan a read-only investigation for the Akritas host. \
Plan only over the available execution tools listed in the request; runbooks and skills are guidance, never capabilities. \
Call the submit tool exactly once. Every step that an available read-only tool can perform becomes a check with exact \
arguments that satisfy the tool's input schema. Use knowledge tools only when the inventory does not settle which skill \
applies. Steps no available tool can perform go to gaps with a dot-separated, API-style capability id. Never plan writes, \
restarts, deletions or shell access. Respect maximum_execution_checks. When no investigation is needed, submit empty arrays.";

/// Where in a plan a rule was broken: `checks[2]`, `gaps[0]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    /// `checks` or `gaps`.
    pub list: &'static str,
    /// Index in that list.
    pub index: usize,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.list, self.index)
    }
}

/// Why a submitted plan was rejected; each message names the item and the rule.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The arguments are not JSON.
    #[error("plan is not valid JSON: {0}")]
    Json(serde_json::Error),
    /// The JSON does not have the plan's shape.
    #[error("plan is not valid: {0}")]
    Shape(serde_json::Error),
    /// Over [`MAX_PLAN_ITEMS`] checks and gaps.
    #[error("plan has {0} checks and gaps; at most {MAX_PLAN_ITEMS} are allowed")]
    TooManyItems(usize),
    /// More checks than the Run's budget leaves.
    #[error("plan has {checks} checks; this Run allows at most {max}")]
    TooManyChecks {
        /// Checks planned.
        checks: usize,
        /// Checks allowed.
        max: usize,
    },
    /// A blank text field.
    #[error("{at}.{field}: must not be empty")]
    EmptyField {
        /// The plan item whose field is blank (`checks[1]`, `gaps[0]`).
        at: At,
        /// The blank field: `step`, `tool`, `reason` or `capability`.
        field: &'static str,
    },
    /// A text field over [`MAX_FIELD_CHARS`].
    #[error("{at}.{field}: {chars} characters; at most {MAX_FIELD_CHARS} are allowed")]
    FieldTooLong {
        /// The plan item holding the long field (`checks[1]`, `gaps[0]`).
        at: At,
        /// The field over the limit: `step`, `tool`, `reason` or `capability`.
        field: &'static str,
        /// Characters it has.
        chars: usize,
    },
    /// A check's tool is not a tool name at all.
    #[error("{at}.tool: {tool:?} is not a valid tool name")]
    InvalidToolName {
        /// The check whose `tool` is malformed (`checks[2]`).
        at: At,
        /// The name.
        tool: String,
    },
    /// A check's arguments are not an object.
    #[error("{at}.arguments: must be a JSON object")]
    ArgumentsNotObject {
        /// The check whose `arguments` are a string, a list or another non-object value.
        at: At,
    },
    /// The tool is not in this Run's catalog, or the arguments do not fit its schema.
    #[error("{at}: {reason}")]
    Unavailable {
        /// The check that failed; the audit records it without `reason`, which may quote the model.
        at: At,
        /// What the tool catalog said.
        reason: String,
    },
    /// An argument is a template's placeholder (`<host>`, `{{namespace}}`, `${pod}`), copied
    /// from guidance instead of the value it stands for.
    #[error(
        "{at}.arguments.{argument}: {value:?} is a placeholder, not a value; write the real {argument} \
         the request or the alert names, or list the check as a gap when they name none"
    )]
    Placeholder {
        /// The check whose argument is a placeholder (`checks[0]`).
        at: At,
        /// The argument (a property the tool's schema declares).
        argument: String,
        /// What the model wrote.
        value: String,
    },
    /// A gap's capability is not a dot-separated id.
    #[error("{at}.capability: {capability:?} is not a dot-separated capability id")]
    InvalidCapability {
        /// The gap whose `capability` is malformed (`gaps[1]`).
        at: At,
        /// The capability.
        capability: String,
    },
}

impl PlanError {
    /// The rejection without any text the model wrote (tool names, steps, reasons,
    /// capabilities, or a schema error quoting them): what the audit records.
    pub fn audit_reason(&self) -> String {
        match self {
            PlanError::Json(_) => "plan is not valid JSON".into(),
            PlanError::Shape(_) => "plan does not match the plan schema".into(),
            PlanError::InvalidToolName { at, .. } => format!("{at}.tool: not a valid tool name"),
            PlanError::Unavailable { at, .. } => {
                format!("{at}: the tool is not available to this Run or the arguments do not match its schema")
            }
            PlanError::InvalidCapability { at, .. } => format!("{at}.capability: not a dot-separated capability id"),
            PlanError::Placeholder { at, .. } => format!("{at}.arguments: a placeholder in place of a value"),
            PlanError::TooManyItems(_)
            | PlanError::TooManyChecks { .. }
            | PlanError::EmptyField { .. }
            | PlanError::FieldTooLong { .. }
            | PlanError::ArgumentsNotObject { .. } => self.to_string(),
        }
    }
}

/// Longest string argument in the plan schema's grammar, in characters.
pub const MAX_ARGUMENT_CHARS: usize = 512;
/// Longest array argument in the plan schema's grammar.
pub const MAX_ARGUMENT_ITEMS: usize = 32;
/// Nesting of a tool's argument schema kept in the plan schema; deeper values are left open.
const MAX_ARGUMENT_DEPTH: usize = 6;

/// A tool's input schema closed for a grammar: objects allow only their declared
/// properties (none when they declare none), strings and arrays get a maximum
/// length, nested schemas the same. The host still checks the arguments against
/// the tool's own schema.
fn closed(schema: &Value, depth: usize) -> Value {
    let Value::Object(map) = schema else { return schema.clone() };
    let mut out = map.clone();
    if depth >= MAX_ARGUMENT_DEPTH {
        return Value::Object(out);
    }
    let kinds: Vec<&str> = match map.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if kinds.contains(&"object") || map.contains_key("properties") {
        match out.get_mut("properties") {
            Some(Value::Object(properties)) if !properties.is_empty() => {
                for property in properties.values_mut() {
                    *property = closed(property, depth + 1);
                }
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            _ => {
                out.insert("properties".into(), json!({}));
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
        }
    }
    if kinds.contains(&"string") && !map.contains_key("enum") && !map.contains_key("const") {
        out.entry("maxLength").or_insert(json!(MAX_ARGUMENT_CHARS));
    }
    if kinds.contains(&"array") {
        out.entry("maxItems").or_insert(json!(MAX_ARGUMENT_ITEMS));
        if let Some(items) = out.get_mut("items") {
            *items = closed(items, depth + 1);
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(options)) = out.get_mut(key) {
            for option in options {
                *option = closed(option, depth + 1);
            }
        }
    }
    Value::Object(out)
}

/// Validates the plan tool's raw arguments. `check_tool(tool, arguments)` says
/// whether the tool is in this Run's execution catalog and the arguments satisfy its
/// schema.
pub fn validate_plan<E: std::fmt::Display>(
    arguments: &str,
    max_checks: usize,
    check_tool: &dyn Fn(&str, &Value) -> Result<(), E>,
) -> Result<Plan, PlanError> {
    let value: Value = serde_json::from_str(arguments).map_err(PlanError::Json)?;
    let raw: RawPlan = serde_json::from_value(value).map_err(PlanError::Shape)?;
    if raw.checks.len() + raw.gaps.len() > MAX_PLAN_ITEMS {
        return Err(PlanError::TooManyItems(raw.checks.len() + raw.gaps.len()));
    }
    let mut plan = Plan::default();
    let mut seen_checks = BTreeSet::new();
    for (index, check) in raw.checks.into_iter().enumerate() {
        let at = At { list: "checks", index };
        let step = text_field(&check.step, at, "step")?;
        let tool = text_field(&check.tool, at, "tool")?;
        let reason = text_field(&check.reason, at, "reason")?;
        if !is_tool_name(&tool) {
            return Err(PlanError::InvalidToolName { at, tool });
        }
        if !check.arguments.is_object() {
            return Err(PlanError::ArgumentsNotObject { at });
        }
        check_tool(&tool, &check.arguments).map_err(|e| PlanError::Unavailable { at, reason: e.to_string() })?;
        if let Some((argument, value)) = placeholder(&check.arguments) {
            return Err(PlanError::Placeholder { at, argument, value });
        }
        // serde_json's maps are sorted (no `preserve_order`), so equal arguments serialize alike.
        if !seen_checks.insert((tool.to_lowercase(), check.arguments.to_string())) {
            plan.set_aside.duplicate_checks += 1;
            continue;
        }
        plan.checks.push(PlannedCheck { step, tool, arguments: check.arguments, reason });
    }
    if plan.checks.len() > max_checks {
        return Err(PlanError::TooManyChecks { checks: plan.checks.len(), max: max_checks });
    }
    let check_steps: BTreeSet<String> = plan.checks.iter().map(|c| c.step.to_lowercase()).collect();
    let mut seen_gaps = BTreeSet::new();
    for (index, gap) in raw.gaps.into_iter().enumerate() {
        let at = At { list: "gaps", index };
        let step = text_field(&gap.step, at, "step")?;
        let capability = text_field(&gap.capability, at, "capability")?;
        let reason = text_field(&gap.reason, at, "reason")?;
        if !is_tool_name(&capability) {
            return Err(PlanError::InvalidCapability { at, capability });
        }
        if check_steps.contains(&step.to_lowercase()) {
            plan.set_aside.gaps_with_a_check += 1;
            continue;
        }
        if !seen_gaps.insert((step.to_lowercase(), capability.to_lowercase())) {
            plan.set_aside.duplicate_gaps += 1;
            continue;
        }
        plan.gaps.push(CapabilityGap { step, capability, reason });
    }
    Ok(plan)
}

/// The first top-level argument whose whole value is a placeholder: `<host>`, `{{ns}}`,
/// `${pod}`, `{pod}` (one to 64 characters of letters, digits, `_.-` and spaces inside). A query
/// that contains braces (`up{job="x"}`) is not one.
fn placeholder(arguments: &Value) -> Option<(String, String)> {
    let inner = |text: &str, open: &str, close: &str| {
        let inside = text.strip_prefix(open)?.strip_suffix(close)?.trim();
        let word = |c: char| c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | ' ');
        ((1..=64).contains(&inside.chars().count()) && inside.chars().all(word)).then_some(())
    };
    arguments.as_object()?.iter().find_map(|(key, value)| {
        let text = value.as_str()?.trim();
        let shaped =
            [("<", ">"), ("{{", "}}"), ("${", "}"), ("{", "}")].iter().any(|(o, c)| inner(text, o, c).is_some());
        shaped.then(|| (key.clone(), text.to_string()))
    })
}

fn text_field(value: &str, at: At, field: &'static str) -> Result<String, PlanError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(PlanError::EmptyField { at, field });
    }
    let chars = trimmed.chars().count();
    if chars > MAX_FIELD_CHARS {
        return Err(PlanError::FieldTooLong { at, field, chars });
    }
    Ok(trimmed.to_string())
}

fn is_tool_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= 128
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(tool: &str, arguments: &Value) -> Result<(), String> {
        match tool {
            "inventory.host" if arguments.get("host").is_some_and(Value::is_string) => Ok(()),
            "inventory.host" => Err("arguments do not match the schema of inventory.host: \"host\" is required".into()),
            other => Err(format!("{other:?} is not an available execution tool")),
        }
    }

    fn check(step: &str, tool: &str) -> Value {
        json!({"step": step, "tool": tool, "arguments": {"host": "db1"}, "reason": "r"})
    }

    fn validate(plan: Value, max: usize) -> Result<Plan, String> {
        validate_plan(&plan.to_string(), max, &known).map_err(|e| e.to_string())
    }

    #[test]
    fn redundant_items_are_set_aside_not_refused() {
        let gap = |step: &str, capability: &str| json!({"step": step, "capability": capability, "reason": "r"});
        let plan = validate(
            json!({"checks": [check("A", "inventory.host"), check("b", "inventory.host"), other_host_check()],
                   "gaps": [gap("a", "c.d"), gap("s", "c.d"), gap("S", "C.D"), gap("t", "c.d")]}),
            2,
        )
        .unwrap();
        // The same tool and arguments run once; the same step with other arguments is another check.
        let hosts: Vec<&Value> = plan.checks.iter().map(|c| &c.arguments["host"]).collect();
        assert_eq!(hosts, [&json!("db1"), &json!("db2")]);
        let steps: Vec<&str> = plan.gaps.iter().map(|g| g.step.as_str()).collect();
        assert_eq!(steps, ["s", "t"], "a checked step is no gap; a gap repeated counts once");
        assert_eq!(plan.set_aside, SetAside { duplicate_checks: 1, duplicate_gaps: 1, gaps_with_a_check: 1 });
        // The bound on checks counts the checks that run.
        assert_eq!(
            validate(json!({"checks": [check("a", "inventory.host"), other_host_check()], "gaps": []}), 1).unwrap_err(),
            "plan has 2 checks; this Run allows at most 1"
        );
    }

    fn four_hosts() -> Vec<Value> {
        let check =
            |host: &str| json!({"step": host, "tool": "inventory.host", "arguments": {"host": host}, "reason": "r"});
        ["db1", "db2", "db3", "db4"].map(check).to_vec()
    }

    fn other_host_check() -> Value {
        json!({"step": "b", "tool": "inventory.host", "arguments": {"host": "db2"}, "reason": "r"})
    }

    #[test]
    fn accepts_a_valid_plan_and_trims_text() {
        let plan = validate(
            json!({"checks": [{"step": " Find the host ", "tool": "inventory.host", "arguments": {"host": "db1"}, "reason": "owner"}],
                   "gaps": [{"step": "Read logs", "capability": "kubernetes.pods.logs", "reason": "errors"}]}),
            4,
        )
        .unwrap();
        assert_eq!(plan.checks[0].step, "Find the host");
        assert_eq!(plan.gaps[0].capability, "kubernetes.pods.logs");
    }

    #[test]
    fn only_a_whole_placeholder_is_one() {
        for text in ["<host>", " {{ namespace }} ", "${pod}", "{pod name}", "<db-7.internal>"] {
            assert!(placeholder(&json!({"a": text})).is_some(), "{text}");
        }
        for text in ["db-7", "up{job=\"x\"}", "<>", "a <b>", "{\"k\": 1}", "rate(x[5m]) > 0"] {
            assert!(placeholder(&json!({"a": text})).is_none(), "{text}");
        }
        assert_eq!(placeholder(&json!({"a": 1, "b": "<b>"})), Some(("b".into(), "<b>".into())));
    }

    #[test]
    fn rejects_each_rule() {
        let cases = [
            (json!({"checks": []}), "plan is not valid: missing field `gaps`"),
            (
                json!({"checks": [], "gaps": [], "extra": 1}),
                "plan is not valid: unknown field `extra`, expected `checks` or `gaps`",
            ),
            (json!({"checks": four_hosts(), "gaps": []}), "plan has 4 checks; this Run allows at most 3"),
            (json!({"checks": [check("", "inventory.host")], "gaps": []}), "checks[0].step: must not be empty"),
            (
                json!({"checks": [check(&"x".repeat(241), "inventory.host")], "gaps": []}),
                "checks[0].step: 241 characters; at most 240 are allowed",
            ),
            (
                json!({"checks": [check("a", "bad tool")], "gaps": []}),
                "checks[0].tool: \"bad tool\" is not a valid tool name",
            ),
            (
                json!({"checks": [{"step": "a", "tool": "inventory.host", "arguments": [1], "reason": "r"}], "gaps": []}),
                "checks[0].arguments: must be a JSON object",
            ),
            (
                json!({"checks": [check("a", "ops.restart")], "gaps": []}),
                "checks[0]: \"ops.restart\" is not an available execution tool",
            ),
            (
                json!({"checks": [{"step": "a", "tool": "inventory.host", "arguments": {}, "reason": "r"}], "gaps": []}),
                "checks[0]: arguments do not match the schema of inventory.host: \"host\" is required",
            ),
            (
                json!({"checks": [{"step": "a", "tool": "inventory.host", "arguments": {"host": "<host>"}, "reason": "r"}],
                       "gaps": []}),
                "checks[0].arguments.host: \"<host>\" is a placeholder, not a value; write the real host the request \
                 or the alert names, or list the check as a gap when they name none",
            ),
            (
                json!({"checks": [], "gaps": [{"step": "s", "capability": "no spaces", "reason": "r"}]}),
                "gaps[0].capability: \"no spaces\" is not a dot-separated capability id",
            ),
        ];
        for (plan, expected) in cases {
            assert_eq!(validate(plan, 3).unwrap_err(), expected);
        }
        let many: Vec<Value> =
            (0..17).map(|i| json!({"step": format!("s{i}"), "capability": "c.d", "reason": "r"})).collect();
        assert_eq!(
            validate(json!({"checks": [], "gaps": many}), 3).unwrap_err(),
            "plan has 17 checks and gaps; at most 16 are allowed"
        );
    }

    #[test]
    fn the_room_fits_the_completion_budget_and_an_investigation_needs_a_check() {
        assert_eq!(PlanRoom::fitting(7, 512, true), PlanRoom { min_checks: 1, max_checks: 5, max_gaps: 2 });
        assert_eq!(PlanRoom::fitting(3, 1024, false), PlanRoom { min_checks: 0, max_checks: 3, max_gaps: 7 });
        assert_eq!(PlanRoom::fitting(0, 1024, true), PlanRoom { min_checks: 0, max_checks: 0, max_gaps: 10 });
        assert_eq!(PlanRoom::fitting(40, 100_000, false).max_checks, MAX_PLAN_ITEMS);
        assert_eq!(PlanRoom::fitting(7, 50, true), PlanRoom { min_checks: 1, max_checks: 2, max_gaps: 2 });

        let tools = [("inventory.host".to_string(), json!({"type": "object"}))];
        let schema = plan_schema("en", &tools, PlanRoom::fitting(7, 512, true));
        assert_eq!(
            (&schema["properties"]["checks"]["minItems"], &schema["properties"]["checks"]["maxItems"]),
            (&json!(1), &json!(5))
        );
        assert_eq!(schema["properties"]["gaps"]["maxItems"], 2);
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(!validator.is_valid(&json!({"checks": [], "gaps": []})), "an investigation plans a check");
        assert_eq!(plan_schema("en", &[], PlanRoom::fitting(7, 512, true))["properties"]["checks"]["minItems"], 0);
    }

    #[test]
    fn the_schema_admits_only_capability_ids_the_host_accepts() {
        let schema = plan_schema("en", &[], PlanRoom::unbounded(0));
        let validator = jsonschema::validator_for(&schema).unwrap();
        let gap =
            |capability: &str| json!({"checks": [], "gaps": [{"step": "s", "capability": capability, "reason": "r"}]});
        for good in ["kubernetes.pods.logs", "status", "pg.lock_waits", "a-b.c2"] {
            assert!(validator.is_valid(&gap(good)), "{good}");
            assert!(validate(gap(good), 0).is_ok(), "{good}");
        }
        for bad in ["recent events of a namespace object.", "pods.", ".pods", "a..b", ""] {
            assert!(!validator.is_valid(&gap(bad)), "{bad}");
        }
    }

    #[test]
    fn schema_names_the_language() {
        let schema = plan_schema("de", &[], PlanRoom::unbounded(3));
        assert!(schema.to_string().contains("BCP 47 tag \\\"de\\\""));
    }

    #[test]
    fn the_schema_names_each_tool_with_its_closed_arguments() {
        let host = json!({"type": "object", "properties": {"host": {"type": "string"},
                          "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["host"]});
        let tools = [("inventory.host".to_string(), host), ("pg.locks".to_string(), json!({"type": "object"}))];
        let schema = plan_schema("en", &tools, PlanRoom::unbounded(40));
        let checks = &schema["properties"]["checks"];
        assert_eq!(checks["maxItems"], MAX_PLAN_ITEMS);
        let branches = checks["items"]["anyOf"].as_array().unwrap();
        assert_eq!(branches[0]["properties"]["tool"]["enum"], json!(["inventory.host"]));
        let arguments = &branches[0]["properties"]["arguments"];
        assert_eq!(arguments["additionalProperties"], false);
        assert_eq!(arguments["required"], json!(["host"]));
        assert_eq!(arguments["properties"]["host"]["maxLength"], MAX_ARGUMENT_CHARS);
        assert_eq!(arguments["properties"]["tags"]["maxItems"], MAX_ARGUMENT_ITEMS);
        assert_eq!(arguments["properties"]["tags"]["items"]["maxLength"], MAX_ARGUMENT_CHARS);
        let open = &branches[1]["properties"]["arguments"];
        assert_eq!((&open["properties"], &open["additionalProperties"]), (&json!({}), &json!(false)), "closed");
        assert_eq!(
            plan_schema("en", &tools[..1], PlanRoom::unbounded(2))["properties"]["checks"]["items"]["properties"]["tool"]
                ["enum"],
            json!(["inventory.host"])
        );
        assert_eq!(plan_schema("en", &tools, PlanRoom::unbounded(2))["properties"]["checks"]["maxItems"], 2);
        assert_eq!(plan_schema("en", &[], PlanRoom::unbounded(5))["properties"]["checks"]["maxItems"], 0);

        let validator = jsonschema::validator_for(&schema).unwrap();
        let plan = |tool: &str, arguments: Value| {
            json!({"gaps": [], "checks": [
            {"step": "s", "tool": tool, "arguments": arguments, "reason": "r"}]})
        };
        assert!(validator.is_valid(&plan("inventory.host", json!({"host": "db-7"}))));
        assert!(!validator.is_valid(&plan("inventory.hosts", json!({"host": "db-7"}))), "unknown tool");
        assert!(!validator.is_valid(&plan("inventory.host", json!({"host": "db-7", "x": 1}))), "extra argument");
        assert!(!validator.is_valid(&plan("inventory.host", json!({}))), "missing argument");
    }

    #[test]
    fn the_audit_reason_of_a_rejection_never_repeats_model_text() {
        let m = "zqmarker";
        let gap = |step: &str, capability: &str| json!({"step": step, "capability": capability, "reason": "r"});
        let rejected = [
            json!({"checks": [check("a", &format!("bad tool {m}"))], "gaps": []}),
            json!({"checks": [check("a", &format!("no.such.{m}"))], "gaps": []}),
            json!({"checks": [], "gaps": [gap("a", &format!("not an id {m}"))]}),
            json!({"checks": [], "gaps": [], m: 1}),
            json!({"checks": [{"step": "a", "tool": "inventory.host", "arguments": {"host": "db1"}, "reason": 7}], "gaps": [m]}),
        ];
        for plan in rejected {
            let error = validate_plan(&plan.to_string(), 4, &known).expect_err("rejected");
            let reason = error.audit_reason();
            assert!(!reason.contains(m), "{reason:?} (from {error})");
        }
        let error = validate_plan(&format!("{{\"{m}"), 4, &known).expect_err("not JSON");
        assert!(!error.audit_reason().contains(m));
    }
}
