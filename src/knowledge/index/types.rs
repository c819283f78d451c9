//! The index's public values: errors, chunking, hits, listings and stats.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tantivy::TantivyError;

/// Largest accepted `top_k`.
pub const MAX_TOP_K: usize = 50;
/// Default excerpt bound, in characters.
pub const EXCERPT_CHARS: usize = 800;
/// Largest page of [`KnowledgeIndex::documents`](super::KnowledgeIndex::documents).
pub const MAX_LIST_LIMIT: usize = 10_000;

/// Errors of building, opening and searching an index.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Chunk sizes are unusable.
    #[error("invalid chunking: {0}")]
    InvalidParams(String),
    /// `top_k` outside `1..=MAX_TOP_K`.
    #[error("top_k must be between 1 and {MAX_TOP_K}, got {0}")]
    TopK(usize),
    /// The query has no searchable terms.
    #[error("query has no searchable terms")]
    EmptyQuery,
    /// Two documents share an id.
    #[error("duplicate document id {0:?}")]
    DuplicateDocument(String),
    /// Nothing to index.
    #[error("no indexable text in the documents")]
    Empty,
    /// The output directory exists and is not empty.
    #[error("index directory {0} is not empty; choose a missing or empty directory")]
    OutputNotEmpty(PathBuf),
    /// An index was to be replaced in a directory that does not hold one.
    #[error(
        "{0} is not empty and holds no index this tool wrote (no readable {META}, or subdirectories); \
         nothing in it was changed: choose another directory, or empty this one yourself",
        META = super::META_FILE
    )]
    NotAnIndex(PathBuf),
    /// A file system operation failed.
    #[error("{path}: {error}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error (part of the message, so not also a source).
        error: io::Error,
    },
    /// The metadata file is missing, malformed or does not fit the tantivy index.
    #[error("invalid index {path}: {reason}")]
    Metadata {
        /// The index directory or file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// tantivy failed.
    #[error("search engine: {0}")]
    Tantivy(#[from] TantivyError),
}

/// How documents are cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkingParams {
    /// Maximum chunk length in characters.
    pub chunk_chars: usize,
    /// Characters shared by consecutive chunks; below `chunk_chars`.
    pub overlap_chars: usize,
}

impl Default for ChunkingParams {
    fn default() -> Self {
        Self { chunk_chars: 1200, overlap_chars: 150 }
    }
}

impl ChunkingParams {
    /// Requires `chunk_chars > overlap_chars` and `chunk_chars > 0`.
    pub fn validate(&self) -> Result<(), IndexError> {
        if self.chunk_chars == 0 || self.overlap_chars >= self.chunk_chars {
            return Err(IndexError::InvalidParams(format!(
                "need chunk_chars > overlap_chars >= 0, got chunk_chars={} overlap_chars={}",
                self.chunk_chars, self.overlap_chars
            )));
        }
        Ok(())
    }
}

/// One search result: the best chunk of one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// Document id.
    pub document_id: String,
    /// Document title.
    pub title: String,
    /// Source label.
    pub source: String,
    /// Link to the original, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Chunk number within the document.
    pub chunk: u32,
    /// BM25 score (higher is better).
    pub score: f32,
    /// Whitespace-compacted excerpt of the chunk, centred on the query terms when it had to be cut.
    pub excerpt: String,
}

/// One indexed document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentInfo {
    /// Document id.
    pub id: String,
    /// Front matter `title:`, else the first heading, else the file stem.
    pub title: String,
    /// Source label.
    pub source: String,
    /// Link to the original, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Indexed chunks.
    pub chunks: u32,
    /// Characters of text.
    pub chars: usize,
}

/// Per-source tallies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStats {
    /// Documents from this source.
    pub documents: usize,
    /// Chunks from this source.
    pub chunks: usize,
}

/// Summary of an index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexStats {
    /// Documents in the index, each cut into one or more of `chunks`.
    pub documents: usize,
    /// Indexed chunks.
    pub chunks: usize,
    /// Chunk length used.
    pub chunk_chars: usize,
    /// Overlap used.
    pub overlap_chars: usize,
    /// Deterministic hash of the ids, text hashes and chunking (see [`content_sha256`](super::content_sha256)).
    pub content_sha256: String,
    /// Hash of the corpus the index was built from, if known.
    pub manifest_sha256: Option<String>,
    /// Tallies per source label.
    pub sources: BTreeMap<String, SourceStats>,
}

/// Case-insensitive substring filters of [`KnowledgeIndex::documents`](super::KnowledgeIndex::documents); empty = any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Substring of the id.
    pub id: Option<String>,
    /// Substring of the title.
    pub title: Option<String>,
    /// Substring of the source.
    pub source: Option<String>,
}

impl ListFilter {
    pub(super) fn matches(&self, doc: &DocumentInfo) -> bool {
        let has = |hay: &str, needle: &Option<String>| {
            needle.as_deref().is_none_or(|n| hay.to_lowercase().contains(&n.to_lowercase()))
        };
        has(&doc.id, &self.id) && has(&doc.title, &self.title) && has(&doc.source, &self.source)
    }
}

/// Wraps an IO error with the path it concerns.
pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> IndexError + '_ {
    move |error| IndexError::Io { path: path.to_owned(), error }
}
