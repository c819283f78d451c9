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
use super::{AuditError, AuditLog, Shared, lock};
use crate::journal::{
    self, Checkpoint, Journal, JournalError, JournalOptions, Record, Retention, ScanError, VerifyReport,
};

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

/// The index and what decides when it may be snapshotted.
#[derive(Default)]
pub(super) struct Live {
    pub(super) index: Index,
    /// Appends counted from before they are queued until applied (or known not written).
    in_flight: u64,
    /// Records applied since the last snapshot.
    since_snapshot: u64,
    /// The highest-seq record applied.
    last: Option<Checkpoint>,
    /// A record may be in the journal without being in the index: no more snapshots
    /// (the next start replays from the last good one).
    broken: bool,
    /// A snapshot is being written.
    snapshotting: bool,
    /// A snapshot is due and waits for the appends in flight: new appends wait (briefly).
    barrier: bool,
}

impl Live {
    /// Takes the right to snapshot now, if the index reflects exactly the records up to one
    /// checkpoint and `due` says so; returns that checkpoint and a copy of the index.
    fn claim(&mut self, due: impl Fn(u64) -> bool) -> Option<(Checkpoint, Index)> {
        if self.in_flight > 0 || self.snapshotting || self.broken || !due(self.since_snapshot) {
            return None;
        }
        let checkpoint = self.last.clone()?;
        self.snapshotting = true;
        self.since_snapshot = 0;
        Some((checkpoint, self.index.clone()))
    }
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
        self.shared.live().in_flight -= 1;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.open {
            let mut live = self.shared.live();
            live.in_flight -= 1;
            live.broken = true;
        }
    }
}

/// Whether a failed append left nothing in the journal.
pub(super) fn not_stored(error: &JournalError) -> bool {
    error.is_unwritable() || matches!(error, JournalError::RecordTooLarge { .. } | JournalError::InvalidKind(_))
}

type Replayed = (Journal, Index, StartReport, Option<Checkpoint>);

/// Opens the journal and applies the records after `from` to `index`.
fn replay(
    path: &Path,
    options: &JournalOptions,
    from: Option<&Checkpoint>,
    mut index: Index,
) -> Result<Replayed, AuditError> {
    let load_run = |locations: &[journal::Location]| index::load_run(locations, &|at| journal::read_record(path, at));
    let (mut replayed, mut last) = (0, None);
    let mut visit = |record: Record| -> Result<(), (u64, RecordError)> {
        index.apply(&record, &load_run).map_err(|reason| (record.seq, reason))?;
        replayed += 1;
        last = Some(record.checkpoint());
        Ok(())
    };
    let (journal, opened) =
        Journal::open_from(path, options.clone(), from, &mut visit).map_err(|e| scan_error(path, e))?;
    for record in &opened.recovered {
        tracing::warn!(path = %path.display(), seq = record.seq, kind = %record.kind, data = %record.data, "audit journal recovered (a torn tail after a crash, or writes resumed after a failed write)");
    }
    let report = StartReport { snapshot: from.map(|c| c.seq), replayed, removed_runs: 0 };
    Ok((journal, index, report, last))
}

fn scan_error(path: &Path, error: ScanError<(u64, RecordError)>) -> AuditError {
    match error {
        ScanError::Journal(error) => AuditError::Journal(error),
        ScanError::Visit((seq, reason)) => AuditError::Inconsistent { path: path.display().to_string(), seq, reason },
    }
}

/// Opens the journal at `path`: the snapshot's index and the records after it, or (no
/// snapshot, or one the journal does not match) every record.
pub(super) fn open(path: &Path, storage: &AuditStorage) -> Result<(Journal, Live, StartReport), AuditError> {
    let first_kept = journal::anchor(path)?.map_or(1, |anchor| anchor.first_seq);
    let fresh = || Index::default().trimmed(first_kept > 1);
    let snapshot = journal::snapshot::read::<Index>(path, SNAPSHOT_FORMAT);
    let (journal, mut index, mut report, last) = match snapshot {
        Some((checkpoint, index)) => {
            let index = index.rebuilt().trimmed(first_kept > 1);
            match replay(path, &storage.journal, Some(&checkpoint), index) {
                Err(AuditError::Journal(error @ JournalError::CheckpointMismatch { .. })) => {
                    tracing::warn!(path = %path.display(), %error, "the audit snapshot does not match the journal; replaying the journal from the start");
                    journal::snapshot::discard(path);
                    replay(path, &storage.journal, None, fresh())?
                }
                other => other?,
            }
        }
        None => replay(path, &storage.journal, None, fresh())?,
    };
    report.removed_runs = index.prune(first_kept);
    count_removed(path, report.removed_runs);
    let mut live = Live { index, last, ..Live::default() };
    if storage.snapshot_records > 0
        && report.replayed >= storage.snapshot_records
        && let Some((checkpoint, index)) = live.claim(|_| true)
    {
        if let Err(error) = journal::snapshot::write(path, SNAPSHOT_FORMAT, &checkpoint, &index) {
            tracing::warn!(path = %path.display(), %error, "could not write the audit snapshot; the next start replays more");
        }
        live.snapshotting = false;
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
        journal::snapshot::pass_barrier(&self.drained, || self.live().barrier).await;
    }

    /// Counts an append about to be queued.
    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        self.live().in_flight += 1;
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
        live.in_flight -= 1;
        if applied.is_ok() {
            live.since_snapshot += 1;
            if live.last.as_ref().is_none_or(|last| last.seq < record.seq) {
                live.last = Some(record.checkpoint());
            }
        } else {
            live.broken = true;
        }
        let every = self.storage.snapshot_records;
        let due = if every > 0 { live.claim(|since| since >= every) } else { None };
        if due.is_some() {
            if std::mem::take(&mut live.barrier) {
                self.drained.notify_waiters();
            }
        } else if every > 0 && live.since_snapshot >= every && !live.snapshotting && !live.broken {
            // Under constant load the appends in flight never all settle by themselves.
            live.barrier = true;
        }
        drop(live);
        if let Some((checkpoint, index)) = due {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let shared = self.clone();
                    let task = runtime.spawn(async move { shared.persist(checkpoint, index).await });
                    *lock(&self.snapshot_task) = Some(task);
                }
                Err(_) => self.live().snapshotting = false,
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
        let written =
            tokio::task::spawn_blocking(move || journal::snapshot::write(&path, SNAPSHOT_FORMAT, &at, &index)).await;

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
        self.live().snapshotting = false;
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

impl AuditLog {
    /// Writes a snapshot of the Run index now (and applies retention) unless an append is in
    /// flight or nothing was applied since the open; returns the checkpoint's seq. Waits for
    /// a snapshot already being written.
    pub async fn snapshot(&self) -> Option<u64> {
        self.snapshot_settled().await;
        let (checkpoint, index) = self.shared.live().claim(|since| since > 0)?;
        let seq = checkpoint.seq;
        self.shared.clone().persist(checkpoint, index).await;
        Some(seq)
    }

    /// Waits for the snapshot being written in the background (and its retention), if any.
    pub async fn snapshot_settled(&self) {
        let task = lock(&self.shared.snapshot_task).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Snapshots and closes the journal: later writes fail.
    pub async fn close(&self) -> Result<(), AuditError> {
        self.snapshot().await;
        Ok(self.shared.journal.clone().close().await?)
    }

    /// What the start read: the snapshot used and the records replayed.
    pub fn start_report(&self) -> StartReport {
        self.shared.started
    }

    /// An estimate of the bytes the Run index holds in memory.
    pub fn index_bytes(&self) -> usize {
        self.shared.state.read().unwrap_or_else(|p| p.into_inner()).index.approx_bytes()
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
    journal::scan_from(path, None, &mut visit).map_err(|e| scan_error(path, e))
}
