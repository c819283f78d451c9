//! The seam of the journal-backed stores: state in memory rebuilt from a hash-chained journal
//! ([`Replayed`]), and [`Durable`], the one place where it is opened from its snapshot and the
//! records after it, where every change is appended (fsynced) before it is applied to memory,
//! and where snapshots are written and the segments before them deleted. A store keeps only
//! its decisions: which record to write, and what a record does to its state.
//!
//! Ordering: a writer takes [`Durable::writer`], decides against the state, and records; the
//! lock is held across the append and the apply, so the journal's order is the order of
//! decisions, and a snapshot reflects exactly the journal up to its checkpoint.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::database::{self, AppendError, Database, DatabaseError};
use super::snapshot::{self, RestoreError};
use super::{Checkpoint, Clock, Journal, JournalError, JournalOptions, Record};

/// State rebuilt from a journal's records, and the snapshot that stands for them.
pub trait Replayed: Send + 'static {
    /// Shape and version of the snapshot (a snapshot of another format is not read).
    const FORMAT: &'static str;
    /// What a snapshot holds.
    type Saved: Serialize + DeserializeOwned + Send + 'static;
    /// Applies one record, at the record's own time, so replay rebuilds the same state.
    fn apply(&mut self, record: &Record) -> Result<(), String>;
    /// The state as a snapshot keeps it (retention may run on it first).
    fn saved(&mut self) -> Self::Saved;
}

/// How a store is named in its errors and logs.
#[derive(Clone, Copy, Debug)]
pub struct StoreName {
    /// The journal, as errors name it: `approval journal`.
    pub journal: &'static str,
    /// What moving the journal aside loses: `the approvals in it`.
    pub lost: &'static str,
    /// The `component` field of its log lines.
    pub component: &'static str,
}

/// What a durable store could not do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The journal could not be opened, read or written.
    #[error("the {journal} failed: {source}")]
    Journal {
        /// The journal's name.
        journal: &'static str,
        /// The file journal's error (I/O, a corrupt line, a failed write).
        #[source]
        source: JournalError,
    },
    /// The database could not be reached, read or written; nothing was recorded.
    #[error("the {journal} in the database failed: {source}")]
    Database {
        /// The journal's name.
        journal: &'static str,
        /// What the database backend reported; its messages never carry the connection string.
        #[source]
        source: DatabaseError,
    },
    /// A journal record this version cannot replay.
    #[error(
        "the {journal} {place} has a record (seq {seq}) this version cannot read: {reason}; {remedy} ({lost} are then lost)"
    )]
    Replay {
        /// What to do: restore from backup, or set the records aside.
        remedy: &'static str,
        /// The journal's name.
        journal: &'static str,
        /// What moving it aside loses.
        lost: &'static str,
        /// The journal file, or the store in the database.
        place: String,
        /// The record's seq.
        seq: u64,
        /// What the store's replay reported for that record, as text.
        reason: String,
    },
    /// The journal's start was removed and no snapshot holds what it said.
    #[error(
        "the {journal} {place} starts at seq {first_seq} but its snapshot is missing or unreadable; {remedy} ({lost} are then lost)"
    )]
    NoSnapshot {
        /// What to do: restore from backup, or set the records aside.
        remedy: &'static str,
        /// The journal's name.
        journal: &'static str,
        /// What moving it aside loses.
        lost: &'static str,
        /// The journal file, or the store in the database.
        place: String,
        /// Its first kept record.
        first_seq: u64,
    },
}

/// What to do about a journal file with a record this version cannot replay.
const FILE_REPLAY: &str = "restore the journal from backup or move it aside";
/// What to do about a journal file whose start was removed without a readable snapshot.
const FILE_NO_SNAPSHOT: &str = "restore the snapshot from backup or move the journal aside";
/// What to do about a store in the database that cannot be replayed.
const DATABASE_REMEDY: &str = "restore the database from backup, or delete the store's rows from akritas_records, akritas_heads and akritas_snapshots";

/// The state and the journal record it reflects.
struct Tracked<S> {
    state: S,
    last: Option<Checkpoint>,
    since_snapshot: u64,
}

impl<S: Replayed> Tracked<S> {
    fn apply(&mut self, record: &Record) -> Result<(), String> {
        // A journal's own records (a store copied into the database keeps them) are chained,
        // not applied.
        if !super::is_internal(&record.kind) {
            self.state.apply(record)?;
        }
        self.last = Some(record.checkpoint());
        self.since_snapshot += 1;
        Ok(())
    }

    fn last_seq(&self) -> u64 {
        self.last.as_ref().map_or(0, |last| last.seq)
    }
}

/// Where a store's records are kept.
enum Log<S: Replayed> {
    /// A journal file in the data directory.
    File { journal: Journal, path: PathBuf },
    /// Rows of a shared database; `restore` rebuilds the state from a snapshot another replica
    /// wrote.
    Database { log: database::Log, restore: Box<dyn Fn(S::Saved) -> S + Send + Sync> },
}

/// A journal-backed store of state `S`.
pub struct Durable<S: Replayed> {
    log: Log<S>,
    name: StoreName,
    snapshot_every: u64,
    tracked: Mutex<Tracked<S>>,
    writer: tokio::sync::Mutex<()>,
}

impl<S: Replayed> std::fmt::Debug for Durable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("journal", &self.name.journal)
            .field("place", &self.place())
            .finish_non_exhaustive()
    }
}

impl<S: Replayed> Durable<S> {
    /// Opens (creating if missing) the journal at `path` and rebuilds the state: `restore` from
    /// the snapshot plus the records after it, or `empty` plus every record. A snapshot is
    /// written every `snapshot_every` records. Blocking.
    pub fn open(
        path: &Path,
        options: JournalOptions,
        name: StoreName,
        snapshot_every: u64,
        restore: impl FnOnce(S::Saved) -> S,
        empty: impl FnOnce() -> S,
    ) -> Result<Self, StoreError> {
        let restored = snapshot::open_restored(
            path,
            S::FORMAT,
            options,
            |saved, checkpoint| Tracked { state: restore(saved), last: Some(checkpoint), since_snapshot: 0 },
            || Tracked { state: empty(), last: None, since_snapshot: 0 },
            Tracked::apply,
        );
        let place = path.display().to_string();
        let (journal, tracked) = restored.map_err(|error| match error {
            RestoreError::Journal(source) => StoreError::Journal { journal: name.journal, source },
            RestoreError::Replay { seq, reason } => {
                StoreError::Replay { remedy: FILE_REPLAY, journal: name.journal, lost: name.lost, place, seq, reason }
            }
            RestoreError::NoSnapshot { first_seq } => StoreError::NoSnapshot {
                remedy: FILE_NO_SNAPSHOT,
                journal: name.journal,
                lost: name.lost,
                place,
                first_seq,
            },
        })?;
        Ok(Durable {
            log: Log::File { journal, path: path.to_owned() },
            name,
            snapshot_every: snapshot_every.max(1),
            tracked: Mutex::new(tracked),
            writer: tokio::sync::Mutex::new(()),
        })
    }

    /// Opens the store `store` of a shared database and rebuilds the state from its snapshot and
    /// the records after it, as [`Durable::open`] does from a journal file. `clock` stamps the
    /// records this replica writes.
    pub async fn open_database(
        db: &Database,
        store: &'static str,
        clock: Clock,
        name: StoreName,
        snapshot_every: u64,
        restore: impl Fn(S::Saved) -> S + Send + Sync + 'static,
        empty: impl FnOnce() -> S,
    ) -> Result<Self, StoreError> {
        let log = database::Log::new(db, store, clock, super::DEFAULT_MAX_RECORD_BYTES, None);
        let state = empty();
        let durable = Durable {
            log: Log::Database { log, restore: Box::new(restore) },
            name,
            snapshot_every: snapshot_every.max(1),
            tracked: Mutex::new(Tracked { state, last: None, since_snapshot: 0 }),
            writer: tokio::sync::Mutex::new(()),
        };
        durable.catch_up(None).await?;
        Ok(durable)
    }

    /// Where the records are: the journal file, or the store in the database.
    pub fn place(&self) -> String {
        match &self.log {
            Log::File { path, .. } => path.display().to_string(),
            Log::Database { log, .. } => format!("(database store {:?})", log.store()),
        }
    }

    /// The state, locked briefly (never across an `await`). On a database it reflects the
    /// records this replica has read; [`Durable::fresh`] reads the newer ones first.
    pub fn state(&self) -> State<'_, S> {
        State(self.tracked.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Writes the state, as of its last record, as the snapshot of the journal at `journal` that
    /// holds a copy of the records (`storage migrate --to embedded`); `locate` says where that
    /// record is there (`None`: the copy starts after it, at its anchor). The record's seq.
    pub fn snapshot_to(
        &self,
        journal: &Path,
        locate: impl FnOnce(u64) -> Option<super::Location>,
    ) -> std::io::Result<Option<u64>> {
        let (checkpoint, saved) = {
            let mut tracked = self.state();
            let Some(last) = tracked.0.last.clone() else { return Ok(None) };
            (last, tracked.0.state.saved())
        };
        let location = locate(checkpoint.seq).unwrap_or_default();
        snapshot::write(journal, S::FORMAT, &Checkpoint { location, ..checkpoint.clone() }, &saved)?;
        Ok(Some(checkpoint.seq))
    }

    /// The state after applying every record other replicas committed (on a journal file,
    /// the state as it is).
    pub async fn fresh(&self) -> Result<State<'_, S>, StoreError> {
        if matches!(self.log, Log::Database { .. }) {
            self.catch_up(None).await?;
        }
        Ok(self.state())
    }

    /// The writer lock: held from a decision until the record making it durable is applied.
    /// On a database it also locks the store's head row, so one decision is taken at a time
    /// across every replica, and the state has every committed record when it is handed over.
    pub async fn writer(&self) -> Result<Writer<'_, S>, StoreError> {
        let held = self.writer.lock().await;
        let locked = match &self.log {
            Log::File { .. } => None,
            Log::Database { log, .. } => {
                let locked = log.lock().await.map_err(|e| self.database_error(e))?;
                self.catch_up(Some(&locked)).await?;
                Some(locked)
            }
        };
        Ok(Writer { store: self, _held: held, locked: Mutex::new(locked) })
    }

    fn database_error(&self, source: DatabaseError) -> StoreError {
        StoreError::Database { journal: self.name.journal, source }
    }

    /// A failed read; a changed record is named as the record replay cannot use.
    fn read_error(&self, source: DatabaseError) -> StoreError {
        match source {
            DatabaseError::Changed { seq, .. } => {
                self.replay_error(seq, "it does not match its hash, so it was changed after it was written".to_string())
            }
            other => self.database_error(other),
        }
    }

    fn replay_error(&self, seq: u64, reason: String) -> StoreError {
        let remedy = if matches!(self.log, Log::File { .. }) { FILE_REPLAY } else { DATABASE_REMEDY };
        StoreError::Replay {
            remedy,
            journal: self.name.journal,
            lost: self.name.lost,
            place: self.place(),
            seq,
            reason,
        }
    }

    /// Applies the records committed after the state's last one; when a snapshot has replaced
    /// some of them, rebuilds the state from that snapshot first. Checks that each record
    /// follows the one before it.
    async fn catch_up(&self, locked: Option<&database::Locked>) -> Result<(), StoreError> {
        let Log::Database { log, restore } = &self.log else { return Ok(()) };
        let last = self.state().0.last_seq();
        let (head, mut records) = log.after(locked, last).await.map_err(|e| self.read_error(e))?;
        // The records after `last` start later, or there are none although the head is further:
        // a snapshot replaced them.
        let gap = records.first().map_or(head > last, |(_, record)| record.seq != last + 1);
        let mut rebuilt = None;
        if gap {
            let snapshot = log.snapshot(locked).await.map_err(|e| self.database_error(e))?;
            match snapshot {
                Some(stored) if stored.format == S::FORMAT => {
                    let saved: S::Saved = serde_json::from_str(&stored.data).map_err(|e| {
                        self.replay_error(stored.checkpoint.seq, format!("its snapshot is not readable: {e}"))
                    })?;
                    let seq = stored.checkpoint.seq;
                    records.retain(|(_, record)| record.seq > seq);
                    if records.first().is_some_and(|(_, record)| record.seq != seq + 1) {
                        records = log.after(locked, seq).await.map_err(|e| self.read_error(e))?.1;
                    }
                    rebuilt = Some(Tracked { state: restore(saved), last: Some(stored.checkpoint), since_snapshot: 0 });
                }
                Some(stored) => {
                    return Err(self.replay_error(
                        stored.checkpoint.seq,
                        format!("its snapshot has the format {:?}, not {:?}", stored.format, S::FORMAT),
                    ));
                }
                None => {
                    let first_seq = records.first().map_or(head, |(_, record)| record.seq);
                    return Err(StoreError::NoSnapshot {
                        remedy: DATABASE_REMEDY,
                        journal: self.name.journal,
                        lost: self.name.lost,
                        place: self.place(),
                        first_seq,
                    });
                }
            }
        }
        let mut tracked = self.state();
        if let Some(rebuilt) = rebuilt {
            // A concurrent reader may have moved past the snapshot meanwhile: keep its state.
            if tracked.0.last_seq() < rebuilt.last_seq() {
                *tracked.0 = rebuilt;
            }
        }
        for (prev, record) in records {
            if record.seq <= tracked.0.last_seq() {
                continue; // applied meanwhile by a concurrent reader
            }
            let follows = match &tracked.0.last {
                Some(last) => last.seq + 1 == record.seq && last.hash == prev,
                None => record.seq == 1 && prev == super::format::GENESIS_PREV,
            };
            if !follows {
                return Err(
                    self.replay_error(record.seq, "it does not follow the record before it in the chain".to_string())
                );
            }
            tracked.0.apply(&record).map_err(|reason| self.replay_error(record.seq, reason))?;
        }
        Ok(())
    }

    /// Every `snapshot_every` records: writes the state as a snapshot and deletes the journal
    /// segments (or database rows) before it. Failures are logged (the next pass retries); the
    /// records stay the record of truth.
    async fn maintain(&self) {
        let (checkpoint, saved) = {
            let mut tracked = self.state();
            if tracked.0.since_snapshot < self.snapshot_every {
                return;
            }
            let Some(checkpoint) = tracked.0.last.clone() else { return };
            tracked.0.since_snapshot = 0;
            (checkpoint, tracked.0.state.saved())
        };
        let result = match &self.log {
            Log::File { journal, .. } => {
                snapshot::compact(journal, S::FORMAT, checkpoint, saved).await.map_err(|e| e.to_string())
            }
            Log::Database { log, .. } => match serde_json::to_string(&saved) {
                Ok(data) => log.compact(&checkpoint, S::FORMAT, &data).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
        };
        if let Err(error) = result {
            tracing::warn!(component = self.name.component, place = %self.place(), %error, "{} compaction failed", self.name.journal);
        }
    }
}

/// The state of a [`Durable`] store, locked.
pub struct State<'a, S>(MutexGuard<'a, Tracked<S>>);

impl<S> Deref for State<'_, S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.0.state
    }
}

impl<S> DerefMut for State<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.0.state
    }
}

/// The writer lock of a [`Durable`] store, held. On a database it holds the store's head row
/// until its record commits; a second record of the same writer locks the head again.
pub struct Writer<'a, S: Replayed> {
    store: &'a Durable<S>,
    _held: tokio::sync::MutexGuard<'a, ()>,
    locked: Mutex<Option<database::Locked>>,
}

impl<S: Replayed> Writer<'_, S> {
    /// Appends a record (recovering the journal first after a failed write), applies it to the
    /// state, and snapshots when one is due.
    pub async fn record(&self, kind: &str, data: &serde_json::Value) -> Result<(), StoreError> {
        let store = self.store;
        let record = match &store.log {
            Log::File { journal, .. } => {
                if journal.failure().is_some() {
                    journal.recover().await.map_err(|e| store.journal_error(e))?;
                }
                journal.append(kind, data).await.map_err(|e| store.journal_error(e))?
            }
            Log::Database { log, .. } => {
                let held = self.locked.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
                let locked = match held {
                    Some(locked) => locked,
                    None => {
                        let locked = log.lock().await.map_err(|e| store.database_error(e))?;
                        store.catch_up(Some(&locked)).await?;
                        locked
                    }
                };
                log.append(locked, kind, data).await.map_err(|error| match error {
                    AppendError::Journal(source) => store.journal_error(source),
                    AppendError::Database(source) => store.database_error(source),
                })?
            }
        };
        {
            let mut tracked = store.state();
            // A reader's catch-up may have applied it already, once it committed.
            if tracked.0.last.is_none() || record.seq > tracked.0.last_seq() {
                tracked.0.apply(&record).map_err(|reason| store.replay_error(record.seq, reason))?;
            }
        }
        store.maintain().await;
        Ok(())
    }
}

impl<S: Replayed> Durable<S> {
    fn journal_error(&self, source: JournalError) -> StoreError {
        StoreError::Journal { journal: self.name.journal, source }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A sum of the `add` records' values; `bad` records cannot be applied.
    #[derive(Default)]
    struct Sum(i64);

    impl Replayed for Sum {
        const FORMAT: &'static str = "akritas.test.sum.v1";
        type Saved = i64;
        fn apply(&mut self, record: &Record) -> Result<(), String> {
            match record.kind.as_str() {
                "test.add" => self.0 += record.data["value"].as_i64().ok_or("no value")?,
                other => return Err(format!("unknown record kind {other:?}")),
            }
            Ok(())
        }
        fn saved(&mut self) -> i64 {
            self.0
        }
    }

    fn total(sum: &Sum) -> i64 {
        sum.0
    }

    const NAME: StoreName = StoreName { journal: "sum journal", lost: "the sums in it", component: "test" };

    fn open(path: &Path) -> Result<Durable<Sum>, StoreError> {
        let options = JournalOptions { segment_bytes: 256, ..JournalOptions::default() };
        Durable::open(path, options, NAME, 4, Sum, Sum::default)
    }

    #[tokio::test]
    async fn records_are_applied_replayed_and_compacted_into_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sum.jsonl");
        let store = open(&path).unwrap();
        for value in 1..=10 {
            let writer = store.writer().await.unwrap();
            writer.record("test.add", &json!({ "value": value })).await.unwrap();
            drop(writer);
            assert_eq!(total(&store.state()), (1..=value).sum::<i64>());
        }
        drop(store);
        assert!(snapshot::snapshot_path(&path).exists(), "a snapshot every 4 records");
        let anchor = crate::journal::anchor(&path).unwrap().expect("the segments before the snapshot are deleted");
        assert!(anchor.first_seq > 1, "{anchor:?}");
        assert_eq!(total(&open(&path).unwrap().state()), 55, "the snapshot plus the records after it");
    }

    #[tokio::test]
    async fn a_record_the_state_cannot_apply_names_the_journal_and_what_moving_it_aside_loses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sum.jsonl");
        let store = open(&path).unwrap();
        let error = store.writer().await.unwrap().record("test.unknown", &json!({})).await.unwrap_err();
        assert!(matches!(error, StoreError::Replay { seq: 1, .. }), "{error}");
        drop(store);
        let error = open(&path).unwrap_err().to_string();
        assert!(error.starts_with("the sum journal ") && error.contains("(seq 1)"), "{error}");
        assert!(error.ends_with("move it aside (the sums in it are then lost)"), "{error}");
    }
}
