//! The composition root: what `serve` and `ask` start, and how live components
//! (MCP adapters, knowledge-base indexes, discovered facts) are kept in step with
//! the Catalog. Domain modules never import this layer; `cli` calls it.

pub mod anchor;
pub mod ask;
pub mod assemble;
pub mod bots;
pub mod change;
pub mod kube_tools;
pub mod leader;
pub mod live;
pub mod narrow;
pub mod policy;
pub mod process;
pub mod serve;
pub mod sources;
pub mod workspaces;
