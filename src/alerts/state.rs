//! The alert store's derived state (correlation, events, jobs, the job queue, counters)
//! and how each journal record applies to it: the same code at start-up replay, for
//! every live decision and when the store rebuilds itself after a failed write.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde::Serialize;

use super::admission::Admission;
use super::correlate::{Correlator, Decision, IdKind};
use super::job::{Job, JobStatus, StoredEvent};
use super::record::DeliveryRecord;
use crate::journal::Record;

/// Journal kind of a delivery.
pub(crate) const DELIVERY: &str = "alerts.delivery";
/// Journal kind of a job state change.
pub(crate) const JOB: &str = "alerts.job";
/// Delivery record version from which new incidents share a waiting job.
const COALESCING_VERSION: u32 = 2;

/// Why a journal record cannot be applied to the state it follows.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The record's data does not have its kind's shape.
    #[error(transparent)]
    Decode(#[from] serde_json::Error),
    /// Correlating the event again does not reach the recorded outcome.
    #[error("event {0} does not correlate as recorded")]
    NotAsRecorded(String),
    /// An update of a job the journal never created.
    #[error("update of unknown job {0}")]
    UnknownJob(String),
    /// A record kind this version does not know.
    #[error("unknown record kind {0:?}")]
    UnknownKind(String),
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) correlator: Correlator,
    pub(crate) events: BTreeMap<String, StoredEvent>,
    pub(crate) jobs: BTreeMap<String, Job>,
    pub(crate) incident_events: BTreeMap<String, Vec<String>>,
    pub(crate) incident_jobs: BTreeMap<String, Vec<String>>,
    /// Per source `namespace/name`: events accepted, duplicates, deliveries rejected (this process).
    pub(crate) counters: BTreeMap<String, SourceCounters>,
    /// Jobs a worker may take (pending, or succeeded with notifications to send) by the time
    /// they are due, so that claiming looks at the front only.
    pub(crate) queue: BTreeSet<(Timestamp, String)>,
    /// Jobs in status pending.
    pub(crate) pending: usize,
    pub(crate) admission: Admission,
    /// Why the store decides nothing now: a journal write failed (set until a recovery).
    pub(crate) unavailable: Option<String>,
    /// Bumped by every rebuild; a failure of an append queued before it is already undone.
    pub(crate) generation: u64,
}

/// Delivery counters of one alert source.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct SourceCounters {
    /// Events accepted (journaled).
    pub accepted: u64,
    /// Events recognised as duplicates (journaled).
    pub duplicate: u64,
    /// Deliveries rejected since this process started (authentication or payload).
    pub rejected: u64,
    /// Deliveries refused by the source's rate since this process started.
    pub refused_rate: u64,
    /// Deliveries refused by the pending-job cap since this process started.
    pub refused_pending: u64,
    /// Alerts the provider left out of its deliveries (journaled).
    pub truncated_by_provider: u64,
    /// Events accepted but not stored, over the per-delivery bound (journaled).
    pub truncated_by_host: u64,
}

pub(crate) fn apply_delivery(state: &mut State, record: &DeliveryRecord) {
    let now = record.received_at.as_str();
    let source = format!("{}/{}", record.namespace, record.source);
    let counters = state.counters.entry(source.clone()).or_default();
    counters.truncated_by_provider += record.truncated.by_provider;
    counters.truncated_by_host += record.truncated.by_host;
    for item in &record.items {
        let outcome = &item.outcome;
        let counters = state.counters.entry(source.clone()).or_default();
        if outcome.status == "duplicate" {
            counters.duplicate += 1;
            continue;
        }
        counters.accepted += 1;
        state.events.insert(
            outcome.event_id.clone(),
            StoredEvent {
                id: outcome.event_id.clone(),
                incident_id: outcome.incident_id.clone(),
                delivery_id: record.delivery_id.clone(),
                event: item.event.clone(),
            },
        );
        state.incident_events.entry(outcome.incident_id.clone()).or_default().push(outcome.event_id.clone());
        if let Some(job_id) = &outcome.shared_job {
            state.incident_jobs.entry(outcome.incident_id.clone()).or_default().push(job_id.clone());
        }
        if let Some(job_id) = &outcome.job_id {
            let job = Job {
                id: job_id.clone(),
                incident_id: outcome.incident_id.clone(),
                namespace: record.namespace.clone(),
                event_id: outcome.event_id.clone(),
                status: JobStatus::Pending,
                attempts: 0,
                created_at: now.to_string(),
                updated_at: now.to_string(),
                run_id: None,
                error: None,
                error_code: None,
                not_before: None,
                runs: Vec::new(),
                result: None,
                deliveries: Vec::new(),
            };
            set_job(state, job);
            state.incident_jobs.entry(outcome.incident_id.clone()).or_default().push(job_id.clone());
        }
    }
}

/// When a worker may take the job: pending ones at their retry time (else creation),
/// succeeded ones with notifications to send at once; never for the rest.
fn due_at(job: &Job) -> Option<Timestamp> {
    let time = |text: &str| text.parse::<Timestamp>().unwrap_or(Timestamp::UNIX_EPOCH);
    match job.status {
        JobStatus::Pending => Some(time(job.not_before.as_deref().unwrap_or(&job.created_at))),
        _ if job.has_pending_deliveries() => Some(time(&job.created_at)),
        _ => None,
    }
}

/// Stores a job's new state and keeps the queue, the pending count and the
/// correlator's waiting jobs in step (live and at replay alike).
pub(crate) fn set_job(state: &mut State, job: Job) {
    if let Some(old) = state.jobs.get(&job.id) {
        if let Some(due) = due_at(old) {
            state.queue.remove(&(due, old.id.clone()));
        }
        if old.status == JobStatus::Pending {
            state.pending = state.pending.saturating_sub(1);
        }
    }
    if let Some(due) = due_at(&job) {
        state.queue.insert((due, job.id.clone()));
    }
    if job.status == JobStatus::Pending {
        state.pending += 1;
    }
    if job.status != JobStatus::Pending || job.attempts > 0 {
        state.correlator.job_started(&job.id);
    }
    state.jobs.insert(job.id.clone(), job);
}

/// Replays `records` strictly into `state`.
pub(crate) fn replay_state(
    records: &[Record],
    mut state: State,
    legacy_namespace: &dyn Fn(&str) -> String,
) -> Result<State, (u64, RecordError)> {
    for record in records {
        apply(&mut state, record, legacy_namespace).map_err(|reason| (record.seq, reason))?;
    }
    Ok(state)
}

/// Replays one record: the correlation runs again with the recorded ids and must
/// reach the recorded outcome.
fn apply(state: &mut State, record: &Record, legacy_namespace: &dyn Fn(&str) -> String) -> Result<(), RecordError> {
    match record.kind.as_str() {
        DELIVERY => {
            let mut delivery: DeliveryRecord = serde_json::from_value(record.data.clone())?;
            if delivery.namespace.is_empty() {
                delivery.namespace = legacy_namespace(&delivery.source);
            }
            let coalesce = delivery.version >= COALESCING_VERSION;
            for item in &mut delivery.items {
                item.event.source.namespace.clone_from(&delivery.namespace);
                let recorded = &item.outcome;
                let outcome = state.correlator.ingest(&item.event, coalesce, |kind| match kind {
                    IdKind::Event => recorded.event_id.clone(),
                    IdKind::Incident => recorded.incident_id.clone(),
                    IdKind::Job => recorded.job_id.clone().unwrap_or_default(),
                });
                let duplicate = matches!(outcome.decision, Decision::Duplicate { .. });
                if outcome.event_id != recorded.event_id
                    || outcome.incident_id != recorded.incident_id
                    || outcome.job_id != recorded.job_id
                    || outcome.shared_job != recorded.shared_job
                    || duplicate != (recorded.status == "duplicate")
                {
                    return Err(RecordError::NotAsRecorded(recorded.event_id.clone()));
                }
            }
            if delivery.received_at.is_empty() {
                delivery.received_at = record.time.clone();
            }
            apply_delivery(state, &delivery);
        }
        JOB => {
            let mut job: Job = serde_json::from_value(record.data.clone())?;
            let Some(known) = state.jobs.get(&job.id) else {
                return Err(RecordError::UnknownJob(job.id));
            };
            if job.namespace.is_empty() {
                job.namespace.clone_from(&known.namespace);
            }
            set_job(state, job);
        }
        other => return Err(RecordError::UnknownKind(other.to_string())),
    }
    Ok(())
}
