//! `akritas validate DIR…`: one line per problem, `file:doc-index kind/name: field: reason`,
//! and one per resource the service configuration refuses, `file:doc-index kind/name:
//! Reason: message`, as `serve` shows it. Without a config file it also warns about
//! what the Helm chart's configuration would refuse.

use super::stdout::outln;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::app::policy::{Here, install_egress, refusals, resource_policy, validator_policy};
use crate::catalog::CatalogStore;
use crate::catalog::directory::{problem_lines, scan_from};
use crate::catalog::merge::{self, LastGood};
use crate::catalog::status::{ResourceReport, StatusBoard};
use crate::config::{self, ServeFlags, Settings};

/// The chart's values; its `config:` is the service configuration in a cluster.
const CHART_VALUES: &str = include_str!("../../charts/akritas/values.yaml");
/// Where the chart's values are, for messages.
const CHART_VALUES_PATH: &str = "charts/akritas/values.yaml";

/// Prints every problem to stdout, warnings and a summary to stderr; exit 1 on any
/// problem, 2 when the service configuration is invalid.
pub fn run(dirs: &[PathBuf], flags: &ServeFlags, offline: bool) -> ExitCode {
    let settings = match config::load(flags, &|name| std::env::var(name).ok()) {
        Ok(settings) => Settings { resources: dirs.to_vec(), ..settings },
        Err(error) => {
            eprintln!("akritas validate: {error}");
            return ExitCode::from(2);
        }
    };
    let skills = match crate::app::assemble::skills(&settings) {
        Ok(skills) => skills,
        Err(error) => {
            eprintln!("akritas validate: {error:#}");
            return ExitCode::from(2);
        }
    };
    let result = scan_from(dirs, skills.as_ref());
    let mut lines = problem_lines(&result);
    let (total, parsed) = (result.objects.len(), result.objects.iter().filter(|o| o.result.is_ok()).count());
    let store = CatalogStore::new();
    let board = StatusBoard::default();
    merge::apply(LastGood::default().merge(result), &store, &board);
    let (catalog, loaded) = (store.current(), board.get());
    install_egress(&settings);
    let here = if offline { Here::Ignored } else { Here::Checked };
    let refused = refusals(&catalog, &loaded, &resource_policy(&settings), &validator_policy(&settings), here);
    lines.extend(refused.iter().map(refusal_line));
    let mut warnings: Vec<String> = settings.deprecated.iter().map(|d| format!("warning: {d}")).collect();
    if settings.config_file.is_none() {
        match chart_settings() {
            Ok(chart) => {
                let shown: BTreeSet<String> = refused.iter().map(refusal_line).collect();
                let chart = Settings { resources: dirs.to_vec(), ..chart };
                warnings.extend(
                    refusals(&catalog, &loaded, &resource_policy(&chart), &validator_policy(&chart), Here::Ignored)
                        .iter()
                        .map(refusal_line)
                        .filter(|line| !shown.contains(line))
                        .map(|line| format!("warning: with the Helm chart's config (config: in {CHART_VALUES_PATH}) serve refuses {line}")),
                );
                if !warnings.is_empty() {
                    warnings.push(
                        "note: in a cluster installed with the chart, allow these with the setting each warning \
                         names under config: in your values, or change the resources; with --config FILE, that \
                         file is checked instead"
                            .to_string(),
                    );
                }
            }
            Err(error) => warnings.push(format!("warning: cannot read the Helm chart's values: {error}")),
        }
    }
    for line in &lines {
        outln!("{line}");
    }
    for warning in &warnings {
        eprintln!("{warning}");
    }
    let valid = parsed.saturating_sub(refused.len());
    let warned = match warnings.iter().filter(|w| w.starts_with("warning: ")).count() {
        0 => String::new(),
        count => format!("; {count} warnings"),
    };
    if lines.is_empty() {
        eprintln!("ok: {valid} resources valid{warned}");
        ExitCode::SUCCESS
    } else {
        eprintln!("{} problems; {valid} of {total} resources valid{warned}", lines.len());
        ExitCode::FAILURE
    }
}

/// `file:doc-index kind/name: Reason: message`.
fn refusal_line(report: &ResourceReport) -> String {
    let (reason, message) = report.problem().map(|c| (c.reason.as_str(), c.message.as_str())).unwrap_or_default();
    format!("{} {}/{}: {reason}: {message}", report.source, report.key.kind.as_str(), report.key.name)
}

/// The settings of a cluster installed with the chart's values: its `config:` over the
/// defaults.
fn chart_settings() -> Result<Settings, String> {
    let values: serde_json::Value = serde_saphyr::from_str(CHART_VALUES).map_err(|e| e.to_string())?;
    let mut config = match values.get("config") {
        Some(serde_json::Value::Object(config)) => config.clone(),
        _ => serde_json::Map::new(),
    };
    config.insert("version".into(), config::FILE_VERSION.into());
    config::from_file_text(Path::new(CHART_VALUES_PATH), &serde_json::Value::Object(config).to_string())
        .map_err(|e| e.to_string())
}
