//! When the alert store writes snapshots (every `snapshot_records` records, at a moment when
//! nothing is in flight, and at a clean stop), and retention after them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::alerts::store::database::DbBacking;
use crate::alerts::store::saved::{FORMAT, SavedRef};
use crate::alerts::store::state::State;
use crate::alerts::store::{AlertStore, Backing};
use crate::journal::snapshot::{self, Pending};
use crate::journal::{Journal, Record, Retention};

/// Serializes the state into the snapshot's temporary file, under the state's lock: no copy of
/// the state is made (the resident set stays near the live state), at the price of holding new
/// writes for the time it takes. On a multi-threaded runtime the worker thread hands its other
/// tasks over meanwhile.
fn serialize_held(
    path: &std::path::Path,
    checkpoint: &crate::journal::Checkpoint,
    saved: &SavedRef<'_>,
) -> Option<Pending> {
    let write = || snapshot::begin(path, FORMAT, checkpoint, saved);
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let begun = if multi { tokio::task::block_in_place(write) } else { write() };
    match begun {
        Ok(pending) => Some(pending),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "could not write the alert snapshot; the next start replays more of the journal");
            None
        }
    }
}

impl AlertStore {
    /// Writes a snapshot now, for a clean stop, when records were applied since the last one
    /// and nothing is in flight (and no snapshot is being written). Returns whether it wrote one.
    pub async fn save_snapshot(&self) -> bool {
        if let Backing::Database(db) = &self.backing {
            return self.save_database_snapshot_now(db).await;
        }
        let pending = {
            let mut state = self.lock();
            let state = &mut *state;
            let Some(checkpoint) = state.pace.now(|| SavedRef::settled(&state.events), &self.barrier) else {
                return false;
            };
            let pending = serialize_held(&self.path, &checkpoint, &SavedRef::of(state));
            if pending.is_none() {
                state.pace.saved();
            }
            pending
        };
        let Some(pending) = pending else { return false };
        let written = tokio::task::spawn_blocking(move || pending.commit()).await;
        self.lock().pace.saved();
        match written {
            Ok(Ok(_)) => true,
            Ok(Err(error)) => {
                tracing::warn!(path = %self.path.display(), %error, "could not write the alert snapshot");
                false
            }
            Err(_) => false,
        }
    }

    /// Holds a new write back while a due snapshot waits for the records in flight to settle
    /// (under constant load they would never all be settled at once); at most a second.
    pub(super) async fn pass_snapshot_barrier(&self) {
        self.barrier.pass(|| self.lock().pace.raised()).await;
    }

    /// A record queued by this generation is written: applies `settle`, notes the newest
    /// record the state reflects and, every `snapshot_records` records at a moment nothing
    /// is in flight, writes a snapshot in the background.
    pub(super) fn settled(&self, generation: u64, record: &Record, settle: impl FnOnce(&mut State)) {
        let mut state = self.lock();
        if state.generation != generation {
            return;
        }
        settle(&mut state);
        let state = &mut *state;
        state.pace.applied(record);
        let every = self.storage.snapshot_records;
        let Some(checkpoint) = state.pace.due(every, || SavedRef::settled(&state.events), &self.barrier) else {
            return;
        };
        let journal = match &self.backing {
            Backing::File(journal) => journal,
            Backing::Database(db) => return self.spawn_database_snapshot(db, state, checkpoint),
        };
        let Some(pending) = serialize_held(&self.path, &checkpoint, &SavedRef::of(state)) else {
            state.pace.saved();
            return;
        };
        // The checkpoint's own segment stays: a start checks the checkpoint's record.
        let keep_from = state.oldest_needed().unwrap_or(u64::MAX).min(checkpoint.location.segment);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            state.pace.saved();
            return;
        };
        let job = SaveJob {
            path: self.path.clone(),
            journal: journal.clone(),
            retention: self.storage.retention,
            state: self.state.clone(),
        };
        runtime.spawn(job.run(pending, keep_from));
    }
}

impl AlertStore {
    /// The state as the snapshot row holds it, serialized under the state's lock.
    fn database_snapshot_data(state: &State) -> Option<String> {
        match serde_json::to_string(&SavedRef::of(state)) {
            Ok(data) => Some(data),
            Err(error) => {
                tracing::warn!(component = "akritas_alerts", %error, "could not serialize the alert snapshot");
                None
            }
        }
    }

    /// Writes the snapshot (and applies retention) in the background, once due.
    fn spawn_database_snapshot(&self, db: &DbBacking, state: &mut State, checkpoint: crate::journal::Checkpoint) {
        let (Some(data), Ok(runtime)) = (Self::database_snapshot_data(state), tokio::runtime::Handle::try_current())
        else {
            state.pace.saved();
            return;
        };
        let keep_from = state.oldest_needed().unwrap_or(u64::MAX);
        let (log, retention, shared) = (db.log.clone(), self.storage.retention, self.state.clone());
        runtime.spawn(async move {
            let saved = AlertStore::save_database_snapshot(log, checkpoint, data, retention, keep_from).await;
            let mut state = shared.lock().unwrap_or_else(|p| p.into_inner());
            after_database_retention(&mut state, saved);
            state.pace.saved();
        });
    }

    /// [`AlertStore::save_snapshot`] on the database.
    async fn save_database_snapshot_now(&self, db: &DbBacking) -> bool {
        let (checkpoint, data, keep_from) = {
            let mut state = self.lock();
            let state = &mut *state;
            let Some(checkpoint) = state.pace.now(|| SavedRef::settled(&state.events), &self.barrier) else {
                return false;
            };
            let Some(data) = Self::database_snapshot_data(state) else {
                state.pace.saved();
                return false;
            };
            (checkpoint, data, state.oldest_needed().unwrap_or(u64::MAX))
        };
        let saved =
            AlertStore::save_database_snapshot(db.log.clone(), checkpoint, data, self.storage.retention, keep_from)
                .await;
        let written = saved.is_ok();
        let mut state = self.lock();
        after_database_retention(&mut state, saved);
        state.pace.saved();
        written
    }
}

/// Forgets what retention deleted from the database (or says why the snapshot failed).
fn after_database_retention(state: &mut State, saved: Result<u64, crate::journal::database::DatabaseError>) {
    match saved {
        Ok(0) => {}
        Ok(first_kept) => {
            let forgotten = state.forget_before(first_kept);
            crate::telemetry::count(
                "akritas_alert_incidents_removed_total",
                "Resolved incidents forgotten because retention deleted their journal records.",
                &[],
                forgotten as f64,
            );
        }
        Err(error) => {
            tracing::warn!(component = "akritas_alerts", %error, "could not write the alert snapshot to the database; a start replays more")
        }
    }
}

/// A snapshot to write, and retention to run after it.
struct SaveJob {
    path: PathBuf,
    journal: Journal,
    retention: Option<Duration>,
    state: Arc<Mutex<State>>,
}

impl SaveJob {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn run(self, pending: Pending, keep_from: u64) {
        let written = tokio::task::spawn_blocking(move || pending.commit()).await;
        match written {
            Ok(Ok(bytes)) => tracing::debug!(path = %self.path.display(), bytes, "alert snapshot written"),
            Ok(Err(error)) => {
                tracing::warn!(path = %self.path.display(), %error, "could not write the alert snapshot; the next start replays more of the journal");
            }
            Err(_) => {}
        }
        if let Some(max_age) = self.retention {
            match self.journal.retain(Retention { max_age, keep_from }).await {
                Ok(removed) if removed.segments > 0 => {
                    tracing::info!(path = %self.path.display(), segments = removed.segments, records = removed.records, "alert journal retention removed old segments");
                    let forgotten = self.lock().forget_before(removed.first_kept);
                    crate::telemetry::count(
                        "akritas_alert_incidents_removed_total",
                        "Resolved incidents forgotten because retention deleted their journal records.",
                        &[],
                        forgotten as f64,
                    );
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(path = %self.path.display(), %error, "alert journal retention failed"),
            }
        }
        self.lock().pace.saved();
    }
}
