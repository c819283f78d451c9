//! Searching an index: plain words become a flat BM25 term union, `"phrases"` and `+`/`-` words
//! go through tantivy's lenient parser; the best chunk of each document becomes a hit with an
//! excerpt centred on the query terms.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{DocAddress, Index, IndexReader, ReloadPolicy, TantivyDocument, Term};

use super::schema::{F_DOC_ORD, Fields, META_FILE, TITLE_BOOST};
use super::types::{DocumentInfo, Hit, IndexError, MAX_TOP_K};
use crate::text::one_line;

/// What searching an open index needs: a reader, the query parser and the fields' analyser.
pub(super) struct ChunkSearch {
    reader: IndexReader,
    fields: Fields,
    parser: QueryParser,
    analyzer: TextAnalyzer,
}

impl ChunkSearch {
    /// Opens a reader on `index` (reloaded only on demand: an index never changes once built).
    pub fn new(index: &Index, fields: Fields) -> Result<Self, IndexError> {
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        reader.reload()?;
        let mut parser = QueryParser::for_index(index, vec![fields.title, fields.body]);
        parser.set_field_boost(fields.title, TITLE_BOOST);
        let analyzer = index.tokenizer_for_field(fields.body)?;
        Ok(Self { reader, fields, parser, analyzer })
    }

    /// Chunks in the index.
    pub fn num_chunks(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// At most `top_k` (1..=[`MAX_TOP_K`]) documents of `documents` (the metadata, by `doc_ord`),
    /// best first, each with its best chunk and an excerpt of at most `excerpt_chars` (at least 16).
    pub fn search(
        &self,
        documents: &[DocumentInfo],
        query: &str,
        top_k: usize,
        excerpt_chars: usize,
    ) -> Result<Vec<Hit>, IndexError> {
        if !(1..=MAX_TOP_K).contains(&top_k) {
            return Err(IndexError::TopK(top_k));
        }
        let terms = analyse(&self.analyzer, query);
        if terms.is_empty() {
            return Err(IndexError::EmptyQuery);
        }
        let parsed = if uses_syntax(query) {
            let (parsed, errors) = self.parser.parse_query_lenient(query);
            if !errors.is_empty() {
                tracing::debug!(?errors, "lenient query parse dropped parts of the query");
            }
            parsed
        } else {
            term_union(self.fields, &terms)
        };
        let searcher = self.reader.searcher();
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
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
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
            let Some(info) = usize::try_from(ord).ok().and_then(|i| documents.get(i)) else {
                return Err(IndexError::Metadata {
                    path: PathBuf::from(META_FILE),
                    reason: format!("chunk refers to unknown document {ord}"),
                });
            };
            let doc: TantivyDocument = searcher.doc(addr)?;
            let body = doc.get_first(self.fields.body).and_then(|v| v.as_str()).unwrap_or_default();
            let chunk = doc.get_first(self.fields.chunk).and_then(|v| v.as_u64()).unwrap_or_default();
            hits.push(Hit {
                document_id: info.id.clone(),
                title: info.title.clone(),
                source: info.source.clone(),
                url: info.url.clone(),
                chunk: u32::try_from(chunk).unwrap_or(u32::MAX),
                score,
                excerpt: excerpt(&self.analyzer, body, &query_terms, excerpt_chars.max(16)),
            });
        }
        Ok(hits)
    }
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
    let distinct: BTreeSet<&String> = terms.iter().collect();
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
    let compact = one_line(text);
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
    use tantivy::tokenizer::{LowerCaser, SimpleTokenizer, Stemmer};

    use super::*;

    fn stemming() -> TextAnalyzer {
        TextAnalyzer::builder(SimpleTokenizer::default()).filter(LowerCaser).filter(Stemmer::default()).build()
    }

    #[test]
    fn only_phrases_and_signed_words_use_query_syntax() {
        for plain in ["disk pressure", "error: timeout", "a - b", "+ -", "title:x", "disk-pressure", "(x AND y)"] {
            assert!(!uses_syntax(plain), "{plain}");
        }
        for syntax in ["\"disk pressure\"", "disk -pressure", "+disk", "say \"hi"] {
            assert!(uses_syntax(syntax), "{syntax}");
        }
    }

    #[test]
    fn analysis_lower_cases_and_stems() {
        assert_eq!(analyse(&stemming(), "Replication SLOTS were Retained!"), ["replic", "slot", "were", "retain"]);
        assert!(analyse(&stemming(), "  !!! ").is_empty());
    }

    #[test]
    fn short_text_is_compacted_not_cut() {
        let terms: HashSet<String> = ["disk".to_owned()].into();
        assert_eq!(excerpt(&stemming(), "  Disk\n\n  full \t now ", &terms, 16), "Disk full now");
    }

    #[test]
    fn long_text_is_cut_around_the_densest_cluster_of_terms() {
        let filler = "lorem ipsum dolor sit amet ".repeat(20);
        let text = format!("{filler}disk once. {filler}disk full and disk slow. {filler}");
        let terms: HashSet<String> = ["disk".to_owned(), "full".to_owned()].into();
        let ex = excerpt(&stemming(), &text, &terms, 60);
        assert!(ex.chars().count() <= 60, "{ex}");
        assert!(ex.starts_with('…') && ex.ends_with('…'), "{ex}");
        assert!(ex.contains("disk full and disk slow"), "{ex}");
        assert!(!ex.contains("  "), "{ex}");
    }

    #[test]
    fn excerpt_handles_multibyte_and_no_match() {
        let analyzer = TextAnalyzer::from(SimpleTokenizer::default());
        let text = "Ο δίσκος γεμίζει 💾 ".repeat(100) + " target word " + &"🔥 λέξη ".repeat(100);
        let terms: HashSet<String> = ["target".to_owned()].into();
        let ex = excerpt(&analyzer, &text, &terms, 100);
        assert!(ex.chars().count() <= 100 && ex.contains("target"), "{ex}");
        let none = excerpt(&analyzer, &text, &HashSet::new(), 50);
        assert!(none.chars().count() <= 50 && none.starts_with("Ο δίσκος"));
        assert!(none.ends_with('…') && !none.starts_with('…'));
    }
}
