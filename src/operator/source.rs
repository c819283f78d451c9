//! The Kubernetes resource source: reflectors over every declared Akritas kind and
//! the ConfigMaps they reference, rebuilt into the Catalog with the same validation
//! and last-good merge as the directory source. Each rebuild also publishes the
//! generations it saw, for the status writer's `observedGeneration`.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::api::{Generations, api_resource, dynamic_api};
use crate::catalog::merge::{self, LastGood};
use crate::catalog::scan::{Scan, cross_check, scan_value};
use crate::catalog::status::StatusBoard;
use crate::catalog::{CatalogStore, ConfigMapData, ObjectKey};
use crate::resources::{API_VERSION, Kind};

/// Quiet time after a change before the Catalog is rebuilt (a burst of events
/// becomes one rebuild).
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// Reflector stores of everything the Catalog is built from.
#[derive(Clone)]
pub struct Stores {
    kinds: Vec<(Kind, Store<DynamicObject>)>,
    config_maps: Store<ConfigMap>,
}

/// Starts the reflectors; the returned stream yields once per change.
pub fn reflect(client: &Client, namespace: Option<&str>) -> (Stores, BoxStream<'static, ()>) {
    let config = watcher::Config::default();
    let mut streams: Vec<BoxStream<'static, ()>> = Vec::new();
    let mut kinds = Vec::new();
    for kind in Kind::ALL.iter().copied().filter(|k| k.is_declared()) {
        let writer = reflector::store::Writer::new(api_resource(kind));
        kinds.push((kind, writer.as_reader()));
        let stream = reflector::reflector(writer, watcher(dynamic_api(client, kind, namespace), config.clone()))
            .default_backoff()
            .map(move |event| {
                if let Err(error) = event {
                    tracing::warn!(kind = kind.as_str(), %error, "watch of Akritas resources failed; retrying");
                }
            });
        streams.push(stream.boxed());
    }
    let api: Api<ConfigMap> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (config_maps, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config)).default_backoff().map(|event| {
        if let Err(error) = event {
            tracing::warn!(%error, "watch of ConfigMaps failed; retrying");
        }
    });
    streams.push(stream.boxed());
    (Stores { kinds, config_maps }, futures_util::stream::select_all(streams).boxed())
}

impl Stores {
    /// Whether every reflector has completed its initial list.
    pub async fn ready(&self) {
        for (_, store) in &self.kinds {
            let _ = store.wait_until_ready().await;
        }
        let _ = self.config_maps.wait_until_ready().await;
    }

    /// Validates every object the reflectors hold, as one scan.
    pub fn scan(&self) -> (Scan, Generations) {
        let mut scan = Scan::default();
        let mut generations = Generations::new();
        for map in self.config_maps.state() {
            let (Some(namespace), Some(name)) = (map.metadata.namespace.clone(), map.metadata.name.clone()) else {
                continue;
            };
            let data: ConfigMapData = map.data.clone().unwrap_or_default().into_iter().collect();
            scan.config_maps.insert((namespace, name), data);
        }
        for (kind, store) in &self.kinds {
            for object in store.state() {
                let (Some(namespace), Some(name)) = (object.metadata.namespace.clone(), object.metadata.name.clone())
                else {
                    continue;
                };
                let mut value = serde_json::to_value(&*object).unwrap_or(Value::Null);
                let Some(map) = value.as_object_mut() else { continue };
                map.insert("apiVersion".into(), Value::String(API_VERSION.into()));
                map.insert("kind".into(), Value::String(kind.as_str().into()));
                // Status is ours and metadata is the API server's: only the spec is validated.
                map.remove("status");
                if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
                }
                let key = ObjectKey { kind: *kind, namespace: namespace.clone(), name: name.clone() };
                if let Some(generation) = object.metadata.generation {
                    generations.insert(key, generation);
                }
                let origin = PathBuf::from(format!("kubernetes:{namespace}/{name}"));
                scan_value(value, &origin, 0, &mut scan);
            }
        }
        cross_check(&mut scan);
        (scan, generations)
    }
}

/// Keeps the Catalog in line with the API server until cancelled: every change is
/// validated, merged with the last good versions and published; `on_reload`
/// receives each reload's generations (status writing).
pub async fn run(
    stores: Stores,
    mut changes: BoxStream<'static, ()>,
    store: CatalogStore,
    board: StatusBoard,
    on_reload: tokio::sync::watch::Sender<Generations>,
    cancel: CancellationToken,
) {
    let mut last_good = LastGood::default();
    // The first Catalog waits for every initial list, so it is complete.
    {
        let ready = stores.ready();
        tokio::pin!(ready);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = &mut ready => break,
                next = changes.next() => if next.is_none() { return; },
            }
        }
    }
    loop {
        let (scan, generations) = stores.scan();
        merge::apply(last_good.merge(scan), &store, &board);
        on_reload.send_replace(generations);
        // Wait for a change, then let a burst settle.
        tokio::select! {
            _ = cancel.cancelled() => return,
            next = changes.next() => if next.is_none() { return; },
        }
        let settle = tokio::time::sleep(DEBOUNCE);
        tokio::pin!(settle);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = &mut settle => break,
                next = changes.next() => if next.is_none() { return; },
            }
        }
    }
}
