//! What can go wrong importing, writing and reading a corpus.

use std::io;
use std::path::{Path, PathBuf};

/// Errors of corpus import, writing and reading.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The input root is not a directory.
    #[error("input {0} is not a directory")]
    NotADirectory(PathBuf),
    /// The output directory exists and is not empty.
    #[error("output directory {0} is not empty")]
    OutputNotEmpty(PathBuf),
    /// The output directory is the input or lies inside it.
    #[error("output directory {output} is inside the input {input}")]
    OutputInsideInput {
        /// The output directory.
        output: PathBuf,
        /// The input root.
        input: PathBuf,
    },
    /// Nothing was accepted, so there is no corpus to write.
    #[error("no documents to write")]
    Empty,
    /// `manifest.json` or a document line is malformed.
    #[error("invalid corpus {path}: {reason}")]
    Invalid {
        /// The file involved.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `documents.jsonl` does not match the manifest's hash.
    #[error("corpus {path} was altered: sha256 {actual} does not match manifest {expected}")]
    ShaMismatch {
        /// The documents file.
        path: PathBuf,
        /// Hash recorded in the manifest.
        expected: String,
        /// Hash of the file as read.
        actual: String,
    },
}

/// Wraps an IO error with the path it concerns.
pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CorpusError + '_ {
    move |source| CorpusError::Io { path: path.to_owned(), source }
}
