//! The chat answers a stand-in model server sends, as the OpenAI wire format shapes them: what
//! [`brain`](crate::brain) means, [`personality`](crate::personality) renders and
//! [`scripted_llm`](crate::scripted_llm) serves. Its own module, so that those three depend on it
//! and not on each other in a cycle.

use serde_json::Value;

/// One tool call: `(id, function name, arguments)`.
pub type Call = (String, String, Value);

/// What the server answers to one chat request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Assistant text, finish_reason "stop".
    Content(String),
    /// `(id, function name, arguments)`, finish_reason "tool_calls".
    ToolCalls(Vec<Call>),
    /// A whole assistant message: content, `reasoning_content` and tool calls together
    /// (finish_reason "tool_calls" when it has calls, else "stop").
    Message { content: Option<String>, reasoning: Option<String>, tool_calls: Vec<Call> },
    /// A JSON error body with this status (e.g. a 400 `unsupported_parameter` envelope).
    Error { status: u16, body: Value },
    /// Anything: invalid JSON, a huge body, ... (`application/json` if it parses, else `text/plain`).
    Raw { status: u16, body: String },
}
