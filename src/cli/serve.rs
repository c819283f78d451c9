//! `akritas serve`: resolve settings, load instructions and resources, serve HTTP,
//! shut down gracefully on SIGTERM/SIGINT.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;

use super::{assemble, live};
use crate::alerts::worker::{Worker, WorkerSettings};
use crate::catalog::CatalogStore;
use crate::catalog::directory::{self, DirectorySource};
use crate::catalog::secrets::{EnvSecrets, SecretResolver};
use crate::catalog::status::StatusBoard;
use crate::config::{self, LogFormat, ServeFlags, Settings};
use crate::engine::instructions::SystemInstructions;
use crate::mcp::{HostOptions, McpHost, from_catalog};
use crate::web::auth::ApiKeys;
use crate::web::{self, AppState, HostInfo};

/// Runs the server until a signal; prints a clear message and exits non-zero on
/// any startup problem.
pub fn run(flags: &ServeFlags) -> ExitCode {
    let settings = match config::load(flags, &|name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("akritas serve: {error}");
            return ExitCode::from(2);
        }
    };
    init_tracing(settings.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("akritas serve: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("akritas serve: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

async fn serve(settings: Settings) -> Result<()> {
    let instructions = SystemInstructions::load(&settings.system_instructions)?;
    let keys = ApiKeys::from_env(&settings.api_keys, &|name| std::env::var(name).ok())?;
    if !keys.enabled() {
        if !settings.address.ip().is_loopback() && !settings.allow_unauthenticated {
            bail!(
                "no API key is configured but the address {} is reachable from other hosts; set {} (or configure api_keys), \
                 or pass --allow-unauthenticated to accept anonymous callers",
                settings.address,
                settings.api_keys.first().map(|k| k.env.as_str()).unwrap_or("AKRITAS_API_KEY"),
            );
        }
        tracing::warn!(address = %settings.address, "authentication disabled: no API key configured");
    }
    if settings.kubernetes {
        bail!("operator mode (--kubernetes) is not available in this version; run standalone with --resources DIR");
    }

    let cancel = CancellationToken::new();
    let store = CatalogStore::new();
    let board = StatusBoard::default();
    let mut tasks = tokio::task::JoinSet::new();
    let skills_dir = assemble::skills_dir(&settings)?;
    if settings.resources.is_empty() && skills_dir.is_none() {
        tracing::warn!("no resource directories given (--resources DIR); the Catalog is empty");
    } else {
        let mut source = DirectorySource::new(settings.resources.clone(), skills_dir);
        let (source, reload) = tokio::task::spawn_blocking(move || {
            let reload = source.reload();
            (source, reload)
        })
        .await
        .context("loading resources")?;
        directory::apply(reload, &store, &board);
        tasks.spawn(directory::watch(source, store.clone(), board.clone(), cancel.clone()));
    }

    let info = HostInfo {
        mode: "standalone",
        model: settings.model.clone(),
        response_language: settings.response_language.clone(),
        instructions_sha256: instructions.sha256(),
        max_body_bytes: usize::try_from(settings.max_body_bytes).unwrap_or(usize::MAX),
    };
    let llm = assemble::llm_client(&settings, &instructions)?;
    let audit = {
        let settings = settings.clone();
        tokio::task::spawn_blocking(move || assemble::open_audit(&settings))
            .await
            .context("opening the audit journal")??
    };
    let knowledge = assemble::knowledge_bases(&settings);
    let engine = Arc::new(assemble::engine(&settings, llm, audit, store.clone(), &knowledge));
    tasks.spawn(live::knowledge_bases(knowledge, store.clone(), board.clone(), cancel.clone()));
    let mcp = McpHost::new(HostOptions::default());
    tasks.spawn(live::mcp_adapters(
        mcp.clone(),
        store.clone(),
        board.clone(),
        engine.clone(),
        Arc::new(EnvSecrets::process()),
        cancel.clone(),
    ));
    let alerts = {
        let path = settings.data_dir.join("alerts").join("alerts.jsonl");
        let store = tokio::task::spawn_blocking(move || crate::alerts::store::AlertStore::open(&path))
            .await
            .context("opening the alert journal")?
            .context("opening the alert journal")?;
        Arc::new(store)
    };
    let secrets: Arc<dyn SecretResolver> = Arc::new(EnvSecrets::process());
    let worker = Worker::new(
        alerts.clone(),
        engine.clone(),
        store.clone(),
        secrets.clone(),
        board.clone(),
        WorkerSettings::from_settings(&settings),
    )
    .context("building the alert worker")?;
    worker.recover().await.context("recovering interrupted alert jobs")?;
    {
        // Investigations wait (bounded) for the adapters configured at start, so a
        // resumed job does not run without the tools it was meant to have.
        let (engine, expected, cancel) =
            (engine.clone(), from_catalog::adapters(&store.current(), secrets.as_ref()).0.len(), cancel.clone());
        tasks.spawn(async move {
            live::adapters_settled(&mcp, expected, live::MCP_CONNECT_WAIT).await;
            engine.set_tools(&mcp.registry());
            Arc::new(worker).run(cancel).await;
        });
    }
    tasks.spawn(live::alert_sources(alerts.clone(), store.clone(), board.clone(), cancel.clone()));
    let state = AppState {
        catalog: store.clone(),
        board,
        keys: Arc::new(keys),
        engine,
        alerts: Some(alerts),
        secrets,
        info: Arc::new(info),
    };
    let listener = tokio::net::TcpListener::bind(settings.address)
        .await
        .with_context(|| format!("cannot listen on {} (set --address to a free address)", settings.address))?;
    let catalog = store.current();
    tracing::info!(
        address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        version = env!("CARGO_PKG_VERSION"),
        mode = "standalone",
        catalog_version = catalog.version,
        resources = catalog.entries.len(),
        api_keys = %state.keys.names().join(","),
        system_instructions = %instructions.path().display(),
        "Akritas listening"
    );

    tasks.spawn(shutdown_on_signal(cancel.clone()));
    web::serve(listener, web::router(state), cancel.clone(), settings.shutdown_timeout).await.context("HTTP server")?;
    cancel.cancel();
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(settings.shutdown_timeout, drain).await.is_err() {
        tracing::warn!("background tasks did not stop in time");
    }
    tracing::info!("Akritas stopped");
    Ok(())
}

async fn shutdown_on_signal(cancel: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = cancel.cancelled() => return,
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received; shutting down"),
        _ = terminate => tracing::info!("SIGTERM received; shutting down"),
    }
    cancel.cancel();
}
