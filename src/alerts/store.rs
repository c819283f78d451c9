//! The alert journal: one atomic, fsynced record per delivery (its events, their
//! dedup/correlation outcome and any investigation job), replayed strictly at start
//! by re-running the same correlation with the recorded ids.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::correlate::{Correlator, Decision, IdKind, IncidentState};
use super::event::Event;
use crate::investigation::InvestigationResult;
use crate::journal::{Journal, JournalError, JournalOptions, Record};

/// Journal kind of a delivery.
const DELIVERY: &str = "alerts.delivery";
/// Upper bound of the ids and outcome a delivery record adds per event.
const RECORD_OVERHEAD_PER_EVENT: usize = 384;
/// Journal kind of a job state change.
const JOB: &str = "alerts.job";

/// An event as stored, with the ids the host gave it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Job {
    /// `job_…`.
    pub id: String,
    /// Incident it investigates.
    pub incident_id: String,
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
}

impl Job {
    /// Whether a delivery still waits to be attempted.
    pub fn has_pending_deliveries(&self) -> bool {
        self.deliveries.iter().any(|d| d.status == DeliveryStatus::Pending)
    }
}

/// State of one notification delivery.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Not attempted yet (or interrupted).
    Pending,
    /// The receiver accepted it.
    Delivered,
    /// Every attempt failed.
    Failed,
}

/// One notification of a job's result to one NotificationReceiver.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
}

/// What happened to one event of a delivery.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
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
}

/// The outcome of a delivery.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Accepted {
    /// `dlv_…`.
    pub delivery_id: String,
    /// One per event, in order.
    pub events: Vec<ItemOutcome>,
}

/// Alert store failures.
#[derive(Debug, thiserror::Error)]
pub enum AlertStoreError {
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A record cannot be applied.
    #[error(
        "alert journal {path}: record {seq} is inconsistent: {reason}; run `akritas audit verify {path}` and restore from backup"
    )]
    Inconsistent {
        /// Path.
        path: String,
        /// Record sequence number.
        seq: u64,
        /// Why.
        reason: RecordError,
    },
    /// The delivery would not fit in one journal record.
    #[error(
        "the delivery's events take about {size} bytes; one delivery may take at most {limit}; send fewer events per request"
    )]
    TooLarge {
        /// Estimated record size.
        size: usize,
        /// Limit.
        limit: usize,
    },
    /// An earlier write failed; the store refuses new work until restarted.
    #[error("the alert journal failed earlier and refuses new deliveries until Akritas restarts")]
    Poisoned,
}

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
struct State {
    correlator: Correlator,
    events: BTreeMap<String, StoredEvent>,
    jobs: BTreeMap<String, Job>,
    incident_events: BTreeMap<String, Vec<String>>,
    incident_jobs: BTreeMap<String, Vec<String>>,
    /// Per source name: events accepted, duplicates, deliveries rejected (this process).
    counters: BTreeMap<String, SourceCounters>,
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
}

/// The durable alert store.
pub struct AlertStore {
    journal: Journal,
    state: Mutex<State>,
    poisoned: AtomicBool,
    work: tokio::sync::Notify,
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:032x}", rand::random::<u128>())
}

#[derive(Serialize, Deserialize)]
struct DeliveryRecord {
    delivery_id: String,
    source: String,
    /// RFC 3339 time the host received it.
    #[serde(default)]
    received_at: String,
    items: Vec<DeliveryItem>,
}

#[derive(Serialize, Deserialize)]
struct DeliveryItem {
    outcome: ItemOutcome,
    event: Event,
}

impl AlertStore {
    /// Opens (or creates) the journal and replays it strictly. Jobs that were
    /// running when the process stopped return to pending.
    pub fn open(path: &Path) -> Result<AlertStore, AlertStoreError> {
        let (journal, replay) = Journal::open(path, JournalOptions::default())?;
        let mut state = State::default();
        for record in &replay.records {
            apply(&mut state, record).map_err(|reason| AlertStoreError::Inconsistent {
                path: path.display().to_string(),
                seq: record.seq,
                reason,
            })?;
        }
        let store = AlertStore {
            journal,
            state: Mutex::new(state),
            poisoned: AtomicBool::new(false),
            work: tokio::sync::Notify::new(),
        };
        Ok(store)
    }

    /// Jobs that a worker should (re)start: pending, or running when the process
    /// stopped, or succeeded with notifications not yet attempted.
    pub fn unfinished_jobs(&self) -> Vec<Job> {
        let state = self.lock();
        state
            .jobs
            .values()
            .filter(|j| matches!(j.status, JobStatus::Pending | JobStatus::Running) || j.has_pending_deliveries())
            .cloned()
            .collect()
    }

    /// Resolves when new work may exist (a job was created); a wake-up that comes
    /// while nobody waits is kept for the next waiter.
    pub async fn work_available(&self) {
        self.work.notified().await;
    }

    /// Wakes the worker.
    pub fn wake(&self) {
        self.work.notify_one();
    }

    /// Deduplicates and correlates a delivery's events, records them in one fsynced
    /// journal record and returns the per-event outcome.
    pub async fn ingest(&self, source: &str, events: Vec<Event>) -> Result<Accepted, AlertStoreError> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(AlertStoreError::Poisoned);
        }
        // Checked before any decision, so an oversized delivery changes nothing.
        let size = serde_json::to_string(&events).map(|t| t.len()).unwrap_or(usize::MAX);
        let size = size.saturating_add(events.len().saturating_mul(RECORD_OVERHEAD_PER_EVENT)).saturating_add(1024);
        if size > crate::journal::DEFAULT_MAX_RECORD_BYTES {
            return Err(AlertStoreError::TooLarge { size, limit: crate::journal::DEFAULT_MAX_RECORD_BYTES });
        }
        let delivery_id = new_id("dlv");
        let pending = {
            let mut state = self.lock();
            // Decided on the live correlator (a copy per delivery would cost O(incidents));
            // if the record cannot be queued the store is poisoned and rebuilt from the
            // journal at the next start, so an unrecorded decision never persists.
            let mut items = Vec::with_capacity(events.len());
            for event in events {
                let outcome = state.correlator.ingest(&event, |kind| {
                    new_id(match kind {
                        IdKind::Event => "evt",
                        IdKind::Incident => "inc",
                        IdKind::Job => "job",
                    })
                });
                let status =
                    if matches!(outcome.decision, Decision::Duplicate { .. }) { "duplicate" } else { "accepted" };
                let item = ItemOutcome {
                    status: status.into(),
                    event_id: outcome.event_id,
                    incident_id: outcome.incident_id,
                    job_id: outcome.job_id,
                };
                items.push(DeliveryItem { outcome: item, event });
            }
            let record = DeliveryRecord {
                delivery_id: delivery_id.clone(),
                source: source.to_string(),
                received_at: jiff::Timestamp::now().to_string(),
                items,
            };
            let data = serde_json::to_value(&record).unwrap_or_default();
            // Queued under the lock, so the journal order is the order of decisions.
            let pending = match self.journal.enqueue(DELIVERY, &data) {
                Ok(pending) => pending,
                Err(error) => {
                    self.poisoned.store(true, Ordering::SeqCst);
                    return Err(error.into());
                }
            };
            apply_delivery(&mut state, &record);
            (pending, record.items.into_iter().map(|i| i.outcome).collect::<Vec<_>>())
        };
        let (pending, events) = pending;
        if let Err(error) = pending.committed().await {
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(error.into());
        }
        if events.iter().any(|e| e.job_id.is_some()) {
            self.wake();
        }
        Ok(Accepted { delivery_id, events })
    }

    /// Records a job state change.
    pub async fn update_job(&self, job: &Job) -> Result<(), AlertStoreError> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(AlertStoreError::Poisoned);
        }
        let mut job = job.clone();
        job.updated_at = jiff::Timestamp::now().to_string();
        let job = &job;
        let data = serde_json::to_value(job).unwrap_or_default();
        let pending = {
            let mut state = self.lock();
            let pending = self.journal.enqueue(JOB, &data)?;
            state.jobs.insert(job.id.clone(), job.clone());
            pending
        };
        pending.committed().await.map(|_| ()).map_err(|error| {
            self.poisoned.store(true, Ordering::SeqCst);
            error.into()
        })
    }

    /// Incidents, newest update first.
    pub fn incidents(&self, limit: usize) -> Vec<IncidentState> {
        let state = self.lock();
        let mut incidents: Vec<IncidentState> = state.correlator.incidents().cloned().collect();
        incidents.sort_by_key(|i| std::cmp::Reverse(i.updated_at));
        incidents.truncate(limit);
        incidents
    }

    /// One incident with its events and jobs.
    pub fn incident(&self, id: &str) -> Option<(IncidentState, Vec<StoredEvent>, Vec<Job>)> {
        let state = self.lock();
        let incident = state.correlator.incident(id)?.clone();
        let events =
            state.incident_events.get(id).into_iter().flatten().filter_map(|e| state.events.get(e)).cloned().collect();
        let jobs =
            state.incident_jobs.get(id).into_iter().flatten().filter_map(|j| state.jobs.get(j)).cloned().collect();
        Some((incident, events, jobs))
    }

    /// Counts a rejected delivery of a source.
    pub fn record_rejected(&self, source: &str) {
        self.lock().counters.entry(source.to_string()).or_default().rejected += 1;
    }

    /// Delivery counters of a source.
    pub fn counters(&self, source: &str) -> SourceCounters {
        self.lock().counters.get(source).copied().unwrap_or_default()
    }

    /// Delivery counters of every source.
    pub fn all_counters(&self) -> BTreeMap<String, SourceCounters> {
        self.lock().counters.clone()
    }

    /// Jobs by status, and incidents by state (`firing`, `resolved`).
    pub fn tallies(&self) -> (BTreeMap<&'static str, u64>, BTreeMap<&'static str, u64>) {
        let state = self.lock();
        let mut jobs = BTreeMap::from([("pending", 0), ("running", 0), ("succeeded", 0), ("failed", 0)]);
        for job in state.jobs.values() {
            let name = match job.status {
                JobStatus::Pending => "pending",
                JobStatus::Running => "running",
                JobStatus::Succeeded => "succeeded",
                JobStatus::Failed => "failed",
            };
            *jobs.entry(name).or_default() += 1;
        }
        let mut incidents = BTreeMap::from([("firing", 0), ("resolved", 0)]);
        for incident in state.correlator.incidents() {
            let name = match incident.state {
                super::correlate::IncidentStatus::Firing => "firing",
                super::correlate::IncidentStatus::Resolved => "resolved",
            };
            *incidents.entry(name).or_default() += 1;
        }
        (jobs, incidents)
    }

    /// One stored event.
    pub fn event(&self, id: &str) -> Option<StoredEvent> {
        self.lock().events.get(id).cloned()
    }

    /// One job.
    pub fn job(&self, id: &str) -> Option<Job> {
        self.lock().jobs.get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn apply_delivery(state: &mut State, record: &DeliveryRecord) {
    let now = record.received_at.as_str();
    for item in &record.items {
        let outcome = &item.outcome;
        let counters = state.counters.entry(record.source.clone()).or_default();
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
        if let Some(job_id) = &outcome.job_id {
            state.jobs.insert(
                job_id.clone(),
                Job {
                    id: job_id.clone(),
                    incident_id: outcome.incident_id.clone(),
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
                },
            );
            state.incident_jobs.entry(outcome.incident_id.clone()).or_default().push(job_id.clone());
        }
    }
}

/// Replays one record: the correlation runs again with the recorded ids and must
/// reach the recorded outcome.
fn apply(state: &mut State, record: &Record) -> Result<(), RecordError> {
    match record.kind.as_str() {
        DELIVERY => {
            let mut delivery: DeliveryRecord = serde_json::from_value(record.data.clone())?;
            for item in &delivery.items {
                let recorded = &item.outcome;
                let outcome = state.correlator.ingest(&item.event, |kind| match kind {
                    IdKind::Event => recorded.event_id.clone(),
                    IdKind::Incident => recorded.incident_id.clone(),
                    IdKind::Job => recorded.job_id.clone().unwrap_or_default(),
                });
                let duplicate = matches!(outcome.decision, Decision::Duplicate { .. });
                if outcome.event_id != recorded.event_id
                    || outcome.incident_id != recorded.incident_id
                    || outcome.job_id != recorded.job_id
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
            let job: Job = serde_json::from_value(record.data.clone())?;
            if !state.jobs.contains_key(&job.id) {
                return Err(RecordError::UnknownJob(job.id));
            }
            state.jobs.insert(job.id.clone(), job);
        }
        other => return Err(RecordError::UnknownKind(other.to_string())),
    }
    Ok(())
}

/// The JSON view of an incident with its events, jobs, their Runs and their
/// notification deliveries (API).
pub fn incident_json(incident: &IncidentState, events: &[StoredEvent], jobs: &[Job]) -> serde_json::Value {
    let runs: Vec<&String> = jobs.iter().flat_map(|j| &j.runs).collect();
    let deliveries: Vec<serde_json::Value> =
        jobs.iter().flat_map(|j| j.deliveries.iter().map(move |d| json!({"job_id": j.id, "delivery": d}))).collect();
    json!({"incident": incident, "events": events, "jobs": jobs, "runs": runs, "deliveries": deliveries})
}
