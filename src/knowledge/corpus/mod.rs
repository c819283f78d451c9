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

pub use document::{Document, sha256_hex};
pub use error::CorpusError;
pub use import::{ImportCounts, ImportOptions, ImportReport, SkipReason, Skipped, import};
pub use store::{Manifest, read_corpus, write_corpus};
