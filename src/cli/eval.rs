//! `akritas eval DIR`: runs a directory of cases against a model, prints a table
//! per case and the totals, writes JSON results, and exits 1 under `--min-pass`.

use super::stdout::outln;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::app::assemble;
use crate::config::{self, ServeFlags};
use crate::engine::instructions::SystemInstructions;
use crate::eval::suite::{MAX_CONCURRENCY, MAX_REPEAT};
use crate::eval::{SuiteOptions, failures, load_dir, run_suite, table};

/// `eval` arguments.
#[derive(Args, Debug)]
pub(crate) struct EvalArgs {
    /// Directory of case files (`*.yaml`, `*.yml`, `*.json`).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Runs of each case (1 to 100).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Cases at once (1 to 32), each with its own engine budget.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Pass rate (0.0 to 1.0) under which the command exits 1.
    #[arg(long, default_value_t = 1.0)]
    pub min_pass: f64,
    /// Write the results as JSON to this file.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Settings, as for `serve`: `--base-url`, `--upstream-model` (which model the server
    /// runs; without it, the first of its `GET /models`), `--system-instructions`; `--skills-dir`
    /// replaces the cases' skills.
    #[command(flatten)]
    pub flags: Box<ServeFlags>,
}

/// Runs `akritas eval`.
pub fn run(args: EvalArgs) -> ExitCode {
    super::log_to_stderr();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("akritas eval: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(eval(&args)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("akritas eval: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn eval(args: &EvalArgs) -> Result<ExitCode, String> {
    if !(1..=MAX_REPEAT).contains(&args.repeat) {
        return Err(format!("--repeat must be 1 to {MAX_REPEAT}"));
    }
    if !(1..=MAX_CONCURRENCY).contains(&args.concurrency) {
        return Err(format!("--concurrency must be 1 to {MAX_CONCURRENCY}"));
    }
    if !(0.0..=1.0).contains(&args.min_pass) {
        return Err("--min-pass must be between 0.0 and 1.0".into());
    }
    let settings = config::load(&args.flags, &|name| std::env::var(name).ok()).map_err(|e| e.to_string())?;
    let cases = load_dir(&args.dir)?;
    let instructions = SystemInstructions::load(&settings.system_instructions).map_err(|e| e.to_string())?;
    let llm = assemble::llm_client(&settings, &instructions).map_err(|e| format!("{e:#}"))?;
    let skills = super::run::skill_source(&settings);
    let options = SuiteOptions { repeat: args.repeat, concurrency: args.concurrency };
    let report = run_suite(cases, llm, crate::app::narrow::engine(&settings), skills, &options).await;
    super::stdout::text(&table(&report));
    for line in failures(&report) {
        outln!("{line}");
    }
    if let Some(path) = &args.output {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n";
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if report.totals.all.pass_rate < args.min_pass {
        eprintln!(
            "akritas eval: pass rate {:.1}% is under --min-pass {:.1}%",
            100.0 * report.totals.all.pass_rate,
            100.0 * args.min_pass
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
