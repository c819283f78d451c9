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
use crate::operator;
use crate::operator::projection::{self, ProjectionSettings};
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
    let cancel = CancellationToken::new();
    let leadership_lost = CancellationToken::new();
    let client = if settings.kubernetes {
        match lead(&settings, &instructions, &keys, &leadership_lost).await? {
            Some(client) => Some(client),
            // Stopped by a signal while standing by.
            None => return Ok(()),
        }
    } else {
        None
    };
    let store = CatalogStore::new();
    let board = StatusBoard::default();
    let mut tasks = tokio::task::JoinSet::new();
    let (secrets, secrets_changed): (Arc<dyn SecretResolver>, _) = match &client {
        Some(client) => operator_source(client.clone(), &settings, &store, &board, &mut tasks, &cancel, true).await?,
        None => {
            standalone_source(&settings, &store, &board, &mut tasks, &cancel).await?;
            (Arc::new(EnvSecrets::process()), tokio::sync::watch::channel(0).1)
        }
    };
    let mode = if settings.kubernetes { "operator" } else { "standalone" };

    let info = host_info(&settings, &instructions, mode);
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
        secrets.clone(),
        secrets_changed.clone(),
        cancel.clone(),
    ));
    let alerts = {
        let path = settings.data_dir.join("alerts").join("alerts.jsonl");
        let store = tokio::task::spawn_blocking(move || crate::alerts::store::AlertStore::open(&path))
            .await
            .context("opening the alert journal")?
            .context("opening the alert journal")?;
        // The replayed records are gone; their memory goes back to the system.
        live::release_freed_memory();
        Arc::new(store)
    };
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
    tasks.spawn(live::discovered_facts(
        store.clone(),
        board.clone(),
        secrets.clone(),
        secrets_changed.clone(),
        cancel.clone(),
    ));
    tasks.spawn(live::alert_sources(alerts.clone(), store.clone(), board.clone(), cancel.clone()));
    if let (Some(client), Some(audit)) = (client, engine.audit().cloned()) {
        let namespace = settings.namespace.clone().unwrap_or_else(|| pod_namespace(&settings));
        let projection = ProjectionSettings { namespace, retention: settings.record_retention };
        tasks.spawn(projection::run(client.clone(), audit, alerts.clone(), projection, cancel.clone()));
        tasks.spawn(projection::serve_requests(client, settings.namespace.clone(), engine.clone(), cancel.clone()));
    }
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
        mode,
        catalog_version = catalog.version,
        resources = catalog.entries.len(),
        api_keys = %state.keys.names().join(","),
        system_instructions = %instructions.path().display(),
        "Akritas listening"
    );

    tasks.spawn(shutdown_on_signal(cancel.clone()));
    {
        let (lost, cancel) = (leadership_lost.clone(), cancel.clone());
        tasks.spawn(async move {
            tokio::select! {
                _ = lost.cancelled() => cancel.cancel(),
                _ = cancel.cancelled() => {}
            }
        });
    }
    web::serve(listener, web::router(state), cancel.clone(), settings.shutdown_timeout).await.context("HTTP server")?;
    cancel.cancel();
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(settings.shutdown_timeout, drain).await.is_err() {
        tracing::warn!("background tasks did not stop in time");
    }
    if leadership_lost.is_cancelled() {
        bail!("the leader Lease was lost; stopping so that a new leader can take over");
    }
    tracing::info!("Akritas stopped");
    Ok(())
}

/// The namespace of this pod (the Lease and, by default, Runs and Incidents live there).
fn pod_namespace(settings: &Settings) -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty())
        .or_else(|| settings.namespace.clone())
        .unwrap_or_else(|| "default".into())
}

fn host_info(settings: &Settings, instructions: &SystemInstructions, mode: &'static str) -> HostInfo {
    HostInfo {
        mode,
        model: settings.model.clone(),
        response_language: settings.response_language.clone(),
        instructions_sha256: instructions.sha256(),
        max_body_bytes: usize::try_from(settings.max_body_bytes).unwrap_or(usize::MAX),
    }
}

/// Operator mode: connects to the API server and returns once this replica leads
/// (standing by until then); `lost` is cancelled if the Lease cannot be kept.
/// `None`: stopped by a signal while standing by.
async fn lead(
    settings: &Settings,
    instructions: &SystemInstructions,
    keys: &ApiKeys,
    lost: &CancellationToken,
) -> Result<Option<kube::Client>> {
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API (in-cluster service account or KUBECONFIG)")?;
    let identity = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("akritas-{:016x}", rand::random::<u64>()));
    let lease = operator::leader::LeaseSettings {
        name: "akritas-leader".into(),
        namespace: pod_namespace(settings),
        identity: format!("{identity}-{}", std::process::id()),
        duration: settings.lease_duration,
    };
    tracing::info!(lease = %lease.name, namespace = %lease.namespace, identity = %lease.identity, "waiting for the leader Lease");
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), &lease.namespace);
    let leading = matches!(operator::leader::try_acquire(&api, &lease).await, Ok(operator::leader::Outcome::Leading));
    if !leading && !stand_by(&client, settings, instructions, keys, &lease).await? {
        return Ok(None);
    }
    let (keeper, lost) = (client.clone(), lost.clone());
    tokio::spawn(async move {
        operator::leader::keep(keeper, lease).await;
        lost.cancel();
    });
    Ok(Some(client))
}

/// A standby replica serves reads (health, resources, tools, metrics) from its own
/// watches, writes nothing, and answers everything else 503 until it acquires the
/// Lease (`true`) or a signal stops it (`false`).
async fn stand_by(
    client: &kube::Client,
    settings: &Settings,
    instructions: &SystemInstructions,
    keys: &ApiKeys,
    lease: &operator::leader::LeaseSettings,
) -> Result<bool> {
    let cancel = CancellationToken::new();
    let stop = CancellationToken::new();
    let store = CatalogStore::new();
    let board = StatusBoard::default();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(shutdown_on_signal(stop.clone()));
    let (secrets, _) = operator_source(client.clone(), settings, &store, &board, &mut tasks, &cancel, false).await?;
    let llm = assemble::llm_client(settings, instructions)?;
    let tools = crate::tools::RegistryBuilder::new(crate::tools::ToolLimits::default()).build();
    let engine = crate::engine::run::Engine::new(
        crate::engine::request::EngineSettings::from_settings(settings),
        llm,
        tools,
        None,
        store.clone(),
        None,
    );
    let state = AppState {
        catalog: store,
        board,
        keys: Arc::new(keys.clone()),
        engine: Arc::new(engine),
        alerts: None,
        secrets,
        info: Arc::new(host_info(settings, instructions, "operator-standby")),
    };
    let listener = tokio::net::TcpListener::bind(settings.address)
        .await
        .with_context(|| format!("cannot listen on {} (set --address to a free address)", settings.address))?;
    tracing::info!(
        address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        "Akritas standby listening (reads only until this replica leads)"
    );
    let server =
        tokio::spawn(web::serve(listener, web::standby_router(state), cancel.clone(), settings.shutdown_timeout));
    let promoted = tokio::select! {
        _ = operator::leader::acquire(client, lease) => true,
        _ = stop.cancelled() => false,
    };
    cancel.cancel();
    stop.cancel();
    let _ = server.await;
    let drain = async { while tasks.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(settings.shutdown_timeout, drain).await;
    Ok(promoted)
}

/// Standalone: manifest directories (and the skills directory), watched.
async fn standalone_source(
    settings: &Settings,
    store: &CatalogStore,
    board: &StatusBoard,
    tasks: &mut tokio::task::JoinSet<()>,
    cancel: &CancellationToken,
) -> Result<()> {
    let skills_dir = assemble::skills_dir(settings)?;
    if settings.resources.is_empty() && skills_dir.is_none() {
        tracing::warn!("no resource directories given (--resources DIR); the Catalog is empty");
        return Ok(());
    }
    let mut source = DirectorySource::new(settings.resources.clone(), skills_dir);
    let (source, reload) = tokio::task::spawn_blocking(move || {
        let reload = source.reload();
        (source, reload)
    })
    .await
    .context("loading resources")?;
    directory::apply(reload, store, board);
    tasks.spawn(directory::watch(source, store.clone(), board.clone(), cancel.clone()));
    Ok(())
}

/// Longest wait for the first Catalog from the API server before serving.
const FIRST_CATALOG_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Operator mode: reflectors over the Akritas resources, ConfigMaps and Secrets;
/// status written back. Returns the secret resolver and a counter that moves when
/// a Secret changes (so live components resolve again).
async fn operator_source(
    client: kube::Client,
    settings: &Settings,
    store: &CatalogStore,
    board: &StatusBoard,
    tasks: &mut tokio::task::JoinSet<()>,
    cancel: &CancellationToken,
    write_status: bool,
) -> Result<(Arc<dyn SecretResolver>, tokio::sync::watch::Receiver<u64>)> {
    use futures_util::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    let namespace = settings.namespace.as_deref();
    let secrets_api: kube::Api<k8s_openapi::api::core::v1::Secret> = match namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    };
    let (secret_store, writer) = reflector::store();
    let (changed_tx, changed_rx) = tokio::sync::watch::channel(0u64);
    let secret_events =
        reflector::reflector(writer, watcher(secrets_api, watcher::Config::default())).default_backoff();
    let stop = cancel.clone();
    tasks.spawn(async move {
        tokio::pin!(secret_events);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                event = secret_events.next() => match event {
                    None => return,
                    Some(Ok(_)) => { changed_tx.send_modify(|n| *n += 1); }
                    Some(Err(error)) => tracing::warn!(%error, "watch of Secrets failed; retrying"),
                },
            }
        }
    });
    let (stores, changes) = operator::source::reflect(&client, namespace);
    let (generations_tx, generations_rx) = tokio::sync::watch::channel(Default::default());
    let mut first = generations_rx.clone();
    tasks.spawn(operator::source::run(stores, changes, store.clone(), board.clone(), generations_tx, cancel.clone()));
    if write_status {
        tasks.spawn(operator::status::run(client.clone(), board.clone(), generations_rx, cancel.clone()));
    }
    if tokio::time::timeout(FIRST_CATALOG_WAIT, first.changed()).await.is_err() {
        tracing::warn!("no Akritas resources read from the API server yet; serving with an empty Catalog");
    }
    let _ = tokio::time::timeout(FIRST_CATALOG_WAIT, secret_store.wait_until_ready()).await;
    Ok((Arc::new(operator::secrets::KubeSecrets::new(secret_store)), changed_rx))
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
