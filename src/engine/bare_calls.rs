//! Tool calls a model wrote as text. Small models trained on Hermes-style calls often write the
//! call's JSON without the `<tool_call>` tags the server parses calls from (measured:
//! Qwen2.5-Coder-1.5B on Ollama wrote `{"name": "…", "arguments": {…}}` lines, sometimes in a
//! Markdown fence, and the server returned them as the answer text). A reply that starts with
//! such an object is read as calls of the tools offered in that request; objects naming any
//! other tool are dropped (the host runs only offered tools, each checked against its schema).

use serde_json::Value;

use crate::llm::ToolCall;

/// Most calls read from one reply.
const MAX_BARE_CALLS: usize = 8;

/// The calls a reply wrote as text, when it starts with one: each `{"name", "arguments"}`
/// object (or `{"function": {"name", "arguments"}}`) naming an offered tool, by its alias or its
/// host name (`aliases`: (alias, host name) of each offered tool). Empty otherwise.
pub fn read(content: &str, aliases: &[(String, String)]) -> Vec<ToolCall> {
    let text = content.trim();
    let text = text.strip_prefix("```json").or_else(|| text.strip_prefix("```")).unwrap_or(text).trim_start();
    let text = text.strip_prefix("<tool_call>").unwrap_or(text).trim_start();
    if !text.starts_with('{') {
        return Vec::new();
    }
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('{') {
        let mut stream = serde_json::Deserializer::from_str(&rest[at..]).into_iter::<Value>();
        let parsed = stream.next();
        let end = at + stream.byte_offset();
        if let Some(Ok(object)) = parsed {
            if let Some(call) = call_of(&object, aliases, calls.len()) {
                calls.push(call);
            }
            rest = &rest[end.max(at + 1)..];
        } else {
            rest = &rest[at + 1..];
        }
        if calls.len() >= MAX_BARE_CALLS {
            break;
        }
    }
    calls
}

fn call_of(object: &Value, aliases: &[(String, String)], n: usize) -> Option<ToolCall> {
    let call = object.get("function").filter(|f| f.is_object()).unwrap_or(object);
    let name = call.get("name")?.as_str()?;
    let alias = aliases.iter().find(|(alias, host)| alias == name || host == name).map(|(alias, _)| alias)?;
    let arguments = match call.get("arguments") {
        Some(Value::Object(map)) => Value::Object(map.clone()).to_string(),
        Some(Value::String(text)) => text.clone(),
        None => "{}".to_string(),
        Some(_) => return None,
    };
    Some(ToolCall::function(format!("call_text_{}", n + 1), alias.clone(), arguments))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aliases() -> Vec<(String, String)> {
        vec![("akritas_kubernetes_pod_status_6f6b".into(), "kubernetes.pod_status".into())]
    }

    #[test]
    fn calls_written_as_text_are_read_when_the_reply_starts_with_one() {
        let reply = "{\"name\": \"akritas_kubernetes_pod_status_6f6b\", \"arguments\": {\"namespace\":\"shop\",\"pod\":\"cart\"}}\n\
                     {\"name\": \"kubernetes.scale\", \"arguments\": {\"replicas\":0}}\n\
                     {\"name\": \"kubernetes.pod_status\", \"arguments\": {\"namespace\":\"db\",\"pod\":\"pg-0\"}}\n\
                     The pod is crash looping.";
        let calls = read(reply, &aliases());
        let read: Vec<(&str, &str)> =
            calls.iter().map(|c| (c.function.name.as_str(), c.function.arguments.as_str())).collect();
        assert_eq!(
            read,
            [
                ("akritas_kubernetes_pod_status_6f6b", "{\"namespace\":\"shop\",\"pod\":\"cart\"}"),
                ("akritas_kubernetes_pod_status_6f6b", "{\"namespace\":\"db\",\"pod\":\"pg-0\"}"),
            ],
            "a tool not offered is dropped"
        );
        let fenced = "```json\n{\"name\": \"kubernetes.pod_status\", \"arguments\": {\"pod\": \"a\"}}\n```";
        assert_eq!(read_names(fenced), ["akritas_kubernetes_pod_status_6f6b"]);
        let tagged =
            "<tool_call>\n{\"function\": {\"name\": \"kubernetes.pod_status\", \"arguments\": \"{}\"}}\n</tool_call>";
        assert_eq!(read_names(tagged), ["akritas_kubernetes_pod_status_6f6b"]);
    }

    fn read_names(reply: &str) -> Vec<String> {
        read(reply, &aliases()).into_iter().map(|c| c.function.name).collect()
    }

    #[test]
    fn an_answer_in_prose_is_an_answer() {
        assert!(read_names("The pod shop/cart is OOMKilled: {\"name\": \"kubernetes.pod_status\"}").is_empty());
        assert!(read_names("{\"summary\": \"not a call\"}").is_empty());
        assert!(read_names("{ not json").is_empty());
    }
}
