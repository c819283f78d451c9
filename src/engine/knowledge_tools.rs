//! `knowledge.list_skills` and `knowledge.load_skill`: the fallback when the
//! inventory does not make the right skill obvious. Loading a skill injects its
//! guidance into the system message; it never adds a tool and is not evidence.

use crate::tenancy::Scope;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::retrieval::{Retriever, SEARCH_TOOL};
use super::skills::{RunSkills, SkillEntry};
use crate::resources::mcp_adapter::Permission;
use crate::tools::{RegistryBuilder, RegistryError, ToolFuture, ToolHandler, ToolLimits, ToolName, ToolSpec};

/// Host name of the list tool.
pub const LIST_SKILLS: &str = "knowledge.list_skills";
/// Host name of the load tool.
pub const LOAD_SKILL: &str = "knowledge.load_skill";
/// Most hits one search may ask for.
pub const MAX_TOP_K: u64 = 20;

/// Whether `name` is one of the host's knowledge tools: guidance, never evidence.
pub fn is_knowledge_tool(name: &str) -> bool {
    [SEARCH_TOOL, LIST_SKILLS, LOAD_SKILL].contains(&name)
}

/// Registers `knowledge.search` over the knowledge bases the Run's scope sees.
pub fn register_search(
    builder: &mut RegistryBuilder,
    retriever: Arc<dyn Retriever>,
    scope: Scope,
    default_top_k: usize,
) -> Result<(), RegistryError> {
    builder.register(
        spec(
            SEARCH_TOOL,
            "Search the operators' runbooks (BM25). Returns title, source, url, score and an excerpt per hit. Runbooks \
             are guidance written by people, not evidence about the current state and not authority.",
            json!({"type": "object", "required": ["query"], "additionalProperties": false, "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 1024},
                "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K}
            }}),
        )?,
        Arc::new(move |arguments: Value| -> ToolFuture {
            let retriever = retriever.clone();
            let scope = scope.clone();
            Box::pin(async move {
                let query = arguments.get("query").and_then(Value::as_str).unwrap_or_default().to_string();
                let top_k = arguments.get("top_k").and_then(Value::as_u64).map_or(default_top_k, |k| k as usize);
                let found = retriever.search(&scope, &query, top_k).await.map_err(|e| e.to_string())?;
                Ok(found.output.to_string())
            })
        }) as Arc<dyn ToolHandler>,
    )
}

/// Registers both tools for one Run, bound to its skill state.
pub fn register(
    builder: &mut RegistryBuilder,
    skills: Arc<BTreeMap<String, SkillEntry>>,
    state: RunSkills,
) -> Result<(), RegistryError> {
    let names: Vec<&String> = skills.keys().collect();
    let listed: Vec<Value> = skills.values().map(|s| json!({"name": s.name, "description": s.description})).collect();
    let list_output = json!({ "skills": listed }).to_string();
    builder.register(
        spec(
            LIST_SKILLS,
            "List the operational skills the host can load (names and descriptions only).",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        )?,
        Arc::new(move |_arguments: Value| -> ToolFuture {
            let output = list_output.clone();
            Box::pin(async move { Ok(output) })
        }) as Arc<dyn ToolHandler>,
    )?;
    builder.register(
        spec(
            LOAD_SKILL,
            "Load one operational skill by its exact name; its guidance is added to the instructions. Not evidence.",
            json!({"type": "object", "required": ["name"], "additionalProperties": false,
                   "properties": {"name": {"type": "string", "enum": names}}}),
        )?,
        Arc::new(move |arguments: Value| -> ToolFuture {
            let skills = skills.clone();
            let state = state.clone();
            Box::pin(async move {
                let name = arguments.get("name").and_then(Value::as_str).unwrap_or_default();
                let skill = skills.get(name).ok_or_else(|| format!("unknown skill {name:?}"))?;
                state.add(skill).map_err(|e| e.to_string())?;
                Ok(json!({"loaded": true, "name": skill.name, "source": skill.source}).to_string())
            })
        }) as Arc<dyn ToolHandler>,
    )?;
    Ok(())
}

fn spec(name: &str, description: &str, schema: Value) -> Result<ToolSpec, RegistryError> {
    Ok(ToolSpec {
        name: ToolName::try_from(name)?,
        description: description.to_string(),
        permission: Permission::Read,
        input_schema: schema,
        timeout: Duration::from_secs(5),
    })
}

/// Limits used for the per-Run knowledge registry.
pub fn limits() -> ToolLimits {
    ToolLimits::default()
}
