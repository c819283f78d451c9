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
    merge::apply(reload, store, board);
    tasks.spawn(directory::watch(source, store.clone(), board.clone(), cancel.clone()));
    Ok(())
}

/// Longest wait for the first Catalog from the API server before serving.
const FIRST_CATALOG_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Operator mode: reflectors over the Akritas resources, ConfigMaps and Secrets;
/// status written back. Returns the secret resolver and a counter that moves when
/// a Secret changes (so live components resolve again).
pub async fn operator(
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
