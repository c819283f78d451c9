//! The last-good merge both resource sources share: a scan replaces every object
//! whose new version is valid; an object whose new version is invalid, or whose
//! file could not be parsed, keeps its last valid version in force. The result is
//! a [`Reload`], published by [`apply`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::readiness::Needs;
use super::scan::Scan;
use super::status::{BoardSnapshot, InForce, Problem, ResourceReport, StatusBoard};
use super::{CatalogStore, ConfigMapData, Entry, ObjectKey};
use crate::resources::common::now_rfc3339;
use crate::resources::validate::FieldError;

/// The last valid version of every object, with where it was read.
#[derive(Default)]
pub struct LastGood {
    objects: BTreeMap<ObjectKey, (Entry, PathBuf, usize)>,
}

/// The result of one reload.
pub struct Reload {
    /// Entries to publish.
    pub entries: BTreeMap<ObjectKey, Entry>,
    /// ConfigMaps to publish.
    pub config_maps: BTreeMap<(String, String), ConfigMapData>,
    /// Per-object outcome.
    pub reports: Vec<ResourceReport>,
    /// Problems without an object.
    pub problems: Vec<Problem>,
}

impl LastGood {
    /// Merges a finished scan with the last good versions.
    pub fn merge(&mut self, scan: Scan) -> Reload {
        let mut next: BTreeMap<ObjectKey, (Entry, PathBuf, usize)> = BTreeMap::new();
        let mut reports = Vec::new();
        let mut seen = BTreeSet::new();
        for object in scan.objects {
            let location = object.location();
            if !seen.insert(object.key.clone()) {
                // A duplicate definition: reported, never replaces the first one.
                if let Err(errors) = &object.result {
                    reports.push(report(&object.key, location, None, errors));
                }
                continue;
            }
            match object.result {
                Ok(resource) => {
                    let entry = Entry {
                        resource: Arc::new(resource),
                        source: location.clone(),
                        base_dir: object.file.parent().map(Path::to_path_buf),
                    };
                    reports.push(report(&object.key, location, Some(&entry), &[]));
                    next.insert(object.key, (entry, object.file, object.index));
                }
                Err(errors) => match self.objects.remove(&object.key) {
                    Some(previous) => {
                        reports.push(report(&object.key, location, Some(&previous.0), &errors));
                        next.insert(object.key, previous);
                    }
                    None => reports.push(report(&object.key, location, None, &errors)),
                },
            }
        }
        // Objects whose file (or document) could not be parsed stay as they were.
        for (key, (entry, file, index)) in std::mem::take(&mut self.objects) {
            let unreadable = scan.unreadable.contains(&(file.clone(), None))
                || scan.unreadable.contains(&(file.clone(), Some(index)));
            if unreadable && !next.contains_key(&key) {
                let error = FieldError::new("", format!("{} could not be parsed (see problems)", file.display()));
                reports.push(report(&key, format!("{}:{index}", file.display()), Some(&entry), &[error]));
                next.insert(key, (entry, file, index));
            }
        }
        reports.sort_by(|a, b| a.key.cmp(&b.key));
        self.objects = next;
        Reload {
            entries: self.objects.iter().map(|(k, (e, _, _))| (k.clone(), e.clone())).collect(),
            config_maps: scan.config_maps,
            reports,
            problems: scan.problems,
        }
    }
}

/// The report of one object: `in_force` is the entry that stays in force, if any;
/// `errors` are the problems of the newest version. Its conditions are derived by
/// the status board.
fn report(key: &ObjectKey, source: String, in_force: Option<&Entry>, errors: &[FieldError]) -> ResourceReport {
    let spec = in_force.and_then(|entry| entry.resource.to_value().get("spec").cloned());
    let needs = in_force.map(|entry| Needs::of(&entry.resource)).unwrap_or_default();
    let in_force = match (in_force, errors.is_empty()) {
        (Some(_), true) => InForce::Current,
        (Some(_), false) => InForce::Previous,
        (None, _) => InForce::None,
    };
    ResourceReport {
        key: key.clone(),
        source,
        in_force,
        conditions: Vec::new(),
        spec,
        errors: errors.iter().map(ToString::to_string).collect(),
        needs,
    }
}

/// Applies a reload: publishes the Catalog and the status board, logs a new Catalog
/// version (the problems it found are logged once per change by
/// [`super::problem_log`]).
pub fn apply(reload: Reload, store: &CatalogStore, board: &StatusBoard) -> u64 {
    let before = store.current().version;
    let version = store.publish(reload.entries, reload.config_maps);
    if version != before {
        tracing::info!(
            catalog_version = version,
            resources = reload.reports.iter().filter(|r| r.in_force != InForce::None).count(),
            "catalog published"
        );
    }
    board.set(BoardSnapshot {
        catalog_version: version,
        loaded_at: now_rfc3339(),
        resources: reload.reports,
        problems: reload.problems,
    });
    version
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::catalog::scan::{cross_check, scan_value};
    use crate::resources::Kind;

    fn skill(name: &str, description: Value) -> Value {
        json!({"apiVersion": "akritas.io/v1alpha1", "kind": "Skill", "metadata": {"name": name, "namespace": "ops"},
               "spec": {"description": description, "content": "c"}})
    }

    fn scan(documents: Vec<(&str, Value)>, unreadable: &[&str]) -> Scan {
        let mut scan = Scan::default();
        for (index, (file, value)) in documents.into_iter().enumerate() {
            scan_value(value, Path::new(file), index, &mut scan);
        }
        scan.unreadable.extend(unreadable.iter().map(|f| (PathBuf::from(f), None)));
        cross_check(&mut scan);
        scan
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey { kind: Kind::Skill, namespace: "ops".into(), name: name.into() }
    }

    fn in_force(reload: &Reload, name: &str) -> Vec<InForce> {
        reload.reports.iter().filter(|r| r.key == key(name)).map(|r| r.in_force).collect()
    }

    #[test]
    fn an_invalid_new_version_keeps_the_last_good_one_in_force() {
        let mut last_good = LastGood::default();
        let first = last_good.merge(scan(vec![("a.yaml", skill("pg", json!("First")))], &[]));
        assert_eq!(in_force(&first, "pg"), [InForce::Current]);
        let second = last_good.merge(scan(vec![("a.yaml", skill("pg", json!(42)))], &[]));
        assert_eq!(in_force(&second, "pg"), [InForce::Previous]);
        assert_eq!(second.entries[&key("pg")].source, "a.yaml:0", "the first version stays");
        assert!(!second.reports[0].errors.is_empty());
        let never = last_good.merge(scan(vec![("b.yaml", skill("new", json!(42)))], &[]));
        assert_eq!(in_force(&never, "new"), [InForce::None]);
        assert!(never.entries.is_empty(), "a removed object goes, an invalid new one never enters");
    }

    #[test]
    fn objects_of_an_unreadable_file_stay_and_duplicates_never_replace_the_first() {
        let mut last_good = LastGood::default();
        last_good.merge(scan(vec![("a.yaml", skill("pg", json!("First")))], &[]));
        let reload = last_good.merge(scan(vec![], &["a.yaml"]));
        assert_eq!(in_force(&reload, "pg"), [InForce::Previous]);
        assert!(reload.entries.contains_key(&key("pg")));

        let reload = last_good
            .merge(scan(vec![("a.yaml", skill("pg", json!("First"))), ("b.yaml", skill("pg", json!("Second")))], &[]));
        assert_eq!(in_force(&reload, "pg"), [InForce::Current, InForce::None]);
        assert_eq!(reload.entries[&key("pg")].source, "a.yaml:0");
    }
}
