//! The Run index: what the audit keeps in memory per Run. Not the Run's history, only
//! what listings, counts, the lifecycle checks and alert recovery need (id, namespace,
//! status, event count, whether it has a result, its alert job) and where its journal
//! records are. Run detail is rebuilt from those records ([`load_run`]) with the same
//! [`replay::apply`] that checks them, so detail, replay and verify always agree.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::replay::{self, Facts, Op, RecordError, State};
use super::{RunId, RunRecord, RunStatus};
use crate::journal::{JournalError, Location, Record};

/// Reads one record by location (from the open journal or the file).
pub(super) type Load<'a> = &'a dyn Fn(Location) -> Result<Record, JournalError>;
/// Rebuilds the Run whose records are at these locations (to check a result against it).
pub(super) type LoadRun<'a> = &'a dyn Fn(&[Location]) -> Result<RunRecord, String>;

/// A Run id as two words (a `u128` would align the entries to 16 bytes).
type Key = [u64; 2];

fn key(id: &RunId) -> Key {
    let id = id.to_u128();
    [(id >> 64) as u64, id as u64]
}

/// One Run in the index.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct Entry {
    /// Id (`run_` + these 32 hex digits).
    #[serde(rename = "i", serialize_with = "id_out", deserialize_with = "id_in")]
    id: Key,
    /// Namespace, as a position in [`Index::namespaces`].
    #[serde(rename = "n")]
    namespace: u32,
    #[serde(rename = "s")]
    status: RunStatus,
    /// Events recorded.
    #[serde(rename = "e")]
    events: u32,
    /// Whether it has a validated structured result.
    #[serde(rename = "r", default, skip_serializing_if = "std::ops::Not::not")]
    result: bool,
    /// The alert job it investigated (its `job_id` metadata).
    #[serde(rename = "j", default, skip_serializing_if = "Option::is_none")]
    job: Option<Box<str>>,
    /// Where its records are, in order.
    #[serde(rename = "l")]
    locations: Locations,
}

// 64 bytes a Run plus its locations (about 6 bytes a record) and a map slot.
const _: () = assert!(std::mem::size_of::<Entry>() <= 64);

impl Entry {
    fn facts(&self) -> Facts {
        Facts { status: self.status, events: self.events as usize, has_result: self.result }
    }

    fn first_segment(&self) -> u64 {
        self.locations.first().map_or(0, |l| l.segment)
    }
}

/// Every Run the journal still holds, in start order.
#[derive(Clone, Default, Serialize, Deserialize)]
pub(super) struct Index {
    namespaces: Vec<Box<str>>,
    runs: Vec<Entry>,
    #[serde(skip)]
    by_id: HashMap<Key, u32>,
    /// Retention removed the oldest segments: records of Runs that started in them are
    /// skipped (a Run's later records can sit in a kept segment).
    #[serde(skip)]
    trimmed: bool,
}

impl Index {
    /// Rebuilds the lookup tables after reading a snapshot.
    pub(super) fn rebuilt(mut self) -> Index {
        self.by_id = by_id(&self.runs);
        self
    }

    /// Marks that retention removed the oldest segments (records of Runs not indexed are skipped).
    pub(super) fn trimmed(mut self, trimmed: bool) -> Index {
        self.trimmed = trimmed;
        self
    }

    /// Applies one record: the same [`replay::parse`] and [`replay::check`] as Run detail; a
    /// result is checked against the Run as `load` rebuilds it from its records.
    pub(super) fn apply(&mut self, record: &Record, load: LoadRun<'_>) -> Result<(), RecordError> {
        let op = replay::parse(record)?;
        // A read belongs to no Run: nothing to index.
        let Some(run_id) = op.run_id() else { return Ok(()) };
        let at = self.by_id.get(&key(run_id)).map(|&at| at as usize);
        if at.is_none() && self.trimmed && !matches!(op, Op::Started(_)) {
            return Ok(());
        }
        replay::check(&op, at.map(|at| self.runs[at].facts()))?;
        let Some(at) = at else {
            // `check` lets only a start through for a Run not indexed.
            if let Op::Started(run) = op {
                let namespace = self.namespace_id(&run.namespace);
                let mut locations = Locations::default();
                locations.push(record.location);
                let entry = Entry {
                    id: key(&run.id),
                    namespace,
                    status: RunStatus::Running,
                    events: 0,
                    result: false,
                    job: job_of(&run.metadata),
                    locations,
                };
                self.insert(entry, record.location);
            }
            return Ok(());
        };
        if let Op::Result(id, text) = &op {
            let run = load(&self.runs[at].locations.decode())
                .map_err(|reason| RecordError::Unreadable { run: id.clone(), reason })?;
            replay::check_result(&run, text).map_err(|error| RecordError::Result { run: id.clone(), error })?;
        }
        let run = &mut self.runs[at];
        match op {
            Op::Started(_) => {}
            Op::Event(..) => run.events = run.events.saturating_add(1),
            Op::Finished { status, .. } => {
                run.status = status;
                let metadata = record.data.get("metadata").and_then(Value::as_object);
                if let Some(job) = metadata.and_then(|m| m.get("job_id")).and_then(Value::as_str) {
                    run.job = Some(job.into());
                }
            }
            Op::Result(..) => run.result = true,
            Op::Read => {}
        }
        run.locations.push(record.location);
        Ok(())
    }

    /// Inserts a started Run in journal order (starts committed together may be applied in
    /// another order; a replay sees them in journal order, and so must the index).
    fn insert(&mut self, entry: Entry, first: Location) {
        let key = |location: Location| (location.segment, location.offset);
        let mut at = self.runs.len();
        while at > 0 && self.runs[at - 1].locations.first().is_some_and(|l| key(l) > key(first)) {
            at -= 1;
        }
        self.runs.insert(at, entry);
        for (moved, run) in self.runs[at..].iter().enumerate() {
            self.by_id.insert(run.id, (at + moved) as u32);
        }
    }

    fn namespace_id(&mut self, namespace: &str) -> u32 {
        match self.namespaces.iter().position(|n| &**n == namespace) {
            Some(at) => at as u32,
            None => {
                self.namespaces.push(namespace.into());
                (self.namespaces.len() - 1) as u32
            }
        }
    }

    fn entry(&self, id: &RunId) -> Option<&Entry> {
        self.by_id.get(&key(id)).map(|&at| &self.runs[at as usize])
    }

    /// Whether the Run is indexed.
    pub(super) fn contains(&self, id: &RunId) -> bool {
        self.by_id.contains_key(&key(id))
    }

    /// Status, events and result of a Run.
    pub(super) fn facts(&self, id: &RunId) -> Option<Facts> {
        self.entry(id).map(Entry::facts)
    }

    /// The namespace of a Run.
    pub(super) fn namespace(&self, id: &RunId) -> Option<&str> {
        self.entry(id).and_then(|run| self.namespaces.get(run.namespace as usize)).map(|n| &**n)
    }

    /// Where the Run's records are.
    pub(super) fn locations(&self, id: &RunId) -> Option<Vec<Location>> {
        self.entry(id).map(|run| run.locations.decode())
    }

    /// The records of the newest `limit` Runs whose namespace `visible` accepts, newest first.
    pub(super) fn newest(&self, limit: usize, visible: impl Fn(&str) -> bool) -> Vec<Vec<Location>> {
        let seen: Vec<bool> = self.namespaces.iter().map(|n| visible(n)).collect();
        let visible = self.runs.iter().rev().filter(|run| seen.get(run.namespace as usize).copied().unwrap_or(false));
        visible.take(limit).map(|run| run.locations.decode()).collect()
    }

    /// The records of the Runs made for these jobs, oldest first.
    pub(super) fn of_jobs(&self, jobs: &BTreeSet<&str>) -> Vec<Vec<Location>> {
        let of = |run: &&Entry| run.job.as_deref().is_some_and(|job| jobs.contains(job));
        self.runs.iter().filter(of).map(|run| run.locations.decode()).collect()
    }

    /// Runs still running, oldest first.
    pub(super) fn running(&self) -> Vec<RunId> {
        let running = self.runs.iter().filter(|run| run.status == RunStatus::Running);
        running.map(|run| RunId::from_u128(u128::from(run.id[0]) << 64 | u128::from(run.id[1]))).collect()
    }

    /// The oldest segment holding a record of a running Run or of one of `active`: retention keeps it.
    pub(super) fn first_needed_segment(&self, active: &HashSet<RunId>) -> Option<u64> {
        let active: HashSet<Key> = active.iter().map(key).collect();
        let needed = |run: &&Entry| run.status == RunStatus::Running || active.contains(&run.id);
        self.runs.iter().filter(needed).map(Entry::first_segment).min()
    }

    /// Drops the Runs whose first record was in a segment retention deleted (id below
    /// `first_kept`); returns how many.
    pub(super) fn prune(&mut self, first_kept: u64) -> u64 {
        self.trimmed |= first_kept > 1;
        let before = self.runs.len();
        self.runs.retain(|run| run.first_segment() >= first_kept);
        let removed = (before - self.runs.len()) as u64;
        if removed > 0 {
            self.runs.shrink_to_fit();
            self.by_id = by_id(&self.runs);
        }
        removed
    }

    /// Runs by status.
    pub(super) fn status_counts(&self) -> BTreeMap<&'static str, u64> {
        let mut counts = BTreeMap::from([("running", 0), ("succeeded", 0), ("failed", 0)]);
        for run in &self.runs {
            let name = match run.status {
                RunStatus::Running => "running",
                RunStatus::Succeeded => "succeeded",
                RunStatus::Failed => "failed",
            };
            *counts.entry(name).or_default() += 1;
        }
        counts
    }

    /// Number of Runs.
    pub(super) fn len(&self) -> usize {
        self.runs.len()
    }

    /// Heap and inline bytes the index holds (an estimate: allocator overhead aside).
    pub(super) fn approx_bytes(&self) -> usize {
        let entries = self.runs.capacity() * std::mem::size_of::<Entry>();
        let heap: usize =
            self.runs.iter().map(|run| run.locations.bytes.len() + run.job.as_ref().map_or(0, |job| job.len())).sum();
        let map = self.by_id.capacity() * (std::mem::size_of::<(Key, u32)>() + 1);
        entries + heap + map + self.namespaces.iter().map(|n| n.len() + 16).sum::<usize>()
    }
}

fn by_id(runs: &[Entry]) -> HashMap<Key, u32> {
    runs.iter().enumerate().map(|(at, run)| (run.id, at as u32)).collect()
}

fn job_of(metadata: &BTreeMap<String, Value>) -> Option<Box<str>> {
    metadata.get("job_id").and_then(Value::as_str).map(Box::from)
}

/// Rebuilds a Run from its records with [`replay::apply`].
pub(super) fn load_run(locations: &[Location], load: Load<'_>) -> Result<RunRecord, String> {
    let mut state = State::default();
    for &location in locations {
        let record = load(location).map_err(|e| e.to_string())?;
        replay::apply(&mut state, &record).map_err(|e| format!("record {}: {e}", record.seq))?;
    }
    let id = state.order.pop().ok_or_else(|| "no start record".to_string())?;
    state.runs.remove(&id).ok_or_else(|| "no start record".to_string())
}

/// A Run's record locations, delta-encoded as LEB128 varints (about 6 bytes a record):
/// per record the segment minus the previous one's, then the offset (after the previous
/// record's end within the same segment, absolute in a new one), then the length.
#[derive(Clone, Default)]
struct Locations {
    bytes: Box<[u8]>,
}

impl Locations {
    fn decode(&self) -> Vec<Location> {
        let mut out = Vec::new();
        let mut at = 0;
        let mut prev = Location::default();
        while at < self.bytes.len() {
            let segment_delta = varint(&self.bytes, &mut at);
            let offset = varint(&self.bytes, &mut at);
            let len = varint(&self.bytes, &mut at) as u32;
            let location = if segment_delta == 0 {
                Location {
                    segment: prev.segment,
                    offset: (prev.offset + u64::from(prev.len)).wrapping_add(offset),
                    len,
                }
            } else {
                Location { segment: prev.segment.wrapping_add(segment_delta), offset, len }
            };
            out.push(location);
            prev = location;
        }
        out
    }

    fn first(&self) -> Option<Location> {
        let mut at = 0;
        (!self.bytes.is_empty()).then(|| Location {
            segment: varint(&self.bytes, &mut at),
            offset: varint(&self.bytes, &mut at),
            len: varint(&self.bytes, &mut at) as u32,
        })
    }

    fn push(&mut self, location: Location) {
        let prev = self.decode().last().copied().unwrap_or_default();
        let segment_delta = location.segment.wrapping_sub(prev.segment);
        let offset = if segment_delta == 0 {
            location.offset.wrapping_sub(prev.offset + u64::from(prev.len))
        } else {
            location.offset
        };
        let mut bytes = std::mem::take(&mut self.bytes).into_vec();
        for value in [segment_delta, offset, u64::from(location.len)] {
            put_varint(&mut bytes, value);
        }
        self.bytes = bytes.into_boxed_slice();
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    let mut shift = 0;
    while let Some(&byte) = bytes.get(*at) {
        *at += 1;
        if shift < 64 {
            value |= u64::from(byte & 0x7f) << shift;
        }
        shift += 7;
        if byte & 0x80 == 0 {
            break;
        }
    }
    value
}

impl Serialize for Locations {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&hex::encode(&self.bytes))
    }
}

impl<'de> Deserialize<'de> for Locations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let bytes = hex::decode(text).map_err(serde::de::Error::custom)?;
        Ok(Locations { bytes: bytes.into_boxed_slice() })
    }
}

fn id_out<S: Serializer>(id: &Key, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format!("{:016x}{:016x}", id[0], id[1]))
}

fn id_in<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
    let text = String::deserialize(deserializer)?;
    let id = u128::from_str_radix(&text, 16).map_err(serde::de::Error::custom)?;
    Ok([(id >> 64) as u64, id as u64])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_round_trip_across_segments() {
        let all = [
            Location { segment: 1, offset: 0, len: 300 },
            Location { segment: 1, offset: 900, len: 2_000_000 },
            Location { segment: 57, offset: 0, len: 12 },
            Location { segment: 57, offset: 12, len: 70_000 },
            Location { segment: 1 << 40, offset: 1 << 33, len: u32::MAX },
        ];
        let mut locations = Locations::default();
        for location in all {
            locations.push(location);
        }
        assert_eq!(locations.decode(), all);
        assert_eq!(locations.first(), Some(all[0]));
        let text = serde_json::to_string(&locations).unwrap();
        let back: Locations = serde_json::from_str(&text).unwrap();
        assert_eq!(back.decode(), all);
    }
}
