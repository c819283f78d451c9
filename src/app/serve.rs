//! What `serve` starts: resources (directory or Kubernetes), the engine, live
//! components kept in step with the Catalog, the alert worker, the Run/Incident
//! projection and the HTTP server; everything stops on one cancellation token.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;

use super::process::{host_info, pod_namespace, shutdown_on_signal};
use super::{assemble, leader, live, policy, sources};
use crate::alerts::worker::Worker;
use crate::catalog::CatalogStore;
use crate::catalog::secrets::{EnvSecrets, SecretResolver};
use crate::catalog::status::StatusBoard;
use crate::config::Settings;
use crate::llm::LlmClient;
use crate::llm::structured::Protocol;
use crate::mcp::{HostOptions, McpHost, from_catalog};
use crate::operator::projection::{self, ProjectionSettings};
use crate::operator::requests;
use crate::resources::Kind;
use crate::web::auth::ApiKeys;
use crate::web::{self, AppState};

/// Serves until a signal (or, in operator mode, until the leader Lease is lost:
/// then an error so that the process exits and a new leader takes over).
pub async fn serve(mut settings: Settings) -> Result<()> {
    // Logs, status and errors name the data directory's files by absolute path.
    if let Ok(absolute) = std::path::absolute(&settings.data_dir) {
        settings.data_dir = absolute;
    }
    let open_files = super::process::raise_open_file_limit();
    let limits = super::process::listen_limits(&settings, open_files);
    let instructions = assemble::instructions(&settings)?;
    let keys = ApiKeys::from_env(&settings.api_keys, &|name| std::env::var(name).ok())?
        .with_home_namespace(&super::process::home_namespace(&settings));
    policy::register_service_secrets(&settings, &|name| std::env::var(name).ok());
    policy::install_egress(&settings);
    let resource_policy = Arc::new(policy::resource_policy(&settings));
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
    // On a shared database every replica serves; only the Kubernetes writers follow the Lease.
    let shared = settings.kubernetes && settings.on_database();
    let client = if shared {
        Some(leader::connect().await?)
    } else if settings.kubernetes {
        match leader::lead(&settings, &instructions, &keys, limits, &leadership_lost).await? {
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
    let (secrets, secrets_changed, generations): (Arc<dyn SecretResolver>, _, _) = match &client {
        Some(client) => {
            sources::operator(client.clone(), &settings, &store, &board, &mut tasks, &cancel, !shared).await?
        }
        None => {
            sources::standalone(&settings, &store, &board, &mut tasks, &cancel).await?;
            (
                Arc::new(EnvSecrets::process()),
                tokio::sync::watch::channel(0).1,
                tokio::sync::watch::channel(Default::default()).1,
            )
        }
    };
    tasks.spawn(crate::catalog::problem_log::run(board.clone(), cancel.clone()));
    let secrets = policy::guarded(secrets, &resource_policy);
    let mode = if settings.kubernetes { "operator" } else { "standalone" };

    let mut info = host_info(&settings, &instructions, mode);
    // Open MCP sessions (their SSE streams) end with the server, not after the grace period.
    info.mcp.shutdown = cancel.child_token();
    let llm = assemble::llm_client(&settings, &instructions)?;
    tasks.spawn(watch_model_server(llm.clone(), settings.model_protocol == Protocol::Auto, cancel.clone()));
    let stores = super::storage::open(&settings, &mut tasks, &cancel).await?;
    if let Some((db, replica)) = stores.database() {
        let watch = crate::journal::database::HealthWatch::new(db.clone()).await;
        tasks.spawn(watch.clone().run(settings.database_health_interval, cancel.clone()));
        info.database = Some((watch, replica.clone()));
    }
    let audit = match stores.database() {
        Some((db, replica)) => {
            Arc::new(crate::audit::AuditLog::open_database(db, assemble::audit_storage(&settings)?, replica.clone()))
        }
        None => {
            let settings = settings.clone();
            tokio::task::spawn_blocking(move || assemble::open_audit(&settings))
                .await
                .context("opening the audit journal")??
        }
    };
    // The anchor: the configured file, or in operator mode with a key, a ConfigMap.
    let anchor = match (&settings.audit_anchor_file, &client) {
        (Some(path), _) => Some(super::anchor::Target::File(PathBuf::from(path))),
        (None, Some(client)) if settings.audit_key_env.is_some() => {
            Some(super::anchor::Target::ConfigMap { client: client.clone(), namespace: pod_namespace(&settings) })
        }
        _ => None,
    };
    if let Some(target) = anchor {
        super::anchor::check_at_start(&audit, &target).await?;
        tasks.spawn(super::anchor::keep(audit.clone(), target, cancel.clone()));
    }
    tasks.spawn(flush_reads(audit.clone(), cancel.clone()));
    let knowledge = assemble::knowledge_bases(&settings);
    let audit_log = audit.clone();
    let change_llm = llm.clone();
    let engine = Arc::new(assemble::engine(&settings, llm, audit, store.clone(), &knowledge));
    engine.set_scoped_tools(super::kube_tools::build(&settings, client.as_ref()).await?.map(|t| t as _));
    tasks.spawn(live::knowledge_bases(
        knowledge,
        store.clone(),
        board.clone(),
        resource_policy.clone(),
        cancel.clone(),
    ));
    let mcp = McpHost::new(HostOptions::default());
    let mcp_sources = live::McpSources {
        store: store.clone(),
        secrets: secrets.clone(),
        secrets_changed: secrets_changed.clone(),
        policy: resource_policy.clone(),
    };
    tasks.spawn(live::mcp_adapters(mcp.clone(), mcp_sources, board.clone(), engine.clone(), cancel.clone()));
    let alerts = {
        let path = settings.data_dir.join("alerts").join("alerts.jsonl");
        let limits = crate::app::narrow::admission(&settings);
        let catalog = store.current();
        // Records written before namespaces name a source by name only: the namespace of
        // the one AlertSource of that name now, else `default` (docs/alerts.md).
        let legacy_namespace = move |name: &str| {
            let mut namespaces = catalog.of_kind(Kind::AlertSource).filter(|(key, _)| key.name == name);
            match (namespaces.next(), namespaces.next()) {
                (Some((key, _)), None) => key.namespace.clone(),
                _ => crate::tenancy::DEFAULT_NAMESPACE.to_string(),
            }
        };
        let storage = alert_storage(&settings);
        let store = match stores.database() {
            Some((db, _)) => crate::alerts::store::AlertStore::open_database(db, limits, storage)
                .await
                .context("opening the alert store in the database")?,
            None => tokio::task::spawn_blocking(move || {
                crate::alerts::store::AlertStore::open_stored(&path, limits, storage, &legacy_namespace)
            })
            .await
            .context("opening the alert journal")?
            .context("opening the alert journal")?,
        };
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
        crate::app::narrow::worker(&settings),
    )
    .context("building the alert worker")?;
    let worker = match stores.database() {
        Some((_, replica)) => worker.with_replica(replica.clone()),
        None => worker,
    };
    worker.recover().await.context("recovering interrupted alert jobs")?;
    {
        // Investigations wait (bounded) for the adapters configured at start, so a
        // resumed job does not run without the tools it was meant to have.
        let (engine, expected, cancel) = (
            engine.clone(),
            from_catalog::adapters(&store.current(), secrets.as_ref(), &resource_policy).0.len(),
            cancel.clone(),
        );
        tasks.spawn(async move {
            live::adapters_settled(&mcp, expected, live::MCP_CONNECT_WAIT).await;
            engine.set_namespaced_tools(&mcp.registries());
            Arc::new(worker).run(cancel).await;
        });
    }
    let validators = super::policy::validator_policy(&settings);
    if let Some(why) = validators.sandbox.refusal() {
        tracing::warn!(reason = %why, "validators will not run");
    } else {
        tracing::info!(sandbox = %validators.sandbox.describe(), "validator sandbox");
    }
    tasks.spawn(live::discovered_facts(
        store.clone(),
        board.clone(),
        secrets.clone(),
        validators,
        secrets_changed.clone(),
        cancel.clone(),
    ));
    // The declared Workspaces' working trees (clones fetched on schedule); the change
    // pipeline's routes reach them through this handle.
    let workspaces = super::workspaces::Workspaces::new(
        settings.data_dir.clone(),
        secrets.clone(),
        board.clone(),
        resource_policy.clone(),
    );
    tasks.spawn(workspaces.clone().run(store.clone(), secrets_changed.clone(), cancel.clone()));
    let directory = super::change::Directory::new(store.clone(), board.clone(), workspaces);
    let change = super::change::service(&settings, change_llm, audit_log.clone(), directory, &stores).await?;
    tasks.spawn(live::alert_sources(alerts.clone(), store.clone(), board.clone(), cancel.clone()));
    if let Some(client) = client {
        let audit = audit_log.clone();
        let projection = ProjectionSettings {
            namespace: pod_namespace(&settings),
            watched: settings.watched_namespaces(),
            retention: settings.record_retention,
        };
        let (alerts, board, engine, watched, kube) =
            (alerts.clone(), board.clone(), engine.clone(), settings.watched_namespaces(), client.clone());
        let writers = move |token: CancellationToken| {
            let mut started = vec![
                tokio::spawn(projection::run(
                    client.clone(),
                    audit.clone(),
                    alerts.clone(),
                    board.clone(),
                    projection.clone(),
                    token.clone(),
                )),
                tokio::spawn(requests::serve_requests(client.clone(), watched.clone(), engine.clone(), token.clone())),
            ];
            if shared {
                started.push(tokio::spawn(crate::operator::status::run(
                    client.clone(),
                    board.clone(),
                    generations.clone(),
                    token,
                )));
            }
            started
        };
        if shared {
            tasks.spawn(leader::while_leading(kube, leader::lease(&settings), cancel.clone(), writers));
        } else {
            for task in writers(cancel.clone()) {
                tasks.spawn(async move {
                    let _ = task.await;
                });
            }
        }
    }
    let bot_parts = super::bots::BotParts {
        store: store.clone(),
        secrets: secrets.clone(),
        secrets_changed: secrets_changed.clone(),
        engine: engine.clone(),
        alerts: Some(alerts.clone()),
        board: board.clone(),
    };
    let bots = super::bots::start(&settings, bot_parts, &stores, &mut tasks, &cancel).await?;
    let schedule_parts = super::schedules::ScheduleParts {
        engine: engine.clone(),
        catalog: store.clone(),
        secrets: secrets.clone(),
        board: board.clone(),
    };
    let scheduler = super::schedules::start(&settings, schedule_parts, &stores, &mut tasks, &cancel).await?;
    let alert_store = alerts.clone();
    let state = AppState {
        catalog: store.clone(),
        board,
        keys: Arc::new(keys),
        engine,
        alerts: Some(alerts),
        secrets,
        info: Arc::new(info),
        change: Some(change),
        bots: Some(bots),
        schedules: Some(scheduler),
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
        api_keys = %api_key_names(&state.keys),
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
    let server = web::listen::serve(listener, web::router(state), cancel.clone(), limits);
    let served = tokio::select! {
        served = server => Some(served),
        // Fenced: the writers observe `cancel` (in-flight Kubernetes writes are
        // dropped); nothing waits for a drain, the process exits before the Lease
        // could expire.
        _ = leadership_lost.cancelled() => None,
    };
    cancel.cancel();
    let Some(served) = served else {
        bail!("the leader Lease was lost; stopping so that a new leader can take over");
    };
    served.context("HTTP server")?;
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(settings.shutdown_timeout, drain).await.is_err() {
        tracing::warn!("background tasks did not stop in time");
    }
    // The next start then loads the snapshots instead of replaying this run's records.
    alert_store.save_snapshot().await;
    audit_log.snapshot().await;
    tracing::info!("Akritas stopped");
    Ok(())
}

/// How the alert store keeps its journal and bounds its memory, from the settings.
fn alert_storage(settings: &Settings) -> crate::alerts::store::Storage {
    crate::alerts::store::Storage {
        journal: crate::journal::JournalOptions {
            segment_bytes: settings.journal_segment_bytes,
            segment_age: Some(settings.journal_segment_age),
            ..crate::journal::JournalOptions::default()
        },
        snapshot_records: settings.snapshot_records,
        retention: (!settings.alert_retention.is_zero()).then_some(settings.alert_retention),
        dedup: crate::alerts::store::DedupLimits {
            window_secs: settings.dedup_window.as_secs(),
            max_keys: u64::from(settings.dedup_max_keys),
        },
        resolved_kept: settings.resolved_incidents_kept as usize,
    }
}

/// The names of the API keys, for the start log ("none" when authentication is off).
fn api_key_names(keys: &ApiKeys) -> String {
    match keys.names() {
        names if names.is_empty() => "none".into(),
        names => names.join(","),
    }
}

/// When a model server that could not be reached is asked again while nothing else asks: after
/// the first wait, then twice as long each time up to the last.
const MODEL_RECHECK: (std::time::Duration, std::time::Duration) =
    (std::time::Duration::from_secs(2), std::time::Duration::from_secs(60));

/// Watches the model server from the start without spending a completion: under `auto` asks
/// what it is, so that `/health` shows the protocol early; else lists its models. While it
/// cannot be reached, one WARN names its URL and the cause, `/health` says `degraded`, and it is
/// asked again ([`MODEL_RECHECK`]) until it answers (a Run's request that reaches it ends the
/// degradation too).
async fn watch_model_server(llm: LlmClient, auto: bool, cancel: CancellationToken) {
    let (mut wait, longest) = MODEL_RECHECK;
    let mut warned = false;
    loop {
        let identified = tokio::select! {
            identified = async { if auto { llm.server().await.is_some() } else { llm.models().await.is_ok() } } => identified,
            () = cancel.cancelled() => return,
        };
        let reach = llm.reach();
        if reach.reachable != Some(false) {
            if warned {
                tracing::info!(url = llm.base_url(), "the model server answers again");
            }
            if !identified && auto {
                tracing::info!(
                    url = llm.base_url(),
                    "the model server answers but could not be identified; the first structured step asks again"
                );
            }
            return;
        }
        if !warned {
            tracing::warn!(
                url = llm.base_url(),
                cause = reach.error.as_deref().unwrap_or("unknown"),
                "the model server cannot be reached; chats and investigations fail until it answers (see base_url)"
            );
            warned = true;
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = cancel.cancelled() => return,
        }
        wait = (wait * 2).min(longest);
        if llm.reach().reachable == Some(true) {
            tracing::info!(url = llm.base_url(), "the model server answers again");
            return;
        }
    }
}

/// Writes each minute's summary of the MCP reads over a key's limit, and at shutdown the
/// current minute's.
async fn flush_reads(audit: Arc<crate::audit::AuditLog>, cancel: CancellationToken) {
    loop {
        let all = tokio::select! {
            () = cancel.cancelled() => true,
            () = tokio::time::sleep(std::time::Duration::from_secs(60)) => false,
        };
        if let Err(error) = audit.flush_reads(all).await {
            tracing::error!(%error, "could not write the summary of reads over the limit");
        }
        if all {
            return;
        }
    }
}
