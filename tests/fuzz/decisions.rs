//! What the model decides, as the host decodes it: the investigation plan (validated
//! against a real tool registry) and the structured `InvestigationResult` (validated
//! against the calls the Run made).

use std::sync::{Arc, Mutex};

use akritas::engine::plan::{MAX_FIELD_CHARS, MAX_PLAN_ITEMS, validate_plan};
use akritas::investigation::{EVIDENCE_PREFIX, Evidence, MAX_ITEMS, MAX_TEXT_CHARS, quote, validate};
use serde_json::json;

use super::harness::{self, Verdict};
use super::mutate::{self, Syntax};
use super::tools::{TOOL, registry};

#[test]
fn investigation_plan() {
    let seeds = harness::seeds("plan", &[], &[".json"], Syntax::Json);
    let registry = registry(Arc::new(Mutex::new("{}".into())), Arc::new(Mutex::new(None)));
    let check_tool = |tool: &str, arguments: &serde_json::Value| registry.check_arguments(tool, arguments);
    harness::run("plan", (mutate::input(seeds.len()), 0usize..=MAX_PLAN_ITEMS), |(input, max_checks)| {
        let text = String::from_utf8_lossy(&mutate::render(&seeds, input)).into_owned();
        let max_checks = if mutate::is_unchanged(input) { MAX_PLAN_ITEMS } else { *max_checks };
        match validate_plan(&text, max_checks, &check_tool) {
            Ok(plan) => {
                if plan.checks.len() > max_checks || plan.checks.len() + plan.gaps.len() > MAX_PLAN_ITEMS {
                    return Err(format!(
                        "plan over its bounds: {} checks, {} gaps",
                        plan.checks.len(),
                        plan.gaps.len()
                    ));
                }
                for check in &plan.checks {
                    if check.tool != TOOL || registry.check_arguments(&check.tool, &check.arguments).is_err() {
                        return Err(format!("a check the registry refuses: {check:?}"));
                    }
                }
                let fields = plan.checks.iter().flat_map(|c| [&c.step, &c.reason]);
                let fields = fields.chain(plan.gaps.iter().flat_map(|g| [&g.step, &g.capability, &g.reason]));
                for field in fields {
                    if field.trim().is_empty() || *field != field.trim() || field.chars().count() > MAX_FIELD_CHARS {
                        return Err(format!("field not trimmed or out of bounds: {field:?}"));
                    }
                }
                Ok(Verdict::Accepted)
            }
            Err(error) if mutate::is_unchanged(input) => Err(format!("a seed is rejected: {error}")),
            Err(error) if error.to_string().trim().is_empty() || error.audit_reason().trim().is_empty() => {
                Err(format!("a rejection without a message: {error:?}"))
            }
            Err(_) => Ok(Verdict::Rejected),
        }
    });
}

#[test]
fn investigation_result() {
    let seeds = harness::seeds("investigation", &[], &[".json"], Syntax::Json);
    let evidence: Evidence = [
        (
            "call-1".to_string(),
            json!({"data": {"result": [{"metric": {"instance": "db-1"}, "value": [1780000000, "0.97"]}]}}),
        ),
        ("call-2".to_string(), json!({"connections": 412, "max_connections": 500})),
    ]
    .into();
    harness::run("investigation", mutate::input(seeds.len()), |input| {
        let text = String::from_utf8_lossy(&mutate::render(&seeds, input)).into_owned();
        match validate(&text, &evidence) {
            Ok(result) => {
                if result.production_writes != 0 {
                    return Err("a result claiming production writes was accepted".into());
                }
                if result.summary.is_empty() || result.summary.chars().count() > MAX_TEXT_CHARS {
                    return Err("summary out of bounds".into());
                }
                let lists =
                    [&result.evidence, &result.ruled_out, &result.affected_components, &result.recommended_actions];
                if lists.iter().any(|l| l.len() > MAX_ITEMS || l.iter().any(|i| i.is_empty())) {
                    return Err("a list out of bounds".into());
                }
                let mut quoted = 0;
                for reference in &result.evidence {
                    let rest = reference.strip_prefix(EVIDENCE_PREFIX).ok_or("a foreign reference was accepted")?;
                    let (id, quote) = rest.split_once(' ').map_or((rest, None), |(id, q)| (id, Some(q)));
                    let output = evidence.get(id).ok_or_else(|| format!("evidence of an unknown call: {reference}"))?;
                    if let Some(quote) = quote {
                        let value = quote.trim_matches('"');
                        quoted += 1;
                        // Normalised matching accepts `412.0` for `412`; it never accepts what neither
                        // the substring rule nor the token rule finds.
                        if value.is_empty()
                            || (!output.to_string().contains(value)
                                && !json_strings_contain(output, value)
                                && !quote::occurs(value, output))
                        {
                            return Err(format!("a quote not in the call's output: {reference}"));
                        }
                    }
                }
                let coverage = result.evidence_coverage.ok_or("an accepted result without coverage")?;
                if (coverage.claims as usize, coverage.verified) != (result.evidence.len(), quoted) {
                    return Err(format!("coverage {coverage:?} for {quoted} quotes"));
                }
                let again = serde_json::to_string(&result).map_err(|e| e.to_string())?;
                if validate(&again, &evidence).as_ref().ok() != Some(&result) {
                    return Err("an accepted result does not validate again as recorded".into());
                }
                Ok(Verdict::Accepted)
            }
            Err(error) if mutate::is_unchanged(input) => Err(format!("a seed is rejected: {error}")),
            Err(error) if error.to_string().trim().is_empty() => Err("a rejection without a message".into()),
            Err(_) => Ok(Verdict::Rejected),
        }
    });
}

fn json_strings_contain(value: &serde_json::Value, text: &str) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains(text),
        serde_json::Value::Array(items) => items.iter().any(|i| json_strings_contain(i, text)),
        serde_json::Value::Object(map) => map.values().any(|i| json_strings_contain(i, text)),
        _ => false,
    }
}
