//! What can go wrong in the MCP host: building an adapter's configuration, starting and keeping
//! a session, judging its tools, and calling them. No message ever carries an environment or
//! header value: text that comes from a server or a transport is shown with its causes and
//! through [`crate::redact`], which knows every resolved secret.

use std::io;
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

use crate::catalog::readiness::reasons;
use crate::catalog::secrets::SecretError;
use crate::tools::RegistryError;

/// An error and its causes, redacted (a transport error's own text often omits the cause:
/// a refused redirect, say).
fn shown(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = cause(error);
    while let Some(current) = source {
        let current_text = current.to_string();
        if !text.contains(&current_text) {
            text.push_str(": ");
            text.push_str(&current_text);
        }
        source = cause(current);
    }
    crate::redact::redact(&text)
}

/// The cause of an error, including those rmcp keeps out of `source()`.
fn cause<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a (dyn std::error::Error + 'static)> {
    if let Some(ClientInitializeError::TransportError { error, .. }) = error.downcast_ref::<ClientInitializeError>() {
        return Some(error);
    }
    if let Some(StreamableHttpError::Client(inner)) = error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return Some(inner);
    }
    error.source()
}

/// Errors of the MCP host.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    // Configuration.
    /// A stdio env entry or HTTP header has no resolvable value.
    #[error("{what} {name}: {source}")]
    Secret {
        /// `env` or `header`.
        what: &'static str,
        /// The entry's name.
        name: String,
        /// Why the secret could not be resolved.
        source: Box<SecretError>,
    },
    /// A stdio env entry or HTTP header sets neither a value nor a reference.
    #[error("{what} {name}: no value")]
    NoValue {
        /// `env` or `header`.
        what: &'static str,
        /// The entry's name.
        name: String,
    },
    /// The bundled server needs this binary's path, which is unknown.
    #[error("cannot locate the akritas binary: {0}")]
    SelfCommand(#[source] io::Error),
    /// The adapter sets neither stdio nor HTTP.
    #[error("no transport")]
    NoTransport,
    /// The stdio command is not in `stdio_commands`.
    #[error(
        "command {command:?} is not allowed: the stdio_commands setting allows [{allowed}]; add its absolute path \
         to stdio_commands, or run a bundled server as `akritas mcp victoriametrics ...`"
    )]
    CommandNotAllowed {
        /// The command of the resource.
        command: String,
        /// The allowed commands, comma-separated.
        allowed: String,
    },
    /// `akritas` with arguments that are not a bundled MCP server.
    #[error(
        "command akritas may only start a bundled MCP server (args [mcp, victoriametrics, ...] without --listen), \
         not {0}; other programs need their absolute path in the stdio_commands setting"
    )]
    SelfArgsNotAllowed(String),
    /// `workingDir` is not allowed here.
    #[error("workingDir {0}")]
    WorkingDirNotAllowed(String),
    /// The egress policy refuses the server's URL.
    #[error("{field}: {source}")]
    Egress {
        /// The field holding the URL.
        field: &'static str,
        /// Why the policy refuses it.
        source: crate::egress::EgressError,
    },
    /// An env entry that changes what the child loads.
    #[error("env entry {0} changes what the child process loads and is not allowed; remove it")]
    LoaderEnv(String),
    /// An env entry whose name `stdio_env` does not allow for the adapter's namespace.
    #[error(
        "env entry {name} may not be set for adapters of namespace {namespace}: the stdio_env setting does not \
         allow it; add {name} (or {namespace}/{name}) to stdio_env if the program needs it"
    )]
    EnvNotAllowed {
        /// The variable name.
        name: String,
        /// The adapter's namespace.
        namespace: String,
    },
    /// Another adapter the same Runs see has this tool namespace.
    #[error(
        "tool namespace {namespace} is taken by {other}, whose tools the same Runs see; set spec.namespace to \
         another name"
    )]
    ToolNamespaceTaken {
        /// The tool namespace.
        namespace: String,
        /// The adapter that keeps it.
        other: String,
    },

    // Starting a session.
    /// An environment variable name a child cannot have.
    #[error("environment variable name {0:?} is not valid")]
    EnvName(String),
    /// An environment value a child cannot have (the value is not shown).
    #[error("environment variable {0} has a value with a NUL byte")]
    EnvValue(String),
    /// The stdio command is empty.
    #[error("stdio command is empty")]
    EmptyCommand,
    /// The child process could not be started.
    #[error("cannot start {command:?}: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// The OS error from starting the program (not found, not executable, ...).
        source: io::Error,
    },
    /// The child was started without its stdio pipes.
    #[error("child stdio pipes are missing")]
    MissingPipes,
    /// An HTTP header name is not valid.
    #[error("header name {0:?} is not valid")]
    HeaderName(String),
    /// An HTTP header value is not valid (the value is not shown).
    #[error("header {0} has a value that is not valid")]
    HeaderValue(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// The MCP handshake failed.
    #[error("MCP initialization failed: {}", shown(.0.as_ref()))]
    Initialize(#[source] Box<ClientInitializeError>),
    /// Spawning or connecting plus the handshake took too long.
    #[error("connecting did not finish within {0:?}")]
    ConnectTimeout(Duration),

    // Keeping a session.
    /// The server did not list its tools.
    #[error("listing tools failed: {}", shown(.0.as_ref()))]
    ListTools(#[source] Box<ServiceError>),
    /// Listing tools took too long.
    #[error("listing tools did not finish within {0:?}")]
    ListTimeout(Duration),
    /// The stdio child exited.
    #[error("child process exited ({0})")]
    ChildExited(String),
    /// The MCP session ended.
    #[error("MCP session ended ({})", crate::redact::redact(.0))]
    SessionEnded(String),
    /// A tool call found the transport broken (the call's own message).
    #[error("{}", crate::redact::redact(.0))]
    Transport(String),

    // Judging tools.
    /// `<namespace>.<remote>` is not a valid tool name.
    #[error("host tool name is not valid: {0}")]
    ToolName(#[source] RegistryError),
    /// The tool's permission is not in the adapter's `allow`.
    #[error("permission {permission} is not allowed by the adapter (allow: [{allowed}])")]
    NotAllowed {
        /// The tool's permission.
        permission: &'static str,
        /// The allowed permissions, comma-separated.
        allowed: String,
    },
    /// The adapter's allowlist does not name the tool.
    #[error("not in the adapter's tools allowlist")]
    NotInAllowlist,
    /// An earlier tool of the same listing has this name.
    #[error("duplicate remote tool name")]
    DuplicateTool,

    // Calling tools.
    /// Tool arguments must be a JSON object.
    #[error("arguments must be a JSON object")]
    ArgumentsNotObject,
    /// The host was dropped.
    #[error("the MCP host has stopped")]
    HostStopped,
    /// The adapter was removed.
    #[error("MCP adapter {0} is not configured")]
    NotConfigured(String),
    /// The adapter no longer authorizes the tool.
    #[error("tool {tool} is no longer authorized by MCP adapter {key}")]
    Revoked {
        /// The host tool name.
        tool: String,
        /// The adapter.
        key: String,
    },
    /// The adapter has no live session.
    #[error("MCP adapter {key} is not connected{}", .last_error.as_ref().map(|e| format!(" (last error: {})", crate::redact::redact(e))).unwrap_or_default())]
    NotConnected {
        /// The adapter.
        key: String,
        /// Why it is down, if known.
        last_error: Option<String>,
    },
    /// The call's own timeout passed.
    #[error("MCP adapter {key} did not answer within {timeout:?}")]
    CallTimeout {
        /// The adapter.
        key: String,
        /// The adapter's call timeout.
        timeout: Duration,
    },
    /// The server or the transport failed the call.
    #[error("MCP adapter {key}: {}", shown(.source.as_ref()))]
    Call {
        /// The adapter.
        key: String,
        /// What failed.
        source: Box<ServiceError>,
    },
}

impl McpError {
    /// The condition reason of an adapter that is not started or not connected for this.
    pub fn reason(&self) -> &'static str {
        match self {
            McpError::CommandNotAllowed { .. } | McpError::SelfArgsNotAllowed(_) => reasons::COMMAND_NOT_ALLOWED,
            McpError::WorkingDirNotAllowed(_) => reasons::WORKING_DIR_NOT_ALLOWED,
            McpError::LoaderEnv(_) | McpError::EnvNotAllowed { .. } => reasons::ENV_NOT_ALLOWED,
            McpError::Secret { source, .. } => source.reason(),
            McpError::ToolNamespaceTaken { .. } => reasons::TOOL_NAMESPACE_TAKEN,
            McpError::Egress { source, .. } => source.reason(),
            _ => reasons::NOT_CONNECTED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_text_in_errors_is_redacted() {
        crate::redact::register("mcp-error-secret-77a1");
        let call = McpError::Call {
            key: "McpAdapter/ns/x".into(),
            source: Box::new(ServiceError::McpError(rmcp::model::ErrorData::internal_error(
                "bad token mcp-error-secret-77a1",
                None,
            ))),
        };
        let text = call.to_string();
        assert!(text.contains("bad token [redacted]") && !text.contains("mcp-error-secret-77a1"), "{text}");
        let ended = McpError::SessionEnded("closed: mcp-error-secret-77a1".into()).to_string();
        assert_eq!(ended, "MCP session ended (closed: [redacted])");
    }

    #[test]
    fn not_connected_names_the_last_error_when_known() {
        let error = McpError::NotConnected { key: "k".into(), last_error: Some("refused".into()) };
        assert_eq!(error.to_string(), "MCP adapter k is not connected (last error: refused)");
        let error = McpError::NotConnected { key: "k".into(), last_error: None };
        assert_eq!(error.to_string(), "MCP adapter k is not connected");
    }
}
