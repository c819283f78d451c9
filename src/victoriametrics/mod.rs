//! Read-only MCP server for VictoriaMetrics (`akritas mcp victoriametrics`).
//!
//! * [`client`]: bounded read-only HTTP client for the Prometheus-compatible query API.
//! * [`server`]: the rmcp server with the tools `query`, `query_range`, `series`, `labels`, `label_values`.
//! * [`args`]: CLI flags ([`VictoriaMetricsArgs`]) and [`run`].

pub(crate) mod args;
pub(crate) mod client;
pub(crate) mod server;

pub(crate) use args::{VictoriaMetricsArgs, run};
