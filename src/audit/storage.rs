//! How the audit keeps its state: the Run index in memory ([`Index`]), snapshotted next to
//! the journal so a start replays only the records after the snapshot, and retention of
//! old journal segments with the Runs that started in them.
//!
//! A snapshot must reflect exactly the records up to its checkpoint. Records of different
//! Runs commit in one group and are applied by different tasks in any order, so appends
//! are counted from before they are queued until they are applied, and a snapshot is
//! taken only when none is in flight, at the highest-seq record applied.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::index::{self, Index};
use super::replay::RecordError;
use super::file::{FileAudit, Shared};
use super::{AuditError, AuditLog, Backend, lock};
use crate::journal::pace::{Barrier, Pace};
use crate::journal::snapshot::{self, Restore, RestoreError, Visit};
use crate::journal::{self, Checkpoint, Journal, JournalError, JournalOptions, Record, Retention, VerifyReport};

/// Format of the audit's snapshot file.
const SNAPSHOT_FORMAT: &str = "akritas.audit.index.v1";
/// Default records between two snapshots.
pub const DEFAULT_SNAPSHOT_RECORDS: u64 = 20_000;

/// Where and how the audit journal is stored.
#[derive(Clone, Debug)]
pub struct AuditStorage {
    /// Journal options (segment size and age).
    pub journal: JournalOptions,
    /// Records applied between two snapshots of the Run index (0: no snapshots).
    pub snapshot_records: u64,
    /// Sealed segments older than this are deleted after a snapshot, with the Runs that
    /// started in them (`None`: keep everything).
    pub retention: Option<Duration>,
}

impl Default for AuditStorage {
    fn default() -> Self {
        Self { journal: JournalOptions::default(), snapshot_records: DEFAULT_SNAPSHOT_RECORDS, retention: None }
    }
}

/// What the last start read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartReport {
    /// Seq of the snapshot's checkpoint the start resumed from (`None`: replayed from the start).
    pub snapshot: Option<u64>,
    /// Audit records replayed from the journal.
    pub replayed: u64,
    /// Runs dropped because retention had deleted the segment they started in.
    pub removed_runs: u64,
}

/// The index and when it may be snapshotted.
#[derive(Default)]
pub(super) struct Live {
    pub(super) index: Index,
    pace: Pace,
}

/// An append counted as in flight; dropped without [`Shared::apply_record`] it marks the
/// index possibly behind the journal, unless [`InFlight::not_written`] says otherwise.
pub(super) struct InFlight {
    shared: Arc<Shared>,
    open: bool,
}

impl InFlight {
    /// The append failed before anything was stored.
    pub(super) fn not_written(mut self) {
        self.open = false;
        self.shared.live().pace.not_written();
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.open {
            self.shared.live().pace.lost();
        }
    }
}

/// Whether a failed append left nothing in the journal.
pub(super) fn not_stored(error: &JournalError) -> bool {
    error.is_unwritable() || matches!(error, JournalError::RecordTooLarge { .. } | JournalError::InvalidKind(_))
}

fn restore_error(path: &Path, error: RestoreError<RecordError>) -> AuditError {
    match error {
        RestoreError::Journal(error) => AuditError::Journal(error),
        RestoreError::Replay { seq, reason } => {
            AuditError::Inconsistent { path: path.display().to_string(), seq, reason }
        }
        // The index starts at the first kept record, so a start without a snapshot replays.
        RestoreError::NoSnapshot { first_seq } => AuditError::Journal(JournalError::Corrupt {
            path: path.to_owned(),
            line: 0,
            offset: 0,
            reason: format!("the journal starts at seq {first_seq} and no snapshot holds what it said"),
        }),
    }
}

/// Opens the journal at `path`: the snapshot's index and the records after it, or (no
/// snapshot, or one the journal does not match) every record kept.
pub(super) fn open(path: &Path, storage: &AuditStorage) -> Result<(Journal, Live, StartReport), AuditError> {
    let trimmed = journal::anchor(path)?.is_some_and(|anchor| anchor.first_seq > 1);
    let load_run = |locations: &[journal::Location]| index::load_run(locations, &|at| journal::read_record(path, at));
    let how = Restore { format: SNAPSHOT_FORMAT, use_snapshot: true, from_kept: true };
    let restore = |index: Index, at| Live { index: index.rebuilt().trimmed(trimmed), pace: Pace::opened(Some(at), 0) };
    let empty = || Live { index: Index::default().trimmed(trimmed), pace: Pace::default() };
    let apply = |live: &mut Live, record: &Record| {
        live.index.apply(record, &load_run)?;
        live.pace.replayed(record);
        Ok(())
    };
    let mut read = |from: Option<&Checkpoint>, visit: &mut Visit<'_, RecordError>| {
        Journal::open_from(path, storage.journal.clone(), from, visit)
    };
    let ((journal, opened), mut live, restored) =
        snapshot::restore(path, how, restore, empty, apply, &mut read).map_err(|e| restore_error(path, e))?;
    for record in &opened.recovered {
        tracing::warn!(path = %path.display(), seq = record.seq, kind = %record.kind, data = %record.data, "audit journal recovered (a torn tail after a crash, or writes resumed after a failed write)");
    }
    let first_kept = journal::anchor(path)?.map_or(1, |anchor| anchor.first_seq);
    let report = StartReport {
        snapshot: restored.snapshot,
        replayed: restored.replayed,
        removed_runs: live.index.prune(first_kept),
    };
    count_removed(path, report.removed_runs);
    live.pace = Pace::opened(live.pace.last().cloned(), report.replayed);
    if let Some(checkpoint) = live.pace.due(storage.snapshot_records, || true, &Barrier::default()) {
        if let Err(error) = snapshot::write(path, SNAPSHOT_FORMAT, &checkpoint, &live.index) {
            tracing::warn!(path = %path.display(), %error, "could not write the audit snapshot; the next start replays more");
        }
        live.pace.saved();
    }
    tracing::info!(path = %path.display(), runs = live.index.len(), replayed = report.replayed, snapshot = ?report.snapshot, index_bytes = live.index.approx_bytes(), "audit journal opened");
    Ok((journal, live, report))
}

fn count_removed(path: &Path, runs: u64) {
    if runs > 0 {
        crate::telemetry::count(
            "akritas_audit_runs_removed_total",
            "Runs dropped from the audit because retention deleted the journal segment they started in.",
            &[],
            runs as f64,
        );
        tracing::info!(path = %path.display(), runs, "audit retention removed old Runs");
    }
}

impl Shared {
    pub(super) fn live(&self) -> std::sync::RwLockWriteGuard<'_, Live> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds a new append back while a due snapshot waits for the appends in flight to
    /// settle; at most a second.
    pub(super) async fn pass_barrier(&self) {
        self.barrier.pass(|| self.live().pace.raised()).await;
    }

    /// Counts an append about to be queued.
    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        self.live().pace.queued();
        InFlight { shared: self.clone(), open: true }
    }

    /// Applies a stored record to the index (`run`: the Run a result record belongs to, as
    /// its writer loaded it) and snapshots when one is due.
    pub(super) fn apply_record(
        self: &Arc<Self>,
        record: &Record,
        mut pending: InFlight,
        run: Option<&super::RunRecord>,
    ) -> Result<(), AuditError> {
        let load = |_: &[journal::Location]| run.cloned().ok_or_else(|| "the Run was not loaded".to_string());
        let mut live = self.live();
        let applied = live.index.apply(record, &load);
        pending.open = false;
        match applied {
            Ok(()) => live.pace.applied(record),
            Err(_) => live.pace.lost(),
        }
        let due = live.pace.due(self.storage.snapshot_records, || true, &self.barrier);
        let due = due.map(|checkpoint| (checkpoint, live.index.clone()));
        drop(live);
        if let Some((checkpoint, index)) = due {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let shared = self.clone();
                    let task = runtime.spawn(async move { shared.persist(checkpoint, index).await });
                    *lock(&self.snapshot_task) = Some(task);
                }
                Err(_) => self.live().pace.saved(),
            }
        }
        applied.map_err(|reason| AuditError::Inconsistent {
            path: self.journal.path().display().to_string(),
            seq: record.seq,
            reason,
        })
    }

    /// Writes the snapshot (off the async threads), then applies retention.
    async fn persist(self: Arc<Self>, checkpoint: Checkpoint, index: Index) {
        let path = self.journal.path().to_owned();
        let seq = checkpoint.seq;
        let at = checkpoint.clone();
        let written = tokio::task::spawn_blocking(move || snapshot::write(&path, SNAPSHOT_FORMAT, &at, &index)).await;

        match written {
            Ok(Ok(bytes)) => {
                tracing::debug!(path = %self.journal.path().display(), seq, bytes, "audit snapshot written");
                if let Some(max_age) = self.storage.retention
                    && let Err(error) = self.retain(max_age, checkpoint.location.segment).await
                {
                    tracing::warn!(path = %self.journal.path().display(), %error, "audit retention failed; it is retried after the next snapshot");
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(path = %self.journal.path().display(), %error, "could not write the audit snapshot; the next start replays more")
            }
            Err(error) => tracing::warn!(%error, "the audit snapshot task stopped"),
        }
        self.live().pace.saved();
    }

    /// Deletes the segments older than `max_age` before the one holding the snapshot's
    /// checkpoint (`snapshot_segment`: the next start resumes there) and before those
    /// holding a record of a running (or claimed) Run, and drops the Runs that started in them.
    async fn retain(&self, max_age: Duration, snapshot_segment: u64) -> Result<u64, AuditError> {
        let active = lock(&self.active).clone();
        let needed = self.state.read().unwrap_or_else(|p| p.into_inner()).index.first_needed_segment(&active);
        let keep_from = needed.map_or(snapshot_segment, |segment| segment.min(snapshot_segment));
        let removed = self.journal.retain(Retention { max_age, keep_from }).await?;
        if removed.segments == 0 {
            return Ok(0);
        }
        let path = self.journal.path().to_owned();
        let first_kept = journal::anchor(&path)?.map_or(1, |anchor| anchor.first_seq);
        let runs = self.live().index.prune(first_kept);
        count_removed(&path, runs);
        Ok(runs)
    }
}

impl FileAudit {
    /// Writes a snapshot of the Run index now (and applies retention) unless an append is in
    /// flight or nothing was applied since the open; returns the checkpoint's seq. Waits for
    /// a snapshot already being written.
    pub(super) async fn snapshot(&self) -> Option<u64> {
        self.snapshot_settled().await;
        let (checkpoint, index) = {
            let mut live = self.shared.live();
            let checkpoint = live.pace.now(|| true, &self.shared.barrier)?;
            (checkpoint, live.index.clone())
        };
        let seq = checkpoint.seq;
        self.shared.clone().persist(checkpoint, index).await;
        Some(seq)
    }

    /// Waits for the snapshot being written in the background (and its retention), if any.
    pub(super) async fn snapshot_settled(&self) {
        let task = lock(&self.shared.snapshot_task).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Snapshots and closes the journal: later writes fail.
    pub(super) async fn close(&self) -> Result<(), AuditError> {
        self.snapshot().await;
        Ok(self.shared.journal.clone().close().await?)
    }

    /// What the start read: the snapshot used and the records replayed.
    pub(super) fn start_report(&self) -> StartReport {
        self.shared.started
    }

    /// An estimate of the bytes the Run index holds in memory.
    pub(super) fn index_bytes(&self) -> usize {
        self.shared.state.read().unwrap_or_else(|p| p.into_inner()).index.approx_bytes()
    }
}

/// Snapshots and what the start read: the embedded journal's (the database keeps no
/// snapshot of the audit; a start there reads nothing).
impl AuditLog {
    /// Writes a snapshot of the Run index now (and applies retention) unless an append is in
    /// flight or nothing was applied since the open; returns the checkpoint's seq. Waits for
    /// a snapshot already being written. On the database: applies retention, returns `None`.
    pub async fn snapshot(&self) -> Option<u64> {
        match &self.backend {
            Backend::File(file) => file.snapshot().await,
            Backend::Database(db) => {
                if let Err(error) = db.retain().await {
                    tracing::warn!(component = "akritas_audit", %error, "audit retention failed; it is retried later");
                }
                None
            }
        }
    }

    /// Waits for the snapshot being written in the background (and its retention), if any.
    pub async fn snapshot_settled(&self) {
        if let Backend::File(file) = &self.backend {
            file.snapshot_settled().await;
        }
    }

    /// Snapshots and closes the embedded journal: later writes fail.
    pub async fn close(&self) -> Result<(), AuditError> {
        match &self.backend {
            Backend::File(file) => file.close().await,
            Backend::Database(_) => Ok(()),
        }
    }

    /// What the start read: the snapshot used and the records replayed (nothing, on the
    /// database).
    pub fn start_report(&self) -> StartReport {
        match &self.backend {
            Backend::File(file) => file.start_report(),
            Backend::Database(_) => StartReport::default(),
        }
    }

    /// An estimate of the bytes the Run index holds in memory (0 on the database: it holds
    /// none).
    pub fn index_bytes(&self) -> usize {
        match &self.backend {
            Backend::File(file) => file.index_bytes(),
            Backend::Database(_) => 0,
        }
    }
}

/// Checks an audit journal without opening it for writing: the hash chain and line bounds
/// and the same apply `serve` runs at start (event order, Run lifecycle, evidence of every
/// structured result, read back from the journal). Memory holds the Run index, not the
/// records. Backs `akritas audit verify PATH`.
pub fn verify(path: &Path) -> Result<VerifyReport, AuditError> {
    let first_kept = journal::anchor(path)?.map_or(1, |anchor| anchor.first_seq);
    let mut index = Index::default().trimmed(first_kept > 1);
    let load_run = |locations: &[journal::Location]| index::load_run(locations, &|at| journal::read_record(path, at));
    let mut visit = |record: Record| index.apply(&record, &load_run).map_err(|reason| (record.seq, reason));
    journal::scan_from(path, None, &mut visit).map_err(|e| restore_error(path, e.into()))
}
