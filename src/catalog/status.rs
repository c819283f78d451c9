//! Per-object outcomes of loading resources, served at `/api/v1/resources` in
//! standalone mode (the Kubernetes source writes the same facts into CR status).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;

use super::ObjectKey;
use crate::resources::common::Condition;

/// Which version of an object is in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum InForce {
    /// The version on disk.
    Current,
    /// An earlier good version; the one on disk is invalid.
    Previous,
    /// None: the object has never been valid.
    None,
}

/// The outcome for one object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceReport {
    /// Identity.
    #[serde(flatten)]
    pub key: ObjectKey,
    /// Where the newest version was read (`file:doc-index`).
    pub source: String,
    /// Which version is in force.
    pub in_force: InForce,
    /// `Ready` condition (and friends).
    pub conditions: Vec<Condition>,
    /// Spec of the version in force (secrets appear only as references).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<serde_json::Value>,
    /// Every problem of the newest version.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// A problem that cannot be attributed to a named object (unreadable file,
/// document without kind or name).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Problem {
    /// `file` or `file:doc-index`.
    pub location: String,
    /// What could be read of the identity (`kind/name`), if anything.
    pub object: Option<String>,
    /// The problem.
    pub error: String,
}

/// Everything the last load reported.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BoardSnapshot {
    /// Catalog version after the load.
    pub catalog_version: u64,
    /// RFC 3339 time of the load.
    pub loaded_at: String,
    /// One report per object.
    pub resources: Vec<ResourceReport>,
    /// Problems not tied to an object.
    pub problems: Vec<Problem>,
}

/// Shared, replaceable view of the latest load outcome, plus the facts live
/// components discovered about each object (index sizes, MCP tools, …).
#[derive(Clone, Default)]
pub struct StatusBoard {
    inner: Arc<RwLock<Arc<BoardSnapshot>>>,
    runtime: Arc<RwLock<BTreeMap<ObjectKey, serde_json::Value>>>,
}

impl StatusBoard {
    /// Replaces the snapshot.
    pub fn set(&self, snapshot: BoardSnapshot) {
        let mut guard = match self.inner.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        *guard = Arc::new(snapshot);
    }

    /// The latest snapshot.
    pub fn get(&self) -> Arc<BoardSnapshot> {
        match self.inner.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Records what a live component observed about an object (its `status`).
    pub fn set_runtime(&self, key: ObjectKey, status: serde_json::Value) {
        self.runtime.write().unwrap_or_else(|p| p.into_inner()).insert(key, status);
    }

    /// Merges top-level fields into an object's runtime status (several components
    /// report facts about the same object).
    pub fn merge_runtime(&self, key: ObjectKey, fields: serde_json::Value) {
        let mut runtime = self.runtime.write().unwrap_or_else(|p| p.into_inner());
        let entry = runtime.entry(key).or_insert_with(|| serde_json::json!({}));
        if let (Some(target), Some(fields)) = (entry.as_object_mut(), fields.as_object()) {
            for (name, value) in fields {
                target.insert(name.clone(), value.clone());
            }
        }
    }

    /// Forgets the runtime status of objects no longer present.
    pub fn retain_runtime(&self, keep: impl Fn(&ObjectKey) -> bool) {
        self.runtime.write().unwrap_or_else(|p| p.into_inner()).retain(|key, _| keep(key));
    }

    /// The runtime status of one object.
    pub fn runtime(&self, key: &ObjectKey) -> Option<serde_json::Value> {
        self.runtime.read().unwrap_or_else(|p| p.into_inner()).get(key).cloned()
    }
}
