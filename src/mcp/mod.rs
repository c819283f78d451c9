//! MCP host: connects to McpAdapters (stdio children or streamable HTTP), judges their tools
//! pessimistically from annotations, and publishes the authorized ones as host tools.
//!
//! Secrets (stdio env values, HTTP header values) never appear in logs, status or errors.

mod adapter;
mod environment;
mod error;
pub mod from_catalog;
mod host;
mod permission;
mod supervise;
mod types;

pub use adapter::{AdapterConfig, MAX_TOOLS_PER_ADAPTER, Transport, render_result};
pub use environment::child_env;
pub use error::McpError;
pub use host::McpHost;
pub use permission::{authorize, permission_from_annotations, permission_name};
pub use types::{AdapterPhase, AdapterStatus, Backoff, DiscoveredTool, HostOptions};
