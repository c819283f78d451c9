//! BM25 search over document chunks with tantivy, in RAM or on disk.
//!
//! Every chunk is one tantivy document: `title` (boosted ×2 at query time) and `body` are analysed
//! with tantivy's `en_stem` analyser (lower-case + English stemming). Plain-word queries become a flat
//! BM25 term union; queries with `"phrases"` or `+`/`-` words go through tantivy's lenient parser. Per-document metadata lives in
//! `akritas-index.json` next to the tantivy files; results carry one hit (the best chunk) per document.

mod build;
mod schema;
mod search;
mod types;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tantivy::Index;

pub use build::content_sha256;
use build::{Target, fill, prepare_dir};
pub use schema::META_FILE;
use schema::{Fields, IndexMeta, fields_of};
use search::ChunkSearch;
pub use types::{
    ChunkingParams, DocumentInfo, EXCERPT_CHARS, Hit, IndexError, IndexStats, ListFilter, MAX_LIST_LIMIT, SourceStats,
};

use crate::knowledge::corpus::Document;

struct Inner {
    search: ChunkSearch,
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

impl KnowledgeIndex {
    /// Builds an index held in memory.
    pub fn build_in_ram(docs: &[Document], params: ChunkingParams) -> Result<Self, IndexError> {
        params.validate()?;
        let (index, fields, meta) = fill(Target::Ram, docs, params, None)?;
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
        prepare_dir(dir)?;
        let (index, fields, meta) = fill(Target::Dir(dir), docs, params, manifest_sha256)?;
        meta.write(dir)?;
        Self::from_parts(index, fields, meta)
    }

    /// Builds an index in `dir` like [`KnowledgeIndex::build_on_disk`], replacing the
    /// index already there: the new one is built in a sibling directory and swapped in,
    /// so a failed build leaves the old index whole. A non-empty `dir` that holds no
    /// index this tool wrote is refused ([`IndexError::NotAnIndex`]) and left as it is.
    pub fn replace_on_disk(
        dir: &Path,
        docs: &[Document],
        params: ChunkingParams,
        manifest_sha256: Option<String>,
    ) -> Result<Self, IndexError> {
        if build::missing_or_empty(dir)? {
            return Self::build_on_disk(dir, docs, params, manifest_sha256);
        }
        let dir = build::replaceable(dir)?;
        let staging = build::sibling(&dir, "building")?;
        if !build::missing_or_empty(&staging)? {
            return Err(IndexError::OutputNotEmpty(staging));
        }
        if let Err(error) = Self::build_on_disk(&staging, docs, params, manifest_sha256) {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(error);
        }
        build::swap(&dir, &staging)?;
        Self::open(&dir)
    }

    /// Opens an index written by [`KnowledgeIndex::build_on_disk`].
    pub fn open(dir: &Path) -> Result<Self, IndexError> {
        let meta = IndexMeta::read(dir)?;
        let index = Index::open_in_dir(dir)?;
        let path = dir.join(META_FILE);
        let fields = fields_of(&index.schema(), &path)?;
        let this = Self::from_parts(index, fields, meta)?;
        let (chunks, indexed) = (this.inner.meta.chunks(), this.inner.search.num_chunks());
        if u64::try_from(chunks).ok() != Some(indexed) {
            let reason = format!("metadata lists {chunks} chunks, tantivy holds {indexed}");
            return Err(IndexError::Metadata { path, reason });
        }
        Ok(this)
    }

    fn from_parts(index: Index, fields: Fields, meta: IndexMeta) -> Result<Self, IndexError> {
        let search = ChunkSearch::new(&index, fields)?;
        let mut list_order: Vec<usize> = (0..meta.documents.len()).collect();
        let key = |d: &DocumentInfo| (d.title.to_lowercase(), d.source.clone(), d.id.clone());
        list_order.sort_by_cached_key(|&i| key(&meta.documents[i]));
        Ok(Self { inner: Arc::new(Inner { search, meta, list_order, _index: index }) })
    }

    /// Searches for `query` and returns at most `top_k` (1..=50) documents, best first, each with its
    /// best chunk. Plain words are OR-ed; `"phrases"` and `+`/`-` words use tantivy's query syntax,
    /// parsed leniently, so no input is a syntax error.
    pub fn search(&self, query: &str, top_k: usize) -> Result<Vec<Hit>, IndexError> {
        self.search_with_excerpt(query, top_k, EXCERPT_CHARS)
    }

    /// Like [`KnowledgeIndex::search`] with excerpts bounded to `excerpt_chars` (at least 16).
    pub fn search_with_excerpt(&self, query: &str, top_k: usize, excerpt_chars: usize) -> Result<Vec<Hit>, IndexError> {
        self.inner.search.search(&self.inner.meta.documents, query, top_k, excerpt_chars)
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

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
    fn stats_carry_the_content_sha_of_any_document_order() {
        let a = vec![doc("a.md", "A", "alpha text"), doc("b.md", "B", "beta text")];
        let mut b = a.clone();
        b.reverse();
        let p = ChunkingParams::default();
        let i1 = KnowledgeIndex::build_in_ram(&a, p).unwrap();
        let i2 = KnowledgeIndex::build_in_ram(&b, p).unwrap();
        assert_eq!(i1.stats().content_sha256, i2.stats().content_sha256);
        assert_eq!(i1.stats().content_sha256, content_sha256(&a, p));
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
        std::fs::write(path.join(META_FILE), b"{").unwrap();
        assert!(matches!(KnowledgeIndex::open(&path), Err(IndexError::Metadata { .. })));
    }

    #[test]
    fn replacing_swaps_in_the_new_index_and_never_touches_a_directory_that_is_not_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idx");
        let params = ChunkingParams::default();
        let old = [doc("a.md", "Disk full", "disk usage grows"), doc("b.md", "High CPU", "cpu steal")];
        KnowledgeIndex::replace_on_disk(&path, &old, params, None).unwrap();
        let new = [doc("c.md", "Postgres", "too many connections")];
        let replaced = KnowledgeIndex::replace_on_disk(&path, &new, params, Some("m".into())).unwrap();
        assert_eq!(replaced.stats().documents, 1);
        assert_eq!(KnowledgeIndex::open(&path).unwrap().search("connections", 5).unwrap()[0].document_id, "c.md");
        let siblings = |d: &Path| std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>();
        assert_eq!(siblings(dir.path()), ["idx"], "nothing left beside the index");
        // A failed build keeps the old index whole and leaves nothing behind.
        let blank = [doc("d.md", "D", "--- ... ---")];
        assert!(matches!(KnowledgeIndex::replace_on_disk(&path, &blank, params, None), Err(IndexError::Empty)));
        assert_eq!(KnowledgeIndex::open(&path).unwrap().stats().documents, 1);
        assert_eq!(siblings(dir.path()), ["idx"]);
        // Not an index: a directory of other files, or an index holding a subdirectory.
        let notes = dir.path().join("notes");
        std::fs::create_dir(&notes).unwrap();
        std::fs::write(notes.join("todo.txt"), b"keep me").unwrap();
        let refused = KnowledgeIndex::replace_on_disk(&notes, &new, params, None).unwrap_err();
        assert!(matches!(&refused, IndexError::NotAnIndex(p) if p == &notes), "{refused}");
        assert_eq!(std::fs::read(notes.join("todo.txt")).unwrap(), b"keep me");
        std::fs::create_dir(path.join("extra")).unwrap();
        assert!(matches!(KnowledgeIndex::replace_on_disk(&path, &new, params, None), Err(IndexError::NotAnIndex(_))));
        assert!(path.join("extra").is_dir());
    }

    #[test]
    fn index_is_send_sync() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<KnowledgeIndex>();
    }
}
