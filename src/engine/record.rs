//! Audit bookkeeping of a Run: opening it (or a follow-up on a finished one), the
//! events its steps record, and closing it with usage and the outcome. The event
//! contents are built by pure functions; [`Recorder`] only writes them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::budget::BudgetUsage;
use super::conversation::Turn;
use super::request::{RunError, RunRequest};
use super::skills::SkillEntry;
use crate::audit::{ActiveRun, AuditError, AuditLog, Finish, NewEvent, NewRun, RunId, RunStatus, TOOL_CALL};
use crate::investigation::InvestigationResult;
use crate::tools::ToolResult;

/// Event type of a follow-up's start and end.
const FOLLOW_UP: &str = "follow_up";

/// What a recorded tool call was, in its `call_kind`: only [`CallKind::Execution`]
/// calls count as evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// A call through the Run's execution catalog (not a knowledge tool).
    Execution,
    /// `knowledge.*`: guidance, not evidence.
    Knowledge,
    /// The plan submission.
    Plan,
    /// The automatic retrieval.
    Retrieval,
}

impl CallKind {
    /// The recorded name.
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Execution => crate::audit::CALL_KIND_EXECUTION,
            CallKind::Knowledge => "knowledge",
            CallKind::Plan => "plan",
            CallKind::Retrieval => "retrieval",
        }
    }

    /// Whether the host numbers the call (`call-<n>`): every call through the registry.
    fn is_numbered(kind: &str) -> bool {
        kind == CallKind::Execution.as_str() || kind == CallKind::Knowledge.as_str()
    }
}

/// Where one Run's records go. Without an audit log nothing is written. Holds the
/// Run active (no follow-up can interleave) until dropped.
pub struct Recorder {
    audit: Option<Arc<AuditLog>>,
    active: Option<ActiveRun>,
    follow_up: bool,
    calls_before: u32,
}

impl Recorder {
    /// Opens a new Run, or, for a follow-up (already holding the Run active),
    /// records its start on the existing Run.
    pub async fn open(
        audit: Option<Arc<AuditLog>>,
        follow_up: Option<ActiveRun>,
        request: &RunRequest,
        opening: Opening<'_>,
    ) -> Result<Self, AuditError> {
        let Opening { model, catalog_version, instructions, keep_input } = opening;
        let is_follow_up = follow_up.is_some();
        let mut calls_before = 0;
        let active = match (&audit, follow_up) {
            (Some(audit), Some(active)) => {
                calls_before = audit.get(active.id()).await?.map_or(0, |run| numbered_calls(&run.events));
                let metadata = BTreeMap::from([("catalog_version".to_string(), json!(catalog_version))]);
                let event =
                    NewEvent { kind: FOLLOW_UP.into(), status: Some("started".into()), metadata, ..Default::default() };
                audit.event(active.id(), event).await?;
                Some(active)
            }
            (Some(audit), None) => Some(
                audit
                    .start_active(NewRun {
                        namespace: request.namespace.clone(),
                        source: request.source.clone(),
                        actor: request.actor.clone(),
                        model: Some(model.to_string()),
                        catalog_version,
                        metadata: start_metadata(request, instructions, keep_input),
                    })
                    .await?,
            ),
            (None, _) => None,
        };
        Ok(Recorder { audit, active, follow_up: is_follow_up, calls_before })
    }

    /// The Run id, when the audit is enabled.
    pub fn run_id(&self) -> Option<&RunId> {
        self.active.as_ref().map(ActiveRun::id)
    }

    /// Calls the host numbered on this Run before (a follow-up continues the numbering).
    pub fn calls_before(&self) -> u32 {
        self.calls_before
    }

    /// Appends an event; a follow-up's events say so in their `scope`.
    pub async fn event(&self, mut event: NewEvent) -> Result<(), AuditError> {
        if let (Some(audit), Some(id)) = (&self.audit, self.run_id()) {
            if self.follow_up {
                event.metadata.entry("scope".into()).or_insert(json!(FOLLOW_UP));
            }
            audit.event(id, event).await?;
        }
        Ok(())
    }

    /// Records the validated structured result.
    pub async fn investigation(&self, result: &InvestigationResult) -> Result<(), AuditError> {
        if let (Some(audit), Some(id)) = (&self.audit, self.run_id()) {
            audit.record_investigation(id, result).await?;
        }
        Ok(())
    }

    /// Closes the Run; a follow-up instead records its end on the existing Run.
    pub async fn close(&self, finish: Finish) -> Result<(), AuditError> {
        let (Some(audit), Some(id)) = (&self.audit, self.run_id()) else { return Ok(()) };
        if self.follow_up {
            audit.event(id, follow_up_end(finish)).await.map(|_| ())
        } else {
            audit.finish(id, finish).await
        }
    }
}

/// What a Run records when it opens, besides its request.
pub struct Opening<'a> {
    /// The model that answers.
    pub model: &'a str,
    /// The Catalog's version.
    pub catalog_version: u64,
    /// SHA-256 of the system instructions the model requests carry.
    pub instructions: Option<String>,
    /// Whether the input's text is kept (`audit_input_namespaces`), not only its hash.
    pub keep_input: bool,
}

/// Metadata key of the input's hash (conversation and context).
pub const INPUT_SHA256: &str = "input_sha256";
/// Metadata key of the input itself (defined beside the follow-up prompt, which drops it first).
pub use super::request::INPUT;
/// Largest input kept (its canonical JSON, after redaction).
pub const MAX_KEPT_INPUT_BYTES: usize = 64 * 1024;
/// Metadata key (at the end of a Run) of the structured mode its last structured step used.
pub const MODEL_PROTOCOL: &str = "model_protocol";
/// Metadata key (at the end of a Run) of its structured steps' fallbacks, when any.
pub const MODEL_PROTOCOL_FALLBACKS: &str = "model_protocol_fallbacks";
/// Metadata key of the SYSTEM.md hash the Run's model requests carried.
pub const INSTRUCTIONS_SHA256: &str = "instructions_sha256";

/// What a new Run records at its start: the request's facts, the hash of its input (the hash
/// lets an export check a question supplied later), with `keep_input` the input itself
/// ([`kept_input`]), and the hash of the system instructions.
fn start_metadata(
    request: &RunRequest,
    instructions_sha256: Option<String>,
    keep_input: bool,
) -> BTreeMap<String, Value> {
    let mut metadata = request.metadata.clone();
    metadata.insert(INPUT_SHA256.into(), json!(input_sha256(&request.turns, &request.context)));
    if keep_input {
        metadata.insert(INPUT.into(), kept_input(&request.turns, &request.context));
    }
    if let Some(sha) = instructions_sha256 {
        metadata.insert(INSTRUCTIONS_SHA256.into(), json!(sha));
    }
    metadata
}

/// The input as the audit keeps it: every message and context value through the redaction
/// errors and logs get (the host's secrets, credential-looking fragments), `redacted` saying
/// whether that changed anything (then it no longer hashes to `input_sha256`). Over
/// [`MAX_KEPT_INPUT_BYTES`], only why it was omitted.
pub fn kept_input(turns: &[Turn], context: &BTreeMap<String, String>) -> Value {
    let messages: Vec<Turn> =
        turns.iter().map(|turn| Turn { role: turn.role, content: crate::redact::redact(&turn.content) }).collect();
    let facts: BTreeMap<String, String> = context
        .iter()
        .map(|(key, value)| {
            let kept = if crate::audit::is_sensitive_key(key) {
                crate::redact::REDACTED.to_string()
            } else {
                crate::redact::redact(value)
            };
            (key.clone(), kept)
        })
        .collect();
    let redacted = messages.iter().zip(turns).any(|(kept, turn)| kept.content != turn.content) || facts != *context;
    let kept = json!({"messages": messages, "context": facts, "redacted": redacted});
    let size = kept.to_string().len();
    if size > MAX_KEPT_INPUT_BYTES {
        return json!({"omitted": format!("the input is {size} bytes, over the {MAX_KEPT_INPUT_BYTES} kept")});
    }
    kept
}

/// SHA-256 (hex) of a Run's input: the canonical JSON of `{"context", "messages"}`.
pub fn input_sha256(turns: &[Turn], context: &BTreeMap<String, String>) -> String {
    use sha2::Digest;
    let input = json!({"messages": turns, "context": context});
    hex::encode(sha2::Sha256::digest(canonical_json(&input).as_bytes()))
}

/// JSON text with object keys sorted at every level: equal values give equal text.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let ordered: BTreeMap<&String, Value> = map.iter().map(|(k, v)| (k, sorted(v))).collect();
                Value::Object(ordered.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// Tool calls of `events` the host numbered.
fn numbered_calls(events: &[crate::audit::AuditEvent]) -> u32 {
    let numbered = events
        .iter()
        .filter(|e| e.kind == TOOL_CALL)
        .filter(|e| e.metadata.get("call_kind").and_then(Value::as_str).is_some_and(CallKind::is_numbered))
        .count();
    u32::try_from(numbered).unwrap_or(u32::MAX)
}

/// The record of one executed tool call: host-recorded arguments, the raw result
/// under the host-assigned id, and what kind of call it was.
pub fn tool_call_event(kind: CallKind, arguments: Option<Value>, result: &ToolResult) -> NewEvent {
    let mut metadata = BTreeMap::from([
        ("tool".to_string(), json!(result.name)),
        ("call_kind".to_string(), json!(kind.as_str())),
        ("call_id".to_string(), json!(result.id)),
        ("duration_ms".to_string(), json!(duration_ms(result.duration))),
    ]);
    if let Some(error) = &result.error {
        metadata.insert("error_code".into(), json!(error.code.as_str()));
    }
    NewEvent {
        kind: TOOL_CALL.into(),
        status: Some(if result.is_ok() { "succeeded" } else { "failed" }.into()),
        metadata,
        arguments,
        result: serde_json::to_value(result).ok(),
    }
}

/// The record of a skill joining the Run, and what selected it (`request`,
/// `inventory`, `loaded`).
pub fn skill_selected_event(skill: &SkillEntry, selected_by: &str) -> NewEvent {
    let metadata = BTreeMap::from([
        ("skill".to_string(), json!(skill.name)),
        ("source".to_string(), json!(skill.source)),
        ("content_sha256".to_string(), json!(skill.sha256)),
        ("selected_by".to_string(), json!(selected_by)),
    ]);
    NewEvent { kind: "skill_selected".into(), metadata, ..Default::default() }
}

/// The record of one runbook document the automatic retrieval put into the Run.
pub fn context_retrieved_event(document_id: &str, title: &str, call_id: &str, knowledge_bases: &str) -> NewEvent {
    let metadata = BTreeMap::from([
        ("document_id".to_string(), json!(document_id)),
        ("title".to_string(), json!(title)),
        ("call_id".to_string(), json!(call_id)),
        ("knowledge_bases".to_string(), json!(knowledge_bases)),
    ]);
    NewEvent { kind: "context_retrieved".into(), metadata, ..Default::default() }
}

/// How the Run ends: usage, skills and the Catalog version, and the error (with
/// the exhausted budget dimension) when it failed.
pub fn finish(usage: &BudgetUsage, skills: &[String], catalog_version: u64, error: Option<&RunError>) -> Finish {
    let mut metadata = match serde_json::to_value(usage) {
        Ok(Value::Object(map)) => map.into_iter().collect(),
        _ => BTreeMap::new(),
    };
    metadata.insert("skills".into(), json!(skills.join(",")));
    metadata.insert("catalog_version".into(), json!(catalog_version));
    let Some(error) = error else {
        return Finish { status: RunStatus::Succeeded, error: None, error_code: None, metadata };
    };
    if let RunError::Budget { exhausted, .. } = error {
        metadata.insert("budget_dimension".into(), json!(exhausted.dimension.as_str()));
    }
    Finish {
        status: RunStatus::Failed,
        error: Some(error.to_string()),
        error_code: Some(error.code().to_string()),
        metadata,
    }
}

/// The end of a follow-up, recorded as an event of the Run it continued.
fn follow_up_end(finish: Finish) -> NewEvent {
    let status = if finish.status == RunStatus::Succeeded { "succeeded" } else { "failed" };
    let mut metadata = finish.metadata;
    if let Some(code) = finish.error_code {
        metadata.insert("error_code".into(), json!(code));
    }
    NewEvent { kind: FOLLOW_UP.into(), status: Some(status.into()), metadata, ..Default::default() }
}

/// Tool arguments as the host records them: the JSON the model sent, or the raw
/// text when it is not JSON.
pub fn arguments_value(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// Milliseconds, saturating.
pub fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::budget::{Dimension, Exhausted};
    use crate::tools::{ErrorCode, ToolError};

    #[test]
    fn a_kept_input_is_redacted_bounded_and_says_whether_it_still_hashes() {
        use crate::engine::conversation::Speaker;
        let turn = |content: &str| Turn { role: Speaker::User, content: content.into() };
        let facts = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let clean = kept_input(&[turn("why is db-7 slow?")], &facts(&[("service", "postgresql")]));
        assert_eq!(
            clean,
            json!({"messages": [{"role": "user", "content": "why is db-7 slow?"}],
                   "context": {"service": "postgresql"}, "redacted": false})
        );
        let fragment = kept_input(&[turn("it broke after token=abc123def was set")], &BTreeMap::new());
        assert_eq!(fragment["messages"][0]["content"], "it broke after token=[redacted] was set");
        assert_eq!(fragment["redacted"], true);
        // A fact under a credential's name is redacted whatever its value looks like.
        let fact = kept_input(&[turn("why?")], &facts(&[("api_key", "plain"), ("service", "x")]));
        assert_eq!(fact["context"], json!({"api_key": "[redacted]", "service": "x"}));
        assert_eq!(fact["redacted"], true);
        let large = kept_input(&[turn(&"x".repeat(MAX_KEPT_INPUT_BYTES))], &BTreeMap::new());
        let omitted = large["omitted"].as_str().unwrap();
        assert!(omitted.contains("over the 65536 kept"), "{omitted}");
        assert!(large.get("messages").is_none());
        // Kept only where asked.
        let request = RunRequest { turns: vec![turn("q")], ..RunRequest::default() };
        assert!(!start_metadata(&request, None, false).contains_key(INPUT));
        assert_eq!(start_metadata(&request, None, true)[INPUT]["messages"][0]["content"], "q");
    }

    fn result(error: Option<ToolError>) -> ToolResult {
        ToolResult {
            id: "call_1".into(),
            name: "inventory.host".into(),
            output: error.is_none().then(|| json!({"host": "db1"})),
            error,
            duration: Duration::from_millis(42),
        }
    }

    #[test]
    fn a_tool_call_records_host_arguments_raw_result_and_timing() {
        let arguments = json!({"host": "db1"});
        let event = tool_call_event(CallKind::Execution, Some(arguments.clone()), &result(None));
        assert_eq!(event.kind, "tool_call");
        assert_eq!(event.metadata["call_kind"], "execution");
        assert_eq!(event.status.as_deref(), Some("succeeded"));
        assert_eq!(event.metadata["tool"], "inventory.host");
        assert_eq!(event.metadata["call_id"], "call_1");
        assert_eq!(event.metadata["duration_ms"], 42);
        assert!(!event.metadata.contains_key("error_code"));
        assert_eq!(event.arguments, Some(arguments));
        assert_eq!(event.result.unwrap()["output"], json!({"host": "db1"}));
    }

    #[test]
    fn arguments_that_are_not_json_are_recorded_as_text() {
        assert_eq!(arguments_value(r#"{"host": "db1"}"#), json!({"host": "db1"}));
        assert_eq!(arguments_value("{host: db1"), json!("{host: db1"));
    }

    #[test]
    fn a_failed_tool_call_records_its_error_code() {
        let error = ToolError { code: ErrorCode::PermissionDenied, message: "no".into() };
        let event = tool_call_event(CallKind::Execution, None, &result(Some(error)));
        assert_eq!(event.status.as_deref(), Some("failed"));
        assert_eq!(event.metadata["error_code"], ErrorCode::PermissionDenied.as_str());
        assert_eq!(event.arguments, None, "a refused call keeps no arguments");
    }

    #[test]
    fn a_failed_run_records_the_error_its_code_and_the_budget_dimension() {
        let usage = BudgetUsage { model_calls: 3, ..BudgetUsage::default() };
        let error = RunError::Budget {
            run_id: None,
            exhausted: Exhausted { dimension: Dimension::ToolCalls, needed: 5, limit: 4 },
            usage: usage.clone(),
        };
        let failed = finish(&usage, &["postgres".into(), "redis".into()], 7, Some(&error));
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(failed.error_code.as_deref(), Some("budget_exhausted"));
        assert_eq!(failed.error, Some(error.to_string()));
        assert_eq!(failed.metadata["budget_dimension"], Dimension::ToolCalls.as_str());
        assert_eq!(failed.metadata["model_calls"], 3);
        assert_eq!(failed.metadata["skills"], "postgres,redis");
        assert_eq!(failed.metadata["catalog_version"], 7);

        let succeeded = finish(&usage, &[], 7, None);
        assert_eq!(succeeded.status, RunStatus::Succeeded);
        assert_eq!((succeeded.error, succeeded.error_code), (None, None));
        assert!(!succeeded.metadata.contains_key("budget_dimension"));
        assert_eq!(succeeded.metadata["skills"], "");
    }

    #[test]
    fn a_follow_up_ends_with_an_event_carrying_status_and_error_code() {
        let error = RunError::UnknownRun;
        let event = follow_up_end(finish(&BudgetUsage::default(), &[], 1, Some(&error)));
        assert_eq!(event.kind, "follow_up");
        assert_eq!(event.status.as_deref(), Some("failed"));
        assert_eq!(event.metadata["error_code"], "run_not_found");
        let event = follow_up_end(finish(&BudgetUsage::default(), &[], 1, None));
        assert_eq!(event.status.as_deref(), Some("succeeded"));
        assert!(!event.metadata.contains_key("error_code"));
    }

    #[test]
    fn skill_and_retrieval_events_name_their_source() {
        let skill = SkillEntry {
            name: "postgres".into(),
            description: None,
            selectors: Default::default(),
            content: Arc::from("guidance"),
            source: "Skill/ops/postgres".into(),
            sha256: "abc".into(),
        };
        let event = skill_selected_event(&skill, "inventory");
        assert_eq!(event.kind, "skill_selected");
        assert_eq!(event.metadata["selected_by"], "inventory");
        assert_eq!(event.metadata["content_sha256"], "abc");
        let event = context_retrieved_event("pg.md", "PostgreSQL", "call_x", "ops/runbooks@123");
        assert_eq!(event.kind, "context_retrieved");
        assert_eq!(event.metadata["knowledge_bases"], "ops/runbooks@123");
        assert_eq!(event.metadata["call_id"], "call_x");
    }
}
