//! Deferred investigations ([`crate::alerts::intake::admission`]): promoted to pending, most severe first,
//! then oldest, as their sources' rates and the pending-job cap allow. The worker asks every
//! second while any wait.

use std::time::Instant;

use crate::alerts::store::state::State;
use crate::alerts::store::{AlertStore, AlertStoreError, Job, Step};

impl AlertStore {
    /// Deferred jobs, host-wide.
    pub fn deferred_jobs(&self) -> usize {
        self.lock().deferred.len()
    }

    /// Promotes deferred jobs to pending, most severe first, then oldest, as far as their
    /// sources' rates and the pending-job cap allow now; returns how many. One promotion runs
    /// at a time.
    pub async fn promote_deferred(&self) -> Result<usize, AlertStoreError> {
        let _one = self.promoting.lock().await;
        let chosen: Vec<Job> = {
            let mut state = self.lock();
            let now = Instant::now();
            let State { deferred, admission, jobs, pending, .. } = &mut *state;
            let mut waiting = *pending;
            let mut chosen = Vec::new();
            for ((_, _, id), source) in deferred.iter() {
                if waiting >= admission.limits().max_pending_jobs {
                    break;
                }
                if let Some(job) = jobs.get(id).and_then(|slot| slot.live(id))
                    && admission.try_start(source, waiting, now)
                {
                    waiting += 1;
                    chosen.push(job);
                }
            }
            chosen
        };
        let promoted = chosen.len();
        for mut job in chosen {
            self.step(&mut job, Step::Promote).await?;
        }
        if promoted > 0 {
            self.wake();
        }
        Ok(promoted)
    }
}
