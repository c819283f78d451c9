//! One Run in-process for `akritas ask`: the same engine, budget, audit and MCP
//! adapters as the server, without HTTP.

use anyhow::{Context, Result};

use super::{assemble, live};
use crate::catalog::CatalogStore;
use crate::catalog::directory::DirectorySource;
use crate::catalog::merge;
use crate::catalog::secrets::EnvSecrets;
use crate::catalog::status::StatusBoard;
use crate::config::Settings;
use crate::engine::conversation::{Speaker, Turn};
use crate::engine::instructions::SystemInstructions;
use crate::engine::request::{RunOutcome, RunRequest};
use crate::engine::run::Engine;
use crate::mcp::{HostOptions, McpHost, from_catalog};

/// Answers one question as a Run from the command line.
pub async fn ask(question: &str, settings: Settings) -> Result<RunOutcome> {
    let instructions = SystemInstructions::load(&settings.system_instructions)?;
    let store = CatalogStore::new();
    let skills_dir = assemble::skills_dir(&settings)?;
    if !settings.resources.is_empty() || skills_dir.is_some() {
        let reload = DirectorySource::new(settings.resources.clone(), skills_dir).reload();
        merge::apply(reload, &store, &StatusBoard::default());
    }
    let llm = assemble::llm_client(&settings, &instructions)?;
    let audit = assemble::open_audit(&settings)?;
    let knowledge = assemble::knowledge_bases(&settings);
    let catalog = store.current();
    let worker = knowledge.clone();
    tokio::task::spawn_blocking(move || worker.refresh(&catalog)).await.context("indexing knowledge bases")?;
    let engine = assemble::engine(&settings, llm, audit, store.clone(), &knowledge);
    let mcp = connect_adapters(&store, &engine).await;
    let request = RunRequest {
        source: "cli".into(),
        actor: "cli".into(),
        turns: vec![Turn { role: Speaker::User, content: question.to_string() }],
        ..RunRequest::default()
    };
    let outcome = engine.run(request).await.context("the Run failed");
    mcp.shutdown().await;
    outcome
}

/// Starts the Catalog's MCP adapters and waits (bounded) until each has connected
/// or failed, so the Run sees their tools.
async fn connect_adapters(store: &CatalogStore, engine: &Engine) -> McpHost {
    let host = McpHost::new(HostOptions::default());
    let (configs, failures) = from_catalog::adapters(&store.current(), &EnvSecrets::process());
    for (key, error) in failures {
        eprintln!("akritas ask: MCP adapter {key} not started: {error}");
    }
    if configs.is_empty() {
        return host;
    }
    let expected = configs.len();
    host.reconcile(configs).await;
    live::adapters_settled(&host, expected, live::MCP_CONNECT_WAIT).await;
    for status in host.status().iter().filter(|s| !s.connected) {
        eprintln!(
            "akritas ask: MCP adapter {} not connected: {}",
            status.key,
            status.last_error.as_deref().unwrap_or("still connecting")
        );
    }
    engine.set_tools(&host.registry());
    host
}
