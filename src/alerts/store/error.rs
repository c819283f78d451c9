//! Failures of the alert store.

use std::path::Path;

use crate::alerts::store::state::RecordError;
use crate::journal::JournalError;

/// Alert store failures.
#[derive(Debug, thiserror::Error)]
pub enum AlertStoreError {
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A record cannot be applied.
    #[error(
        "alert journal {path}: record {seq} is inconsistent: {reason}; run `akritas audit verify {path}` and restore from backup"
    )]
    Inconsistent {
        /// The journal file, or `database:alerts` for the store in the database.
        path: String,
        /// Record sequence number.
        seq: u64,
        /// Why the record could not be applied: a bad shape, an unknown job or kind, or another
        /// correlation outcome than the one recorded.
        reason: RecordError,
    },
    /// Retention removed the start of the journal and the snapshot that replaces it is missing or does not match.
    #[error(
        "alert journal {path} starts at record {first_seq} (retention removed the older ones) and its snapshot \
         {path}.snapshot is missing or does not match the journal: restore the snapshot from the same backup as the \
         journal, or move the journal's files aside to start with an empty alert history"
    )]
    NoSnapshot {
        /// The journal file (its snapshot is `<path>.snapshot`), or `database:alerts`.
        path: String,
        /// Seq of the oldest record kept.
        first_seq: u64,
    },
    /// A journal write failed and the store has not recovered yet; nothing of the request was stored.
    #[error("{0}")]
    Unavailable(String),
    /// The database failed (unreachable, or a statement refused); nothing of the request was
    /// stored, or the state is rebuilt from the database before the next decision.
    #[error("the alert store's database: {0}")]
    Database(#[from] crate::journal::database::DatabaseError),
    /// Another replica took a step on the job first (it is `status` there now); nothing was
    /// stored.
    #[error("job {job} is {status:?} now: another replica took a step on it first")]
    Taken {
        /// The job.
        job: String,
        /// Its status in the database.
        status: crate::alerts::store::job::JobStatus,
    },
    /// The delivery's signature was accepted already (a replay); nothing was stored.
    #[error("{}", crate::alerts::intake::signature::SignatureError::Replayed)]
    Replayed,
    /// A job step its status does not allow; nothing was stored.
    #[error(transparent)]
    IllegalStep(#[from] crate::alerts::store::job::IllegalStep),
}

pub(super) fn inconsistent(path: &Path, (seq, reason): (u64, RecordError)) -> AlertStoreError {
    AlertStoreError::Inconsistent { path: path.display().to_string(), seq, reason }
}

/// The store's error for a failed load.
pub(super) fn load_error(path: &Path, error: LoadError) -> AlertStoreError {
    match error {
        LoadError::Journal(e) => e.into(),
        LoadError::Replay { seq, reason } => inconsistent(path, (seq, reason)),
        LoadError::NoSnapshot { first_seq } => {
            AlertStoreError::NoSnapshot { path: path.display().to_string(), first_seq }
        }
    }
}

/// Why loading failed.
pub(crate) type LoadError = crate::journal::snapshot::RestoreError<RecordError>;
