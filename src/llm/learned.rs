//! What servers refuse, and what a client learned about each model it asked: the structured mode
//! its steps start with (for `model_protocol: auto`: what the server identification said, else the
//! mode that answered) and whether the server refused `tools` for it. Ollama answers any
//! request carrying `tools` with HTTP 400 "… does not support tools" when the model's template
//! has none; from then on the client sends no tools for that model, and the conversation's tool
//! exchanges go as plain turns ([`flatten`]) so the model still reads what the host ran.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;
use serde_json::Value;

use super::protocol::{Mode, ModeSource, Protocol};
use super::server::ServerFacts;
use super::wire::{Message, Role};

/// At most this many models are remembered (a client talks to one or a few).
const MAX_MODELS: usize = 64;

/// What is known of one model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ModelFacts {
    /// The structured mode its steps start with: the one that last answered, or the one the
    /// server identification chose.
    pub mode: Option<Mode>,
    /// Where `mode` comes from.
    pub source: Option<ModeSource>,
    /// The server refused `tools` for this model (or says it would).
    pub tools_refused: bool,
}

impl ModelFacts {
    /// These facts as they hold under `protocol`: a fixed protocol's mode is the setting's.
    pub fn under(self, protocol: Protocol) -> Self {
        match protocol {
            Protocol::Auto => self,
            Protocol::Fixed(mode) => Self { mode: Some(mode), source: Some(ModeSource::Setting), ..self },
        }
    }

    /// Takes what the server identification says: a model without tools refuses them, and the
    /// server's start mode stands unless a mode was learned already.
    pub(crate) fn seed(&mut self, server: ServerFacts) {
        self.tools_refused |= server.refuses_tools();
        if self.mode.is_none()
            && let Some(mode) = server.start_mode()
        {
            self.mode = Some(mode);
            self.source = Some(ModeSource::Probe);
        }
    }
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

/// Phrases (lower-case) by which servers say a request field is not accepted.
const UNSUPPORTED_PHRASES: &[&str] = &[
    "unsupported parameter",
    "not supported",
    "unknown parameter",
    "unrecognized parameter",
    "extra fields not permitted",
    "extra inputs are not permitted",
];

/// Does this 400/422 body say that `field` is not accepted?
pub(crate) fn rejects_parameter(body: &[u8], field: &str) -> bool {
    let text = String::from_utf8_lossy(body);
    let (message, param, code) = match serde_json::from_str::<Value>(&text) {
        Ok(value) => envelope_fields(&value),
        Err(_) => (None, None, None),
    };
    // Without a structured message (non-JSON body, FastAPI `detail`, ...), look at the whole body.
    let message = message.unwrap_or_else(|| text.to_string());
    // A `param` names the field authoritatively (OpenAI's message also mentions the replacement field).
    let names_field = match param.as_deref() {
        Some(param) if !param.is_empty() => param == field,
        _ => message.contains(field),
    };
    let lower = message.to_lowercase();
    let says_unsupported = code.as_deref() == Some("unsupported_parameter")
        || UNSUPPORTED_PHRASES.iter().any(|phrase| lower.contains(phrase));
    names_field && says_unsupported
}

/// `(message, param, code)` of `{"error":{..}}`, `{"error":"text"}` or a top-level `{"message":..}`.
fn envelope_fields(value: &Value) -> (Option<String>, Option<String>, Option<String>) {
    let target = match value.get("error") {
        Some(Value::String(message)) => return (Some(message.clone()), None, None),
        Some(error @ Value::Object(_)) => error,
        _ => value,
    };
    let field = |key: &str| target.get(key).and_then(Value::as_str).map(str::to_owned);
    (field("message"), field("param"), field("code"))
}

/// Does this error body say that the model does not support tools (Ollama's wording, and
/// llama-server's without `--jinja`)?
pub(crate) fn refuses_tools(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body).to_ascii_lowercase();
    text.contains("does not support tools") || text.contains("tools param requires")
}

/// The conversation without tool-call turns: a call becomes assistant text, its result a user
/// turn that names the tool and call in a line of its own and then gives the output as it is
/// (`[output of pod_status, call call-1]`), so a model served without tools reads both, and the
/// output is not wrapped in text a model could mistake for part of it.
pub fn flatten(messages: &[Message]) -> Vec<Message> {
    let mut tools = std::collections::BTreeMap::new();
    messages
        .iter()
        .map(|message| match message.role {
            Role::Assistant if !message.tool_calls.is_empty() => {
                let mut text: Vec<String> = message.content.iter().filter(|c| !c.is_empty()).cloned().collect();
                text.extend(message.tool_calls.iter().map(|call| {
                    tools.insert(call.id.clone(), call.function.name.clone());
                    format!("Called {} with {} (call {}).", call.function.name, call.function.arguments, call.id)
                }));
                Message::assistant(text.join("\n"))
            }
            Role::Tool => {
                let id = message.tool_call_id.as_deref().unwrap_or("?");
                let tool = tools.get(id).map_or("a tool", String::as_str);
                Message::user(format!(
                    "[output of {tool}, call {id}]\n{}",
                    message.content.as_deref().unwrap_or_default()
                ))
            }
            _ => message.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;
    use serde_json::json;

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
        assert_eq!(flat[3], Message::user("[output of pod_status, call call-1]\n{\"phase\":\"Running\"}"));
        assert!(flat.iter().all(|m| m.tool_calls.is_empty() && m.role != Role::Tool));
    }

    #[test]
    fn parameter_rejection_detection() {
        let openai = json!({"error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"
        }})
        .to_string();
        assert!(rejects_parameter(openai.as_bytes(), "max_tokens"));
        assert!(!rejects_parameter(openai.as_bytes(), "max_completion_tokens"));

        let by_code =
            json!({"error": {"message": "bad", "param": "max_completion_tokens", "code": "unsupported_parameter"}});
        assert!(rejects_parameter(by_code.to_string().as_bytes(), "max_completion_tokens"));

        let string_error = json!({"error": "Unrecognized parameter max_completion_tokens"});
        assert!(rejects_parameter(string_error.to_string().as_bytes(), "max_completion_tokens"));

        let vllm = json!({"object": "error", "type": "BadRequestError", "code": 400,
            "message": "max_completion_tokens: Extra inputs are not permitted"});
        assert!(rejects_parameter(vllm.to_string().as_bytes(), "max_completion_tokens"));

        let fastapi =
            json!({"detail": [{"loc": ["body", "max_completion_tokens"], "msg": "Extra inputs are not permitted"}]});
        assert!(rejects_parameter(fastapi.to_string().as_bytes(), "max_completion_tokens"));

        assert!(rejects_parameter(b"unknown parameter: max_tokens", "max_tokens"));

        let unrelated = json!({"error": {"message": "max_tokens must be at most 4096", "param": "max_tokens"}});
        assert!(!rejects_parameter(unrelated.to_string().as_bytes(), "max_tokens"));
        let other_field = json!({"error": {"message": "Unsupported parameter: 'temperature'", "param": "temperature"}});
        assert!(!rejects_parameter(other_field.to_string().as_bytes(), "max_tokens"));
        assert!(!rejects_parameter(b"", "max_tokens"));
    }

    #[test]
    fn refusals_of_tools_are_recognised() {
        let ollama = br#"{"error":{"message":"registry.ollama.ai/library/smollm2:latest does not support tools","type":"api_error","param":null,"code":null}}"#;
        assert!(refuses_tools(ollama));
        assert!(refuses_tools(br#"{"error":{"code":500,"message":"tools param requires --jinja flag"}}"#));
        assert!(!refuses_tools(br#"{"error":{"message":"max_tokens is too large"}}"#));
    }

    #[test]
    fn the_server_identification_seeds_what_nothing_taught_yet() {
        use crate::llm::server::ServerKind;
        let ollama = |tools| ServerFacts { kind: ServerKind::Ollama, tools };
        let mut facts = ModelFacts::default();
        facts.seed(ollama(Some(false)));
        let seeded = ModelFacts { mode: Some(Mode::JsonSchema), source: Some(ModeSource::Probe), tools_refused: true };
        assert_eq!(facts, seeded);
        let mut facts = ModelFacts::default();
        facts.seed(ollama(Some(true)));
        assert_eq!((facts.mode, facts.tools_refused), (Some(Mode::JsonSchema), false), "tools stay allowed");
        let mut facts = ModelFacts::default();
        facts.seed(ServerFacts { kind: ServerKind::Other, tools: None });
        assert_eq!(facts, ModelFacts::default(), "an unknown server seeds nothing");
        // A mode a fallback taught stands; a refusal of tools is always news.
        let learned =
            ModelFacts { mode: Some(Mode::JsonObject), source: Some(ModeSource::Fallback), tools_refused: false };
        let mut facts = learned;
        facts.seed(ollama(Some(false)));
        assert_eq!(facts, ModelFacts { tools_refused: true, ..learned });
    }

    #[test]
    fn models_are_remembered_apart_and_bounded() {
        let learned = Learned::default();
        learned.update("a", |f| f.tools_refused = true);
        learned.update("b", |f| f.mode = Some(Mode::JsonSchema));
        assert_eq!(learned.get("a"), ModelFacts { mode: None, source: None, tools_refused: true });
        assert_eq!(learned.get("b").mode, Some(Mode::JsonSchema));
        for n in 0..100 {
            learned.update(&format!("m{n}"), |f| f.tools_refused = true);
        }
        assert_eq!(learned.lock().len(), MAX_MODELS);
        assert!(learned.get("a").tools_refused, "known models keep their facts");
    }
}
