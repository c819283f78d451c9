//! One adapter's configuration, how to connect to it, and how its remote tools become host tools.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{CallToolResult, Tool};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::environment::{check_env_name, check_env_value, child_env, pump_stderr};
use super::error::McpError;
use super::permission::{authorize, permission_from_annotations};
use super::types::{DiscoveredTool, HostOptions};
use crate::resources::mcp_adapter::Permission;
use crate::text::{ELLIPSIS, prefix_chars, truncate_bytes};
use crate::tools::{MAX_DESCRIPTION_CHARS, ToolSpec};

/// Most remote tools one adapter may announce; the rest are ignored.
pub const MAX_TOOLS_PER_ADAPTER: usize = 1024;
/// Bound on a host or remote tool name kept in status, in bytes.
const MAX_NAME_BYTES: usize = 256;
/// Added to an adapter's call timeout for the registry's own timeout, so that the adapter's
/// timeout fires first and becomes a clean `tool_error`.
const REGISTRY_TIMEOUT_SLACK: Duration = Duration::from_secs(1);

/// How to reach an MCP server.
#[derive(Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process executed directly (never through a shell), speaking MCP over stdio.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Resolved values; may be secrets. Never logged.
        env: Vec<(String, String)>,
        working_dir: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        /// Resolved values; may be secrets. Never logged.
        headers: Vec<(String, String)>,
    },
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio { command, args, env, working_dir } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>())
                .field("working_dir", working_dir)
                .finish(),
            Self::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// Everything the host needs to run one adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterConfig {
    /// Unique key, e.g. `McpAdapter/akritas/victoriametrics`.
    pub key: String,
    /// Host tool names are `<namespace>.<remote tool name>`.
    pub namespace: String,
    pub transport: Transport,
    /// Permissions a tool may have to be authorized.
    pub allow: BTreeSet<Permission>,
    /// Optional explicit allowlist of remote tool names.
    pub tools: Option<BTreeSet<String>>,
    pub call_timeout: Duration,
    /// Changes whenever the configuration (including resolved secrets) changes.
    pub fingerprint: String,
}

impl AdapterConfig {
    /// Per-call timeout actually applied (never zero).
    pub(crate) fn effective_call_timeout(&self) -> Duration {
        self.call_timeout.max(Duration::from_millis(1))
    }
}

/// Our MCP client: declares no capabilities and wakes the supervisor when the tool list changes.
pub(crate) struct HostClient {
    pub tools_changed: Arc<Notify>,
}

impl ClientHandler for HostClient {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

/// A live connection: the MCP session and, for stdio, the child process.
pub(crate) struct Connected {
    pub service: RunningService<RoleClient, HostClient>,
    pub child: Option<tokio::process::Child>,
    pub pid: Option<u32>,
    pub tools_changed: Arc<Notify>,
    /// Cancels the session (closing the transport).
    pub ct: CancellationToken,
}

/// Connects and initializes an MCP session. Errors never contain env or header values.
pub(crate) async fn connect(config: &AdapterConfig, options: &HostOptions) -> Result<Connected, McpError> {
    let tools_changed = Arc::new(Notify::new());
    let client = HostClient { tools_changed: Arc::clone(&tools_changed) };
    let ct = CancellationToken::new();
    match &config.transport {
        Transport::Stdio { command, args, env, working_dir } => {
            for (name, value) in env {
                check_env_name(name)?;
                check_env_value(name, value)?;
            }
            if command.is_empty() {
                return Err(McpError::EmptyCommand);
            }
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args)
                .env_clear()
                .envs(child_env(&options.base_env, env, |name| std::env::var_os(name)))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            if let Some(dir) = working_dir {
                cmd.current_dir(dir);
            }
            let mut child = cmd.spawn().map_err(|source| McpError::Spawn { command: command.clone(), source })?;
            let pid = child.id();
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                let _ = child.kill().await;
                return Err(McpError::MissingPipes);
            };
            if let Some(stderr) = child.stderr.take() {
                tokio::spawn(pump_stderr(config.key.clone(), stderr));
            }
            match client.serve_with_ct((stdout, stdin), ct.clone()).await {
                Ok(service) => Ok(Connected { service, child: Some(child), pid, tools_changed, ct }),
                Err(e) => {
                    let _ = child.kill().await;
                    Err(McpError::Initialize(Box::new(e)))
                }
            }
        }
        Transport::Http { url, headers } => {
            let mut map = HashMap::with_capacity(headers.len());
            for (name, value) in headers {
                let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| McpError::HeaderName(name.clone()))?;
                let mut value = HeaderValue::from_str(value).map_err(|_| McpError::HeaderValue(name.clone()))?;
                value.set_sensitive(true);
                map.insert(header, value);
            }
            let http = crate::outbound::streaming_client(options.connect_timeout).map_err(McpError::HttpClient)?;
            let transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(map);
            let transport = StreamableHttpClientTransport::with_client(http, transport_config);
            let service =
                client.serve_with_ct(transport, ct.clone()).await.map_err(|e| McpError::Initialize(Box::new(e)))?;
            Ok(Connected { service, child: None, pid: None, tools_changed, ct })
        }
    }
}

/// A remote tool as the host judged it, before registry registration.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub tool: DiscoveredTool,
    /// Set iff the tool passed the permission checks.
    pub spec: Option<ToolSpec>,
}

/// Judges every listed remote tool (sorted by remote name, first of duplicate names wins).
pub(crate) fn candidates(config: &AdapterConfig, mut tools: Vec<Tool>) -> Vec<Candidate> {
    if tools.len() > MAX_TOOLS_PER_ADAPTER {
        tracing::warn!(
            adapter = config.key.as_str(),
            listed = tools.len(),
            kept = MAX_TOOLS_PER_ADAPTER,
            "MCP adapter announced too many tools; ignoring the rest"
        );
        tools.truncate(MAX_TOOLS_PER_ADAPTER);
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let remote = tool.name.to_string();
        let permission = permission_from_annotations(tool.annotations.as_ref());
        let host_name = truncate_bytes(&format!("{}.{remote}", config.namespace), MAX_NAME_BYTES, ELLIPSIS);
        let mut discovered = DiscoveredTool {
            name: host_name,
            remote_name: truncate_bytes(&remote, MAX_NAME_BYTES, ELLIPSIS),
            permission,
            authorized: false,
            reason: None,
        };
        if !seen.insert(remote.clone()) {
            discovered.reason = Some(McpError::DuplicateTool.to_string());
            out.push(Candidate { tool: discovered, spec: None });
            continue;
        }
        match authorize(&config.namespace, &remote, permission, &config.allow, config.tools.as_ref()) {
            Err(reason) => {
                discovered.reason = Some(reason.to_string());
                out.push(Candidate { tool: discovered, spec: None });
            }
            Ok(name) => {
                discovered.authorized = true;
                let description = tool
                    .description
                    .as_deref()
                    .filter(|d| !d.trim().is_empty())
                    .or(tool.title.as_deref().filter(|t| !t.trim().is_empty()))
                    .map_or_else(|| format!("MCP tool {remote}"), str::to_owned);
                let description = prefix_chars(&description, MAX_DESCRIPTION_CHARS).to_owned();
                let schema = Value::Object((*tool.input_schema).clone());
                let spec = ToolSpec::new(name, description, permission, schema)
                    .with_timeout(config.effective_call_timeout() + REGISTRY_TIMEOUT_SLACK);
                out.push(Candidate { tool: discovered, spec: Some(spec) });
            }
        }
    }
    out
}

/// `{"isError":bool,"content":[...],"structuredContent":...}` as JSON text of at most `max` bytes,
/// redacted before anything (the model, the audit, the API) sees it: every secret value the
/// host resolved, credential fragments, token-shaped strings and secret-named `{name, value}`
/// entries, with `"redacted": {counts}` when something was.
///
/// A result that would be larger keeps `isError`, drops `structuredContent`, and carries a cut
/// text rendering of the content with `"truncated": true`.
pub fn render_result(result: &CallToolResult, max: usize) -> String {
    let is_error = result.is_error.unwrap_or(false);
    let mut content = serde_json::to_value(&result.content).unwrap_or_else(|_| Value::Array(Vec::new()));
    let mut structured = result.structured_content.clone().unwrap_or(Value::Null);
    let mut counts = crate::kubernetes::redact::scrub(&mut content);
    counts.add(&crate::kubernetes::redact::scrub(&mut structured));
    let mut full = serde_json::json!({
        "isError": is_error,
        "content": content,
        "structuredContent": structured,
    });
    if !counts.is_empty() {
        full["redacted"] = serde_json::to_value(counts).unwrap_or(Value::Null);
    }
    let full = full.to_string();
    if full.len() <= max {
        return full;
    }
    let text = content.to_string();
    let mut budget = max.saturating_sub(128);
    loop {
        let cut = serde_json::json!({
            "isError": is_error,
            "truncated": true,
            "content": [{ "type": "text", "text": truncate_bytes(&text, budget, ELLIPSIS) }],
            "structuredContent": Value::Null,
        })
        .to_string();
        if cut.len() <= max || budget == 0 {
            return cut;
        }
        budget = budget.saturating_mul(3) / 4;
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ContentBlock, ToolAnnotations};

    use super::*;

    fn config(allow: &[Permission], tools: Option<&[&str]>) -> AdapterConfig {
        AdapterConfig {
            key: "McpAdapter/ns/x".into(),
            namespace: "mcp.x".into(),
            transport: Transport::Http {
                url: "http://127.0.0.1:1/mcp".into(),
                headers: vec![("Authorization".into(), "Bearer s3cr3t".into())],
            },
            allow: allow.iter().copied().collect(),
            tools: tools.map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
            call_timeout: Duration::from_secs(3),
            fingerprint: "f".into(),
        }
    }

    fn tool(name: &str, read_only: Option<bool>, schema: Value) -> Tool {
        let Value::Object(schema) = schema else { panic!("schema must be an object") };
        let mut t = Tool::new(name.to_owned(), format!("{name} tool"), Arc::new(schema));
        if let Some(ro) = read_only {
            let mut a = ToolAnnotations::default();
            a.read_only_hint = Some(ro);
            t.annotations = Some(a);
        }
        t
    }

    #[test]
    fn a_result_echoing_a_secret_reaches_no_one_unredacted() {
        crate::redact::register("resolved-mcp-secret-6e1f");
        let echoed = CallToolResult::success(vec![ContentBlock::text(
            "connected with resolved-mcp-secret-6e1f; password=hunter22 token ghp_0123456789abcdefABCDEF0123456789abcd",
        )]);
        let text = render_result(&echoed, 4096);
        for secret in ["resolved-mcp-secret-6e1f", "hunter22", "ghp_0123456789abcdefABCDEF0123456789abcd"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["redacted"]["tokens"], 3, "{text}");
        let plain = render_result(&CallToolResult::success(vec![ContentBlock::text("up 1")]), 4096);
        assert!(!plain.contains("redacted"), "nothing to redact, nothing added: {plain}");
    }

    #[test]
    fn debug_never_shows_secret_values() {
        let c = config(&[Permission::Read], None);
        let text = format!("{c:?}");
        assert!(text.contains("Authorization") && !text.contains("s3cr3t"), "{text}");
        let stdio = Transport::Stdio {
            command: "x".into(),
            args: vec![],
            env: vec![("TOKEN".into(), "hunter2".into())],
            working_dir: None,
        };
        let text = format!("{stdio:?}");
        assert!(text.contains("TOKEN") && !text.contains("hunter2"), "{text}");
    }

    #[test]
    fn candidates_judge_each_tool() {
        let obj = serde_json::json!({"type": "object"});
        let c = config(&[Permission::Read], Some(&["a", "b", "bad name"]));
        let list = vec![
            tool("b", None, obj.clone()),
            tool("a", Some(true), obj.clone()),
            tool("c", Some(true), obj.clone()),
            tool("bad name", Some(true), obj.clone()),
            tool("a", Some(true), obj),
        ];
        let out = candidates(&c, list);
        let summary: Vec<(&str, bool)> = out.iter().map(|c| (c.tool.name.as_str(), c.tool.authorized)).collect();
        assert_eq!(
            summary,
            vec![
                ("mcp.x.a", true),
                ("mcp.x.a", false),
                ("mcp.x.b", false),
                ("mcp.x.bad name", false),
                ("mcp.x.c", false)
            ]
        );
        assert!(out[0].spec.is_some() && out[1].spec.is_none());
        assert_eq!(out[0].spec.as_ref().map(|s| s.timeout), Some(Duration::from_secs(4)));
        assert!(out[2].tool.reason.as_deref().unwrap_or_default().contains("dangerous"));
        assert!(out[4].tool.reason.as_deref().unwrap_or_default().contains("allowlist"));
    }

    #[test]
    fn names_and_descriptions_are_bounded() {
        let obj = serde_json::json!({"type": "object"});
        let long = tool(&"é".repeat(300), Some(true), obj.clone());
        let mut blank = tool("blank", Some(true), obj.clone());
        blank.description = Some("  ".into());
        let mut wordy = tool("wordy", Some(true), obj);
        wordy.description = Some("ü".repeat(MAX_DESCRIPTION_CHARS + 10).into());
        // Sorted by remote name: blank, wordy, then the long non-ASCII name.
        let out = candidates(&config(&[Permission::Read], None), vec![long, blank, wordy]);
        let long = &out[2].tool;
        assert!(!long.authorized, "a 600-byte name is not a valid tool name");
        // Cut on a character boundary, marker included.
        assert_eq!(long.remote_name, format!("{}...", "é".repeat(126)));
        assert!(long.name.len() <= 256 && long.name.starts_with("mcp.x.é"));
        let description = |i: usize| out[i].spec.as_ref().map(|s| s.description.clone()).unwrap_or_default();
        assert_eq!(description(0), "MCP tool blank", "blank descriptions fall back to the name");
        assert_eq!(description(1).chars().count(), MAX_DESCRIPTION_CHARS);
    }

    #[test]
    fn connection_errors_name_entries_not_values() {
        let mut c = config(&[Permission::Read], None);
        c.transport = Transport::Stdio {
            command: "true".into(),
            args: vec![],
            env: vec![("TOKEN".into(), "sec\0ret".into())],
            working_dir: None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let err = runtime.block_on(connect(&c, &HostOptions::default())).err().unwrap();
        assert_eq!(err.to_string(), "environment variable TOKEN has a value with a NUL byte");
        c.transport = Transport::Http {
            url: "http://127.0.0.1:1/mcp".into(),
            headers: vec![("X-Key".into(), "bad\nvalue".into())],
        };
        let err = runtime.block_on(connect(&c, &HostOptions::default())).err().unwrap();
        assert_eq!(err.to_string(), "header X-Key has a value that is not valid");
        c.transport = Transport::Stdio { command: String::new(), args: vec![], env: vec![], working_dir: None };
        let err = runtime.block_on(connect(&c, &HostOptions::default())).err().unwrap();
        assert!(matches!(err, McpError::EmptyCommand));
    }

    #[test]
    fn results_are_rendered_and_bounded() {
        let r = CallToolResult::error(vec![ContentBlock::text("boom")]);
        let v: Value = serde_json::from_str(&render_result(&r, 1024)).unwrap();
        assert_eq!(v["isError"], true);
        assert_eq!(v["content"][0]["text"], "boom");
        let big = CallToolResult::success(vec![ContentBlock::text("\"é\n".repeat(10_000))]);
        let text = render_result(&big, 2048);
        assert!(text.len() <= 2048, "{}", text.len());
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["truncated"], true);
        assert_eq!(v["isError"], false);
    }
}
