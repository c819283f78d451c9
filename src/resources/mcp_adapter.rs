//! `McpAdapter`: an MCP server whose tools the host may offer to the model.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{Condition, MAX_VALUE_BYTES, NamedValue};

/// Pattern of a tool namespace or tool name.
pub const TOOL_NAME_PATTERN: &str = "^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$";

/// An MCP server (child process over stdio, or streamable HTTP) and the permissions
/// its tools may have. Only `read` tools ever reach chat, bots, the facade and alerts.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "McpAdapter",
    namespaced,
    doc = "An MCP server whose authorized read-only tools Akritas may offer to the model.",
    status = "McpAdapterStatus",
    shortname = "akmcp",
    category = "akritas",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Namespace", type_ = "string", json_path = ".spec.namespace"),
    printcolumn(name = "Tools", type_ = "integer", json_path = ".status.authorizedTools"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpAdapterSpec {
    /// How to reach the server.
    pub transport: McpTransport,
    /// Prefix of the host tool names (`<namespace>.<tool>`); default `mcp.<resource name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = TOOL_NAME_PATTERN))]
    pub namespace: Option<String>,
    /// Permissions a discovered tool may have to be authorized.
    #[schemars(length(min = 1, max = 3))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub allow: Vec<Permission>,
    /// Optional explicit allowlist of remote tool names; absent means every tool whose
    /// permission is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 128), regex(pattern = TOOL_NAME_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tools: Option<Vec<String>>,
    /// Per tool call timeout in seconds.
    #[serde(default = "default_call_timeout")]
    #[schemars(range(min = 1, max = 600))]
    pub call_timeout_seconds: u32,
}

fn default_call_timeout() -> u32 {
    10
}

/// Exactly one transport.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.stdio) != has(self.http)").message("set exactly one of stdio or http"))]
pub struct McpTransport {
    /// Start the server as a child process and speak MCP over its stdin/stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdio: Option<StdioTransport>,
    /// Connect to a streamable HTTP MCP endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpTransport>,
}

/// A child process, executed directly (never through a shell).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StdioTransport {
    /// Program to execute.
    #[schemars(length(min = 1, max = 4096))]
    pub command: String,
    /// Arguments after `command`, each one argv entry as written (no shell splitting or expansion).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 4096)))]
    pub args: Vec<String>,
    /// Environment of the child; it does not inherit the host's environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub env: Vec<NamedValue>,
    /// Working directory of the child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub working_dir: Option<String>,
}

/// A streamable HTTP MCP endpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpTransport {
    /// Endpoint URL (http or https).
    #[schemars(length(min = 1, max = MAX_VALUE_BYTES))]
    pub url: String,
    /// Extra request headers (for example `Authorization` from a secret).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub headers: Vec<NamedValue>,
}

/// What a tool may do, derived pessimistically from MCP annotations.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Reads only.
    Read,
    /// Changes state, not destructively.
    Write,
    /// May destroy state (the MCP default when a server says nothing).
    Dangerous,
}

/// Observed state of an McpAdapter.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpAdapterStatus {
    /// `Ready` and friends.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Tools the server announced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<DiscoveredTool>,
    /// How many of them are authorized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorized_tools: Option<u32>,
}

/// One tool as the host sees it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredTool {
    /// Host tool name `<namespace>.<remote name>` (bounded; may be invalid when not authorized).
    pub name: String,
    /// The tool's name on the MCP server.
    #[serde(default)]
    pub remote_name: String,
    /// Permission derived from the tool's annotations.
    pub permission: Permission,
    /// Whether the host may offer it to the model.
    pub authorized: bool,
    /// Why the tool is not authorized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
