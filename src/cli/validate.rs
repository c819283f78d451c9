//! `akritas validate DIR…`: one line per problem, `file:doc-index kind/name: field: reason`.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::catalog::directory::{problem_lines, scan};

/// Prints every problem to stdout and a summary to stderr; exit 1 on any problem.
pub fn run(dirs: &[PathBuf]) -> ExitCode {
    let result = scan(dirs, None);
    let lines = problem_lines(&result);
    for line in &lines {
        println!("{line}");
    }
    let valid = result.objects.iter().filter(|o| o.result.is_ok()).count();
    if lines.is_empty() {
        eprintln!("ok: {valid} resources valid");
        ExitCode::SUCCESS
    } else {
        eprintln!("{} problems; {valid} of {} resources valid", lines.len(), result.objects.len());
        ExitCode::FAILURE
    }
}
