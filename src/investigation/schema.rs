//! The schema of the structured result as the model is asked for it. An evidence item is an
//! object, `{"call": "<host call id>", "value": "<a value of that call's output>"}`, never a
//! string to parse; for a Run the schema names its successful calls and, per call, the values
//! its output holds ([`super::values`]), so a server that turns the schema into a grammar
//! (Ollama, llama-server) or honours it strictly cannot let the model cite a call the Run did
//! not make or quote a value the output does not hold. The verifier ([`super::validate`]) still
//! checks every item, whatever form it came in.

use serde::Serialize;
use serde_json::{Value, json};

use super::{MAX_ITEM_CHARS, MAX_ITEMS, MAX_TEXT_CHARS};

/// A call the result may cite: its host id (`call-2`), its tool and the values a result may
/// quote from its output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Citable {
    /// Host call id.
    pub call: String,
    /// Tool name.
    pub tool: String,
    /// Values of its output a result may quote.
    pub values: Vec<String>,
}

/// What an evidence item is, for the schema's description (a grammar-constrained model sees
/// it in the request).
const EVIDENCE_DESCRIPTION: &str = "Each item cites one call of host_owned_evidence by its id and one of that call's \
values, exactly as listed, e.g. {\"call\": \"call-2\", \"value\": \"restartCount=14\"}. Cite the values that show \
the cause.";

/// The schema given to the model for the structuring call, for any Run.
pub fn result_schema() -> Value {
    let list = || json!({"type": "array", "maxItems": MAX_ITEMS, "items": {"type": "string", "minLength": 1, "maxLength": MAX_ITEM_CHARS}});
    // The properties are in the order a model writes them (servers that turn a schema into a
    // grammar keep it): what happened and the values that show it come before the decisions
    // drawn from them, so a small model decides after it has written its reasons.
    json!({
        "type": "object",
        "additionalProperties": false,
        // Every property is required (empty text and lists are allowed): OpenAI's strict mode
        // refuses a schema with an optional property.
        "required": ["summary", "hypothesis", "evidence", "finding_status", "confidence", "ruled_out", "impact",
                     "affected_components", "recommended_actions", "actionability", "production_writes"],
        "properties": {
            "summary": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS},
            "hypothesis": {"type": "string", "maxLength": MAX_TEXT_CHARS},
            "evidence": {"type": "array", "maxItems": MAX_ITEMS, "description": EVIDENCE_DESCRIPTION,
                         "items": {"type": "object", "additionalProperties": false, "required": ["call", "value"],
                                   "properties": {"call": {"type": "string", "minLength": 1, "maxLength": 128},
                                                  "value": {"type": "string", "minLength": 1, "maxLength": MAX_ITEM_CHARS}}}},
            "finding_status": {"type": "string", "enum": ["confirmed", "suspected", "inconclusive"], "description": "confirmed: a cited value shows the cause itself; suspected: the values point at a cause without showing it; inconclusive: they do not settle it"},
            "confidence": {"type": "string", "enum": ["high", "medium", "low"]},
            "ruled_out": list(),
            "impact": {"type": "string", "maxLength": MAX_TEXT_CHARS},
            "affected_components": list(),
            "recommended_actions": list(),
            "actionability": {"type": "string", "enum": ["proposal_possible", "requires_human", "no_action", "not_actionable"], "description": "proposal_possible: changing configuration in a file would fix it (a limit, a setting, an image tag); requires_human: a person must act on a live system; no_action: real but nothing to do now; not_actionable: the alert itself is noise (flapping around its threshold) and the rule needs tuning"},
            "production_writes": {"type": "integer", "const": 0}
        }
    })
}

/// The result schema for a Run whose successful calls are `citable`: an evidence item names
/// one of them (an `enum`) and one of that call's values (an `enum` per call); a Run with no
/// value to quote cites nothing, and is offered only the status that stands without evidence
/// (`inconclusive`: `confirmed` needs a verified quote, `suspected` a cited call).
pub fn result_schema_citing(citable: &[Citable]) -> Value {
    cite(result_schema(), citable)
}

/// `schema` (a result schema) with its evidence items limited to `citable`.
pub(super) fn cite(mut schema: Value, citable: &[Citable]) -> Value {
    let branches: Vec<Value> = citable
        .iter()
        .filter(|c| !c.values.is_empty())
        .map(|c| {
            json!({"type": "object", "additionalProperties": false, "required": ["call", "value"],
                   "properties": {"call": {"type": "string", "enum": [c.call]},
                                  "value": {"type": "string", "enum": c.values}}})
        })
        .collect();
    if branches.is_empty() {
        schema["properties"]["finding_status"] = json!({"type": "string", "enum": ["inconclusive"],
            "description": "inconclusive: no call of this Run returned a value to cite, so the evidence cannot settle it"});
    }
    let evidence = &mut schema["properties"]["evidence"];
    match branches.len() {
        0 => evidence["maxItems"] = json!(0),
        1 => evidence["items"] = branches.into_iter().next().unwrap_or_default(),
        _ => evidence["items"] = json!({"anyOf": branches}),
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    fn citable() -> Vec<Citable> {
        vec![
            Citable { call: "call-1".into(), tool: "pod_status".into(), values: vec!["restartCount=7".into()] },
            Citable { call: "call-2".into(), tool: "events".into(), values: vec!["reason=BackOff".into()] },
            Citable { call: "call-3".into(), tool: "logs".into(), values: vec![] },
        ]
    }

    fn result(evidence: Value) -> Value {
        json!({"finding_status": "confirmed", "actionability": "no_action", "confidence": "low",
            "summary": "s", "hypothesis": "", "impact": "", "evidence": evidence, "ruled_out": [], "affected_components": [],
            "recommended_actions": [], "production_writes": 0})
    }

    #[test]
    fn the_schema_asks_for_the_cause_and_its_evidence_before_the_decisions() {
        let schema = result_schema();
        let order: Vec<&str> = schema["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        let at = |key: &str| order.iter().position(|k| *k == key).unwrap();
        assert_eq!(&order[..3], ["summary", "hypothesis", "evidence"], "{order:?}");
        assert!(at("evidence") < at("finding_status") && at("recommended_actions") < at("actionability"), "{order:?}");
        let serialized = serde_json::to_string(&schema).unwrap();
        assert!(serialized.find("\"summary\":").unwrap() < serialized.find("\"actionability\":").unwrap());
        assert_eq!(schema["required"].as_array().unwrap().len(), order.len());
    }

    #[test]
    fn the_schema_for_a_run_admits_only_its_calls_each_with_its_own_values() {
        let validator = jsonschema::validator_for(&result_schema_citing(&citable())).unwrap();
        for good in [
            json!([{"call": "call-1", "value": "restartCount=7"}]),
            json!([{"call": "call-2", "value": "reason=BackOff"}, {"call": "call-1", "value": "restartCount=7"}]),
        ] {
            assert!(validator.is_valid(&result(good.clone())), "{good}");
        }
        for bad in [
            json!([{"call": "call-1", "value": "reason=BackOff"}]),
            json!([{"call": "call-3", "value": "anything"}]),
            json!([{"call": "call-9", "value": "restartCount=7"}]),
            json!(["tool-call:call-1 \"restartCount=7\""]),
            json!([{"call": "call-1"}]),
        ] {
            assert!(!validator.is_valid(&result(bad.clone())), "{bad}");
        }
        let none = jsonschema::validator_for(&result_schema_citing(&citable()[2..])).unwrap();
        assert!(!none.is_valid(&result(json!([]))), "confirmed without anything to cite is not offered");
        let mut inconclusive = result(json!([]));
        inconclusive["finding_status"] = json!("inconclusive");
        assert!(none.is_valid(&inconclusive));
        for status in ["suspected", "confirmed"] {
            inconclusive["finding_status"] = json!(status);
            assert!(!none.is_valid(&inconclusive), "{status} with no evidence possible");
        }
        assert!(!none.is_valid(&result(json!([{"call": "call-3", "value": "x"}]))));
    }

    #[test]
    fn the_shipped_instructions_name_exactly_the_statuses_the_schema_accepts() {
        let instructions = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/instructions/SYSTEM.md"));
        let statuses = result_schema()["properties"]["finding_status"]["enum"].clone();
        let statuses: Vec<&str> = statuses.as_array().unwrap().iter().filter_map(Value::as_str).collect();
        let named = instructions.split("finding status (").nth(1).and_then(|rest| rest.split(')').next()).unwrap();
        let named: Vec<&str> = named.split(';').filter_map(|part| part.trim().split(':').next()).collect();
        assert_eq!(named, statuses, "SYSTEM.md names the statuses the schema accepts, in its order");
        for retired in ["likely", "not a problem"] {
            assert!(!instructions.contains(retired), "SYSTEM.md still names {retired:?}");
        }
    }
}
