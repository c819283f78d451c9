//! Validation of parsed objects, whichever source they come from (manifest files
//! or the API server): each object is classified and validated on its own, then
//! the cross-object checks (duplicates, references) run over the whole scan.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::status::Problem;
use super::{ConfigMapData, ObjectKey};
use crate::resources::validate::{FieldError, Identity, parse_manifest};
use crate::resources::{GROUP, Kind, Resource};

/// Where a referenced ConfigMap must be for a resource to use it.
const CONFIG_MAP_HINT: &str = "is not available: put it among the manifests, or in a cluster label it \
                               akritas.io/content (only labelled ConfigMaps are read)";

/// Namespace of manifests that do not name one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// An object found in a manifest, valid or not.
#[derive(Debug)]
pub struct Scanned {
    /// Kind, namespace (`default` when the manifest names none) and name, as the Catalog keys it.
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

/// What a scan found.
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
                                "ConfigMap {}/{} with key {:?} {CONFIG_MAP_HINT}",
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
                            format!("ConfigMap {namespace}/{} {CONFIG_MAP_HINT}", cm.name),
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
