//! `akritas ask "QUESTION"`: one Run in-process (same engine, budget and audit as
//! the server) and its answer, tools and budget on stdout.

use std::io::Write;
use std::process::ExitCode;

use crate::app;
use crate::config::{self, ServeFlags};
use crate::engine::request::RunOutcome;

/// Runs the question; exit 0 with an answer, 1 on any failure (message on stderr).
pub fn run(question: &str, flags: &ServeFlags, json: bool) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(crate::redact::RedactedStderr).try_init();
    let settings = match config::load(flags, &|name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("akritas ask: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("akritas ask: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(app::ask::ask(question, settings)) {
        Ok(outcome) => {
            let printed = if json { print_json(&outcome) } else { print_text(&outcome) };
            if let Err(error) = printed {
                eprintln!("akritas ask: {error}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("akritas ask: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_text(outcome: &RunOutcome) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}\n", outcome.answer)?;
    if outcome.activity.is_empty() {
        writeln!(out, "Tools: none")?;
    } else {
        writeln!(out, "Tools:")?;
        for call in &outcome.activity {
            writeln!(out, "  {} · {} · {} ms · {}", call.name, call.status, call.duration_ms, call.id)?;
        }
    }
    for gap in &outcome.gaps {
        writeln!(out, "Unavailable check: {} ({}): {}", gap.step, gap.capability, gap.reason)?;
    }
    if !outcome.skills.is_empty() {
        writeln!(out, "Skills: {}", outcome.skills.join(", "))?;
    }
    let (u, l) = (&outcome.usage, &outcome.limits);
    writeln!(
        out,
        "Budget: model calls {}/{}, tool calls {}/{}, tool results {}/{} bytes, output tokens {}/{}, {} ms/{} ms",
        u.model_calls,
        l.max_model_calls,
        u.tool_calls,
        l.max_tool_calls,
        u.tool_result_bytes,
        l.max_tool_result_bytes,
        u.output_tokens,
        l.max_output_tokens,
        u.duration_ms,
        l.max_duration_ms
    )?;
    if let Some(id) = &outcome.run_id {
        writeln!(out, "Run: {id}")?;
    }
    Ok(())
}

fn print_json(outcome: &RunOutcome) -> std::io::Result<()> {
    let body = crate::web::runs::ChatAnswer::new(outcome.clone(), true);
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &body)?;
    writeln!(out)
}
