//! "Same as last time": what a scheduled Run found, reduced to what the next one is compared
//! with (the finding status, actionability and the set of verified evidence values), what
//! changed between two, and whether receivers hear about it under the schedule's policy.

use crate::investigation::{Actionability, InvestigationResult};
use crate::resources::run_schedule::NotifyPolicy;

use super::store::Digest;

/// State word of a healthy result.
pub const HEALTHY: &str = "healthy";
/// State word of a failed Run.
pub const FAILED: &str = "failed";

/// Whether a result is something a person should act on: a change could be prepared, or a
/// person must decide. `no_action` and `not_actionable` are healthy.
pub fn is_finding(actionability: Actionability) -> bool {
    matches!(actionability, Actionability::ProposalPossible | Actionability::RequiresHuman)
}

/// The values a result's evidence quotes (each verified by the host when it accepted it).
fn quoted_values(result: &InvestigationResult) -> impl Iterator<Item = String> + '_ {
    result.evidence.iter().filter_map(|item| {
        let (_, quoted) = item.split_once(' ')?;
        Some(quoted.trim().trim_matches('"').to_string()).filter(|v| !v.is_empty())
    })
}

/// What a validated result is compared on.
pub fn digest(result: &InvestigationResult) -> Digest {
    Digest {
        failed: false,
        finding: is_finding(result.actionability),
        finding_status: result.finding_status.as_str().to_string(),
        actionability: result.actionability.as_str().to_string(),
        evidence: quoted_values(result).collect(),
    }
}

/// The digest of a Run that ended without a result.
pub fn failed() -> Digest {
    Digest { failed: true, ..Digest::default() }
}

/// How a digest's state is shown: `failed`, `healthy` or the finding status.
pub fn state(digest: &Digest) -> &str {
    match (digest.failed, digest.finding) {
        (true, _) => FAILED,
        (false, false) => HEALTHY,
        (false, true) => &digest.finding_status,
    }
}

fn quoted(values: impl Iterator<Item = impl AsRef<str>>) -> String {
    values.map(|v| format!("\"{}\"", v.as_ref())).collect::<Vec<_>>().join(", ")
}

/// What differs from `previous` (the Run before, `None` for the first): a first finding, a
/// changed finding (status, actionability, evidence values), back to healthy, or Runs that
/// start failing. Healthy after healthy is no change, whatever values it quotes; the first
/// Run, when healthy, neither.
pub fn changes(previous: Option<&Digest>, current: &Digest) -> Vec<String> {
    let was = previous.filter(|p| !p.failed);
    let mut changes = Vec::new();
    if current.failed {
        if !previous.is_some_and(|p| p.failed) {
            changes.push("the check failed".to_string());
        }
        return changes;
    }
    if previous.is_some_and(|p| p.failed) {
        changes.push("the check runs again".to_string());
    }
    match (was.filter(|p| p.finding), current.finding) {
        (None, true) => changes.push(format!("first finding: {}", current.finding_status)),
        (Some(_), false) => changes.push("back to healthy".to_string()),
        (Some(before), true) => {
            if before.finding_status != current.finding_status {
                changes.push(format!("finding status: {} → {}", before.finding_status, current.finding_status));
            }
            if before.actionability != current.actionability {
                changes.push(format!("actionability: {} → {}", before.actionability, current.actionability));
            }
            let added: Vec<&String> = current.evidence.difference(&before.evidence).collect();
            let gone: Vec<&String> = before.evidence.difference(&current.evidence).collect();
            if !added.is_empty() {
                changes.push(format!("new evidence: {}", quoted(added.iter())));
            }
            if !gone.is_empty() {
                changes.push(format!("no longer seen: {}", quoted(gone.iter())));
            }
        }
        (None, false) => {}
    }
    changes
}

/// Whether receivers hear about a Run: `always`; `onFinding` for a finding (or a failure);
/// `onChange` when something changed.
pub fn notifies(policy: NotifyPolicy, current: &Digest, changes: &[String]) -> bool {
    match policy {
        NotifyPolicy::Always => true,
        NotifyPolicy::OnFinding => current.finding || current.failed,
        NotifyPolicy::OnChange => !changes.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(actionability: &str, status: &str, evidence: &[&str]) -> InvestigationResult {
        let evidence: Vec<String> = evidence.iter().map(|v| format!("tool-call:call_1 \"{v}\"")).collect();
        serde_json::from_value(serde_json::json!({
            "finding_status": status, "actionability": actionability, "confidence": "high",
            "summary": "s", "evidence": evidence, "production_writes": 0,
        }))
        .unwrap()
    }

    #[test]
    fn healthy_finding_same_finding_healthy_changes_twice() {
        let healthy = digest(&result("no_action", "inconclusive", &["42 days"]));
        let finding = digest(&result("requires_human", "confirmed", &["6 days"]));
        let same = digest(&result("requires_human", "confirmed", &["6 days"]));
        let healthy_again = digest(&result("no_action", "confirmed", &["89 days"]));
        let sequence = [&healthy, &finding, &same, &healthy_again];
        let mut previous = None;
        let mut told = Vec::new();
        for current in sequence {
            let changes = changes(previous, current);
            if notifies(NotifyPolicy::OnChange, current, &changes) {
                told.push(changes);
            }
            previous = Some(current);
        }
        assert_eq!(told, [vec!["first finding: confirmed".to_string()], vec!["back to healthy".to_string()]]);
        assert_eq!(state(&finding), "confirmed");
        assert_eq!(state(&healthy), HEALTHY);
    }

    #[test]
    fn a_changed_finding_says_what_changed() {
        let before = digest(&result("requires_human", "suspected", &["6 days", "shop"]));
        let after = digest(&result("proposal_possible", "confirmed", &["5 days", "shop"]));
        assert_eq!(
            changes(Some(&before), &after),
            [
                "finding status: suspected → confirmed",
                "actionability: requires_human → proposal_possible",
                "new evidence: \"5 days\"",
                "no longer seen: \"6 days\"",
            ]
        );
    }

    #[test]
    fn failures_are_told_once_and_policies_differ() {
        let healthy = digest(&result("no_action", "inconclusive", &[]));
        assert_eq!(changes(Some(&healthy), &failed()), ["the check failed"]);
        assert!(changes(Some(&failed()), &failed()).is_empty(), "a failure in a row is not news");
        assert_eq!(changes(Some(&failed()), &healthy), ["the check runs again"]);
        assert!(notifies(NotifyPolicy::Always, &healthy, &[]));
        assert!(!notifies(NotifyPolicy::OnFinding, &healthy, &[]));
        let finding = digest(&result("requires_human", "suspected", &[]));
        assert!(notifies(NotifyPolicy::OnFinding, &finding, &[]));
        assert!(!notifies(NotifyPolicy::OnChange, &finding, &[]));
    }
}
