//! `ValidatorProfile`: a program run on a temporary copy of a changed workspace.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{Condition, ENV_NAME_PATTERN};

/// A validator: argv (never a shell), the changed files it applies to, and its bounds.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "ValidatorProfile",
    namespaced,
    doc = "A program (argv, never a shell) that checks prepared changes on a temporary copy.",
    status = "ValidatorProfileStatus",
    shortname = "akvp",
    category = "akritas",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Program", type_ = "string", json_path = ".spec.argv[0]"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidatorProfileSpec {
    /// Program and arguments, executed directly.
    #[schemars(length(min = 1, max = 64), inner(length(max = 4096)))]
    #[x_kube(validation = Rule::new("self[0] != ''").message("argv[0] (the program) must not be empty"))]
    pub argv: Vec<String>,
    /// Glob patterns of changed files (relative to the workspace root) that trigger this validator.
    #[serde(default = "default_files")]
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 512)))]
    pub files: Vec<String>,
    /// Wall-time limit in seconds.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: u32,
    /// Bytes of combined output kept.
    #[serde(default = "default_output_limit")]
    #[schemars(range(min = 1024, max = 1048576))]
    pub output_limit_bytes: u32,
    /// Names of host environment variables passed through; nothing else is inherited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 128), regex(pattern = ENV_NAME_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub env: Vec<String>,
    /// What the validator runs on: `full` (default) a copy of the whole workspace with
    /// the change overlaid, for validators that read other files; `changedFiles` only the
    /// changed files (under their paths), much faster on a large workspace.
    #[serde(default, skip_serializing_if = "is_full")]
    pub copy: WorkspaceCopy,
}

/// What a validator runs on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WorkspaceCopy {
    /// A copy of the whole workspace with the change overlaid.
    #[default]
    Full,
    /// Only the changed files.
    ChangedFiles,
}

fn is_full(copy: &WorkspaceCopy) -> bool {
    *copy == WorkspaceCopy::Full
}

fn default_files() -> Vec<String> {
    vec!["**".to_string()]
}
fn default_timeout() -> u32 {
    60
}
fn default_output_limit() -> u32 {
    65536
}

/// Observed state of a ValidatorProfile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidatorProfileStatus {
    /// `Ready` and friends.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Absolute path the program resolved to during preflight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_program: Option<String>,
    /// First line of the program's version output, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How the program runs: the validator sandbox in force and, below the minimum
    /// Landlock ABI, what is lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}
