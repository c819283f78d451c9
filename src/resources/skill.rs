//! `Skill`: operator-approved guidance (a SKILL.md body) selected for a Run by exact facts.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{Condition, KeySelector};

/// Pattern of a skill selector (a normalised fact such as `postgresql`).
pub const SELECTOR_PATTERN: &str = "^[a-z0-9][a-z0-9._-]{0,63}$";
/// Largest skill body.
pub const MAX_CONTENT_BYTES: u32 = 65536;

/// Guidance the model may load during a Run. Loading a skill never adds a tool.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "Skill",
    namespaced,
    doc = "Operator-approved guidance (SKILL.md) selected for a Run by exact facts.",
    status = "SkillStatus",
    shortname = "aksk",
    category = "akritas",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Match", type_ = "string", json_path = ".spec.match"),
    printcolumn(name = "Description", type_ = "string", json_path = ".spec.description", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.content) != has(self.contentFrom)").message("set exactly one of content or contentFrom"))]
pub struct SkillSpec {
    /// One line shown by `knowledge.list_skills`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub description: Option<String>,
    /// Facts (lower-case) that select this skill; empty means the resource name.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 64), regex(pattern = SELECTOR_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub selectors: Vec<String>,
    /// The guidance itself (Markdown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_CONTENT_BYTES))]
    pub content: Option<String>,
    /// Take the guidance from a ConfigMap key instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_from: Option<ContentFrom>,
}

/// Where a skill body lives when it is not inline.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContentFrom {
    /// A key of a ConfigMap in the same namespace.
    pub config_map_key_ref: KeySelector,
}

/// Observed state of a Skill.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillStatus {
    /// `Ready` and friends.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// SHA-256 of the loaded guidance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_sha256: Option<String>,
}
