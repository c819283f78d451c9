//! Operator mode with several replicas. On the embedded stores the leader (holder of the
//! Lease) runs everything, and a standby serves reads from its own watches until it leads. On
//! a shared database every replica serves everything, and only the Kubernetes writers (status,
//! the Run and Incident projection, RunRequests) follow the Lease ([`while_leading`]).

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;

use super::process::{host_info, pod_namespace, shutdown_on_signal};
use super::{assemble, sources};
use crate::catalog::CatalogStore;
use crate::catalog::status::StatusBoard;
use crate::config::Settings;
use crate::engine::instructions::SystemInstructions;
use crate::operator;
use crate::web::auth::ApiKeys;
use crate::web::{self, AppState};

/// Operator mode: connects to the API server and returns once this replica leads
/// (standing by until then); `lost` is cancelled if the Lease cannot be kept.
/// `None`: stopped by a signal while standing by.
pub async fn lead(
    settings: &Settings,
    instructions: &SystemInstructions,
    keys: &ApiKeys,
    limits: crate::web::listen::Limits,
    lost: &CancellationToken,
) -> Result<Option<kube::Client>> {
    let client = connect().await?;
    let lease = lease(settings);
    tracing::info!(lease = %lease.name, namespace = %lease.namespace, identity = %lease.identity, "waiting for the leader Lease");
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), &lease.namespace);
    let start = tokio::time::Instant::now();
    let mut observer = operator::leader::Observer::default();
    let attempt = operator::leader::try_acquire(&api, &lease, &mut observer, start);
    let acquired = match tokio::time::timeout(lease.duration, attempt).await {
        Ok(Ok(operator::leader::Outcome::Leading)) => start,
        _ => match stand_by(&client, settings, instructions, keys, limits, &lease).await? {
            Some(acquired) => acquired,
            None => return Ok(None),
        },
    };
    let (keeper, lost) = (client.clone(), lost.clone());
    tokio::spawn(async move {
        let why = operator::leader::keep(keeper, lease, acquired).await;
        tracing::error!(?why, "leadership lost: stopping every writer now");
        lost.cancel();
    });
    Ok(Some(client))
}

/// The Kubernetes client (in-cluster service account or KUBECONFIG).
pub async fn connect() -> Result<kube::Client> {
    kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API (in-cluster service account or KUBECONFIG)")
}

/// The leader Lease and this replica's identity in it.
pub fn lease(settings: &Settings) -> operator::leader::LeaseSettings {
    let identity = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("akritas-{:016x}", rand::random::<u64>()));
    operator::leader::LeaseSettings {
        name: "akritas-leader".into(),
        namespace: pod_namespace(settings),
        identity: format!("{identity}-{}", std::process::id()),
        duration: settings.lease_duration,
    }
}

/// Longest wait for the leader's tasks to stop once the Lease is lost, before another term.
const TERM_END_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// With several replicas on a shared database: acquires the Lease, runs `start`'s tasks (each
/// ending when its token is cancelled) while this replica holds it, stops them when the Lease
/// is lost (serving goes on) and tries again, until `cancel`.
pub async fn while_leading(
    client: kube::Client,
    lease: operator::leader::LeaseSettings,
    cancel: CancellationToken,
    start: impl Fn(CancellationToken) -> Vec<tokio::task::JoinHandle<()>> + Send + 'static,
) {
    loop {
        let acquired = tokio::select! {
            acquired = operator::leader::acquire(&client, &lease) => acquired,
            _ = cancel.cancelled() => return,
        };
        tracing::info!(lease = %lease.name, identity = %lease.identity, "this replica leads: status, projection and RunRequests are written here");
        crate::telemetry::set("akritas_leader", "1 while this replica holds the leader Lease.", &[], 1.0);
        let term = cancel.child_token();
        let tasks = start(term.clone());
        tokio::select! {
            why = operator::leader::keep(client.clone(), lease.clone(), acquired) => {
                tracing::warn!(?why, "leadership lost: status, projection and RunRequests stop here; serving goes on");
            }
            _ = cancel.cancelled() => {}
        }
        term.cancel();
        crate::telemetry::set("akritas_leader", "1 while this replica holds the leader Lease.", &[], 0.0);
        let ended = async {
            for task in tasks {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(TERM_END_WAIT, ended).await.is_err() {
            tracing::warn!("the leader's tasks did not stop in time");
        }
        if cancel.is_cancelled() {
            return;
        }
    }
}

/// A standby replica serves reads (health, resources, tools, metrics) from its own
/// watches, writes nothing, and answers everything else 503 until it acquires the
/// Lease (the start of the acquiring attempt) or a signal stops it (`None`).
async fn stand_by(
    client: &kube::Client,
    settings: &Settings,
    instructions: &SystemInstructions,
    keys: &ApiKeys,
    limits: crate::web::listen::Limits,
    lease: &operator::leader::LeaseSettings,
) -> Result<Option<tokio::time::Instant>> {
    let cancel = CancellationToken::new();
    let stop = CancellationToken::new();
    let store = CatalogStore::new();
    let board = StatusBoard::default();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(shutdown_on_signal(stop.clone()));
    let (secrets, _, _) =
        sources::operator(client.clone(), settings, &store, &board, &mut tasks, &cancel, false).await?;
    let llm = assemble::llm_client(settings, instructions)?;
    let tools = crate::tools::RegistryBuilder::new(crate::tools::ToolLimits::default()).build();
    let engine =
        crate::engine::run::Engine::new(crate::app::narrow::engine(settings), llm, tools, None, store.clone(), None)
            .with_tenancy(crate::tenancy::Tenancy::new(settings.shared_namespaces.iter().cloned()));
    let state = AppState {
        catalog: store,
        board,
        keys: Arc::new(keys.clone()),
        engine: Arc::new(engine),
        alerts: None,
        secrets,
        info: Arc::new(host_info(settings, instructions, "operator-standby")),
        change: None,
        bots: None,
        schedules: None,
    };
    let listener = tokio::net::TcpListener::bind(settings.address)
        .await
        .with_context(|| format!("cannot listen on {} (set --address to a free address)", settings.address))?;
    tracing::info!(
        address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        "Akritas standby listening (reads only until this replica leads)"
    );
    let server = tokio::spawn(web::listen::serve(listener, web::standby_router(state), cancel.clone(), limits));
    let promoted = tokio::select! {
        acquired = operator::leader::acquire(client, lease) => Some(acquired),
        _ = stop.cancelled() => None,
    };
    cancel.cancel();
    stop.cancel();
    let _ = server.await;
    let drain = async { while tasks.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(settings.shutdown_timeout, drain).await;
    Ok(promoted)
}

/// Runs what `start` starts while this replica holds the database's leadership lock
/// (`leading`), stopping it (and waiting for it to end) when it no longer does.
pub async fn while_database_leader(
    mut leading: tokio::sync::watch::Receiver<bool>,
    cancel: CancellationToken,
    start: impl Fn(CancellationToken) -> tokio::task::JoinHandle<()>,
) {
    loop {
        if !*leading.borrow_and_update() {
            tokio::select! {
                () = cancel.cancelled() => return,
                changed = leading.changed() => if changed.is_err() { return } else { continue },
            }
        }
        let token = cancel.child_token();
        let started = start(token.clone());
        tokio::select! {
            () = cancel.cancelled() => {}
            _ = leading.wait_for(|leads| !leads) => {}
        }
        token.cancel();
        let _ = started.await;
        if cancel.is_cancelled() {
            return;
        }
    }
}
