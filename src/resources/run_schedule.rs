//! `RunSchedule`: a read-only investigation run on a cron schedule, whose result is compared
//! with the last one and reported to receivers when it changed (docs/schedules.md).

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::Condition;

/// Pattern of a receiver reference: `name` (the schedule's namespace) or `namespace/name`
/// (a shared namespace).
pub const RECEIVER_REF_PATTERN: &str =
    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Default `startingDeadlineSeconds`: a tick found later than this after its time is missed.
pub const DEFAULT_STARTING_DEADLINE_SECONDS: u32 = 300;
/// Default `historyLimit`.
pub const DEFAULT_HISTORY_LIMIT: u32 = 10;

/// A scheduled read-only investigation.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "RunSchedule",
    namespaced,
    doc = "A read-only investigation run on a cron schedule; receivers hear about it when its result changes.",
    status = "RunScheduleStatus",
    shortname = "akrs",
    category = "akritas",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(name = "Finding", type_ = "string", json_path = ".status.lastResult.findingStatus"),
    printcolumn(name = "Last", type_ = "date", json_path = ".status.lastScheduleTime"),
    printcolumn(name = "Next", type_ = "date", json_path = ".status.nextScheduleTime"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunScheduleSpec {
    /// When to run, as a CronJob schedule: five fields (minute hour day-of-month month
    /// day-of-week) or a macro such as `@daily`.
    #[schemars(length(min = 1, max = 256))]
    pub schedule: String,
    /// IANA time zone the schedule is read in (for example `Europe/Berlin`); default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
    /// What to check.
    #[schemars(length(min = 1, max = 16384))]
    pub prompt: String,
    /// Extra facts (for example `service: payments`), used for skill selection.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    #[schemars(inner(length(max = 4096)))]
    pub context: BTreeMap<String, String>,
    /// Skills (by name, visible to the namespace) every Run of this schedule starts with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), inner(length(min = 1, max = 253)))]
    pub skills: Vec<String>,
    /// BCP 47 tag for the answer's language; default the host's setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 35))]
    pub response_language: Option<String>,
    /// NotificationReceivers told about results: `name` in this namespace, or
    /// `namespace/name` in a shared namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 317), regex(pattern = RECEIVER_REF_PATTERN)))]
    pub receivers: Vec<String>,
    /// When receivers are told.
    #[serde(default)]
    pub notify: NotifyPolicy,
    /// What a tick does while the previous Run still runs.
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// A tick found more than this many seconds after its time is missed (counted, not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604800))]
    pub starting_deadline_seconds: Option<u32>,
    /// No new tick runs while true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Runs remembered in status and kept as `Run` objects (newest first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub history_limit: Option<u32>,
}

impl RunScheduleSpec {
    /// The deadline after a tick's time within which it may still start.
    pub fn starting_deadline(&self) -> std::time::Duration {
        let seconds = self.starting_deadline_seconds.unwrap_or(DEFAULT_STARTING_DEADLINE_SECONDS);
        std::time::Duration::from_secs(u64::from(seconds))
    }

    /// Runs remembered.
    pub fn history(&self) -> usize {
        self.history_limit.unwrap_or(DEFAULT_HISTORY_LIMIT) as usize
    }
}

/// When receivers hear about a Run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NotifyPolicy {
    /// When the result differs from the last one: a first finding, a changed finding, back
    /// to healthy (and when Runs start or stop failing).
    #[default]
    OnChange,
    /// After every Run.
    Always,
    /// After every Run with a finding (something a person should act on).
    OnFinding,
}

/// What a tick does while the previous Run of the schedule still runs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum ConcurrencyPolicy {
    /// Skip the tick (counted in `skippedTicks`).
    #[default]
    Forbid,
    /// Cancel the running Run and start the new one.
    Replace,
}

/// The result of the newest finished Run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleResult {
    /// The tick it ran for (RFC 3339).
    pub scheduled_time: String,
    /// Journal id `run_<32 hex>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The `Run` object's name (operator mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_name: Option<String>,
    /// `Succeeded` or `Failed`.
    pub outcome: String,
    /// `healthy`; `failed` for a Run without a result; or the finding status (`confirmed`,
    /// `suspected`, `inconclusive`) of a result a person should act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding_status: Option<String>,
    /// The result's actionability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actionability: Option<String>,
    /// One-paragraph result, or why the Run failed (bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Evidence items of the result.
    #[serde(default)]
    pub evidence_count: u32,
    /// Evidence items whose quoted value the host found in the cited call's output.
    #[serde(default)]
    pub evidence_verified: u32,
    /// What differs from the Run before (empty: nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
    /// Whether receivers were told.
    #[serde(default)]
    pub notified: bool,
}

/// Why a tick did not run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedTick {
    /// The tick (RFC 3339).
    pub scheduled_time: String,
    /// `ConcurrencyForbid`, `CostCapReached`, …
    pub reason: String,
    /// What happened and what to change.
    pub message: String,
}

/// Observed state of a RunSchedule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunScheduleStatus {
    /// `Ready`, `ReferencesResolved` and `Suspended`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The newest tick that ran (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<String>,
    /// When the newest succeeded Run finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<String>,
    /// The next tick (absent while suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<String>,
    /// The newest finished Run's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<ScheduleResult>,
    /// Failed Runs in a row.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// Ticks found past their starting deadline (not run).
    #[serde(default)]
    pub missed_ticks: u64,
    /// Ticks not run for a reason (`lastSkipped` says the newest).
    #[serde(default)]
    pub skipped_ticks: u64,
    /// The newest skipped tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_skipped: Option<SkippedTick>,
    /// The newest Runs (journal ids), newest first, at most `historyLimit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_runs: Vec<String>,
}
