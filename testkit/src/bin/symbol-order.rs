//! Writes the functions of a release `akritas` that one `ask` executes (both configurations of
//! `benches/ask.rs`, run under valgrind's callgrind), with those of the processes it starts (the
//! samples' McpAdapter is `akritas mcp victoriametrics`, the same binary: its peak counts in the
//! `ask`'s, as `wait4` reports the largest of a process and its children), one mangled name a
//! line, for lld's
//! `--symbol-ordering-file`: `e2e/release.sh` links the binary again with it, so those functions
//! come first in `.text`.
//!
//! Why: the kernel maps the 64 KiB around each code page a process faults in, and the few MiB
//! of code an `ask` runs are spread over the whole 40 MiB `.text`, so most of the binary ends
//! up resident (docs/benchmarks.md). Placed together, they are a few hundred faults.
//!
//!     cargo run -p akritas-testkit --bin symbol-order -- BINARY [OUT]
//!
//! OUT defaults to `symbol-order.txt` next to BINARY. The names are those of that very build:
//! ThinLTO renames functions it promotes (`….llvm.<hash>`) whenever a module of the crate
//! changes, so a list is only good for the build it came from. Needs valgrind and nm.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use akritas_testkit::one_question;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("symbol-order: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args_os().skip(1);
    let Some(binary) = args.next().map(PathBuf::from) else {
        return Err("usage: symbol-order BINARY [OUT] (BINARY: a release build of akritas)".into());
    };
    if !binary.is_file() {
        return Err(format!("{} is not a file: build it with `cargo build --release --bin akritas`", binary.display()));
    }
    let out = args.next().map_or_else(|| binary.with_file_name("symbol-order.txt"), PathBuf::from);
    let functions = functions(&binary)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().map_err(text)?;
    let llm = runtime.block_on(one_question::model());
    let scratch = tempfile::tempdir().map_err(text)?;
    let mut executed = BTreeSet::new();
    for (index, (what, extra)) in one_question::CONFIGURATIONS.into_iter().enumerate() {
        // One profile per process (`%p`: its pid), children traced.
        let prefix = format!("callgrind.{index}.");
        let out_file = format!("--callgrind-out-file={}", scratch.path().join(format!("{prefix}%p")).display());
        let launcher = [
            "valgrind",
            "--tool=callgrind",
            "--trace-children=yes",
            "--demangle=no",
            "--compress-strings=no",
            "--compress-pos=no",
            &out_file,
        ];
        let data = scratch.path().join(format!("data.{index}"));
        let status = one_question::command(&launcher, &binary, &llm.url, &data, extra)
            .status()
            .map_err(|e| format!("cannot start valgrind (is it installed?): {e}"))?;
        if !status.success() {
            return Err(format!("`akritas ask` {what} under callgrind failed: {status}"));
        }
        let mut names = BTreeSet::new();
        let mut processes = 0;
        for entry in std::fs::read_dir(scratch.path()).map_err(text)? {
            let path = entry.map_err(text)?.path();
            if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)) {
                names.extend(executed_functions(&std::fs::read_to_string(&path).map_err(text)?));
                processes += 1;
            }
        }
        println!("ask {what}: {} functions executed in {processes} process(es)", names.len());
        executed.extend(names);
    }
    let listed: Vec<&String> = executed.iter().filter(|name| functions.contains(*name)).collect();
    let mut file = String::new();
    for name in &listed {
        file.push_str(name);
        file.push('\n');
    }
    std::fs::write(&out, file).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    println!("wrote {} names to {}", listed.len(), out.display());
    Ok(())
}

/// The names of the functions a callgrind profile (written with `--compress-strings=no`) has
/// costs for, without callgrind's recursion marks (`'2`).
fn executed_functions(profile: &str) -> BTreeSet<String> {
    profile
        .lines()
        .filter_map(|line| line.strip_prefix("fn="))
        .map(|name| name.split_once('\'').map_or(name, |(name, _)| name).trim().to_string())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The functions `binary` defines (its symbol table, as `nm` lists it).
fn functions(binary: &Path) -> Result<BTreeSet<String>, String> {
    let output = Command::new("nm")
        .arg("--defined-only")
        .arg(binary)
        .output()
        .map_err(|e| format!("cannot run nm (binutils): {e}"))?;
    if !output.status.success() {
        return Err(format!("nm {}: {}", binary.display(), String::from_utf8_lossy(&output.stderr).trim()));
    }
    let listing = String::from_utf8_lossy(&output.stdout);
    Ok(listing
        .lines()
        .filter_map(|line| match line.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "t" | "T" | "w" | "W", name] => Some(name.to_string()),
            _ => None,
        })
        .collect())
}

fn text(error: impl std::fmt::Display) -> String {
    error.to_string()
}
