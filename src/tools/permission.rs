//! Tool permissions are the ones McpAdapters declare: one type for both.

pub use crate::resources::mcp_adapter::Permission;
