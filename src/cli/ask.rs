//! `akritas ask "QUESTION"`: one Run in-process (same engine, budget and audit as
//! the server) and its answer, tools and budget on stdout.

use std::io::Write;
use std::process::ExitCode;

use crate::app;
use crate::config::{self, ServeFlags};
use crate::engine::request::RunOutcome;

/// The settings `ask` takes as flags: the model connection, the system instructions
/// and language, what the Run may read (resources, skills, kubeconfig), where it is
/// audited, and its budget. Each is the `serve` flag of the same name (same help,
/// environment variable and default); every other setting comes from `--config` or
/// its `AKRITAS_*` variable, as for `serve`.
#[derive(clap::Args, Debug, Default, Clone)]
pub(crate) struct AskFlags {
    #[arg(long, value_name = "PATH", help = config::config_flag_help())]
    config: Option<std::path::PathBuf>,
    #[arg(long, value_name = "URL", help = config::flag_help_for("base_url"))]
    base_url: Option<String>,
    #[arg(long, value_name = "NAME", help = config::flag_help_for("upstream_model"))]
    upstream_model: Option<String>,
    #[arg(long, value_name = "MODE", help = config::flag_help_for("model_protocol"))]
    model_protocol: Option<String>,
    #[arg(long, value_name = "ENV_VAR", help = config::flag_help_for("upstream_api_key_env"))]
    upstream_api_key_env: Option<String>,
    #[arg(long, value_name = "PATH", help = config::flag_help_for("system_instructions"))]
    system_instructions: Option<String>,
    #[arg(long, value_name = "TAG", help = config::flag_help_for("response_language"))]
    response_language: Option<String>,
    #[arg(long, value_name = "DIR", value_delimiter = ',', help = config::flag_help_for("resources"))]
    resources: Vec<String>,
    #[arg(long, value_name = "DIR", help = config::flag_help_for("skills_dir"))]
    skills_dir: Option<String>,
    #[arg(long, value_name = "PATH", help = config::flag_help_for("kubeconfig"))]
    kubeconfig: Option<String>,
    #[arg(long, value_name = "DIR", help = config::flag_help_for("data_dir"))]
    data_dir: Option<String>,
    #[arg(long, value_name = "N", help = config::flag_help_for("max_tokens"))]
    max_tokens: Option<String>,
    #[arg(long, value_name = "N", help = config::flag_help_for("max_tool_calls"))]
    max_tool_calls: Option<String>,
    #[arg(long, value_name = "N", help = config::flag_help_for("max_iterations"))]
    max_iterations: Option<String>,
    #[arg(long, value_name = "T", help = config::flag_help_for("temperature"))]
    temperature: Option<String>,
    #[arg(long, value_name = "DURATION", help = config::flag_help_for("request_timeout"))]
    request_timeout: Option<String>,
}

impl AskFlags {
    /// The same values as `serve` flags; the settings `ask` has no flag for stay unset.
    pub fn into_serve_flags(self) -> ServeFlags {
        ServeFlags {
            config: self.config,
            base_url: self.base_url,
            upstream_model: self.upstream_model,
            model_protocol: self.model_protocol,
            upstream_api_key_env: self.upstream_api_key_env,
            system_instructions: self.system_instructions,
            response_language: self.response_language,
            resources: self.resources,
            skills_dir: self.skills_dir,
            kubeconfig: self.kubeconfig,
            data_dir: self.data_dir,
            max_tokens: self.max_tokens,
            max_tool_calls: self.max_tool_calls,
            max_iterations: self.max_iterations,
            temperature: self.temperature,
            request_timeout: self.request_timeout,
            ..ServeFlags::default()
        }
    }
}

/// Runs the question, or with `run` a follow-up of that Run; exit 0 with an answer, 1 on any
/// failure (message on stderr).
pub fn run(question: &str, run: Option<&str>, flags: &ServeFlags, json: bool) -> ExitCode {
    super::log_to_stderr();
    let follows = match run.map(|id| crate::audit::RunId::parse(id.trim()).ok_or(id)).transpose() {
        Ok(follows) => follows,
        Err(id) => {
            eprintln!("akritas ask: --run {id:?} is not a Run id (run_<32 hex>, as the `Run:` line of an ask prints)");
            return ExitCode::from(2);
        }
    };
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
    match runtime.block_on(app::ask::ask(question, follows, settings)) {
        Ok(outcome) => {
            super::stdout::with(|out| if json { print_json(out, &outcome) } else { print_text(out, &outcome) });
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("akritas ask: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_text(out: &mut impl Write, outcome: &RunOutcome) -> std::io::Result<()> {
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
    if let Some(mode) = &outcome.model_protocol {
        writeln!(out, "Model protocol: {mode}")?;
        for fallback in &outcome.model_protocol_fallbacks {
            writeln!(out, "Model protocol fallback: {fallback}")?;
        }
    }
    if let Some(id) = &outcome.run_id {
        writeln!(out, "Run: {id}")?;
    }
    Ok(())
}

fn print_json(out: &mut impl Write, outcome: &RunOutcome) -> std::io::Result<()> {
    let body = crate::web::runs::ChatAnswer::new(outcome.clone(), true);
    serde_json::to_writer_pretty(&mut *out, &body)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use clap::{Args, Command};

    use super::*;

    /// Every `ask` flag is the `serve` flag of the same setting: name, value name,
    /// help (with variable and default), delimiter; and it reaches that setting.
    #[test]
    fn ask_flags_are_the_serve_flags_of_the_same_settings() {
        let ask = AskFlags::augment_args(Command::new("ask"));
        let serve = ServeFlags::augment_args(Command::new("serve"));
        let mut compared = 0;
        for arg in ask.get_arguments() {
            let twin = serve.get_arguments().find(|s| s.get_id() == arg.get_id()).expect("a serve flag of this id");
            assert_eq!(arg.get_long(), twin.get_long());
            assert_eq!(arg.get_value_names(), twin.get_value_names(), "{:?}", arg.get_id());
            assert_eq!(arg.get_value_delimiter(), twin.get_value_delimiter(), "{:?}", arg.get_id());
            assert_eq!(arg.get_help().map(ToString::to_string), twin.get_help().map(ToString::to_string));
            compared += 1;
        }
        assert_eq!(compared, 16);
        let matches = ask
            .try_get_matches_from(["ask", "--base-url", "http://m:1/v1", "--max-tokens", "77", "--resources", "a,b"])
            .unwrap();
        let flags = <AskFlags as clap::FromArgMatches>::from_arg_matches(&matches).unwrap().into_serve_flags();
        let settings = config::load(&flags, &|_| None).unwrap();
        assert_eq!((settings.base_url.as_str(), settings.max_tokens), ("http://m:1/v1", 77));
        assert_eq!(settings.resources, [std::path::PathBuf::from("a"), "b".into()]);
    }
}
