//! A Run of a schedule now, asked for through the API: claimed under the rules of a tick and
//! left to the scheduler that leads to start.

use jiff::Timestamp;

use super::super::decide::{NotNow, decide_now};
use super::super::report;
use super::{Scheduler, key_text};
use crate::catalog::ObjectKey;

/// Why `run_now` did not start a Run.
#[derive(Debug, thiserror::Error)]
pub enum RunNowError {
    /// No such schedule in the Catalog.
    #[error("no RunSchedule {0}")]
    NotFound(String),
    /// Its references do not resolve (its conditions say which).
    #[error("RunSchedule {0} is not ready: its conditions say what to fix")]
    NotReady(String),
    /// The rules of a tick refuse it.
    #[error(transparent)]
    NotNow(#[from] NotNow),
    /// The schedule journal could not record it.
    #[error("the schedule journal: {0}")]
    Store(#[from] crate::journal::durable::StoreError),
}

impl Scheduler {
    /// Claims a Run of the schedule `key` now, for `by`, under the rules of a tick
    /// ([`decide_now`]), and wakes the scheduler, which starts it on its next pass (here at
    /// once while this process leads; with replicas, the leader's next pass, within a minute).
    /// Returns the time the Run is scheduled for (its tick, in the Run's `job_id`).
    pub async fn run_now(&self, key: &ObjectKey, by: &str) -> Result<Timestamp, RunNowError> {
        let id = key_text(key);
        let catalog = self.parts.catalog.current();
        let Some((key, schedule)) = report::find(&catalog, &id).filter(|(found, _)| found == key) else {
            return Err(RunNowError::NotFound(id));
        };
        let plan = report::plan(&catalog, &key, &schedule, &self.parts.settings.tenancy, &self.parts.board)
            .ok_or_else(|| RunNowError::NotReady(id.clone()))?;
        let tick = self.tick_of(&key, &schedule, &plan);
        self.parts
            .store
            .decide(&id, |book, books| match decide_now(book, books, &tick, by) {
                Ok(entries) => (entries, Ok(())),
                Err(refused) => (Vec::new(), Err(refused)),
            })
            .await??;
        tracing::info!(component = "akritas_schedules", schedule = %id, requested_by = %by, scheduled = %tick.now, "a Run was asked for now");
        self.wake.notify_one();
        Ok(tick.now)
    }
}
