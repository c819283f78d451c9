//! The one error type of the journal.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while opening, appending to or verifying a journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// An I/O operation on the journal file or its directory failed.
    #[error("journal {path}: {source}", path = path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A complete (newline-terminated) line failed verification.
    #[error(
        "journal {path} is corrupt at line {line} (byte offset {offset}): {reason}; the file was altered or damaged. \
         Run `akritas audit verify {path}` and restore the journal from backup",
        path = path.display()
    )]
    Corrupt {
        /// The journal file.
        path: PathBuf,
        /// 1-based line number of the first bad line.
        line: usize,
        /// Byte offset at which that line starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The serialized record line would exceed the configured limit; nothing was written.
    #[error("journal record is {size} bytes, over the limit of {limit} bytes")]
    RecordTooLarge {
        /// Size of the serialized line (at least; including its newline).
        size: usize,
        /// The configured `max_record_bytes`.
        limit: usize,
    },
    /// The record kind is not `^[a-z][a-z0-9_.]{0,63}$`, or an application kind uses the reserved `journal.` prefix.
    #[error("invalid journal record kind {0:?}: must match ^[a-z][a-z0-9_.]{{0,63}}$ and not start with \"journal.\"")]
    InvalidKind(String),
    /// The journal was closed (or its writer stopped); no more appends are accepted.
    #[error("journal is closed")]
    Closed,
    /// An earlier write or fsync failed, so the on-disk state is unknown and the journal refuses further appends.
    #[error(
        "journal {path} refuses appends: an earlier write failed ({reason}), so its on-disk state is unknown; \
         reopen it to verify",
        path = path.display()
    )]
    Poisoned {
        /// The journal file.
        path: PathBuf,
        /// The failure that poisoned it.
        reason: String,
    },
}

impl JournalError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io { path: path.into(), source }
    }
}
