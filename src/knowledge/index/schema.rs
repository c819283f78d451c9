//! What an index is on disk: the tantivy schema of a chunk, and the metadata file next to the
//! tantivy files.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};

use super::types::{ChunkingParams, DocumentInfo, IndexError, io_err};

/// Metadata file written next to the tantivy files.
pub const META_FILE: &str = "akritas-index.json";
/// Version of [`META_FILE`].
pub const INDEX_VERSION: u32 = 1;
/// Query-time boost of the title field.
pub const TITLE_BOOST: f32 = 2.0;

/// Analyser of `title` and `body`: lower-case plus English stemming.
pub(super) const TOKENIZER: &str = "en_stem";
pub(super) const F_TITLE: &str = "title";
pub(super) const F_BODY: &str = "body";
pub(super) const F_DOCUMENT_ID: &str = "document_id";
pub(super) const F_DOC_ORD: &str = "doc_ord";
pub(super) const F_CHUNK: &str = "chunk";

/// The fields of a chunk document.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fields {
    /// The document's title, analysed, not stored.
    pub title: Field,
    /// The chunk's text, analysed and stored (for excerpts).
    pub body: Field,
    /// The document id, verbatim.
    pub document_id: Field,
    /// Index of the document in [`IndexMeta::documents`], a fast field.
    pub doc_ord: Field,
    /// Chunk number within the document.
    pub chunk: Field,
}

/// The tantivy schema of this version and its fields.
pub(super) fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let text_indexing = TextFieldIndexing::default()
        .set_tokenizer(TOKENIZER)
        .set_index_option(IndexRecordOption::WithFreqsAndPositions);
    let title = builder.add_text_field(F_TITLE, TextOptions::default().set_indexing_options(text_indexing.clone()));
    let body = builder.add_text_field(F_BODY, TextOptions::default().set_indexing_options(text_indexing).set_stored());
    let document_id = builder.add_text_field(F_DOCUMENT_ID, STRING | STORED);
    let doc_ord = builder.add_u64_field(F_DOC_ORD, NumericOptions::default().set_fast().set_stored());
    let chunk = builder.add_u64_field(F_CHUNK, NumericOptions::default().set_stored());
    (builder.build(), Fields { title, body, document_id, doc_ord, chunk })
}

/// The fields of a stored index's schema, which must be this version's; `path` names the
/// index in errors.
pub(super) fn fields_of(actual: &Schema, path: &Path) -> Result<Fields, IndexError> {
    let bad = |reason: String| IndexError::Metadata { path: path.to_owned(), reason };
    let field = |name: &str| actual.get_field(name).map_err(|_| bad(format!("tantivy schema lacks field {name}")));
    let fields = Fields {
        title: field(F_TITLE)?,
        body: field(F_BODY)?,
        document_id: field(F_DOCUMENT_ID)?,
        doc_ord: field(F_DOC_ORD)?,
        chunk: field(F_CHUNK)?,
    };
    if actual.num_fields() != schema().0.num_fields() {
        return Err(bad("tantivy schema does not match this version".to_owned()));
    }
    Ok(fields)
}

/// Contents of [`META_FILE`]; `documents` is sorted by id, and a chunk's `doc_ord` indexes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct IndexMeta {
    pub version: u32,
    pub chunk_chars: usize,
    pub overlap_chars: usize,
    pub content_sha256: String,
    #[serde(default)]
    pub manifest_sha256: Option<String>,
    pub documents: Vec<DocumentInfo>,
}

impl IndexMeta {
    /// Chunks the tantivy index must hold.
    pub fn chunks(&self) -> usize {
        self.documents.iter().map(|d| d.chunks as usize).sum()
    }

    /// Reads and checks `dir`'s [`META_FILE`]: this version, usable chunking.
    pub fn read(dir: &Path) -> Result<Self, IndexError> {
        let path = dir.join(META_FILE);
        let bad = |reason: String| IndexError::Metadata { path: path.clone(), reason };
        let raw = fs::read(&path).map_err(io_err(&path))?;
        let meta: Self = serde_json::from_slice(&raw).map_err(|e| bad(e.to_string()))?;
        if meta.version != INDEX_VERSION {
            return Err(bad(format!("unsupported version {}", meta.version)));
        }
        ChunkingParams { chunk_chars: meta.chunk_chars, overlap_chars: meta.overlap_chars }.validate()?;
        Ok(meta)
    }

    /// Writes `dir`'s [`META_FILE`] through a temporary file and a rename.
    pub fn write(&self, dir: &Path) -> Result<(), IndexError> {
        let path = dir.join(META_FILE);
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| IndexError::Metadata { path: path.clone(), reason: e.to_string() })?;
        let tmp = dir.join(format!("{META_FILE}.tmp"));
        fs::write(&tmp, json).map_err(io_err(&tmp))?;
        fs::rename(&tmp, &path).map_err(io_err(&path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_schema_indexes_text_and_stores_what_hits_need() {
        let (schema, fields) = schema();
        assert_eq!(schema.num_fields(), 5);
        let entry = |f: Field| schema.get_field_entry(f);
        for text in [fields.title, fields.body] {
            let indexing = entry(text).field_type().get_index_record_option();
            assert_eq!(indexing, Some(IndexRecordOption::WithFreqsAndPositions));
        }
        assert!(!entry(fields.title).is_stored(), "titles come from the metadata");
        assert!(entry(fields.body).is_stored(), "excerpts are cut from the stored body");
        assert!(entry(fields.doc_ord).is_fast(), "hits are grouped by document without loading it");
        assert!(entry(fields.document_id).is_indexed() && entry(fields.chunk).is_stored());
    }

    #[test]
    fn a_foreign_schema_is_refused_by_name() {
        let (ours, _) = schema();
        let fields = fields_of(&ours, Path::new("idx")).unwrap();
        assert_eq!(ours.get_field_name(fields.doc_ord), F_DOC_ORD);
        let mut builder = Schema::builder();
        builder.add_text_field(F_TITLE, STRING);
        let err = fields_of(&builder.build(), Path::new("idx")).unwrap_err();
        assert_eq!(err.to_string(), "invalid index idx: tantivy schema lacks field body");
        let mut builder = Schema::builder();
        for name in [F_TITLE, F_BODY, F_DOCUMENT_ID, F_DOC_ORD, F_CHUNK, "extra"] {
            builder.add_text_field(name, STRING);
        }
        let err = fields_of(&builder.build(), Path::new("idx")).unwrap_err();
        assert!(err.to_string().ends_with("does not match this version"), "{err}");
    }

    #[test]
    fn metadata_round_trips_and_refuses_other_versions() {
        let dir = tempfile::tempdir().unwrap();
        let meta = IndexMeta {
            version: INDEX_VERSION,
            chunk_chars: 100,
            overlap_chars: 10,
            content_sha256: "abc".into(),
            manifest_sha256: None,
            documents: vec![DocumentInfo {
                id: "a.md".into(),
                title: "A".into(),
                source: "s".into(),
                url: None,
                chunks: 3,
                chars: 250,
            }],
        };
        meta.write(dir.path()).unwrap();
        let read = IndexMeta::read(dir.path()).unwrap();
        assert_eq!((read.chunks(), read.documents, read.content_sha256), (3, meta.documents.clone(), "abc".into()));
        assert!(!dir.path().join(format!("{META_FILE}.tmp")).exists());
        IndexMeta { version: 2, ..meta.clone() }.write(dir.path()).unwrap();
        let err = IndexMeta::read(dir.path()).unwrap_err();
        assert!(err.to_string().ends_with("unsupported version 2"), "{err}");
        IndexMeta { overlap_chars: 100, ..meta }.write(dir.path()).unwrap();
        assert!(matches!(IndexMeta::read(dir.path()), Err(IndexError::InvalidParams(_))));
    }
}
