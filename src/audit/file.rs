//! The audit on the embedded journal: the Run index in memory, Run detail read back from the
//! journal by location. Records of one Run are written one at a time, each under the Run's
//! writer lock held from choosing its sequence to applying it after the fsync, and in a task of
//! its own, so a caller that goes away mid-write cannot leave the journal and the state apart.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;

use super::index;
use super::reads::READ;
use super::storage::{self, InFlight, Live};
use super::{ActiveSet, AuditError, AuditStorage, Build, RunId, RunLocks, RunRecord, StartReport};
use crate::journal::{Journal, JournalError, Record};

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
        let (journal, live, started) = storage::open(path, &storage)?;
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
                if storage::not_stored(&error) {
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
