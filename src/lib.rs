//! Akritas: a self-hosted, Kubernetes-native operations assistant.

pub mod alerts;
pub mod app;
pub mod audit;
pub mod bots;
pub mod catalog;
pub mod change;
pub mod cli;
pub mod config;
pub mod egress;
pub mod engine;
pub mod eval;
pub mod ids;
pub mod investigation;
pub mod journal;
pub mod knowledge;
pub mod kubernetes;
pub mod language;
pub mod llm;
pub mod mcp;
pub mod notify;
pub mod operator;
pub mod outbound;
pub mod redact;
pub mod replay;
pub mod resources;
pub mod severity;
pub mod slots;
pub mod suggest;
pub mod telemetry;
pub mod tenancy;
pub mod text;
pub mod tools;
pub mod victoriametrics;
pub mod web;

/// Installs the one rustls crypto provider of the whole tree (ring). Call before
/// building any HTTP or Kubernetes client; calling it again is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
