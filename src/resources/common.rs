//! Types shared by several resource kinds: secret references, literal-or-secret
//! values, conditions and the helpers that keep them consistent.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Pattern for an environment variable name.
pub const ENV_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
/// Pattern for a Kubernetes object name used as a reference (DNS-1123 subdomain).
pub const OBJECT_NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Pattern for a Secret or ConfigMap data key.
pub const DATA_KEY_PATTERN: &str = "^[-._a-zA-Z0-9]+$";
/// Pattern for an HTTP header name (RFC 9110 token, restricted to the usual set).
pub const HEADER_NAME_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9-]*$";
/// Largest literal value accepted where a secret or URL may stand.
pub const MAX_VALUE_BYTES: u32 = 8192;

/// A credential held outside the resource: the name of an environment variable of the
/// Akritas process (both modes) or a key of a Kubernetes Secret (operator mode only).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.env) != has(self.secretKeyRef)").message("set exactly one of env or secretKeyRef"))]
pub struct SecretRef {
    /// Name of an environment variable of the Akritas process that holds the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), regex(pattern = ENV_NAME_PATTERN))]
    pub env: Option<String>,
    /// A key of a Secret in the resource's namespace (operator mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeySelector>,
}

/// A key of a Secret or ConfigMap in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeySelector {
    /// Object name.
    #[schemars(length(min = 1, max = 253), regex(pattern = OBJECT_NAME_PATTERN))]
    pub name: String,
    /// Key inside the object's data.
    #[schemars(length(min = 1, max = 253), regex(pattern = DATA_KEY_PATTERN))]
    pub key: String,
}

/// A named value given literally or taken from a secret (environment entries, headers).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.value) != has(self.valueFrom)").message("set exactly one of value or valueFrom"))]
pub struct NamedValue {
    /// Variable or header name.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// Literal, non-secret value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_VALUE_BYTES))]
    pub value: Option<String>,
    /// Secret value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<SecretRef>,
}

/// Status of a condition, as in `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// One observation of an object's state, shaped like `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, for example `Ready`.
    #[schemars(length(min = 1, max = 316))]
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// CamelCase machine-readable reason.
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,
    /// Human-readable explanation; says what to fix when the status is not good.
    #[schemars(length(max = 32768))]
    pub message: String,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
    /// The `metadata.generation` this condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The condition type every Akritas resource reports.
pub const READY: &str = "Ready";

impl Condition {
    /// A `Ready` condition; `ok` decides the status.
    pub fn ready(ok: bool, reason: &str, message: impl Into<String>, generation: Option<i64>) -> Self {
        Self {
            type_: READY.to_string(),
            status: if ok { ConditionStatus::True } else { ConditionStatus::False },
            reason: reason.to_string(),
            message: message.into(),
            last_transition_time: now_rfc3339(),
            observed_generation: generation,
        }
    }
}

/// Inserts or replaces the condition of the same type; keeps the previous
/// transition time when the status did not change.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            *old = new;
        }
        None => conditions.push(new),
    }
}

/// The condition of the given type, if any.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the `Ready` condition is present and `True`.
pub fn is_ready(conditions: &[Condition]) -> bool {
    find_condition(conditions, READY).is_some_and(|c| c.status == ConditionStatus::True)
}

/// Every secret reference in a resource's spec, with its JSON path. A reference is
/// an object whose only keys are `env` and/or `secretKeyRef`.
pub fn secret_refs(spec: &serde_json::Value) -> Vec<(String, SecretRef)> {
    fn walk(value: &serde_json::Value, path: String, out: &mut Vec<(String, SecretRef)>) {
        match value {
            serde_json::Value::Object(map) => {
                let is_ref = !map.is_empty() && map.keys().all(|k| k == "env" || k == "secretKeyRef");
                if is_ref && let Ok(reference) = serde_json::from_value::<SecretRef>(value.clone()) {
                    out.push((path, reference));
                    return;
                }
                for (key, item) in map {
                    walk(item, format!("{path}.{key}"), out);
                }
            }
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(spec, "spec".into(), &mut out);
    out
}

/// Current time as RFC 3339 with second precision.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().round(jiff::Unit::Second).map(|t| t.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_condition_keeps_transition_time_when_status_is_unchanged() {
        let mut conditions = Vec::new();
        let mut first = Condition::ready(true, "Loaded", "ok", Some(1));
        first.last_transition_time = "2026-01-01T00:00:00Z".into();
        set_condition(&mut conditions, first);
        set_condition(&mut conditions, Condition::ready(true, "Loaded", "still ok", Some(2)));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, "2026-01-01T00:00:00Z");
        assert_eq!(conditions[0].message, "still ok");
        assert_eq!(conditions[0].observed_generation, Some(2));

        set_condition(&mut conditions, Condition::ready(false, "Invalid", "broken", Some(3)));
        assert_ne!(conditions[0].last_transition_time, "2026-01-01T00:00:00Z");
        assert!(!is_ready(&conditions));
    }
}
