//! The alert store's state as a snapshot, when snapshots are written (and retention run
//! after them), and how the store is loaded: the snapshot plus the
//! journal records after its checkpoint, or the whole journal when there is no usable
//! snapshot. The same loading serves start-up, `akritas audit verify` and the rebuild after
//! a failed write.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::alerts::intake::correlate::Correlator;
use crate::alerts::intake::id::Id;
use crate::alerts::intake::signature::RecentSignatures;
use crate::alerts::store::error::{AlertStoreError, LoadError, load_error};
use crate::alerts::store::state::{
    Bounds, EventAt, EventRef, JobSlot, RecordError, SourceCounters, State, apply, set_job,
};
use crate::alerts::store::threads::Threads;
use crate::ids::{IncidentId, JobId};
use crate::journal::pace::Pace;
use crate::journal::snapshot::Reader;
use crate::journal::{self, Checkpoint, Journal, JournalOptions, Location, Opened, Record};

/// Shape and version of the snapshot file.
pub(crate) const FORMAT: &str = "akritas.alerts.state.v1";

/// What a snapshot holds.
#[derive(Serialize, Deserialize)]
pub(crate) struct Saved {
    correlator: Correlator,
    events: Vec<(Id, Location, u32)>,
    jobs: BTreeMap<Id, JobSlot>,
    resolved: VecDeque<IncidentId>,
    counters: BTreeMap<String, SourceCounters>,
    /// Absent in snapshots written before incident threads.
    #[serde(default)]
    threads: Threads,
    /// Absent in snapshots written before storm jobs.
    #[serde(default)]
    storms: HashMap<JobId, u64>,
    #[serde(default)]
    storm_of: HashMap<String, JobId>,
    /// Absent in snapshots written before signed timestamps.
    #[serde(default)]
    signatures: RecentSignatures,
}

/// The state as a snapshot writes it: borrowed, so nothing is copied.
#[derive(Serialize)]
pub(crate) struct SavedRef<'a> {
    correlator: &'a Correlator,
    #[serde(serialize_with = "stored_events")]
    events: &'a HashMap<Id, EventRef>,
    jobs: &'a BTreeMap<Id, JobSlot>,
    resolved: &'a VecDeque<IncidentId>,
    counters: &'a BTreeMap<String, SourceCounters>,
    threads: &'a Threads,
    storms: &'a HashMap<JobId, u64>,
    storm_of: &'a HashMap<String, JobId>,
    signatures: &'a RecentSignatures,
}

/// Events as `(id, location, item)`, the shape [`Saved`] reads.
fn stored_events<S: serde::Serializer>(events: &&HashMap<Id, EventRef>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(events.len()))?;
    for (id, event) in events.iter() {
        if let EventAt::Stored(location) = event.at {
            seq.serialize_element(&(id, location, event.item))?;
        }
    }
    seq.end()
}

impl<'a> SavedRef<'a> {
    /// Whether every event is stored: with nothing in flight, the state then reflects exactly
    /// the journal up to one record.
    pub(crate) fn settled(events: &HashMap<Id, EventRef>) -> bool {
        !events.values().any(|e| matches!(e.at, EventAt::Queued(_)))
    }

    /// The state as a snapshot writes it.
    pub(crate) fn of(state: &'a State) -> SavedRef<'a> {
        SavedRef {
            correlator: &state.correlator,
            events: &state.events,
            jobs: &state.jobs,
            resolved: &state.resolved,
            counters: &state.counters,
            threads: &state.threads,
            storms: &state.storms,
            storm_of: &state.storm_of,
            signatures: &state.signatures,
        }
    }
}

impl Saved {
    /// The state again (queue and pending count derived from the live jobs).
    pub(crate) fn restore(self, bounds: Bounds, checkpoint: Checkpoint) -> State {
        let mut state = State {
            correlator: self.correlator,
            events: self
                .events
                .into_iter()
                .map(|(id, location, item)| (id, EventRef { at: EventAt::Stored(location), item }))
                .collect(),
            resolved: self.resolved,
            counters: self.counters,
            threads: self.threads,
            storms: self.storms,
            storm_of: self.storm_of,
            signatures: self.signatures,
            bounds,
            pace: Pace::opened(Some(checkpoint), 0),
            ..State::default()
        };
        for counters in state.counters.values_mut() {
            // Counted by this process only.
            counters.rejected = 0;
        }
        state.correlator.share_names();
        let correlator = &state.correlator;
        state.threads.reindex(|id| {
            correlator
                .incident(id)
                .is_some_and(|i| i.state == crate::alerts::intake::correlate::IncidentStatus::Resolved)
        });
        for (id, slot) in self.jobs {
            match slot.live(&id) {
                Some(job) => set_job(&mut state, job, None),
                None => {
                    state.jobs.insert(id, slot);
                }
            }
        }
        state
    }
}

/// How many records the last load replayed, and whether it started from a snapshot.
pub(crate) type Loaded = journal::snapshot::Restored;

/// Reads the state: the snapshot (if any and it matches the journal) and the records after it.
/// `open` reads the journal (opening it for writing, or only reading it).
fn load<T>(
    path: &Path,
    use_snapshot: bool,
    bounds: Bounds,
    legacy: &dyn Fn(&str) -> String,
    open: &mut Reader<'_, T, RecordError>,
) -> Result<(T, State, Loaded), LoadError> {
    let restore = |saved: Saved, checkpoint| saved.restore(bounds, checkpoint);
    let empty = || State { bounds, ..State::default() };
    let apply = |state: &mut State, record: &Record| apply(state, record, legacy);
    let how = journal::snapshot::Restore { format: FORMAT, use_snapshot, from_kept: false };
    journal::snapshot::restore(path, how, restore, empty, apply, open)
}

/// Opens the journal for writing and loads the state.
pub(crate) fn open(
    path: &Path,
    options: &JournalOptions,
    bounds: Bounds,
    legacy: &dyn Fn(&str) -> String,
) -> Result<((Journal, Opened), State, Loaded), LoadError> {
    load(path, true, bounds, legacy, &mut |from, visit| Journal::open_from(path, options.clone(), from, visit))
}

/// Loads the state without opening the journal for writing: from the snapshot (a rebuild), or
/// from the start, checking every record (verify).
pub(crate) fn read(
    path: &Path,
    use_snapshot: bool,
    bounds: Bounds,
    legacy: &dyn Fn(&str) -> String,
) -> Result<(journal::VerifyReport, State, Loaded), LoadError> {
    load(path, use_snapshot, bounds, legacy, &mut |from, visit| journal::scan_from(path, from, visit))
}

/// Checks an alert journal without opening it for writing: the hash chain and line
/// bounds from the oldest kept record, then the same strict replay `serve` runs at start
/// (sources of records older than namespaces in `default`), in bounded memory: from the
/// first record, or, once retention removed the start, from the snapshot after it. Backs
/// `akritas audit verify` for alert journals.
pub fn verify(path: &Path) -> Result<crate::journal::VerifyReport, AlertStoreError> {
    let report = crate::journal::verify(path)?;
    let legacy = |_: &str| crate::tenancy::DEFAULT_NAMESPACE.to_string();
    read(path, false, Bounds::default(), &legacy).map_err(|e| load_error(path, e))?;
    Ok(report)
}

/// An alert journal's state, loaded to become the snapshot of a verbatim copy of its records
/// kept elsewhere (`akritas storage migrate`): there, records are found by another location.
pub struct Moving {
    pub(super) state: State,
}

impl Moving {
    /// The state of the alert journal at `path` (its snapshot and the records after it), read
    /// without opening it for writing; `resolved_kept` as the service's setting.
    pub fn load(path: &Path, resolved_kept: usize) -> Result<Moving, AlertStoreError> {
        let legacy = |_: &str| crate::tenancy::DEFAULT_NAMESPACE.to_string();
        let bounds = Bounds { resolved_kept };
        let (_, state, _) = read(path, true, bounds, &legacy).map_err(|e| load_error(path, e))?;
        Ok(Moving { state })
    }

    /// Every record location the state refers to.
    pub fn locations(&self) -> std::collections::HashSet<Location> {
        let events = self.state.events.values().filter_map(|event| match event.at {
            EventAt::Stored(location) => Some(location),
            EventAt::Queued(_) => None,
        });
        let jobs = self.state.jobs.values().filter_map(|slot| match slot {
            JobSlot::Done { location, .. } => Some(*location),
            _ => None,
        });
        events.chain(jobs).collect()
    }

    /// Events, incidents and jobs held.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.state.events.len(), self.state.correlator.incidents().count(), self.state.jobs.len())
    }

    /// The state as a snapshot (its format and data) whose locations are `relocate`d; a location
    /// `relocate` does not know is a record the copy does not hold: an error.
    pub fn snapshot(mut self, relocate: impl Fn(Location) -> Option<Location>) -> Result<(String, String), String> {
        let missing = |location: Location| {
            format!(
                "the alert state refers to a record (segment {}, offset {}) the copy does not hold",
                location.segment, location.offset
            )
        };
        for event in self.state.events.values_mut() {
            if let EventAt::Stored(location) = &mut event.at {
                *location = relocate(*location).ok_or_else(|| missing(*location))?;
            }
        }
        for slot in self.state.jobs.values_mut() {
            if let JobSlot::Done { location, .. } = slot {
                *location = relocate(*location).ok_or_else(|| missing(*location))?;
            }
        }
        let data = serde_json::to_string(&SavedRef::of(&self.state)).map_err(|e| e.to_string())?;
        Ok((FORMAT.to_string(), data))
    }
}
