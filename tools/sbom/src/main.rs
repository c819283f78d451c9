//! Writes the CycloneDX 1.5 SBOM of a package's binary for one target (see the library).
//!
//!     akritas-sbom --target TRIPLE [--package akritas] [--manifest-path Cargo.toml] [--output FILE]
//!
//! The timestamp is `SOURCE_DATE_EPOCH` (e2e/release.sh sets the last commit's time), else now.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use akritas_sbom::{Request, bom};

const USAGE: &str = "usage: akritas-sbom --target TRIPLE [--package NAME] [--manifest-path Cargo.toml] [--output FILE]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("akritas-sbom: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let (mut target, mut package, mut manifest, mut output) =
        (None, "akritas".to_owned(), PathBuf::from("Cargo.toml"), None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--target" => target = Some(value()?),
            "--package" => package = value()?,
            "--manifest-path" => manifest = PathBuf::from(value()?),
            "--output" => output = Some(PathBuf::from(value()?)),
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    let target = target.ok_or_else(|| format!("--target is required\n{USAGE}"))?;
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(value) => {
            value.trim().parse().map_err(|_| format!("SOURCE_DATE_EPOCH is not a number of seconds: {value}"))?
        }
        Err(_) => SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let request = Request { manifest: &manifest, package: &package, target: &target, epoch, cargo };
    let mut text = serde_json::to_string_pretty(&bom(&request)?).map_err(|e| e.to_string())?;
    text.push('\n');
    match output {
        Some(path) => std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display())),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}
