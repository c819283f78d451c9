//! Importing local documents (runbooks, docs, code) into a verified corpus directory.
//!
//! A corpus is `documents.jsonl` (one [`Document`] per line) plus `manifest.json` holding the
//! SHA-256 of that file, so a reader can tell when it was altered.

mod document;
mod error;
mod import;
mod store;

#[cfg(test)]
mod fixtures;

pub use document::{Document, normalise, sha256_hex, title_of};
pub use error::CorpusError;
pub use import::{
    DEFAULT_EXCLUDE_DIRS, DEFAULT_EXTENSIONS, ImportCounts, ImportOptions, ImportReport, SkipReason, Skipped, import,
};
pub use store::{
    CORPUS_VERSION, DOCUMENTS_FILE, MANIFEST_FILE, Manifest, prepare_output_dir, read_corpus, write_corpus,
};
