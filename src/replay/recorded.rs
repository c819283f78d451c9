//! Tools answered from a recording: a call is matched by tool name and canonical
//! arguments; the same call recorded twice is answered in order; a call nobody
//! recorded gets a tool error "not recorded" and is counted. Nothing reaches a real
//! system, so a replay is offline and deterministic on the tool side.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::case::{CaseTool, RecordedCall};
use crate::engine::record::canonical_json;
use crate::resources::mcp_adapter::Permission;
use crate::tools::{Registry, RegistryBuilder, RegistryError, ToolFuture, ToolHandler, ToolLimits, ToolName, ToolSpec};

/// Start of the error a call nobody recorded gets.
pub const NOT_RECORDED: &str = "not recorded";

/// Recorded answers still to give, by tool and canonical arguments.
type Answers = BTreeMap<(String, String), VecDeque<Result<String, String>>>;

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

impl Recording {
    /// The recorded answers of `calls` (a call the host refused before the tool ran has none).
    pub fn new(calls: &[RecordedCall]) -> Self {
        let mut answers = Answers::new();
        for call in calls.iter().filter(|c| c.arguments.is_object()) {
            let answer = match (&call.output, &call.error) {
                (Some(output), _) => Ok(output.to_string()),
                (None, Some(error)) => Err(error.message.clone()),
                (None, None) => Ok(Value::Null.to_string()),
            };
            answers.entry((call.tool.clone(), canonical_json(&call.arguments))).or_default().push_back(answer);
        }
        Self { answers: Arc::new(Mutex::new(answers)), unknown: Arc::default() }
    }

    /// Calls answered "not recorded" so far.
    pub fn unknown_calls(&self) -> usize {
        self.unknown.load(Ordering::SeqCst)
    }

    /// The next recorded answer of this call.
    fn answer(&self, tool: &str, arguments: &Value) -> Result<String, String> {
        let key = (tool.to_string(), canonical_json(arguments));
        let next = self.answers.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&key).and_then(VecDeque::pop_front);
        next.unwrap_or_else(|| {
            self.unknown.fetch_add(1, Ordering::SeqCst);
            Err(format!("{NOT_RECORDED}: the case has no (further) call of {tool} with these arguments"))
        })
    }

    /// The case's tools (read-only), each answering from this recording.
    pub fn registry(&self, tools: &[CaseTool]) -> Result<Registry, RecordingError> {
        let mut builder = RegistryBuilder::new(ToolLimits::default());
        for (index, tool) in tools.iter().enumerate() {
            let name = ToolName::try_from(tool.name.as_str())
                .map_err(|_| RecordingError::Name { index, name: tool.name.clone() })?;
            let spec = ToolSpec::new(name, tool.description.clone(), Permission::Read, tool.input_schema.clone());
            let (recording, tool) = (self.clone(), tool.name.clone());
            let handler: Arc<dyn ToolHandler> = Arc::new(move |arguments: Value| -> ToolFuture {
                let answer = recording.answer(&tool, &arguments);
                Box::pin(async move { answer })
            });
            builder.register(spec, handler)?;
        }
        Ok(builder.build())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::{AllowAll, ToolCall};

    fn call(tool: &str, arguments: Value, output: Value) -> RecordedCall {
        RecordedCall { tool: tool.into(), arguments, output: Some(output), error: None }
    }

    #[tokio::test]
    async fn calls_are_matched_by_canonical_arguments_in_order_and_unknown_ones_counted() {
        let calls = [
            call("metrics.query", json!({"q": "up", "step": 60}), json!({"n": 1})),
            call("metrics.query", json!({"step": 60, "q": "up"}), json!({"n": 2})),
        ];
        let tools = [CaseTool {
            name: "metrics.query".into(),
            description: "Query.".into(),
            input_schema: json!({"type": "object"}),
        }];
        let recording = Recording::new(&calls);
        let registry = recording.registry(&tools).unwrap();
        let run = |arguments: &str| {
            let call = ToolCall { id: "c1".into(), name: "metrics.query".into(), arguments: arguments.into() };
            let registry = registry.clone();
            async move { registry.execute(&call, &AllowAll).await }
        };
        assert_eq!(run(r#"{"step":60,"q":"up"}"#).await.output, Some(json!({"n": 1})));
        assert_eq!(run(r#"{"q":"up","step":60}"#).await.output, Some(json!({"n": 2})));
        let third = run(r#"{"q":"up","step":60}"#).await;
        assert!(third.error.unwrap().message.starts_with(NOT_RECORDED));
        assert_eq!(recording.unknown_calls(), 1);
    }
}
