//! BM25 search over document chunks with tantivy, in RAM or on disk.
//!
//! Every chunk is one tantivy document: `title` (boosted ×2 at query time) and `body` are analysed
//! with tantivy's `en_stem` analyser (lower-case + English stemming). Plain-word queries become a flat
//! BM25 term union; queries with `"phrases"` or `+`/`-` words go through tantivy's lenient parser. Per-document metadata lives in
//! `akritas-index.json` next to the tantivy files; results carry one hit (the best chunk) per document.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tantivy::collector::TopDocs;
use tantivy::indexer::NoMergePolicy;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, TantivyError, Term};

use super::chunk::chunks;
use super::corpus::{Document, sha256_hex};

/// Metadata file written next to the tantivy files.
pub const META_FILE: &str = "akritas-index.json";
/// Version of [`META_FILE`].
pub const INDEX_VERSION: u32 = 1;
/// Largest accepted `top_k`.
pub const MAX_TOP_K: usize = 50;
/// Default excerpt bound, in characters.
pub const EXCERPT_CHARS: usize = 800;
/// Largest page of [`KnowledgeIndex::documents`].
pub const MAX_LIST_LIMIT: usize = 10_000;
/// Query-time boost of the title field.
pub const TITLE_BOOST: f32 = 2.0;

const TOKENIZER: &str = "en_stem";
const WRITER_MEMORY: usize = 50_000_000;
const F_TITLE: &str = "title";
const F_BODY: &str = "body";
const F_DOCUMENT_ID: &str = "document_id";
const F_DOC_ORD: &str = "doc_ord";
const F_CHUNK: &str = "chunk";

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
    #[error("index directory {0} is not empty")]
    OutputNotEmpty(PathBuf),
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
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
    /// Title.
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
    /// Documents.
    pub documents: usize,
    /// Indexed chunks.
    pub chunks: usize,
    /// Chunk length used.
    pub chunk_chars: usize,
    /// Overlap used.
    pub overlap_chars: usize,
    /// Deterministic hash of the ids, text hashes and chunking (see [`content_sha256`]).
    pub content_sha256: String,
    /// Hash of the corpus the index was built from, if known.
    pub manifest_sha256: Option<String>,
    /// Tallies per source label.
    pub sources: BTreeMap<String, SourceStats>,
}

/// Case-insensitive substring filters of [`KnowledgeIndex::documents`]; empty = any.
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
    fn matches(&self, doc: &DocumentInfo) -> bool {
        let has = |hay: &str, needle: &Option<String>| {
            needle.as_deref().is_none_or(|n| hay.to_lowercase().contains(&n.to_lowercase()))
        };
        has(&doc.id, &self.id) && has(&doc.title, &self.title) && has(&doc.source, &self.source)
    }
}

/// Contents of [`META_FILE`]; `documents` is sorted by id, and a chunk's `doc_ord` indexes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct IndexMeta {
    version: u32,
    chunk_chars: usize,
    overlap_chars: usize,
    content_sha256: String,
    #[serde(default)]
    manifest_sha256: Option<String>,
    documents: Vec<DocumentInfo>,
}

#[derive(Clone, Copy)]
struct Fields {
    title: Field,
    body: Field,
    document_id: Field,
    doc_ord: Field,
    chunk: Field,
}

struct Inner {
    reader: IndexReader,
    fields: Fields,
    parser: QueryParser,
    analyzer: TextAnalyzer,
    meta: IndexMeta,
    /// Indices into `meta.documents` in listing order (title, source, id; case-insensitive).
    list_order: Vec<usize>,
    _index: Index,
}

/// A searchable knowledge index; cheap to clone and shareable across threads.
#[derive(Clone)]
pub struct KnowledgeIndex {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KnowledgeIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnowledgeIndex")
            .field("documents", &self.inner.meta.documents.len())
            .field("content_sha256", &self.inner.meta.content_sha256)
            .finish_non_exhaustive()
    }
}

fn schema() -> (Schema, Fields) {
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

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> IndexError + '_ {
    move |source| IndexError::Io { path: path.to_owned(), source }
}

/// Deterministic hash of an index's content: sorted ids, SHA-256 of each text, and the chunking.
pub fn content_sha256(docs: &[Document], params: ChunkingParams) -> String {
    let mut entries: Vec<(&str, String)> =
        docs.iter().map(|d| (d.id.as_str(), sha256_hex(d.text.as_bytes()))).collect();
    entries.sort();
    let mut hasher = Sha256::new();
    hasher.update(b"akritas-index-v1\n");
    for (id, text_sha) in entries {
        hasher.update(id.as_bytes());
        hasher.update(b"\0");
        hasher.update(text_sha.as_bytes());
        hasher.update(b"\n");
    }
    hasher.update(format!("chunk_chars={} overlap_chars={}\n", params.chunk_chars, params.overlap_chars));
    hex::encode(hasher.finalize())
}

impl KnowledgeIndex {
    /// Builds an index held in memory.
    pub fn build_in_ram(docs: &[Document], params: ChunkingParams) -> Result<Self, IndexError> {
        params.validate()?;
        let (schema, fields) = schema();
        let index = Index::create_in_ram(schema);
        let meta = fill(&index, fields, docs, params, None)?;
        Self::from_parts(index, fields, meta)
    }

    /// Builds an index in `dir` (missing or empty): tantivy files plus [`META_FILE`].
    pub fn build_on_disk(
        dir: &Path,
        docs: &[Document],
        params: ChunkingParams,
        manifest_sha256: Option<String>,
    ) -> Result<Self, IndexError> {
        params.validate()?;
        match fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(IndexError::OutputNotEmpty(dir.to_owned()));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dir).map_err(io_err(dir))?,
            Err(e) => return Err(IndexError::Io { path: dir.to_owned(), source: e }),
        }
        let (schema, fields) = schema();
        let index = Index::create_in_dir(dir, schema)?;
        let meta = fill(&index, fields, docs, params, manifest_sha256)?;
        let json = serde_json::to_vec_pretty(&meta)
            .map_err(|e| IndexError::Metadata { path: dir.join(META_FILE), reason: e.to_string() })?;
        let path = dir.join(META_FILE);
        let tmp = dir.join(format!("{META_FILE}.tmp"));
        fs::write(&tmp, json).map_err(io_err(&tmp))?;
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        Self::from_parts(index, fields, meta)
    }

    /// Opens an index written by [`KnowledgeIndex::build_on_disk`].
    pub fn open(dir: &Path) -> Result<Self, IndexError> {
        let path = dir.join(META_FILE);
        let bad = |reason: String| IndexError::Metadata { path: path.clone(), reason };
        let raw = fs::read(&path).map_err(io_err(&path))?;
        let meta: IndexMeta = serde_json::from_slice(&raw).map_err(|e| bad(e.to_string()))?;
        if meta.version != INDEX_VERSION {
            return Err(bad(format!("unsupported version {}", meta.version)));
        }
        ChunkingParams { chunk_chars: meta.chunk_chars, overlap_chars: meta.overlap_chars }.validate()?;
        let index = Index::open_in_dir(dir)?;
        let (expected, _) = schema();
        let actual = index.schema();
        let field = |name: &str| actual.get_field(name).map_err(|_| bad(format!("tantivy schema lacks field {name}")));
        let fields = Fields {
            title: field(F_TITLE)?,
            body: field(F_BODY)?,
            document_id: field(F_DOCUMENT_ID)?,
            doc_ord: field(F_DOC_ORD)?,
            chunk: field(F_CHUNK)?,
        };
        if actual.num_fields() != expected.num_fields() {
            return Err(bad("tantivy schema does not match this version".to_owned()));
        }
        let this = Self::from_parts(index, fields, meta)?;
        let chunks: usize = this.inner.meta.documents.iter().map(|d| d.chunks as usize).sum();
        let indexed = this.inner.reader.searcher().num_docs();
        if u64::try_from(chunks).ok() != Some(indexed) {
            return Err(bad(format!("metadata lists {chunks} chunks, tantivy holds {indexed}")));
        }
        Ok(this)
    }

    fn from_parts(index: Index, fields: Fields, meta: IndexMeta) -> Result<Self, IndexError> {
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        reader.reload()?;
        let mut parser = QueryParser::for_index(&index, vec![fields.title, fields.body]);
        parser.set_field_boost(fields.title, TITLE_BOOST);
        let analyzer = index.tokenizer_for_field(fields.body)?;
        let mut list_order: Vec<usize> = (0..meta.documents.len()).collect();
        let key = |d: &DocumentInfo| (d.title.to_lowercase(), d.source.clone(), d.id.clone());
        list_order.sort_by_cached_key(|&i| key(&meta.documents[i]));
        Ok(Self { inner: Arc::new(Inner { reader, fields, parser, analyzer, meta, list_order, _index: index }) })
    }

    /// Searches for `query` and returns at most `top_k` (1..=50) documents, best first, each with its
    /// best chunk. Plain words are OR-ed; `"phrases"` and `+`/`-` words use tantivy's query syntax,
    /// parsed leniently, so no input is a syntax error.
    pub fn search(&self, query: &str, top_k: usize) -> Result<Vec<Hit>, IndexError> {
        self.search_with_excerpt(query, top_k, EXCERPT_CHARS)
    }

    /// Like [`KnowledgeIndex::search`] with excerpts bounded to `excerpt_chars` (at least 16).
    pub fn search_with_excerpt(&self, query: &str, top_k: usize, excerpt_chars: usize) -> Result<Vec<Hit>, IndexError> {
        if !(1..=MAX_TOP_K).contains(&top_k) {
            return Err(IndexError::TopK(top_k));
        }
        let inner = &*self.inner;
        let terms = analyse(&inner.analyzer, query);
        if terms.is_empty() {
            return Err(IndexError::EmptyQuery);
        }
        let parsed = if uses_syntax(query) {
            let (parsed, errors) = inner.parser.parse_query_lenient(query);
            if !errors.is_empty() {
                tracing::debug!(?errors, "lenient query parse dropped parts of the query");
            }
            parsed
        } else {
            term_union(inner.fields, &terms)
        };
        let searcher = inner.reader.searcher();
        let total = usize::try_from(searcher.num_docs()).unwrap_or(usize::MAX).max(1);
        // Fetch a few chunks per wanted document; widen until `top_k` distinct documents or all hits.
        let mut limit = (top_k * 4).min(total);
        let best = loop {
            let top = searcher.search(&*parsed, &TopDocs::with_limit(limit).order_by_score())?;
            let exhausted = top.len() < limit || limit >= total;
            let mut best: Vec<(f32, u64, DocAddress)> = Vec::new();
            let mut seen = HashSet::new();
            let mut columns = HashMap::new();
            for (score, addr) in top {
                let column = match columns.entry(addr.segment_ord) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(searcher.segment_reader(addr.segment_ord).fast_fields().u64(F_DOC_ORD)?)
                    }
                };
                let Some(ord) = column.first(addr.doc_id) else { continue };
                if seen.insert(ord) {
                    best.push((score, ord, addr));
                }
            }
            if best.len() >= top_k || exhausted {
                break best;
            }
            limit = (limit * 4).min(total);
        };
        let mut best = best;
        best.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        best.truncate(top_k);
        let query_terms: HashSet<String> = terms.into_iter().collect();
        let mut hits = Vec::with_capacity(best.len());
        for (score, ord, addr) in best {
            let Some(info) = usize::try_from(ord).ok().and_then(|i| inner.meta.documents.get(i)) else {
                return Err(IndexError::Metadata {
                    path: PathBuf::from(META_FILE),
                    reason: format!("chunk refers to unknown document {ord}"),
                });
            };
            let doc: TantivyDocument = searcher.doc(addr)?;
            let body = doc.get_first(inner.fields.body).and_then(|v| v.as_str()).unwrap_or_default();
            let chunk = doc.get_first(inner.fields.chunk).and_then(|v| v.as_u64()).unwrap_or_default();
            hits.push(Hit {
                document_id: info.id.clone(),
                title: info.title.clone(),
                source: info.source.clone(),
                url: info.url.clone(),
                chunk: u32::try_from(chunk).unwrap_or(u32::MAX),
                score,
                excerpt: excerpt(&inner.analyzer, body, &query_terms, excerpt_chars.max(16)),
            });
        }
        Ok(hits)
    }

    /// Counts and parameters of the index.
    pub fn stats(&self) -> IndexStats {
        let meta = &self.inner.meta;
        let mut sources: BTreeMap<String, SourceStats> = BTreeMap::new();
        for doc in &meta.documents {
            let entry = sources.entry(doc.source.clone()).or_default();
            entry.documents += 1;
            entry.chunks += doc.chunks as usize;
        }
        IndexStats {
            documents: meta.documents.len(),
            chunks: sources.values().map(|s| s.chunks).sum(),
            chunk_chars: meta.chunk_chars,
            overlap_chars: meta.overlap_chars,
            content_sha256: meta.content_sha256.clone(),
            manifest_sha256: meta.manifest_sha256.clone(),
            sources,
        }
    }

    /// Documents matching `filter`, sorted by title, source, id (case-insensitive); `limit` is capped
    /// at [`MAX_LIST_LIMIT`].
    pub fn documents(&self, filter: &ListFilter, offset: usize, limit: usize) -> Vec<DocumentInfo> {
        let docs = &self.inner.meta.documents;
        self.inner
            .list_order
            .iter()
            .map(|&i| &docs[i])
            .filter(|d| filter.matches(d))
            .skip(offset)
            .take(limit.min(MAX_LIST_LIMIT))
            .cloned()
            .collect()
    }

    /// Number of documents matching `filter`.
    pub fn count_documents(&self, filter: &ListFilter) -> usize {
        self.inner.meta.documents.iter().filter(|d| filter.matches(d)).count()
    }
}

/// Chunks and indexes `docs`, returning the metadata to keep.
fn fill(
    index: &Index,
    fields: Fields,
    docs: &[Document],
    params: ChunkingParams,
    manifest_sha256: Option<String>,
) -> Result<IndexMeta, IndexError> {
    let mut sorted: Vec<&Document> = docs.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(pair) = sorted.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(IndexError::DuplicateDocument(pair[0].id.clone()));
    }
    let mut writer: IndexWriter<TantivyDocument> = index.writer_with_num_threads(1, WRITER_MEMORY)?;
    writer.set_merge_policy(Box::new(NoMergePolicy));
    let mut infos = Vec::with_capacity(sorted.len());
    let mut total = 0usize;
    for (ord, doc) in sorted.iter().enumerate() {
        let mut indexed = 0u32;
        for chunk in chunks(&doc.text, params.chunk_chars, params.overlap_chars) {
            if !chunk.text.chars().any(char::is_alphanumeric) {
                continue;
            }
            let mut td = TantivyDocument::default();
            td.add_text(fields.title, &doc.title);
            td.add_text(fields.body, &chunk.text);
            td.add_text(fields.document_id, &doc.id);
            td.add_u64(fields.doc_ord, ord as u64);
            td.add_u64(fields.chunk, u64::from(chunk.index));
            writer.add_document(td)?;
            indexed += 1;
        }
        total += indexed as usize;
        infos.push(DocumentInfo {
            id: doc.id.clone(),
            title: doc.title.clone(),
            source: doc.source.clone(),
            url: doc.url.clone(),
            chunks: indexed,
            chars: doc.text.chars().count(),
        });
    }
    if total == 0 {
        return Err(IndexError::Empty);
    }
    writer.commit()?;
    let segments = index.searchable_segment_ids()?;
    if segments.len() > 1 {
        writer.merge(&segments).wait()?;
    }
    writer.wait_merging_threads()?;
    Ok(IndexMeta {
        version: INDEX_VERSION,
        chunk_chars: params.chunk_chars,
        overlap_chars: params.overlap_chars,
        content_sha256: content_sha256(docs, params),
        manifest_sha256,
        documents: infos,
    })
}

/// Whether `query` asks for tantivy query syntax: a `"phrase"` or a `+required`/`-excluded` word.
/// Anything else is treated as plain words (so `error: timeout` is not a field query).
fn uses_syntax(query: &str) -> bool {
    query.contains('"') || query.split_whitespace().any(|w| w.len() > 1 && (w.starts_with('+') || w.starts_with('-')))
}

/// Flat disjunction `title:t^2 OR body:t` over the distinct analysed terms. Equivalent in scoring to
/// the query parser's output for plain words, but all-term-scorer, so tantivy can use block-max WAND
/// (about 8× lower p99 on the benchmark than the parser's nested per-term unions).
fn term_union(fields: Fields, terms: &[String]) -> Box<dyn Query> {
    let distinct: std::collections::BTreeSet<&String> = terms.iter().collect();
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(distinct.len() * 2);
    for term in distinct {
        let query = |field| TermQuery::new(Term::from_field_text(field, term), IndexRecordOption::WithFreqs);
        clauses.push((Occur::Should, Box::new(BoostQuery::new(Box::new(query(fields.title)), TITLE_BOOST))));
        clauses.push((Occur::Should, Box::new(query(fields.body))));
    }
    Box::new(BooleanQuery::new(clauses))
}

/// Analysed (lower-cased, stemmed) terms of `text`.
fn analyse(analyzer: &TextAnalyzer, text: &str) -> Vec<String> {
    let mut analyzer = analyzer.clone();
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    stream.process(&mut |t| out.push(t.text.clone()));
    out
}

/// Whitespace-compacted `text` bounded to `max` chars; when cut, the window starts about a quarter
/// before the densest cluster of query terms, with `…` marking cuts.
fn excerpt(analyzer: &TextAnalyzer, text: &str, terms: &HashSet<String>, max: usize) -> String {
    let compact = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let n = compact.chars().count();
    if n <= max {
        return compact;
    }
    // Matching tokens as (char position, term).
    let mut analyzer = analyzer.clone();
    let mut stream = analyzer.token_stream(&compact);
    let mut byte_hits = Vec::new();
    stream.process(&mut |t| {
        if terms.contains(&t.text) {
            byte_hits.push((t.offset_from, t.text.clone()));
        }
    });
    let mut hits = Vec::with_capacity(byte_hits.len());
    let (mut byte, mut chars) = (0usize, 0usize);
    for (offset, term) in byte_hits {
        chars += compact.get(byte..offset).map_or(0, |s| s.chars().count());
        byte = byte.max(offset);
        hits.push((chars, term));
    }
    // The match whose following half-window holds the most distinct terms.
    let span = max / 2;
    let mut anchor = 0usize;
    let mut best = 0usize;
    for (i, (pos, _)) in hits.iter().enumerate() {
        let distinct: HashSet<&str> =
            hits[i..].iter().take_while(|(p, _)| *p <= pos + span).map(|(_, t)| t.as_str()).collect();
        if distinct.len() > best {
            best = distinct.len();
            anchor = *pos;
        }
    }
    let budget = max - 2; // room for two ellipses
    let mut start = anchor.saturating_sub(max / 4);
    if start + budget > n {
        start = n.saturating_sub(budget);
    }
    let end = (start + budget).min(n);
    let window: Vec<char> = compact.chars().skip(start).take(end - start).collect();
    let mut from = 0;
    let mut to = window.len();
    // Snap to word boundaries when one is near.
    if start > 0
        && let Some(p) = window.iter().take(24).position(|c| *c == ' ')
    {
        from = p + 1;
    }
    if end < n
        && let Some(p) = window.iter().rev().take(24).position(|c| *c == ' ')
    {
        to = window.len() - p - 1;
    }
    let body: String = window[from..to.max(from)].iter().collect();
    format!("{}{}{}", if start > 0 { "…" } else { "" }, body.trim(), if end < n { "…" } else { "" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, title: &str, text: &str) -> Document {
        let mut d = Document::from_text(id.into(), "test".into(), None, text, title);
        d.title = title.into();
        d
    }

    fn filler(seed: usize, words: usize) -> String {
        const W: &[&str] = &["service", "latency", "request", "budget", "owner", "team", "cluster", "node", "pod"];
        (0..words).map(|i| W[(i * 7 + seed) % W.len()]).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn title_match_outranks_single_body_mention() {
        let docs = vec![
            doc("a.md", "Generic notes", &format!("{} eviction {}", filler(1, 60), filler(2, 60))),
            doc("b.md", "Pod eviction", &filler(3, 120)),
        ];
        let index = KnowledgeIndex::build_in_ram(&docs, ChunkingParams::default()).unwrap();
        let hits = index.search("eviction", 5).unwrap();
        assert_eq!(hits.iter().map(|h| h.document_id.as_str()).collect::<Vec<_>>(), ["b.md", "a.md"]);
        assert_eq!(hits[0].title, "Pod eviction");
    }

    #[test]
    fn one_hit_per_document_and_top_k_bounds() {
        let text = (0..40).map(|i| format!("disk pressure paragraph {i}. {}\n\n", filler(i, 30))).collect::<String>();
        let docs: Vec<_> = (0..6).map(|i| doc(&format!("d{i}.md"), &format!("doc {i}"), &text)).collect();
        let index =
            KnowledgeIndex::build_in_ram(&docs, ChunkingParams { chunk_chars: 300, overlap_chars: 30 }).unwrap();
        assert!(index.stats().chunks > 6 * 10);
        let hits = index.search("disk pressure", 5).unwrap();
        assert_eq!(hits.len(), 5);
        let ids: HashSet<_> = hits.iter().map(|h| h.document_id.clone()).collect();
        assert_eq!(ids.len(), 5);
        assert_eq!(index.search("disk", 50).unwrap().len(), 6);
        assert!(matches!(index.search("disk", 0), Err(IndexError::TopK(0))));
        assert!(matches!(index.search("disk", 51), Err(IndexError::TopK(51))));
        assert!(matches!(index.search("  !!! ", 5), Err(IndexError::EmptyQuery)));
        // Punctuation and query syntax never error.
        for q in ["disk AND (", "title:\"pressure", "disk-pressure? [x TO", "+-disk*:", "ünïcödé 💾"] {
            index.search(q, 5).unwrap();
        }
    }

    #[test]
    fn phrases_and_exclusions_use_query_syntax() {
        let docs = vec![doc("a.md", "A", "alpha beta words"), doc("b.md", "B", "alpha gamma error: timeout")];
        let index = KnowledgeIndex::build_in_ram(&docs, ChunkingParams::default()).unwrap();
        let ids = |q: &str| index.search(q, 5).unwrap().into_iter().map(|h| h.document_id).collect::<Vec<_>>();
        assert_eq!(ids("alpha -gamma"), ["a.md"]);
        assert_eq!(ids("\"alpha beta\""), ["a.md"]);
        assert!(ids("\"beta alpha\"").is_empty());
        assert_eq!(ids("error: timeout"), ["b.md"]);
        assert_eq!(ids("alpha").len(), 2);
    }

    #[test]
    fn stemming_and_excerpt_centred_on_terms() {
        let body = format!("{} The replication slots were retained. {}", filler(4, 400), filler(5, 400));
        let docs = vec![doc("wal.md", "Notes", &body)];
        let index =
            KnowledgeIndex::build_in_ram(&docs, ChunkingParams { chunk_chars: 8000, overlap_chars: 0 }).unwrap();
        let hits = index.search("replication slot", 1).unwrap();
        assert_eq!(hits.len(), 1);
        let ex = &hits[0].excerpt;
        assert!(ex.chars().count() <= EXCERPT_CHARS, "{}", ex.chars().count());
        assert!(ex.contains("replication slots"), "{ex}");
        assert!(ex.starts_with('…') && ex.ends_with('…'));
        let short = index.search_with_excerpt("replication", 1, 40).unwrap();
        assert!(short[0].excerpt.chars().count() <= 40);
    }

    #[test]
    fn excerpt_handles_multibyte_and_no_match() {
        let analyzer = TextAnalyzer::from(tantivy::tokenizer::SimpleTokenizer::default());
        let text = "Ο δίσκος γεμίζει 💾 ".repeat(100) + " target word " + &"🔥 λέξη ".repeat(100);
        let terms: HashSet<String> = ["target".to_owned()].into();
        let ex = excerpt(&analyzer, &text, &terms, 100);
        assert!(ex.chars().count() <= 100 && ex.contains("target"), "{ex}");
        let none = excerpt(&analyzer, &text, &HashSet::new(), 50);
        assert!(none.chars().count() <= 50 && none.starts_with("Ο δίσκος"));
    }

    #[test]
    fn content_sha_is_deterministic_and_sensitive() {
        let a = vec![doc("a.md", "A", "alpha text"), doc("b.md", "B", "beta text")];
        let mut b = a.clone();
        b.reverse();
        let p = ChunkingParams::default();
        let i1 = KnowledgeIndex::build_in_ram(&a, p).unwrap();
        let i2 = KnowledgeIndex::build_in_ram(&b, p).unwrap();
        assert_eq!(i1.stats().content_sha256, i2.stats().content_sha256);
        assert_eq!(i1.stats().content_sha256, content_sha256(&a, p));
        assert_ne!(content_sha256(&a, ChunkingParams { chunk_chars: 1000, overlap_chars: 150 }), content_sha256(&a, p));
        let mut c = a.clone();
        c[0].text = "alpha text changed\n".into();
        assert_ne!(content_sha256(&c, p), content_sha256(&a, p));
    }

    #[test]
    fn invalid_inputs_are_errors() {
        let docs = vec![doc("a.md", "A", "alpha")];
        for (c, o) in [(0, 0), (10, 10), (10, 11)] {
            let params = ChunkingParams { chunk_chars: c, overlap_chars: o };
            assert!(matches!(KnowledgeIndex::build_in_ram(&docs, params), Err(IndexError::InvalidParams(_))));
        }
        let dup = vec![doc("a.md", "A", "alpha"), doc("a.md", "B", "beta")];
        assert!(matches!(
            KnowledgeIndex::build_in_ram(&dup, ChunkingParams::default()),
            Err(IndexError::DuplicateDocument(_))
        ));
        let blank = vec![doc("a.md", "A", "--- ... ---")];
        assert!(matches!(KnowledgeIndex::build_in_ram(&blank, ChunkingParams::default()), Err(IndexError::Empty)));
    }

    #[test]
    fn on_disk_round_trip_stats_and_listing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idx");
        let mut docs = vec![
            doc("ops/disk.md", "Disk full", "disk usage grows fast"),
            doc("ops/cpu.md", "High CPU", "cpu steal and iowait"),
            doc("db/pg.md", "Postgres connections", "too many connections"),
        ];
        docs[2].source = "db".into();
        docs[2].url = Some("https://example.invalid/pg".into());
        let built = KnowledgeIndex::build_on_disk(&path, &docs, ChunkingParams::default(), Some("abc".into())).unwrap();
        assert!(matches!(
            KnowledgeIndex::build_on_disk(&path, &docs, ChunkingParams::default(), None),
            Err(IndexError::OutputNotEmpty(_))
        ));
        let opened = KnowledgeIndex::open(&path).unwrap();
        assert_eq!(opened.stats(), built.stats());
        let stats = opened.stats();
        assert_eq!((stats.documents, stats.chunks, stats.manifest_sha256.as_deref()), (3, 3, Some("abc")));
        assert_eq!(stats.sources["db"], SourceStats { documents: 1, chunks: 1 });
        assert_eq!(stats.sources["test"], SourceStats { documents: 2, chunks: 2 });
        let hits = opened.search("connections", 5).unwrap();
        assert_eq!(hits[0].url.as_deref(), Some("https://example.invalid/pg"));
        let all = opened.documents(&ListFilter::default(), 0, 50);
        assert_eq!(
            all.iter().map(|d| d.title.as_str()).collect::<Vec<_>>(),
            ["Disk full", "High CPU", "Postgres connections"]
        );
        let ops = ListFilter { id: Some("OPS/".into()), ..ListFilter::default() };
        assert_eq!(opened.count_documents(&ops), 2);
        assert_eq!(opened.documents(&ops, 1, 50).len(), 1);
        let by_source =
            ListFilter { source: Some("DB".into()), title: Some("postgres".into()), ..ListFilter::default() };
        assert_eq!(opened.documents(&by_source, 0, 50)[0].id, "db/pg.md");
        // Shared across threads.
        let clone = opened.clone();
        std::thread::spawn(move || clone.search("cpu", 1).unwrap()).join().unwrap();
        // A broken metadata file is reported.
        fs::write(path.join(META_FILE), b"{").unwrap();
        assert!(matches!(KnowledgeIndex::open(&path), Err(IndexError::Metadata { .. })));
    }

    #[test]
    fn index_is_send_sync() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<KnowledgeIndex>();
    }
}
