//! The Kubernetes resource source: reflectors over every declared Akritas kind and
//! the ConfigMaps labelled `akritas.io/content` (the ones resources may reference),
//! one per watched namespace (or one over every
//! namespace when none is configured), rebuilt into the Catalog with the same validation
//! and last-good merge as the directory source. Each rebuild also publishes the
//! generations it saw, for the status writer's `observedGeneration`.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use k8s_openapi::api::core::v1::ConfigMap;

/// Label a ConfigMap must carry (any value) for resources to reference it in a
/// cluster: the operator watches only those.
pub const CONTENT_LABEL: &str = "akritas.io/content";
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
    config_maps: Vec<Store<ConfigMap>>,
}

/// Starts the reflectors over `namespaces` (empty: every namespace); the returned
/// stream yields once per change.
pub fn reflect(client: &Client, namespaces: &[String]) -> (Stores, BoxStream<'static, ()>) {
    let config = watcher::Config::default();
    let scopes: Vec<Option<&str>> =
        if namespaces.is_empty() { vec![None] } else { namespaces.iter().map(|ns| Some(ns.as_str())).collect() };
    let mut streams: Vec<BoxStream<'static, ()>> = Vec::new();
    let mut stores = Stores { kinds: Vec::new(), config_maps: Vec::new() };
    for namespace in scopes {
        for kind in Kind::ALL.iter().copied().filter(|k| k.is_declared()) {
            let writer = reflector::store::Writer::new(api_resource(kind));
            stores.kinds.push((kind, writer.as_reader()));
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
        stores.config_maps.push(config_maps);
        // Only ConfigMaps meant for Akritas (labelled), never every ConfigMap of a namespace.
        let labelled = watcher::Config::default().labels(CONTENT_LABEL);
        let stream = reflector::reflector(writer, watcher(api, labelled)).default_backoff().map(|event| {
            if let Err(error) = event {
                tracing::warn!(%error, "watch of ConfigMaps failed; retrying");
            }
        });
        streams.push(stream.boxed());
    }
    (stores, futures_util::stream::select_all(streams).boxed())
}

impl Stores {
    /// Whether every reflector has completed its initial list.
    pub async fn ready(&self) {
        for (_, store) in &self.kinds {
            let _ = store.wait_until_ready().await;
        }
        for store in &self.config_maps {
            let _ = store.wait_until_ready().await;
        }
    }

    /// Validates every object the reflectors hold, as one scan.
    pub fn scan(&self) -> (Scan, Generations) {
        let mut scan = Scan::default();
        let mut generations = Generations::new();
        for map in self.config_maps.iter().flat_map(Store::state) {
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
                // Status is ours and metadata is the API server's: only the spec is validated (the uid
                // is kept: a RunSchedule owns the Run objects of its Runs).
                map.remove("status");
                if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "uid" | "labels" | "annotations"));
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

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;
    use crate::catalog::status::InForce;
    use crate::operator::mock::api_server;
    use crate::resources::common::is_ready;

    fn skill(name: &str, generation: i64, spec: Value) -> Value {
        json!({
            "apiVersion": API_VERSION, "kind": "Skill",
            "metadata": {"name": name, "namespace": "ops", "generation": generation, "uid": "u-1",
                         "resourceVersion": "7", "managedFields": [{"manager": "kubectl"}]},
            "spec": spec,
            "status": {"conditions": [], "contentSha256": "stale"},
        })
    }

    fn config_map() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "guides", "namespace": "ops"},
               "data": {"pg.md": "# PostgreSQL"}})
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey { kind: Kind::Skill, namespace: "ops".into(), name: name.into() }
    }

    /// Stores filled as the reflectors would after their initial list.
    fn stores(objects: Vec<Value>) -> Stores {
        let mut kinds = Vec::new();
        for kind in Kind::ALL.iter().copied().filter(|k| k.is_declared()) {
            let mut writer = reflector::store::Writer::new(api_resource(kind));
            writer.apply_watcher_event(&Event::Init);
            for object in objects.iter().filter(|o| o["kind"] == kind.as_str()) {
                let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
                writer.apply_watcher_event(&Event::InitApply(object));
            }
            writer.apply_watcher_event(&Event::InitDone);
            kinds.push((kind, writer.as_reader()));
        }
        let (config_maps, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(serde_json::from_value(config_map()).unwrap()));
        writer.apply_watcher_event(&Event::InitDone);
        Stores { kinds, config_maps: vec![config_maps] }
    }

    #[test]
    fn store_contents_become_a_validated_scan_with_generations() {
        let stores = stores(vec![
            skill(
                "pg",
                2,
                json!({"description": "PostgreSQL", "contentFrom": {"configMapKeyRef": {"name": "guides", "key": "pg.md"}}}),
            ),
            skill(
                "dangling",
                5,
                json!({"description": "D", "contentFrom": {"configMapKeyRef": {"name": "missing", "key": "x"}}}),
            ),
            skill("broken", 1, json!({"description": "B", "unknownField": true})),
        ]);
        let (scan, generations) = stores.scan();
        assert_eq!(generations, Generations::from([(key("broken"), 1), (key("dangling"), 5), (key("pg"), 2)]));
        assert_eq!(scan.config_maps[&("ops".to_string(), "guides".to_string())]["pg.md"], "# PostgreSQL");
        let outcome = |name: &str| {
            let object = scan.objects.iter().find(|o| o.key == key(name)).unwrap();
            (
                object.location(),
                object.result.as_ref().err().map(|e| e.iter().map(ToString::to_string).collect::<Vec<_>>()),
            )
        };
        // Server-owned metadata and the status are not part of what is validated.
        assert_eq!(outcome("pg"), ("kubernetes:ops/pg:0".to_string(), None));
        let dangling = outcome("dangling").1.unwrap();
        assert!(dangling.iter().any(|e| e.contains("ConfigMap ops/missing")), "{dangling:?}");
        let broken = outcome("broken").1.unwrap();
        assert!(broken.iter().any(|e| e.contains("unknownField")), "{broken:?}");
    }

    #[tokio::test]
    async fn listed_objects_are_published_with_their_generations() {
        let pg = skill("pg", 4, json!({"description": "PostgreSQL", "content": "# Guide"}));
        let (client, server) = api_server(move |method, uri| {
            assert_eq!(method, "GET", "{uri}");
            if uri.contains("watch=true") {
                return None;
            }
            let (path, _) = uri.split_once('?').unwrap_or((uri, ""));
            let items = match path {
                "/apis/akritas.io/v1alpha1/namespaces/ops/skills" => vec![pg.clone()],
                "/api/v1/namespaces/ops/configmaps" => vec![config_map()],
                other => {
                    assert!(other.starts_with("/apis/akritas.io/v1alpha1/namespaces/ops/"), "{uri}");
                    Vec::new()
                }
            };
            Some((
                200,
                json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "10"}, "items": items}),
            ))
        });
        let (stores, changes) = reflect(&client, &["ops".to_string()]);
        let (store, board, cancel) = (CatalogStore::new(), StatusBoard::default(), CancellationToken::new());
        let (tx, mut generations) = tokio::sync::watch::channel(Generations::new());
        let source = tokio::spawn(run(stores, changes, store.clone(), board.clone(), tx, cancel.clone()));
        tokio::time::timeout(Duration::from_secs(10), generations.changed()).await.unwrap().unwrap();
        assert_eq!(*generations.borrow(), Generations::from([(key("pg"), 4)]));
        let catalog = store.current();
        assert_eq!((catalog.version, catalog.skill_content(&key("pg"))), (1, Some("# Guide")));
        assert_eq!(catalog.config_maps.len(), 1);
        let snapshot = board.get();
        assert_eq!(snapshot.resources.len(), 1);
        assert_eq!(snapshot.resources[0].in_force, InForce::Current);
        assert!(is_ready(&snapshot.resources[0].conditions));
        cancel.cancel();
        source.await.unwrap();
        drop(client);
        server.abort();
    }
}
