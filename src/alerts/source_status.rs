//! The runtime status of an AlertSource, published by the alerts layer: where its provider
//! posts and what its deliveries counted. Built from the typed [`AlertSourceStatus`], so every
//! key it publishes is a field of the AlertSource CRD's status (a key the CRD lacked would be
//! pruned from the Kubernetes object without a word).

use serde_json::Value;

use super::store::AlertStore;
use crate::catalog::ObjectKey;
use crate::catalog::status::StatusBoard;
use crate::resources::alert_source::AlertSourceStatus;

/// The path a provider posts to for the AlertSource `key`.
pub fn webhook_path(key: &ObjectKey) -> String {
    format!("/api/v1/alerts/{}/{}/webhook", key.namespace, key.name)
}

/// The runtime part of the AlertSource `key`'s status (its conditions come from the catalog).
pub fn status(store: &AlertStore, key: &ObjectKey) -> Value {
    let counters = store.counters(&format!("{}/{}", key.namespace, key.name));
    let status = AlertSourceStatus {
        conditions: Vec::new(),
        webhook_path: Some(webhook_path(key)),
        accepted: counters.accepted,
        duplicate: counters.duplicate,
        rejected: counters.rejected,
        truncated_alerts: counters.truncated_by_provider,
        truncated_by_host: counters.truncated_by_host,
    };
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.remove("conditions");
    }
    value
}

/// Publishes the runtime status of the AlertSource `key` on `board`.
pub fn publish(store: &AlertStore, board: &StatusBoard, key: &ObjectKey) {
    board.merge_runtime(key.clone(), status(store, key));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Kind;

    #[test]
    fn every_published_key_is_a_field_of_the_crd_status() {
        let dir = tempfile::tempdir().unwrap();
        let store = AlertStore::open(&dir.path().join("alerts.jsonl")).unwrap();
        let key = ObjectKey { kind: Kind::AlertSource, namespace: "ops".into(), name: "am".into() };
        let published = status(&store, &key);
        let schema = Kind::AlertSource.schema();
        let fields = schema["properties"]["status"]["properties"].as_object().expect("the CRD has a status schema");
        let keys: Vec<&String> = published.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 6, "{published}");
        for key in keys {
            assert!(fields.contains_key(key), "the AlertSource CRD's status has no {key}");
        }
        assert_eq!(published["webhookPath"], "/api/v1/alerts/ops/am/webhook");
    }
}
