//! What every Kubernetes tool call works with: the client, the Run's access, the
//! limits, resolution of kinds to API resources (cached), and errors worded for the
//! model and the operator.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::Value;

use super::access::Access;
use crate::text::{ELLIPSIS, truncate_bytes};

/// Bounds of the Kubernetes tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of one tool output (JSON text), before the registry's own cap.
    pub output_bytes: usize,
    /// Items a `list` asks for when the call names no limit.
    pub list_default: u32,
    /// Most items one `list` asks for.
    pub list_max: u32,
    /// Log bytes read when the call names no `limitBytes`.
    pub log_default_bytes: u32,
    /// Most log bytes one call reads.
    pub log_max_bytes: u32,
    /// Log lines asked for when the call names no `tailLines`.
    pub log_default_lines: u32,
    /// Most event groups, changes or revisions one call returns.
    pub max_entries: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            output_bytes: 64 * 1024,
            list_default: 100,
            list_max: 500,
            log_default_bytes: 32 * 1024,
            log_max_bytes: 128 * 1024,
            log_default_lines: 200,
            max_entries: 50,
        }
    }
}

/// Why a call produced no output; the message is for the model (redacted and
/// bounded before it leaves the tool).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(String);

impl Failure {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }

    /// An API error worded for `what` (`get pods "web-1" in namespace "shop"`):
    /// forbidden and not-found name the cause and what to do.
    pub fn from_kube(error: kube::Error, what: &str) -> Self {
        match error {
            kube::Error::Api(status) if status.code == 403 => Self(format!(
                "forbidden: Akritas's service account may not {what} (grant it in the chart: kubernetesTools.enabled, \
                 or a Role for that kind)"
            )),
            kube::Error::Api(status) if status.code == 404 => Self(format!("not found: {what}")),
            kube::Error::Api(status) if status.code == 410 => {
                Self(format!("{what}: the continue token expired; list again without `continue`"))
            }
            kube::Error::Api(status) => Self(format!(
                "{what}: the API server answered {} {}: {}",
                status.code,
                status.reason,
                truncate_bytes(&status.message, 512, ELLIPSIS)
            )),
            other => Self(format!("{what}: {}", truncate_bytes(&other.to_string(), 512, ELLIPSIS))),
        }
    }
}

impl From<Failure> for String {
    fn from(failure: Failure) -> Self {
        failure.0
    }
}

/// A kind resolved to its API resource.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// Kinds the tools know without a version (`kind: Deployment`), by kind name.
const KNOWN_KINDS: &[(&str, &str)] = &[
    ("Pod", "v1"),
    ("Service", "v1"),
    ("ConfigMap", "v1"),
    ("Event", "v1"),
    ("Node", "v1"),
    ("Namespace", "v1"),
    ("PersistentVolumeClaim", "v1"),
    ("PersistentVolume", "v1"),
    ("ServiceAccount", "v1"),
    ("Endpoints", "v1"),
    ("ResourceQuota", "v1"),
    ("LimitRange", "v1"),
    ("ReplicationController", "v1"),
    ("Deployment", "apps/v1"),
    ("ReplicaSet", "apps/v1"),
    ("StatefulSet", "apps/v1"),
    ("DaemonSet", "apps/v1"),
    ("ControllerRevision", "apps/v1"),
    ("Job", "batch/v1"),
    ("CronJob", "batch/v1"),
    ("Ingress", "networking.k8s.io/v1"),
    ("NetworkPolicy", "networking.k8s.io/v1"),
    ("HorizontalPodAutoscaler", "autoscaling/v2"),
    ("PodDisruptionBudget", "policy/v1"),
    ("StorageClass", "storage.k8s.io/v1"),
    ("EndpointSlice", "discovery.k8s.io/v1"),
    ("Lease", "coordination.k8s.io/v1"),
];

/// A built-in kind spelled as the API spells it (`pod` → `Pod`); any other kind as given.
pub fn canonical_kind(kind: &str) -> &str {
    KNOWN_KINDS.iter().find(|(known, _)| known.eq_ignore_ascii_case(kind)).map_or(kind, |(known, _)| known)
}

/// Most kinds kept resolved; the cache is cleared when full.
const MAX_RESOLVED: usize = 256;

/// The client, the Run's access and the limits; cheap to clone.
#[derive(Clone)]
pub struct Ctx {
    pub client: kube::Client,
    pub access: Access,
    pub limits: Limits,
    resolved: Arc<Mutex<HashMap<(String, String), Resolved>>>,
}

impl Ctx {
    /// A context for one Run's tools; `resolved` is shared between Runs.
    pub fn new(client: kube::Client, access: Access, limits: Limits, resolved: Arc<Mutex<ResolvedKinds>>) -> Self {
        Self { client, access, limits, resolved }
    }

    /// The API resource of `kind` (`Deployment`; any letter case for the kinds in
    /// [`KNOWN_KINDS`]) in `api_version` (`apps/v1`; optional for those kinds). Secrets
    /// are refused here, by kind or plural, whatever the API server would allow.
    pub async fn resolve(&self, api_version: Option<&str>, kind: &str) -> Result<Resolved, Failure> {
        refuse_secrets(kind)?;
        let known = KNOWN_KINDS.iter().find(|(k, _)| k.eq_ignore_ascii_case(kind));
        let (kind, api_version) = match (api_version.filter(|v| !v.is_empty()), known) {
            (Some(version), Some((known, _))) => ((*known).to_string(), version.to_string()),
            (Some(version), None) => (kind.to_string(), version.to_string()),
            (None, Some((known, version))) => ((*known).to_string(), (*version).to_string()),
            (None, None) => {
                return Err(Failure::new(format!(
                    "kind {kind:?} needs an apiVersion (such as \"apps/v1\" or \"example.com/v1\"); the kinds known \
                     without one are: {}",
                    KNOWN_KINDS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
                )));
            }
        };
        let key = (api_version.clone(), kind.clone());
        if let Some(found) = self.resolved.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group.to_string(), version.to_string()),
            None => (String::new(), api_version.clone()),
        };
        let gvk = GroupVersionKind { group, version, kind: kind.clone() };
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| Failure::from_kube(e, &format!("discover kind {kind} in {api_version}")))?;
        refuse_secrets(&resource.plural)?;
        let resolved = Resolved { resource, namespaced: capabilities.scope == Scope::Namespaced };
        let mut cache = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_RESOLVED {
            cache.clear();
        }
        cache.insert(key, resolved.clone());
        Ok(resolved)
    }

    /// The API of `resolved` in `namespace` (checked against the Run's access), or
    /// cluster-wide for a cluster-scoped kind (checked too).
    pub fn api(
        &self,
        resolved: &Resolved,
        namespace: Option<&str>,
    ) -> Result<(Api<DynamicObject>, Option<String>), Failure> {
        if resolved.namespaced {
            let namespace = self.access.namespace(namespace)?;
            Ok((Api::namespaced_with(self.client.clone(), &namespace, &resolved.resource), Some(namespace)))
        } else {
            self.access.cluster_scoped(&resolved.resource.kind)?;
            Ok((Api::all_with(self.client.clone(), &resolved.resource), None))
        }
    }

    /// A typed API in `namespace` (checked against the Run's access).
    pub fn namespaced<K>(&self, namespace: Option<&str>) -> Result<(Api<K>, String), Failure>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        let namespace = self.access.namespace(namespace)?;
        Ok((Api::namespaced(self.client.clone(), &namespace), namespace))
    }

    /// A typed API of a cluster-scoped kind (refused for a Run that may not read those).
    pub fn cluster<K>(&self, what: &str) -> Result<Api<K>, Failure>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        self.access.cluster_scoped(what)?;
        Ok(Api::all(self.client.clone()))
    }
}

/// The shared cache of resolved kinds.
pub type ResolvedKinds = HashMap<(String, String), Resolved>;

/// Secrets are never read by these tools, whatever RBAC allows.
fn refuse_secrets(kind_or_plural: &str) -> Result<(), Failure> {
    let name = kind_or_plural.to_ascii_lowercase();
    if name == "secret" || name == "secrets" {
        return Err(Failure::new(
            "Secrets are never read by the Kubernetes tools (not their data, not their list); ask a person with access",
        ));
    }
    Ok(())
}

/// `value` with `metadata.managedFields` removed (they are large and say nothing a
/// reader needs; `recent_changes` reads their times itself).
pub fn without_managed_fields(mut value: Value) -> Value {
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    value
}

/// A string argument (absent or empty: `None`).
pub fn text<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// An unsigned integer argument.
pub fn number(args: &Value, key: &str) -> Option<u64> {
    args.get(key).and_then(Value::as_u64)
}

/// A boolean argument (absent: false).
pub fn flag(args: &Value, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Schema of a namespace argument.
pub fn namespace_schema() -> Value {
    serde_json::json!({"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        "description": "Namespace; default: the Run's own namespace."})
}

/// Schema of a tool's arguments: an object of `properties` (a JSON object) with no other
/// property, `required` naming the ones that must be there.
pub fn arguments_schema(required: &[&str], properties: Value) -> Value {
    let mut schema = serde_json::json!({"type": "object", "additionalProperties": false, "properties": properties});
    if !required.is_empty() {
        schema["required"] = serde_json::json!(required);
    }
    schema
}

/// Schema of an object name argument.
pub fn name_schema(description: &str) -> Value {
    serde_json::json!({"type": "string", "minLength": 1, "maxLength": 253, "description": description})
}

/// Length of `value` as JSON text.
pub fn json_len(value: &Value) -> usize {
    serde_json::to_string(value).map_or(usize::MAX, |s| s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_refused_by_kind_and_by_resource_name() {
        for name in ["Secret", "secret", "secrets", "SECRETS"] {
            let refused = refuse_secrets(name).unwrap_err();
            assert!(refused.message().contains("never read"), "{name}");
        }
        assert!(refuse_secrets("SecretProviderClass").is_ok());
    }

    #[test]
    fn managed_fields_are_dropped() {
        let object = serde_json::json!({"metadata": {"name": "a", "managedFields": [{"manager": "kubectl"}]}});
        assert_eq!(without_managed_fields(object), serde_json::json!({"metadata": {"name": "a"}}));
    }
}
