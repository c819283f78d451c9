//! The runtime status of an AlertSource, published by the alerts layer: where its provider
//! posts and what its deliveries counted, as the typed [`AlertSourceStatus`] the AlertSource
//! CRD's status is generated from.

use crate::alerts::store::AlertStore;
use crate::catalog::ObjectKey;
use crate::catalog::status::StatusBoard;
use crate::resources::alert_source::AlertSourceStatus;

/// The path a provider posts to for the AlertSource `key`.
pub fn webhook_path(key: &ObjectKey) -> String {
    format!("/api/v1/alerts/{}/{}/webhook", key.namespace, key.name)
}

/// The runtime part of the AlertSource `key`'s status (its conditions come from the catalog).
pub fn status(store: &AlertStore, key: &ObjectKey) -> AlertSourceStatus {
    let counters = store.counters(&format!("{}/{}", key.namespace, key.name));
    AlertSourceStatus {
        conditions: Vec::new(),
        webhook_path: Some(webhook_path(key)),
        accepted: counters.accepted,
        duplicate: counters.duplicate,
        rejected: counters.rejected,
        truncated_alerts: counters.truncated_by_provider,
        truncated_by_host: counters.truncated_by_host,
    }
}

/// Publishes the runtime status of the AlertSource `key` on `board`.
pub fn publish(store: &AlertStore, board: &StatusBoard, key: &ObjectKey) {
    board.set_facts(key, status(store, key));
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
        let published = serde_json::to_value(status(&store, &key)).unwrap();
        let schema = Kind::AlertSource.schema();
        let fields = schema["properties"]["status"]["properties"].as_object().expect("the CRD has a status schema");
        let keys: Vec<&String> = published.as_object().unwrap().keys().filter(|k| *k != "conditions").collect();
        assert_eq!(keys.len(), 6, "{published}");
        for key in keys {
            assert!(fields.contains_key(key), "the AlertSource CRD's status has no {key}");
        }
        assert_eq!(published["webhookPath"], "/api/v1/alerts/ops/am/webhook");
    }
}
