//! `knowledge.list_skills` and `knowledge.load_skill`: the fallback when the
//! inventory does not make the right skill obvious. Loading a skill injects its
//! guidance into the system message; it never adds a tool and is not evidence.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::skills::{RunSkills, SkillEntry};
use crate::tools::{
    Permission, RegistryBuilder, RegistryError, ToolFuture, ToolHandler, ToolLimits, ToolName, ToolSpec,
};

/// Host name of the list tool.
pub const LIST_SKILLS: &str = "knowledge.list_skills";
/// Host name of the load tool.
pub const LOAD_SKILL: &str = "knowledge.load_skill";

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
                state.add(skill)?;
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
