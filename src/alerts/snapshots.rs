//! When the alert store writes snapshots (every `snapshot_records` records, at a moment when
//! nothing is in flight, and at a clean stop), and retention after them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::saved::{FORMAT, Saved};
use super::state::State;
use super::store::AlertStore;
use crate::journal::{Journal, Record, Retention};

impl AlertStore {
    /// Writes a snapshot now, for a clean stop, when records were applied since the last one
    /// and nothing is in flight (and no snapshot is being written). Returns whether it wrote one.
    pub async fn save_snapshot(&self) -> bool {
        if self.saving.swap(true, Ordering::AcqRel) {
            return false;
        }
        let captured = {
            let mut state = self.lock();
            let captured = (state.since_snapshot > 0).then(|| Saved::capture(&state)).flatten();
            if captured.is_some() {
                state.since_snapshot = 0;
            }
            captured
        };
        let Some((checkpoint, saved)) = captured else {
            self.saving.store(false, Ordering::Release);
            return false;
        };
        let path = self.path.clone();
        let written =
            tokio::task::spawn_blocking(move || crate::journal::snapshot::write(&path, FORMAT, &checkpoint, &saved))
                .await;
        self.saving.store(false, Ordering::Release);
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
        let drained = self.drained.notified();
        tokio::pin!(drained);
        drained.as_mut().enable();
        if !self.lock().barrier {
            return;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), drained).await;
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
        state.in_flight = state.in_flight.saturating_sub(1);
        state.since_snapshot += 1;
        if state.last.as_ref().is_none_or(|last| last.seq < record.seq) {
            state.last = Some(record.checkpoint());
        }
        if state.since_snapshot < self.storage.snapshot_records || self.saving.load(Ordering::Acquire) {
            return;
        }
        let Some((checkpoint, saved)) = Saved::capture(&state) else {
            // Let what is in flight settle before more is queued.
            state.barrier = true;
            return;
        };
        state.since_snapshot = 0;
        if std::mem::take(&mut state.barrier) {
            self.drained.notify_waiters();
        }
        // The checkpoint's own segment stays: a start checks the checkpoint's record.
        let keep_from = state.oldest_needed().unwrap_or(u64::MAX).min(checkpoint.location.segment);
        drop(state);
        self.saving.store(true, Ordering::Release);
        let job = SaveJob {
            path: self.path.clone(),
            journal: self.journal.clone(),
            retention: self.storage.retention,
            saving: self.saving.clone(),
            state: self.state.clone(),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(job.run(checkpoint, saved, keep_from));
        } else {
            self.saving.store(false, Ordering::Release);
        }
    }
}

/// A snapshot to write, and retention to run after it.
struct SaveJob {
    path: PathBuf,
    journal: Journal,
    retention: Option<Duration>,
    saving: Arc<AtomicBool>,
    state: Arc<Mutex<State>>,
}

impl SaveJob {
    async fn run(self, checkpoint: crate::journal::Checkpoint, saved: Saved, keep_from: u64) {
        let path = self.path.clone();
        let written = tokio::task::spawn_blocking(move || {
            let written = crate::journal::snapshot::write(&path, FORMAT, &checkpoint, &saved);
            drop(saved);
            crate::telemetry::release_freed_memory();
            written
        })
        .await;
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
                    let forgotten =
                        self.state.lock().unwrap_or_else(|p| p.into_inner()).forget_before(removed.first_kept);
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
        self.saving.store(false, Ordering::Release);
    }
}
