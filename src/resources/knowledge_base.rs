//! `KnowledgeBase`: runbooks indexed for BM25 search.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{Condition, DATA_KEY_PATTERN, OBJECT_NAME_PATTERN};
use super::workspace::RESOURCE_NAME_PATTERN;

/// Runbook sources and how they are chunked for retrieval. Runbook text guides the
/// model; it never authorizes anything.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "KnowledgeBase",
    namespaced,
    doc = "Runbooks indexed for BM25 search; guidance, never authority.",
    status = "KnowledgeBaseStatus",
    shortname = "akkb",
    category = "akritas",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Documents", type_ = "integer", json_path = ".status.documents"),
    printcolumn(name = "Chunks", type_ = "integer", json_path = ".status.chunks"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KnowledgeBaseSpec {
    /// Where the runbooks come from.
    #[schemars(length(min = 1, max = 32))]
    pub sources: Vec<KnowledgeSource>,
    /// Chunking of documents for retrieval.
    #[serde(default)]
    pub chunking: Chunking,
}

/// Exactly one kind of source.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("(has(self.configMap) ? 1 : 0) + (has(self.directory) ? 1 : 0) + (has(self.git) ? 1 : 0) + (has(self.inline) ? 1 : 0) == 1").message("set exactly one of configMap, directory, git or inline"))]
pub struct KnowledgeSource {
    /// Every key (or the listed keys) of a ConfigMap is one document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSource>,
    /// Text files under a directory on the host's volume. Relative paths resolve
    /// against the manifest's directory in standalone mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<DirectorySource>,
    /// A path inside a Workspace's git tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitPathSource>,
    /// A document written in the resource itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<InlineDocument>,
}

/// A document given inline.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InlineDocument {
    /// Document id, unique within the knowledge base.
    #[schemars(length(min = 1, max = 253), regex(pattern = DATA_KEY_PATTERN))]
    pub name: String,
    /// Title; default the first Markdown heading, else the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub title: Option<String>,
    /// Link to the original.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub url: Option<String>,
    /// The text (Markdown or plain).
    #[schemars(length(min = 1, max = 262144))]
    pub content: String,
}

/// ConfigMap source.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigMapSource {
    /// ConfigMap name.
    #[schemars(length(min = 1, max = 253), regex(pattern = OBJECT_NAME_PATTERN))]
    pub name: String,
    /// Keys to use; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253), regex(pattern = DATA_KEY_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub keys: Vec<String>,
}

/// Directory source.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DirectorySource {
    /// Directory path.
    #[schemars(length(min = 1, max = 4096))]
    pub path: String,
    /// File extensions indexed (without the dot); default `md`, `txt`.
    #[serde(default = "default_extensions")]
    #[schemars(length(min = 1, max = 32), inner(length(min = 1, max = 16), regex(pattern = "^[A-Za-z0-9]+$")))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub extensions: Vec<String>,
}

fn default_extensions() -> Vec<String> {
    vec!["md".to_string(), "txt".to_string()]
}

/// A path inside a Workspace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitPathSource {
    /// Workspace name in the same namespace.
    #[schemars(length(min = 1, max = 63), regex(pattern = RESOURCE_NAME_PATTERN))]
    pub workspace: String,
    /// Directory inside the tree.
    #[schemars(length(min = 1, max = 4096))]
    pub path: String,
}

/// Chunking parameters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self.overlapRunes < self.chunkRunes").message("overlapRunes must be smaller than chunkRunes"))]
pub struct Chunking {
    /// Characters per chunk.
    #[serde(default = "default_chunk")]
    #[schemars(range(min = 200, max = 20000))]
    pub chunk_runes: u32,
    /// Characters shared by neighbouring chunks.
    #[serde(default = "default_overlap")]
    #[schemars(range(min = 0, max = 5000))]
    pub overlap_runes: u32,
}

fn default_chunk() -> u32 {
    1200
}
fn default_overlap() -> u32 {
    150
}

impl Default for Chunking {
    fn default() -> Self {
        Self { chunk_runes: default_chunk(), overlap_runes: default_overlap() }
    }
}

/// Observed state of a KnowledgeBase.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnowledgeBaseStatus {
    /// `Ready` and friends.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Documents indexed (absent until an index is built).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<u64>,
    /// Chunks indexed (absent until an index is built).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<u64>,
    /// SHA-256 of the index content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_sha256: Option<String>,
    /// Files the last import skipped, each with why (the first [`MAX_SKIPPED_SHOWN`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20), inner(length(max = 512)))]
    pub skipped: Vec<String>,
    /// How many files the last import skipped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_files: u64,
}

/// Most skipped files a KnowledgeBase's status lists.
pub const MAX_SKIPPED_SHOWN: usize = 20;

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl KnowledgeBaseStatus {
    /// A status that says which files the import skipped (the first [`MAX_SKIPPED_SHOWN`],
    /// each cut to 512 characters) and how many.
    pub fn skipping(skipped: &[String]) -> Self {
        KnowledgeBaseStatus {
            skipped: skipped
                .iter()
                .take(MAX_SKIPPED_SHOWN)
                .map(|s| crate::text::truncate_chars(s, 512, crate::text::ELLIPSIS))
                .collect(),
            skipped_files: skipped.len() as u64,
            ..Default::default()
        }
    }
}
