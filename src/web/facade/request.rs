//! Decoding `POST /v1/chat/completions`: lenient about fields Akritas does not use,
//! strict about the ones that would change what a client gets. Every refusal is a
//! 400 in the OpenAI envelope naming the parameter to fix.

use axum::body::Bytes;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::progress_line::strip_progress;
use crate::engine::conversation::{Speaker, Turn};
use crate::web::error::ApiError;

/// The request body, as far as Akritas reads it (unknown fields are ignored).
#[derive(Deserialize)]
struct Body {
    model: Option<String>,
    messages: Option<Vec<WireMessage>>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    n: Option<i64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    tools: Option<Value>,
    functions: Option<Value>,
    response_format: Option<Value>,
    /// Akritas extension: `false` leaves the progress lines out of a stream.
    akritas_progress: Option<bool>,
}

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct WireMessage {
    role: Option<String>,
    #[serde(default)]
    content: Value,
    tool_calls: Option<Value>,
}

/// A checked completion request.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The conversation, progress blocks of earlier streamed answers removed.
    pub turns: Vec<Turn>,
    /// Output tokens per response (`max_completion_tokens`, else `max_tokens`).
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Stream the Run as server-sent events.
    pub stream: bool,
    /// Send a usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// Show the Run's progress lines in the stream.
    pub progress: bool,
}

/// A 400 in the OpenAI envelope with `param`.
pub fn invalid(param: Option<&str>, code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, message).with("param", param.map_or(Value::Null, Value::from))
}

/// The OpenAI answer to a model the server does not have: 404 `invalid_request_error`
/// `model_not_found` on `model` (OpenAI's SDKs raise their NotFoundError for it).
pub fn model_not_found(id: &str, exposed: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "model_not_found",
        format!(
            "The model `{id}` does not exist or you do not have access to it: this server exposes only `{exposed}`"
        ),
    )
    .of_type("invalid_request_error")
    .with("param", "model")
}

/// Decodes and checks a body against the exposed model id and the largest
/// `max_tokens` the host allows.
pub fn decode(body: &Bytes, model: &str, max_tokens_limit: u32) -> Result<Completion, ApiError> {
    let body: Body = crate::web::body::decode(body).map_err(|error| error.with("param", Value::Null))?;
    match body.model.as_deref() {
        None => return Err(invalid(Some("model"), "missing_required_parameter", "model is required")),
        Some(id) if id != model => return Err(model_not_found(id, model)),
        Some(_) => {}
    }
    refuse_tools(&body)?;
    let max_tokens = max_tokens(&body, max_tokens_limit)?;
    if let Some(t) = body.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(invalid(
            Some("temperature"),
            "invalid_value",
            format!("temperature must be between 0 and 2, got {t}"),
        ));
    }
    if body.top_p.is_some_and(|p| p != 1.0) {
        return Err(invalid(Some("top_p"), "unsupported_value", "top_p is not supported: omit it or send 1"));
    }
    if body.n.is_some_and(|n| n != 1) {
        return Err(invalid(Some("n"), "unsupported_value", "n must be 1: a Run produces one answer"));
    }
    let messages =
        body.messages.ok_or_else(|| invalid(Some("messages"), "missing_required_parameter", "messages is required"))?;
    let turns = messages.into_iter().enumerate().map(|(i, m)| turn(i, m)).collect::<Result<Vec<_>, _>>()?;
    Ok(Completion {
        turns,
        max_tokens,
        temperature: body.temperature,
        stream: body.stream.unwrap_or(false),
        include_usage: body.stream_options.and_then(|o| o.include_usage).unwrap_or(false),
        progress: body.akritas_progress.unwrap_or(true),
    })
}

/// Akritas uses only its own read-only tools and answers in prose.
fn refuse_tools(body: &Body) -> Result<(), ApiError> {
    let given = |value: &Option<Value>| {
        value.as_ref().is_some_and(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
    };
    for (param, value) in [("tools", &body.tools), ("functions", &body.functions)] {
        if given(value) {
            return Err(invalid(
                Some(param),
                "unsupported_parameter",
                format!("{param} is not supported: Akritas calls only its own read-only tools; omit {param}"),
            ));
        }
    }
    if let Some(format) = &body.response_format
        && !format.is_null()
        && format.get("type").and_then(Value::as_str) != Some("text")
    {
        return Err(invalid(
            Some("response_format"),
            "unsupported_parameter",
            "response_format is not supported: Akritas answers in text; omit it or send {\"type\": \"text\"}",
        ));
    }
    Ok(())
}

/// `max_completion_tokens` (preferred) or `max_tokens`, within 1..=limit.
fn max_tokens(body: &Body, limit: u32) -> Result<Option<u32>, ApiError> {
    let (param, value) = match (body.max_completion_tokens, body.max_tokens) {
        (Some(n), _) => ("max_completion_tokens", n),
        (None, Some(n)) => ("max_tokens", n),
        (None, None) => return Ok(None),
    };
    match u32::try_from(value) {
        Ok(n) if (1..=limit).contains(&n) => Ok(Some(n)),
        _ => Err(invalid(Some(param), "invalid_value", format!("{param} must be between 1 and {limit}, got {value}"))),
    }
}

fn turn(index: usize, message: WireMessage) -> Result<Turn, ApiError> {
    let role_param = format!("messages[{index}].role");
    let role = match message.role.as_deref() {
        Some("system" | "developer") => Speaker::System,
        Some("user") => Speaker::User,
        Some("assistant") => Speaker::Assistant,
        Some(role @ ("tool" | "function")) => {
            return Err(invalid(
                Some(&role_param),
                "unsupported_value",
                format!(
                    "{role_param} is {role:?}: Akritas calls only its own read-only tools, so tool results cannot be sent"
                ),
            ));
        }
        Some(other) => {
            return Err(invalid(
                Some(&role_param),
                "invalid_value",
                format!("{role_param} is {other:?}; use system, developer, user or assistant"),
            ));
        }
        None => {
            return Err(invalid(Some(&role_param), "missing_required_parameter", format!("{role_param} is required")));
        }
    };
    if message
        .tool_calls
        .as_ref()
        .is_some_and(|calls| !calls.is_null() && calls.as_array().is_none_or(|a| !a.is_empty()))
    {
        let param = format!("messages[{index}].tool_calls");
        return Err(invalid(
            Some(&param),
            "unsupported_parameter",
            format!("{param} is not supported: Akritas calls only its own tools"),
        ));
    }
    let content = content(index, message.content)?;
    let content = if role == Speaker::Assistant { strip_progress(&content) } else { content };
    Ok(Turn { role, content })
}

/// A string, or an array of `{"type": "text", "text": …}` parts joined by newlines.
fn content(index: usize, content: Value) -> Result<String, ApiError> {
    let param = format!("messages[{index}].content");
    match content {
        Value::String(text) => Ok(text),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(text)) => texts.push(text),
                    (Some("text"), None) => {
                        return Err(invalid(
                            Some(&param),
                            "invalid_value",
                            format!("{param}[{j}].text must be a string"),
                        ));
                    }
                    (kind, _) => {
                        return Err(invalid(
                            Some(&param),
                            "unsupported_content",
                            format!(
                                "{param}[{j}] has type {:?}: only text parts are accepted",
                                kind.unwrap_or("(missing)")
                            ),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(invalid(Some(&param), "invalid_value", format!("{param} must be a string or an array of text parts"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decode_json(body: &str) -> Result<Completion, (String, Value, String)> {
        decode(&Bytes::from(body.to_string()), "akritas", 4096)
            .map_err(|e| (e.code.to_string(), e.details.get("param").cloned().unwrap_or(Value::Null), e.message))
    }

    fn rejected(body: Value) -> (String, Value, String) {
        decode_json(&body.to_string()).unwrap_err()
    }

    fn user(content: Value) -> Value {
        json!({"model": "akritas", "messages": [{"role": "user", "content": content}]})
    }

    #[test]
    fn unknown_fields_are_ignored_and_defaults_apply() {
        let body = json!({"model": "akritas", "messages": [{"role": "user", "content": "hi", "name": "ann"}],
                          "user": "u-1", "seed": 7, "presence_penalty": 0.5, "logit_bias": {}, "tools": [],
                          "response_format": {"type": "text"}, "top_p": 1, "n": 1});
        let completion = decode_json(&body.to_string()).unwrap();
        assert_eq!(completion.turns, vec![Turn { role: Speaker::User, content: "hi".into() }]);
        assert_eq!((completion.stream, completion.include_usage, completion.progress), (false, false, true));
        assert_eq!(completion.max_tokens, None);
    }

    #[test]
    fn trailing_json_is_invalid_json() {
        let body = format!("{} {{}}", user(json!("hi")));
        let (code, param, message) = decode_json(&body).unwrap_err();
        assert_eq!((code.as_str(), param), ("invalid_json", Value::Null));
        assert!(message.contains("trailing data"), "{message}");
    }

    #[test]
    fn text_parts_are_joined_and_other_parts_name_the_content() {
        let parts = json!([{"type": "text", "text": "why is"}, {"type": "text", "text": "db-7 slow?"}]);
        assert_eq!(decode_json(&user(parts).to_string()).unwrap().turns[0].content, "why is\ndb-7 slow?");
        let image = json!([{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "http://x"}}]);
        let (code, param, message) = rejected(user(image));
        assert_eq!((code.as_str(), param), ("unsupported_content", json!("messages[0].content")));
        assert_eq!(message, "messages[0].content[1] has type \"image_url\": only text parts are accepted");
        let (_, param, _) = rejected(user(json!([{"type": "input_audio", "input_audio": {}}])));
        assert_eq!(param, json!("messages[0].content"));
        let (_, param, _) = rejected(user(Value::Null));
        assert_eq!(param, json!("messages[0].content"));
    }

    #[test]
    fn roles_map_and_tool_roles_are_refused() {
        let body = json!({"model": "akritas", "messages": [
            {"role": "developer", "content": "cluster prod"}, {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}]});
        let roles: Vec<Speaker> = decode_json(&body.to_string()).unwrap().turns.iter().map(|t| t.role).collect();
        assert_eq!(roles, [Speaker::System, Speaker::User, Speaker::Assistant, Speaker::User]);
        for role in ["tool", "function", "critic"] {
            let body = json!({"model": "akritas", "messages": [{"role": role, "content": "x"}]});
            assert_eq!(rejected(body).1, json!("messages[0].role"), "{role}");
        }
        let calls = json!({"model": "akritas", "messages": [{"role": "user", "content": "q"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c"}]}]});
        assert_eq!(rejected(calls).1, json!("messages[1].tool_calls"));
    }

    #[test]
    fn model_and_parameters_out_of_range_name_the_parameter() {
        let with = |extra: Value| {
            let mut body = user(json!("hi"));
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            rejected(body)
        };
        assert_eq!(with(json!({"model": "gpt-4o"})).0, "model_not_found");
        assert_eq!(with(json!({"model": "gpt-4o"})).1, json!("model"));
        let unknown = model_not_found("gpt-4o", "akritas").object();
        assert_eq!(
            (unknown.kind, unknown.message.starts_with("The model `gpt-4o` does not exist")),
            ("invalid_request_error", true)
        );
        assert_eq!(
            decode(&Bytes::from(user(json!("hi")).to_string().replace("akritas", "gpt-4o")), "akritas", 4096)
                .unwrap_err()
                .status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(rejected(json!({"messages": []})).1, json!("model"));
        assert_eq!(with(json!({"max_tokens": 0})).1, json!("max_tokens"));
        assert_eq!(with(json!({"max_tokens": 5000})).2, "max_tokens must be between 1 and 4096, got 5000");
        assert_eq!(with(json!({"max_completion_tokens": -1})).1, json!("max_completion_tokens"));
        assert_eq!(with(json!({"temperature": 2.5})).1, json!("temperature"));
        assert_eq!(with(json!({"top_p": 0.5})).1, json!("top_p"));
        assert_eq!(with(json!({"n": 2})).1, json!("n"));
        assert_eq!(with(json!({"tools": [{"type": "function"}]})).1, json!("tools"));
        assert_eq!(with(json!({"functions": [{"name": "f"}]})).1, json!("functions"));
        assert_eq!(with(json!({"response_format": {"type": "json_schema"}})).1, json!("response_format"));
        let mut ok = user(json!("hi"));
        ok["max_tokens"] = json!(10);
        ok["max_completion_tokens"] = json!(20);
        ok["stream"] = json!(true);
        ok["stream_options"] = json!({"include_usage": true});
        ok["akritas_progress"] = json!(false);
        let completion = decode_json(&ok.to_string()).unwrap();
        assert_eq!(completion.max_tokens, Some(20), "max_completion_tokens wins");
        assert_eq!((completion.stream, completion.include_usage, completion.progress), (true, true, false));
    }

    #[test]
    fn a_streamed_answers_progress_block_does_not_come_back_to_the_model() {
        let body = json!({"model": "akritas", "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "> plan: 1 check (postgres.activity)\n> ✓ postgres.activity · ok · 3 ms\n\nThe answer."},
            {"role": "user", "content": "and?"}]});
        assert_eq!(decode_json(&body.to_string()).unwrap().turns[1].content, "The answer.");
    }
}
