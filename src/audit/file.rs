//! The audit on the embedded journal: the Run index in memory ([`Index`]), Run detail read back
//! from the journal by location. Records of one Run are written one at a time, each under the
//! Run's writer lock held from choosing its sequence to applying it after the fsync, and in a
//! task of its own, so a caller that goes away mid-write cannot leave the journal and the state
//! apart.
//!
//! The index is snapshotted next to the journal so a start replays only the records after the
//! snapshot; retention deletes old journal segments with the Runs that started in them.
//!
//! A snapshot must reflect exactly the records up to its checkpoint. Records of different
//! Runs commit in one group and are applied by different tasks in any order, so appends
//! are counted from before they are queued until they are applied, and a snapshot is
//! taken only when none is in flight, at the highest-seq record applied.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;

use super::index::{self, Index};
use super::reads::READ;
use super::replay::RecordError;
use super::{ActiveSet, AuditError, AuditLog, Backend, Build, RunId, RunLocks, RunRecord, lock};
use crate::journal::pace::{Barrier, Pace};
use crate::journal::snapshot::{self, Restore, RestoreError, Visit};
use crate::journal::{self, Checkpoint, Journal, JournalError, JournalOptions, Record, Retention, VerifyReport};
pub(super) struct FileAudit {
    pub(super) shared: Arc<Shared>,
}

pub(super) struct Shared {
    pub(super) journal: Journal,
    pub(super) storage: AuditStorage,
    /// The Run index (not the Runs' history: detail is read from the journal).
    pub(super) state: RwLock<Live>,
    /// What the start read.
    pub(super) started: StartReport,
    /// The snapshot being written in the background, if any.
    pub(super) snapshot_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// One writer lock per Run written by this process.
    writers: RunLocks,
    /// Runs something in this process is executing on (the Run itself or a follow-up).
    pub(super) active: ActiveSet,
    /// Where appends wait while a due snapshot waits for those in flight.
    pub(super) barrier: crate::journal::pace::Barrier,
}

impl FileAudit {
    /// Opens (or creates) the log: reads the snapshot of the Run index, if one matches the
    /// journal, and replays strictly the records after it (all of them otherwise). Blocking.
    pub(super) fn open(path: &Path, storage: AuditStorage, active: ActiveSet) -> Result<FileAudit, AuditError> {
        let (journal, live, started) = open_journal(path, &storage)?;
        let shared = Shared {
            journal,
            storage,
            state: RwLock::new(live),
            started,
            snapshot_task: Mutex::new(None),
            writers: RunLocks::default(),
            active,
            barrier: crate::journal::pace::Barrier::default(),
        };
        Ok(FileAudit { shared: Arc::new(shared) })
    }

    /// Writes a Run's first record.
    pub(super) async fn start(&self, data: Value) -> Result<(), AuditError> {
        // Nothing else knows the id yet, so no writer lock is needed; the task keeps the
        // journal and the state together if the caller goes away.
        self.append_free("run_started", data).await
    }

    /// Writes a read (it belongs to no Run).
    pub(super) async fn append_read(&self, data: Value) -> Result<(), AuditError> {
        self.append_free(READ, data).await
    }

    async fn append_free(&self, kind: &'static str, data: Value) -> Result<(), AuditError> {
        let shared = self.shared.clone();
        tokio::spawn(async move {
            shared.pass_barrier().await;
            let pending = shared.begin();
            let (record, pending) = shared.append(kind, &data, pending).await?;
            shared.apply_record(&record, pending, None)
        })
        .await
        .map_err(|_| AuditError::Interrupted)?
    }

    /// Whether the Run is indexed.
    pub(super) fn contains(&self, id: &RunId) -> bool {
        self.shared.read().index.contains(id)
    }

    /// Writes one record of a Run: `build` sees what the index knows of the Run under its
    /// writer lock (and, with `full`, the Run rebuilt from its records, read off the async
    /// threads) and returns the record (or why there is none).
    pub(super) async fn write(&self, run_id: &RunId, full: bool, build: Build) -> Result<Record, AuditError> {
        let shared = self.shared.clone();
        let id = run_id.clone();
        tokio::spawn(async move {
            let turn = shared.writers.clone();
            turn.hold(&id, async {
                let facts = shared.read().index.facts(&id).ok_or_else(|| AuditError::UnknownRun(id.clone()))?;
                let run = if full {
                    Some(shared.load(&id).await?.ok_or_else(|| AuditError::UnknownRun(id.clone()))?)
                } else {
                    None
                };
                let (kind, data) = build(&id, facts, run.as_ref())?;
                shared.pass_barrier().await;
                let pending = shared.begin();
                let (record, pending) = shared.append(kind, &data, pending).await?;
                shared.apply_record(&record, pending, run.as_ref())?;
                Ok(record)
            })
            .await
        })
        .await
        .map_err(|_| AuditError::Interrupted)?
    }

    /// Every Run still marked running.
    pub(super) fn running(&self) -> Vec<RunId> {
        self.shared.read().index.running()
    }
}

impl Shared {
    /// Appends one record counted in flight, first getting the journal writing again if a
    /// write failed.
    async fn append(&self, kind: &str, data: &Value, pending: InFlight) -> Result<(Record, InFlight), JournalError> {
        let appended = async {
            if self.journal.failure().is_some() {
                self.journal.recover().await?;
            }
            self.journal.append(kind, data).await
        }
        .await;
        match appended {
            Ok(record) => Ok((record, pending)),
            Err(error) => {
                if not_stored(&error) {
                    pending.not_written();
                }
                Err(error)
            }
        }
    }

    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, Live> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The Run rebuilt from its records (read off the async threads); `None` when it is not
    /// indexed.
    async fn load(&self, id: &RunId) -> Result<Option<RunRecord>, AuditError> {
        let Some(locations) = self.read().index.locations(id) else { return Ok(None) };
        let journal = self.journal.clone();
        let id = id.clone();
        tokio::task::spawn_blocking(move || {
            index::load_run(&locations, &|at| journal.read_at(at))
                .map(Some)
                .map_err(|reason| AuditError::Unreadable { run: id, reason })
        })
        .await
        .map_err(|_| AuditError::Interrupted)?
    }
}

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
struct InFlight {
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
fn not_stored(error: &JournalError) -> bool {
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
fn open_journal(path: &Path, storage: &AuditStorage) -> Result<(Journal, Live, StartReport), AuditError> {
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
    fn live(&self) -> std::sync::RwLockWriteGuard<'_, Live> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds a new append back while a due snapshot waits for the appends in flight to
    /// settle; at most a second.
    async fn pass_barrier(&self) {
        self.barrier.pass(|| self.live().pace.raised()).await;
    }

    /// Counts an append about to be queued.
    fn begin(self: &Arc<Self>) -> InFlight {
        self.live().pace.queued();
        InFlight { shared: self.clone(), open: true }
    }

    /// Applies a stored record to the index (`run`: the Run a result record belongs to, as
    /// its writer loaded it) and snapshots when one is due.
    fn apply_record(
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
