//! `akritas ask "QUESTION"`: one Run in-process (same engine, budget and audit as
//! the server) and its answer, tools and budget on stdout.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::assemble;
use crate::catalog::CatalogStore;
use crate::catalog::directory::{self, DirectorySource};
use crate::catalog::secrets::EnvSecrets;
use crate::catalog::status::StatusBoard;
use crate::config::{self, ServeFlags};
use crate::engine::conversation::{Speaker, Turn};
use crate::engine::instructions::SystemInstructions;
use crate::engine::request::{RunOutcome, RunRequest};
use crate::mcp::{HostOptions, McpHost, from_catalog};

/// Runs the question; exit 0 with an answer, 1 on any failure (message on stderr).
pub fn run(question: &str, flags: &ServeFlags, json: bool) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let settings = match config::load(flags, &|name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("akritas ask: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("akritas ask: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(ask(question, settings)) {
        Ok(outcome) => {
            let printed = if json { print_json(&outcome) } else { print_text(&outcome) };
            if let Err(error) = printed {
                eprintln!("akritas ask: {error}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("akritas ask: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn ask(question: &str, settings: config::Settings) -> Result<RunOutcome> {
    let instructions = SystemInstructions::load(&settings.system_instructions)?;
    let store = CatalogStore::new();
    let skills_dir = assemble::skills_dir(&settings)?;
    if !settings.resources.is_empty() || skills_dir.is_some() {
        let reload = DirectorySource::new(settings.resources.clone(), skills_dir).reload();
        directory::apply(reload, &store, &StatusBoard::default());
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
async fn connect_adapters(store: &CatalogStore, engine: &crate::engine::run::Engine) -> McpHost {
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
    super::live::adapters_settled(&host, expected, super::live::MCP_CONNECT_WAIT).await;
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

fn print_text(outcome: &RunOutcome) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}\n", outcome.answer)?;
    if outcome.activity.is_empty() {
        writeln!(out, "Tools: none")?;
    } else {
        writeln!(out, "Tools:")?;
        for call in &outcome.activity {
            writeln!(out, "  {} · {} · {} ms · {}", call.name, call.status, call.duration_ms, call.id)?;
        }
    }
    for gap in &outcome.gaps {
        writeln!(out, "Unavailable check: {} ({}): {}", gap.step, gap.capability, gap.reason)?;
    }
    if !outcome.skills.is_empty() {
        writeln!(out, "Skills: {}", outcome.skills.join(", "))?;
    }
    let (u, l) = (&outcome.usage, &outcome.limits);
    writeln!(
        out,
        "Budget: model calls {}/{}, tool calls {}/{}, tool results {}/{} bytes, output tokens {}/{}, {} ms/{} ms",
        u.model_calls,
        l.max_model_calls,
        u.tool_calls,
        l.max_tool_calls,
        u.tool_result_bytes,
        l.max_tool_result_bytes,
        u.output_tokens,
        l.max_output_tokens,
        u.duration_ms,
        l.max_duration_ms
    )?;
    if let Some(id) = &outcome.run_id {
        writeln!(out, "Run: {id}")?;
    }
    Ok(())
}

fn print_json(outcome: &RunOutcome) -> std::io::Result<()> {
    let body = crate::web::runs::outcome_json(outcome, true);
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &body)?;
    writeln!(out)
}
