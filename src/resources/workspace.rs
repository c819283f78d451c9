//! `Workspace`: a git working tree where Akritas may prepare (and, once approved, write) changes.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{Condition, SecretRef};

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
#[x_kube(validation = Rule::new("!has(self.publish) || has(self.source.git)").message("publish needs a git source: a branch is pushed to spec.source.git.url"))]
#[x_kube(validation = Rule::new("!has(self.source.git) || !self.writable || has(self.publish)").message("a git workspace is written only by pushing a branch; set spec.publish"))]
pub struct WorkspaceSpec {
    /// Where the tree is.
    pub source: WorkspaceSource,
    /// Names of ValidatorProfiles in the same namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 63), regex(pattern = RESOURCE_NAME_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub validator_profiles: Vec<String>,
    /// `append` adds these profiles to the host defaults; `replace` uses only these. The
    /// host has no default profiles yet, so both run exactly these.
    #[serde(default)]
    pub validator_mode: ValidatorMode,
    /// Whether an approved change may be written. Read-only workspaces only preview.
    /// A git workspace is written only by pushing a branch (`publish`).
    #[serde(default)]
    pub writable: bool,
    /// Commit an approved change on a new branch and push it to the remote instead
    /// of writing the working tree (GitOps review). Needs a `git` source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<Publish>,
}

/// Pattern of a branch prefix: git-ref-safe characters, no `..`, no leading `/` or `-`.
pub const BRANCH_PREFIX_PATTERN: &str = "^[A-Za-z0-9_][A-Za-z0-9._/-]*$";

/// How approved changes of a git workspace are published.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Publish {
    /// Prefix of the branch each approved change is pushed to (`akritas/` gives
    /// `akritas/<change id>`).
    #[serde(default = "default_branch_prefix")]
    #[schemars(length(min = 1, max = 100), regex(pattern = BRANCH_PREFIX_PATTERN))]
    #[x_kube(validation = Rule::new("!self.contains('..') && !self.contains('//') && !self.endsWith('.lock')").message("must be usable in a git branch name: no '..', '//' or trailing '.lock'"))]
    pub branch_prefix: String,
}

fn default_branch_prefix() -> String {
    "akritas/".to_string()
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

/// A git remote the host clones into its data directory and fetches on a schedule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitSource {
    /// Remote URL: `https://` (or `http://` on a trusted network), without
    /// credentials. ssh remotes are not supported; use an https URL with a token.
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('https://') || self.startsWith('http://')").message("ssh remotes are not supported; use an https URL with a token"))]
    pub url: String,
    /// Branch, tag or commit; default `main`.
    #[serde(default = "default_ref", rename = "ref")]
    #[schemars(length(min = 1, max = 255))]
    pub reference: String,
    /// HTTP Basic credentials: a username and a token (for example a forge access token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<GitAuth>,
    /// Seconds between fetches.
    #[serde(default = "default_fetch_interval")]
    #[schemars(range(min = 30, max = 86400))]
    pub fetch_interval_seconds: u32,
}

fn default_ref() -> String {
    "main".to_string()
}

fn default_fetch_interval() -> u32 {
    300
}

/// Credentials for a git remote over HTTPS.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitAuth {
    /// Username sent with the token.
    #[serde(default = "default_git_username")]
    #[schemars(length(min = 1, max = 256))]
    pub username: String,
    /// The token (password).
    pub token: SecretRef,
}

fn default_git_username() -> String {
    "x-access-token".to_string()
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
    /// When the remote was last fetched successfully (RFC 3339; git workspaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetch: Option<String>,
    /// Why the last clone or fetch failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}
