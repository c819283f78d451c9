//! Host-side submit tools (the plan, the structured result): asked for through the
//! structured-step port (a forced call, or a JSON answer the port turns into one)
//! and never executed. The call's arguments are the payload, which the host
//! validates itself.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::llm::structured::Step;
use crate::llm::{Message, ToolCall};
use crate::resources::mcp_adapter::Permission;
use crate::tools::{Registry, RegistryBuilder, RegistryError, ToolFuture, ToolHandler, ToolLimits, ToolName, ToolSpec};

/// A registry holding only the submit tool `name` with its input `schema`.
pub fn registry(name: &str, description: &str, schema: Value) -> Result<Registry, RegistryError> {
    let mut builder = RegistryBuilder::new(ToolLimits::default());
    let spec = ToolSpec {
        name: ToolName::try_from(name)?,
        description: description.into(),
        permission: Permission::Read,
        input_schema: schema,
        timeout: Duration::from_secs(1),
    };
    let handler: Arc<dyn ToolHandler> =
        Arc::new(|_arguments: Value| -> ToolFuture { Box::pin(async { Ok("{}".to_string()) }) });
    builder.register(spec, handler)?;
    Ok(builder.build())
}

/// The structured step asking for the submit tool `name`, and the tool's OpenAI alias
/// (the name the submission comes back under).
pub fn step(
    name: &str,
    description: &str,
    schema: Value,
    messages: Vec<Message>,
    max_tokens: u32,
) -> Result<(Step, String), RegistryError> {
    let registry = registry(name, description, schema)?;
    let definition = registry.definitions().into_iter().next().expect("the registry holds the submit tool");
    let alias = registry.alias_of(name).unwrap_or_default();
    let step = Step {
        messages,
        name: alias.clone(),
        description: description.to_string(),
        schema: definition.input_schema.clone(),
        grammar: None,
        max_tokens,
        temperature: Some(0.0),
    };
    Ok((step, alias))
}

/// The submission of a forced call: the model's only call, when it is the
/// submit tool (by its OpenAI `alias`).
pub fn sole_submission<'a>(calls: &'a [ToolCall], alias: &str) -> Option<&'a ToolCall> {
    match calls {
        [call] if call.function.name == alias => Some(call),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_registry_offers_exactly_the_submit_tool() {
        let tools = registry("local.test.submit", "Submit.", json!({"type": "object"})).unwrap();
        assert_eq!(tools.definitions().len(), 1);
        assert!(tools.alias_of("local.test.submit").is_some());
        assert!(registry("not a name", "Submit.", json!({"type": "object"})).is_err());
    }

    #[test]
    fn only_a_single_call_of_the_submit_tool_is_a_submission() {
        let submit = ToolCall::function("call_1", "submit", "{}");
        let other = ToolCall::function("call_2", "inventory_host", "{}");
        assert_eq!(sole_submission(std::slice::from_ref(&submit), "submit"), Some(&submit));
        assert_eq!(sole_submission(&[], "submit"), None);
        assert_eq!(sole_submission(std::slice::from_ref(&other), "submit"), None);
        assert_eq!(sole_submission(&[submit.clone(), submit.clone()], "submit"), None);
        assert_eq!(sole_submission(&[submit, other], "submit"), None);
    }
}
