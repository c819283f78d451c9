//! What MCP servers and the model send to the tool layer: a server's `tools/call`
//! result (decoded by rmcp, bounded by `render_result`, checked by the registry) and
//! the model's tool-call arguments (checked against the tool's JSON Schema).

use std::sync::{Arc, Mutex};

use akritas::mcp::render_result;
use akritas::resources::mcp_adapter::Permission;
use akritas::tools::{
    AllowAll, ErrorCode, Registry, RegistryBuilder, ToolCall, ToolFuture, ToolLimits, ToolName, ToolSpec,
};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use super::harness::{self, Verdict};
use super::mutate::{self, Syntax};

pub const TOOL: &str = "mcp.fuzz.query";

/// One real registry whose tool answers with the text in `output`, and records the arguments it got.
pub fn registry(output: Arc<Mutex<String>>, seen: Arc<Mutex<Option<Value>>>) -> Registry {
    let schema = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 4096},
            "time": {"type": "string", "format": "date-time"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000}
        },
        "required": ["query"],
        "additionalProperties": false
    });
    let name = ToolName::try_from(TOOL).expect("tool name");
    let spec = ToolSpec::new(name, "fuzz query tool", Permission::Read, schema);
    let handler = move |arguments: Value| -> ToolFuture {
        *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(arguments);
        let text = output.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Box::pin(async move { Ok(text) })
    };
    let mut builder = RegistryBuilder::new(ToolLimits::default());
    builder.register(spec, Arc::new(handler)).expect("register");
    builder.build()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn mcp_tool_results() {
    let seeds = harness::seeds("mcp_result", &[], &[".json"], Syntax::Json);
    let output = Arc::new(Mutex::new(String::new()));
    let registry = registry(output.clone(), Arc::new(Mutex::new(None)));
    let max = ToolLimits::default().max_result_bytes;
    let runtime = runtime();
    let call = ToolCall { id: "call-1".into(), name: TOOL.into(), arguments: r#"{"query":"up"}"#.into() };
    harness::run("mcp_result", (mutate::input(seeds.len()), 0usize..4), |(input, bound)| {
        let body = mutate::render(&seeds, input);
        let result: CallToolResult = match serde_json::from_slice(&body) {
            Ok(result) => result,
            Err(_) if mutate::is_unchanged(input) => return Err("a seed does not decode".into()),
            Err(error) if error.to_string().is_empty() => return Err("rejected without a message".into()),
            Err(_) => return Ok(Verdict::Rejected),
        };
        // The adapter's bound is the registry's result limit; smaller bounds exercise the cut.
        let bound = [max, 4096, 700, 256][*bound];
        let text = render_result(&result, bound);
        if text.len() > bound {
            return Err(format!("rendered result is {} bytes, over the bound of {bound}", text.len()));
        }
        let rendered: Value = serde_json::from_str(&text).map_err(|e| format!("rendered result is not JSON: {e}"))?;
        if !rendered["isError"].is_boolean() {
            return Err(format!("rendered result lost isError: {text}"));
        }
        *output.lock().unwrap_or_else(|e| e.into_inner()) = text.clone();
        let executed = runtime.block_on(registry.execute(&call, &AllowAll));
        match (&executed.output, &executed.error) {
            (Some(value), None) if *value == rendered => Ok(Verdict::Accepted),
            _ => Err(format!("the registry did not return the bounded result: {executed:?}")),
        }
    });
}

#[test]
fn model_tool_call_arguments() {
    let seeds = harness::seeds("tool_arguments", &[], &[".json"], Syntax::Json);
    let seen = Arc::new(Mutex::new(None));
    let registry = registry(Arc::new(Mutex::new("{\"ok\":true}".into())), seen.clone());
    let runtime = runtime();
    harness::run("tool_arguments", mutate::input(seeds.len()), |input| {
        let arguments = String::from_utf8_lossy(&mutate::render(&seeds, input)).into_owned();
        *seen.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let call = ToolCall { id: "call-1".into(), name: TOOL.into(), arguments };
        let result = runtime.block_on(registry.execute(&call, &AllowAll));
        let handled = seen.lock().unwrap_or_else(|e| e.into_inner()).take();
        match (&result.output, &result.error) {
            (Some(_), None) => {
                let arguments = handled.ok_or("an accepted call did not reach the handler")?;
                registry.check_arguments(TOOL, &arguments).map_err(|e| format!("handler got bad arguments: {e}"))?;
                Ok(Verdict::Accepted)
            }
            (None, Some(error)) if mutate::is_unchanged(input) => Err(format!("a seed is rejected: {error:?}")),
            (None, Some(error)) => {
                if handled.is_some() {
                    return Err(format!("rejected arguments reached the handler: {error:?}"));
                }
                if !matches!(error.code, ErrorCode::InvalidCall | ErrorCode::InvalidArguments)
                    || error.message.trim().is_empty()
                {
                    return Err(format!("unexpected rejection: {error:?}"));
                }
                Ok(Verdict::Rejected)
            }
            _ => Err(format!("a result with both or neither of output and error: {result:?}")),
        }
    });
}
