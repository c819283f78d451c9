//! MCP host: connects to McpAdapters (stdio children or streamable HTTP), judges their tools
//! pessimistically from annotations, and publishes the authorized ones as host tools.
//!
//! Secrets (stdio env values, HTTP header values) never appear in logs, status or errors.

mod adapter;
mod environment;
pub mod from_catalog;
mod host;
mod permission;

pub use adapter::{AdapterConfig, MAX_TOOLS_PER_ADAPTER, Transport};
pub use environment::child_env;
pub use host::{AdapterPhase, AdapterStatus, Backoff, DiscoveredTool, HostOptions, McpHost};
pub use permission::{authorize, permission_from_annotations, permission_name};
