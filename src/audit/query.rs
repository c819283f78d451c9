//! Reads of the Run index: listings, one Run, counts. Run detail is read from the
//! journal by the locations the index keeps.

use std::collections::{BTreeMap, BTreeSet};

use super::index::load_run;
use super::{AuditLog, MAX_LIST, RunId, RunRecord};
use crate::journal::Location;

impl AuditLog {
    /// Runs, newest first, without raw tool payloads.
    pub fn list(&self, limit: usize) -> Vec<RunRecord> {
        self.list_where(limit, |_| true)
    }

    /// The newest `limit` Runs (at most [`MAX_LIST`]) of the namespaces `visible` accepts,
    /// read from the journal.
    pub fn list_where(&self, limit: usize, visible: impl Fn(&str) -> bool) -> Vec<RunRecord> {
        let runs = self.shared.read().index.newest(limit.min(MAX_LIST), visible);
        runs.iter().filter_map(|locations| self.read_run(locations)).map(|run| run.summary()).collect()
    }

    /// The Runs made for these alert jobs (`job_id` metadata), oldest first, with their raw
    /// tool payloads (for start-up recovery: it looks at all Runs, not the newest [`MAX_LIST`]).
    pub fn runs_of_jobs(&self, jobs: &BTreeSet<&str>) -> Vec<RunRecord> {
        let runs = self.shared.read().index.of_jobs(jobs);
        runs.iter().filter_map(|locations| self.read_run(locations)).collect()
    }

    /// One Run with its raw tool payloads, read from the journal.
    pub fn get(&self, id: &RunId) -> Option<RunRecord> {
        let locations = self.shared.read().index.locations(id)?;
        self.read_run(&locations)
    }

    /// The namespace of a Run, from the index (no read of the journal).
    pub fn namespace_of(&self, id: &RunId) -> Option<String> {
        self.shared.read().index.namespace(id).map(str::to_string)
    }

    /// Rebuilds a Run from its records; `None` (logged) when they cannot be read (retention
    /// removed them meanwhile, or the storage fails).
    fn read_run(&self, locations: &[Location]) -> Option<RunRecord> {
        match load_run(locations, &|at| self.shared.journal.read_at(at)) {
            Ok(run) => Some(run),
            Err(error) => {
                tracing::warn!(path = %self.path().display(), %error, "cannot read a Run from the audit journal");
                None
            }
        }
    }

    /// Runs by status (`running`, `succeeded`, `failed`).
    pub fn status_counts(&self) -> BTreeMap<&'static str, u64> {
        self.shared.read().index.status_counts()
    }

    /// Number of Runs.
    pub fn len(&self) -> usize {
        self.shared.read().index.len()
    }

    /// Whether there are no Runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
