//! What a client learned about each model it asked: the structured mode that answered (for
//! `model_protocol: auto`) and whether the server refused `tools` for it. Ollama answers any
//! request carrying `tools` with HTTP 400 "… does not support tools" when the model's template
//! has none; from then on the client sends no tools for that model, and the conversation's tool
//! exchanges go as plain turns ([`flatten`]) so the model still reads what the host ran.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

use super::structured::Mode;
use super::wire::{Message, Role};

/// At most this many models are remembered (a client talks to one or a few).
const MAX_MODELS: usize = 64;

/// What is known of one model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ModelFacts {
    /// The structured mode that last answered, once one did.
    pub mode: Option<Mode>,
    /// The server refused `tools` for this model.
    pub tools_refused: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Learned {
    by_model: Mutex<BTreeMap<String, ModelFacts>>,
}

impl Learned {
    pub(crate) fn get(&self, model: &str) -> ModelFacts {
        self.lock().get(model).copied().unwrap_or_default()
    }

    pub(crate) fn update(&self, model: &str, change: impl FnOnce(&mut ModelFacts)) {
        let mut map = self.lock();
        if !map.contains_key(model) && map.len() >= MAX_MODELS {
            return;
        }
        change(map.entry(model.to_string()).or_default());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ModelFacts>> {
        self.by_model.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Does this error body say that the model does not support tools (Ollama's wording, and
/// llama-server's without `--jinja`)?
pub(crate) fn refuses_tools(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body).to_ascii_lowercase();
    text.contains("does not support tools") || text.contains("tools param requires")
}

/// The conversation without tool-call turns: a call becomes assistant text, its result a user
/// turn (`Tool result (call <id>):` then the result), so a model served without tools reads both.
pub fn flatten(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .map(|message| match message.role {
            Role::Assistant if !message.tool_calls.is_empty() => {
                let mut text: Vec<String> = message.content.iter().filter(|c| !c.is_empty()).cloned().collect();
                text.extend(message.tool_calls.iter().map(|call| {
                    format!("Called {} with {} (call {}).", call.function.name, call.function.arguments, call.id)
                }));
                Message::assistant(text.join("\n"))
            }
            Role::Tool => Message::user(format!(
                "Tool result (call {}):\n{}",
                message.tool_call_id.as_deref().unwrap_or("?"),
                message.content.as_deref().unwrap_or_default()
            )),
            _ => message.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    #[test]
    fn tool_turns_become_plain_turns() {
        let messages = vec![
            Message::system("s"),
            Message::user("why?"),
            Message::assistant_tool_calls(vec![ToolCall::function("call-1", "pod_status", r#"{"pod":"a"}"#)]),
            Message::tool("call-1", r#"{"phase":"Running"}"#),
        ];
        let flat = flatten(&messages);
        assert_eq!(flat[..2], messages[..2]);
        assert_eq!(flat[2], Message::assistant(r#"Called pod_status with {"pod":"a"} (call call-1)."#));
        assert_eq!(flat[3], Message::user("Tool result (call call-1):\n{\"phase\":\"Running\"}"));
        assert!(flat.iter().all(|m| m.tool_calls.is_empty() && m.role != Role::Tool));
    }

    #[test]
    fn refusals_of_tools_are_recognised() {
        let ollama = br#"{"error":{"message":"registry.ollama.ai/library/smollm2:latest does not support tools","type":"api_error","param":null,"code":null}}"#;
        assert!(refuses_tools(ollama));
        assert!(refuses_tools(br#"{"error":{"code":500,"message":"tools param requires --jinja flag"}}"#));
        assert!(!refuses_tools(br#"{"error":{"message":"max_tokens is too large"}}"#));
    }

    #[test]
    fn models_are_remembered_apart_and_bounded() {
        let learned = Learned::default();
        learned.update("a", |f| f.tools_refused = true);
        learned.update("b", |f| f.mode = Some(Mode::JsonSchema));
        assert_eq!(learned.get("a"), ModelFacts { mode: None, tools_refused: true });
        assert_eq!(learned.get("b").mode, Some(Mode::JsonSchema));
        for n in 0..100 {
            learned.update(&format!("m{n}"), |f| f.tools_refused = true);
        }
        assert_eq!(learned.lock().len(), MAX_MODELS);
        assert!(learned.get("a").tools_refused, "known models keep their facts");
    }
}
