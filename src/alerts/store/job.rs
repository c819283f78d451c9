//! What the alert store keeps: stored events, investigation jobs with their
//! notification deliveries, and the per-event outcome of a delivery.

use serde::{Deserialize, Serialize};

use crate::alerts::intake::event::Event;
use crate::ids::{EventId, IncidentId, JobId};
use crate::investigation::InvestigationResult;
use crate::resources::notification_receiver::ReceiverType;

/// An event as stored, with the ids the host gave it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct StoredEvent {
    /// `evt_…`.
    pub id: EventId,
    /// `inc_…`.
    pub incident_id: IncidentId,
    /// `dlv_…` of the delivery that carried it.
    pub delivery_id: String,
    /// The canonical event.
    pub event: Event,
}

/// Lifecycle of an investigation job.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Waiting for its AlertSource's rate or a pending-job cap (`alert_source_rate`,
    /// `alert_pending_jobs`, `alert_pending_jobs_per_namespace`); promoted to pending most
    /// severe first, then oldest.
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
    pub id: JobId,
    /// Incident it investigates (the first one, when later incidents share it).
    pub incident_id: IncidentId,
    /// Namespace of the AlertSource: the investigation's Run and the receivers it may reach.
    #[serde(default)]
    pub namespace: String,
    /// Event that opened the incident.
    pub event_id: EventId,
    /// Deferred, pending, running, succeeded or failed (see [`JobStatus`]).
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
    /// On the database: the replica that started the last attempt (another one takes the job
    /// over when that replica stops heartbeating).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<String>,
}

impl Job {
    /// A job that has not started: pending, or deferred; never attempted.
    pub(crate) fn waiting(
        ids: (JobId, IncidentId, EventId),
        namespace: String,
        deferred: bool,
        created_at: String,
        updated_at: String,
    ) -> Job {
        let (id, incident_id, event_id) = ids;
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
            claimed_by: None,
        }
    }

    /// Whether a delivery still waits to be attempted, or for its outcome to be recorded.
    pub fn has_pending_deliveries(&self) -> bool {
        self.deliveries.iter().any(|d| matches!(d.status, DeliveryStatus::Pending | DeliveryStatus::Sending))
    }

    /// Attaches Runs made for this job that it does not list yet.
    pub fn attach_runs(&mut self, runs: impl IntoIterator<Item = String>) {
        for run in runs {
            if !self.runs.contains(&run) {
                self.runs.push(run);
            }
        }
    }

    /// Takes `step`, if the job's status allows it. The only way a job's status changes
    /// after it was created; [`crate::alerts::store::AlertStore::step`] journals each step
    /// as one record.
    pub fn take(&mut self, step: Step) -> Result<(), IllegalStep> {
        use JobStatus::{Deferred, Failed, Pending, Running, Succeeded};
        let from = self.status;
        let illegal = |step: &Step| IllegalStep { job: self.id.to_string(), from, step: step.name() };
        let allowed = match &step {
            Step::Promote => from == Deferred,
            Step::Start => from == Pending,
            Step::Succeed { .. } | Step::Retry { .. } | Step::Fail { .. } | Step::Interrupt | Step::TakeOver { .. } => {
                from == Running
            }
            Step::Notified { .. } | Step::Claim => matches!(from, Succeeded | Failed),
        };
        if !allowed {
            return Err(illegal(&step));
        }
        match step {
            Step::Promote => self.status = Pending,
            Step::Start => {
                self.status = Running;
                self.attempts += 1;
                self.not_before = None;
            }
            Step::Succeed { run, result, notifications } => {
                self.ran(run);
                self.status = Succeeded;
                self.result = Some(*result);
                (self.error, self.error_code) = (None, None);
                self.deliveries = notifications;
            }
            Step::Retry { failure, not_before } => {
                self.failed(failure);
                self.status = Pending;
                self.not_before = Some(not_before.to_string());
            }
            Step::Fail { failure, notifications } => {
                self.failed(failure);
                self.status = Failed;
                self.deliveries = notifications;
            }
            Step::Interrupt => {
                self.status = Pending;
                self.error = Some("Akritas stopped during the attempt".into());
                self.error_code = Some("interrupted".into());
            }
            Step::TakeOver { from, by } => {
                self.status = Pending;
                self.error = Some(format!("replica {from} stopped during the attempt; {by} took the job over"));
                self.error_code = Some("taken_over".into());
            }
            Step::Notified { deliveries } => self.deliveries = deliveries,
            Step::Claim => {}
        }
        Ok(())
    }

    fn ran(&mut self, run: Option<String>) {
        if let Some(run) = run {
            self.attach_runs([run.clone()]);
            self.run_id = Some(run);
        }
    }

    fn failed(&mut self, failure: Failure) {
        self.ran(failure.run);
        self.error = Some(failure.error);
        self.error_code = Some(failure.code);
    }
}

/// A step of a job's life, from the status it leaves: each is one journal record.
#[derive(Clone, Debug)]
pub enum Step {
    /// deferred → pending: its source's rate and the pending cap let it start.
    Promote,
    /// pending → running: an attempt starts.
    Start,
    /// running → succeeded with its Run's validated result, and the receivers to notify.
    Succeed {
        /// The Run of the attempt.
        run: Option<String>,
        /// The validated result (boxed: it is the largest step by far).
        result: Box<InvestigationResult>,
        /// One pending delivery per receiver.
        notifications: Vec<Delivery>,
    },
    /// running → pending: the attempt failed, and another starts at `not_before`.
    Retry {
        /// What failed.
        failure: Failure,
        /// When the next attempt may start.
        not_before: jiff::Timestamp,
    },
    /// running → failed: the job gives up, and the receivers are told once.
    Fail {
        /// What failed.
        failure: Failure,
        /// One pending delivery per receiver.
        notifications: Vec<Delivery>,
    },
    /// running → pending: this host stopped during the attempt.
    Interrupt,
    /// running → pending: the replica running the attempt stopped heartbeating, and `by` took
    /// the job over (on the database).
    TakeOver {
        /// The replica that stopped.
        from: String,
        /// The replica taking over.
        by: String,
    },
    /// succeeded or failed → the same: a replica claims the sending of its notifications (the
    /// one that ran it stopped; on the database).
    Claim,
    /// succeeded or failed → the same: what its notifications did.
    Notified {
        /// Every delivery, with its outcome.
        deliveries: Vec<Delivery>,
    },
}

impl Step {
    fn name(&self) -> &'static str {
        match self {
            Step::Promote => "promote",
            Step::Start => "start",
            Step::Succeed { .. } => "succeed",
            Step::Retry { .. } => "retry",
            Step::Fail { .. } => "fail",
            Step::Interrupt => "interrupt",
            Step::TakeOver { .. } => "take over",
            Step::Claim => "claim",
            Step::Notified { .. } => "notified",
        }
    }
}

/// Why an attempt failed.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The Run of the attempt, if one was made.
    pub run: Option<String>,
    /// Stable code (`upstream_error`, `structure_failed`, …).
    pub code: String,
    /// What happened, secrets redacted.
    pub error: String,
}

/// A step the job's status does not allow: a stale copy of the job, or a bug.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("job {job} cannot {step} from status {from:?}")]
pub struct IllegalStep {
    /// The job.
    pub job: String,
    /// Its status.
    pub from: JobStatus,
    /// The step refused.
    pub step: &'static str,
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
    /// Being sent by the replica that claimed the job (on the database). Found so by another
    /// replica (its sender stopped) or after a failed record, it is not sent again, so a
    /// notification reaches its receiver at most once: it fails as `send_interrupted`.
    Sending,
}

/// One notification of a job's result to one NotificationReceiver.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Delivery {
    /// `namespace/name` of the NotificationReceiver.
    pub receiver: String,
    /// `webhook`, `telegram` or `mattermost`.
    #[serde(rename = "type")]
    pub kind: ReceiverType,
    /// 32 hex characters, sent to webhooks as `X-Akritas-Delivery`.
    pub delivery_id: String,
    /// Pending until sent, then delivered, failed or filtered; `sending` while in flight.
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
    /// Why the last attempt failed: connection refused, DNS, TLS, a timeout or an HTTP status
    /// with the first bytes of the answer, naming the receiver's host and port (never its path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
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
    pub event_id: EventId,
    /// The incident the event opened or joined (the first event's incident for a duplicate).
    pub incident_id: IncidentId,
    /// Investigation job created by this event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<JobId>,
    /// A waiting job of the same correlation key, or the source's storm job, that this
    /// event's new incident shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_job: Option<JobId>,
    /// The job this event created waits (deferred) for its source's rate or a pending cap.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deferred: bool,
    /// The setting whose limit deferred the job this event created (`alert_source_rate`,
    /// `alert_pending_jobs`, `alert_pending_jobs_per_namespace`, or `alert_deferred_jobs` for a
    /// storm job); counted in `akritas_refusals_total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_by: Option<String>,
    /// The job this event created, or the one its incident shares, is its source's storm job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub storm: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Failure {
        Failure {
            run: Some("run_1".into()),
            code: "upstream_error".into(),
            error: "the model server answered 503".into(),
        }
    }

    fn job(deferred: bool) -> Job {
        let ids = ("job_1".into(), "inc_1".into(), "evt_1".into());
        Job::waiting(ids, "ops".into(), deferred, "2026-12-05T00:00:00Z".into(), "2026-12-05T00:00:00Z".into())
    }

    #[test]
    fn a_job_moves_only_along_its_steps() {
        let mut job = job(true);
        let refused = job.take(Step::Start).unwrap_err();
        assert_eq!((refused.from, refused.step), (JobStatus::Deferred, "start"));
        assert_eq!(refused.to_string(), "job job_1 cannot start from status Deferred");
        job.take(Step::Promote).unwrap();
        job.take(Step::Start).unwrap();
        assert_eq!((job.status, job.attempts), (JobStatus::Running, 1));
        assert!(job.take(Step::Start).is_err(), "one attempt at a time");
        assert!(job.take(Step::Notified { deliveries: Vec::new() }).is_err(), "nothing to notify yet");
        let not_before = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        job.take(Step::Retry { failure: failure(), not_before }).unwrap();
        assert_eq!(job.status, JobStatus::Pending);
        assert_eq!(
            (job.error_code.as_deref(), job.not_before.as_deref()),
            (Some("upstream_error"), Some("2027-01-15T08:00:00Z"))
        );
        job.take(Step::Start).unwrap();
        assert_eq!((job.attempts, job.not_before.as_deref()), (2, None));
        job.take(Step::Interrupt).unwrap();
        assert_eq!((job.status, job.error_code.as_deref()), (JobStatus::Pending, Some("interrupted")));
        job.take(Step::Start).unwrap();
        job.take(Step::Fail { failure: failure(), notifications: Vec::new() }).unwrap();
        assert_eq!(job.status, JobStatus::Failed);
        assert_eq!(job.runs, ["run_1"], "a Run is listed once");
        for step in [Step::Start, Step::Interrupt, Step::Promote] {
            assert!(job.take(step).is_err(), "failed is final");
        }
        job.take(Step::Notified { deliveries: Vec::new() }).unwrap();
        assert_eq!(job.status, JobStatus::Failed);
    }
}
