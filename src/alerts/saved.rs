//! The alert store's state as a snapshot, and how the store is loaded: the snapshot plus the
//! journal records after its checkpoint, or the whole journal when there is no usable
//! snapshot. The same loading serves start-up, `akritas audit verify` and the rebuild after
//! a failed write.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::correlate::Correlator;
use super::state::{Bounds, EventAt, EventRef, JobSlot, RecordError, SourceCounters, State, apply, set_job};
use crate::journal::{self, Checkpoint, Journal, JournalError, JournalOptions, Location, Opened, Record, ScanError};

/// Shape and version of the snapshot file.
pub(crate) const FORMAT: &str = "akritas.alerts.state.v1";

/// What a snapshot holds.
#[derive(Serialize, Deserialize)]
pub(crate) struct Saved {
    correlator: Correlator,
    events: Vec<(String, Location, u32)>,
    jobs: BTreeMap<String, JobSlot>,
    incident_jobs: HashMap<String, Vec<String>>,
    resolved: VecDeque<String>,
    counters: BTreeMap<String, SourceCounters>,
}

impl Saved {
    /// A copy of `state` and the checkpoint it reflects, when it reflects exactly the journal
    /// up to one record: nothing in flight.
    pub(crate) fn capture(state: &State) -> Option<(Checkpoint, Saved)> {
        if state.in_flight > 0 {
            return None;
        }
        let checkpoint = state.last.clone()?;
        let mut events = Vec::with_capacity(state.events.len());
        for (id, event) in &state.events {
            match event.at {
                EventAt::Stored(location) => events.push((id.clone(), location, event.item)),
                EventAt::Queued(_) => return None,
            }
        }
        let saved = Saved {
            correlator: state.correlator.clone(),
            events,
            jobs: state.jobs.clone(),
            incident_jobs: state.incident_jobs.clone(),
            resolved: state.resolved.clone(),
            counters: state.counters.clone(),
        };
        Some((checkpoint, saved))
    }

    /// The state again (queue and pending count derived from the live jobs).
    fn restore(self, bounds: Bounds, checkpoint: Checkpoint) -> State {
        let mut state = State {
            correlator: self.correlator,
            events: self
                .events
                .into_iter()
                .map(|(id, location, item)| (id, EventRef { at: EventAt::Stored(location), item }))
                .collect(),
            incident_jobs: self.incident_jobs,
            resolved: self.resolved,
            counters: self.counters,
            bounds,
            last: Some(checkpoint),
            ..State::default()
        };
        for counters in state.counters.values_mut() {
            // Counted by this process only.
            counters.rejected = 0;
            counters.refused_rate = 0;
            counters.refused_pending = 0;
        }
        for (id, slot) in self.jobs {
            match slot {
                JobSlot::Live(job) => set_job(&mut state, *job, None),
                done => {
                    state.jobs.insert(id, done);
                }
            }
        }
        state
    }
}

/// Why loading failed.
pub(crate) enum LoadError {
    Journal(JournalError),
    Record(u64, RecordError),
    /// Retention removed the start of the journal and no snapshot after it can be used.
    NoSnapshot {
        first_seq: u64,
    },
}

impl From<ScanError<(u64, RecordError)>> for LoadError {
    fn from(error: ScanError<(u64, RecordError)>) -> Self {
        match error {
            ScanError::Journal(e) => LoadError::Journal(e),
            ScanError::Visit((seq, e)) => LoadError::Record(seq, e),
        }
    }
}

/// How many records the last load replayed, and whether it started from a snapshot.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Loaded {
    pub(crate) replayed: u64,
    pub(crate) from_snapshot: bool,
}

/// A record that cannot be applied: its seq and why.
type Failed = (u64, RecordError);

/// Reads the journal from a checkpoint (or its start), visiting each record after it.
type OpenJournal<'a, T> =
    dyn FnMut(Option<&Checkpoint>, &mut dyn FnMut(Record) -> Result<(), Failed>) -> Result<T, ScanError<Failed>> + 'a;

/// Reads the state: the snapshot (if any and it matches the journal) and the records after it.
/// `open` reads the journal (opening it for writing, or only reading it).
fn load<T>(
    path: &Path,
    use_snapshot: bool,
    bounds: Bounds,
    legacy: &dyn Fn(&str) -> String,
    open: &mut OpenJournal<'_, T>,
) -> Result<(T, State, Loaded), LoadError> {
    // Once retention removed the start of the journal, only a snapshot rebuilds the state.
    let anchored = journal::anchor(path).map_err(LoadError::Journal)?.map(|a| a.first_seq);
    let snapshot =
        if use_snapshot || anchored.is_some() { journal::snapshot::read::<Saved>(path, FORMAT) } else { None };
    if let Some((checkpoint, saved)) = snapshot {
        let mut state = saved.restore(bounds, checkpoint.clone());
        let mut replayed = 0;
        let outcome = open(Some(&checkpoint), &mut |record| {
            replayed += 1;
            apply(&mut state, &record, legacy).map_err(|e| (record.seq, e))
        });
        match outcome {
            Ok(opened) => return Ok((opened, state, Loaded { replayed, from_snapshot: true })),
            Err(ScanError::Journal(JournalError::CheckpointMismatch { reason, .. })) if anchored.is_none() => {
                tracing::warn!(path = %path.display(), %reason, "the alert snapshot does not match the journal; replaying the journal from the start");
                journal::snapshot::discard(path);
            }
            Err(other) => return Err(other.into()),
        }
    }
    if let Some(first_seq) = anchored {
        return Err(LoadError::NoSnapshot { first_seq });
    }
    let mut state = State { bounds, ..State::default() };
    let mut replayed = 0;
    let opened = open(None, &mut |record| {
        replayed += 1;
        apply(&mut state, &record, legacy).map_err(|e| (record.seq, e))
    })?;
    Ok((opened, state, Loaded { replayed, from_snapshot: false }))
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
