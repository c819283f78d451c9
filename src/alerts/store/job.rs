//! What the alert store keeps: stored events, investigation jobs with their
//! notification deliveries, and the per-event outcome of a delivery.

use serde::{Deserialize, Serialize};

use crate::alerts::intake::event::Event;
use crate::investigation::InvestigationResult;

/// An event as stored, with the ids the host gave it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct StoredEvent {
    /// `evt_…`.
    pub id: String,
    /// `inc_…`.
    pub incident_id: String,
    /// `dlv_…` of the delivery that carried it.
    pub delivery_id: String,
    /// The canonical event.
    pub event: Event,
}

/// Lifecycle of an investigation job.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Waiting for its AlertSource's rate or the pending-job cap (`alert_source_rate`,
    /// `alert_pending_jobs`); promoted to pending most severe first, then oldest.
    Deferred,
    /// Waiting for a worker.
    Pending,
    /// A worker runs it.
    Running,
    /// Finished with a validated result.
    Succeeded,
    /// Gave up; `error` says why.
    Failed,
}

/// An investigation job.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Job {
    /// `job_…`.
    pub id: String,
    /// Incident it investigates (the first one, when later incidents share it).
    pub incident_id: String,
    /// Namespace of the AlertSource: the investigation's Run and the receivers it may reach.
    #[serde(default)]
    pub namespace: String,
    /// Event that opened the incident.
    pub event_id: String,
    /// Status.
    pub status: JobStatus,
    /// Attempts started.
    pub attempts: u32,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 time of the last change.
    pub updated_at: String,
    /// Run of the last attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Why the last attempt failed (secrets redacted by the caller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Stable code of the last failure (`upstream_error`, `structure_failed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// RFC 3339 time before which a pending retry does not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// Runs of every attempt, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<String>,
    /// The validated result of the successful attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<InvestigationResult>,
    /// Notification deliveries of the result, one per receiver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<Delivery>,
    /// A storm job: the incidents of its AlertSource it stands for (its own included), past
    /// `alert_deferred_jobs`. Counted from the delivery records; fixed once the job starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storm_incidents: Option<u64>,
}

impl Job {
    /// A job that has not started: pending, or deferred; never attempted.
    pub(crate) fn waiting(
        ids: [String; 3],
        namespace: String,
        deferred: bool,
        created_at: String,
        updated_at: String,
    ) -> Job {
        let [id, incident_id, event_id] = ids;
        Job {
            id,
            incident_id,
            namespace,
            event_id,
            status: if deferred { JobStatus::Deferred } else { JobStatus::Pending },
            attempts: 0,
            created_at,
            updated_at,
            run_id: None,
            error: None,
            error_code: None,
            not_before: None,
            runs: Vec::new(),
            result: None,
            deliveries: Vec::new(),
            storm_incidents: None,
        }
    }

    /// Whether a delivery still waits to be attempted.
    pub fn has_pending_deliveries(&self) -> bool {
        self.deliveries.iter().any(|d| d.status == DeliveryStatus::Pending)
    }
}

/// State of one notification delivery.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Not attempted yet (or interrupted).
    Pending,
    /// The receiver accepted it.
    Delivered,
    /// Every attempt failed.
    Failed,
    /// Not sent: the receiver's routing excludes it (`reason` says which rule).
    Filtered,
}

/// One notification of a job's result to one NotificationReceiver.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Delivery {
    /// `namespace/name` of the NotificationReceiver.
    pub receiver: String,
    /// `webhook`, `telegram` or `mattermost`.
    #[serde(rename = "type")]
    pub kind: String,
    /// 32 hex characters, sent to webhooks as `X-Akritas-Delivery`.
    pub delivery_id: String,
    /// Status.
    pub status: DeliveryStatus,
    /// HTTP attempts made.
    #[serde(default)]
    pub attempts: u32,
    /// Last HTTP status received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Stable error code of the last attempt (never a URL or token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why a `filtered` delivery was not sent: `severity`, `alert_source`, `namespace`,
    /// `labels` or `quiet_window`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What happened to one event of a delivery.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct ItemOutcome {
    /// `accepted` or `duplicate`.
    pub status: String,
    /// The event id (the first one's for a duplicate).
    pub event_id: String,
    /// Incident.
    pub incident_id: String,
    /// Investigation job created by this event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// A waiting job of the same correlation key, or the source's storm job, that this
    /// event's new incident shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_job: Option<String>,
    /// The job this event created waits (deferred) for its source's rate or the pending cap.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deferred: bool,
    /// The job this event created, or the one its incident shares, is its source's storm job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub storm: bool,
}
