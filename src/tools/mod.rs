//! Tool registry: every model-callable tool (built-in, MCP, plan) is registered, filtered and executed here.
//!
//! The host, never the model, decides what runs: a call only reaches a handler after its id, name,
//! arguments, policy and input schema have all been checked.

mod alias;
mod name;
mod policy;
mod registry;
mod result;
mod scoped;

pub use alias::openai_alias;
pub use name::ToolName;
pub use policy::{AllowAll, DenyAll, NamedPolicy, PermissionPolicy, ReadOnlyPolicy, ToolPolicy};
pub use registry::{
    ArgumentsError, CallError, DEFAULT_TOOL_TIMEOUT, MAX_DESCRIPTION_CHARS, Registry, RegistryBuilder, RegistryError,
    ToolFuture, ToolHandler, ToolLimits, ToolSpec,
};
pub use result::{ErrorCode, ToolCall, ToolError, ToolResult};
pub use scoped::ScopedTools;

#[cfg(test)]
mod tests;
