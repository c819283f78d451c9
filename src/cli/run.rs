//! `akritas run export ID` (a finished Run as a case, through a running host's API)
//! and `akritas run replay CASE` (the case in-process against a model, tools
//! answered from the recording).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::app::assemble;
use crate::config::{self, ServeFlags, Source};
use crate::engine::instructions::SystemInstructions;
use crate::replay::{Case, ReplayOutcome, SkillSource};

/// `run` arguments.
#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: RunCommand,
}

/// `run` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum RunCommand {
    /// Export a finished Run as a case (JSON) through a running host's API.
    Export(ExportArgs),
    /// Replay a case against a model, tools answered from the recording.
    Replay(ReplayArgs),
}

/// `run export` arguments.
#[derive(Args, Debug)]
pub(crate) struct ExportArgs {
    /// The Run id (`run_…`).
    pub id: String,
    /// Base URL of the Akritas host.
    #[arg(long, default_value = crate::config::DEFAULT_API_URL, env = "AKRITAS_URL")]
    pub url: String,
    /// Environment variable holding the API key (empty value: no key).
    #[arg(long, default_value = "AKRITAS_API_KEY")]
    pub api_key_env: String,
    /// The question the Run was asked (the audit keeps only its hash; checked against it).
    #[arg(long)]
    pub question: Option<String>,
    /// A context fact the Run was given, `KEY=VALUE` (repeatable; part of the input hash).
    #[arg(long = "context", value_name = "KEY=VALUE", requires = "question")]
    pub context: Vec<String>,
    /// Write the case to this file instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// `run replay` arguments.
#[derive(Args, Debug)]
pub(crate) struct ReplayArgs {
    /// The case file (JSON or YAML).
    #[arg(value_name = "CASE")]
    pub case: PathBuf,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// Settings, as for `serve`: `--base-url`, `--upstream-model` (which model the server
    /// runs; without it, the first of its `GET /models`), `--system-instructions`; `--skills-dir`
    /// replaces the case's skills.
    #[command(flatten)]
    pub flags: Box<ServeFlags>,
}

/// Runs `akritas run`.
pub fn run(args: RunArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("akritas run: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let done = match args.command {
        RunCommand::Export(args) => runtime.block_on(export(&args)),
        RunCommand::Replay(args) => runtime.block_on(replay(&args)),
    };
    match done {
        Ok(code) => code,
        Err(error) => {
            eprintln!("akritas run: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn export(args: &ExportArgs) -> Result<ExitCode, String> {
    let base = args.url.trim_end_matches('/');
    let id = crate::audit::RunId::parse(args.id.trim())
        .ok_or_else(|| format!("{:?} is not a Run id (run_<32 hex>)", args.id))?;
    let context = context_facts(&args.context)?;
    let client = crate::outbound::client(Duration::from_secs(60)).map_err(|e| format!("HTTP client: {e}"))?;
    let mut request = client.get(format!("{base}/api/v1/runs/{id}/export"));
    let key = if args.api_key_env.is_empty() { None } else { std::env::var(&args.api_key_env).ok() };
    if let Some(key) = key.filter(|k| !k.is_empty()) {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.map_err(|e| format!("cannot reach {base}: {e}"))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| format!("{base} answered {status} unreadably: {e}"))?;
    if !status.is_success() {
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let message = value["error"]["message"].as_str().unwrap_or("request failed");
        return Err(format!("{status}: {message}"));
    }
    let mut case = Case::parse(&text).map_err(|e| format!("{base} answered a case this build cannot read: {e}"))?;
    if let Some(question) = &args.question {
        case.supply_input(question, context).map_err(|e| e.to_string())?;
    }
    let text = serde_json::to_string_pretty(&case).map_err(|e| e.to_string())? + "\n";
    match &args.output {
        Some(path) => std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?,
        None => super::stdout::text(&text),
    }
    if case.input.messages.is_empty() {
        eprintln!(
            "akritas run: the case has no input yet (the audit keeps only its hash unless the Run's namespace is in \
             audit_input_namespaces); add --question to replay it"
        );
    } else if case.input.redacted {
        eprintln!(
            "akritas run: the case's input is the one the audit kept, with secrets redacted; it replays as it is, \
             or add --question with the original"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `KEY=VALUE` facts.
fn context_facts(entries: &[String]) -> Result<BTreeMap<String, String>, String> {
    entries
        .iter()
        .map(|entry| match entry.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_string(), value.to_string())),
            _ => Err(format!("--context {entry:?} must be KEY=VALUE")),
        })
        .collect()
}

async fn replay(args: &ReplayArgs) -> Result<ExitCode, String> {
    let settings = config::load(&args.flags, &|name| std::env::var(name).ok()).map_err(|e| e.to_string())?;
    let text = read_case(&args.case)?;
    let case = Case::parse(&text).map_err(|e| format!("{}: {e}", args.case.display()))?;
    let instructions = SystemInstructions::load(&settings.system_instructions).map_err(|e| e.to_string())?;
    let llm = assemble::llm_client(&settings, &instructions).map_err(|e| format!("{e:#}"))?;
    let skills = skill_source(&settings);
    let outcome = crate::replay::replay(&case, llm, crate::app::narrow::engine(&settings), &skills)
        .await
        .map_err(|e| e.to_string())?;
    super::stdout::with(|out| if args.json { print_json(out, &outcome) } else { print_text(out, &outcome) });
    Ok(if outcome.status == "succeeded" { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The case's skills unless a skills directory is named explicitly.
pub(crate) fn skill_source(settings: &config::Settings) -> SkillSource {
    match (settings.origin("skills_dir"), &settings.skills_dir) {
        (Source::Default, _) | (_, None) => SkillSource::Case,
        (_, Some(dir)) => SkillSource::Directory(PathBuf::from(dir)),
    }
}

/// The case file, bounded.
fn read_case(path: &std::path::Path) -> Result<String, String> {
    crate::replay::case::read_text(path)
}

fn print_json(out: &mut impl Write, outcome: &ReplayOutcome) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, outcome)?;
    writeln!(out)
}

fn print_text(out: &mut impl Write, outcome: &ReplayOutcome) -> std::io::Result<()> {
    let model = outcome.model.as_deref().unwrap_or("-");
    writeln!(out, "Case: {} · {} · model {model}", outcome.case, outcome.status)?;
    if let Some(answer) = &outcome.answer {
        writeln!(out, "\n{answer}\n")?;
    }
    if let Some(error) = &outcome.error {
        writeln!(out, "Error: {error}")?;
    }
    for call in &outcome.tool_calls {
        let answered = if call.recorded { "recorded" } else { "NOT RECORDED" };
        writeln!(out, "  {} {} · {} · {answered}", call.tool, call.arguments, call.status)?;
    }
    writeln!(out, "Unknown calls: {}", outcome.unknown_calls)?;
    for skill in &outcome.skills {
        writeln!(out, "Skill: {} ({})", skill.name, skill.sha256)?;
    }
    let c = &outcome.comparison;
    writeln!(
        out,
        "Same as recorded: tool calls {}, skills {}, status {}",
        c.same_tool_calls, c.same_skills, c.same_status
    )
}
