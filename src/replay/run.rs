//! Replaying a case: the real engine, with the case's input, tools answered from
//! the recording, the skills of the case (or of a skills directory) and whatever
//! model and SYSTEM.md the caller's model client carries. The outcome names the
//! versions that ran and compares itself with what the case expects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};

use super::case::{Case, CaseError, CaseSkill, SkillVersion};
use super::protocol::{Protocol, protocol};
use super::recorded::{Recording, RecordingError, is_not_found};
use crate::catalog::CatalogStore;
use crate::catalog::directory::problem_lines;
use crate::catalog::merge::{self, LastGood};
use crate::catalog::scan::{Scan, cross_check, scan_value};
use crate::catalog::skills_dir::NAMESPACE;
use crate::catalog::status::StatusBoard;
use crate::engine::budget::BudgetUsage;
use crate::engine::knowledge_tools::is_knowledge_tool;
use crate::engine::plan::PLAN_TOOL;
use crate::engine::record::canonical_json;
use crate::engine::request::{Activity, EngineSettings, RunRequest};
use crate::engine::run::Engine;
use crate::engine::skills::skills_of;
use crate::investigation::InvestigationResult;
use crate::llm::LlmClient;
use crate::resources::API_VERSION;
use crate::tenancy::Tenancy;

/// Which skills a replay runs with.
#[derive(Clone, Debug)]
pub enum SkillSource {
    /// The skills recorded in the case.
    Case,
    /// A skills directory (`<dir>/<name>/SKILL.md`), e.g. a changed version.
    Directory(PathBuf),
}

/// Why a case could not be replayed (a Run that fails is an outcome, not this).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The case is not usable.
    #[error(transparent)]
    Case(#[from] CaseError),
    /// Its tools could not be built.
    #[error(transparent)]
    Tools(#[from] RecordingError),
    /// Its skills (or the skills directory) do not load.
    #[error("skills do not load: {0}")]
    Skills(String),
}

/// One tool call of the replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayedCall {
    /// Host tool name.
    pub tool: String,
    /// Arguments (`null`: refused before the tool ran).
    pub arguments: Value,
    /// `ok` or the error code.
    pub status: String,
    /// Whether the recording answered it (`false`: "not found").
    pub recorded: bool,
}

/// How the replay compares with the case's expectations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Comparison {
    /// Same tool calls (names and arguments) in the same order as recorded.
    pub same_tool_calls: bool,
    /// Same skills selected, same versions.
    pub same_skills: bool,
    /// Same status (and error code).
    pub same_status: bool,
    /// Same structured result (when the case has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_investigation: Option<bool>,
}

/// What a replay did.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayOutcome {
    /// The case's name.
    pub case: String,
    /// Model id that answered.
    pub model: Option<String>,
    /// How the Run's last structured step was asked for (`tool_call`, `json_schema`,
    /// `json_object`, `text`; absent before its first one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_protocol: Option<String>,
    /// SHA-256 of the SYSTEM.md the model requests carried.
    pub instructions_sha256: Option<String>,
    /// `succeeded` or `failed`.
    pub status: String,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Stable failure code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The tool calls through the case's tools (not the plan submission or knowledge tools), in order.
    pub tool_calls: Vec<ReplayedCall>,
    /// Calls the recording could not answer.
    pub unknown_calls: usize,
    /// Skills selected, with the version (hash) that ran.
    pub skills: Vec<SkillVersion>,
    /// The structured result, when the case asks for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub investigation: Option<InvestigationResult>,
    /// Budget usage (model calls, tokens, tool calls).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<BudgetUsage>,
    /// How the plan and the result steps ended.
    pub protocol: Protocol,
    /// Against the case.
    pub comparison: Comparison,
}

/// Replays `case` on `llm` within `settings`.
pub async fn replay(
    case: &Case,
    llm: LlmClient,
    settings: EngineSettings,
    skills: &SkillSource,
) -> Result<ReplayOutcome, ReplayError> {
    case.check()?;
    let turns = case.turns()?;
    if turns.is_empty() {
        return Err(CaseError::NoInput.into());
    }
    let recording = Recording::new(&case.calls);
    let tools = recording.registry(&case.tools)?;
    let catalog = match skills {
        SkillSource::Case => catalog_of_case(&case.skills)?,
        SkillSource::Directory(dir) => catalog_of_directory(dir)?,
    };
    let versions: BTreeMap<String, String> = skills_of(&catalog.current(), &Tenancy::default().scope(NAMESPACE))
        .into_values()
        .map(|skill| (skill.name, skill.sha256))
        .collect();
    let instructions_sha256 = llm.system_instructions_sha256();
    let engine = Engine::new(settings, llm, tools, None, catalog, None);
    let request = RunRequest {
        namespace: NAMESPACE.into(),
        source: "replay".into(),
        actor: "replay".into(),
        turns,
        context: case.input.context.clone(),
        investigate: case.input.investigate,
        at: case.at(),
        ..RunRequest::default()
    };
    let result = engine.run_traced(request).await;
    let steps = protocol(&result, case.input.investigate);
    let mut outcome = ReplayOutcome {
        case: case.name.clone(),
        model: None,
        model_protocol: None,
        instructions_sha256,
        status: "succeeded".into(),
        error: None,
        error_code: None,
        answer: None,
        tool_calls: Vec::new(),
        unknown_calls: recording.unknown_calls(),
        skills: Vec::new(),
        investigation: None,
        usage: None,
        protocol: steps,
        comparison: Comparison {
            same_tool_calls: false,
            same_skills: false,
            same_status: false,
            same_investigation: None,
        },
    };
    match result {
        Ok(run) => {
            outcome.tool_calls = replayed_calls(&run.activity);
            outcome.skills = run
                .skills
                .iter()
                .map(|name| SkillVersion {
                    name: name.clone(),
                    sha256: versions.get(name).cloned().unwrap_or_default(),
                })
                .collect();
            outcome.model = Some(run.model);
            outcome.model_protocol = run.model_protocol;
            outcome.answer = Some(run.answer);
            outcome.investigation = run.investigation;
            outcome.usage = Some(run.usage);
        }
        Err(failed) => {
            outcome.status = "failed".into();
            outcome.error_code = Some(failed.error.code().to_string());
            outcome.error = Some(failed.error.to_string());
            outcome.tool_calls = replayed_calls(&failed.activity);
            outcome.usage = failed.usage;
            outcome.model = failed.model;
            outcome.model_protocol = failed.model_protocol;
        }
    }
    outcome.comparison = compare(case, &outcome);
    Ok(outcome)
}

/// The calls a Run made through the case's tools (not the plan or runbook search).
fn replayed_calls(activity: &[Activity]) -> Vec<ReplayedCall> {
    activity
        .iter()
        .filter(|a| !is_knowledge_tool(&a.name) && a.name != PLAN_TOOL)
        .map(|a| ReplayedCall {
            tool: a.name.clone(),
            arguments: a.arguments.clone(),
            status: a.status.clone(),
            recorded: !a.result.error.as_ref().is_some_and(|e| is_not_found(&a.name, &e.message)),
        })
        .collect()
}

/// The replay against the case's expectations.
fn compare(case: &Case, outcome: &ReplayOutcome) -> Comparison {
    let key = |tool: &str, arguments: &Value| (tool.to_string(), canonical_json(arguments));
    let recorded: Vec<_> = case.calls.iter().map(|c| key(&c.tool, &c.arguments)).collect();
    let replayed: Vec<_> = outcome.tool_calls.iter().map(|c| key(&c.tool, &c.arguments)).collect();
    let expected = &case.expected;
    Comparison {
        same_tool_calls: recorded == replayed,
        same_skills: expected.skills == outcome.skills,
        same_status: expected.status.as_deref().is_none_or(|s| s == outcome.status)
            && expected.error_code == outcome.error_code,
        same_investigation: expected.investigation.as_ref().map(|i| Some(i) == outcome.investigation.as_ref()),
    }
}

/// A Catalog holding the case's skills, validated like any `Skill` resource.
fn catalog_of_case(skills: &[CaseSkill]) -> Result<CatalogStore, ReplayError> {
    let mut scan = Scan::default();
    for (index, skill) in skills.iter().enumerate() {
        // A name qualified by its namespace (`ops/postgres`) keeps its own name.
        let name = skill.name.rsplit('/').next().unwrap_or(&skill.name);
        let content = skill.content.as_deref().ok_or_else(|| {
            ReplayError::Skills(format!(
                "skill {} has no content in the case (it changed since the Run; only its hash {} is known): \
                 replay with a skills directory",
                skill.name, skill.sha256
            ))
        })?;
        let mut spec = json!({"content": content});
        if let Some(description) = &skill.description {
            spec["description"] = json!(description);
        }
        if !skill.selectors.is_empty() {
            spec["match"] = json!(skill.selectors);
        }
        let manifest = json!({
            "apiVersion": API_VERSION, "kind": "Skill",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec,
        });
        scan_value(manifest, Path::new("case.skills"), index, &mut scan);
    }
    cross_check(&mut scan);
    publish(scan)
}

/// A Catalog holding the skills of a directory.
fn catalog_of_directory(dir: &Path) -> Result<CatalogStore, ReplayError> {
    if !dir.is_dir() {
        return Err(ReplayError::Skills(format!("{} is not a directory", dir.display())));
    }
    let scan = crate::catalog::directory::scan(&[], Some(dir));
    publish(scan)
}

/// The scanned skills as a Catalog, when every one of them is valid.
fn publish(scan: Scan) -> Result<CatalogStore, ReplayError> {
    let problems = problem_lines(&scan);
    if !problems.is_empty() {
        return Err(ReplayError::Skills(problems.join("; ")));
    }
    let store = CatalogStore::new();
    merge::apply(LastGood::default().merge(scan), &store, &StatusBoard::default());
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_skills_become_catalog_skills_with_the_same_hash() {
        let content = "Check the processes first.";
        let sha = {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(content.as_bytes()))
        };
        let skill = CaseSkill {
            name: "ops/postgresql".into(),
            sha256: sha.clone(),
            description: Some("Postgres".into()),
            selectors: vec!["postgresql".into()],
            content: Some(content.into()),
        };
        let store = catalog_of_case(std::slice::from_ref(&skill)).unwrap();
        let skills = skills_of(&store.current(), &Tenancy::default().scope(NAMESPACE));
        assert_eq!(skills["postgresql"].sha256, sha);
        let changed = CaseSkill { content: None, ..skill };
        let error = catalog_of_case(&[changed]).err().unwrap().to_string();
        assert!(error.contains("replay with a skills directory"), "{error}");
    }
}
