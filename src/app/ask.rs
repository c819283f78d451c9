//! One Run in-process for `akritas ask`: the same engine, budget, audit and MCP
//! adapters as the server, without HTTP.

use anyhow::{Context, Result};

use super::{assemble, live, policy};
use crate::audit::RunId;
use crate::catalog::CatalogStore;
use crate::catalog::directory::DirectorySource;
use crate::catalog::merge;
use crate::catalog::policy::ResourcePolicy;
use crate::catalog::problem_log::ProblemLog;
use crate::catalog::secrets::EnvSecrets;
use crate::catalog::status::StatusBoard;
use crate::config::Settings;
use crate::engine::conversation::{Speaker, Turn};
use crate::engine::request::{RunOutcome, RunRequest};
use crate::engine::run::Engine;
use crate::mcp::{HostOptions, McpHost, from_catalog};

/// Answers one question as a Run from the command line, or with `follows` a follow-up of that
/// Run of the same audit journal.
pub async fn ask(question: &str, follows: Option<RunId>, settings: Settings) -> Result<RunOutcome> {
    let instructions = assemble::instructions(&settings)?;
    policy::register_service_secrets(&settings, &|name| std::env::var(name).ok());
    let resource_policy = policy::resource_policy(&settings);
    let store = CatalogStore::new();
    let skills = assemble::skills(&settings)?;
    if !settings.resources.is_empty() || skills.is_some() {
        let reload = DirectorySource::with_skills(settings.resources.clone(), skills).reload();
        let board = StatusBoard::default();
        merge::apply(reload, &store, &board);
        crate::catalog::problem_log::emit(&ProblemLog::default().notices(&board.get()));
    }
    let llm = assemble::llm_client(&settings, &instructions)?;
    let audit = assemble::open_audit(&settings)?;
    let knowledge = assemble::knowledge_bases(&settings);
    let catalog = store.current();
    let (worker, knowledge_policy) = (knowledge.clone(), resource_policy.clone());
    tokio::task::spawn_blocking(move || worker.refresh(&catalog, &knowledge_policy))
        .await
        .context("indexing knowledge bases")?;
    let engine = assemble::engine(&settings, llm, audit, store.clone(), &knowledge);
    engine.set_scoped_tools(super::kube_tools::build(&settings, None).await?.map(|t| t as _));
    let mcp = connect_adapters(&store, &engine, &resource_policy).await;
    let outcome = match &follows {
        None => {
            let request = RunRequest {
                source: "cli".into(),
                actor: "cli".into(),
                turns: vec![Turn { role: Speaker::User, content: question.to_string() }],
                ..RunRequest::default()
            };
            engine.run(request).await.context("the Run failed")
        }
        Some(id) => follow_up(&engine, id, question, &settings).await,
    };
    mcp.shutdown().await;
    outcome
}

/// A follow-up of the Run `id` in its own namespace, as `POST /api/v1/runs/{id}/chat` asks it.
async fn follow_up(engine: &Engine, id: &RunId, question: &str, settings: &Settings) -> Result<RunOutcome> {
    let audit = engine.audit().context("this ask keeps no audit")?;
    let Some(namespace) = audit.namespace_of(id).await.context("reading the audit journal")? else {
        anyhow::bail!(
            "no Run {id} in the audit journal of {}: --run continues a Run of the same data directory (--data-dir)",
            settings.data_dir.display()
        );
    };
    let request = RunRequest { namespace, source: "follow_up".into(), actor: "cli".into(), ..RunRequest::default() };
    engine.follow_up(id, question, request).await.with_context(|| format!("the follow-up of {id} failed"))
}

/// Starts the Catalog's MCP adapters and waits (bounded) until each has connected
/// or failed, so the Run sees their tools.
async fn connect_adapters(store: &CatalogStore, engine: &Engine, resource_policy: &ResourcePolicy) -> McpHost {
    let host = McpHost::new(HostOptions::default());
    let secrets = policy::guarded(std::sync::Arc::new(EnvSecrets::process()), resource_policy);
    let (configs, failures) = from_catalog::adapters(&store.current(), secrets.as_ref(), resource_policy);
    for (key, check) in failures {
        eprintln!("akritas ask: MCP adapter {key} not started ({}): {}", check.reason, check.message);
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
