//! Reads of the Run index: listings, one Run, counts. Run detail is read from the
//! journal by the locations the index keeps.

use std::collections::{BTreeMap, BTreeSet};

use super::file::FileAudit;
use super::index::load_run;
use super::{AuditError, AuditLog, Backend, MAX_LIST, RunId, RunRecord};
use crate::journal::Location;

impl FileAudit {
    /// The newest `limit` Runs (at most [`MAX_LIST`]) of the namespaces `visible` accepts,
    /// read from the journal.
    pub(super) fn list_where(&self, limit: usize, visible: impl Fn(&str) -> bool) -> Vec<RunRecord> {
        let runs = self.shared.read().index.newest(limit.min(MAX_LIST), visible);
        runs.iter().filter_map(|locations| self.read_run(locations)).map(|run| run.summary()).collect()
    }

    /// The Runs made for these alert jobs (`job_id` metadata), oldest first, with their raw
    /// tool payloads (for start-up recovery: it looks at all Runs, not the newest [`MAX_LIST`]).
    pub(super) fn runs_of_jobs(&self, jobs: &BTreeSet<&str>) -> Vec<RunRecord> {
        let runs = self.shared.read().index.of_jobs(jobs);
        runs.iter().filter_map(|locations| self.read_run(locations)).collect()
    }

    /// One Run with its raw tool payloads, read from the journal.
    pub(super) fn get(&self, id: &RunId) -> Option<RunRecord> {
        let locations = self.shared.read().index.locations(id)?;
        self.read_run(&locations)
    }

    /// The namespace of a Run, from the index (no read of the journal).
    pub(super) fn namespace_of(&self, id: &RunId) -> Option<String> {
        self.shared.read().index.namespace(id).map(str::to_string)
    }

    /// Rebuilds a Run from its records; `None` (logged) when they cannot be read (retention
    /// removed them meanwhile, or the storage fails).
    fn read_run(&self, locations: &[Location]) -> Option<RunRecord> {
        match load_run(locations, &|at| self.shared.journal.read_at(at)) {
            Ok(run) => Some(run),
            Err(error) => {
                tracing::warn!(path = %self.shared.journal.path().display(), %error, "cannot read a Run from the audit journal");
                None
            }
        }
    }

    /// Runs by status (`running`, `succeeded`, `failed`).
    pub(super) fn status_counts(&self) -> BTreeMap<&'static str, u64> {
        self.shared.read().index.status_counts()
    }

    /// Number of Runs.
    pub(super) fn len(&self) -> usize {
        self.shared.read().index.len()
    }
}

/// The reads, on either backend. On the database a read fails when the database does.
impl AuditLog {
    /// Runs, newest first, without raw tool payloads.
    pub async fn list(&self, limit: usize) -> Result<Vec<RunRecord>, AuditError> {
        self.list_where(limit, |_| true).await
    }

    /// The newest `limit` Runs (at most [`MAX_LIST`]) of the namespaces `visible` accepts.
    pub async fn list_where(
        &self,
        limit: usize,
        visible: impl Fn(&str) -> bool + Send + Sync,
    ) -> Result<Vec<RunRecord>, AuditError> {
        match &self.backend {
            Backend::File(file) => Ok(file.list_where(limit, visible)),
            Backend::Database(db) => db.list_where(limit, &visible).await,
        }
    }

    /// The Runs made for these alert jobs (`job_id` metadata), oldest first, with their raw
    /// tool payloads (for start-up recovery: it looks at all Runs, not the newest [`MAX_LIST`]).
    pub async fn runs_of_jobs(&self, jobs: &BTreeSet<&str>) -> Result<Vec<RunRecord>, AuditError> {
        match &self.backend {
            Backend::File(file) => Ok(file.runs_of_jobs(jobs)),
            Backend::Database(db) => db.runs_of_jobs(jobs).await,
        }
    }

    /// One Run with its raw tool payloads.
    pub async fn get(&self, id: &RunId) -> Result<Option<RunRecord>, AuditError> {
        match &self.backend {
            Backend::File(file) => Ok(file.get(id)),
            Backend::Database(db) => db.get(id).await,
        }
    }

    /// The namespace of a Run (on the embedded journal, from the index).
    pub async fn namespace_of(&self, id: &RunId) -> Result<Option<String>, AuditError> {
        match &self.backend {
            Backend::File(file) => Ok(file.namespace_of(id)),
            Backend::Database(db) => db.namespace_of(id).await,
        }
    }

    /// Runs by status (`running`, `succeeded`, `failed`).
    pub async fn status_counts(&self) -> Result<BTreeMap<&'static str, u64>, AuditError> {
        match &self.backend {
            Backend::File(file) => Ok(file.status_counts()),
            Backend::Database(db) => db.status_counts().await,
        }
    }

    /// Number of Runs.
    pub async fn len(&self) -> Result<usize, AuditError> {
        match &self.backend {
            Backend::File(file) => Ok(file.len()),
            Backend::Database(db) => db.len().await,
        }
    }

    /// Whether there are no Runs.
    pub async fn is_empty(&self) -> Result<bool, AuditError> {
        Ok(self.len().await? == 0)
    }
}
