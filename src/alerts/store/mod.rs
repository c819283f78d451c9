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
//! Admission ([`crate::alerts::intake::admission`]) runs under the same lock as the decision and never
//! refuses a delivery: it decides whether each new investigation job starts pending, is
//! deferred, or is coalesced into its source's storm job, and the record keeps that decision.
//!
//! A big delivery is kept whole in as many records as it needs ([`crate::alerts::store::record`]).
//!
//! Memory holds indexes ([`crate::alerts::store::state`]); events and settled jobs are read back from the
//! journal by location. Every `snapshot_records` records, at a moment when nothing is in
//! flight, the state is written as a snapshot ([`crate::alerts::store::saved`]) and retention deletes the
//! journal segments older than `alert_retention` that neither the snapshot, an open incident
//! nor a job that can still run needs. A start loads the snapshot and replays only the
//! records after it.
//!
//! When a journal write fails (disk full, read-only volume), decisions taken in memory for
//! records that were not stored must not survive: the store stops deciding (every delivery
//! and job update gets [`AlertStoreError::Unavailable`]) until a recovery, tried by the next
//! delivery, job update or `/health` at most once a second, gets the journal writing again
//! and rebuilds the state from what the journal holds. No restart is needed.

mod database;
pub(in crate::alerts) mod deferred;
pub(in crate::alerts) mod error;
mod ingest;
pub mod job;
pub(in crate::alerts) mod queue;
pub(in crate::alerts) mod reads;
pub mod record;
pub(in crate::alerts) mod saved;
pub(in crate::alerts) mod snapshots;
pub(in crate::alerts) mod state;
pub(in crate::alerts) mod threads;
pub(in crate::alerts) mod told;

use crate::ids::JobId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::Serialize;

use crate::alerts::intake::admission::{Admission, Limits};
pub use crate::alerts::intake::correlate::DedupLimits;
use crate::alerts::intake::correlate::IncidentState;
use crate::alerts::intake::event::Event;
use crate::alerts::intake::signature::Signed;
pub use crate::alerts::store::database::STORE;
pub use crate::alerts::store::error::AlertStoreError;
use crate::alerts::store::error::load_error;
pub use crate::alerts::store::job::{
    Delivery, DeliveryStatus, Failure, IllegalStep, ItemOutcome, Job, JobStatus, Step, StoredEvent,
};
use crate::alerts::store::record::{Truncation, keep_storable};
pub use crate::alerts::store::saved::{Moving, verify};
use crate::alerts::store::state::{Bounds, JOB, State, set_job};
pub use crate::alerts::store::state::{RecordError, SourceCounters};
pub use crate::alerts::store::threads::{DueNotice, Told};
use crate::journal::pace::{Barrier, Pace};
use crate::journal::{Journal, JournalError, JournalOptions};
/// Least time between two recovery attempts after a failed write.
const RECOVERY_INTERVAL: Duration = Duration::from_secs(1);

/// The outcome of a batch (one webhook request's alerts).
#[derive(Clone, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Accepted {
    /// `dlv_…`: the batch's id (named `delivery_id` on the API and in the journal, as ever).
    pub delivery_id: String,
    /// One per event stored, in order.
    pub events: Vec<ItemOutcome>,
    /// Alerts the provider left out (`truncatedAlerts`) and events this host did not store.
    #[serde(skip_serializing_if = "Truncation::is_none")]
    #[schemars(default)]
    pub truncated: Truncation,
}

/// How the store keeps its journal and bounds its memory.
#[derive(Clone, Debug)]
pub struct Storage {
    /// Segments of the journal.
    pub journal: JournalOptions,
    /// Records between two snapshots.
    pub snapshot_records: u64,
    /// Segments older than this are deleted (unless still needed); `None` keeps everything.
    pub retention: Option<Duration>,
    /// The dedup window.
    pub dedup: DedupLimits,
    /// Resolved incidents kept in memory.
    pub resolved_kept: usize,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            journal: JournalOptions::default(),
            snapshot_records: 20_000,
            retention: None,
            dedup: DedupLimits::default(),
            resolved_kept: Bounds::default().resolved_kept,
        }
    }
}

/// Where the store's records are kept.
pub(super) enum Backing {
    /// The embedded journal.
    File(Journal),
    /// The database replicas share.
    Database(database::DbBacking),
}

/// What an opening loaded, and the limits the store decides with.
struct Opened {
    state: State,
    loaded: saved::Loaded,
    limits: Limits,
    /// Namespaces given to source names of records older than namespaces.
    legacy: BTreeMap<String, String>,
}

/// The durable alert store.
pub struct AlertStore {
    pub(super) backing: Backing,
    /// The journal path (on the database, `database:alerts`, a name for messages).
    pub(super) path: PathBuf,
    pub(super) storage: Storage,
    pub(super) state: Arc<Mutex<State>>,
    /// What the opening replayed.
    pub(super) loaded: saved::Loaded,
    /// Namespaces given to source names of records older than namespaces, as decided at open.
    legacy: BTreeMap<String, String>,
    /// Held by the one promotion of deferred jobs in progress.
    pub(super) promoting: tokio::sync::Mutex<()>,
    /// Held by the one recovery in progress; the time of the last attempt.
    recovery: tokio::sync::Mutex<Option<Instant>>,
    /// The worker's last failure to record a job's state, cleared by its next success.
    worker_problem: Mutex<Option<String>>,
    work: tokio::sync::Notify,
    /// Where writers wait while a due snapshot waits for the records in flight.
    pub(super) barrier: Barrier,
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:032x}", rand::random::<u128>())
}

impl AlertStore {
    /// [`AlertStore::open_with`] with the default limits; sources of journals older than
    /// namespaces are placed in `default`.
    pub fn open(path: &Path) -> Result<AlertStore, AlertStoreError> {
        AlertStore::open_with(path, Limits::default(), &|_| crate::tenancy::DEFAULT_NAMESPACE.to_string())
    }

    /// [`AlertStore::open_stored`] with the default storage.
    pub fn open_with(
        path: &Path,
        limits: Limits,
        legacy_namespace: &dyn Fn(&str) -> String,
    ) -> Result<AlertStore, AlertStoreError> {
        AlertStore::open_stored(path, limits, Storage::default(), legacy_namespace)
    }

    /// Opens (or creates) the journal, loads the last snapshot and replays strictly the
    /// records after it (all of them without a usable snapshot); `legacy_namespace` gives the
    /// namespace of a source name in records written before namespaces.
    pub fn open_stored(
        path: &Path,
        limits: Limits,
        storage: Storage,
        legacy_namespace: &dyn Fn(&str) -> String,
    ) -> Result<AlertStore, AlertStoreError> {
        let legacy = std::cell::RefCell::new(BTreeMap::new());
        let resolve =
            |name: &str| legacy.borrow_mut().entry(name.to_string()).or_insert_with(|| legacy_namespace(name)).clone();
        let bounds = Bounds { resolved_kept: storage.resolved_kept };
        let ((journal, _), state, loaded) =
            saved::open(path, &storage.journal, bounds, &resolve).map_err(|e| load_error(path, e))?;
        let opened = Opened { state, loaded, limits, legacy: legacy.into_inner() };
        Ok(AlertStore::assemble(Backing::File(journal), path.to_owned(), storage, opened))
    }

    /// The store over `backing`, from the state its opening loaded.
    fn assemble(backing: Backing, path: PathBuf, storage: Storage, opened: Opened) -> AlertStore {
        let Opened { mut state, loaded, limits, legacy } = opened;
        tracing::info!(
            component = "akritas_alerts",
            event = "journal_loaded",
            store = %path.display(),
            replayed = loaded.replayed,
            from_snapshot = loaded.from_snapshot(),
            incidents = state.correlator.incidents().count(),
            "alert state loaded"
        );
        state.admission = Admission::new(limits);
        // The tail just replayed is not in the snapshot yet.
        state.pace = Pace::opened(state.pace.last().cloned(), loaded.replayed);
        AlertStore {
            backing,
            path,
            storage,
            state: Arc::new(Mutex::new(state)),
            loaded,
            legacy,
            promoting: tokio::sync::Mutex::new(()),
            recovery: tokio::sync::Mutex::new(None),
            worker_problem: Mutex::new(None),
            work: tokio::sync::Notify::new(),
            barrier: Barrier::default(),
        }
    }

    /// The journal path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records the opening replayed, and whether it started from a snapshot.
    pub fn replayed_at_open(&self) -> (u64, bool) {
        (self.loaded.replayed, self.loaded.from_snapshot())
    }

    /// Namespace of a source name in records written before namespaces.
    pub(crate) fn legacy_namespace(&self, name: &str) -> String {
        self.legacy.get(name).cloned().unwrap_or_else(|| crate::tenancy::DEFAULT_NAMESPACE.to_string())
    }

    /// The error for a request while the store is unavailable.
    fn unavailable(reason: &str) -> AlertStoreError {
        AlertStoreError::Unavailable(format!(
            "the alert store records nothing until its journal can be written again: {reason}"
        ))
    }

    /// After an append of `generation` failed: stops every decision until a recovery
    /// (unless a rebuild since has already dropped what that append decided).
    fn fail(&self, generation: u64, error: JournalError) -> AlertStoreError {
        let mut state = self.lock();
        if state.generation == generation && state.unavailable.is_none() {
            tracing::error!(component = "akritas_alerts", event = "journal_write_failed", %error, "the alert journal failed a write; deliveries get 507 until a write succeeds again");
            state.unavailable = Some(error.to_string());
        }
        if error.is_unwritable() { Self::unavailable(&error.to_string()) } else { error.into() }
    }

    /// Makes the store decide again after a failed write, if it can: the journal cuts off
    /// what failed and writes again, then the state is rebuilt from the journal, so no
    /// decision whose record was not stored survives. At most one attempt a second; a
    /// caller that finds another recovery running does not wait for it.
    pub async fn recover(&self) -> Result<(), AlertStoreError> {
        let Ok(mut last) = self.recovery.try_lock() else {
            return match self.lock().unavailable.clone() {
                Some(reason) => Err(Self::unavailable(&reason)),
                None => Ok(()),
            };
        };
        let Some(reason) = self.lock().unavailable.clone() else { return Ok(()) };
        if last.is_some_and(|at| at.elapsed() < RECOVERY_INTERVAL) {
            return Err(Self::unavailable(&reason));
        }
        *last = Some(Instant::now());
        let journal = match &self.backing {
            Backing::File(journal) => journal,
            Backing::Database(db) => return self.rebuild_from_database(db).await,
        };
        if let Err(error) = journal.recover().await {
            self.lock().unavailable = Some(error.to_string());
            return Err(Self::unavailable(&error.to_string()));
        }
        // Nothing was queued since the store became unavailable and every earlier append
        // has had its answer, so the journal holds exactly the committed records: the last
        // snapshot and the records after it rebuild the state.
        let path = self.path.clone();
        let bounds = Bounds { resolved_kept: self.storage.resolved_kept };
        let legacy = self.legacy.clone();
        let read = tokio::task::spawn_blocking(move || {
            let resolve =
                |name: &str| legacy.get(name).cloned().unwrap_or_else(|| crate::tenancy::DEFAULT_NAMESPACE.to_string());
            saved::read(&path, true, bounds, &resolve)
        })
        .await
        .map_err(|_| Self::unavailable("the rebuild was interrupted"))?;
        let (_, fresh, loaded) = read.map_err(|e| load_error(&self.path, e))?;
        self.install_rebuilt(fresh, loaded);
        Ok(())
    }

    /// Puts a state rebuilt from what is stored (`loaded`) in place of the live one (keeping
    /// what only this process counts), and lets the store decide again.
    pub(super) fn install_rebuilt(&self, mut fresh: State, loaded: saved::Loaded) {
        tracing::info!(
            component = "akritas_alerts",
            event = "journal_recovered",
            store = %self.path.display(),
            replayed = loaded.replayed,
            from_snapshot = loaded.from_snapshot(),
            "the alert store writes again; state rebuilt from what is stored"
        );
        let mut state = self.lock();
        fresh.admission = std::mem::take(&mut state.admission);
        for (source, old) in &state.counters {
            fresh.counters.entry(source.clone()).or_default().rejected = old.rejected;
        }
        fresh.generation = state.generation + 1;
        fresh.pace = state.pace.rebuilt(fresh.pace);
        *state = fresh;
        drop(state);
        // What the worker could not record is undone; it says so again if it still cannot.
        self.report_worker_problem(None);
        self.wake();
    }

    /// Fails fast while the store is unavailable, trying a recovery first.
    async fn ensure_available(&self) -> Result<(), AlertStoreError> {
        if self.lock().unavailable.is_none() { Ok(()) } else { self.recover().await }
    }

    /// Why the alert pipeline does not work fully now, for `/health`: a failed journal
    /// write not recovered yet, or the worker's last failure to record a job's state.
    pub fn degraded(&self) -> Option<String> {
        if let Some(error) = self.lock().unavailable.clone() {
            return Some(format!(
                "the alert journal failed a write ({error}); deliveries get 507 and investigations wait until a write \
                 succeeds again (retried at most once a second by deliveries, the worker and /health)"
            ));
        }
        self.worker_problem.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The worker reports whether it could record its last job's state (`None`: it could).
    pub fn report_worker_problem(&self, problem: Option<String>) {
        *self.worker_problem.lock().unwrap_or_else(|p| p.into_inner()) = problem;
    }

    /// Jobs due at `now`, at most `max`, skipping `busy` ones (in flight in this process), in
    /// the order a worker takes them (round-robin across namespaces, [`queue`]); and when the
    /// next one not due yet will be.
    pub fn due_jobs(
        &self,
        now: Timestamp,
        busy: &std::collections::BTreeSet<JobId>,
        max: usize,
    ) -> (Vec<Job>, Option<Timestamp>) {
        let state = self.lock();
        let (ids, next) = state.queue.due(now, |id| busy.contains(id.text().as_str()), max);
        let jobs =
            ids.iter().filter_map(|id| state.jobs.get(id).and_then(|slot| slot.live(id))).map(|job| state.shown(job));
        (jobs.collect(), next)
    }

    /// Jobs waiting for a worker.
    pub fn pending_jobs(&self) -> usize {
        self.lock().queue.pending()
    }

    /// Jobs that a worker should (re)start: pending, or running when the process
    /// stopped, or succeeded with notifications not yet attempted.
    pub fn unfinished_jobs(&self) -> Vec<Job> {
        let state = self.lock();
        state
            .jobs
            .iter()
            .filter_map(|(id, slot)| slot.live(id))
            .filter(|j| matches!(j.status, JobStatus::Pending | JobStatus::Running) || j.has_pending_deliveries())
            .map(|job| state.shown(job))
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
    /// `namespace/source`, records them (one fsynced record, or several for a big
    /// delivery) and returns the per-event outcome. Never refused for load: a new job over
    /// the source's rate or the pending-job cap is deferred, and past the source's bound of
    /// deferred jobs its incident shares the source's storm job ([`crate::alerts::intake::admission`]).
    pub async fn ingest(&self, namespace: &str, source: &str, events: Vec<Event>) -> Result<Accepted, AlertStoreError> {
        self.ingest_batch(namespace, source, events, 0).await
    }

    /// [`AlertStore::ingest`] of a batch from which the provider left out
    /// `truncated_by_provider` alerts. Events past the per-batch bound
    /// ([`crate::alerts::store::record::MAX_BATCH_EVENTS`], [`crate::alerts::store::record::MAX_BATCH_BYTES`])
    /// are not stored and counted as truncated by the host; a batch is never refused
    /// for its size.
    pub async fn ingest_batch(
        &self,
        namespace: &str,
        source: &str,
        events: Vec<Event>,
        truncated_by_provider: u64,
    ) -> Result<Accepted, AlertStoreError> {
        self.ingest_signed(namespace, source, events, truncated_by_provider, None).await
    }

    /// [`AlertStore::ingest_batch`] of a delivery whose signature covered its timestamp
    /// (`signed`): refused with [`AlertStoreError::Replayed`] when that signature was accepted
    /// already, remembered with the delivery otherwise.
    pub async fn ingest_signed(
        &self,
        namespace: &str,
        source: &str,
        mut events: Vec<Event>,
        truncated_by_provider: u64,
        signed: Option<Signed>,
    ) -> Result<Accepted, AlertStoreError> {
        self.ensure_available().await?;
        self.pass_snapshot_barrier().await;
        for event in &mut events {
            event.source.namespace = namespace.to_string();
        }
        let source_key = format!("{namespace}/{source}");
        // Bounded before any decision, so what is not stored was never decided.
        let truncated = Truncation { by_provider: truncated_by_provider, by_host: keep_storable(&mut events) };
        if truncated.by_host > 0 {
            tracing::warn!(source = %source_key, stored = events.len(), dropped = truncated.by_host, "alert delivery over the per-delivery bound; the rest is counted as truncated");
        }
        let delivery_id = new_id("dlv");
        let received_at = jiff::Timestamp::now();
        let made = ingest::Made {
            namespace: namespace.to_string(),
            source: source.to_string(),
            delivery_id: delivery_id.clone(),
            received_at,
            truncated,
            signed,
        };
        let events = match &self.backing {
            Backing::File(journal) => self.ingest_file(journal, made, events).await?,
            Backing::Database(db) => self.ingest_database(db, made, events).await?,
        };
        // A new job, or a resolution that makes resolve notices due.
        if events.iter().any(|e| e.status != "duplicate") {
            self.wake();
        }
        Ok(Accepted { delivery_id, events, truncated })
    }

    /// Takes `step` on `job` (the caller's copy, updated in place) and journals the job's new
    /// state as one record. A step its status does not allow changes and stores nothing.
    pub async fn step(&self, job: &mut Job, step: Step) -> Result<(), AlertStoreError> {
        self.step_as(job, step, None).await
    }

    /// [`AlertStore::step`] by the replica `by`, which the job then names as its claimer.
    pub async fn step_as(&self, job: &mut Job, step: Step, by: Option<&str>) -> Result<(), AlertStoreError> {
        let before = (job.status, job.claimed_by.clone());
        job.take(step)?;
        if let Some(by) = by {
            job.claimed_by = Some(by.to_string());
        }
        self.update_job(job, Some(before)).await
    }

    /// Records a job's state. On the database, a step from `before` (status and claimer) is
    /// taken only while the job is still so there: a replica that took another step first wins.
    async fn update_job(&self, job: &Job, before: Option<(JobStatus, Option<String>)>) -> Result<(), AlertStoreError> {
        let mut job = job.clone();
        job.updated_at = jiff::Timestamp::now().to_string();
        let settled = job.clone();
        // Written with the storm count of the moment it is queued: the count a storm job had
        // when it started is the one its records keep.
        let written = job.clone();
        let shared = matches!(self.backing, Backing::Database(_));
        let data = move |state: &State| {
            let key = crate::alerts::intake::id::Id::new(&written.id);
            let stored =
                state.jobs.get(&key).map(|slot| (slot.status(), slot.live(&key).and_then(|job| job.claimed_by)));
            if shared
                && let (Some(before), Some(stored)) = (before, stored)
                && stored != before
            {
                return Err(AlertStoreError::Taken { job: written.id.to_string(), status: stored.0 });
            }
            Ok(serde_json::to_value(state.shown(written)).unwrap_or_default())
        };
        self.append(JOB, data, move |state| set_job(state, job, None), |state, at| state.settle_job(&settled, at)).await
    }

    /// Appends one record of `kind`, applied by `apply` under the same lock it is queued in
    /// (so the journal order is the order of decisions) and by `settle` once written at its
    /// location; returns once it is written. A failed write makes the store unavailable
    /// until a recovery.
    pub(super) async fn append(
        &self,
        kind: &str,
        data: impl FnOnce(&State) -> Result<serde_json::Value, AlertStoreError>,
        apply: impl FnOnce(&mut State),
        settle: impl FnOnce(&mut State, crate::journal::Location),
    ) -> Result<(), AlertStoreError> {
        self.ensure_available().await?;
        let journal = match &self.backing {
            Backing::File(journal) => journal,
            Backing::Database(db) => return self.append_database(db, kind, data, apply, settle).await,
        };
        self.pass_snapshot_barrier().await;
        let (pending, generation) = {
            let mut state = self.lock();
            if let Some(reason) = &state.unavailable {
                return Err(Self::unavailable(reason));
            }
            let pending = journal.enqueue(kind, &data(&state)?)?;
            state.pace.queued();
            apply(&mut state);
            (pending, state.generation)
        };
        let record = pending.committed().await.map_err(|error| self.fail(generation, error))?;
        self.settled(generation, &record, |state| settle(state, record.location));
        Ok(())
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An incident with its events, jobs, their Runs and their notification deliveries (API).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct IncidentDetail {
    /// The incident.
    pub incident: IncidentState,
    /// Its events, in order.
    pub events: Vec<StoredEvent>,
    /// Its investigation jobs.
    pub jobs: Vec<Job>,
    /// Runs of every job attempt.
    pub runs: Vec<String>,
    /// Notification deliveries of the jobs.
    pub deliveries: Vec<JobDelivery>,
}

/// A notification delivery of a job.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct JobDelivery {
    /// The job.
    pub job_id: JobId,
    /// The delivery.
    pub delivery: Delivery,
}

/// The JSON of [`IncidentDetail`] (what `GET /api/v1/incidents/{id}` answers).
pub fn incident_json(incident: &IncidentState, events: &[StoredEvent], jobs: &[Job]) -> serde_json::Value {
    let detail = IncidentDetail::new(incident.clone(), events.to_vec(), jobs.to_vec());
    serde_json::to_value(detail).unwrap_or(serde_json::Value::Null)
}

impl IncidentDetail {
    /// The view of an incident.
    pub fn new(incident: IncidentState, events: Vec<StoredEvent>, jobs: Vec<Job>) -> Self {
        let runs = jobs.iter().flat_map(|j| j.runs.iter().cloned()).collect();
        let deliveries = jobs
            .iter()
            .flat_map(|j| j.deliveries.iter().map(|d| JobDelivery { job_id: j.id.clone(), delivery: d.clone() }))
            .collect();
        Self { incident, events, jobs, runs, deliveries }
    }
}
