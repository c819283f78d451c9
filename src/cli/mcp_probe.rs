//! `akritas mcp probe`: connects Akritas' own MCP client ([`McpHost`]) to one streamable HTTP
//! server, lists its tools, optionally calls one, and prints what happened as JSON.
//!
//! A diagnostic and test command: the MCP conformance suite (`e2e/mcp-conformance.sh`) drives it
//! as "the client under test", appending the server URL as the last argument.

use super::stdout::outln;
use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};

use crate::mcp::{AdapterConfig, AdapterPhase, AdapterStatus, HostOptions, McpHost, Transport};
use crate::resources::mcp_adapter::Permission;
use crate::tools::{AllowAll, ToolCall};

/// Adapter key and namespace of the probed server (host tool names are `probe.<remote name>`).
const KEY: &str = "McpAdapter/probe/probe";
const NAMESPACE: &str = "probe";

/// `mcp probe` arguments.
#[derive(Args, Debug)]
pub(crate) struct McpProbeArgs {
    /// Streamable HTTP endpoint of the MCP server, e.g. `http://127.0.0.1:8080/mcp`.
    #[arg(value_name = "URL")]
    pub url: String,

    /// Call this tool (its remote name, as the server lists it) after listing.
    #[arg(long, value_name = "TOOL")]
    pub call: Option<String>,

    /// Arguments of the call, a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}", requires = "call")]
    pub arguments: String,

    /// Extra request header `NAME=VALUE` (repeatable).
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub headers: Vec<String>,

    /// Bound on connecting (initialize + tools/list) and, separately, on the call
    /// (e.g. `10s`, `1500ms`; bare number = seconds).
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = crate::victoriametrics::args::parse_duration)]
    pub timeout: Duration,
}

/// Runs the probe; exit 0 when the session came up, the tools were listed and the call (if
/// any) returned a result that is not an error; 1 otherwise, 2 on bad arguments.
pub fn run(args: McpProbeArgs) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).try_init();

    let arguments: Value = match serde_json::from_str(&args.arguments) {
        Ok(value @ Value::Object(_)) => value,
        Ok(_) => return usage("--arguments must be a JSON object"),
        Err(error) => return usage(&format!("--arguments is not valid JSON: {error}")),
    };
    let mut headers = Vec::with_capacity(args.headers.len());
    for header in &args.headers {
        match header.split_once('=') {
            Some((name, value)) if !name.is_empty() => headers.push((name.to_owned(), value.to_owned())),
            _ => return usage(&format!("--header {header:?} is not NAME=VALUE")),
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("akritas mcp probe: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (report, ok) = runtime.block_on(probe(&args, headers, arguments));
    match serde_json::to_string_pretty(&report) {
        Ok(text) => outln!("{text}"),
        Err(error) => {
            eprintln!("akritas mcp probe: cannot print the report: {error}");
            return ExitCode::FAILURE;
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn usage(message: &str) -> ExitCode {
    eprintln!("akritas mcp probe: {message}");
    ExitCode::from(2)
}

/// The report and whether the probe succeeded.
async fn probe(args: &McpProbeArgs, headers: Vec<(String, String)>, arguments: Value) -> (Value, bool) {
    let options = HostOptions { connect_timeout: args.timeout, ..HostOptions::default() };
    let host = McpHost::new(options);
    let config = AdapterConfig {
        key: KEY.to_owned(),
        namespace: NAMESPACE.to_owned(),
        transport: Transport::Http { url: args.url.clone(), headers },
        allow: BTreeSet::from([Permission::Read, Permission::Write, Permission::Dangerous]),
        tools: None,
        call_timeout: args.timeout,
        fingerprint: "probe".to_owned(),
    };
    host.reconcile(vec![config]).await;
    let status = settled(&host, args.timeout).await;
    let mut report = json!({ "url": args.url, "adapter": status });
    let connected = status.as_ref().is_some_and(|s| s.connected);
    if !connected {
        if let Some(status) = &status {
            eprintln!(
                "akritas mcp probe: not connected to {}: {}",
                args.url,
                status.last_error.as_deref().unwrap_or("timed out")
            );
        }
        host.shutdown().await;
        return (report, false);
    }
    let mut ok = true;
    if let Some(remote) = &args.call {
        let tools = status.as_ref().map(|s| s.tools.as_slice()).unwrap_or_default();
        match tools.iter().find(|t| t.remote_name == *remote) {
            None => {
                eprintln!("akritas mcp probe: the server lists no tool {remote:?}");
                ok = false;
            }
            Some(tool) if !tool.authorized => {
                eprintln!(
                    "akritas mcp probe: tool {remote:?} is not authorized: {}",
                    tool.reason.as_deref().unwrap_or("unknown reason")
                );
                ok = false;
            }
            Some(tool) => {
                let call = ToolCall { id: "probe-1".into(), name: tool.name.clone(), arguments: arguments.to_string() };
                let result = host.registry().execute(&call, &AllowAll).await;
                if let Some(error) = &result.error {
                    eprintln!("akritas mcp probe: call of {remote:?} failed ({:?}): {}", error.code, error.message);
                    ok = false;
                }
                report["call"] = serde_json::to_value(&result).unwrap_or(Value::Null);
            }
        }
    }
    host.shutdown().await;
    (report, ok)
}

/// Waits until the adapter has listed its tools or failed its first attempt (or `timeout`
/// passes), and returns its status then.
async fn settled(host: &McpHost, timeout: Duration) -> Option<AdapterStatus> {
    let mut changes = host.subscribe();
    // Slack over the host's own connect timeout, so that its clearer error wins.
    let deadline = tokio::time::Instant::now() + timeout + Duration::from_secs(2);
    loop {
        let status = host.status().into_iter().find(|s| s.key == KEY);
        let done = status.as_ref().is_none_or(|s| s.connected || s.phase == AdapterPhase::Retrying);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if done || left.is_zero() {
            return status;
        }
        let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), changes.changed()).await;
    }
}
