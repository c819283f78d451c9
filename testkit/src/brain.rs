//! What a stand-in model means, apart from how its server says it.
//!
//! A brain reads a chat request and returns an [`Answer`]: a structured submission, prose, or
//! calls of the offered tools. A [`Personality`](crate::personality::Personality) then renders
//! that answer the way one model server would (a tool call, JSON content, prose with a fenced
//! object, a refusal, think blocks), so one brain runs unchanged under every server and every
//! structured-step mode of the host.
//!
//! [`asked`] tells which submit tool a request wants and through which mode, following the
//! host's wire contract:
//! - `tool_call`: exactly one tool, with `tool_choice` `"required"` or naming it;
//! - `json_schema`: `response_format.json_schema.name`;
//! - `json_object`: `response_format` `json_object`, and the first system message names
//!   ``the arguments of `<alias>` ``;
//! - `text`: no `response_format`, the same system paragraph.

use serde_json::Value;

/// What the model means to say to one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// The arguments of the submit tool `alias` (an OpenAI alias such as
    /// `local_investigation_submit_plan`, or `akritas_propose_edits`).
    Structured { alias: String, arguments: Value },
    /// Prose.
    Text(String),
    /// Calls of offered tools: `(id, function name, arguments)`.
    ToolCalls(Vec<crate::wire::Call>),
}

/// How a request asks for a structured answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One forced tool call.
    ToolCall,
    /// `response_format` `json_schema`.
    JsonSchema,
    /// `response_format` `json_object` with the schema in the system message.
    JsonObject,
    /// Prose expected to contain the object, the schema in the system message.
    Text,
}

/// Which submit tool a request asks for, and through which mode (`None`: a free answer).
pub fn asked(request: &Value) -> Option<(String, Mode)> {
    if let Some(alias) = forced_tool(request) {
        return Some((alias, Mode::ToolCall));
    }
    let format = &request["response_format"];
    if format["type"] == "json_schema" {
        return format["json_schema"]["name"].as_str().map(|name| (name.to_owned(), Mode::JsonSchema));
    }
    let alias = system_paragraph_alias(request)?;
    Some((alias, if format["type"] == "json_object" { Mode::JsonObject } else { Mode::Text }))
}

/// Which submit tool a request asks for under any of the four modes.
pub fn structured_target(request: &Value) -> Option<String> {
    asked(request).map(|(alias, _)| alias)
}

/// The tool a request forces: `tool_choice` naming a function, or `"required"` with exactly one tool.
fn forced_tool(request: &Value) -> Option<String> {
    let tools = request["tools"].as_array().filter(|tools| !tools.is_empty())?;
    let choice = &request["tool_choice"];
    if let Some(name) = choice["function"]["name"].as_str() {
        return Some(name.to_owned());
    }
    match tools.as_slice() {
        [tool] if choice == "required" => tool["function"]["name"].as_str().map(str::to_owned),
        _ => None,
    }
}

/// The alias named by ``the arguments of `<alias>` `` in the first system message.
fn system_paragraph_alias(request: &Value) -> Option<String> {
    let messages = request["messages"].as_array()?;
    let system = messages.iter().find(|m| m["role"] == "system")?["content"].as_str()?;
    let (_, rest) = system.rsplit_once("the arguments of `")?;
    let (alias, _) = rest.split_once('`')?;
    Some(alias.to_owned())
}

/// How many tool results the conversation carries, as tool messages or, once the host
/// flattened them for a server without tools, as `[output of <tool>, call <id>]` user messages.
pub fn tool_results(request: &Value) -> usize {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| {
            m["role"] == "tool"
                || (m["role"] == "user" && m["content"].as_str().is_some_and(|c| c.starts_with("[output of ")))
        })
        .count()
}

/// The first user message whose content is a JSON object holding `key` (the data of a
/// structured step, wherever a repair turn put it).
pub fn user_data(request: &Value, key: &str) -> Option<Value> {
    request["messages"].as_array()?.iter().filter(|m| m["role"] == "user").find_map(|m| {
        let data: Value = serde_json::from_str(m["content"].as_str()?).ok()?;
        data.get(key).is_some().then_some(data)
    })
}
