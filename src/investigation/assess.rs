//! A submitted result checked item by item, so that what was right is kept (docs/alerts.md,
//! "Evidence values"). Each evidence item is verified on its own: the items the host cannot
//! verify (a call the Run did not make, a value its output does not hold) are set apart with
//! the reason, for a repair turn that names them ([`Assessment::repair_prompt`]) and, when a
//! result is settled, recorded as refused. A finding status the remaining evidence does not
//! back is lowered (confirmed → suspected → inconclusive) with the reason recorded, instead of
//! failing the Run. What is wrong with the result as a whole (not JSON, the wrong shape, a
//! production write, a field only the host computes) still refuses it.

use std::collections::BTreeMap;

use super::{
    Citable, EVIDENCE_PREFIX, Evidence, EvidenceCoverage, FindingStatus, InvestigationError, InvestigationResult,
    QuoteRule, RefusedEvidence, Rules, StatusDowngrade, check_reference, decode, finish,
};

/// An evidence item the host could not verify.
#[derive(Debug)]
pub struct Refusal {
    /// The item (text form).
    pub item: String,
    /// The rule the item broke: malformed reference, no such successful call, or quote not in
    /// its output.
    pub error: InvestigationError,
}

/// A result whose evidence items were verified one by one.
#[derive(Debug)]
pub struct Assessment {
    result: InvestigationResult,
    verified: usize,
    refused: Vec<Refusal>,
}

/// Decodes a model's result and verifies each evidence item against the calls it may cite.
/// Fails only for what is wrong with the result as a whole.
pub fn assess(arguments: &str, evidence: &Evidence) -> Result<Assessment, InvestigationError> {
    let mut result = decode(arguments)?;
    if !result.refused_evidence.is_empty() {
        return Err(InvestigationError::HostComputed("refused_evidence"));
    }
    if result.status_downgrade.is_some() {
        return Err(InvestigationError::HostComputed("status_downgrade"));
    }
    let mut tokenized = BTreeMap::new();
    let (mut verified, mut kept, mut refused) = (0, Vec::new(), Vec::new());
    for item in std::mem::take(&mut result.evidence) {
        match check_reference(&item, evidence, QuoteRule::Tokens, &mut tokenized) {
            Ok(quoted) => {
                verified += usize::from(quoted);
                kept.push(item);
            }
            Err(error) => refused.push(Refusal { item, error }),
        }
    }
    result.evidence = kept;
    Ok(Assessment { result, verified, refused })
}

impl Assessment {
    /// The items the host could not verify.
    pub fn refused(&self) -> &[Refusal] {
        &self.refused
    }

    /// Items verified with a quoted value.
    pub fn verified(&self) -> usize {
        self.verified
    }

    /// The result only when every item verified and the evidence backs the status.
    pub fn strict(self) -> Result<InvestigationResult, InvestigationError> {
        if let Some(refusal) = self.refused.into_iter().next() {
            return Err(refusal.error);
        }
        finish(self.result, self.verified, Rules::CURRENT)
    }

    /// The result with the verified items: the others are recorded as refused, and a status
    /// they do not back is lowered to the strongest one they do, with the reason.
    pub fn settle(self) -> Result<InvestigationResult, InvestigationError> {
        let Assessment { mut result, verified, refused } = self;
        let coverage = EvidenceCoverage::of(result.evidence.len(), verified);
        if let Some((to, reason)) = lowered(result.finding_status, &coverage, refused.len()) {
            result.status_downgrade = Some(StatusDowngrade { from: result.finding_status, reason });
            result.finding_status = to;
        }
        let mut settled = finish(result, verified, Rules::CURRENT)?;
        settled.refused_evidence =
            refused.into_iter().map(|r| RefusedEvidence { item: r.item, reason: r.error.to_string() }).collect();
        Ok(settled)
    }

    /// The repair turn: each refused item with why, and the values each call it could have
    /// cited holds; what was verified is named as kept. `None` when nothing was refused and
    /// the status is backed.
    pub fn repair_prompt(&self, citable: &[Citable]) -> Option<String> {
        let coverage = EvidenceCoverage::of(self.result.evidence.len(), self.verified);
        let lowered = lowered(self.result.finding_status, &coverage, self.refused.len());
        if self.refused.is_empty() && lowered.is_none() {
            return None;
        }
        let mut text = String::from("The host checked your result.");
        if !self.result.evidence.is_empty() {
            text.push_str(&format!(" Verified and kept: {}.", self.result.evidence.join(", ")));
        }
        for refusal in &self.refused {
            text.push_str(&format!("\nRefused: {}. {}", refusal.item, refusal.error));
            if let Some(call) = cited_call(&refusal.item).and_then(|id| citable.iter().find(|c| c.call == id)) {
                text.push_str(&format!("\n  Values of {} ({}): {}", call.call, call.tool, quoted_list(&call.values)));
            }
        }
        if let Some((to, reason)) = &lowered {
            text.push_str(&format!(
                "\nfinding_status {} is not backed: {reason}; as it stands it would be recorded as {}.",
                self.result.finding_status.as_str(),
                to.as_str()
            ));
        }
        let calls: Vec<String> = citable.iter().filter(|c| !c.values.is_empty()).map(|c| c.call.clone()).collect();
        text.push_str(&format!(
            "\nSubmit the whole result again. Each evidence item is {{\"call\": \"<id>\", \"value\": \"<one of that \
             call's values, exactly as listed>\"}}; the calls you may cite: {}. Keep what was verified and change only \
             what is named here.",
            if calls.is_empty() { "none".to_string() } else { calls.join(", ") }
        ));
        Some(text)
    }
}

/// The call id an evidence item (text form) names, if it has the form.
fn cited_call(item: &str) -> Option<&str> {
    let rest = item.strip_prefix(EVIDENCE_PREFIX)?;
    Some(rest.split_once(' ').map_or(rest, |(id, _)| id))
}

/// `"a", "b", …` (or `none`).
fn quoted_list(values: &[String]) -> String {
    if values.is_empty() {
        return "none".to_string();
    }
    values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ")
}

/// The status `status` is lowered to when `coverage` does not back it, with the reason.
fn lowered(status: FindingStatus, coverage: &EvidenceCoverage, refused: usize) -> Option<(FindingStatus, String)> {
    let refused = match refused {
        0 => String::new(),
        n => format!(" ({n} item(s) refused)"),
    };
    match status {
        FindingStatus::Confirmed if coverage.verified == 0 && coverage.claims > 0 => Some((
            FindingStatus::Suspected,
            format!("no evidence item quotes a value the host found in the cited call's output{refused}"),
        )),
        FindingStatus::Confirmed | FindingStatus::Suspected if coverage.claims == 0 => Some((
            FindingStatus::Inconclusive,
            format!("no evidence item cites a successful call of this Run{refused}"),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn calls() -> Evidence {
        Evidence::from([
            ("call-1".to_string(), json!({"reason": "OOMKilled", "restartCount": 14})),
            ("call-2".to_string(), json!({"events": [{"reason": "BackOff", "count": 61}]})),
        ])
    }

    fn citable() -> Vec<Citable> {
        calls()
            .iter()
            .map(|(call, output)| Citable {
                call: call.clone(),
                tool: "t".into(),
                values: super::super::values::quotable(output, "", &|_| 0),
            })
            .collect()
    }

    fn result(status: &str, evidence: Value) -> String {
        json!({"finding_status": status, "actionability": "requires_human", "confidence": "low", "summary": "s",
               "evidence": evidence, "production_writes": 0})
        .to_string()
    }

    #[test]
    fn a_repeated_evidence_item_is_dropped_not_refused() {
        let item = json!({"call": "call-1", "value": "reason=OOMKilled"});
        let accepted = super::super::validate(
            &result("confirmed", json!([item, item, "tool-call:call-1 \"reason=OOMKilled\""])),
            &calls(),
        )
        .unwrap();
        assert_eq!(accepted.evidence, ["tool-call:call-1 \"reason=OOMKilled\""]);
        assert_eq!(accepted.evidence_coverage.unwrap().claims, 1);
    }

    #[test]
    fn the_verified_items_are_kept_and_the_rest_recorded_as_refused() {
        let submitted = result(
            "confirmed",
            json!([{"call": "call-1", "value": "reason=OOMKilled"}, {"call": "call-2", "value": "restarts=99"},
                   {"call": "call-7", "value": "x"}]),
        );
        assert!(super::super::validate(&submitted, &calls()).is_err(), "the strict check refuses it");
        let settled = assess(&submitted, &calls()).unwrap().settle().unwrap();
        assert_eq!(settled.finding_status, FindingStatus::Confirmed, "the verified quote backs it");
        assert_eq!(settled.evidence, ["tool-call:call-1 \"reason=OOMKilled\""]);
        let refused: Vec<&str> = settled.refused_evidence.iter().map(|r| r.item.as_str()).collect();
        assert_eq!(refused, ["tool-call:call-2 \"restarts=99\"", "tool-call:call-7 \"x\""]);
        assert!(settled.refused_evidence[0].reason.contains("does not occur in that call's output"));
        assert!(settled.refused_evidence[1].reason.contains("names no successful tool call"));
        assert_eq!(settled.evidence_coverage.unwrap().describe(), "1/1 (100%)");
        assert!(settled.status_downgrade.is_none());
        // The record replays under the journal's rules.
        let recorded = serde_json::to_string(&settled).unwrap();
        assert_eq!(super::super::revalidate(&recorded, &calls()).unwrap(), settled);
    }

    #[test]
    fn a_status_the_evidence_does_not_back_is_lowered_with_the_reason() {
        let cited_only = result("confirmed", json!(["tool-call:call-1", {"call": "call-2", "value": "nope"}]));
        let settled = assess(&cited_only, &calls()).unwrap().settle().unwrap();
        assert_eq!(settled.finding_status, FindingStatus::Suspected);
        let downgrade = settled.status_downgrade.clone().unwrap();
        assert_eq!(downgrade.from, FindingStatus::Confirmed);
        assert_eq!(
            downgrade.reason,
            "no evidence item quotes a value the host found in the cited call's output (1 item(s) refused)"
        );
        let nothing = result("confirmed", json!([{"call": "call-9", "value": "x"}]));
        let settled = assess(&nothing, &calls()).unwrap().settle().unwrap();
        assert_eq!(settled.finding_status, FindingStatus::Inconclusive);
        assert!(settled.evidence_coverage.unwrap().backs_status);
        let suspected = assess(&result("suspected", json!([])), &calls()).unwrap().settle().unwrap();
        assert_eq!(suspected.finding_status, FindingStatus::Inconclusive);
        let recorded = serde_json::to_string(&suspected).unwrap();
        assert_eq!(super::super::revalidate(&recorded, &calls()).unwrap(), suspected);
    }

    #[test]
    fn a_submission_cannot_state_what_the_host_computes() {
        let mut stated: Value = serde_json::from_str(&result("inconclusive", json!([]))).unwrap();
        stated["refused_evidence"] = json!([{"item": "x", "reason": "y"}]);
        assert_eq!(
            assess(&stated.to_string(), &calls()).unwrap_err().to_string(),
            "refused_evidence is computed by the host; omit the field"
        );
        let mut stated: Value = serde_json::from_str(&result("inconclusive", json!([]))).unwrap();
        stated["status_downgrade"] = json!({"from": "confirmed", "reason": "y"});
        assert!(assess(&stated.to_string(), &calls()).is_err());
    }

    #[test]
    fn the_repair_turn_names_each_refused_item_why_and_the_values_its_call_holds() {
        let submitted = result(
            "confirmed",
            json!([{"call": "call-1", "value": "reason=OOMKilled"}, {"call": "call-2", "value": "count=16"}]),
        );
        let prompt = assess(&submitted, &calls()).unwrap().repair_prompt(&citable()).unwrap();
        assert!(prompt.contains("Verified and kept: tool-call:call-1 \"reason=OOMKilled\"."), "{prompt}");
        assert!(prompt.contains("Refused: tool-call:call-2 \"count=16\". evidence"), "{prompt}");
        assert!(prompt.contains("does not occur in that call's output"), "{prompt}");
        assert!(prompt.contains("Values of call-2 (t): \"reason=BackOff\", \"count=61\""), "{prompt}");
        assert!(prompt.contains("the calls you may cite: call-1, call-2"), "{prompt}");
        let clean = result("confirmed", json!([{"call": "call-1", "value": "restartCount=14"}]));
        assert!(assess(&clean, &calls()).unwrap().repair_prompt(&citable()).is_none());
        let unbacked = assess(&result("confirmed", json!([])), &calls()).unwrap().repair_prompt(&citable()).unwrap();
        assert!(
            unbacked.contains(
                "finding_status confirmed is not backed: no evidence item cites a successful call of \
                               this Run; as it stands it would be recorded as inconclusive."
            ),
            "{unbacked}"
        );
    }
}
