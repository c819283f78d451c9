//! A finished Run as a case: everything comes from its audit record (the calls with
//! their recorded results, the skills it selected with their hashes, the hashes of
//! its input and SYSTEM.md) plus the catalog it ran with as it is now (skills,
//! tool schemas). Nothing the audit does not hold is added: no prompt, no answer,
//! no credential.

use std::collections::BTreeMap;

use serde_json::Value;

use super::case::{
    CASE_VERSION, CHANGE_SOURCES, Case, CaseSkill, CaseTool, Expected, Input, Origin, RecordedCall, SkillVersion,
};
use crate::audit::{AuditEvent, CALL_KIND_EXECUTION, RunRecord, RunStatus, TOOL_CALL};
use crate::engine::record::{INPUT, INPUT_SHA256, INSTRUCTIONS_SHA256};
use crate::engine::skills::SkillEntry;
use crate::tools::{Registry, ToolResult};

/// Why a Run cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Still executing.
    #[error("run {0} is still running; export it when it has finished")]
    Running(String),
    /// A Run replay cannot reproduce: a replay runs the engine on the case's question, and a
    /// change preview or apply is the change pipeline's (a proposal, validators, a write).
    #[error(
        "run {run} is a {origin} Run, which a replay cannot reproduce (it replays chats and investigations); \
         prepare the change again with `akritas change simulate`"
    )]
    NotReplayable {
        /// The Run.
        run: String,
        /// Its source.
        origin: String,
    },
}

impl ExportError {
    /// The API error code.
    pub fn code(&self) -> &'static str {
        match self {
            ExportError::Running(_) => "run_running",
            ExportError::NotReplayable { .. } => "not_replayable",
        }
    }
}

/// The catalog a case is exported with: the tools and skills the Run's namespace sees now.
pub struct ExportCatalog<'a> {
    /// Authorized read-only tools.
    pub tools: &'a Registry,
    /// Skills by name.
    pub skills: &'a BTreeMap<String, SkillEntry>,
    /// Catalog version.
    pub version: u64,
}

/// The Run as a case (its follow-ups are not part of it).
pub fn export(run: &RunRecord, catalog: &ExportCatalog<'_>) -> Result<Case, ExportError> {
    if run.status == RunStatus::Running {
        return Err(ExportError::Running(run.id.to_string()));
    }
    if CHANGE_SOURCES.contains(&run.source.as_str()) {
        return Err(ExportError::NotReplayable { run: run.id.to_string(), origin: run.source.clone() });
    }
    let own: Vec<&AuditEvent> = run
        .events
        .iter()
        .filter(|e| e.metadata.get("scope").and_then(Value::as_str) != Some("follow_up") && e.kind != "follow_up")
        .collect();
    let calls: Vec<RecordedCall> = own.iter().copied().filter_map(recorded_call).collect();
    let selected: Vec<SkillVersion> = own
        .iter()
        .filter(|e| e.kind == "skill_selected")
        .filter_map(|e| {
            let text = |key: &str| e.metadata.get(key).and_then(Value::as_str).map(str::to_string);
            Some(SkillVersion { name: text("skill")?, sha256: text("content_sha256")? })
        })
        .collect();
    let metadata = |key: &str| run.metadata.get(key).and_then(Value::as_str).map(str::to_string);
    let mut case = Case {
        version: CASE_VERSION,
        name: run.id.to_string(),
        description: None,
        split: None,
        origin: Some(Origin {
            run_id: run.id.to_string(),
            namespace: run.namespace.clone(),
            source: run.source.clone(),
            model: run.model.clone(),
            catalog_version: run.catalog_version,
            exported_catalog_version: catalog.version,
            started_at: run.started_at.clone(),
            instructions_sha256: metadata(INSTRUCTIONS_SHA256),
        }),
        input: Input {
            messages: Vec::new(),
            context: BTreeMap::new(),
            sha256: metadata(INPUT_SHA256),
            redacted: false,
            investigate: run.investigation.is_some() || run.source.starts_with("alert:"),
            // Judged at the Run's start, from `origin` ([`Case::at`]).
            at: None,
        },
        skills: skills(catalog.skills, &selected),
        tools: tools(catalog.tools, &calls),
        calls,
        expected: Expected {
            status: Some(if run.status == RunStatus::Succeeded { "succeeded" } else { "failed" }.into()),
            error_code: run.error_code.clone(),
            skills: selected,
            investigation: run.investigation.clone(),
            ..Expected::default()
        },
    };
    if let Some(kept) = run.metadata.get(INPUT) {
        with_kept_input(&mut case, kept);
    }
    Ok(case)
}

/// The input the audit kept (`audit_input_namespaces`): as it was when it still hashes to the
/// recorded value, else as kept, marked `redacted`. An input omitted for its size, or one
/// that does not read, leaves the case without input, as in a namespace that keeps none.
fn with_kept_input(case: &mut Case, kept: &Value) {
    #[derive(serde::Deserialize)]
    struct Kept {
        messages: Vec<crate::engine::conversation::Turn>,
        #[serde(default)]
        context: BTreeMap<String, String>,
        #[serde(default)]
        redacted: bool,
    }
    let Ok(kept) = serde_json::from_value::<Kept>(kept.clone()) else { return };
    if !kept.redacted && case.supply_turns(kept.messages.clone(), kept.context.clone()).is_ok() {
        return;
    }
    case.input.messages = kept
        .messages
        .into_iter()
        .map(|t| super::case::CaseMessage { role: t.role.as_str().to_string(), content: t.content })
        .collect();
    case.input.context = kept.context;
    case.input.redacted = true;
}

/// An execution call of the Run with its recorded result.
fn recorded_call(event: &AuditEvent) -> Option<RecordedCall> {
    let kind = event.metadata.get("call_kind").and_then(Value::as_str);
    if event.kind != TOOL_CALL || kind != Some(CALL_KIND_EXECUTION) {
        return None;
    }
    let result: Option<ToolResult> = event.result.clone().and_then(|r| serde_json::from_value(r).ok());
    let tool = event.metadata.get("tool").and_then(Value::as_str)?.to_string();
    Some(RecordedCall {
        tool,
        arguments: event.arguments.clone().unwrap_or(Value::Null),
        output: result.as_ref().and_then(|r| r.output.clone()),
        error: result.and_then(|r| r.error),
    })
}

/// The catalog's skills; a selected skill whose content changed since the Run keeps
/// the recorded hash and no content.
fn skills(catalog: &BTreeMap<String, SkillEntry>, selected: &[SkillVersion]) -> Vec<CaseSkill> {
    let mut skills: Vec<CaseSkill> = catalog
        .values()
        .map(|skill| CaseSkill {
            name: skill.name.clone(),
            sha256: skill.sha256.clone(),
            description: skill.description.clone(),
            selectors: skill.selectors.iter().cloned().collect(),
            content: Some(skill.content.to_string()),
        })
        .collect();
    for ran in selected {
        match skills.iter_mut().find(|s| s.name == ran.name) {
            Some(skill) if skill.sha256 == ran.sha256 => {}
            Some(skill) => {
                skill.sha256 = ran.sha256.clone();
                skill.content = None;
            }
            None => skills.push(CaseSkill {
                name: ran.name.clone(),
                sha256: ran.sha256.clone(),
                description: None,
                selectors: Vec::new(),
                content: None,
            }),
        }
    }
    skills
}

/// The tools offered now, plus any tool the Run called that is no longer offered
/// (any object arguments, so its recorded calls still replay); all read-only, as a
/// Run's catalog only holds read tools.
fn tools(registry: &Registry, calls: &[RecordedCall]) -> Vec<CaseTool> {
    let mut tools: Vec<CaseTool> = registry
        .definitions()
        .into_iter()
        .map(|spec| CaseTool {
            name: spec.name.as_str().to_string(),
            description: spec.description.clone(),
            input_schema: spec.input_schema.clone(),
            read_only: true,
        })
        .collect();
    for call in calls {
        if !tools.iter().any(|t| t.name == call.tool) && crate::tools::ToolName::try_from(call.tool.as_str()).is_ok() {
            tools.push(CaseTool {
                name: call.tool.clone(),
                description: "A tool the Run called that the catalog no longer offers.".into(),
                input_schema: serde_json::json!({"type": "object"}),
                read_only: true,
            });
        }
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change preview replayed would be answered as a chat and compared as one ("same as
    /// recorded" about something else): it is refused, with what to do instead.
    #[test]
    fn a_change_run_is_not_exported_as_a_case_a_chat_is() {
        let run = |source: &str| RunRecord::finished("default", source, "ops");
        let tools = crate::tools::RegistryBuilder::new(crate::tools::ToolLimits::default()).build();
        let catalog = ExportCatalog { tools: &tools, skills: &BTreeMap::new(), version: 1 };
        for source in ["change_preview", "change_apply"] {
            let error = export(&run(source), &catalog).unwrap_err();
            assert_eq!(error.code(), "not_replayable");
            assert!(error.to_string().contains("akritas change simulate"), "{error}");
        }
        let mut case = export(&run("chat"), &catalog).unwrap();
        // A case an older version exported from a change preview is refused by the replay.
        case.origin.as_mut().unwrap().source = "change_preview".into();
        let refused = case.check().unwrap_err();
        assert!(refused.to_string().contains("akritas change simulate"), "{refused}");
    }
}
