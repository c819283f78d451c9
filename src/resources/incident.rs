//! `Incident`: correlated alerts about one entity, projected from the alert journal.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::Condition;

/// An Incident written by the host.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "Incident",
    namespaced,
    doc = "Correlated alerts about one entity and the outcome of their investigation.",
    status = "IncidentStatus",
    shortname = "akinc",
    category = "akritas",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Severity", type_ = "string", json_path = ".status.severity"),
    printcolumn(name = "Entity", type_ = "string", json_path = ".spec.entity"),
    printcolumn(name = "Events", type_ = "integer", json_path = ".status.eventCount"),
    printcolumn(name = "Finding", type_ = "string", json_path = ".status.investigation.finding", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IncidentSpec {
    /// AlertSource that reported it.
    #[schemars(length(min = 1, max = 253))]
    pub source: String,
    /// Key the host correlates events by.
    #[schemars(length(min = 1, max = 1024))]
    pub correlation_key: String,
    /// Affected host, service or object.
    #[schemars(length(max = 1024))]
    pub entity: String,
}

/// Whether the incident is still firing.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum IncidentState {
    /// At least one event is firing.
    Firing,
    /// Every event resolved.
    Resolved,
}

/// Observed state of an Incident.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentStatus {
    /// `Ready` and friends.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Firing or resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<IncidentState>,
    /// Highest severity seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// Events correlated into it.
    #[serde(default)]
    pub event_count: u64,
    /// RFC 3339 times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at: Option<String>,
    /// Last event time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// Resolution time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
    /// Newest investigation Run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// Where the investigation job is: `deferred` (over the source's rate or the pending
    /// cap), `pending`, `running`, `succeeded` or `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<IncidentJob>,
    /// Outcome of the newest investigation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation: Option<InvestigationSummary>,
    /// Notification outcomes, newest last (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<IncidentDelivery>,
}

/// The investigation job of an incident.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentJob {
    /// `deferred`, `pending`, `running`, `succeeded` or `failed`.
    pub status: String,
    /// A storm job: the incidents of its AlertSource it stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storm_incidents: Option<u64>,
}

/// The descriptive outcome of an investigation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvestigationSummary {
    /// Finding status (for example `confirmed`, `inconclusive`).
    pub finding: String,
    /// Descriptive confidence.
    pub confidence: String,
    /// Whether and how a human can act.
    pub actionability: String,
    /// Bounded summary.
    pub summary: String,
    /// Evidence items of the result.
    #[serde(default)]
    pub evidence_count: u32,
    /// Evidence items whose quoted value the host found in the cited call's output
    /// (coverage = evidenceVerified / evidenceCount).
    #[serde(default)]
    pub evidence_verified: u32,
}

/// One notification outcome.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentDelivery {
    /// Receiver name.
    pub receiver: String,
    /// `delivered`, `failed`, or `filtered` (the receiver's routing excluded it).
    pub outcome: String,
    /// RFC 3339 time.
    pub at: String,
    /// Why a failed delivery failed (connection refused, DNS, TLS, timeout, an HTTP status),
    /// naming the receiver's host and port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}
