//! Standalone resource source: manifest directories, validated with the same
//! pipeline as Kubernetes objects. A reload keeps the last good version of an
//! object whose new version is invalid (or whose file became unreadable).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::manifest::{self, ManifestFile};
use super::skills_dir;
use super::status::{BoardSnapshot, InForce, Problem, ResourceReport, StatusBoard};
use super::{CatalogStore, ConfigMapData, Entry, ObjectKey};
use crate::resources::common::{Condition, now_rfc3339};
use crate::resources::validate::{FieldError, Identity, parse_manifest};
use crate::resources::{GROUP, Kind, Resource};

/// Namespace of manifests that do not name one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// An object found in a manifest, valid or not.
#[derive(Debug)]
pub struct Scanned {
    /// Identity.
    pub key: ObjectKey,
    /// File it came from.
    pub file: PathBuf,
    /// Document index in that file.
    pub index: usize,
    /// The resource, or every problem it has.
    pub result: Result<Resource, Vec<FieldError>>,
    /// Read from the skills directory (a `Skill` resource of the same name wins).
    pub from_skills_dir: bool,
}

impl Scanned {
    /// `file:doc-index`.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file.display(), self.index)
    }
}

/// What a scan of the directories found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Akritas objects with a readable identity.
    pub objects: Vec<Scanned>,
    /// ConfigMaps (for `contentFrom` and knowledge sources).
    pub config_maps: BTreeMap<(String, String), ConfigMapData>,
    /// Problems without an identifiable object.
    pub problems: Vec<Problem>,
    /// Files (and documents) that could not be parsed: objects last seen there are kept.
    pub unreadable: BTreeSet<(PathBuf, Option<usize>)>,
}

/// Reads and validates every manifest under the directories (and the skills
/// directory, if any), then runs the cross-object checks (duplicates, references).
pub fn scan(dirs: &[PathBuf], skills_dir: Option<&Path>) -> Scan {
    let mut result = Scan::default();
    match manifest::list_files(dirs) {
        Ok(files) => {
            for path in files {
                scan_file(manifest::read_file(&path), &mut result);
            }
        }
        Err(error) => result.problems.push(Problem { location: dirs_label(dirs), object: None, error }),
    }
    if let Some(dir) = skills_dir {
        scan_skills_dir(dir, &mut result);
    }
    cross_check(&mut result);
    result
}

fn scan_skills_dir(dir: &Path, out: &mut Scan) {
    let files = match skills_dir::read(dir) {
        Ok(files) => files,
        Err(error) => {
            out.problems.push(Problem { location: dir.display().to_string(), object: None, error });
            return;
        }
    };
    // Skills defined as resources win over directory skills of the same name.
    let declared: BTreeSet<String> =
        out.objects.iter().filter(|o| o.key.kind == Kind::Skill).map(|o| o.key.name.clone()).collect();
    for file in files {
        if declared.contains(&file.name) {
            tracing::debug!(skill = %file.name, path = %file.path.display(), "directory skill shadowed by a Skill resource");
            continue;
        }
        let result = file.manifest.map_err(|error| vec![FieldError::new("", error)]).and_then(parse_manifest);
        out.objects.push(Scanned {
            key: ObjectKey { kind: Kind::Skill, namespace: skills_dir::NAMESPACE.to_string(), name: file.name },
            file: file.path,
            index: 0,
            result,
            from_skills_dir: true,
        });
    }
}

fn dirs_label(dirs: &[PathBuf]) -> String {
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(",")
}

fn scan_file(file: ManifestFile, out: &mut Scan) {
    let documents = match file.documents {
        Ok(documents) => documents,
        Err(error) => {
            out.problems.push(Problem { location: file.path.display().to_string(), object: None, error });
            out.unreadable.insert((file.path, None));
            return;
        }
    };
    for document in documents {
        let location = format!("{}:{}", file.path.display(), document.index);
        let value = match document.value {
            Ok(value) => value,
            Err(error) => {
                out.problems.push(Problem { location, object: None, error });
                out.unreadable.insert((file.path.clone(), Some(document.index)));
                continue;
            }
        };
        scan_value(value, &file.path, document.index, out);
    }
}

/// Classifies and validates one parsed object (an Akritas resource or a
/// ConfigMap; anything else is skipped). `file` and `index` say where it came from.
pub fn scan_value(value: Value, file: &Path, index: usize, out: &mut Scan) {
    let location = format!("{}:{index}", file.display());
    let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    if api_version == "v1" && kind == "ConfigMap" {
        read_config_map(&value, &location, out);
        return;
    }
    let ours = api_version.is_empty() || api_version.split('/').next() == Some(GROUP) || Kind::parse(&kind).is_some();
    if !ours {
        tracing::debug!(%location, %api_version, %kind, "skipping a manifest that is not an Akritas resource");
        return;
    }
    let identity = Identity::of(&value);
    let known_kind = identity.kind.as_deref().and_then(Kind::parse);
    let result = parse_manifest(value);
    match (known_kind, identity.name.clone()) {
        (Some(kind), Some(name)) => out.objects.push(Scanned {
            key: ObjectKey {
                kind,
                namespace: identity.namespace.clone().unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
                name,
            },
            file: file.to_path_buf(),
            index,
            result,
            from_skills_dir: false,
        }),
        _ => {
            for error in result.err().unwrap_or_default() {
                out.problems.push(Problem {
                    location: location.clone(),
                    object: Some(identity.to_string()),
                    error: error.to_string(),
                });
            }
        }
    }
}

fn read_config_map(value: &Value, location: &str, out: &mut Scan) {
    let identity = Identity::of(value);
    let Some(name) = identity.name.clone() else {
        out.problems.push(Problem {
            location: location.to_string(),
            object: Some(identity.to_string()),
            error: "metadata.name: required field is missing".into(),
        });
        return;
    };
    let namespace = identity.namespace.clone().unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    let mut data = ConfigMapData::new();
    if let Some(fields) = value.get("data").and_then(Value::as_object) {
        for (key, item) in fields {
            match item.as_str() {
                Some(text) => {
                    data.insert(key.clone(), text.to_string());
                }
                None => out.problems.push(Problem {
                    location: location.to_string(),
                    object: Some(format!("ConfigMap/{name}")),
                    error: format!("data.{key}: must be a string"),
                }),
            }
        }
    }
    if out.config_maps.insert((namespace, name.clone()), data).is_some() {
        out.problems.push(Problem {
            location: location.to_string(),
            object: Some(format!("ConfigMap/{name}")),
            error: "duplicate ConfigMap".into(),
        });
    }
}

/// Duplicates and references between objects; failures become errors of the object.
pub fn cross_check(scan: &mut Scan) {
    let mut first_seen: BTreeMap<ObjectKey, String> = BTreeMap::new();
    let valid: BTreeSet<ObjectKey> = scan.objects.iter().filter(|o| o.result.is_ok()).map(|o| o.key.clone()).collect();
    for object in &mut scan.objects {
        let location = object.location();
        if let Some(first) = first_seen.get(&object.key) {
            let error =
                FieldError::new("metadata.name", format!("duplicate: {} is already defined at {first}", object.key));
            push_error(&mut object.result, error);
            continue;
        }
        first_seen.insert(object.key.clone(), location);
        let Ok(resource) = &object.result else { continue };
        let namespace = object.key.namespace.clone();
        let exists = |kind: Kind, name: &str| {
            valid.contains(&ObjectKey { kind, namespace: namespace.clone(), name: name.to_string() })
        };
        let has_config_map = |name: &str, key: Option<&str>| {
            scan.config_maps
                .get(&(namespace.clone(), name.to_string()))
                .is_some_and(|data| key.is_none_or(|k| data.contains_key(k)))
        };
        let mut errors = Vec::new();
        match resource {
            Resource::Run(_) | Resource::Incident(_) => errors.push(FieldError::new(
                "kind",
                format!("{} objects are written by Akritas, not declared in manifests", object.key.kind.as_str()),
            )),
            Resource::Skill(skill) => {
                if let Some(from) = &skill.spec.content_from {
                    let selector = &from.config_map_key_ref;
                    if !has_config_map(&selector.name, Some(&selector.key)) {
                        errors.push(FieldError::new(
                            "spec.contentFrom.configMapKeyRef",
                            format!(
                                "ConfigMap {}/{} with key {:?} is not among the manifests",
                                namespace, selector.name, selector.key
                            ),
                        ));
                    }
                }
            }
            Resource::Workspace(workspace) => {
                for (i, profile) in workspace.spec.validator_profiles.iter().enumerate() {
                    if !exists(Kind::ValidatorProfile, profile) {
                        errors.push(FieldError::new(
                            &format!("spec.validatorProfiles[{i}]"),
                            format!("ValidatorProfile {namespace}/{profile} does not exist or is invalid"),
                        ));
                    }
                }
            }
            Resource::KnowledgeBase(base) => {
                for (i, source) in base.spec.sources.iter().enumerate() {
                    if let Some(git) = &source.git
                        && !exists(Kind::Workspace, &git.workspace)
                    {
                        errors.push(FieldError::new(
                            &format!("spec.sources[{i}].git.workspace"),
                            format!("Workspace {namespace}/{} does not exist or is invalid", git.workspace),
                        ));
                    }
                    if let Some(cm) = &source.config_map
                        && !has_config_map(&cm.name, None)
                    {
                        errors.push(FieldError::new(
                            &format!("spec.sources[{i}].configMap.name"),
                            format!("ConfigMap {namespace}/{} is not among the manifests", cm.name),
                        ));
                    }
                }
            }
            _ => {}
        }
        for error in errors {
            push_error(&mut object.result, error);
        }
    }
}

fn push_error(result: &mut Result<Resource, Vec<FieldError>>, error: FieldError) {
    match result {
        Ok(_) => *result = Err(vec![error]),
        Err(errors) => errors.push(error),
    }
}

/// Every problem of a scan as `file:doc-index kind/name: field: reason` lines.
pub fn problem_lines(scan: &Scan) -> Vec<String> {
    let mut lines = Vec::new();
    for problem in &scan.problems {
        match &problem.object {
            Some(object) => lines.push(format!("{} {object}: {}", problem.location, problem.error)),
            None => lines.push(format!("{}: {}", problem.location, problem.error)),
        }
    }
    for object in &scan.objects {
        if let Err(errors) = &object.result {
            for error in errors {
                lines.push(format!("{} {}/{}: {error}", object.location(), object.key.kind.as_str(), object.key.name));
            }
        }
    }
    lines
}

/// The directory source: remembers the last good version of every object.
pub struct DirectorySource {
    dirs: Vec<PathBuf>,
    skills_dir: Option<PathBuf>,
    last_good: BTreeMap<ObjectKey, (Entry, PathBuf, usize)>,
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

impl DirectorySource {
    /// A source over the manifest directories and an optional skills directory
    /// (nothing loaded yet).
    pub fn new(dirs: Vec<PathBuf>, skills_dir: Option<PathBuf>) -> Self {
        Self { dirs, skills_dir, last_good: BTreeMap::new() }
    }

    /// The directories watched.
    pub fn watched(&self) -> Vec<PathBuf> {
        self.dirs.iter().chain(self.skills_dir.iter()).cloned().collect()
    }

    /// Reads everything again and merges with the last good versions.
    pub fn reload(&mut self) -> Reload {
        let scan = scan(&self.dirs, self.skills_dir.as_deref());
        self.merge(scan)
    }

    /// Merges a finished scan with the last good versions (used directly by other
    /// sources that build their own scan).
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
                Err(errors) => match self.last_good.remove(&object.key) {
                    Some(previous) => {
                        reports.push(report(&object.key, location, Some(&previous.0), &errors));
                        next.insert(object.key, previous);
                    }
                    None => reports.push(report(&object.key, location, None, &errors)),
                },
            }
        }
        // Objects whose file (or document) could not be parsed stay as they were.
        for (key, (entry, file, index)) in std::mem::take(&mut self.last_good) {
            let unreadable = scan.unreadable.contains(&(file.clone(), None))
                || scan.unreadable.contains(&(file.clone(), Some(index)));
            if unreadable && !next.contains_key(&key) {
                let error = FieldError::new("", format!("{} could not be parsed (see problems)", file.display()));
                reports.push(report(&key, format!("{}:{index}", file.display()), Some(&entry), &[error]));
                next.insert(key, (entry, file, index));
            }
        }
        reports.sort_by(|a, b| a.key.cmp(&b.key));
        self.last_good = next;
        Reload {
            entries: self.last_good.iter().map(|(k, (e, _, _))| (k.clone(), e.clone())).collect(),
            config_maps: scan.config_maps,
            reports,
            problems: scan.problems,
        }
    }
}

/// The report of one object: `in_force` is the entry that stays in force, if any;
/// `errors` are the problems of the newest version.
fn report(key: &ObjectKey, source: String, in_force: Option<&Entry>, errors: &[FieldError]) -> ResourceReport {
    let spec = in_force.and_then(|entry| entry.resource.to_value().get("spec").cloned());
    let in_force = match (in_force, errors.is_empty()) {
        (Some(_), true) => InForce::Current,
        (Some(_), false) => InForce::Previous,
        (None, _) => InForce::None,
    };
    let condition = match in_force {
        InForce::Current => Condition::ready(true, "Loaded", format!("loaded from {source}"), None),
        InForce::Previous => Condition::ready(
            false,
            "Invalid",
            format!("{}; the previous valid version stays in force", join(errors)),
            None,
        ),
        InForce::None => Condition::ready(false, "Invalid", join(errors), None),
    };
    ResourceReport {
        key: key.clone(),
        source,
        in_force,
        conditions: vec![condition],
        spec,
        errors: errors.iter().map(ToString::to_string).collect(),
    }
}

fn join(errors: &[FieldError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Applies a reload: publishes the Catalog and the status board, logs what changed.
pub fn apply(reload: Reload, store: &CatalogStore, board: &StatusBoard) -> u64 {
    let before = store.current().version;
    let version = store.publish(reload.entries, reload.config_maps);
    for report in reload.reports.iter().filter(|r| r.in_force != InForce::Current) {
        tracing::warn!(object = %report.key, source = %report.source, errors = %report.errors.join("; "), "invalid resource");
    }
    for problem in &reload.problems {
        tracing::warn!(location = %problem.location, error = %problem.error, "unreadable manifest");
    }
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

/// How often the directories are rescanned even without file events (missed events,
/// network filesystems).
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(10);
/// Quiet time after a file event before reloading (editors write in several steps).
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// Watches the directories and reloads on change until cancelled.
pub async fn watch(mut source: DirectorySource, store: CatalogStore, board: StatusBoard, cancel: CancellationToken) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = tx.send(());
        }
    });
    let _watcher = match watcher {
        Ok(mut watcher) => {
            for dir in source.watched() {
                if let Err(error) = watcher.watch(&dir, RecursiveMode::Recursive) {
                    tracing::warn!(dir = %dir.display(), %error, "cannot watch resource directory; relying on periodic rescans");
                }
            }
            Some(watcher)
        }
        Err(error) => {
            tracing::warn!(%error, "file watching unavailable; relying on periodic rescans");
            None
        }
    };
    let mut rescan = tokio::time::interval(RESCAN_INTERVAL);
    rescan.tick().await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            event = rx.recv() => {
                if event.is_none() { return; }
                tokio::time::sleep(DEBOUNCE).await;
                while rx.try_recv().is_ok() {}
            }
            _ = rescan.tick() => {}
        }
        let result = tokio::task::spawn_blocking(move || {
            let reload = source.reload();
            (source, reload)
        })
        .await;
        match result {
            Ok((returned, reload)) => {
                source = returned;
                apply(reload, &store, &board);
            }
            Err(error) => {
                tracing::error!(%error, "resource reload task failed; stopping the directory watch");
                return;
            }
        }
    }
}
