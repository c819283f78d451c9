//! The plan schema sized to the completion budget, for a server that turns it into a grammar
//! (the planning step sends it in place of the plan schema, which still checks the answer). A
//! weak model under a grammar fills every text to its bound: measured with Gemma 3 270M on
//! Ollama and 512 tokens, 11 of 13 plan answers ran to the last token (a step of 200 zeros, a
//! reason quoting the whole alert), and a plan cut off is no plan. Here the texts, the argument
//! strings and the lists are bounded so that the longest plan the grammar admits fits the
//! budget: texts first come down to a floor, then gaps and checks are left out, and only then
//! do texts go below the floor.

use serde_json::{Value, json};

use super::MAX_FIELD_CHARS;
use crate::llm::grammar::{CHARS_PER_TOKEN, longest_admitted};

/// Texts this long are kept before gaps beyond two are: a plan with room for them keeps them.
const TEXT_COMFORTABLE: usize = 120;
/// The shortest step or reason texts come down to before the plan admits fewer items.
const TEXT_FLOOR: usize = 40;
/// The shortest they come down to when nothing else is left.
const TEXT_MIN: usize = 12;
/// Argument strings admit at least this many characters (a Kubernetes name or label value is up
/// to 63), and twice the text bound above that, up to the tool's own bound.
const ARGUMENT_FLOOR: usize = 64;
/// A query argument (`query`, `expr`, `sql`, …) admits at least this many characters: a PromQL
/// ratio with its label selectors takes 100 to 160 (measured with Qwen2.5-Coder-1.5B under a
/// 512-token plan: `kubelet_volume_stats_used_bytes{persistentvolumeclaim="…"} /
/// kubelet_volume_stats_capacity_bytes{…}` was cut at the 88 characters other arguments get,
/// and the check asked for something else).
const QUERY_FLOOR: usize = 200;
/// Argument names that hold a query language expression.
const QUERY_ARGUMENTS: &[&str] = &["query", "expr", "expression", "promql", "logql", "metricsql", "sql", "filter"];
/// Characters of text per argument list item admitted.
const CHARS_PER_ARGUMENT_ITEM: usize = 40;
/// Gaps a grammar admits at most: an investigation lacking more capabilities than this has
/// said enough, and each admitted gap is room a weak model fills.
const MOST_GAPS: usize = 4;

/// `schema` (from [`super::plan_schema`]) bounded so that its longest plan fits `max_tokens`
/// (when even the fewest items and shortest texts do not, those).
pub fn plan_grammar(schema: &Value, max_tokens: u32) -> Value {
    let chars = usize::try_from(max_tokens).unwrap_or(usize::MAX / 4).saturating_mul(CHARS_PER_TOKEN);
    let lists = &schema["properties"];
    let bound = |list: &str, key: &str| lists[list][key].as_u64().map_or(0, |n| n as usize);
    let (min_checks, checks, gaps) =
        (bound("checks", "minItems"), bound("checks", "maxItems"), bound("gaps", "maxItems").min(MOST_GAPS));
    // Comfortable texts with every check and at least two gaps; else texts at the floor with
    // gaps down to one, checks down to two, then the last gap, then checks down to the least.
    let fitted = fitting(schema, (checks, gaps), (checks, gaps.min(2)), TEXT_COMFORTABLE, chars)
        .or_else(|| fitting(schema, (checks, gaps), (min_checks.max(1).min(checks), 0), TEXT_FLOOR, chars));
    match fitted {
        Some((checks, gaps, text)) => bounded(schema, checks, gaps, text),
        None => {
            let (checks, gaps) = (min_checks.max(1).min(checks), 0);
            let text = widest_text(schema, checks, gaps, TEXT_MIN, chars).unwrap_or(TEXT_MIN);
            bounded(schema, checks, gaps, text)
        }
    }
}

/// The most checks and gaps, from `most` down to `least`, that fit `chars` with texts of at
/// least `floor` characters, and the widest text then.
fn fitting(
    schema: &Value,
    (mut checks, mut gaps): (usize, usize),
    (least_checks, least_gaps): (usize, usize),
    floor: usize,
    chars: usize,
) -> Option<(usize, usize, usize)> {
    loop {
        if let Some(text) = widest_text(schema, checks, gaps, floor, chars) {
            return Some((checks, gaps, text));
        }
        if gaps > least_gaps.max(1) {
            gaps -= 1;
        } else if checks > least_checks.max(2) {
            checks -= 1;
        } else if gaps > least_gaps {
            gaps -= 1;
        } else if checks > least_checks {
            checks -= 1;
        } else {
            return None;
        }
    }
}

/// The longest text bound from `floor` up to [`MAX_FIELD_CHARS`] with which the plan fits `chars`.
fn widest_text(schema: &Value, checks: usize, gaps: usize, floor: usize, chars: usize) -> Option<usize> {
    let fits = |text: usize| longest_admitted(&bounded(schema, checks, gaps, text)) <= chars;
    if !fits(floor) {
        return None;
    }
    let (mut fitting, mut over) = (floor, MAX_FIELD_CHARS + 1);
    while over - fitting > 1 {
        let middle = fitting + (over - fitting) / 2;
        if fits(middle) { fitting = middle } else { over = middle }
    }
    Some(fitting)
}

/// `schema` with at most `checks` checks and `gaps` gaps, texts of at most `text` characters and
/// argument strings and lists bounded in proportion. Only ever tighter than `schema`.
fn bounded(schema: &Value, checks: usize, gaps: usize, text: usize) -> Value {
    let mut out = schema.clone();
    let lists = &mut out["properties"];
    tighten(&mut lists["checks"], "maxItems", checks);
    tighten(&mut lists["gaps"], "maxItems", gaps);
    let check_items = &mut lists["checks"]["items"];
    let branches = match check_items.get_mut("anyOf").and_then(Value::as_array_mut) {
        Some(branches) => branches.iter_mut().collect::<Vec<_>>(),
        None => vec![check_items],
    };
    for check in branches {
        let properties = &mut check["properties"];
        tighten(&mut properties["step"], "maxLength", text);
        tighten(&mut properties["reason"], "maxLength", text);
        arguments_bounded(&mut properties["arguments"], (2 * text).max(ARGUMENT_FLOOR), text);
    }
    let gap = &mut lists["gaps"]["items"]["properties"];
    for field in ["step", "capability", "reason"] {
        tighten(&mut gap[field], "maxLength", text);
    }
    out
}

/// Lowers `schema[key]` to `bound` (sets it when absent).
fn tighten(schema: &mut Value, key: &str, bound: usize) {
    if let Some(map) = schema.as_object_mut() {
        let own = map.get(key).and_then(Value::as_u64).map_or(usize::MAX, |n| n as usize);
        map.insert(key.into(), json!(own.min(bound)));
    }
}

/// Bounds every string of an argument schema to `chars` and every list to the items `text`
/// characters pay for (at least one).
fn arguments_bounded(schema: &mut Value, chars: usize, text: usize) {
    let Some(map) = schema.as_object_mut() else { return };
    let has = |kind: &str, map: &serde_json::Map<String, Value>| match map.get("type") {
        Some(Value::String(one)) => one == kind,
        Some(Value::Array(kinds)) => kinds.iter().any(|k| k == kind),
        _ => false,
    };
    let open_string = has("string", map) && !map.contains_key("enum") && !map.contains_key("const");
    if open_string {
        tighten(schema, "maxLength", chars);
    }
    let Some(map) = schema.as_object_mut() else { return };
    if has("array", map) {
        tighten(schema, "maxItems", (text / CHARS_PER_ARGUMENT_ITEM).max(1));
    }
    let Some(map) = schema.as_object_mut() else { return };
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            "properties" => value.as_object_mut().into_iter().flatten().for_each(|(name, v)| {
                let query = QUERY_ARGUMENTS.contains(&name.to_lowercase().as_str());
                arguments_bounded(v, if query { chars.max(QUERY_FLOOR) } else { chars }, text)
            }),
            "items" => arguments_bounded(value, chars, text),
            "anyOf" | "oneOf" | "allOf" => {
                value.as_array_mut().into_iter().flatten().for_each(|v| arguments_bounded(v, chars, text))
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PlanRoom, plan_schema};
    use super::*;

    /// The tools of the starter suite's cases: two Kubernetes reads and a metrics query.
    fn tools() -> Vec<(String, Value)> {
        let object = |properties: Value| json!({"type": "object", "properties": properties});
        vec![
            (
                "kubernetes.pod_status".into(),
                object(json!({"namespace": {"type": "string"}, "pod": {"type": "string"}})),
            ),
            ("kubernetes.events".into(), object(json!({"namespace": {"type": "string"}, "name": {"type": "string"}}))),
            (
                "victoriametrics.query".into(),
                object(json!({"query": {"type": "string"}, "lookback": {"type": "string", "enum": ["5m", "1h"]},
                              "labels": {"type": "array", "items": {"type": "string"}}})),
            ),
        ]
    }

    fn schema(max_tokens: u32) -> Value {
        plan_schema("en", &tools(), PlanRoom::fitting(3, max_tokens, true))
    }

    #[test]
    fn the_longest_plan_fits_the_budget() {
        for max_tokens in [256, 512, 1024, 2048] {
            let grammar = plan_grammar(&schema(max_tokens), max_tokens);
            let chars = longest_admitted(&grammar);
            assert!(chars <= max_tokens as usize * CHARS_PER_TOKEN, "{max_tokens} tokens: {chars} characters");
            assert_eq!(grammar["properties"]["checks"]["minItems"], json!(1), "{max_tokens} tokens");
        }
        assert!(longest_admitted(&schema(512)) > 4_000, "the plan schema itself admits far more");
    }

    #[test]
    fn texts_keep_their_floor_and_more_budget_gives_more_room() {
        let at = |max_tokens: u32| {
            let grammar = plan_grammar(&schema(max_tokens), max_tokens);
            let checks = &grammar["properties"]["checks"];
            let step = checks["items"]["anyOf"][0]["properties"]["step"]["maxLength"].as_u64().unwrap();
            (checks["maxItems"].as_u64().unwrap(), grammar["properties"]["gaps"]["maxItems"].as_u64().unwrap(), step)
        };
        let (small, large) = (at(512), at(2048));
        assert!(small.2 >= TEXT_FLOOR as u64, "{small:?}");
        assert!(small.0 >= 2, "two checks before texts go below the floor: {small:?}");
        assert!(large.0 == 3 && large.1 >= small.1 && large.2 > small.2, "{small:?} {large:?}");
        let query = &plan_grammar(&schema(512), 512)["properties"]["checks"]["items"]["anyOf"][2]["properties"]["arguments"]
            ["properties"];
        assert!(query["query"]["maxLength"].as_u64().unwrap() >= QUERY_FLOOR as u64, "{query}");
        let events = &plan_grammar(&schema(512), 512)["properties"]["checks"]["items"]["anyOf"][1]["properties"]["arguments"]
            ["properties"];
        let name = events["name"]["maxLength"].as_u64().unwrap();
        assert!((ARGUMENT_FLOOR as u64..QUERY_FLOOR as u64).contains(&name), "{name}: only queries get the room");
        assert_eq!(query["lookback"].get("maxLength"), None, "an enum is left as it is");
        assert!(query["labels"]["maxItems"].as_u64().unwrap() >= 1);
    }

    #[test]
    fn a_plan_the_grammar_admits_meets_the_plan_schema() {
        let full = schema(512);
        let grammar = plan_grammar(&full, 512);
        let validator = jsonschema::validator_for(&full).unwrap();
        let text = |chars: u64| "s".repeat(chars as usize);
        let branch = &grammar["properties"]["checks"]["items"]["anyOf"][0]["properties"];
        let gap = &grammar["properties"]["gaps"]["items"]["properties"];
        let argument = text(branch["arguments"]["properties"]["pod"]["maxLength"].as_u64().unwrap());
        let check = json!({"step": text(branch["step"]["maxLength"].as_u64().unwrap()), "tool": "kubernetes.pod_status",
            "arguments": {"namespace": "shop", "pod": argument}, "reason": text(branch["reason"]["maxLength"].as_u64().unwrap())});
        let longest_gap = json!({"step": text(gap["step"]["maxLength"].as_u64().unwrap()), "capability": "kubernetes.pods.logs",
            "reason": text(gap["reason"]["maxLength"].as_u64().unwrap())});
        let checks = grammar["properties"]["checks"]["maxItems"].as_u64().unwrap() as usize;
        let gaps = grammar["properties"]["gaps"]["maxItems"].as_u64().unwrap() as usize;
        let plan = json!({"checks": vec![check; checks], "gaps": vec![longest_gap; gaps]});
        assert!(jsonschema::validator_for(&grammar).unwrap().is_valid(&plan));
        assert!(
            validator.is_valid(&plan),
            "{:?}",
            validator.iter_errors(&plan).map(|e| e.to_string()).collect::<Vec<_>>()
        );
    }
}
