//! Running a directory of cases: each case replayed (tools answered from its
//! recording) `repeat` times, a bounded number at once, each with its own engine
//! budget; the checks of every repeat, and the totals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::check::{Check, checks, evidence_coverage};
use crate::engine::request::EngineSettings;
use crate::investigation::InvestigationResult;
use crate::llm::LlmClient;
use crate::replay::case::{Case, read_text};
use crate::replay::{Protocol, ReplayedCall, SkillSource, replay};

/// Most cases in a suite.
pub const MAX_CASES: usize = 1000;
/// Most repeats of a case.
pub const MAX_REPEAT: u32 = 100;
/// Most cases at once.
pub const MAX_CONCURRENCY: usize = 32;

/// How a suite runs.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    /// Runs of each case.
    pub repeat: u32,
    /// Cases at once.
    pub concurrency: usize,
}

/// One repeat of one case.
#[derive(Clone, Debug, Serialize)]
pub struct Attempt {
    /// All checks hold.
    pub pass: bool,
    /// `succeeded`, `failed`, or `error` (the case could not be replayed).
    pub status: String,
    /// Why the Run failed or could not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Tool calls through the case's tools.
    pub tool_calls: usize,
    /// Calls the recording could not answer.
    pub unknown_calls: usize,
    /// Those calls in order: tool, arguments, status and whether the recording answered (what a
    /// model asked that the case did not record, without a logging proxy in front of it).
    pub calls: Vec<ReplayedCall>,
    /// Evidence items with a quote / all evidence items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_coverage: Option<f64>,
    /// The Run followed the structured protocol to its end ([`Protocol::complete`]):
    /// a plan the host executed and, for an investigation, a result that reached
    /// the host's validation, whether or not the result was right.
    pub protocol_complete: bool,
    /// How its plan and result steps ended (absent when the case could not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Prompt and output tokens.
    pub tokens: u64,
    /// Model requests.
    pub model_calls: u32,
    /// Wall time of the replay.
    pub ms: u64,
    /// The upstream model that answered (absent when the case could not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// How the Run's last structured step was asked for (`tool_call`, `json_schema`,
    /// `json_object`, `text`; absent when it had none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_protocol: Option<String>,
    /// Every expectation's verdict.
    pub checks: Vec<Check>,
    /// The structured result the host accepted, with the evidence it refused and the status it
    /// lowered (absent without one): why a check on the status or a fact failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub investigation: Option<InvestigationResult>,
}

/// One case over its repeats.
#[derive(Clone, Debug, Serialize)]
pub struct CaseReport {
    /// Case name.
    pub case: String,
    /// Its file.
    pub file: String,
    /// Its one-line description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its split (`train`, `held_out`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
    /// Each repeat.
    pub attempts: Vec<Attempt>,
}

impl CaseReport {
    /// Passing repeats / repeats.
    pub fn pass_rate(&self) -> f64 {
        rate(self.attempts.iter().filter(|a| a.pass).count(), self.attempts.len())
    }

    /// Protocol-complete repeats / repeats.
    pub fn protocol_completion(&self) -> f64 {
        rate(self.attempts.iter().filter(|a| a.protocol_complete).count(), self.attempts.len())
    }
}

/// The rates over every repeat of some cases.
#[derive(Clone, Debug, Serialize)]
pub struct Rates {
    /// Cases counted; each is meant to run `repeat` times, and the rates divide by cases × repeat.
    pub cases: usize,
    /// Repeats run.
    pub attempts: usize,
    /// Passing repeats / repeats.
    pub pass_rate: f64,
    /// Protocol-complete repeats / repeats.
    pub protocol_completion: f64,
    /// Mean evidence coverage over repeats with evidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_coverage: Option<f64>,
}

/// Totals over every repeat of every case.
#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    /// Over all cases.
    #[serde(flatten)]
    pub all: Rates,
    /// Over the cases of each split (none when no case has one).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub splits: BTreeMap<String, Rates>,
    /// Prompt plus output tokens, summed over every repeat of every case.
    pub tokens: u64,
    /// Model requests.
    pub model_calls: u64,
    /// Wall time of the whole suite.
    pub wall_ms: u64,
}

/// A suite run.
#[derive(Clone, Debug, Serialize)]
pub struct SuiteReport {
    /// Model id that answered (the first one reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Per case, in file name order.
    pub cases: Vec<CaseReport>,
    /// Sums and rates over the whole suite and per split; `akritas eval` prints them as `TOTAL`.
    pub totals: Totals,
}

fn rate(part: usize, whole: usize) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

/// The `.yaml`, `.yml` and `.json` cases of `dir`, parsed, in file name order; each problem names its file.
pub fn load_dir(dir: &Path) -> Result<Vec<(PathBuf, Case)>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml" || x == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("{} holds no case files (*.yaml, *.yml, *.json)", dir.display()));
    }
    if files.len() > MAX_CASES {
        return Err(format!("{} holds {} cases; at most {MAX_CASES} are allowed", dir.display(), files.len()));
    }
    let mut cases = Vec::new();
    for file in files {
        let text = read_text(&file)?;
        let case = Case::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        cases.push((file, case));
    }
    Ok(cases)
}

/// Runs every case `repeat` times, `concurrency` at once.
pub async fn run_suite(
    cases: Vec<(PathBuf, Case)>,
    llm: LlmClient,
    settings: EngineSettings,
    skills: SkillSource,
    options: &SuiteOptions,
) -> SuiteReport {
    let started = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(options.concurrency.clamp(1, MAX_CONCURRENCY)));
    let repeat = options.repeat.clamp(1, MAX_REPEAT);
    let mut tasks = tokio::task::JoinSet::new();
    for (index, (_, case)) in cases.iter().enumerate() {
        for _ in 0..repeat {
            let (case, llm, settings, skills, limit) =
                (case.clone(), llm.clone(), settings.clone(), skills.clone(), limit.clone());
            tasks.spawn(async move {
                let _permit = limit.acquire_owned().await;
                let begun = Instant::now();
                let outcome = replay(&case, llm, settings, &skills).await;
                let ms = u64::try_from(begun.elapsed().as_millis()).unwrap_or(u64::MAX);
                (index, attempt(&case, outcome, ms))
            });
        }
    }
    let mut reports: Vec<CaseReport> = cases
        .iter()
        .map(|(file, case)| CaseReport {
            case: case.name.clone(),
            file: file.display().to_string(),
            description: case.description.clone(),
            split: case.split.as_ref().map(|s| s.as_str().to_string()),
            attempts: Vec::new(),
        })
        .collect();
    let mut model = None;
    while let Some(joined) = tasks.join_next().await {
        let (index, (attempt, answered_by)) = match joined {
            Ok(done) => done,
            Err(error) => {
                tracing::error!(%error, "an eval task ended abnormally");
                continue;
            }
        };
        model = model.or(answered_by);
        reports[index].attempts.push(attempt);
    }
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let totals = totals(&reports, repeat as usize, wall_ms);
    SuiteReport { model, cases: reports, totals }
}

/// The totals over `repeat` runs of each case (those that ended abnormally count as failed).
fn totals(reports: &[CaseReport], repeat: usize, wall_ms: u64) -> Totals {
    let attempts = reports.iter().flat_map(|r| &r.attempts);
    let mut splits: BTreeMap<String, Vec<&CaseReport>> = BTreeMap::new();
    for report in reports {
        if let Some(split) = &report.split {
            splits.entry(split.clone()).or_default().push(report);
        }
    }
    Totals {
        all: rates(reports.iter(), repeat),
        splits: splits.into_iter().map(|(split, reports)| (split, rates(reports.into_iter(), repeat))).collect(),
        tokens: attempts.clone().map(|a| a.tokens).sum(),
        model_calls: attempts.map(|a| u64::from(a.model_calls)).sum(),
        wall_ms,
    }
}

/// The rates over `repeat` runs of each of `reports`.
fn rates<'a>(reports: impl Iterator<Item = &'a CaseReport> + Clone, repeat: usize) -> Rates {
    let cases = reports.clone().count();
    let attempts: Vec<&Attempt> = reports.flat_map(|r| &r.attempts).collect();
    let coverages: Vec<f64> = attempts.iter().filter_map(|a| a.evidence_coverage).collect();
    let runs = cases * repeat;
    Rates {
        cases,
        attempts: attempts.len(),
        pass_rate: rate(attempts.iter().filter(|a| a.pass).count(), runs),
        protocol_completion: rate(attempts.iter().filter(|a| a.protocol_complete).count(), runs),
        evidence_coverage: (!coverages.is_empty()).then(|| coverages.iter().sum::<f64>() / coverages.len() as f64),
    }
}

/// One repeat's attempt (and the model that answered).
fn attempt(
    case: &Case,
    outcome: Result<crate::replay::ReplayOutcome, crate::replay::ReplayError>,
    ms: u64,
) -> (Attempt, Option<String>) {
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            let failed = Attempt {
                pass: false,
                status: "error".into(),
                error: Some(error.to_string()),
                tool_calls: 0,
                unknown_calls: 0,
                calls: Vec::new(),
                evidence_coverage: None,
                protocol_complete: false,
                protocol: None,
                tokens: 0,
                model_calls: 0,
                ms,
                model: None,
                model_protocol: None,
                checks: Vec::new(),
                investigation: None,
            };
            return (failed, None);
        }
    };
    let checks = checks(case, &outcome);
    let usage = outcome.usage.clone().unwrap_or_default();
    let attempt = Attempt {
        pass: checks.iter().all(|c| c.pass),
        status: outcome.status.clone(),
        error: outcome.error.clone(),
        tool_calls: outcome.tool_calls.len(),
        unknown_calls: outcome.unknown_calls,
        calls: outcome.tool_calls.clone(),
        evidence_coverage: evidence_coverage(&outcome),
        protocol_complete: outcome.protocol.complete(),
        protocol: Some(outcome.protocol),
        tokens: usage.prompt_tokens + usage.output_tokens,
        model_calls: usage.model_calls,
        ms,
        model: outcome.model.clone(),
        model_protocol: outcome.model_protocol.clone(),
        checks,
        investigation: outcome.investigation.clone(),
    };
    (attempt, outcome.model)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::replay::{PlanStep, ResultStep};

    fn attempt(plan: PlanStep, result: ResultStep) -> Attempt {
        let protocol = Protocol { plan, plan_refused: None, result: Some(result) };
        Attempt {
            pass: false,
            status: "failed".into(),
            error: None,
            tool_calls: 1,
            unknown_calls: 0,
            calls: Vec::new(),
            evidence_coverage: None,
            protocol_complete: protocol.complete(),
            protocol: Some(protocol),
            tokens: 100,
            model_calls: 3,
            ms: 1000,
            model: Some("m".into()),
            model_protocol: Some("json_schema".into()),
            checks: Vec::new(),
            investigation: None,
        }
    }

    fn case(name: &str, attempts: Vec<Attempt>) -> CaseReport {
        CaseReport { case: name.into(), file: format!("{name}.yaml"), description: None, split: None, attempts }
    }

    #[test]
    fn protocol_completion_counts_results_refused_for_content_but_not_unparsed_ones() {
        let reports = vec![
            case("refused", vec![attempt(PlanStep::Accepted, ResultStep::Rejected)]),
            case("prose", vec![attempt(PlanStep::Accepted, ResultStep::Unparsed)]),
            case("no-plan", vec![attempt(PlanStep::Missing, ResultStep::Accepted)]),
            case("accepted", vec![attempt(PlanStep::Accepted, ResultStep::Accepted)]),
        ];
        let totals = totals(&reports, 1, 10);
        assert_eq!(totals.all.protocol_completion, 0.5);
        let report = SuiteReport { model: None, cases: reports, totals };
        let table = crate::eval::table(&report);
        let protocol_column: Vec<&str> =
            table.lines().map(|line| line.split_whitespace().nth(2).unwrap_or_default()).collect();
        assert_eq!(protocol_column, ["protocol", "100%", "0%", "0%", "100%", "cases,"], "{table}");
        assert!(table.contains("pass rate 0.0%, protocol completion 50.0%"), "{table}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["cases"][1]["attempts"][0]["protocol"],
            serde_json::json!({"plan": "accepted", "result": "unparsed"})
        );
        assert_eq!(json["cases"][1]["attempts"][0]["protocol_complete"], false);
        assert!(json["totals"].get("splits").is_none() && !table.contains("SPLIT"), "no split, no split totals");
    }

    #[test]
    fn totals_are_also_given_per_split_in_the_json_and_the_table() {
        let passing = |coverage: f64| Attempt {
            pass: true,
            evidence_coverage: Some(coverage),
            ..attempt(PlanStep::Accepted, ResultStep::Accepted)
        };
        let in_split =
            |split: Option<&str>, report: CaseReport| CaseReport { split: split.map(str::to_string), ..report };
        let reports = vec![
            in_split(Some("train"), case("a", vec![passing(1.0), passing(0.5)])),
            in_split(
                Some("held_out"),
                case("b", vec![passing(1.0), attempt(PlanStep::Missing, ResultStep::NotReached)]),
            ),
            in_split(Some("train"), case("c", vec![attempt(PlanStep::Accepted, ResultStep::Rejected)])),
            in_split(None, case("d", vec![passing(0.0), passing(0.0)])),
        ];
        let report = SuiteReport { model: None, totals: totals(&reports, 2, 10), cases: reports };
        let json = serde_json::to_value(&report).unwrap();
        let totals = &json["totals"];
        assert_eq!((totals["cases"].clone(), totals["attempts"].clone()), (json!(4), json!(7)), "{totals}");
        assert_eq!(
            totals["splits"]["train"],
            json!({"cases": 2, "attempts": 3, "pass_rate": 0.5, "protocol_completion": 0.75, "evidence_coverage": 0.75})
        );
        assert_eq!(
            totals["splits"]["held_out"],
            json!({"cases": 1, "attempts": 2, "pass_rate": 0.5, "protocol_completion": 0.5, "evidence_coverage": 1.0})
        );
        let table = crate::eval::table(&report);
        let tail: Vec<&str> = table.lines().skip(5).collect();
        assert_eq!(tail.len(), 3, "{table}");
        assert!(tail[0].starts_with("TOTAL 4 cases, 7 runs: pass rate 62.5%"), "{table}");
        assert_eq!(
            tail[1..],
            [
                "SPLIT held_out: 1 cases, 2 runs: pass rate 50.0%, protocol completion 50.0%, evidence coverage 100%",
                "SPLIT train: 2 cases, 3 runs: pass rate 50.0%, protocol completion 75.0%, evidence coverage 75%",
            ]
        );
    }
}
