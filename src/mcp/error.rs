//! What can go wrong in the MCP host: building an adapter's configuration, starting and keeping
//! a session, judging its tools, and calling them. No message ever carries an environment or
//! header value.

use std::io;
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;

use crate::catalog::secrets::SecretError;
use crate::tools::RegistryError;

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
        /// Why.
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
    #[error("MCP initialization failed: {0}")]
    Initialize(#[source] Box<ClientInitializeError>),
    /// Spawning or connecting plus the handshake took too long.
    #[error("connecting did not finish within {0:?}")]
    ConnectTimeout(Duration),

    // Keeping a session.
    /// The server did not list its tools.
    #[error("listing tools failed: {0}")]
    ListTools(#[source] Box<ServiceError>),
    /// Listing tools took too long.
    #[error("listing tools did not finish within {0:?}")]
    ListTimeout(Duration),
    /// The stdio child exited.
    #[error("child process exited ({0})")]
    ChildExited(String),
    /// The MCP session ended.
    #[error("MCP session ended ({0})")]
    SessionEnded(String),
    /// A tool call found the transport broken (the call's own message).
    #[error("{0}")]
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
    #[error("MCP adapter {key} is not connected{}", .last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default())]
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
    #[error("MCP adapter {key}: {source}")]
    Call {
        /// The adapter.
        key: String,
        /// What failed.
        source: Box<ServiceError>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_connected_names_the_last_error_when_known() {
        let error = McpError::NotConnected { key: "k".into(), last_error: Some("refused".into()) };
        assert_eq!(error.to_string(), "MCP adapter k is not connected (last error: refused)");
        let error = McpError::NotConnected { key: "k".into(), last_error: None };
        assert_eq!(error.to_string(), "MCP adapter k is not connected");
    }
}
