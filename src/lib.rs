//! Akritas: a self-hosted, Kubernetes-native operations assistant.
//!
//! The public surface is what the binary (`src/main.rs`), the integration tests, the benches and
//! `testkit/` use: a module is `pub` only where one of them names a path through it, and every
//! other module is `pub(crate)` (so the compiler reports an item nothing uses). A module a test
//! starts to need is opened here or in its parent, not re-exported around it.

pub mod alerts;
pub mod app;
pub mod audit;
pub mod bots;
pub mod catalog;
pub mod change;
pub mod cli;
pub mod config;
pub(crate) mod cron;
pub mod egress;
pub mod engine;
pub mod eval;
pub(crate) mod ids;
pub mod investigation;
pub mod journal;
pub mod knowledge;
pub mod kubernetes;
pub(crate) mod language;
pub mod llm;
pub mod mcp;
pub mod notify;
pub mod operator;
pub(crate) mod outbound;
pub(crate) mod redact;
pub mod replay;
pub mod resources;
pub mod schedules;
pub mod severity;
pub(crate) mod slots;
pub(crate) mod suggest;
pub mod telemetry;
pub mod tenancy;
pub(crate) mod text;
pub mod tools;
pub(crate) mod victoriametrics;
pub mod web;

/// Installs the one rustls crypto provider of the whole tree (ring). Call before
/// building any HTTP or Kubernetes client; calling it again is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
