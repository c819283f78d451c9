//! The `akritas` command line: parse, dispatch, print.

pub(crate) mod ask;
pub(crate) mod change;
pub mod crds;
pub(crate) mod eval;
pub(crate) mod knowledge;
pub(crate) mod mcp_probe;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod stdout;
pub(crate) mod storage;
pub(crate) mod validate;

use self::stdout::outln;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::ServeFlags;

/// Akritas: a self-hosted, Kubernetes-native operations assistant.
#[derive(Parser, Debug)]
#[command(name = "akritas", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The `akritas` subcommands; each variant's doc comment is its line in `--help`.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run the host: HTTP API, resource watch, alerts, bots, Runs and the change pipeline.
    Serve(Box<ServeFlags>),
    /// Ask one question: a single Run in-process, printed with its tools and budget.
    #[command(after_help = "Other settings (tools, audit, limits) are read from --config and the AKRITAS_* \
                            environment variables, as for `akritas serve`.")]
    Ask(AskArgs),
    /// Inspect the audit journal.
    Audit(AuditArgs),
    /// Export a finished Run as a case, and replay a case offline.
    Run(run::RunArgs),
    /// Run a directory of cases against a model and check their expectations.
    Eval(eval::EvalArgs),
    /// Check resource manifests the way `serve` and the API server would; exit 1 on any problem.
    Validate(ValidateArgs),
    /// Print the CustomResourceDefinitions, write them to a directory, or check one.
    Crds(CrdsArgs),
    /// Import local documents (runbooks) into a corpus, with a quality report.
    Corpus(knowledge::CorpusArgs),
    /// Build, search and inspect a runbook search index (BM25).
    Index(knowledge::IndexArgs),
    /// Bundled MCP servers.
    Mcp(McpArgs),
    /// Prepare, show and apply workspace changes through a running host's API.
    Change(change::ChangeArgs),
    /// Print the OpenAPI document of the native API (what `GET /api/v1/openapi.json` answers).
    Openapi,
    /// Move the durable stores between backends.
    Storage(storage::StorageArgs),
}

/// `ask` arguments.
#[derive(Args, Debug)]
pub(crate) struct AskArgs {
    /// The question.
    #[arg(value_name = "QUESTION")]
    pub question: String,
    /// Print the full result as JSON (tool arguments and results included).
    #[arg(long)]
    pub json: bool,
    /// Continue this Run (the `Run: run_…` line of an earlier ask, or any finished Run of the
    /// same data directory): a follow-up with what it found, recorded on the same Run.
    #[arg(long, value_name = "RUN_ID")]
    pub run: Option<String>,
    /// The settings ask takes as flags; the others come from --config or AKRITAS_*.
    #[command(flatten)]
    pub flags: Box<ask::AskFlags>,
}

/// `audit` arguments.
#[derive(Args, Debug)]
pub(crate) struct AuditArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: AuditCommand,
}

/// Audit subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum AuditCommand {
    /// Verify an audit journal (or an alert journal) without changing it: the hash chain, then the same
    /// replay `serve` runs at start (event order, Run lifecycle, evidence; correlation for alerts); exit 1
    /// when either fails.
    Verify {
        /// Journal file.
        #[arg(value_name = "PATH", default_value = "data/audit/akritas.jsonl")]
        path: PathBuf,
        /// Also check every record's seal with the audit key held in this environment variable
        /// (the service's `audit_key_env`): a journal rewritten and re-chained without the key fails.
        #[arg(long, value_name = "ENV_VAR")]
        key_env: Option<String>,
        /// Also check the journal against the anchor the service wrote (`audit_anchor_file`): a
        /// journal cut behind it, or whose anchored record changed, fails. Needs --key-env.
        #[arg(long, value_name = "FILE", requires = "key_env")]
        anchor: Option<PathBuf>,
        /// Verify the audit in the PostgreSQL database (`storage: postgres`) whose connection
        /// string this environment variable holds, instead of a journal file: the chain from its
        /// anchor to its head, then every kept Run replayed. With --key-env, every seal too.
        #[arg(long, value_name = "ENV_VAR", conflicts_with = "anchor")]
        database_env: Option<String>,
        /// PEM certificates that sign the database server's certificate (with sslmode=require).
        #[arg(long, value_name = "FILE", requires = "database_env")]
        database_ca: Option<PathBuf>,
    },
}

/// `validate` arguments.
#[derive(Args, Debug)]
pub(crate) struct ValidateArgs {
    /// Directories of manifests (YAML or JSON, searched recursively).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Check only what the manifests and the service configuration say, not this machine: the
    /// variables `{env:}` names set, the directories Workspaces and KnowledgeBases name,
    /// validator programs installed (for CI that lacks the secrets).
    #[arg(long)]
    pub offline: bool,
    /// The service configuration, as for `serve`: what it refuses (`stdio_commands`,
    /// `resource_env`, `stdio_env`, …) is refused here too.
    #[command(flatten)]
    pub flags: Box<ServeFlags>,
}

/// `crds` arguments.
#[derive(Args, Debug)]
pub(crate) struct CrdsArgs {
    /// Write one file per CRD into this directory instead of printing.
    #[arg(long, value_name = "DIR", conflicts_with = "check")]
    pub output_dir: Option<PathBuf>,
    /// Compare this directory with the generated CRDs; exit 1 when they differ.
    #[arg(long, value_name = "DIR")]
    pub check: Option<PathBuf>,
}

/// `mcp` arguments.
#[derive(Args, Debug)]
pub(crate) struct McpArgs {
    /// Which server.
    #[command(subcommand)]
    pub server: McpServer,
}

/// Bundled MCP servers.
#[derive(Subcommand, Debug)]
pub(crate) enum McpServer {
    /// Read-only VictoriaMetrics tools over stdio (or streamable HTTP with --listen).
    Victoriametrics(crate::victoriametrics::VictoriaMetricsArgs),
    /// Connect Akritas' MCP client to a streamable HTTP server, list its tools, optionally call one.
    Probe(mcp_probe::McpProbeArgs),
}

/// What `serve` logs unless `RUST_LOG` says otherwise.
const DEFAULT_SERVE_LOG: &str = "warn,akritas=info";

/// Whether stderr is a terminal (logs are coloured only then).
fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Logs of a one-shot command (`ask`, `eval`) to stderr, secrets redacted: warnings, or what
/// `RUST_LOG` asks for; colours only on a terminal.
fn log_to_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(stderr_is_terminal())
        .with_writer(crate::redact::RedactedStderr)
        .try_init();
}

/// The command line as `--help` shows it: `serve` lists its settings under one heading per
/// section of the config file; `validate`, `eval` and `run replay` show the sections they read
/// and accept every other setting without listing it.
fn command() -> clap::Command {
    use clap::CommandFactory;
    const ACCEPTED: &str = "Every other `akritas serve` setting is accepted too, as a flag, an AKRITAS_* variable \
                            or in --config (`akritas serve --help` lists them).";
    let shown = |sections: &'static [&'static str]| {
        move |command: clap::Command| {
            command
                .mut_args(|arg| match crate::config::section_of(arg.get_id().as_str()) {
                    Some(section) if sections.contains(&section) => arg.help_heading(heading(section)),
                    Some(_) => arg.hide(true),
                    None => arg,
                })
                .after_help(ACCEPTED)
        }
    };
    Cli::command()
        .mut_subcommand("serve", |serve| {
            serve.mut_args(|arg| match crate::config::section_of(arg.get_id().as_str()) {
                Some(section) => arg.help_heading(heading(section)),
                None => arg,
            })
        })
        .mut_subcommand("validate", shown(&["operator", "mcp", "change", "kubernetes"]))
        .mut_subcommand("eval", shown(&["model", "budget"]))
        .mut_subcommand("run", |run| run.mut_subcommand("replay", shown(&["model", "budget"])))
}

/// The `--help` heading of the settings of a config file section.
fn heading(section: &str) -> &'static str {
    match section {
        "server" => "Server settings",
        "model" => "Model settings",
        "budget" => "Budget settings (per Run and per host)",
        "operator" => "Resource settings (sources, roots, namespaces)",
        "kubernetes" => "Kubernetes tool settings",
        "mcp" => "MCP settings",
        "change" => "Change settings (validators, approvals)",
        "alerts" => "Alert settings",
        "storage" => "Storage settings",
        _ => "Other settings",
    }
}

/// Parses the process arguments and runs the command.
pub fn run() -> ExitCode {
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    match cli.command {
        Command::Serve(flags) => serve::run(&flags),
        Command::Ask(args) => {
            ask::run(&args.question, args.run.as_deref(), &(*args.flags).into_serve_flags(), args.json)
        }
        Command::Audit(AuditArgs {
            command: AuditCommand::Verify { path, key_env, anchor, database_env, database_ca },
        }) => match (database_env, key_env) {
            (Some(url_env), key_env) => verify_database(&url_env, database_ca.as_deref(), key_env.as_deref()),
            (None, Some(key_env)) => verify_seals(&path, &key_env, anchor.as_deref()),
            (None, None) => verify_journal(&path),
        },
        Command::Validate(args) => validate::run(&args.dirs, &args.flags, args.offline),
        Command::Crds(args) => run_crds(&args),
        Command::Corpus(args) => knowledge::run_corpus(args),
        Command::Index(args) => knowledge::run_index(args),
        Command::Mcp(McpArgs { server: McpServer::Victoriametrics(args) }) => run_victoriametrics(args),
        Command::Mcp(McpArgs { server: McpServer::Probe(args) }) => mcp_probe::run(args),
        Command::Change(args) => change::run(args),
        Command::Run(args) => run::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Openapi => print_openapi(),
        Command::Storage(args) => storage::run(args),
    }
}

fn print_openapi() -> ExitCode {
    let document = crate::web::document();
    stdout::with(|out| {
        serde_json::to_writer_pretty(&mut *out, &document)?;
        std::io::Write::write_all(out, b"\n")
    });
    ExitCode::SUCCESS
}

fn run_victoriametrics(args: crate::victoriametrics::VictoriaMetricsArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("akritas mcp victoriametrics: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(crate::victoriametrics::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Verifies the keyed seals of an audit journal (and its anchor), then replays it.
fn verify_seals(path: &std::path::Path, key_env: &str, anchor: Option<&std::path::Path>) -> ExitCode {
    let key = std::env::var(key_env).map(|v| v.trim().to_string()).unwrap_or_default();
    if key.is_empty() {
        eprintln!("akritas audit verify: {key_env} is unset or empty; export the audit key there");
        return ExitCode::FAILURE;
    }
    let anchored = match anchor.map(crate::app::anchor::read).transpose() {
        Ok(anchored) => anchored.map(|a| a.head),
        Err(error) => {
            eprintln!("akritas audit verify: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    match crate::journal::verify_seals(path, key.as_bytes(), anchored.as_ref()) {
        Ok(report) => {
            outln!(
                "{}: {} sealed record(s) from seq {} verified with the key{}; {} unsealed record(s) before them",
                path.display(),
                report.sealed,
                report.first_sealed.map_or_else(|| "-".to_string(), |s| s.to_string()),
                anchored.map(|a| format!(", the anchor at seq {} holds", a.seq)).unwrap_or_default(),
                report.unsealed_before,
            );
            verify_journal(path)
        }
        Err(error) => {
            eprintln!("akritas audit verify: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Verifies the audit in the database (its seals too, with a key).
fn verify_database(url_env: &str, ca: Option<&std::path::Path>, key_env: Option<&str>) -> ExitCode {
    let fail = |message: String| {
        eprintln!("akritas audit verify: {message}");
        ExitCode::FAILURE
    };
    let url = std::env::var(url_env).map(|v| v.trim().to_string()).unwrap_or_default();
    if url.is_empty() {
        return fail(format!("{url_env} is unset or empty; export the database connection string there"));
    }
    let key = match key_env {
        Some(key_env) => match std::env::var(key_env).map(|v| v.trim().to_string()) {
            Ok(key) if !key.is_empty() => Some(key),
            _ => return fail(format!("{key_env} is unset or empty; export the audit key there")),
        },
        None => None,
    };
    let ca = match ca.map(std::fs::read).transpose() {
        Ok(ca) => ca,
        Err(error) => return fail(format!("cannot read the database CA bundle: {error}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return fail(format!("cannot start the async runtime: {error}")),
    };
    let verified = runtime.block_on(async {
        let db = crate::journal::database::Database::connect(&url, ca.as_deref(), 2).map_err(|e| e.to_string())?;
        crate::audit::verify_database(&db, key.as_deref().map(str::as_bytes)).await.map_err(|e| e.to_string())
    });
    match verified {
        Ok(report) => {
            let chain = &report.chain;
            outln!(
                "database audit: {} records from seq {} verified{} and {} Run(s) replayed, last seq {}, last hash {}",
                chain.records,
                chain.first_seq,
                if key.is_some() { format!(" ({} sealed with the key)", chain.sealed) } else { String::new() },
                report.runs,
                chain.last_seq,
                chain.last_hash
            );
            ExitCode::SUCCESS
        }
        Err(error) => fail(error),
    }
}

/// Verifies an audit journal, or an alert journal (recognised by its first record).
fn verify_journal(path: &std::path::Path) -> ExitCode {
    let verified = crate::audit::verify(path).map_err(|e| e.to_string()).or_else(|audit_error| {
        // The first application record tells the journal's kind; reading stops there.
        let first = crate::journal::scan_from(path, None, &mut |record| Err(record.kind));
        let alerts = matches!(first, Err(crate::journal::ScanError::Visit(kind)) if kind.starts_with("alerts."));
        if alerts { crate::alerts::store::verify(path).map_err(|e| e.to_string()) } else { Err(audit_error) }
    });
    match verified {
        Ok(report) => {
            outln!(
                "{}: {} records in {} segment(s) from seq {} verified and replayed, last seq {}, last hash {}",
                path.display(),
                report.records,
                report.segments,
                report.first_seq,
                report.last_seq,
                report.last_hash
            );
            if let Some(torn) = report.torn_tail {
                outln!(
                    "{}: torn final record ({} bytes at offset {}); it is truncated and recorded at the next start",
                    path.display(),
                    torn.bytes,
                    torn.offset
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("akritas audit verify: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run_crds(args: &CrdsArgs) -> ExitCode {
    let result = if let Some(dir) = &args.check {
        crds::check_dir(dir).map(|problems| {
            for problem in &problems {
                eprintln!("{problem}");
            }
            problems.is_empty()
        })
    } else if let Some(dir) = &args.output_dir {
        crds::write_dir(dir).map(|()| true)
    } else {
        crds::all_yaml().map(|yaml| {
            stdout::text(&yaml);
            true
        })
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("akritas crds: {error:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn help(path: &[&str]) -> String {
        let mut command = command();
        let mut at = &mut command;
        for name in path {
            at = at.find_subcommand_mut(name).unwrap();
        }
        at.render_long_help().to_string()
    }

    /// `validate`, `eval` and `run replay` list the settings they read, not the hundred of
    /// `serve`; the others still parse; `serve` groups its settings by config file section.
    #[test]
    fn each_subcommand_lists_the_settings_it_reads_and_serve_groups_them() {
        for (path, listed, unlisted) in [
            (&["validate"][..], "--workspace-roots", "--alert-workers"),
            (&["eval"], "--base-url", "--workspace-roots"),
            (&["run", "replay"], "--max-tool-calls", "--journal-segment-bytes"),
        ] {
            let text = help(path);
            assert!(text.contains(listed) && !text.contains(unlisted), "{path:?}:\n{text}");
            assert!(text.contains("Every other `akritas serve` setting is accepted too"), "{path:?}");
            let flags = text.lines().filter(|l| l.trim_start().starts_with("--")).count();
            assert!(flags < 45, "{path:?} lists {flags} flags");
        }
        let parsed = command().try_get_matches_from(["akritas", "eval", "cases", "--alert-workers", "3"]);
        assert!(parsed.is_ok(), "{parsed:?}");
        let serve = help(&["serve"]);
        for heading in ["Server settings:", "Model settings:", "Budget settings", "Storage settings:"] {
            assert!(serve.contains(heading), "{heading}");
        }
    }
}
