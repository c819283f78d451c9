//! The alert journal: one atomic, fsynced record per delivery (its events, their
//! dedup/correlation outcome and any investigation job), replayed strictly at start
//! by re-running the same correlation with the recorded ids.
//!
//! Everything is keyed by the AlertSource's `namespace/name`. Journals written before
//! namespaces (delivery records without `namespace`) replay with the namespace the
//! caller's `legacy_namespace` gives the source name: the namespace of the one
//! AlertSource of that name in the Catalog now, else `default`. Records of that
//! version also replay without job sharing, as they were decided.
//!
//! Admission control ([`super::admission`]) runs under the same lock as the decision,
//! before anything is recorded: a refused delivery leaves no trace but its counter.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::admission::{Admission, Limits, Refusal, Throttled};
use super::correlate::{Correlator, Decision, IdKind, IncidentState};
use super::event::Event;
pub use super::job::{Delivery, DeliveryStatus, ItemOutcome, Job, JobStatus, StoredEvent};
use crate::journal::{Journal, JournalError, JournalOptions, Record};

/// Journal kind of a delivery.
const DELIVERY: &str = "alerts.delivery";
/// Upper bound of the ids and outcome a delivery record adds per event.
const RECORD_OVERHEAD_PER_EVENT: usize = 384;
/// Journal kind of a job state change.
const JOB: &str = "alerts.job";
/// Delivery record version: 2 adds the source namespace and job sharing.
const RECORD_VERSION: u32 = 2;

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
    /// Admission control refused the delivery; nothing of it was stored.
    #[error(transparent)]
    Throttled(#[from] Throttled),
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
    /// Per source `namespace/name`: events accepted, duplicates, deliveries rejected (this process).
    counters: BTreeMap<String, SourceCounters>,
    /// Jobs a worker may take (pending, or succeeded with notifications to send) by the time
    /// they are due, so that claiming looks at the front only.
    queue: BTreeSet<(Timestamp, String)>,
    /// Jobs in status pending.
    pending: usize,
    admission: Admission,
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
}

/// The durable alert store.
pub struct AlertStore {
    journal: Journal,
    state: Mutex<State>,
    /// Set when a journal write failed: why (the on-disk state is unknown until a restart).
    poisoned: OnceLock<String>,
    /// The worker's last failure to record a job's state, cleared by its next success.
    worker_problem: Mutex<Option<String>>,
    work: tokio::sync::Notify,
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:032x}", rand::random::<u128>())
}

#[derive(Serialize, Deserialize)]
struct DeliveryRecord {
    /// Absent (1) in journals written before namespaces.
    #[serde(default = "first_version")]
    version: u32,
    delivery_id: String,
    /// Name of the AlertSource.
    source: String,
    /// Its namespace (empty in version 1).
    #[serde(default)]
    namespace: String,
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

fn first_version() -> u32 {
    1
}

impl AlertStore {
    /// [`AlertStore::open_with`] with the default limits; sources of journals older than
    /// namespaces are placed in `default`.
    pub fn open(path: &Path) -> Result<AlertStore, AlertStoreError> {
        AlertStore::open_with(path, Limits::default(), &|_| crate::tenancy::DEFAULT_NAMESPACE.to_string())
    }

    /// Opens (or creates) the journal and replays it strictly; `legacy_namespace` gives
    /// the namespace of a source name in records written before namespaces.
    pub fn open_with(
        path: &Path,
        limits: Limits,
        legacy_namespace: &dyn Fn(&str) -> String,
    ) -> Result<AlertStore, AlertStoreError> {
        let (journal, replay) = Journal::open(path, JournalOptions::default())?;
        let mut state = State { admission: Admission::new(limits), ..State::default() };
        for record in &replay.records {
            apply(&mut state, record, legacy_namespace).map_err(|reason| AlertStoreError::Inconsistent {
                path: path.display().to_string(),
                seq: record.seq,
                reason,
            })?;
        }
        let store = AlertStore {
            journal,
            state: Mutex::new(state),
            poisoned: OnceLock::new(),
            worker_problem: Mutex::new(None),
            work: tokio::sync::Notify::new(),
        };
        Ok(store)
    }

    fn check_poisoned(&self) -> Result<(), AlertStoreError> {
        if self.poisoned.get().is_some() { Err(AlertStoreError::Poisoned) } else { Ok(()) }
    }

    fn poison(&self, error: JournalError) -> AlertStoreError {
        let _ = self.poisoned.set(error.to_string());
        tracing::error!(component = "akritas_alerts", event = "journal_poisoned", %error, "the alert journal failed a write; deliveries and investigations stop until Akritas restarts");
        error.into()
    }

    /// Why the alert pipeline does not work fully now, for `/health`: a failed journal
    /// write, or the worker's last failure to record a job's state.
    pub fn degraded(&self) -> Option<String> {
        if let Some(error) = self.poisoned.get() {
            return Some(format!(
                "the alert journal failed a write ({error}); deliveries get 503 and investigations wait until Akritas \
                 restarts"
            ));
        }
        self.worker_problem.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The worker reports whether it could record its last job's state (`None`: it could).
    pub fn report_worker_problem(&self, problem: Option<String>) {
        *self.worker_problem.lock().unwrap_or_else(|p| p.into_inner()) = problem;
    }

    /// Jobs due at `now`, soonest due first, at most `max`, skipping `busy` ones (in flight
    /// in this process); and when the next one not due yet will be. Looks at the front of
    /// the queue only.
    pub fn due_jobs(&self, now: Timestamp, busy: &BTreeSet<String>, max: usize) -> (Vec<Job>, Option<Timestamp>) {
        let state = self.lock();
        let mut jobs = Vec::new();
        for (due, id) in &state.queue {
            if *due > now {
                return (jobs, Some(*due));
            }
            if jobs.len() >= max {
                break;
            }
            if !busy.contains(id)
                && let Some(job) = state.jobs.get(id)
            {
                jobs.push(job.clone());
            }
        }
        (jobs, None)
    }

    /// Jobs waiting for a worker.
    pub fn pending_jobs(&self) -> usize {
        self.lock().pending
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

    /// Deduplicates and correlates a delivery's events of the AlertSource
    /// `namespace/source`, records them in one fsynced journal record and returns the
    /// per-event outcome; or refuses the whole delivery ([`AlertStoreError::Throttled`])
    /// when its new jobs would pass the source's rate or the pending-job cap.
    pub async fn ingest(
        &self,
        namespace: &str,
        source: &str,
        mut events: Vec<Event>,
    ) -> Result<Accepted, AlertStoreError> {
        self.check_poisoned()?;
        for event in &mut events {
            event.source.namespace = namespace.to_string();
        }
        let source_key = format!("{namespace}/{source}");
        // Checked before any decision, so an oversized delivery changes nothing.
        let size = serde_json::to_string(&events).map(|t| t.len()).unwrap_or(usize::MAX);
        let size = size.saturating_add(events.len().saturating_mul(RECORD_OVERHEAD_PER_EVENT)).saturating_add(1024);
        if size > crate::journal::DEFAULT_MAX_RECORD_BYTES {
            return Err(AlertStoreError::TooLarge { size, limit: crate::journal::DEFAULT_MAX_RECORD_BYTES });
        }
        let delivery_id = new_id("dlv");
        let pending = {
            let mut state = self.lock();
            let needed = state.correlator.jobs_needed(&events, true);
            let waiting = state.pending;
            if let Err(refused) = state.admission.admit(&source_key, needed, waiting, Instant::now()) {
                let counters = state.counters.entry(source_key).or_default();
                match refused.reason {
                    Refusal::Rate => counters.refused_rate += 1,
                    Refusal::PendingJobs => counters.refused_pending += 1,
                }
                return Err(refused.into());
            }
            // Decided on the live correlator (a copy per delivery would cost O(incidents));
            // if the record cannot be queued the store is poisoned and rebuilt from the
            // journal at the next start, so an unrecorded decision never persists.
            let mut items = Vec::with_capacity(events.len());
            for event in events {
                let outcome = state.correlator.ingest(&event, true, |kind| {
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
                    shared_job: outcome.shared_job,
                };
                items.push(DeliveryItem { outcome: item, event });
            }
            let record = DeliveryRecord {
                version: RECORD_VERSION,
                delivery_id: delivery_id.clone(),
                source: source.to_string(),
                namespace: namespace.to_string(),
                received_at: jiff::Timestamp::now().to_string(),
                items,
            };
            let data = serde_json::to_value(&record).unwrap_or_default();
            // Queued under the lock, so the journal order is the order of decisions.
            let pending = match self.journal.enqueue(DELIVERY, &data) {
                Ok(pending) => pending,
                Err(error) => return Err(self.poison(error)),
            };
            apply_delivery(&mut state, &record);
            (pending, record.items.into_iter().map(|i| i.outcome).collect::<Vec<_>>())
        };
        let (pending, events) = pending;
        if let Err(error) = pending.committed().await {
            return Err(self.poison(error));
        }
        if events.iter().any(|e| e.job_id.is_some()) {
            self.wake();
        }
        Ok(Accepted { delivery_id, events })
    }

    /// Records a job state change.
    pub async fn update_job(&self, job: &Job) -> Result<(), AlertStoreError> {
        self.check_poisoned()?;
        let mut job = job.clone();
        job.updated_at = jiff::Timestamp::now().to_string();
        let job = &job;
        let data = serde_json::to_value(job).unwrap_or_default();
        let pending = {
            let mut state = self.lock();
            let pending = self.journal.enqueue(JOB, &data)?;
            set_job(&mut state, job.clone());
            pending
        };
        pending.committed().await.map(|_| ()).map_err(|error| self.poison(error))
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

    /// Counts a rejected delivery of a source (`namespace/name`).
    pub fn record_rejected(&self, source: &str) {
        self.lock().counters.entry(source.to_string()).or_default().rejected += 1;
    }

    /// Delivery counters of a source (`namespace/name`).
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
    let source = format!("{}/{}", record.namespace, record.source);
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
fn set_job(state: &mut State, job: Job) {
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

/// Replays one record: the correlation runs again with the recorded ids and must
/// reach the recorded outcome.
fn apply(state: &mut State, record: &Record, legacy_namespace: &dyn Fn(&str) -> String) -> Result<(), RecordError> {
    match record.kind.as_str() {
        DELIVERY => {
            let mut delivery: DeliveryRecord = serde_json::from_value(record.data.clone())?;
            if delivery.namespace.is_empty() {
                delivery.namespace = legacy_namespace(&delivery.source);
            }
            let coalesce = delivery.version >= RECORD_VERSION;
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

/// The JSON view of an incident with its events, jobs, their Runs and their
/// notification deliveries (API).
pub fn incident_json(incident: &IncidentState, events: &[StoredEvent], jobs: &[Job]) -> serde_json::Value {
    let runs: Vec<&String> = jobs.iter().flat_map(|j| &j.runs).collect();
    let deliveries: Vec<serde_json::Value> =
        jobs.iter().flat_map(|j| j.deliveries.iter().map(move |d| json!({"job_id": j.id, "delivery": d}))).collect();
    json!({"incident": incident, "events": events, "jobs": jobs, "runs": runs, "deliveries": deliveries})
}
