//! `Workspace`: a git working tree where Akritas may prepare (and, once approved, write) changes.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::Condition;

/// Pattern of a reference to another Akritas resource in the same namespace.
pub const RESOURCE_NAME_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A git working tree and the validators that check changes prepared in it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "Workspace",
    namespaced,
    doc = "A git working tree where Akritas prepares changes that only a human can approve.",
    status = "WorkspaceStatus",
    shortname = "akws",
    category = "akritas",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Writable", type_ = "boolean", json_path = ".spec.writable"),
    printcolumn(name = "Head", type_ = "string", json_path = ".status.headCommit"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspaceSpec {
    /// Where the tree is.
    pub source: WorkspaceSource,
    /// Names of ValidatorProfiles in the same namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 63), regex(pattern = RESOURCE_NAME_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub validator_profiles: Vec<String>,
    /// `append` adds these profiles to the host defaults; `replace` uses only these.
    #[serde(default)]
    pub validator_mode: ValidatorMode,
    /// Whether an approved change may be written. Read-only workspaces only preview.
    #[serde(default)]
    pub writable: bool,
}

/// Exactly one location.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.path) != has(self.git)").message("set exactly one of path or git"))]
pub struct WorkspaceSource {
    /// A git working tree on the host's volume. Relative paths resolve against the
    /// manifest's directory in standalone mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub path: Option<String>,
    /// A git remote cloned by the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
}

/// A git remote and the ref to check out.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitSource {
    /// Remote URL.
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// Branch, tag or commit; default `main`.
    #[serde(default = "default_ref", rename = "ref")]
    #[schemars(length(min = 1, max = 255))]
    pub reference: String,
}

fn default_ref() -> String {
    "main".to_string()
}

/// How workspace validators combine with the host defaults.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ValidatorMode {
    /// Host defaults plus these.
    #[default]
    Append,
    /// Only these.
    Replace,
}

/// Observed state of a Workspace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceStatus {
    /// `Ready` and friends.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Commit at HEAD when last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_commit: Option<String>,
}
