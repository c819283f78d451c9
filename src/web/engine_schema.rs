//! JSON Schemas of the engine's wire types that the native API sends or reads.
//! The engine does not depend on the web layer, so the schemas are declared here;
//! each one denies unknown fields, so an engine type that gains a field fails the
//! drift test below (and schemathesis' response check) until it is described.

use schemars::JsonSchema;

/// One message of a conversation (`engine::conversation::Turn`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, rename = "Turn")]
#[allow(dead_code)]
pub(crate) struct TurnSchema {
    /// Who wrote it.
    role: SpeakerSchema,
    /// Text (not blank).
    #[schemars(regex(pattern = r"\S"))]
    content: String,
}

/// Who wrote a message.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Speaker")]
#[allow(dead_code)]
enum SpeakerSchema {
    /// Client-supplied context.
    System,
    /// The person.
    User,
    /// Earlier Akritas answers.
    Assistant,
}

/// The limits of one Run (`engine::budget::BudgetLimits`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, rename = "BudgetLimits")]
#[allow(dead_code)]
pub(crate) struct BudgetLimitsSchema {
    /// Wall time in milliseconds.
    max_duration_ms: u64,
    /// Model requests.
    max_model_calls: u32,
    /// Tool executions.
    max_tool_calls: u32,
    /// Serialized tool-result bytes.
    max_tool_result_bytes: u64,
    /// Retrieved runbook bytes.
    max_retrieved_context_bytes: u64,
    /// Estimated tokens of a single model request.
    max_context_tokens: u64,
    /// Output tokens over the Run.
    max_output_tokens: u64,
}

/// What a Run used (`engine::budget::BudgetUsage`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, rename = "BudgetUsage")]
#[allow(dead_code)]
pub(crate) struct BudgetUsageSchema {
    /// Elapsed milliseconds.
    duration_ms: u64,
    /// Model requests made.
    model_calls: u32,
    /// Tool executions.
    tool_calls: u32,
    /// Serialized tool-result bytes.
    tool_result_bytes: u64,
    /// Retrieved runbook bytes.
    retrieved_context_bytes: u64,
    /// Largest estimated request size in tokens.
    max_request_tokens: u64,
    /// Prompt tokens reported by the model server, summed.
    prompt_tokens: u64,
    /// Output tokens charged.
    output_tokens: u64,
    /// Completion tokens reported by the model server, summed.
    completion_tokens: u64,
}

/// A step no authorized tool can perform (`engine::plan::CapabilityGap`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, rename = "CapabilityGap")]
#[allow(dead_code)]
pub(crate) struct CapabilityGapSchema {
    /// The step.
    step: String,
    /// Dot-separated capability id, for example `kubernetes.pods.logs`.
    capability: String,
    /// Why it matters.
    reason: String,
}

/// What fitting the model's context window cut from a Run's requests
/// (`engine::fit::ContextCuts`), summed over the requests.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, rename = "ContextCuts")]
#[allow(dead_code)]
pub(crate) struct ContextCutsSchema {
    /// The smallest window, in tokens, the requests were fitted to.
    window: Option<u32>,
    /// Requests that were cut.
    fitted_requests: u32,
    /// Requests sent once more, smaller, after the server reported a context overflow.
    overflow_retries: u32,
    /// Retrieved runbook documents left out.
    runbook_documents: u32,
    /// Their bytes.
    runbook_bytes: u64,
    /// Tool results truncated.
    tool_results: u32,
    /// Bytes cut from them.
    tool_result_bytes: u64,
    /// Bytes cut from skill text.
    skill_bytes: u64,
    /// Tools not offered.
    tools: u32,
    /// Bytes of their schemas.
    tool_schema_bytes: u64,
    /// Bytes cut from the global system instructions (SYSTEM.md).
    instruction_bytes: u64,
    /// Tokens taken off the completion budget (`max_tokens`).
    completion_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::budget::{BudgetLimits, BudgetUsage};
    use crate::engine::conversation::{Speaker, Turn};
    use crate::engine::fit::ContextCuts;
    use crate::engine::plan::CapabilityGap;

    fn conforms<S: JsonSchema>(value: impl serde::Serialize) {
        let schema = schemars::schema_for!(S);
        let value = serde_json::to_value(value).unwrap();
        let validator = jsonschema::validator_for(&serde_json::to_value(&schema).unwrap()).unwrap();
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{value} does not match {}: {errors:?}", std::any::type_name::<S>());
    }

    #[test]
    fn engine_wire_types_match_their_schemas() {
        conforms::<TurnSchema>(Turn { role: Speaker::Assistant, content: "hi".into() });
        conforms::<BudgetLimitsSchema>(BudgetLimits {
            max_duration_ms: 1,
            max_model_calls: 2,
            max_tool_calls: 3,
            max_tool_result_bytes: 4,
            max_retrieved_context_bytes: 5,
            max_context_tokens: 6,
            max_output_tokens: 7,
        });
        conforms::<BudgetUsageSchema>(BudgetUsage { prompt_tokens: 3, ..BudgetUsage::default() });
        let cuts = crate::engine::fit::Cuts { tools: 2, completion_tokens: 9, ..Default::default() };
        let context = ContextCuts { window: Some(2048), fitted_requests: 1, overflow_retries: 1, cuts };
        conforms::<ContextCutsSchema>(context);
        conforms::<ContextCutsSchema>(ContextCuts::default());
        conforms::<CapabilityGapSchema>(CapabilityGap {
            step: "1".into(),
            capability: "kubernetes.pods.logs".into(),
            reason: "none".into(),
        });
    }

    #[test]
    fn a_field_the_schema_does_not_name_is_refused() {
        let schema = serde_json::to_value(schemars::schema_for!(CapabilityGapSchema)).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(!validator.is_valid(&serde_json::json!({"step": "a", "capability": "b", "reason": "c", "new": 1})));
    }
}
