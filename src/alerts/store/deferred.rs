//! Deferred investigations ([`crate::alerts::intake::admission`]): promoted to pending, most severe first,
//! then oldest, as their sources' rates and the pending-job caps (host-wide and per namespace)
//! allow. The worker asks every second while any wait.

use std::collections::HashMap;
use std::time::Instant;

use crate::alerts::intake::admission::Pending;
use crate::alerts::store::state::State;
use crate::alerts::store::{AlertStore, AlertStoreError, Job, Step};

impl AlertStore {
    /// Deferred jobs, host-wide.
    pub fn deferred_jobs(&self) -> usize {
        self.lock().deferred.len()
    }

    /// Promotes deferred jobs to pending, most severe first, then oldest, as far as their
    /// sources' rates and the pending-job caps allow now; returns how many. One promotion runs
    /// at a time.
    pub async fn promote_deferred(&self) -> Result<usize, AlertStoreError> {
        let _one = self.promoting.lock().await;
        let chosen: Vec<Job> = {
            let mut state = self.lock();
            let now = Instant::now();
            let State { deferred, admission, jobs, queue, .. } = &mut *state;
            let mut host = queue.pending();
            // Promoted here, per namespace.
            let mut promoted: HashMap<&str, usize> = HashMap::new();
            let mut chosen = Vec::new();
            for ((_, _, id), source) in deferred.iter() {
                if host >= admission.limits().max_pending_jobs {
                    break;
                }
                let namespace = source.split_once('/').map_or("", |(namespace, _)| namespace);
                let here = promoted.get(namespace).copied().unwrap_or_default();
                let waiting = Pending { host, namespace: queue.pending_in(namespace) + here };
                if let Some(job) = jobs.get(id).and_then(|slot| slot.live(id))
                    && admission.try_start(source, waiting, now)
                {
                    host += 1;
                    *promoted.entry(namespace).or_default() += 1;
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
