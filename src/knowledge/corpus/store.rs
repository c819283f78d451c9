//! A corpus directory: `documents.jsonl` plus a `manifest.json` holding its SHA-256, written
//! atomically and verified on read.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::document::{Document, sha256_hex};
use super::error::{CorpusError, io_err};
use super::import::ImportReport;

/// Corpus format version written to and required in `manifest.json`.
pub const CORPUS_VERSION: u32 = 1;
/// Name of the documents file inside a corpus directory.
pub const DOCUMENTS_FILE: &str = "documents.jsonl";
/// Name of the manifest file inside a corpus directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Contents of `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version ([`CORPUS_VERSION`]).
    pub version: u32,
    /// Number of documents.
    pub documents: usize,
    /// Hex SHA-256 of `documents.jsonl`.
    pub sha256: String,
    /// Source label.
    pub source: String,
    /// Creation time, RFC 3339 UTC.
    pub created: String,
}

/// Writes `report`'s documents as a corpus in `dir` (must be missing or empty, not inside the input).
pub fn write_corpus(dir: &Path, report: &ImportReport) -> Result<Manifest, CorpusError> {
    if report.documents.is_empty() {
        return Err(CorpusError::Empty);
    }
    prepare_output_dir(dir, Some(&report.root))?;
    let mut jsonl = Vec::new();
    for doc in &report.documents {
        serde_json::to_writer(&mut jsonl, doc)
            .map_err(|e| CorpusError::Invalid { path: dir.join(DOCUMENTS_FILE), reason: e.to_string() })?;
        jsonl.push(b'\n');
    }
    let manifest = Manifest {
        version: CORPUS_VERSION,
        documents: report.documents.len(),
        sha256: sha256_hex(&jsonl),
        source: report.source.clone(),
        created: rfc3339_seconds(jiff::Timestamp::now()),
    };
    let manifest_json = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| CorpusError::Invalid { path: dir.join(MANIFEST_FILE), reason: e.to_string() })?;
    write_atomic(&dir.join(DOCUMENTS_FILE), &jsonl)?;
    write_atomic(&dir.join(MANIFEST_FILE), &manifest_json)?;
    Ok(manifest)
}

/// Reads a corpus, verifying the manifest version, the documents hash and every document.
pub fn read_corpus(dir: &Path) -> Result<(Manifest, Vec<Document>), CorpusError> {
    let manifest_path = dir.join(MANIFEST_FILE);
    let raw = fs::read(&manifest_path).map_err(io_err(&manifest_path))?;
    let invalid = |path: &Path, reason: String| CorpusError::Invalid { path: path.to_owned(), reason };
    let manifest: Manifest = serde_json::from_slice(&raw).map_err(|e| invalid(&manifest_path, e.to_string()))?;
    if manifest.version != CORPUS_VERSION {
        return Err(invalid(&manifest_path, format!("unsupported version {}", manifest.version)));
    }
    let docs_path = dir.join(DOCUMENTS_FILE);
    let bytes = fs::read(&docs_path).map_err(io_err(&docs_path))?;
    let actual = sha256_hex(&bytes);
    if !actual.eq_ignore_ascii_case(&manifest.sha256) {
        return Err(CorpusError::ShaMismatch { path: docs_path, expected: manifest.sha256, actual });
    }
    let text = std::str::from_utf8(&bytes).map_err(|e| invalid(&docs_path, e.to_string()))?;
    let mut docs = Vec::with_capacity(manifest.documents);
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let doc: Document =
            serde_json::from_str(line).map_err(|e| invalid(&docs_path, format!("line {}: {e}", i + 1)))?;
        if doc.id.trim().is_empty() || doc.text.is_empty() {
            return Err(invalid(&docs_path, format!("line {}: empty id or text", i + 1)));
        }
        if sha256_hex(doc.text.as_bytes()) != doc.sha256 {
            return Err(invalid(&docs_path, format!("line {}: text does not match its sha256", i + 1)));
        }
        docs.push(doc);
    }
    if docs.len() != manifest.documents {
        return Err(invalid(&docs_path, format!("{} documents, manifest says {}", docs.len(), manifest.documents)));
    }
    Ok((manifest, docs))
}

/// Ensures `dir` is missing or empty (then creates it) and, when given, not inside `input`.
pub fn prepare_output_dir(dir: &Path, input: Option<&Path>) -> Result<(), CorpusError> {
    if let Some(input) = input {
        let input = input.canonicalize().map_err(io_err(input))?;
        if absolute_lexical(dir).starts_with(&input) || dir.canonicalize().is_ok_and(|d| d.starts_with(&input)) {
            return Err(CorpusError::OutputInsideInput { output: dir.to_owned(), input });
        }
    }
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(CorpusError::OutputNotEmpty(dir.to_owned()));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dir).map_err(io_err(dir)),
        Err(e) => Err(CorpusError::Io { path: dir.to_owned(), source: e }),
    }
}

/// `path` made absolute and resolved through its longest existing ancestor.
fn absolute_lexical(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut tail = Vec::new();
    loop {
        if let Ok(canon) = existing.canonicalize() {
            let mut out = canon;
            out.extend(tail.iter().rev());
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_owned());
                existing = if parent.as_os_str().is_empty() { PathBuf::from(".") } else { parent.to_path_buf() };
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Writes `bytes` to a temporary sibling, syncs, then renames over `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CorpusError> {
    let tmp = path.with_extension("tmp");
    let mut file = fs::File::create(&tmp).map_err(io_err(&tmp))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))
}

/// `at` as RFC 3339 UTC with seconds precision (fractions dropped), e.g. `2024-02-29T13:05:09Z`.
fn rfc3339_seconds(at: jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knowledge::corpus::fixtures::{long, opts, write};
    use crate::knowledge::corpus::import::import;

    #[test]
    fn write_and_read_round_trip_and_detect_tampering() {
        let input = tempfile::tempdir().unwrap();
        write(input.path(), "a.md", format!("# Alpha\n{}", long("a")).as_bytes());
        write(input.path(), "b.md", long("b").as_bytes());
        let report = import(input.path(), &opts()).unwrap();
        let out = tempfile::tempdir().unwrap();
        let corpus = out.path().join("corpus");
        let manifest = write_corpus(&corpus, &report).unwrap();
        assert_eq!(manifest.documents, 2);
        assert_eq!(manifest.created.len(), 20);
        let (read_manifest, docs) = read_corpus(&corpus).unwrap();
        assert_eq!(read_manifest, manifest);
        assert_eq!(docs, report.documents);
        // Writing again into the now non-empty dir fails.
        assert!(matches!(write_corpus(&corpus, &report), Err(CorpusError::OutputNotEmpty(_))));
        // Tamper with one byte.
        let path = corpus.join(DOCUMENTS_FILE);
        let text = fs::read_to_string(&path).unwrap().replacen("Alpha", "Alpho", 1);
        fs::write(&path, text).unwrap();
        assert!(matches!(read_corpus(&corpus), Err(CorpusError::ShaMismatch { .. })));
    }

    #[test]
    fn output_inside_input_is_rejected() {
        let input = tempfile::tempdir().unwrap();
        write(input.path(), "a.md", long("a").as_bytes());
        let report = import(input.path(), &opts()).unwrap();
        let err = write_corpus(&input.path().join("out/corpus"), &report).unwrap_err();
        assert!(matches!(err, CorpusError::OutputInsideInput { .. }), "{err}");
        assert!(matches!(write_corpus(input.path(), &report), Err(CorpusError::OutputInsideInput { .. })));
        let empty = ImportReport { documents: vec![], ..report };
        assert!(matches!(write_corpus(&input.path().join("x"), &empty), Err(CorpusError::Empty)));
    }

    #[test]
    fn creation_time_is_rfc3339_utc_to_the_second() {
        let at = |s: i64, ns: i32| jiff::Timestamp::new(s, ns).unwrap();
        assert_eq!(rfc3339_seconds(at(0, 0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_seconds(at(951_825_599, 999_999_999)), "2000-02-29T11:59:59Z");
        assert_eq!(rfc3339_seconds(at(1_700_000_000, 500_000_000)), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_seconds(jiff::Timestamp::MAX), "9999-12-30T22:00:00Z");
    }

    #[test]
    fn a_corpus_with_a_wrong_version_or_count_is_refused() {
        let input = tempfile::tempdir().unwrap();
        write(input.path(), "a.md", long("a").as_bytes());
        let report = import(input.path(), &opts()).unwrap();
        let out = tempfile::tempdir().unwrap();
        let corpus = out.path().join("corpus");
        write_corpus(&corpus, &report).unwrap();
        let path = corpus.join(MANIFEST_FILE);
        let manifest = fs::read_to_string(&path).unwrap();
        fs::write(&path, manifest.replace("\"version\": 1", "\"version\": 2")).unwrap();
        let err = read_corpus(&corpus).unwrap_err();
        assert!(err.to_string().ends_with("unsupported version 2"), "{err}");
        fs::write(&path, manifest.replace("\"documents\": 1", "\"documents\": 3")).unwrap();
        let err = read_corpus(&corpus).unwrap_err();
        assert!(err.to_string().ends_with("1 documents, manifest says 3"), "{err}");
    }
}
