//! Local knowledge: importing runbooks and docs into a corpus, chunking, and BM25 search.

pub mod bases;
pub(crate) mod chunk;
pub(crate) mod corpus;
pub(crate) mod index;

pub use chunk::{Chunk, chunks};
pub use corpus::{
    CorpusError, Document, ImportCounts, ImportOptions, ImportReport, Manifest, SkipReason, Skipped, import,
    read_corpus, write_corpus,
};
pub use index::{ChunkingParams, DocumentInfo, Hit, IndexError, IndexStats, KnowledgeIndex, ListFilter, SourceStats};
