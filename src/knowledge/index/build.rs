//! Building an index: chunking documents into tantivy, the metadata to keep, and the content
//! hash that says whether two builds hold the same thing.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tantivy::directory::{MmapDirectory, RamDirectory};
use tantivy::indexer::NoMergePolicy;
use tantivy::{Directory, Index, IndexWriter, SingleSegmentIndexWriter, TantivyDocument, TantivyError};

use super::schema::{Fields, INDEX_VERSION, IndexMeta, schema};
use super::types::{ChunkingParams, DocumentInfo, IndexError, io_err};
use crate::knowledge::chunk::chunks;
use crate::knowledge::corpus::{Document, sha256_hex};

/// Memory budget of the index writer of a large corpus (one indexing thread): it flushes a
/// segment when its buffers reach this, and the segments are merged into one at the end.
const WRITER_MEMORY: usize = 50_000_000;
/// Corpora of at most this many bytes of text are indexed in the calling thread straight into
/// one segment: no writer, merge or garbage-collection threads, and a terms table sized for a
/// small corpus. tantivy's writer sizes that table from its smallest budget (15 MB) to 512K
/// entries (4 MiB, every page written), which a one-shot `akritas ask` that indexes the
/// samples' KnowledgeBase paid for on top of everything else.
const SMALL_CORPUS_BYTES: usize = 4 << 20;
/// What the one-segment writer sizes its terms table from (32K entries, 256 KiB; the table
/// grows when a corpus has more terms). Not a limit: that writer never flushes, so
/// [`SMALL_CORPUS_BYTES`] bounds what it holds.
const SMALL_WRITER_MEMORY: usize = 1_000_000;

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

/// Makes `dir` an empty directory: creates it when missing, refuses it when not empty.
pub(super) fn prepare_dir(dir: &Path) -> Result<(), IndexError> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(IndexError::OutputNotEmpty(dir.to_owned()));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dir).map_err(io_err(dir)),
        Err(e) => Err(IndexError::Io { path: dir.to_owned(), error: e }),
    }
}

/// Whether `dir` is missing or an empty directory.
pub(super) fn missing_or_empty(dir: &Path) -> Result<bool, IndexError> {
    match fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(IndexError::Io { path: dir.to_owned(), error: e }),
    }
}

/// `dir` with symlinks resolved when it holds an index this tool wrote (a readable
/// metadata file, no subdirectories: tantivy keeps a flat directory), and so may be
/// replaced whole; anything else is [`IndexError::NotAnIndex`].
pub(super) fn replaceable(dir: &Path) -> Result<PathBuf, IndexError> {
    let not_an_index = || IndexError::NotAnIndex(dir.to_owned());
    let real = dir.canonicalize().map_err(io_err(dir))?;
    IndexMeta::read(&real).map_err(|_| not_an_index())?;
    for entry in fs::read_dir(&real).map_err(io_err(&real))? {
        let entry = entry.map_err(io_err(&real))?;
        if entry.file_type().map_err(io_err(&entry.path()))?.is_dir() {
            return Err(not_an_index());
        }
    }
    Ok(real)
}

/// A hidden sibling of `dir` for this process (`.index.building-1234`).
pub(super) fn sibling(dir: &Path, what: &str) -> Result<PathBuf, IndexError> {
    let name = dir.file_name().ok_or_else(|| IndexError::NotAnIndex(dir.to_owned()))?;
    Ok(dir.with_file_name(format!(".{}.{what}-{}", name.to_string_lossy(), std::process::id())))
}

/// Puts the index built in `staging` at `dir` (an index checked by [`replaceable`]):
/// two renames, the old index moved aside and then deleted. When the second rename
/// fails the old index is put back.
pub(super) fn swap(dir: &Path, staging: &Path) -> Result<(), IndexError> {
    let old = sibling(dir, "replaced")?;
    fs::rename(dir, &old).map_err(io_err(dir))?;
    if let Err(error) = fs::rename(staging, dir) {
        let _ = fs::rename(&old, dir);
        let _ = fs::remove_dir_all(staging);
        return Err(IndexError::Io { path: dir.to_owned(), error });
    }
    fs::remove_dir_all(&old).map_err(io_err(&old))
}

/// Where an index is built.
pub(super) enum Target<'a> {
    /// In memory.
    Ram,
    /// In this directory (existing, empty).
    Dir(&'a Path),
}

/// What documents are written through: one segment in this thread for a small corpus,
/// tantivy's writer for a large one.
#[allow(clippy::large_enum_variant, reason = "one per index build, for its duration")]
enum Sink {
    One(SingleSegmentIndexWriter<TantivyDocument>),
    Many(Index, IndexWriter<TantivyDocument>),
}

impl Sink {
    fn new(target: Target<'_>, small: bool) -> Result<Self, IndexError> {
        let (schema, _) = schema();
        let directory: Box<dyn Directory> = match target {
            Target::Ram => Box::new(RamDirectory::create()),
            Target::Dir(dir) => Box::new(MmapDirectory::open(dir).map_err(TantivyError::from)?),
        };
        if small {
            // tantivy keeps this writer out of its documentation ("dragons ahead"): it expects
            // an empty directory and runs no garbage collection, which is what a new index is.
            let builder = Index::builder().schema(schema);
            return Ok(Self::One(builder.single_segment_index_writer(directory, SMALL_WRITER_MEMORY)?));
        }
        let index = Index::create(directory, schema, Default::default())?;
        let writer: IndexWriter<TantivyDocument> = index.writer_with_num_threads(1, WRITER_MEMORY)?;
        writer.set_merge_policy(Box::new(NoMergePolicy));
        Ok(Self::Many(index, writer))
    }

    fn add(&mut self, document: TantivyDocument) -> Result<(), IndexError> {
        match self {
            Self::One(writer) => writer.add_document(document)?,
            Self::Many(_, writer) => {
                writer.add_document(document)?;
            }
        }
        Ok(())
    }

    /// Commits what was added as one segment.
    fn finish(self) -> Result<Index, IndexError> {
        match self {
            Self::One(writer) => Ok(writer.finalize()?),
            Self::Many(index, mut writer) => {
                writer.commit()?;
                let segments = index.searchable_segment_ids()?;
                if segments.len() > 1 {
                    writer.merge(&segments).wait()?;
                }
                writer.wait_merging_threads()?;
                Ok(index)
            }
        }
    }
}

/// Chunks and indexes `docs` into a new index at `target`, returning it with the metadata to
/// keep.
pub(super) fn fill(
    target: Target<'_>,
    docs: &[Document],
    params: ChunkingParams,
    manifest_sha256: Option<String>,
) -> Result<(Index, Fields, IndexMeta), IndexError> {
    fill_sized(target, docs, params, manifest_sha256, SMALL_CORPUS_BYTES)
}

/// [`fill`], with corpora of at most `small_corpus_bytes` indexed into one segment directly.
fn fill_sized(
    target: Target<'_>,
    docs: &[Document],
    params: ChunkingParams,
    manifest_sha256: Option<String>,
    small_corpus_bytes: usize,
) -> Result<(Index, Fields, IndexMeta), IndexError> {
    let (_, fields) = schema();
    let mut sorted: Vec<&Document> = docs.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    if let Some(pair) = sorted.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(IndexError::DuplicateDocument(pair[0].id.clone()));
    }
    let small = docs.iter().map(|d| d.text.len()).sum::<usize>() <= small_corpus_bytes;
    let mut sink = Sink::new(target, small)?;
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
            sink.add(td)?;
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
    let index = sink.finish()?;
    let meta = IndexMeta {
        version: INDEX_VERSION,
        chunk_chars: params.chunk_chars,
        overlap_chars: params.overlap_chars,
        content_sha256: content_sha256(docs, params),
        manifest_sha256,
        documents: infos,
    };
    Ok((index, fields, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, text: &str) -> Document {
        Document::from_text(id.into(), "test".into(), None, text, id)
    }

    fn build(docs: &[Document], params: ChunkingParams) -> Result<(Index, IndexMeta), IndexError> {
        let (index, _, meta) = fill(Target::Ram, docs, params, Some("m".into()))?;
        Ok((index, meta))
    }

    #[test]
    fn content_sha_is_deterministic_and_sensitive() {
        let a = vec![doc("a.md", "alpha text"), doc("b.md", "beta text")];
        let mut b = a.clone();
        b.reverse();
        let p = ChunkingParams::default();
        assert_eq!(content_sha256(&a, p), content_sha256(&b, p), "order does not matter");
        assert_eq!(content_sha256(&a, p).len(), 64);
        assert_ne!(content_sha256(&a, ChunkingParams { chunk_chars: 1000, overlap_chars: 150 }), content_sha256(&a, p));
        let mut c = a.clone();
        c[0].text = "alpha text changed\n".into();
        assert_ne!(content_sha256(&c, p), content_sha256(&a, p));
        let mut d = a.clone();
        d[0].title = "Other title".into();
        assert_eq!(content_sha256(&d, p), content_sha256(&a, p), "titles are not content");
    }

    #[test]
    fn documents_are_sorted_and_blank_chunks_are_not_indexed() {
        // 20-character chunks: "alpha beta\n\n" + 8 dashes, then 20 dashes (skipped), then the rest.
        let text = format!("alpha beta\n\n{}\n\ngamma", "-".repeat(40));
        let docs = vec![doc("z.md", &text), doc("a.md", "gamma")];
        let params = ChunkingParams { chunk_chars: 20, overlap_chars: 0 };
        let (index, meta) = build(&docs, params).unwrap();
        let summary: Vec<(&str, u32, usize)> =
            meta.documents.iter().map(|d| (d.id.as_str(), d.chunks, d.chars)).collect();
        assert_eq!(summary, [("a.md", 1, 6), ("z.md", 2, 60)]);
        assert_eq!(index.reader().unwrap().searcher().num_docs(), 3);
        assert_eq!(index.searchable_segment_ids().unwrap().len(), 1, "merged into one segment");
        assert_eq!((meta.version, meta.manifest_sha256.as_deref()), (INDEX_VERSION, Some("m")));
        assert_eq!(meta.content_sha256, content_sha256(&docs, params));
    }

    /// Every (term, chunk, BM25 score) of `index` for `terms`, in chunk order.
    fn postings(index: &Index, fields: Fields, terms: &[&str]) -> Vec<(String, u64, String)> {
        use tantivy::collector::TopDocs;
        use tantivy::query::TermQuery;
        use tantivy::schema::{IndexRecordOption, Value};
        let searcher = index.reader().unwrap().searcher();
        let mut found = Vec::new();
        for term in terms {
            let query = TermQuery::new(
                tantivy::Term::from_field_text(fields.body, term),
                IndexRecordOption::WithFreqsAndPositions,
            );
            let mut hits: Vec<(String, u64, String)> = searcher
                .search(&query, &TopDocs::with_limit(100).order_by_score())
                .unwrap()
                .into_iter()
                .map(|(score, address)| {
                    let stored: TantivyDocument = searcher.doc(address).unwrap();
                    let chunk = stored.get_first(fields.chunk).and_then(|v| v.as_u64()).unwrap();
                    let id = stored.get_first(fields.document_id).and_then(|v| v.as_str()).unwrap().to_owned();
                    (format!("{term} {id}"), chunk, format!("{score:.5}"))
                })
                .collect();
            hits.sort();
            found.extend(hits);
        }
        found
    }

    #[test]
    fn a_small_corpus_indexed_in_one_segment_holds_and_scores_what_the_writer_builds() {
        let docs: Vec<Document> = (0..30)
            .map(|i| {
                doc(
                    &format!("{i:02}.md"),
                    &format!("disk pressure on node {i}\n\nevict pods; image cache {}", "gc ".repeat(i)),
                )
            })
            .collect();
        let params = ChunkingParams { chunk_chars: 40, overlap_chars: 5 };
        let dir = tempfile::tempdir().unwrap();
        let (one, fields, one_meta) = fill(Target::Dir(dir.path()), &docs, params, None).unwrap();
        let (many, _, many_meta) = fill_sized(Target::Ram, &docs, params, None, 0).unwrap();
        assert_eq!(one.searchable_segment_ids().unwrap().len(), 1);
        assert_eq!(many.searchable_segment_ids().unwrap().len(), 1);
        let terms = ["disk", "node", "evict", "gc", "cach"];
        let (from_one, from_many) = (postings(&one, fields, &terms), postings(&many, fields, &terms));
        assert!(from_one.len() > 60, "{from_one:?}");
        assert_eq!(from_one, from_many);
        assert_eq!(one_meta.content_sha256, many_meta.content_sha256);
        assert_eq!(
            one_meta.documents.iter().map(|d| d.chunks).collect::<Vec<_>>(),
            many_meta.documents.iter().map(|d| d.chunks).collect::<Vec<_>>()
        );
        // What the one-segment writer left on disk opens as an index.
        let reopened = Index::open_in_dir(dir.path()).unwrap();
        assert_eq!(postings(&reopened, fields, &terms), from_one);
    }

    #[test]
    fn duplicate_ids_and_empty_input_are_errors() {
        let dup = vec![doc("a.md", "alpha"), doc("a.md", "beta")];
        assert!(
            matches!(build(&dup, ChunkingParams::default()), Err(IndexError::DuplicateDocument(id)) if id == "a.md")
        );
        assert!(matches!(build(&[doc("a.md", "--- ... ---")], ChunkingParams::default()), Err(IndexError::Empty)));
        assert!(matches!(build(&[], ChunkingParams::default()), Err(IndexError::Empty)));
    }

    #[test]
    fn output_directory_must_be_missing_or_empty() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("a/b");
        prepare_dir(&fresh).unwrap();
        assert!(fresh.is_dir());
        prepare_dir(&fresh).unwrap();
        fs::write(fresh.join("x"), b"x").unwrap();
        assert!(matches!(prepare_dir(&fresh), Err(IndexError::OutputNotEmpty(_))));
    }
}
