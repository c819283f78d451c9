//! `akritas serve`: resolve the settings, set up logging and the runtime, and run
//! the host ([`crate::app::serve`]) until a signal.

use std::process::ExitCode;

use crate::app;
use crate::config::{self, LogFormat, ServeFlags};

/// Runs the server until a signal; prints a clear message and exits non-zero on
/// any startup problem.
pub fn run(flags: &ServeFlags) -> ExitCode {
    let settings = match config::load(flags, &|name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("akritas serve: {error}");
            return ExitCode::from(2);
        }
    };
    init_tracing(settings.log_format);
    for warning in &settings.deprecated {
        tracing::warn!("{warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("akritas serve: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(app::serve::serve(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line, in the log's format (the log is on stderr).
            tracing::error!("akritas serve: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, secrets redacted: what `RUST_LOG` asks for, else Akritas' own at INFO and the
/// libraries' warnings (their INFO lines are debug output for their own authors); colours only
/// on a terminal.
fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(super::DEFAULT_SERVE_LOG));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(super::stderr_is_terminal())
        .with_writer(crate::redact::RedactedStderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
