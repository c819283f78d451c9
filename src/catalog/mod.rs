//! The Catalog: the validated, immutable snapshot of every declared resource, and
//! the store that publishes new snapshots atomically. Consumers read the current
//! Catalog at the start of their work and keep that `Arc` for its duration.

pub mod directory;
pub(crate) mod facts;
pub(crate) mod manifest;
pub mod merge;
pub mod policy;
pub(crate) mod problem_log;
pub mod readiness;
pub(crate) mod scan;
pub mod secrets;
pub mod skills_dir;
pub mod status;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::resources::{Kind, Resource};

/// Identity of a resource inside a Catalog.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema)]
pub struct ObjectKey {
    /// Resource kind.
    #[serde(serialize_with = "serialize_kind")]
    pub kind: Kind,
    /// Namespace (`default` for manifests without one).
    pub namespace: String,
    /// `metadata.name`; with kind and namespace it names one object of the Catalog.
    pub name: String,
}

fn serialize_kind<S: serde::Serializer>(kind: &Kind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind.as_str())
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// One resource in the Catalog.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The validated resource.
    pub resource: Arc<Resource>,
    /// Where it came from (`file:doc-index`, or `kubernetes`).
    pub source: String,
    /// Directory that relative paths in the spec resolve against (standalone mode).
    pub base_dir: Option<PathBuf>,
}

/// Data of a ConfigMap that resources may reference (skill bodies, runbooks).
pub type ConfigMapData = BTreeMap<String, String>;

/// An immutable, versioned snapshot.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Monotonic number, bumped on every published change.
    pub version: u64,
    /// SHA-256 over the canonical content.
    pub hash: String,
    /// The resources.
    pub entries: BTreeMap<ObjectKey, Entry>,
    /// Referenced ConfigMaps by (namespace, name).
    pub config_maps: BTreeMap<(String, String), ConfigMapData>,
}

impl Catalog {
    /// Resources of one kind, in key order.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = (&ObjectKey, &Entry)> {
        self.entries.iter().filter(move |(key, _)| key.kind == kind)
    }

    /// Number of resources per kind name (every kind present, zero included).
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts: BTreeMap<&'static str, usize> =
            Kind::ALL.iter().filter(|k| k.is_declared()).map(|k| (k.as_str(), 0)).collect();
        for key in self.entries.keys() {
            *counts.entry(key.kind.as_str()).or_default() += 1;
        }
        counts
    }

    /// The body of a Skill: inline content, or the referenced ConfigMap key.
    pub fn skill_content(&self, key: &ObjectKey) -> Option<&str> {
        let Resource::Skill(skill) = self.entries.get(key)?.resource.as_ref() else { return None };
        match (&skill.spec.content, &skill.spec.content_from) {
            (Some(content), _) => Some(content),
            (None, Some(from)) => {
                let selector = &from.config_map_key_ref;
                self.config_maps
                    .get(&(key.namespace.clone(), selector.name.clone()))?
                    .get(&selector.key)
                    .map(String::as_str)
            }
            (None, None) => None,
        }
    }
}

/// Content hash of a set of entries and ConfigMaps (independent of where they came from).
pub fn content_hash(
    entries: &BTreeMap<ObjectKey, Entry>,
    config_maps: &BTreeMap<(String, String), ConfigMapData>,
) -> String {
    let mut hasher = Sha256::new();
    for (key, entry) in entries {
        hasher.update(key.to_string().as_bytes());
        hasher.update([0]);
        // Only the spec changes behaviour; metadata bookkeeping would churn versions.
        let value = entry.resource.to_value();
        hasher.update(value.get("spec").map(|s| s.to_string()).unwrap_or_default().as_bytes());
        hasher.update([0]);
        hasher.update(entry.base_dir.as_ref().map(|d| d.to_string_lossy().into_owned()).unwrap_or_default().as_bytes());
        hasher.update([0]);
    }
    for ((namespace, name), data) in config_maps {
        hasher.update(format!("ConfigMap/{namespace}/{name}").as_bytes());
        hasher.update(serde_json::to_string(data).unwrap_or_default().as_bytes());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

/// Publishes Catalogs; every consumer holds a receiver or calls [`CatalogStore::current`].
#[derive(Clone)]
pub struct CatalogStore {
    tx: Arc<watch::Sender<Arc<Catalog>>>,
}

impl Default for CatalogStore {
    fn default() -> Self {
        Self::new()
    }
}

impl CatalogStore {
    /// A store holding the empty Catalog (version 0).
    pub fn new() -> Self {
        let empty = Catalog { hash: content_hash(&BTreeMap::new(), &BTreeMap::new()), ..Catalog::default() };
        Self { tx: Arc::new(watch::Sender::new(Arc::new(empty))) }
    }

    /// The Catalog in force now.
    pub fn current(&self) -> Arc<Catalog> {
        self.tx.borrow().clone()
    }

    /// A receiver that wakes on every publication.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Catalog>> {
        self.tx.subscribe()
    }

    /// Publishes the given content as a new version unless it equals the current
    /// content. Returns the version in force afterwards.
    pub fn publish(
        &self,
        entries: BTreeMap<ObjectKey, Entry>,
        config_maps: BTreeMap<(String, String), ConfigMapData>,
    ) -> u64 {
        let hash = content_hash(&entries, &config_maps);
        let mut version = 0;
        self.tx.send_if_modified(|current| {
            if current.hash == hash {
                version = current.version;
                return false;
            }
            version = current.version + 1;
            *current = Arc::new(Catalog { version, hash: hash.clone(), entries, config_maps });
            true
        });
        version
    }
}
