//! The composition root: what `serve` and `ask` start, and how live components
//! (MCP adapters, knowledge-base indexes, discovered facts) are kept in step with
//! the Catalog. Domain modules never import this layer; `cli` calls it.

pub mod anchor;
pub(crate) mod ask;
pub(crate) mod assemble;
pub mod bots;
pub mod change;
pub(crate) mod kube_tools;
pub(crate) mod leader;
pub(crate) mod live;
pub mod migrate;
pub(crate) mod narrow;
pub mod policy;
pub(crate) mod process;
pub(crate) mod schedules;
pub(crate) mod serve;
pub(crate) mod sources;
pub mod storage;
pub mod workspaces;
