//! OpenAI-compatible wire types (`/v1/chat/completions`).
//!
//! Serialization skips `None` fields; deserialization ignores unknown fields and tolerates the
//! common server quirks (`content: null`, content as an array of text parts, `tool_calls: null`,
//! tool-call arguments sent as a JSON object instead of a string).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Author of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One chat message, as sent to and received from the model server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "de_content")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "de_null_as_default")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    fn plain(role: Role, content: Option<String>) -> Self {
        Self { role, content, tool_calls: Vec::new(), tool_call_id: None, name: None }
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, Some(content.into()))
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, Some(content.into()))
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, Some(content.into()))
    }

    /// An assistant turn that only requests tool calls (`content` absent).
    pub fn assistant_tool_calls(tool_calls: Vec<ToolCall>) -> Self {
        Self { tool_calls, ..Self::plain(Role::Assistant, None) }
    }

    /// The result of the tool call `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self { tool_call_id: Some(call_id.into()), ..Self::plain(Role::Tool, Some(content.into())) }
    }
}

/// A tool call requested by the assistant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub id: String,
    #[serde(rename = "type", default = "function_kind", deserialize_with = "de_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

impl ToolCall {
    pub fn function(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall { name: name.into(), arguments: arguments.into() },
        }
    }
}

/// Function name plus its arguments as a JSON-encoded string (exactly as the model produced it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub name: String,
    #[serde(default, deserialize_with = "de_arguments")]
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionDefinition,
}

impl ToolDefinition {
    pub fn function(name: impl Into<String>, description: impl Into<String>, parameters: serde_json::Value) -> Self {
        Self {
            kind: function_kind(),
            function: FunctionDefinition { name: name.into(), description: description.into(), parameters },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDefinition {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON schema of the arguments object.
    #[serde(default)]
    pub parameters: serde_json::Value,
}

/// `tool_choice`: `"auto"`, `"required"`, `"none"` or `{"type":"function","function":{"name":..}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    Required,
    None,
    Function(String),
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolChoice::Auto => serializer.serialize_str("auto"),
            ToolChoice::Required => serializer.serialize_str("required"),
            ToolChoice::None => serializer.serialize_str("none"),
            ToolChoice::Function(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}}).serialize(serializer)
            }
        }
    }
}

/// What the caller asks for; the client adds `model`, `stream` and the token-limit field name.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    /// When empty, `tools`, `tool_choice` and `parallel_tool_calls` are all omitted from the request.
    pub tools: Vec<ToolDefinition>,
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    /// Sent as `max_tokens` or `max_completion_tokens` (negotiated per client).
    pub max_tokens: u32,
    pub temperature: Option<f64>,
    /// `response_format`, sent as given (`{"type": "json_schema", ...}`); see `structured`.
    pub response_format: Option<serde_json::Value>,
    /// Not sent: the smallest `max_tokens` an answer needs (a structured step's, whose JSON cut
    /// off is no answer at all). Fitting to the context window cuts the prompt before it lowers
    /// `max_tokens` below this (or below `max_tokens` itself, when that is smaller); 0 leaves
    /// fitting its general floor.
    pub min_completion_tokens: u32,
}

impl ChatRequest {
    /// Default completion budget used by [`ChatRequest::new`].
    pub const DEFAULT_MAX_TOKENS: u32 = 1024;

    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            tools: Vec::new(),
            tool_choice: None,
            parallel_tool_calls: None,
            max_tokens: Self::DEFAULT_MAX_TOKENS,
            temperature: None,
            response_format: None,
            min_completion_tokens: 0,
        }
    }
}

/// Token accounting; every field defaults to 0 when the server omits it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub prompt_tokens: u64,
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub completion_tokens: u64,
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub total_tokens: u64,
}

/// The single choice of a chat completion.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub message: Message,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
}

// ---------------------------------------------------------------------------------------------
// Crate-internal wire shapes.

/// The request body actually sent.
#[derive(Serialize)]
pub(crate) struct WireRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [Message],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<&'a [ToolDefinition]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<&'a ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<&'a serde_json::Value>,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
pub(crate) struct StreamOptions {
    pub include_usage: bool,
}

/// Non-streamed completion body.
#[derive(Deserialize)]
pub(crate) struct WireResponse {
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub choices: Vec<WireChoice>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
pub(crate) struct WireChoice {
    #[serde(default)]
    pub message: Option<WireMessage>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// A response message: the role is optional (always the assistant).
#[derive(Default, Deserialize)]
pub(crate) struct WireMessage {
    #[serde(default, deserialize_with = "de_content")]
    pub content: Option<String>,
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub tool_calls: Vec<ToolCall>,
}

impl WireMessage {
    pub fn into_message(self) -> Message {
        Message { tool_calls: self.tool_calls, ..Message::plain(Role::Assistant, self.content) }
    }
}

/// `GET /models` body.
#[derive(Deserialize)]
pub(crate) struct WireModels {
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub data: Vec<WireModel>,
}

#[derive(Deserialize)]
pub(crate) struct WireModel {
    pub id: String,
}

/// One streamed chunk (`chat.completion.chunk`).
#[derive(Deserialize)]
pub(crate) struct WireChunk {
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub choices: Vec<WireChunkChoice>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
pub(crate) struct WireChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Option<WireDelta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Default, Deserialize)]
pub(crate) struct WireDelta {
    #[serde(default, deserialize_with = "de_content")]
    pub content: Option<String>,
    #[serde(default, deserialize_with = "de_null_as_default")]
    pub tool_calls: Vec<WireToolCallDelta>,
}

#[derive(Deserialize)]
pub(crate) struct WireToolCallDelta {
    #[serde(default)]
    pub index: Option<usize>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<WireFunctionDelta>,
}

#[derive(Default, Deserialize)]
pub(crate) struct WireFunctionDelta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "de_arguments")]
    pub arguments: String,
}

// ---------------------------------------------------------------------------------------------
// Tolerant deserializers.

fn function_kind() -> String {
    "function".to_owned()
}

fn de_null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn de_kind<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_else(function_kind))
}

/// `content` as a string, `null`, or an array of parts (`{"type":"text","text":..}`; text parts are joined).
fn de_content<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        Parts(Vec<Part>),
    }
    #[derive(Deserialize)]
    struct Part {
        #[serde(rename = "type", default)]
        kind: Option<String>,
        #[serde(default)]
        text: Option<String>,
    }
    Ok(match Option::<Content>::deserialize(deserializer)? {
        None => None,
        Some(Content::Text(text)) => Some(text),
        Some(Content::Parts(parts)) => Some(
            parts
                .into_iter()
                .filter(|part| part.kind.as_deref().is_none_or(|kind| kind == "text"))
                .filter_map(|part| part.text)
                .collect::<String>(),
        ),
    })
}

/// Tool arguments as a JSON string; an object (sent by some servers) is re-encoded, `null` becomes "".
fn de_arguments<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(text) => text,
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_choice_serializes() {
        assert_eq!(serde_json::to_value(ToolChoice::Auto).unwrap(), json!("auto"));
        assert_eq!(serde_json::to_value(ToolChoice::Required).unwrap(), json!("required"));
        assert_eq!(serde_json::to_value(ToolChoice::None).unwrap(), json!("none"));
        assert_eq!(
            serde_json::to_value(ToolChoice::Function("get_pods".into())).unwrap(),
            json!({"type": "function", "function": {"name": "get_pods"}})
        );
    }

    #[test]
    fn message_serialization_skips_empty_fields() {
        assert_eq!(serde_json::to_value(Message::user("hi")).unwrap(), json!({"role": "user", "content": "hi"}));
        assert_eq!(
            serde_json::to_value(Message::tool("call_1", "ok")).unwrap(),
            json!({"role": "tool", "content": "ok", "tool_call_id": "call_1"})
        );
        let calls = vec![ToolCall::function("c1", "f", "{}")];
        assert_eq!(
            serde_json::to_value(Message::assistant_tool_calls(calls)).unwrap(),
            json!({"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]})
        );
    }

    #[test]
    fn message_deserialization_is_tolerant() {
        let message: Message = serde_json::from_value(json!({
            "role": "assistant", "content": null, "tool_calls": null, "refusal": null, "extra": 1
        }))
        .unwrap();
        assert_eq!(message, Message { content: None, ..Message::assistant("") });

        let message: Message = serde_json::from_value(json!({
            "role": "assistant",
            "content": [{"type": "text", "text": "Hello, "}, {"type": "image_url"}, {"type": "text", "text": "world"}]
        }))
        .unwrap();
        assert_eq!(message.content.as_deref(), Some("Hello, world"));

        let message: Message = serde_json::from_value(json!({
            "role": "assistant",
            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": 1}}}]
        }))
        .unwrap();
        assert_eq!(message.tool_calls, vec![ToolCall::function("c1", "f", r#"{"a":1}"#)]);
    }

    #[test]
    fn usage_defaults_to_zero() {
        let usage: Usage = serde_json::from_value(json!({"prompt_tokens": 3})).unwrap();
        assert_eq!(usage, Usage { prompt_tokens: 3, completion_tokens: 0, total_tokens: 0 });
    }
}
