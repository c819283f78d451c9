//! The one error type of the journal.

use std::io;
use std::path::{Path, PathBuf};

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
    /// Another process (or handle) holds the journal open.
    #[error(
        "journal {path} is in use by another Akritas process (a running `akritas serve`, `ask` or `audit`); stop \
         it, or give this command its own --data-dir",
        path = path.display()
    )]
    Locked {
        /// The journal.
        path: PathBuf,
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
    /// A snapshot's checkpoint names a record the journal does not hold (retention deleted it, or the
    /// journal was replaced); the snapshot cannot be used.
    #[error("journal {path}: checkpoint at seq {seq} does not match: {reason}", path = path.display())]
    CheckpointMismatch {
        /// The journal.
        path: PathBuf,
        /// The checkpoint's seq.
        seq: u64,
        /// What differs.
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
    /// A write or fsync failed (no space left, a read-only filesystem, an I/O error), now or earlier: the
    /// record was not stored. The file was cut back to its last committed record; appends are refused until
    /// a recovery writes again.
    #[error("{}", unwritable_message(path, reason, *kind))]
    Unwritable {
        /// The journal file.
        path: PathBuf,
        /// The failed operation's error.
        reason: String,
        /// Its kind (`StorageFull`, `ReadOnlyFilesystem`, ...).
        kind: io::ErrorKind,
    },
}

impl JournalError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io { path: path.into(), source }
    }

    /// Whether this is a failure to write (disk full, read-only, I/O), which goes away once the storage
    /// can be written again; not a bad record or a closed journal.
    pub fn is_unwritable(&self) -> bool {
        matches!(self, Self::Unwritable { .. })
    }
}

/// What to do about a failed write, by its cause, naming the journal's directory.
fn unwritable_message(path: &Path, reason: &str, kind: io::ErrorKind) -> String {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let fix = match kind {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge => {
            format!("free space on the volume of {}", dir.display())
        }
        io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::PermissionDenied => {
            format!("make {} writable again", dir.display())
        }
        _ => format!("check the volume of {}", dir.display()),
    };
    format!(
        "journal {} cannot be written ({reason}); this record was not stored. {fix}: writes resume by themselves, \
         without a restart, once the storage accepts them",
        path.display()
    )
}
