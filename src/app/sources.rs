//! Where resources come from: manifest directories (standalone) or the Kubernetes
//! API (operator); both feed the same Catalog store and status board.

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;

use super::assemble;
use crate::catalog::CatalogStore;
use crate::catalog::directory::{self, DirectorySource};
use crate::catalog::merge;
use crate::catalog::secrets::SecretResolver;
use crate::catalog::status::StatusBoard;
use crate::config::Settings;
use crate::operator;

/// Standalone: manifest directories (and the skills directory), watched.
pub async fn standalone(
    settings: &Settings,
    store: &CatalogStore,
    board: &StatusBoard,
    tasks: &mut tokio::task::JoinSet<()>,
    cancel: &CancellationToken,
) -> Result<()> {
    let skills = assemble::skills(settings)?;
    if settings.resources.is_empty() && skills.is_none() {
        tracing::warn!("no resource directories given (--resources DIR); the Catalog is empty");
        return Ok(());
    }
    let mut source = DirectorySource::with_skills(settings.resources.clone(), skills);
    let (source, reload) = tokio::task::spawn_blocking(move || {
        let reload = source.reload();
        (source, reload)
    })
    .await
    .context("loading resources")?;
    merge::apply(reload, store, board);
    tasks.spawn(directory::watch(source, store.clone(), board.clone(), cancel.clone()));
    Ok(())
}

/// What the operator's sources give: the secret resolver, the Secret change counter, and the
/// resource generations statuses are written for.
pub type Operator = (
    Arc<dyn SecretResolver>,
    tokio::sync::watch::Receiver<u64>,
    tokio::sync::watch::Receiver<operator::api::Generations>,
);

/// Longest wait for the first Catalog from the API server before serving.
const FIRST_CATALOG_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Operator mode: reflectors over the Akritas resources and ConfigMaps of every
/// watched namespace (`watched_namespaces`; none = every namespace); Secrets read
/// by name when a resource references one; status written back with `write_status`. Returns
/// the secret resolver, a counter that moves when a Secret changes (so live components resolve
/// again), and the generations the statuses are written for (for a status writer started
/// later: the leader's, with several replicas on a database).
pub async fn operator(
    client: kube::Client,
    settings: &Settings,
    store: &CatalogStore,
    board: &StatusBoard,
    tasks: &mut tokio::task::JoinSet<()>,
    cancel: &CancellationToken,
    write_status: bool,
) -> Result<Operator> {
    let namespaces = settings.watched_namespaces();
    if namespaces.is_empty() {
        tracing::info!("watching every namespace (no namespaces configured)");
    } else {
        tracing::info!(namespaces = %namespaces.join(","), "watching namespaces");
    }
    let secrets = Arc::new(operator::secrets::KubeSecrets::default());
    let (changed_tx, changed_rx) = tokio::sync::watch::channel(0u64);
    tasks.spawn(secrets.clone().refresh(client.clone(), changed_tx, cancel.clone()));
    let (stores, changes) = operator::source::reflect(&client, &namespaces);
    let (generations_tx, generations_rx) = tokio::sync::watch::channel(Default::default());
    let mut first = generations_rx.clone();
    tasks.spawn(operator::source::run(stores, changes, store.clone(), board.clone(), generations_tx, cancel.clone()));
    if write_status {
        tasks.spawn(operator::status::run(client.clone(), board.clone(), generations_rx.clone(), cancel.clone()));
    }
    if tokio::time::timeout(FIRST_CATALOG_WAIT, first.changed()).await.is_err() {
        tracing::warn!("no Akritas resources read from the API server yet; serving with an empty Catalog");
    }
    Ok((secrets, changed_rx, generations_rx))
}
