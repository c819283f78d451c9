//! `akritas corpus …` and `akritas index …`: import runbooks, build, search and inspect the index.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{ArgGroup, Args, Subcommand};
use serde::Serialize;

use crate::knowledge::corpus::{self, Document, ImportOptions, ImportReport, Manifest};
use crate::knowledge::index::{self, ChunkingParams, KnowledgeIndex, ListFilter};

/// `corpus` arguments.
#[derive(Args, Debug)]
pub(crate) struct CorpusArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: CorpusCommand,
}

/// Corpus subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum CorpusCommand {
    /// Import local files (runbooks, docs, code) into a corpus directory.
    Import(ImportArgs),
}

/// `corpus import` arguments.
#[derive(Args, Debug)]
pub(crate) struct ImportArgs {
    /// Directory to import (searched recursively; symlinks never lead outside it).
    #[arg(long, value_name = "DIR")]
    pub input: PathBuf,
    /// Corpus directory to write; must be missing or empty and not inside the input.
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
    /// Source label stored with every document.
    #[arg(long, value_name = "LABEL")]
    pub source: String,
    /// Comma-separated extensions (leading dot optional; `*` = any file)
    /// [default: md,markdown,txt,rst,adoc,rs,go,py,sh,yaml,yml,json,toml].
    #[arg(long, value_name = "LIST")]
    pub extensions: Option<String>,
    /// Comma-separated directory names to skip
    /// [default: .git,.hg,.svn,node_modules,vendor,dist,build,.cache,target].
    #[arg(long, value_name = "LIST")]
    pub exclude_dirs: Option<String>,
    /// Minimum characters of trimmed text.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub min_chars: usize,
    /// Maximum file size in MiB.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_file_mb: u64,
    /// Maximum documents to accept (0 = unlimited).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_documents: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `index` arguments.
#[derive(Args, Debug)]
pub(crate) struct IndexArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: IndexCommand,
}

/// Index subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum IndexCommand {
    /// Build a search index from a corpus (or directly from a directory of files).
    Build(BuildArgs),
    /// Search the index; one result per document, best first.
    Search(SearchArgs),
    /// Print the index's counts, parameters and hashes.
    Inspect(InspectArgs),
    /// List indexed documents, optionally filtered.
    List(ListArgs),
}

/// `index build` arguments.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("from").required(true).args(["corpus", "input"])))]
pub(crate) struct BuildArgs {
    /// Corpus directory written by `corpus import`.
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
    /// Directory of raw files, imported on the fly with default options.
    #[arg(long, value_name = "DIR")]
    pub input: Option<PathBuf>,
    /// Source label for `--input`.
    #[arg(long, value_name = "LABEL", default_value = "local", requires = "input")]
    pub source: String,
    /// Index directory to write; must be missing or empty (see --force).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
    /// Replace the index already in --output: the new one is built beside it and swapped
    /// in. A directory that holds no index written by this command is never changed.
    #[arg(long)]
    pub force: bool,
    /// Chunk length in characters.
    #[arg(long, value_name = "N", default_value_t = 1200, value_parser = clap::value_parser!(u32).range(1..))]
    pub chunk_chars: u32,
    /// Characters shared by consecutive chunks (below --chunk-chars).
    #[arg(long, value_name = "N", default_value_t = 150)]
    pub overlap_chars: u32,
}

/// `index search` arguments.
#[derive(Args, Debug)]
pub(crate) struct SearchArgs {
    /// Free-text query.
    #[arg(value_name = "QUERY")]
    pub query: String,
    /// Index directory.
    #[arg(long, value_name = "DIR")]
    pub index: PathBuf,
    /// Number of documents to return (1–50).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u8).range(1..=50))]
    pub top_k: u8,
    /// Print results as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `index inspect` arguments.
#[derive(Args, Debug)]
pub(crate) struct InspectArgs {
    /// Index directory.
    #[arg(long, value_name = "DIR")]
    pub index: PathBuf,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `index list` arguments.
#[derive(Args, Debug)]
pub(crate) struct ListArgs {
    /// Index directory.
    #[arg(long, value_name = "DIR")]
    pub index: PathBuf,
    /// Case-insensitive substring of the document id.
    #[arg(long, value_name = "S")]
    pub id: Option<String>,
    /// Case-insensitive substring of the title.
    #[arg(long, value_name = "S")]
    pub title: Option<String>,
    /// Case-insensitive substring of the source.
    #[arg(long, value_name = "S")]
    pub source: Option<String>,
    /// Documents to skip.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub offset: usize,
    /// Documents to print (1–10000).
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub limit: u16,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `akritas corpus …`; exit 1 on failure.
pub fn run_corpus(args: CorpusArgs) -> ExitCode {
    finish(match args.command {
        CorpusCommand::Import(args) => import(&args),
    })
}

/// Runs `akritas index …`; exit 1 on failure, 2 on unusable arguments.
pub fn run_index(args: IndexArgs) -> ExitCode {
    finish(match args.command {
        IndexCommand::Build(args) => build(&args),
        IndexCommand::Search(args) => search(&args),
        IndexCommand::Inspect(args) => inspect(&args),
        IndexCommand::List(args) => list(&args),
    })
}

/// A usage problem found after parsing (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

fn finish(result: anyhow::Result<String>) -> ExitCode {
    match result {
        Ok(out) => {
            super::stdout::text(&out);
            ExitCode::SUCCESS
        }
        Err(e) if e.is::<UsageError>() => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_json(value: &impl Serialize) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

/// Document summary for JSON reports (the text itself is in the corpus).
#[derive(Serialize)]
struct DocumentSummary<'a> {
    id: &'a str,
    title: &'a str,
    source: &'a str,
    sha256: &'a str,
    chars: usize,
}

fn import(args: &ImportArgs) -> anyhow::Result<String> {
    let mut options = ImportOptions {
        source: args.source.clone(),
        min_chars: args.min_chars,
        max_file_bytes: args.max_file_mb.saturating_mul(1024 * 1024),
        max_documents: (args.max_documents > 0).then_some(args.max_documents),
        ..ImportOptions::default()
    };
    if args.source.trim().is_empty() {
        bail!(UsageError("--source must not be empty".into()));
    }
    if let Some(list) = &args.extensions {
        options.extensions = ImportOptions::parse_extensions(list);
        if options.extensions.is_empty() {
            bail!(UsageError("--extensions lists no extension".into()));
        }
    }
    if let Some(list) = &args.exclude_dirs {
        options.exclude_dirs = ImportOptions::parse_list(list);
    }
    let report =
        corpus::import(&args.input, &options).with_context(|| format!("importing {}", args.input.display()))?;
    let manifest = corpus::write_corpus(&args.output, &report)
        .with_context(|| format!("writing corpus {}", args.output.display()))?;
    let path = absolute(&args.output);
    if args.json {
        #[derive(Serialize)]
        struct Out<'a> {
            path: &'a Path,
            manifest: &'a Manifest,
            counts: &'a corpus::ImportCounts,
            documents: Vec<DocumentSummary<'a>>,
            skipped: &'a [corpus::Skipped],
        }
        let documents = report.documents.iter().map(summary).collect();
        return print_json(&Out {
            path: &path,
            manifest: &manifest,
            counts: &report.counts,
            documents,
            skipped: &report.skipped,
        });
    }
    let mut out = format!("corpus imported: {} path={} sha256={}\n", report.counts, path.display(), manifest.sha256);
    for skipped in &report.skipped {
        let _ = writeln!(out, "skipped {:?}: {}", skipped.path, skipped.reason);
    }
    Ok(out)
}

fn summary(doc: &Document) -> DocumentSummary<'_> {
    DocumentSummary {
        id: &doc.id,
        title: &doc.title,
        source: &doc.source,
        sha256: &doc.sha256,
        chars: doc.text.chars().count(),
    }
}

fn build(args: &BuildArgs) -> anyhow::Result<String> {
    let params = ChunkingParams { chunk_chars: args.chunk_chars as usize, overlap_chars: args.overlap_chars as usize };
    if let Err(e) = params.validate() {
        bail!(UsageError(e.to_string()));
    }
    let (docs, manifest_sha256) = match (&args.corpus, &args.input) {
        (Some(dir), _) => {
            let (manifest, docs) =
                corpus::read_corpus(dir).with_context(|| format!("reading corpus {}", dir.display()))?;
            (docs, Some(manifest.sha256))
        }
        (None, Some(dir)) => {
            let options = ImportOptions { source: args.source.clone(), ..ImportOptions::default() };
            let report: ImportReport =
                corpus::import(dir, &options).with_context(|| format!("importing {}", dir.display()))?;
            if report.documents.is_empty() {
                bail!("no importable documents in {} ({})", dir.display(), report.counts);
            }
            (report.documents, None)
        }
        (None, None) => bail!(UsageError("one of --corpus or --input is required".into())),
    };
    let built = if args.force {
        KnowledgeIndex::replace_on_disk(&args.output, &docs, params, manifest_sha256)
    } else {
        KnowledgeIndex::build_on_disk(&args.output, &docs, params, manifest_sha256)
    };
    let index = match built {
        Err(index::IndexError::OutputNotEmpty(dir)) if !args.force => bail!(
            "index directory {} is not empty; add --force to replace the index in it, or choose a missing or \
             empty --output",
            dir.display()
        ),
        built => built.with_context(|| format!("building index {}", args.output.display()))?,
    };
    let stats = index.stats();
    Ok(format!(
        "index built: documents={} chunks={} content_sha256={} path={}\n",
        stats.documents,
        stats.chunks,
        stats.content_sha256,
        absolute(&args.output).display()
    ))
}

/// Opens the index in `dir`; when there is none, says how to build it.
fn open(dir: &Path) -> anyhow::Result<KnowledgeIndex> {
    match KnowledgeIndex::open(dir) {
        Err(index::IndexError::Io { path, error })
            if error.kind() == std::io::ErrorKind::NotFound && path == dir.join(index::META_FILE) =>
        {
            let missing =
                if dir.is_dir() { format!("it has no {}", index::META_FILE) } else { "no such directory".into() };
            bail!(
                "no index at {} ({missing}); run `akritas index build --corpus <CORPUS_DIR> --output {}` \
                 (or `--input <DIR>` for a directory of raw files) first",
                dir.display(),
                dir.display()
            )
        }
        opened => opened.with_context(|| format!("opening index {}", dir.display())),
    }
}

fn search(args: &SearchArgs) -> anyhow::Result<String> {
    let index = open(&args.index)?;
    let hits = match index.search(&args.query, usize::from(args.top_k)) {
        Err(e @ index::IndexError::EmptyQuery) => bail!(UsageError(e.to_string())),
        other => other?,
    };
    if args.json {
        #[derive(Serialize)]
        struct Ranked<'a> {
            rank: usize,
            #[serde(flatten)]
            hit: &'a index::Hit,
        }
        #[derive(Serialize)]
        struct Out<'a> {
            query: &'a str,
            top_k: u8,
            results: Vec<Ranked<'a>>,
        }
        let results = hits.iter().enumerate().map(|(i, hit)| Ranked { rank: i + 1, hit }).collect();
        return print_json(&Out { query: &args.query, top_k: args.top_k, results });
    }
    if hits.is_empty() {
        eprintln!("no results");
    }
    let mut out = String::new();
    for (i, hit) in hits.iter().enumerate() {
        let _ = write!(
            out,
            "[{}] score={:.6} title={:?} document={:?} chunk={} source={:?}",
            i + 1,
            hit.score,
            hit.title,
            hit.document_id,
            hit.chunk,
            hit.source
        );
        if let Some(url) = &hit.url {
            let _ = write!(out, " url={url:?}");
        }
        let _ = writeln!(out, "\n    {}\n", hit.excerpt);
    }
    Ok(out)
}

fn inspect(args: &InspectArgs) -> anyhow::Result<String> {
    let index = open(&args.index)?;
    let stats = index.stats();
    let path = absolute(&args.index);
    let bytes = dir_bytes(&args.index);
    if args.json {
        #[derive(Serialize)]
        struct Out<'a> {
            path: &'a Path,
            bytes: u64,
            #[serde(flatten)]
            stats: &'a index::IndexStats,
        }
        return print_json(&Out { path: &path, bytes, stats: &stats });
    }
    let mut out = format!(
        "path={}\nbytes={bytes}\ndocuments={} chunks={}\nchunk_chars={} overlap_chars={}\ncontent_sha256={}\n\
         manifest_sha256={}\n",
        path.display(),
        stats.documents,
        stats.chunks,
        stats.chunk_chars,
        stats.overlap_chars,
        stats.content_sha256,
        stats.manifest_sha256.as_deref().unwrap_or("-"),
    );
    for (source, s) in &stats.sources {
        let _ = writeln!(out, "source {source:?}: documents={} chunks={}", s.documents, s.chunks);
    }
    Ok(out)
}

fn list(args: &ListArgs) -> anyhow::Result<String> {
    let index = open(&args.index)?;
    let filter = ListFilter { id: args.id.clone(), title: args.title.clone(), source: args.source.clone() };
    let limit = usize::from(args.limit);
    let documents = index.documents(&filter, args.offset, limit);
    let matched = index.count_documents(&filter);
    if args.json {
        #[derive(Serialize)]
        struct Out<'a> {
            matched: usize,
            offset: usize,
            limit: usize,
            documents: &'a [index::DocumentInfo],
        }
        return print_json(&Out { matched, offset: args.offset, limit, documents: &documents });
    }
    let mut out = String::new();
    for d in &documents {
        let _ =
            writeln!(out, "{:?} title={:?} source={:?} chunks={} chars={}", d.id, d.title, d.source, d.chunks, d.chars);
    }
    eprintln!("matched={matched} offset={} shown={}", args.offset, documents.len());
    Ok(out)
}

fn absolute(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Total size of the regular files directly inside `dir` (tantivy keeps a flat directory).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
