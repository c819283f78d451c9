//! Reads of the Run index: listings, one Run, counts.

use std::collections::BTreeMap;

use super::{AuditLog, MAX_LIST, RunId, RunRecord, RunStatus};

impl AuditLog {
    /// Runs, newest first, without raw tool payloads.
    pub fn list(&self, limit: usize) -> Vec<RunRecord> {
        self.list_where(limit, |_| true)
    }

    /// The newest `limit` Runs (at most [`MAX_LIST`]) of the namespaces `visible` accepts.
    pub fn list_where(&self, limit: usize, visible: impl Fn(&str) -> bool) -> Vec<RunRecord> {
        let state = self.shared.read();
        state
            .order
            .iter()
            .rev()
            .filter_map(|id| state.runs.get(id))
            .filter(|run| visible(&run.namespace))
            .take(limit.min(MAX_LIST))
            .map(RunRecord::summary)
            .collect()
    }

    /// Every Run `keep` accepts, oldest first, with its raw tool payloads (for start-up
    /// recovery: it looks at all Runs, not the newest [`MAX_LIST`]).
    pub fn runs_where(&self, keep: impl Fn(&RunRecord) -> bool) -> Vec<RunRecord> {
        let state = self.shared.read();
        state.order.iter().filter_map(|id| state.runs.get(id)).filter(|run| keep(run)).cloned().collect()
    }

    /// One Run with its raw tool payloads.
    pub fn get(&self, id: &RunId) -> Option<RunRecord> {
        self.shared.read().runs.get(id).cloned()
    }

    /// Runs by status (`running`, `succeeded`, `failed`).
    pub fn status_counts(&self) -> BTreeMap<&'static str, u64> {
        let state = self.shared.read();
        let mut counts = BTreeMap::from([("running", 0), ("succeeded", 0), ("failed", 0)]);
        for run in state.runs.values() {
            let name = match run.status {
                RunStatus::Running => "running",
                RunStatus::Succeeded => "succeeded",
                RunStatus::Failed => "failed",
            };
            *counts.entry(name).or_default() += 1;
        }
        counts
    }

    /// Number of Runs.
    pub fn len(&self) -> usize {
        self.shared.read().order.len()
    }

    /// Whether there are no Runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
