//! Evals: a directory of cases (exported or hand-written) replayed
//! against a model with tools answered from each case's recording, every
//! expectation checked, a table per case and the totals.

pub(crate) mod check;
pub(crate) mod suite;

use std::fmt::Write;

pub use check::{Check, checks};
pub use suite::{SuiteOptions, SuiteReport, load_dir, run_suite};

/// The fixed-width table of a suite run: one row per case, the totals line, then a
/// line per split when cases have one.
pub fn table(report: &SuiteReport) -> String {
    let width = report.cases.iter().map(|c| c.case.chars().count()).max().unwrap_or(4).clamp(4, 48);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$}  {:>5}  {:>8}  {:<9}  {:>5}  {:>7}  {:>8}  {:>7}  {:>6}  {:>7}  {:<11}  model",
        "case", "pass", "protocol", "status", "tools", "unknown", "coverage", "tokens", "calls", "ms", "mode"
    );
    for case in &report.cases {
        let n = case.attempts.len().max(1);
        let first = case.attempts.first();
        let mean = |f: &dyn Fn(&suite::Attempt) -> f64| case.attempts.iter().map(f).sum::<f64>() / n as f64;
        let coverages: Vec<f64> = case.attempts.iter().filter_map(|a| a.evidence_coverage).collect();
        let coverage = if coverages.is_empty() {
            "-".to_string()
        } else {
            format!("{:.0}%", 100.0 * coverages.iter().sum::<f64>() / coverages.len() as f64)
        };
        let name: String = case.case.chars().take(width).collect();
        // The structured mode the server was asked in, and the upstream model each line was
        // answered by (so a mistaken --upstream-model shows).
        let mode = distinct(case.attempts.iter().map(|a| a.model_protocol.as_deref()));
        let model = distinct(case.attempts.iter().map(|a| a.model.as_deref()));
        let _ = writeln!(
            out,
            "{name:<width$}  {:>4.0}%  {:>7.0}%  {:<9}  {:>5.1}  {:>7.1}  {:>8}  {:>7.0}  {:>6.1}  {:>7.0}  {mode:<11}  {model}",
            100.0 * case.pass_rate(),
            100.0 * case.protocol_completion(),
            first.map_or("-", |a| a.status.as_str()),
            mean(&|a| a.tool_calls as f64),
            mean(&|a| a.unknown_calls as f64),
            coverage,
            mean(&|a| a.tokens as f64),
            mean(&|a| f64::from(a.model_calls)),
            mean(&|a| a.ms as f64),
        );
    }
    let t = &report.totals;
    let _ = writeln!(
        out,
        "TOTAL {}, tokens {}, model calls {}, wall time {} ms",
        rates(&t.all),
        t.tokens,
        t.model_calls,
        t.wall_ms
    );
    for (split, r) in &t.splits {
        let _ = writeln!(out, "SPLIT {split}: {}", rates(r));
    }
    out
}

/// `N cases, N runs: pass rate …, protocol completion …, evidence coverage …`.
fn rates(r: &suite::Rates) -> String {
    let coverage = r.evidence_coverage.map_or("-".to_string(), |c| format!("{:.0}%", 100.0 * c));
    format!(
        "{} cases, {} runs: pass rate {:.1}%, protocol completion {:.1}%, evidence coverage {coverage}",
        r.cases,
        r.attempts,
        100.0 * r.pass_rate,
        100.0 * r.protocol_completion
    )
}

/// The distinct values, sorted and joined by commas (`-` for none).
fn distinct<'a>(values: impl Iterator<Item = Option<&'a str>>) -> String {
    let mut values: Vec<&str> = values.flatten().collect();
    values.sort_unstable();
    values.dedup();
    if values.is_empty() { "-".to_string() } else { values.join(",") }
}

/// The failed checks of every failing case, one line each.
pub fn failures(report: &SuiteReport) -> Vec<String> {
    let mut out = Vec::new();
    for case in &report.cases {
        for (n, attempt) in case.attempts.iter().enumerate().filter(|(_, a)| !a.pass) {
            if let Some(error) = attempt.error.as_deref().filter(|_| attempt.status == "error") {
                out.push(format!("FAIL {} (run {}): {error}", case.case, n + 1));
            }
            for check in attempt.checks.iter().filter(|c| !c.pass) {
                out.push(format!("FAIL {} (run {}): {}: {}", case.case, n + 1, check.name, check.reason));
            }
        }
    }
    out
}
