//! The result schema sized to the completion budget, for a server that turns it into a
//! grammar (llama-server, Ollama; the structured step sends it in place of the result schema,
//! which still checks the answer). A weak model under a grammar does not stop writing: it fills
//! each string to its `maxLength` and each list to its `maxItems`, and a result cut off at
//! `max_tokens` is no result (measured: SmolLM2-135M in llama-server with 512 tokens filled 21 of
//! 81 completions to the last token, and 4 of 22 results never parsed). Here every text and list
//! is bounded so that the longest answer the grammar admits fits the budget: the longer the
//! budget, the more room, up to the host's own bounds.

use serde_json::{Value, json};

use crate::llm::grammar::CHARS_PER_TOKEN;

use super::schema::{Citable, cite, result_schema};
use super::{MAX_ITEM_CHARS, MAX_ITEMS, MAX_TEXT_CHARS};

/// The keys, enum values and punctuation of a result with every field present.
const SKELETON_CHARS: usize = 240;
/// Evidence items the grammar asks for at least, when the calls hold that many values. A small
/// model under a grammar cites the first value of each call and stops (measured on
/// Qwen2.5-Coder-1.5B: `state=idle in transaction` of a statement, not its `duration_s=1820`
/// offered next); asked for three, it goes on down the lists, most telling first. Only the
/// grammar asks: the result schema, and so the verifier, accepts fewer.
const MIN_EVIDENCE_ITEMS: usize = 3;

/// The bounds of one result answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ResultRoom {
    summary: usize,
    hypothesis: usize,
    impact: usize,
    evidence_items: usize,
    /// Items and characters of each of `ruled_out`, `affected_components`, `recommended_actions`.
    lists: [(usize, usize); 3],
}

impl ResultRoom {
    /// The room for an answer of at most `max_tokens` tokens whose evidence items take
    /// `item_chars` characters each (the mean of the values offered: an item is a value picked
    /// from a list, which a model cannot lengthen).
    fn fitting(max_tokens: u32, item_chars: usize) -> Self {
        let chars = usize::try_from(max_tokens).unwrap_or(usize::MAX).saturating_mul(CHARS_PER_TOKEN);
        let content = chars.saturating_sub(SKELETON_CHARS);
        let share = |percent: usize| content / 100 * percent;
        let text = |percent: usize, floor: usize| share(percent).clamp(floor, MAX_TEXT_CHARS);
        // An evidence item with its comma. Evidence takes the largest share: a result is only
        // as good as what it cites (measured: with a quarter of 512 tokens the grammar admitted
        // one item, and a finding that needs two facts could not cite them).
        let evidence_items = (share(40) / (item_chars + 1).max(24)).clamp(2, 16).min(MAX_ITEMS);
        // A list item with its quotes and comma.
        let list = |percent: usize| {
            let items = (share(percent) / 80).clamp(1, 8).min(MAX_ITEMS);
            (items, (share(percent) / items).saturating_sub(3).clamp(24, MAX_ITEM_CHARS))
        };
        // 95 of 100 shares: the rest is slack for the separators between fields.
        ResultRoom {
            summary: text(18, 80),
            hypothesis: text(10, 40),
            impact: text(6, 40),
            evidence_items,
            lists: [list(5), list(4), list(7)],
        }
    }
}

/// The result schema for a Run citing `citable`, bounded to what `max_tokens` can hold.
pub fn result_grammar(citable: &[Citable], max_tokens: u32) -> Value {
    let mut schema = cite(result_schema(), citable);
    let room = ResultRoom::fitting(max_tokens, mean_item_chars(citable));
    let properties = &mut schema["properties"];
    for (field, chars) in [("summary", room.summary), ("hypothesis", room.hypothesis), ("impact", room.impact)] {
        properties[field]["maxLength"] = json!(chars);
    }
    if properties["evidence"]["maxItems"] != json!(0) {
        properties["evidence"]["maxItems"] = json!(room.evidence_items);
        let offered: usize = citable.iter().map(|c| c.values.len()).sum();
        properties["evidence"]["minItems"] = json!(MIN_EVIDENCE_ITEMS.min(offered).min(room.evidence_items));
    }
    for (field, (items, chars)) in
        ["ruled_out", "affected_components", "recommended_actions"].into_iter().zip(room.lists)
    {
        properties[field]["maxItems"] = json!(items);
        properties[field]["items"]["maxLength"] = json!(chars);
    }
    schema
}

/// The mean length of an evidence item citing one of `citable`'s values:
/// `{"call":"<id>","value":"<value>"}`.
fn mean_item_chars(citable: &[Citable]) -> usize {
    let items: Vec<usize> =
        citable.iter().flat_map(|c| c.values.iter().map(move |v| c.call.len() + v.len() + 22)).collect();
    items.iter().sum::<usize>().checked_div(items.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::grammar::longest_admitted as longest;

    fn references(n: usize) -> Vec<Citable> {
        (1..=n)
            .map(|i| Citable {
                call: format!("call-{i}"),
                tool: "pod_status".into(),
                values: (0..16).map(|v| format!("message=a value of {v} words from the output of call {i}")).collect(),
            })
            .collect()
    }

    #[test]
    fn the_longest_answer_fits_the_budget() {
        for max_tokens in [256, 512, 1024, 4096] {
            for cited in [0, 1, 6] {
                let schema = result_grammar(&references(cited), max_tokens);
                let chars = longest(&schema);
                // Under about 512 tokens the floors (80 characters of summary, ...) take more.
                let budget = (max_tokens as usize * CHARS_PER_TOKEN).max(1024);
                assert!(chars <= budget, "{max_tokens} tokens, {cited} references: {chars} characters");
            }
        }
        // The full schema admits far more than 512 tokens.
        assert!(longest(&super::super::schema::result_schema_citing(&references(3))) > 100_000);
    }

    #[test]
    fn more_budget_gives_more_room_up_to_the_hosts_bounds() {
        let small = ResultRoom::fitting(512, 60);
        let large = ResultRoom::fitting(4096, 60);
        assert!(small.summary >= 80 && small.summary < large.summary);
        assert!(small.evidence_items >= 1 && small.evidence_items < large.evidence_items);
        let huge = ResultRoom::fitting(1_000_000, 60);
        assert_eq!(huge.summary, MAX_TEXT_CHARS);
        assert!(huge.lists.iter().all(|&(items, chars)| items <= MAX_ITEMS && chars <= MAX_ITEM_CHARS));
    }

    #[test]
    fn an_answer_the_sized_schema_admits_meets_the_full_one() {
        let refs = references(2);
        let sized = result_grammar(&refs, 512);
        let full = super::super::schema::result_schema_citing(&refs);
        let answer = json!({
            "finding_status": "suspected", "actionability": "requires_human", "confidence": "low",
            "summary": "s".repeat(sized["properties"]["summary"]["maxLength"].as_u64().unwrap() as usize),
            "hypothesis": "", "impact": "",
            "evidence": [{"call": "call-2", "value": refs[1].values[3]}, {"call": "call-1", "value": refs[0].values[0]},
                         {"call": "call-1", "value": refs[0].values[1]}],
            "ruled_out": [], "affected_components": ["cart"], "recommended_actions": ["raise the limit"],
            "production_writes": 0
        });
        let errors: Vec<String> =
            jsonschema::validator_for(&sized).unwrap().iter_errors(&answer).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
        assert!(jsonschema::is_valid(&full, &answer));
        let long = json!({"summary": "s".repeat(MAX_TEXT_CHARS)});
        let mut too_long = answer.clone();
        too_long["summary"] = long["summary"].clone();
        assert!(!jsonschema::is_valid(&sized, &too_long) && jsonschema::is_valid(&full, &too_long));
    }

    #[test]
    fn the_grammar_asks_for_three_items_when_the_calls_hold_three_values_and_the_schema_for_none() {
        let answer = |evidence: usize| {
            let refs = references(2);
            let evidence: Vec<Value> =
                (0..evidence).map(|i| json!({"call": "call-1", "value": refs[0].values[i]})).collect();
            json!({"finding_status": "suspected", "actionability": "requires_human", "confidence": "low",
                "summary": "s", "hypothesis": "", "impact": "", "evidence": evidence, "ruled_out": [],
                "affected_components": [], "recommended_actions": [], "production_writes": 0})
        };
        let sized = result_grammar(&references(2), 512);
        assert_eq!(sized["properties"]["evidence"]["minItems"], json!(MIN_EVIDENCE_ITEMS));
        assert!(!jsonschema::is_valid(&sized, &answer(2)) && jsonschema::is_valid(&sized, &answer(3)));
        let full = super::super::schema::result_schema_citing(&references(2));
        assert!(jsonschema::is_valid(&full, &answer(1)), "the verifier's schema accepts fewer");
        // Fewer values offered than that: all of them, and with none, nothing.
        let mut two = references(1);
        two[0].values.truncate(2);
        assert_eq!(result_grammar(&two, 512)["properties"]["evidence"]["minItems"], json!(2));
        assert_eq!(result_grammar(&[], 512)["properties"]["evidence"]["maxItems"], json!(0));
        assert!(result_grammar(&[], 512)["properties"]["evidence"].get("minItems").is_none());
    }
}
