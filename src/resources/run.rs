//! `Run`: the bounded, status-bearing projection of one investigation. The audit
//! journal stays the source of truth.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::Condition;

/// A Run written by the host, or created by a user to request a read-only investigation.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "Run",
    namespaced,
    doc = "One investigation: its phase, budget use, tools, skills and result (projection of the audit journal).",
    status = "RunStatus",
    shortname = "akrun",
    category = "akritas",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Source", type_ = "string", json_path = ".status.source"),
    printcolumn(name = "Tools", type_ = "integer", json_path = ".status.toolCalls"),
    printcolumn(name = "Summary", type_ = "string", json_path = ".status.summary", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunSpec {
    /// The question or task.
    #[schemars(length(min = 1, max = 16384))]
    pub prompt: String,
    /// Extra facts (for example `service: payments`), used for skill selection.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    #[schemars(inner(length(max = 4096)))]
    pub context: BTreeMap<String, String>,
    /// BCP 47 tag for the answer's language; default the host's setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 35))]
    pub response_language: Option<String>,
}

/// Lifecycle of a Run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum RunPhase {
    /// Accepted, waiting for a slot.
    Pending,
    /// Started and not finished: the audit journal holds no finish record for it yet.
    Running,
    /// Finished with an answer.
    Succeeded,
    /// Finished without an answer; `error` says why.
    Failed,
}

/// Observed state of a Run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// `Ready` and friends.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Journal id `run_<32 hex>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RunPhase>,
    /// What started it (`chat`, `alert:<source>`, `telegram`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Who started it (API key name, bot user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Catalog version the Run pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_version: Option<u64>,
    /// RFC 3339 start time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// RFC 3339 end time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Tool calls made.
    #[serde(default)]
    pub tool_calls: u32,
    /// Distinct tools used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_used: Vec<String>,
    /// Skills selected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    /// Budget consumed, by dimension.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub budget: BTreeMap<String, u64>,
    /// One-paragraph result (bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Evidence items that passed host validation.
    #[serde(default)]
    pub evidence_count: u32,
    /// Evidence items whose quoted value the host found in the cited call's output
    /// (coverage = evidenceVerified / evidenceCount).
    #[serde(default)]
    pub evidence_verified: u32,
    /// Why the Run failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
