//! The alert store's derived state (correlation, where each event is, jobs, the job
//! queue, counters) and how each journal record applies to it: the same code at start-up
//! replay, for every live decision and when the store rebuilds itself after a failed write.
//!
//! Memory holds indexes, not history: an event is a [`Location`] in the journal (plus the
//! record itself while it is being written), a finished job is the location of its last
//! record, and resolved incidents past [`Bounds::resolved_kept`] are forgotten oldest
//! first (their records stay in the journal until retention).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::alerts::intake::admission::Admission;
use crate::alerts::intake::correlate::{Correlator, Decision, IdKind, IncidentStatus};
use crate::alerts::intake::event::Severity;
use crate::alerts::intake::id::Id;
use crate::alerts::intake::signature::RecentSignatures;
use crate::alerts::store::job::{Job, JobStatus};
use crate::alerts::store::queue::JobQueue;
use crate::alerts::store::record::BatchRecord;
use crate::alerts::store::threads::{NOTICE, NOTIFIED, NoticeRecord, NotifiedRecord, Threads};
use crate::ids::{IncidentId, JobId};
use crate::journal::pace::Pace;
use crate::journal::{Location, Record};

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

/// Where a stored event is.
#[derive(Clone)]
pub(crate) enum EventAt {
    /// In a delivery record queued for the journal and not yet written.
    Queued(Arc<BatchRecord>),
    /// In the journal.
    Stored(Location),
}

/// One stored event: where, and its index among the record's items.
#[derive(Clone)]
pub(crate) struct EventRef {
    pub(crate) at: EventAt,
    pub(crate) item: u32,
}

/// A job: compact while it has not started, whole while it can still change (or its record
/// is being written), else where its last record is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum JobSlot {
    Live(Box<Job>),
    Done {
        location: Location,
        status: JobStatus,
        namespace: String,
        incident_id: IncidentId,
    },
    /// Pending or deferred and never attempted: everything else of the job is its default.
    Waiting(Waiting),
}

/// A job that has not started, in the fields that are not their default.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Waiting {
    incident: Id,
    event: Id,
    namespace: Arc<str>,
    created: Timestamp,
    updated: Timestamp,
    deferred: bool,
    /// Where a deferred job is in [`State::deferred`]: its incident's severity when deferred.
    #[serde(default)]
    rank: Severity,
}

impl Waiting {
    /// The job compact, when it has not started and its times read back as written.
    fn of(job: &Job, rank: Severity, names: &mut Correlator) -> Option<Waiting> {
        let untouched = matches!(job.status, JobStatus::Pending | JobStatus::Deferred)
            && job.attempts == 0
            && job.run_id.is_none()
            && job.error.is_none()
            && job.error_code.is_none()
            && job.not_before.is_none()
            && job.runs.is_empty()
            && job.result.is_none()
            && job.deliveries.is_empty();
        let time = |text: &str| text.parse::<Timestamp>().ok().filter(|t| t.to_string() == text);
        untouched.then_some(())?;
        Some(Waiting {
            incident: Id::new(&job.incident_id),
            event: Id::new(&job.event_id),
            namespace: names.share_name(&job.namespace),
            created: time(&job.created_at)?,
            updated: time(&job.updated_at)?,
            deferred: job.status == JobStatus::Deferred,
            rank,
        })
    }

    fn job(&self, id: &Id) -> Job {
        let ids = (id.text().into(), self.incident.text().into(), self.event.text().into());
        Job::waiting(ids, self.namespace.to_string(), self.deferred, self.created.to_string(), self.updated.to_string())
    }
}

impl JobSlot {
    pub(crate) fn status(&self) -> JobStatus {
        match self {
            JobSlot::Live(job) => job.status,
            JobSlot::Done { status, .. } => *status,
            JobSlot::Waiting(waiting) if waiting.deferred => JobStatus::Deferred,
            JobSlot::Waiting(_) => JobStatus::Pending,
        }
    }

    /// The whole job, unless only its last record's location is kept.
    pub(crate) fn live(&self, id: &Id) -> Option<Job> {
        match self {
            JobSlot::Live(job) => Some((**job).clone()),
            JobSlot::Waiting(waiting) => Some(waiting.job(id)),
            JobSlot::Done { .. } => None,
        }
    }

    /// The namespace of the job's AlertSource.
    pub(crate) fn namespace(&self) -> String {
        match self {
            JobSlot::Live(job) => job.namespace.clone(),
            JobSlot::Done { namespace, .. } => namespace.clone(),
            JobSlot::Waiting(waiting) => waiting.namespace.to_string(),
        }
    }
}

/// Whether a job will not change again: failed or succeeded, with every notification tried.
fn settled(job: &Job) -> bool {
    matches!(job.status, JobStatus::Failed | JobStatus::Succeeded) && !job.has_pending_deliveries()
}

/// What memory may hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// Resolved incidents kept for listings.
    pub(crate) resolved_kept: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { resolved_kept: 10_000 }
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) correlator: Correlator,
    pub(crate) events: HashMap<Id, EventRef>,
    pub(crate) jobs: BTreeMap<Id, JobSlot>,
    /// Resolved incidents, in the order they resolved.
    pub(crate) resolved: VecDeque<IncidentId>,
    /// Per source `namespace/name`: events accepted, duplicates, deliveries rejected (this process).
    pub(crate) counters: BTreeMap<String, SourceCounters>,
    /// Jobs a worker may take (pending, or succeeded with notifications to send), taken in
    /// turn across namespaces; and the pending jobs per namespace.
    pub(crate) queue: JobQueue,
    pub(crate) bounds: Bounds,
    pub(crate) admission: Admission,
    /// Why the store decides nothing now: a journal write failed (set until a recovery).
    pub(crate) unavailable: Option<String>,
    /// Bumped by every rebuild; a failure of an append queued before it is already undone.
    pub(crate) generation: u64,
    /// Records queued and not yet settled, and when a snapshot may be written.
    pub(crate) pace: Pace,
    /// Receivers told about each incident: threads and resolve notices.
    pub(crate) threads: Threads,
    /// Deferred jobs in the order they are promoted (most severe first, then oldest), with
    /// their source `namespace/name`.
    pub(crate) deferred: BTreeMap<DeferredKey, Arc<str>>,
    /// Deferred jobs per source.
    pub(crate) deferred_by_source: HashMap<Arc<str>, usize>,
    /// Incidents each storm job that can still change stands for.
    pub(crate) storms: HashMap<JobId, u64>,
    /// The storm job of each source that has not started yet.
    pub(crate) storm_of: HashMap<String, JobId>,
    /// Signatures of timestamped deliveries accepted within the window: a replay is refused.
    pub(crate) signatures: RecentSignatures,
}

/// Where a deferred job waits: most severe first, then oldest, then by id.
pub(crate) type DeferredKey = (Reverse<Severity>, Timestamp, Id);

/// Delivery counters of one alert source.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SourceCounters {
    /// Events accepted (journaled).
    pub accepted: u64,
    /// Events recognised as duplicates (journaled).
    pub duplicate: u64,
    /// Deliveries rejected since this process started (authentication or payload).
    pub rejected: u64,
    /// New investigations deferred by the source's rate or the pending-job cap (journaled).
    pub deferred: u64,
    /// New incidents coalesced into a storm job of the source, past `alert_deferred_jobs` (journaled).
    pub coalesced: u64,
    /// Alerts the provider left out of its deliveries (journaled).
    pub truncated_by_provider: u64,
    /// Events accepted but not stored, over the per-delivery bound (journaled).
    pub truncated_by_host: u64,
}

/// Applies a batch (or one part of it) whose correlation has run: `at` is where the
/// record is once written (`None` while it is queued; [`State::settle_batch`] follows).
pub(crate) fn apply_batch(state: &mut State, record: &Arc<BatchRecord>, at: Option<Location>) {
    let now = record.received_at.as_str();
    let source = format!("{}/{}", record.namespace, record.source);
    if let Some(signed) = &record.signed {
        let received = now.parse::<Timestamp>().map_or(signed.at, |t| t.as_second());
        state.signatures.remember(signed, received);
    }
    let counters = state.counters.entry(source.clone()).or_default();
    counters.truncated_by_provider += record.truncated.by_provider;
    counters.truncated_by_host += record.truncated.by_host;
    for (index, item) in record.items.iter().enumerate() {
        let outcome = &item.outcome;
        let counters = state.counters.entry(source.clone()).or_default();
        if outcome.status == "duplicate" {
            counters.duplicate += 1;
            continue;
        }
        counters.accepted += 1;
        let place = match at {
            Some(location) => EventAt::Stored(location),
            None => EventAt::Queued(record.clone()),
        };
        let item_index = u32::try_from(index).unwrap_or(u32::MAX);
        state.events.insert(Id::new(&outcome.event_id), EventRef { at: place, item: item_index });
        if outcome.deferred {
            counters.deferred += 1;
        }
        if outcome.storm {
            counters.coalesced += 1;
        }
        // An incident's job is its `last_job`: the one its first event created or shares.
        if let Some(job_id) = &outcome.shared_job
            && outcome.storm
        {
            *state.storms.entry(job_id.clone()).or_default() += 1;
        }
        if let Some(job_id) = &outcome.job_id {
            if outcome.storm {
                state.storms.insert(job_id.clone(), 1);
                state.storm_of.insert(source.clone(), job_id.clone());
            }
            let ids = (job_id.clone(), outcome.incident_id.clone(), outcome.event_id.clone());
            let job = Job::waiting(ids, record.namespace.clone(), outcome.deferred, now.to_string(), now.to_string());
            set_job(state, job, None);
        }
        // The event that resolves an incident is its last: each resolved incident is queued once.
        if let Some(incident) = state.correlator.incident(&outcome.incident_id)
            && incident.state == IncidentStatus::Resolved
            && incident.event_ids.last().is_some_and(|last| *last == *outcome.event_id)
        {
            state.resolved.push_back(outcome.incident_id.clone());
            state.threads.resolved(&outcome.incident_id);
        }
    }
    state.forget_resolved();
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

/// Stores a job's new state and keeps the queue, the pending count and the correlator's
/// waiting jobs in step (live and at replay alike). With its record's location, a settled
/// job is kept as that location only.
pub(crate) fn set_job(state: &mut State, job: Job, at: Option<Location>) {
    let key = Id::new(&job.id);
    let old = state.jobs.get(&key).and_then(|slot| slot.live(&key));
    if let Some(old) = &old {
        if let Some(due) = due_at(old) {
            state.queue.remove(&old.namespace, due, &key);
        }
        if old.status == JobStatus::Pending {
            state.queue.count_pending(&old.namespace, false);
        }
    }
    if job.status == JobStatus::Running && old.is_none_or(|old| old.status != JobStatus::Running) {
        state.queue.started(&job.namespace);
    }
    let was_deferred = state.jobs.get(&key).and_then(|slot| state.deferred_key(&key, slot));
    if let Some(place) = was_deferred {
        state.undefer(&place);
    }
    if let Some(due) = due_at(&job) {
        state.queue.insert(&job.namespace, due, key.clone());
    }
    if job.status == JobStatus::Pending {
        state.queue.count_pending(&job.namespace, true);
    }
    let rank = if job.status == JobStatus::Deferred { state.defer(&job) } else { Severity::Unknown };
    if !matches!(job.status, JobStatus::Pending | JobStatus::Deferred) || job.attempts > 0 {
        state.correlator.job_started(&job.id);
        // A storm job that started counts no more incidents: the next ones start another.
        state.storm_of.retain(|_, storm| *storm != job.id);
    }
    let slot = match at {
        Some(location) if settled(&job) => JobSlot::Done {
            location,
            status: job.status,
            namespace: job.namespace.clone(),
            incident_id: job.incident_id.clone(),
        },
        _ => match Waiting::of(&job, rank, &mut state.correlator) {
            Some(waiting) => JobSlot::Waiting(waiting),
            None => JobSlot::Live(Box::new(job.clone())),
        },
    };
    if matches!(slot, JobSlot::Done { .. }) {
        state.storms.remove(&job.id);
    }
    state.jobs.insert(key, slot);
}

impl State {
    /// Places a deferred job in the promotion order, by its incident's severity now; returns
    /// that severity.
    fn defer(&mut self, job: &Job) -> Severity {
        let incident = self.correlator.incident(&job.incident_id);
        let severity = incident.map_or(Severity::Unknown, |i| i.severity);
        let name = incident.map(|i| format!("{}/{}", job.namespace, i.source)).unwrap_or_default();
        let created = job.created_at.parse::<Timestamp>().unwrap_or(Timestamp::UNIX_EPOCH);
        // One copy of each source's name, shared by its deferred jobs.
        let source = match self.deferred_by_source.get_key_value(name.as_str()) {
            Some((source, _)) => source.clone(),
            None => Arc::from(name),
        };
        *self.deferred_by_source.entry(source.clone()).or_default() += 1;
        self.deferred.insert((Reverse(severity), created, Id::new(&job.id)), source);
        severity
    }

    /// Where a deferred job is in the promotion order: from its compact slot, else (a deferred
    /// job is compact whenever its times read back as written) by a search.
    fn deferred_key(&self, id: &Id, slot: &JobSlot) -> Option<DeferredKey> {
        match slot {
            JobSlot::Waiting(waiting) if waiting.deferred => Some((Reverse(waiting.rank), waiting.created, id.clone())),
            JobSlot::Live(job) if job.status == JobStatus::Deferred => {
                self.deferred.keys().find(|(_, _, deferred)| deferred == id).cloned()
            }
            _ => None,
        }
    }

    /// Takes a job out of the promotion order.
    fn undefer(&mut self, place: &DeferredKey) {
        let Some(source) = self.deferred.remove(place) else { return };
        if let Some(count) = self.deferred_by_source.get_mut(&source) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.deferred_by_source.remove(&source);
            }
        }
    }

    /// Deferred jobs of a source `namespace/name`.
    pub(crate) fn deferred_of(&self, source: &str) -> usize {
        self.deferred_by_source.get(source).copied().unwrap_or_default()
    }

    /// A job as the API shows it: a storm job with the incidents it stands for.
    pub(crate) fn shown(&self, mut job: Job) -> Job {
        if let Some(count) = self.storms.get(&job.id) {
            job.storm_incidents = Some(*count);
        }
        job
    }

    /// A queued batch record was written at `location`: its events are read from there from now on.
    pub(crate) fn settle_batch(&mut self, record: &Arc<BatchRecord>, location: Location) {
        for item in &record.items {
            if let Some(event) = self.events.get_mut(&Id::new(&item.outcome.event_id))
                && matches!(&event.at, EventAt::Queued(queued) if Arc::ptr_eq(queued, record))
            {
                event.at = EventAt::Stored(location);
            }
        }
    }

    /// A job record was written at `location`: a settled job that has not changed since is kept as its location.
    pub(crate) fn settle_job(&mut self, job: &Job, location: Location) {
        let key = Id::new(&job.id);
        if let Some(JobSlot::Live(live)) = self.jobs.get(&key)
            && live.updated_at == job.updated_at
            && settled(live)
        {
            self.storms.remove(&job.id);
            let slot = JobSlot::Done {
                location,
                status: live.status,
                namespace: live.namespace.clone(),
                incident_id: live.incident_id.clone(),
            };
            self.jobs.insert(key, slot);
        }
    }

    /// Forgets the oldest resolved incidents past the bound, with their events and settled jobs.
    pub(crate) fn forget_resolved(&mut self) {
        while self.resolved.len() > self.bounds.resolved_kept {
            let Some(id) = self.resolved.pop_front() else { break };
            self.forget_incident(&id);
        }
    }

    /// Whether the incident is known and resolved.
    pub(crate) fn incident_resolved(&self, id: &str) -> bool {
        self.correlator.incident(id).is_some_and(|i| i.state == IncidentStatus::Resolved)
    }

    fn forget_incident(&mut self, id: &str) {
        self.threads.forget(id);
        let Some(incident) = self.correlator.forget(id) else { return };
        for event in &incident.event_ids {
            self.events.remove(event);
        }
        if let Some(key) = incident.last_job
            && matches!(self.jobs.get(&key), Some(JobSlot::Done { incident_id, .. }) if incident_id == id)
        {
            self.jobs.remove(&key);
        }
    }

    /// After retention deleted the records before seq `first_kept`: forgets resolved incidents
    /// whose last event is gone, and the events and settled jobs that were in those records.
    /// Returns how many incidents were forgotten.
    pub(crate) fn forget_before(&mut self, first_kept: u64) -> usize {
        let gone = |at: &EventAt| matches!(at, EventAt::Stored(l) if l.segment < first_kept);
        let stale: Vec<IncidentId> = self
            .resolved
            .iter()
            .filter(|id| {
                self.correlator
                    .incident(id)
                    .and_then(|i| i.event_ids.last())
                    .and_then(|e| self.events.get(e))
                    .is_none_or(|e| gone(&e.at))
            })
            .cloned()
            .collect();
        self.resolved.retain(|id| !stale.contains(id));
        for id in &stale {
            self.forget_incident(id);
        }
        self.events.retain(|_, e| !gone(&e.at));
        self.jobs.retain(|_, slot| !matches!(slot, JobSlot::Done { location, .. } if location.segment < first_kept));
        stale.len()
    }

    /// The oldest segment still needed: events of open incidents and of jobs that can still
    /// run, and job records being written. `None` when nothing is needed.
    pub(crate) fn oldest_needed(&self) -> Option<u64> {
        let segment = |id: &Id| match self.events.get(id).map(|e| &e.at) {
            Some(EventAt::Stored(location)) => Some(location.segment),
            _ => None,
        };
        let open = self.correlator.incidents().filter(|(_, i)| i.is_open()).flat_map(|(_, i)| i.event_ids.iter());
        let open = open.filter_map(segment).min();
        let live = self.jobs.values().filter_map(|slot| match slot {
            JobSlot::Live(job) => segment(&Id::new(&job.event_id)),
            JobSlot::Waiting(waiting) => segment(&waiting.event),
            JobSlot::Done { .. } => None,
        });
        live.chain(open).min()
    }
}

/// Applies one journal record at replay: the correlation runs again with the recorded ids
/// and must reach the recorded outcome.
pub(crate) fn apply(
    state: &mut State,
    record: &Record,
    legacy_namespace: &dyn Fn(&str) -> String,
) -> Result<(), RecordError> {
    match record.kind.as_str() {
        // A journal's own records (a store copied into the database keeps them in its chain).
        kind if crate::journal::is_internal(kind) => {}
        DELIVERY => {
            let mut delivery: BatchRecord = serde_json::from_value(record.data.clone())?;
            if delivery.namespace.is_empty() {
                delivery.namespace = legacy_namespace(&delivery.source);
            }
            if delivery.received_at.is_empty() {
                delivery.received_at = record.time.clone();
            }
            if delivery.is_first_part() {
                let now = delivery.received_at.parse::<Timestamp>().map_or(0, |t| t.as_second());
                state.correlator.advance(now, delivery.dedup);
            }
            let coalesce = delivery.version >= COALESCING_VERSION;
            for item in &mut delivery.items {
                item.event.source.namespace.clone_from(&delivery.namespace);
                let recorded = &item.outcome;
                let storm = recorded.shared_job.as_deref().filter(|_| recorded.storm);
                let outcome = state.correlator.ingest(&item.event, coalesce, storm, |kind| match kind {
                    IdKind::Event => recorded.event_id.to_string(),
                    IdKind::Incident => recorded.incident_id.to_string(),
                    IdKind::Job => recorded.job_id.as_deref().unwrap_or_default().to_string(),
                });
                let duplicate = matches!(outcome.decision, Decision::Duplicate { .. });
                if outcome.event_id != recorded.event_id
                    || outcome.incident_id != recorded.incident_id
                    || outcome.job_id != recorded.job_id
                    || outcome.shared_job != recorded.shared_job
                    || duplicate != (recorded.status == "duplicate")
                {
                    return Err(RecordError::NotAsRecorded(recorded.event_id.to_string()));
                }
            }
            apply_batch(state, &Arc::new(delivery), Some(record.location));
        }
        JOB => {
            let mut job: Job = serde_json::from_value(record.data.clone())?;
            let namespace = match state.jobs.get(&Id::new(&job.id)) {
                Some(slot) => slot.namespace(),
                None => return Err(RecordError::UnknownJob(job.id.into())),
            };
            if job.namespace.is_empty() {
                job.namespace = namespace;
            }
            set_job(state, job, Some(record.location));
        }
        NOTIFIED => {
            let notified: NotifiedRecord = serde_json::from_value(record.data.clone())?;
            let resolved = state.incident_resolved(&notified.incident_id);
            state.threads.notified(notified, resolved);
        }
        NOTICE => state.threads.noticed(serde_json::from_value::<NoticeRecord>(record.data.clone())?),
        other => return Err(RecordError::UnknownKind(other.to_string())),
    }
    state.pace.replayed(record);
    Ok(())
}
#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::*;

    /// What memory holds per open incident and per job that has not started stays compact
    /// (`benches/alerts_memory.rs` counts the bytes of a whole storm).
    #[test]
    fn incidents_and_waiting_jobs_stay_compact() {
        assert!(
            size_of::<crate::alerts::intake::correlate::Incident>() <= 184,
            "{}",
            size_of::<crate::alerts::intake::correlate::Incident>()
        );
        assert!(size_of::<JobSlot>() <= 104, "{}", size_of::<JobSlot>());
        assert!(size_of::<EventRef>() <= 40, "{}", size_of::<EventRef>());
    }

    #[test]
    fn a_job_that_has_not_started_reads_back_whole_from_its_compact_slot() {
        let mut state = State::default();
        let ids = (
            "job_0123456789abcdef0123456789abcdef".into(),
            "inc_0123456789abcdef0123456789abcdef".into(),
            "evt_0123456789abcdef0123456789abcdef".into(),
        );
        let created = "2026-12-03T10:00:00.123456789Z".to_string();
        let job = Job::waiting(ids, "ops".into(), true, created, "2026-12-03T10:00:01Z".into());
        set_job(&mut state, job.clone(), None);
        let key = Id::new(&job.id);
        assert!(matches!(state.jobs.get(&key), Some(JobSlot::Waiting(_))));
        assert_eq!(state.jobs[&key].live(&key), Some(job.clone()));
        assert_eq!(
            (state.deferred.len(), state.deferred_of("")),
            (1, 1),
            "in the promotion order (no incident: no source)"
        );
        let promoted = Job { status: JobStatus::Pending, ..job.clone() };
        set_job(&mut state, promoted.clone(), None);
        assert_eq!((state.deferred.len(), state.queue.pending_in("ops")), (0, 1));
        let started = Job { status: JobStatus::Running, attempts: 1, ..promoted };
        set_job(&mut state, started.clone(), None);
        assert!(matches!(state.jobs.get(&key), Some(JobSlot::Live(_))), "a started job is kept whole");
        let odd = Job { id: "job_x".into(), created_at: "2026-12-03T10:00:00+00:00".into(), ..job };
        set_job(&mut state, odd.clone(), None);
        assert_eq!(
            state.jobs[&Id::new("job_x")].live(&Id::new("job_x")),
            Some(odd),
            "times that do not read back stay whole"
        );
    }
}
