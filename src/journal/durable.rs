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

use super::snapshot::{self, RestoreError};
use super::{Checkpoint, Journal, JournalError, JournalOptions, Record};

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
        /// Why.
        #[source]
        source: JournalError,
    },
    /// A journal record this version cannot replay.
    #[error(
        "the {journal} {} has a record (seq {seq}) this version cannot read: {reason}; restore the journal from backup or move it aside ({lost} are then lost)",
        path.display()
    )]
    Replay {
        /// The journal's name.
        journal: &'static str,
        /// What moving it aside loses.
        lost: &'static str,
        /// The journal.
        path: PathBuf,
        /// The record's seq.
        seq: u64,
        /// Why.
        reason: String,
    },
    /// The journal's start was removed and no snapshot holds what it said.
    #[error(
        "the {journal} {} starts at seq {first_seq} but its snapshot is missing or unreadable; restore the snapshot from backup or move the journal aside ({lost} are then lost)",
        path.display()
    )]
    NoSnapshot {
        /// The journal's name.
        journal: &'static str,
        /// What moving it aside loses.
        lost: &'static str,
        /// The journal.
        path: PathBuf,
        /// Its first kept record.
        first_seq: u64,
    },
}

/// The state and the journal record it reflects.
struct Tracked<S> {
    state: S,
    last: Option<Checkpoint>,
    since_snapshot: u64,
}

impl<S: Replayed> Tracked<S> {
    fn apply(&mut self, record: &Record) -> Result<(), String> {
        self.state.apply(record)?;
        self.last = Some(record.checkpoint());
        self.since_snapshot += 1;
        Ok(())
    }
}

/// A journal-backed store of state `S`.
pub struct Durable<S: Replayed> {
    journal: Journal,
    path: PathBuf,
    name: StoreName,
    snapshot_every: u64,
    tracked: Mutex<Tracked<S>>,
    writer: tokio::sync::Mutex<()>,
}

impl<S: Replayed> std::fmt::Debug for Durable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").field("journal", &self.name.journal).field("path", &self.path).finish_non_exhaustive()
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
        let (journal, tracked) = restored.map_err(|error| match error {
            RestoreError::Journal(source) => StoreError::Journal { journal: name.journal, source },
            RestoreError::Replay { seq, reason } => {
                StoreError::Replay { journal: name.journal, lost: name.lost, path: path.to_owned(), seq, reason }
            }
            RestoreError::NoSnapshot { first_seq } => {
                StoreError::NoSnapshot { journal: name.journal, lost: name.lost, path: path.to_owned(), first_seq }
            }
        })?;
        Ok(Durable {
            journal,
            path: path.to_owned(),
            name,
            snapshot_every: snapshot_every.max(1),
            tracked: Mutex::new(tracked),
            writer: tokio::sync::Mutex::new(()),
        })
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state, locked briefly (never across an `await`).
    pub fn state(&self) -> State<'_, S> {
        State(self.tracked.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// The writer lock: held from a decision until the record making it durable is applied.
    pub async fn writer(&self) -> Writer<'_, S> {
        Writer { store: self, _held: self.writer.lock().await }
    }

    fn journal_error(&self, source: JournalError) -> StoreError {
        StoreError::Journal { journal: self.name.journal, source }
    }

    /// Every `snapshot_every` records: writes the state as a snapshot and deletes the journal
    /// segments before it. Failures are logged (the next pass retries); the journal stays the
    /// record of truth.
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
        if let Err(error) = snapshot::compact(&self.journal, S::FORMAT, checkpoint, saved).await {
            tracing::warn!(component = self.name.component, path = %self.path.display(), %error, "{} compaction failed", self.name.journal);
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

/// The writer lock of a [`Durable`] store, held.
pub struct Writer<'a, S: Replayed> {
    store: &'a Durable<S>,
    _held: tokio::sync::MutexGuard<'a, ()>,
}

impl<S: Replayed> Writer<'_, S> {
    /// Appends a record (recovering the journal first after a failed write), applies it to the
    /// state, and snapshots when one is due.
    pub async fn record(&self, kind: &str, data: &serde_json::Value) -> Result<(), StoreError> {
        let store = self.store;
        if store.journal.failure().is_some() {
            store.journal.recover().await.map_err(|e| store.journal_error(e))?;
        }
        let record = store.journal.append(kind, data).await.map_err(|e| store.journal_error(e))?;
        store.state().0.apply(&record).map_err(|reason| StoreError::Replay {
            journal: store.name.journal,
            lost: store.name.lost,
            path: store.path.clone(),
            seq: record.seq,
            reason,
        })?;
        store.maintain().await;
        Ok(())
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
            let writer = store.writer().await;
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
        let error = store.writer().await.record("test.unknown", &json!({})).await.unwrap_err();
        assert!(matches!(error, StoreError::Replay { seq: 1, .. }), "{error}");
        drop(store);
        let error = open(&path).unwrap_err().to_string();
        assert!(error.starts_with("the sum journal ") && error.contains("(seq 1)"), "{error}");
        assert!(error.ends_with("move it aside (the sums in it are then lost)"), "{error}");
    }
}
