//! Walking an input directory and choosing which files become documents, and why the others
//! do not.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::document::Document;
use super::error::{CorpusError, io_err};

/// Directory names skipped by default.
pub const DEFAULT_EXCLUDE_DIRS: &[&str] =
    &[".git", ".hg", ".svn", "node_modules", "vendor", "dist", "build", ".cache", "target"];
/// Extensions imported by default (documentation plus common code and config).
pub const DEFAULT_EXTENSIONS: &[&str] =
    &["md", "markdown", "txt", "rst", "adoc", "rs", "go", "py", "sh", "yaml", "yml", "json", "toml"];

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
    /// The first rule the file failed (extension, size, encoding, duplicate, limit, symlink).
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

impl ImportCounts {
    /// Counts one skipped file under its reason.
    pub fn record(&mut self, reason: &SkipReason) {
        let counter = match reason {
            SkipReason::Extension => &mut self.skipped_extension,
            SkipReason::TooLarge { .. } => &mut self.skipped_large,
            SkipReason::NotUtf8 => &mut self.skipped_utf8,
            SkipReason::Binary => &mut self.skipped_binary,
            SkipReason::TooShort { .. } => &mut self.skipped_short,
            SkipReason::Duplicate { .. } => &mut self.duplicates,
            SkipReason::Limit => &mut self.skipped_limit,
            SkipReason::Symlink => &mut self.skipped_symlink,
        };
        *counter += 1;
    }
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
    /// Files found, documents accepted, and skipped files counted per reason.
    pub counts: ImportCounts,
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
            report.counts.record(&reason);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knowledge::corpus::fixtures::{long, opts, write};

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
    fn titles_fall_back_to_the_file_stem() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "notes/my-runbook.txt", long("untitled").as_bytes());
        write(dir.path(), "notes/titled.md", format!("# Titled\n{}", long("titled")).as_bytes());
        let report = import(dir.path(), &opts()).unwrap();
        let titles: Vec<_> = report.documents.iter().map(|d| d.title.as_str()).collect();
        assert_eq!(titles, ["my-runbook", "Titled"]);
    }

    #[test]
    fn lists_are_parsed_leniently() {
        assert_eq!(ImportOptions::parse_extensions(" .MD, txt,,.,*"), ["md", "txt", "*"]);
        assert_eq!(ImportOptions::parse_list(" docs , ,vendor"), ["docs", "vendor"]);
        assert!(ImportOptions::parse_extensions(" , ").is_empty());
    }

    #[test]
    fn counts_tally_every_reason_once() {
        let mut counts = ImportCounts::default();
        for reason in [
            SkipReason::Extension,
            SkipReason::TooLarge { bytes: 1 },
            SkipReason::NotUtf8,
            SkipReason::Binary,
            SkipReason::TooShort { chars: 1 },
            SkipReason::Duplicate { of: "a".into() },
            SkipReason::Limit,
            SkipReason::Symlink,
        ] {
            counts.record(&reason);
        }
        assert_eq!(
            counts.to_string(),
            "discovered=0 accepted=0 duplicates=1 skipped_extension=1 skipped_large=1 skipped_utf8=1 \
             skipped_binary=1 skipped_short=1 skipped_limit=1 skipped_symlink=1"
        );
    }
}
