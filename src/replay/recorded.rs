//! Tools answered from a recording, the way the real tool would have answered: a
//! call is matched by tool name and canonical arguments (the same call recorded
//! twice is answered in order, and once its recordings are used up it gets the last
//! of them again, as the real tool asked again says what it says now), then, as a
//! real tool ignores them, despite extra arguments that are empty or optional; a call
//! nothing matches gets the "not
//! found" a real tool gives, naming what it asked for, and is counted. Nothing
//! reaches a real system, so a replay is offline and deterministic on the tool side.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::case::{CaseTool, RecordedCall};
use crate::engine::record::canonical_json;
use crate::resources::mcp_adapter::Permission;
use crate::text::{ELLIPSIS, truncate_bytes};
use crate::tools::{Registry, RegistryBuilder, RegistryError, ToolFuture, ToolHandler, ToolLimits, ToolName, ToolSpec};

/// Start of the error every call the recording cannot answer gets.
pub const NOT_FOUND: &str = "not found";
/// Longest "not found" message, in bytes.
pub const MAX_NOT_FOUND_BYTES: usize = 280;
/// Longest argument value a "not found" message quotes, in bytes.
const MAX_VALUE_BYTES: usize = 48;
/// Longest argument name it quotes, in bytes.
const MAX_KEY_BYTES: usize = 32;
/// Most arguments it names.
const MAX_NAMED: usize = 4;
/// The argument a message names as the scope (`… in namespace="shop"`), as kubectl does.
const SCOPE: &str = "namespace";

/// One recorded call of a tool: its arguments, its answer and whether it was given.
struct Recorded {
    arguments: Map<String, Value>,
    canonical: String,
    answer: Result<String, String>,
    given: bool,
}

/// The recorded calls of each tool, in order.
type Answers = BTreeMap<String, Vec<Recorded>>;

/// The recording a replay's tools answer from.
#[derive(Clone, Default)]
pub struct Recording {
    answers: Arc<Mutex<Answers>>,
    unknown: Arc<AtomicUsize>,
}

/// Why the recorded tools could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// A tool name that is not a valid host tool name.
    #[error("tools[{index}].name {name:?} is not a valid tool name")]
    Name {
        /// Position in `tools`.
        index: usize,
        /// The name.
        name: String,
    },
    /// The registry refused a tool (schema, description).
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Whether `message` is the answer [`Recording`] gives a call of `tool` it cannot match.
pub fn is_not_found(tool: &str, message: &str) -> bool {
    message.starts_with(&format!("{NOT_FOUND}: no {tool} result"))
        || message.starts_with(&format!("{NOT_FOUND}: no data: {tool} "))
}

impl Recording {
    /// The recorded answers of `calls` (a call the host refused before the tool ran has none).
    pub fn new(calls: &[RecordedCall]) -> Self {
        let mut answers = Answers::new();
        for call in calls {
            let Some(arguments) = call.arguments.as_object() else { continue };
            let answer = match (&call.output, &call.error) {
                (Some(output), _) => Ok(output.to_string()),
                (None, Some(error)) => Err(error.message.clone()),
                (None, None) => Ok(Value::Null.to_string()),
            };
            answers.entry(call.tool.clone()).or_default().push(Recorded {
                arguments: arguments.clone(),
                canonical: canonical_json(&call.arguments),
                answer,
                given: false,
            });
        }
        Self { answers: Arc::new(Mutex::new(answers)), unknown: Arc::default() }
    }

    /// Calls answered "not found" so far.
    pub fn unknown_calls(&self) -> usize {
        self.unknown.load(Ordering::SeqCst)
    }

    /// The next recorded answer of this call: the first recording not given yet with the same
    /// arguments, else the first not given that the call covers (see [`covers`]); when all
    /// that match were given, the last of them again; else "not found".
    fn answer(&self, tool: &str, required: &BTreeSet<String>, arguments: &Value) -> Result<String, String> {
        let mut answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        let recorded = answers.get_mut(tool).map(Vec::as_mut_slice).unwrap_or_default();
        let canonical = canonical_json(arguments);
        let same = |r: &Recorded| r.canonical == canonical;
        let covered = |r: &Recorded| covers(arguments, &r.arguments, required);
        let index = recorded
            .iter()
            .position(|r| !r.given && same(r))
            .or_else(|| recorded.iter().position(|r| !r.given && covered(r)))
            .or_else(|| recorded.iter().rposition(same))
            .or_else(|| recorded.iter().rposition(covered));
        if let Some(recorded) = index.map(|i| &mut recorded[i]) {
            recorded.given = true;
            return recorded.answer.clone();
        }
        self.unknown.fetch_add(1, Ordering::SeqCst);
        Err(not_found(tool, arguments, recorded))
    }

    /// The case's tools, each answering from this recording; only those the case marks
    /// `read_only` are `read` tools (the engine offers a Run nothing else).
    pub fn registry(&self, tools: &[CaseTool]) -> Result<Registry, RecordingError> {
        let mut builder = RegistryBuilder::new(ToolLimits::default());
        for (index, tool) in tools.iter().enumerate() {
            let name = ToolName::try_from(tool.name.as_str())
                .map_err(|_| RecordingError::Name { index, name: tool.name.clone() })?;
            let permission = if tool.read_only { Permission::Read } else { Permission::Write };
            let spec = ToolSpec::new(name, tool.description.clone(), permission, tool.input_schema.clone());
            let required: BTreeSet<String> = tool.input_schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|key| key.as_str().map(str::to_string))
                .collect();
            let (recording, tool) = (self.clone(), tool.name.clone());
            let handler: Arc<dyn ToolHandler> = Arc::new(move |arguments: Value| -> ToolFuture {
                let answer = recording.answer(&tool, &required, &arguments);
                Box::pin(async move { answer })
            });
            builder.register(spec, handler)?;
        }
        Ok(builder.build())
    }
}

/// Whether a call with `arguments` gets the answer recorded for `recorded`, as a real
/// tool would ignore the difference: it carries every recorded argument with an equal
/// value, and each other argument is empty (`null`, `""`, `[]`, `{}`) or optional (not
/// in the schema's `required`).
fn covers(arguments: &Value, recorded: &Map<String, Value>, required: &BTreeSet<String>) -> bool {
    let Some(given) = arguments.as_object() else { return false };
    let equal =
        |key: &String, value: &Value| given.get(key).is_some_and(|v| canonical_json(v) == canonical_json(value));
    recorded.iter().all(|(key, value)| equal(key, value))
        && given.iter().filter(|(key, _)| !recorded.contains_key(*key)).all(|(key, value)| {
            let empty = match value {
                Value::Null => true,
                Value::String(s) => s.is_empty(),
                Value::Array(items) => items.is_empty(),
                Value::Object(map) => map.is_empty(),
                Value::Bool(_) | Value::Number(_) => false,
            };
            empty || !required.contains(key)
        })
}

/// What a real tool says when nothing matches: the call's argument values that no recorded
/// call of the tool has (all of them when each alone was recorded), never the recorded ones;
/// a tool with no recorded call answers as an empty result.
fn not_found(tool: &str, arguments: &Value, recorded: &[Recorded]) -> String {
    if recorded.is_empty() {
        return format!("{NOT_FOUND}: no data: {tool} returned an empty result");
    }
    let empty = Map::new();
    let given = arguments.as_object().unwrap_or(&empty);
    let unrecorded = |key: &str, value: &Value| {
        !recorded.iter().any(|r| r.arguments.get(key).is_some_and(|v| canonical_json(v) == canonical_json(value)))
    };
    let mut named: Vec<(&String, &Value)> =
        given.iter().filter(|(key, value)| key.as_str() != SCOPE && unrecorded(key, value)).collect();
    if named.is_empty() && !given.get(SCOPE).is_some_and(|v| unrecorded(SCOPE, v)) {
        named = given.iter().filter(|(key, _)| key.as_str() != SCOPE).collect();
    }
    let mut message = format!("{NOT_FOUND}: no {tool} result");
    if !named.is_empty() {
        let mut items: Vec<String> = named.iter().take(MAX_NAMED).map(|(key, value)| shown(key, value)).collect();
        if named.len() > MAX_NAMED {
            items.push(ELLIPSIS.into());
        }
        message.push_str(&format!(" matches {}", items.join(", ")));
    }
    match given.get(SCOPE) {
        Some(scope) => message.push_str(&format!(" in {}", shown(SCOPE, scope))),
        None if named.is_empty() => message.push_str(" matches these arguments"),
        None => {}
    }
    truncate_bytes(&message, MAX_NOT_FOUND_BYTES, ELLIPSIS)
}

/// `key=value`, each cut to a bounded length (a string value quoted).
fn shown(key: &str, value: &Value) -> String {
    let key = truncate_bytes(key, MAX_KEY_BYTES, ELLIPSIS);
    let value = match value {
        Value::String(s) => format!("\"{}\"", truncate_bytes(s, MAX_VALUE_BYTES, ELLIPSIS)),
        other => truncate_bytes(&other.to_string(), MAX_VALUE_BYTES, ELLIPSIS),
    };
    format!("{key}={value}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::{AllowAll, ToolCall, ToolResult};

    fn call(tool: &str, arguments: Value, output: Value) -> RecordedCall {
        RecordedCall { tool: tool.into(), arguments, output: Some(output), error: None }
    }

    fn tool(name: &str, input_schema: Value) -> CaseTool {
        CaseTool { name: name.into(), description: "A tool.".into(), input_schema, read_only: true }
    }

    fn pod_status() -> CaseTool {
        tool(
            "kubernetes.pod_status",
            json!({"type": "object", "properties": {"namespace": {"type": "string"}, "pod": {"type": "string"},
                   "container": {"type": "string"}, "since": {"type": "string"}}, "required": ["namespace", "pod"]}),
        )
    }

    async fn run(registry: &Registry, name: &str, arguments: Value) -> ToolResult {
        let call = ToolCall { id: "c1".into(), name: name.into(), arguments: arguments.to_string() };
        registry.execute(&call, &AllowAll).await
    }

    #[tokio::test]
    async fn calls_are_matched_by_canonical_arguments_in_order_then_repeat_the_last_and_unknown_ones_counted() {
        let calls = [
            call("metrics.query", json!({"q": "up", "step": 60}), json!({"n": 1})),
            call("metrics.query", json!({"step": 60, "q": "up"}), json!({"n": 2})),
        ];
        let recording = Recording::new(&calls);
        let registry = recording.registry(&[tool("metrics.query", json!({"type": "object"}))]).unwrap();
        assert_eq!(run(&registry, "metrics.query", json!({"step": 60, "q": "up"})).await.output, Some(json!({"n": 1})));
        assert_eq!(run(&registry, "metrics.query", json!({"q": "up", "step": 60})).await.output, Some(json!({"n": 2})));
        for _ in 0..2 {
            let again = run(&registry, "metrics.query", json!({"q": "up", "step": 60})).await;
            assert_eq!(again.output, Some(json!({"n": 2})), "asked again, the tool says what it says now");
        }
        assert_eq!(recording.unknown_calls(), 0);
        let other = run(&registry, "metrics.query", json!({"q": "down", "step": 60})).await;
        assert!(is_not_found("metrics.query", &other.error.unwrap().message));
        assert_eq!(recording.unknown_calls(), 1);
    }

    #[tokio::test]
    async fn an_unmatched_call_gets_the_not_found_a_real_tool_gives_naming_what_it_asked_for() {
        let calls = [call("kubernetes.pod_status", json!({"namespace": "shop", "pod": "cart-7d9f-abcde"}), json!({}))];
        let recording = Recording::new(&calls);
        let registry = recording.registry(&[pod_status(), tool("kubernetes.logs", json!({"type": "object"}))]).unwrap();
        let error = |result: ToolResult| result.error.unwrap().message;

        let message = error(run(&registry, "kubernetes.pod_status", json!({"namespace": "shop", "pod": "cart"})).await);
        assert_eq!(message, r#"not found: no kubernetes.pod_status result matches pod="cart" in namespace="shop""#);
        assert!(!message.contains("cart-7d9f-abcde"), "a real tool does not list alternatives");
        let other_namespace = json!({"namespace": "prod", "pod": "cart-7d9f-abcde"});
        assert_eq!(
            error(run(&registry, "kubernetes.pod_status", other_namespace).await),
            r#"not found: no kubernetes.pod_status result in namespace="prod""#
        );
        // Strings compare exactly.
        let upper = json!({"namespace": "shop", "pod": "Cart-7d9f-abcde"});
        assert!(error(run(&registry, "kubernetes.pod_status", upper).await).contains(r#"pod="Cart-7d9f-abcde""#));
        let long = json!({"namespace": "shop", "pod": "x".repeat(5000), "container": "y".repeat(5000)});
        let message = error(run(&registry, "kubernetes.pod_status", long).await);
        assert!(message.len() < 300 && message.starts_with("not found: no kubernetes.pod_status result matches"));

        let message = error(run(&registry, "kubernetes.logs", json!({"pod": "cart"})).await);
        assert_eq!(message, "not found: no data: kubernetes.logs returned an empty result");
        assert!(is_not_found("kubernetes.logs", &message));
        assert_eq!(recording.unknown_calls(), 5, "every unmatched call counts as unknown");
        let recorded = run(&registry, "kubernetes.pod_status", json!({"namespace": "shop", "pod": "cart-7d9f-abcde"}));
        assert_eq!(recorded.await.output, Some(json!({})));
    }

    #[tokio::test]
    async fn extra_empty_or_optional_arguments_still_get_the_recorded_answer_missing_ones_do_not() {
        let recorded = json!({"namespace": "shop", "pod": "cart-7d9f-abcde"});
        let calls = [call("kubernetes.pod_status", recorded.clone(), json!({"n": 1}))];
        let with = |extra: Value| {
            let mut arguments = recorded.clone();
            arguments.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            arguments
        };
        for drift in [json!({"container": ""}), json!({"labels": null}), json!({"since": "1h"}), json!({"x": []})] {
            let recording = Recording::new(&calls);
            let registry = recording.registry(&[pod_status()]).unwrap();
            let result = run(&registry, "kubernetes.pod_status", with(drift.clone())).await;
            assert_eq!(result.output, Some(json!({"n": 1})), "{drift}: {result:?}");
            assert_eq!(recording.unknown_calls(), 0);
        }
        // Exact matches first: the drifted call takes the recording left after the exact one.
        let calls = [
            call("kubernetes.pod_status", with(json!({"container": "cart"})), json!({"n": 1})),
            call("kubernetes.pod_status", recorded.clone(), json!({"n": 2})),
            call("kubernetes.pod_status", recorded.clone(), json!({"n": 3})),
        ];
        let recording = Recording::new(&calls);
        let registry = recording.registry(&[pod_status()]).unwrap();
        let drifted = with(json!({"since": ""}));
        assert_eq!(run(&registry, "kubernetes.pod_status", recorded.clone()).await.output, Some(json!({"n": 2})));
        assert_eq!(run(&registry, "kubernetes.pod_status", drifted.clone()).await.output, Some(json!({"n": 3})));
        let again = run(&registry, "kubernetes.pod_status", drifted).await;
        assert_eq!(again.output, Some(json!({"n": 3})), "none left pending: the last it covers, again");

        // A missing recorded argument, or a required one the recording lacks, does not match
        // unless it is empty.
        let calls = [call("metrics.query", json!({"q": "up", "step": 60}), json!({"n": 1}))];
        let schema = json!({"type": "object", "required": ["q", "range"]});
        let recording = Recording::new(&calls);
        let registry = recording.registry(&[tool("metrics.query", schema)]).unwrap();
        assert!(run(&registry, "metrics.query", json!({"q": "up", "range": "5m"})).await.error.is_some());
        assert!(run(&registry, "metrics.query", json!({"q": "up", "step": 60, "range": "5m"})).await.error.is_some());
        assert_eq!(recording.unknown_calls(), 2);
        let empty = json!({"q": "up", "step": 60, "range": ""});
        assert_eq!(run(&registry, "metrics.query", empty).await.output, Some(json!({"n": 1})));
    }

    #[test]
    fn only_tools_the_case_marks_read_only_are_read_tools() {
        let write = CaseTool { read_only: false, ..tool("kubernetes.scale", json!({"type": "object"})) };
        let registry = Recording::new(&[]).registry(&[pod_status(), write]).unwrap();
        assert_eq!(registry.get("kubernetes.pod_status").map(|s| s.permission), Some(Permission::Read));
        assert_eq!(registry.get("kubernetes.scale").map(|s| s.permission), Some(Permission::Write));
    }
}
