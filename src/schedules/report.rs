//! What a schedule shows and tells: whether its references resolve (the `ReferencesResolved`
//! condition `Ready` depends on), its status fields, the result of a tick's Run, and the
//! notice its receivers get.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::compare;
use super::store::{Book, Digest};
use crate::alerts::worker::delivery::target;
use crate::catalog::readiness::{Check, CheckState, reasons};
use crate::catalog::secrets::SecretResolver;
use crate::catalog::status::StatusBoard;
use crate::catalog::{Catalog, ObjectKey};
use crate::cron::{Cron, time_zone};
use crate::investigation::InvestigationResult;
use crate::notify::ScheduleNotice;
use crate::notify::Target;
use crate::resources::notification_receiver::NotificationReceiverSpec;
use crate::resources::run_schedule::{RunScheduleSpec, RunScheduleStatus, ScheduleResult};
use crate::resources::{Kind, Resource, RunSchedule};
use crate::tenancy::Tenancy;

/// Longest summary kept in status.
const MAX_SUMMARY_CHARS: usize = 1024;

/// A schedule ready to tick: its parsed expression and time zone.
#[derive(Debug)]
pub struct Plan {
    /// The schedule.
    pub cron: Cron,
    /// Its time zone.
    pub zone: TimeZone,
}

/// How a tick's Run ended.
#[derive(Debug)]
pub enum Ending {
    /// With a validated result.
    Result {
        /// The Run.
        run_id: Option<String>,
        /// The result.
        result: Box<InvestigationResult>,
    },
    /// Without a result.
    Failed {
        /// The Run, if one started.
        run_id: Option<String>,
        /// Stable code.
        code: String,
        /// The Run error's message; the report's summary reads `{code}: {error}`.
        error: String,
    },
    /// Replaced by the next tick, or interrupted by a stop: nothing to compare.
    Cancelled {
        /// The Run, if one started.
        run_id: Option<String>,
        /// `Replaced` or `Interrupted`.
        outcome: &'static str,
    },
}

/// A tick's Run as recorded and told.
#[derive(Debug)]
pub struct Finished {
    /// What the next Run is compared with (`None`: nothing to compare).
    pub digest: Option<Digest>,
    /// The status shown.
    pub result: ScheduleResult,
    /// The metric label (`succeeded`, `failed`, `replaced`, `interrupted`).
    pub outcome: &'static str,
    /// The result's recommended actions.
    pub actions: Vec<String>,
}

/// The `namespace/name` a receiver reference names from a schedule of `namespace`.
fn receiver_key(namespace: &str, reference: &str) -> ObjectKey {
    let (namespace, name) = reference.split_once('/').unwrap_or((namespace, reference));
    ObjectKey { kind: Kind::NotificationReceiver, namespace: namespace.to_string(), name: name.to_string() }
}

/// The receivers a schedule names that exist and that its namespace sees, with their specs.
pub fn receivers<'a>(
    catalog: &'a Catalog,
    key: &ObjectKey,
    spec: &RunScheduleSpec,
    tenancy: &Tenancy,
) -> Vec<(ObjectKey, &'a NotificationReceiverSpec)> {
    spec.receivers
        .iter()
        .map(|reference| receiver_key(&key.namespace, reference))
        .filter(|receiver| tenancy.sees(&key.namespace, &receiver.namespace))
        .filter_map(|receiver| match catalog.entries.get(&receiver)?.resource.as_ref() {
            Resource::NotificationReceiver(r) => Some((receiver, &r.spec)),
            _ => None,
        })
        .collect()
}

/// Each receiver's delivery target, its secrets resolved (a receiver whose secrets do not
/// resolve is left out and logged by code, never by value).
pub fn targets(
    receivers: Vec<(ObjectKey, &NotificationReceiverSpec)>,
    secrets: &dyn SecretResolver,
) -> Vec<(String, Target)> {
    receivers
        .into_iter()
        .filter_map(|(key, spec)| {
            let name = format!("{}/{}", key.namespace, key.name);
            match target(&key.namespace, spec, secrets) {
                Ok(target) => Some((name, target)),
                Err(error) => {
                    tracing::warn!(component = "akritas_schedules", receiver = %name, %error, "receiver not told: no target");
                    None
                }
            }
        })
        .collect()
}

/// What a schedule names that does not resolve: receivers its namespace does not see (or
/// that do not exist) and skills it does not see.
fn unresolved(catalog: &Catalog, key: &ObjectKey, spec: &RunScheduleSpec, tenancy: &Tenancy) -> Vec<String> {
    let found = receivers(catalog, key, spec, tenancy);
    let mut problems: Vec<String> = spec
        .receivers
        .iter()
        .filter(|reference| !found.iter().any(|(r, _)| r == &receiver_key(&key.namespace, reference)))
        .map(|reference| {
            format!(
                "receivers: {reference} is not a NotificationReceiver this namespace sees (its own namespace's, or a \
                 shared namespace's as namespace/name)"
            )
        })
        .collect();
    if !spec.skills.is_empty() {
        let skills = crate::engine::skills::skills_of(catalog, &tenancy.scope(&key.namespace));
        problems.extend(
            spec.skills
                .iter()
                .filter(|name| !skills.contains_key(*name))
                .map(|name| format!("skills: {name} is not a Skill this namespace sees")),
        );
    }
    problems
}

/// Whether every receiver and skill a schedule names resolves: the `ReferencesResolved`
/// check (`serve` publishes it, `akritas validate` prints a failure).
pub fn references(catalog: &Catalog, key: &ObjectKey, spec: &RunScheduleSpec, tenancy: &Tenancy) -> Check {
    let problems = unresolved(catalog, key, spec, tenancy);
    if problems.is_empty() {
        Check::passed(reasons::REFERENCES_RESOLVED, "every receiver and skill resolves")
    } else {
        Check::failed(reasons::REFERENCE_NOT_FOUND, problems.join("; "))
    }
}

/// Checks a schedule's references and publishes the outcome (and whether it is suspended);
/// the plan when it may tick.
pub fn plan(
    catalog: &Catalog,
    key: &ObjectKey,
    schedule: &RunSchedule,
    tenancy: &Tenancy,
    board: &StatusBoard,
) -> Option<Plan> {
    let spec = &schedule.spec;
    board.set_suspended(key, Some(spec.suspend));
    let check = references(catalog, key, spec, tenancy);
    let resolved = check.state == CheckState::Passed;
    board.set_check(key, check);
    if !resolved {
        return None;
    }
    // Both were checked when the object was loaded.
    let cron = Cron::parse(&spec.schedule).ok()?;
    let zone = time_zone(spec.time_zone.as_deref()).ok()?;
    Some(Plan { cron, zone })
}

/// The schedule `namespace/name` of the Catalog.
pub fn find(catalog: &Catalog, id: &str) -> Option<(ObjectKey, RunSchedule)> {
    let (namespace, name) = id.split_once('/')?;
    let key = ObjectKey { kind: Kind::RunSchedule, namespace: namespace.to_string(), name: name.to_string() };
    match catalog.entries.get(&key)?.resource.as_ref() {
        Resource::RunSchedule(schedule) => Some((key, schedule.clone())),
        _ => None,
    }
}

/// The status of a schedule from its book.
pub fn status(spec: &RunScheduleSpec, book: Option<&Book>, next: Option<Timestamp>) -> RunScheduleStatus {
    let mut status = RunScheduleStatus { next_schedule_time: next.map(|t| t.to_string()), ..Default::default() };
    let Some(book) = book else { return status };
    status.last_schedule_time = book.last_claimed.map(|t| t.to_string());
    status.last_successful_time = book.last_success.map(|t| t.to_string());
    status.last_result = book.result.clone();
    status.consecutive_failures = book.failures;
    status.missed_ticks = book.missed;
    status.skipped_ticks = book.skipped;
    status.last_skipped = book.last_skipped.clone();
    status.recent_runs = book.recent.iter().take(spec.history()).cloned().collect();
    status
}

fn bounded(text: &str) -> String {
    crate::text::prefix_chars(text, MAX_SUMMARY_CHARS).to_string()
}

/// The recorded result of a tick's Run.
pub fn result(scheduled: Timestamp, ending: Ending) -> Finished {
    let base = |run_id: Option<String>, outcome: &str| ScheduleResult {
        scheduled_time: scheduled.to_string(),
        run_name: run_id.as_deref().map(|id| id.replace('_', "-")),
        run_id,
        outcome: outcome.to_string(),
        ..ScheduleResult::default()
    };
    match ending {
        Ending::Result { run_id, result } => {
            let digest = compare::digest(&result);
            let coverage = result.evidence_coverage;
            let shown = ScheduleResult {
                finding_status: Some(compare::state(&digest).to_string()),
                actionability: Some(result.actionability.as_str().to_string()),
                summary: Some(bounded(&result.summary)),
                evidence_count: coverage.map_or(0, |c| c.claims),
                evidence_verified: coverage.map_or(0, |c| c.verified),
                ..base(run_id, "Succeeded")
            };
            Finished { digest: Some(digest), result: shown, outcome: "succeeded", actions: result.recommended_actions }
        }
        Ending::Failed { run_id, code, error } => {
            let shown = ScheduleResult {
                finding_status: Some(compare::FAILED.to_string()),
                summary: Some(bounded(&format!("{code}: {error}"))),
                ..base(run_id, "Failed")
            };
            Finished { digest: Some(compare::failed()), result: shown, outcome: "failed", actions: Vec::new() }
        }
        Ending::Cancelled { run_id, outcome } => {
            let label = if outcome == "Replaced" { "replaced" } else { "interrupted" };
            Finished { digest: None, result: base(run_id, outcome), outcome: label, actions: Vec::new() }
        }
    }
}

/// What receivers are told about a finished tick.
pub fn notice(id: &str, digest: &Digest, finished: &Finished, public_url: Option<&str>) -> ScheduleNotice {
    let result = &finished.result;
    ScheduleNotice {
        schedule: id.to_string(),
        scheduled_time: result.scheduled_time.clone(),
        state: compare::state(digest).to_string(),
        changes: result.changes.clone(),
        summary: result.summary.clone().unwrap_or_default(),
        actionability: result.actionability.clone(),
        evidence: digest.evidence.iter().cloned().collect(),
        evidence_count: result.evidence_count,
        evidence_verified: result.evidence_verified,
        recommended_actions: finished.actions.clone(),
        run_url: result.run_id.as_deref().and_then(|run| crate::notify::run_url(public_url, run)),
        run_id: result.run_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::validate::parse_manifest;

    fn catalog(yaml: &[&str]) -> Catalog {
        let mut catalog = Catalog::default();
        for doc in yaml {
            let resource = parse_manifest(serde_saphyr::from_str(doc).unwrap()).unwrap();
            let meta = resource.metadata();
            let key = ObjectKey {
                kind: resource.kind(),
                namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
                name: meta.name.clone().unwrap(),
            };
            let entry =
                crate::catalog::Entry { resource: std::sync::Arc::new(resource), source: "t".into(), base_dir: None };
            catalog.entries.insert(key, entry);
        }
        catalog
    }

    #[test]
    fn a_receiver_of_another_namespace_does_not_resolve_unless_shared() {
        let catalog = catalog(&[
            "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {name: chat, namespace: team-b}\n\
             spec: {type: webhook, webhook: {url: \"https://hooks.example/x\"}}\n",
            "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {name: hook, namespace: team-a}\n\
             spec: {type: webhook, webhook: {url: \"https://hooks.example/y\"}}\n",
        ]);
        let key = ObjectKey { kind: Kind::RunSchedule, namespace: "team-a".into(), name: "s".into() };
        let spec: RunScheduleSpec = serde_json::from_value(serde_json::json!({
            "schedule": "@daily", "prompt": "p", "receivers": ["hook", "team-b/chat"], "skills": ["nope"],
        }))
        .unwrap();
        let problems = unresolved(&catalog, &key, &spec, &Tenancy::default());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("receivers: team-b/chat is not"), "{problems:?}");
        assert!(problems[1].starts_with("skills: nope"), "{problems:?}");
        let shared = Tenancy::new(["team-b".to_string()]);
        assert_eq!(receivers(&catalog, &key, &spec, &shared).len(), 2);
    }
}
