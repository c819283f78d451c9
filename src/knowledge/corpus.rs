//! Importing local documents (runbooks, docs, code) into a verified corpus directory.
//!
//! A corpus is `documents.jsonl` (one [`Document`] per line) plus `manifest.json` holding the
//! SHA-256 of that file, so a reader can tell when it was altered.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Corpus format version written to and required in `manifest.json`.
pub const CORPUS_VERSION: u32 = 1;
/// Name of the documents file inside a corpus directory.
pub const DOCUMENTS_FILE: &str = "documents.jsonl";
/// Name of the manifest file inside a corpus directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Directory names skipped by default.
pub const DEFAULT_EXCLUDE_DIRS: &[&str] =
    &[".git", ".hg", ".svn", "node_modules", "vendor", "dist", "build", ".cache", "target"];
/// Extensions imported by default (documentation plus common code and config).
pub const DEFAULT_EXTENSIONS: &[&str] =
    &["md", "markdown", "txt", "rst", "adoc", "rs", "go", "py", "sh", "yaml", "yml", "json", "toml"];

/// Errors of corpus import, writing and reading.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The input root is not a directory.
    #[error("input {0} is not a directory")]
    NotADirectory(PathBuf),
    /// The output directory exists and is not empty.
    #[error("output directory {0} is not empty")]
    OutputNotEmpty(PathBuf),
    /// The output directory is the input or lies inside it.
    #[error("output directory {output} is inside the input {input}")]
    OutputInsideInput {
        /// The output directory.
        output: PathBuf,
        /// The input root.
        input: PathBuf,
    },
    /// Nothing was accepted, so there is no corpus to write.
    #[error("no documents to write")]
    Empty,
    /// `manifest.json` or a document line is malformed.
    #[error("invalid corpus {path}: {reason}")]
    Invalid {
        /// The file involved.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `documents.jsonl` does not match the manifest's hash.
    #[error("corpus {path} was altered: sha256 {actual} does not match manifest {expected}")]
    ShaMismatch {
        /// The documents file.
        path: PathBuf,
        /// Hash recorded in the manifest.
        expected: String,
        /// Hash of the file as read.
        actual: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CorpusError + '_ {
    move |source| CorpusError::Io { path: path.to_owned(), source }
}

/// How [`import`] selects files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    /// Label stored in every document's `source`.
    pub source: String,
    /// Accepted extensions, lower-case without the dot; `*` accepts any file.
    pub extensions: Vec<String>,
    /// Directory names never entered.
    pub exclude_dirs: Vec<String>,
    /// Minimum characters of trimmed text.
    pub min_chars: usize,
    /// Maximum file size in bytes.
    pub max_file_bytes: u64,
    /// Maximum number of accepted documents; `None` = unlimited.
    pub max_documents: Option<usize>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        Self {
            source: "local".to_owned(),
            extensions: DEFAULT_EXTENSIONS.iter().map(|s| (*s).to_owned()).collect(),
            exclude_dirs: DEFAULT_EXCLUDE_DIRS.iter().map(|s| (*s).to_owned()).collect(),
            min_chars: 100,
            max_file_bytes: 16 * 1024 * 1024,
            max_documents: None,
        }
    }
}

impl ImportOptions {
    /// Parses a comma-separated extension list: leading dots optional, case-insensitive, `*` = any.
    pub fn parse_extensions(list: &str) -> Vec<String> {
        split_list(list).map(|s| s.trim_start_matches('.').to_ascii_lowercase()).filter(|s| !s.is_empty()).collect()
    }

    /// Parses a comma-separated list of directory names.
    pub fn parse_list(list: &str) -> Vec<String> {
        split_list(list).map(str::to_owned).collect()
    }

    fn accepts_extension(&self, path: &Path) -> bool {
        if self.extensions.iter().any(|e| e == "*") {
            return true;
        }
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        ext.is_some_and(|ext| self.extensions.contains(&ext))
    }
}

fn split_list(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// One imported document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    /// Path relative to the input root, `/`-separated.
    pub id: String,
    /// Front matter `title:`, first heading, or the file stem.
    pub title: String,
    /// The import's source label.
    pub source: String,
    /// Optional link to the original.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Normalised text (no BOM, LF line ends, trimmed, one trailing newline).
    pub text: String,
    /// Hex SHA-256 of `text`.
    pub sha256: String,
}

impl Document {
    /// Builds a document from raw text: normalises it, derives the title (falling back to
    /// `fallback_title`) and hashes it.
    pub fn from_text(id: String, source: String, url: Option<String>, raw: &str, fallback_title: &str) -> Self {
        let text = normalise(raw);
        let title = title_of(&text).unwrap_or_else(|| fallback_title.to_owned());
        let sha256 = sha256_hex(text.as_bytes());
        Self { id, title, source, url, text, sha256 }
    }
}

/// Why a file was not imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SkipReason {
    /// The extension is not in the filter.
    Extension,
    /// Larger than `max_file_bytes`.
    TooLarge {
        /// File size.
        bytes: u64,
    },
    /// Not valid UTF-8.
    NotUtf8,
    /// Contains a NUL byte.
    Binary,
    /// Fewer than `min_chars` characters after trimming.
    TooShort {
        /// Characters found.
        chars: usize,
    },
    /// Same normalised text as an earlier document.
    Duplicate {
        /// Id of the first document with this text.
        of: String,
    },
    /// `max_documents` was already reached.
    Limit,
    /// A symlink leading outside the root, to a directory, or nowhere.
    Symlink,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Extension => f.write_str("extension not selected"),
            Self::TooLarge { bytes } => write!(f, "too large ({bytes} bytes)"),
            Self::NotUtf8 => f.write_str("not UTF-8"),
            Self::Binary => f.write_str("binary (NUL byte)"),
            Self::TooShort { chars } => write!(f, "too short ({chars} chars)"),
            Self::Duplicate { of } => write!(f, "duplicate of {of}"),
            Self::Limit => f.write_str("document limit reached"),
            Self::Symlink => f.write_str("symlink outside the root or to a directory"),
        }
    }
}

/// A file that was not imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Path relative to the input root.
    pub path: String,
    /// Why.
    pub reason: SkipReason,
}

/// Tallies of an import.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportCounts {
    /// Files found (after excluded directories).
    pub discovered: usize,
    /// Documents accepted.
    pub accepted: usize,
    /// Skipped as duplicates.
    pub duplicates: usize,
    /// Skipped by extension.
    pub skipped_extension: usize,
    /// Skipped as too large.
    pub skipped_large: usize,
    /// Skipped as not UTF-8.
    pub skipped_utf8: usize,
    /// Skipped as binary.
    pub skipped_binary: usize,
    /// Skipped as too short.
    pub skipped_short: usize,
    /// Skipped over the document limit.
    pub skipped_limit: usize,
    /// Skipped symlinks.
    pub skipped_symlink: usize,
}

impl fmt::Display for ImportCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "discovered={} accepted={} duplicates={} skipped_extension={} skipped_large={} skipped_utf8={} \
             skipped_binary={} skipped_short={} skipped_limit={} skipped_symlink={}",
            self.discovered,
            self.accepted,
            self.duplicates,
            self.skipped_extension,
            self.skipped_large,
            self.skipped_utf8,
            self.skipped_binary,
            self.skipped_short,
            self.skipped_limit,
            self.skipped_symlink
        )
    }
}

/// Result of [`import`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportReport {
    /// Canonical input root.
    pub root: PathBuf,
    /// Source label of the import.
    pub source: String,
    /// Accepted documents, in path order.
    pub documents: Vec<Document>,
    /// Files not imported, in path order.
    pub skipped: Vec<Skipped>,
    /// Tallies.
    pub counts: ImportCounts,
}

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

/// Imports the files under `root` (sorted, deterministic; see [`ImportOptions`]).
pub fn import(root: &Path, options: &ImportOptions) -> Result<ImportReport, CorpusError> {
    let canonical = root.canonicalize().map_err(io_err(root))?;
    if !canonical.is_dir() {
        return Err(CorpusError::NotADirectory(root.to_owned()));
    }
    let mut files = Vec::new();
    walk(&canonical, &canonical, options, &mut files)?;
    let mut report = ImportReport {
        root: canonical.clone(),
        source: options.source.clone(),
        documents: Vec::new(),
        skipped: Vec::new(),
        counts: ImportCounts::default(),
    };
    let mut seen: HashMap<String, String> = HashMap::new();
    for (rel, entry) in files {
        report.counts.discovered += 1;
        let reason = match entry {
            Entry::Symlink => Some(SkipReason::Symlink),
            Entry::File(path) => consider(&path, &rel, options, &mut report, &mut seen)?,
        };
        if let Some(reason) = reason {
            let counts = &mut report.counts;
            match &reason {
                SkipReason::Extension => counts.skipped_extension += 1,
                SkipReason::TooLarge { .. } => counts.skipped_large += 1,
                SkipReason::NotUtf8 => counts.skipped_utf8 += 1,
                SkipReason::Binary => counts.skipped_binary += 1,
                SkipReason::TooShort { .. } => counts.skipped_short += 1,
                SkipReason::Duplicate { .. } => counts.duplicates += 1,
                SkipReason::Limit => counts.skipped_limit += 1,
                SkipReason::Symlink => counts.skipped_symlink += 1,
            }
            report.skipped.push(Skipped { path: rel, reason });
        }
    }
    report.counts.accepted = report.documents.len();
    Ok(report)
}

/// Checks one file; pushes it as a document or returns why it was skipped.
fn consider(
    path: &Path,
    rel: &str,
    options: &ImportOptions,
    report: &mut ImportReport,
    seen: &mut HashMap<String, String>,
) -> Result<Option<SkipReason>, CorpusError> {
    if !options.accepts_extension(Path::new(rel)) {
        return Ok(Some(SkipReason::Extension));
    }
    if options.max_documents.is_some_and(|max| report.documents.len() >= max) {
        return Ok(Some(SkipReason::Limit));
    }
    let bytes = fs::metadata(path).map_err(io_err(path))?.len();
    if bytes > options.max_file_bytes {
        return Ok(Some(SkipReason::TooLarge { bytes }));
    }
    let raw = fs::read(path).map_err(io_err(path))?;
    if raw.contains(&0) {
        return Ok(Some(SkipReason::Binary));
    }
    let Ok(raw) = String::from_utf8(raw) else {
        return Ok(Some(SkipReason::NotUtf8));
    };
    let stem = Path::new(rel).file_stem().and_then(|s| s.to_str()).unwrap_or(rel);
    let doc = Document::from_text(rel.to_owned(), options.source.clone(), None, &raw, stem);
    let chars = doc.text.trim().chars().count();
    if chars < options.min_chars {
        return Ok(Some(SkipReason::TooShort { chars }));
    }
    if let Some(first) = seen.get(&doc.sha256) {
        return Ok(Some(SkipReason::Duplicate { of: first.clone() }));
    }
    seen.insert(doc.sha256.clone(), doc.id.clone());
    report.documents.push(doc);
    Ok(None)
}

enum Entry {
    File(PathBuf),
    Symlink,
}

/// Collects files under `dir` in sorted order as (relative id, entry).
fn walk(root: &Path, dir: &Path, options: &ImportOptions, out: &mut Vec<(String, Entry)>) -> Result<(), CorpusError> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        entries.push(entry.path());
    }
    entries.sort();
    for path in entries {
        let meta = fs::symlink_metadata(&path).map_err(io_err(&path))?;
        let rel = relative_id(root, &path);
        if meta.file_type().is_symlink() {
            // Follow only links to regular files that resolve inside the root.
            match path.canonicalize() {
                Ok(target) if target.starts_with(root) && target.is_file() => out.push((rel, Entry::File(target))),
                _ => out.push((rel, Entry::Symlink)),
            }
        } else if meta.is_dir() {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if !options.exclude_dirs.iter().any(|d| d == name) {
                walk(root, &path, options, out)?;
            }
        } else if meta.is_file() {
            out.push((rel, Entry::File(path)));
        }
    }
    Ok(())
}

fn relative_id(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// Strips a BOM, converts CRLF/CR to LF, trims and ends with one newline.
pub fn normalise(raw: &str) -> String {
    let raw = raw.strip_prefix('\u{feff}').unwrap_or(raw);
    let text = raw.replace("\r\n", "\n").replace('\r', "\n");
    let trimmed = text.trim();
    if trimmed.is_empty() { String::new() } else { format!("{trimmed}\n") }
}

/// Title from front matter `title:`, else the first `# ` heading or setext `Title\n===`.
pub fn title_of(text: &str) -> Option<String> {
    if let Some(rest) = text.strip_prefix("---\n")
        && let Some(end) = rest.find("\n---\n").or_else(|| rest.strip_suffix("\n---\n").map(str::len))
    {
        for line in rest[..end].lines() {
            if let Some(value) = line.strip_prefix("title:") {
                let value = value.trim().trim_matches(|c| c == '"' || c == '\'').trim();
                if !value.is_empty() {
                    return Some(value.to_owned());
                }
            }
        }
    }
    let mut previous: Option<&str> = None;
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim_end();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            previous = None;
            continue;
        }
        if in_fence {
            continue;
        }
        if let Some(h) = trimmed.strip_prefix("# ") {
            let h = h.trim().trim_end_matches('#').trim();
            if !h.is_empty() {
                return Some(h.to_owned());
            }
        }
        if let Some(prev) = previous
            && !trimmed.is_empty()
            && trimmed.chars().all(|c| c == '=')
            && !prev.trim().is_empty()
        {
            return Some(prev.trim().to_owned());
        }
        previous = Some(trimmed);
    }
    None
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
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
        created: rfc3339_now(),
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
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CorpusError> {
    let tmp = path.with_extension("tmp");
    let mut file = fs::File::create(&tmp).map_err(io_err(&tmp))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))
}

/// Current UTC time as RFC 3339 (seconds precision).
fn rfc3339_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(word: &str) -> String {
        format!("{word} {}\n", "lorem ipsum dolor sit amet ".repeat(6))
    }

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }

    fn opts() -> ImportOptions {
        ImportOptions { source: "test".into(), ..ImportOptions::default() }
    }

    fn reason_of(report: &ImportReport, path: &str) -> Option<SkipReason> {
        report.skipped.iter().find(|s| s.path == path).map(|s| s.reason.clone())
    }

    #[test]
    fn each_skip_reason_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "a.md", long("alpha").as_bytes());
        write(root, "b.md", long("alpha").as_bytes()); // duplicate of a.md
        write(root, "c.png", long("png").as_bytes());
        write(root, "d.txt", b"short");
        write(root, "e.txt", &[b'h', b'i', 0, b'x']);
        write(root, "f.txt", &[0xff, 0xfe, 0x41]);
        write(root, "g.md", &vec![b'a'; 2048]);
        let options = ImportOptions { max_file_bytes: 1024, ..opts() };
        let report = import(root, &options).unwrap();
        assert_eq!(report.documents.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["a.md"]);
        assert_eq!(reason_of(&report, "b.md"), Some(SkipReason::Duplicate { of: "a.md".into() }));
        assert_eq!(reason_of(&report, "c.png"), Some(SkipReason::Extension));
        assert_eq!(reason_of(&report, "d.txt"), Some(SkipReason::TooShort { chars: 5 }));
        assert_eq!(reason_of(&report, "e.txt"), Some(SkipReason::Binary));
        assert_eq!(reason_of(&report, "f.txt"), Some(SkipReason::NotUtf8));
        assert_eq!(reason_of(&report, "g.md"), Some(SkipReason::TooLarge { bytes: 2048 }));
        let c = report.counts;
        assert_eq!((c.discovered, c.accepted, c.duplicates), (7, 1, 1));
        assert_eq!(
            (c.skipped_extension, c.skipped_short, c.skipped_binary, c.skipped_utf8, c.skipped_large),
            (1, 1, 1, 1, 1)
        );
        assert_eq!(SkipReason::Duplicate { of: "a.md".into() }.to_string(), "duplicate of a.md");
    }

    #[test]
    fn limit_excluded_dirs_and_nested_ids() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (i, rel) in
            ["docs/one.md", "docs/sub/two.md", "three.md", ".git/x.md", "node_modules/y.md", "z/target/t.md"]
                .iter()
                .enumerate()
        {
            write(root, rel, long(&format!("doc{i}")).as_bytes());
        }
        let report = import(root, &opts()).unwrap();
        let ids: Vec<_> = report.documents.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["docs/one.md", "docs/sub/two.md", "three.md"]);
        let limited = import(root, &ImportOptions { max_documents: Some(2), ..opts() }).unwrap();
        assert_eq!(limited.documents.len(), 2);
        assert_eq!(reason_of(&limited, "three.md"), Some(SkipReason::Limit));
        let custom = import(root, &ImportOptions { exclude_dirs: vec!["docs".into()], ..opts() }).unwrap();
        let ids: Vec<_> = custom.documents.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, [".git/x.md", "node_modules/y.md", "three.md", "z/target/t.md"]);
    }

    #[test]
    fn extension_filter_and_star() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "a.MD", long("a").as_bytes());
        write(root, "b.log", long("b").as_bytes());
        write(root, "noext", long("c").as_bytes());
        let report = import(root, &opts()).unwrap();
        assert_eq!(report.documents.len(), 1);
        let only_log = ImportOptions { extensions: ImportOptions::parse_extensions(".LOG, "), ..opts() };
        let report = import(root, &only_log).unwrap();
        assert_eq!(report.documents.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["b.log"]);
        let any = ImportOptions { extensions: ImportOptions::parse_extensions("*"), ..opts() };
        assert_eq!(import(root, &any).unwrap().documents.len(), 3);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_out_of_root_are_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.md", long("secret").as_bytes());
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "in.md", long("inside").as_bytes());
        std::os::unix::fs::symlink(outside.path().join("secret.md"), root.join("out.md")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("outdir")).unwrap();
        std::os::unix::fs::symlink(root.join("in.md"), root.join("alias.md")).unwrap();
        let report = import(root, &opts()).unwrap();
        assert_eq!(reason_of(&report, "out.md"), Some(SkipReason::Symlink));
        assert_eq!(reason_of(&report, "outdir"), Some(SkipReason::Symlink));
        assert_eq!(reason_of(&report, "in.md"), Some(SkipReason::Duplicate { of: "alias.md".into() }));
        assert!(report.documents.iter().all(|d| !d.text.contains("secret")));
    }

    #[test]
    fn titles_from_front_matter_heading_setext_and_stem() {
        assert_eq!(title_of("---\nowner: x\ntitle: \"Disk full\"\n---\n# Other\n").as_deref(), Some("Disk full"));
        assert_eq!(title_of("intro\n\n# High CPU #\nbody").as_deref(), Some("High CPU"));
        assert_eq!(
            title_of("Postgres connections\n====================\nbody").as_deref(),
            Some("Postgres connections")
        );
        assert_eq!(title_of("```\n# not a title\n```\nplain"), None);
        assert_eq!(title_of("## Second level only\n"), None);
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "notes/my-runbook.txt", long("untitled").as_bytes());
        let report = import(dir.path(), &opts()).unwrap();
        assert_eq!(report.documents[0].title, "my-runbook");
    }

    #[test]
    fn normalisation_and_hash() {
        assert_eq!(normalise("\u{feff}  a\r\nb\rc \n\n"), "a\nb\nc\n");
        let doc = Document::from_text("x".into(), "s".into(), None, "a\r\n", "x");
        assert_eq!(doc.sha256, sha256_hex(b"a\n"));
    }

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
}
