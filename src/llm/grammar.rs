//! A JSON schema as a grammar: llama-server and Ollama compile the schema of a structured step
//! into a grammar, and a weak model under a grammar does not stop writing: it fills strings to
//! their `maxLength` and lists to their `maxItems`. A server's limits on that bound it here, and
//! [`longest_admitted`] measures how much the grammar lets a model write, so a step can size its
//! schema to its completion budget.

use serde_json::{Value, json};

/// The largest repetition bound llama.cpp's grammars take (`MAX_REPETITION_THRESHOLD`): a
/// schema whose `maxLength` or `maxItems` is larger fails to parse on llama-server, and crashes
/// Ollama v0.17.4's runner (HTTP 500 "model runner has unexpectedly stopped").
const GRAMMAR_MAX_REPETITIONS: u64 = 2000;

/// `schema` as sent to a server that may turn it into a grammar: each `maxLength` and `maxItems`
/// above [`GRAMMAR_MAX_REPETITIONS`] comes down to it. Only tighter, so whatever a server lets
/// the model write still meets the step's own schema, which answers are checked against.
pub fn grammar_bounded(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let bounded = match (key.as_str(), value.as_u64()) {
                        ("maxLength" | "maxItems", Some(n)) if n > GRAMMAR_MAX_REPETITIONS => {
                            json!(GRAMMAR_MAX_REPETITIONS)
                        }
                        // Values, not schemas.
                        ("enum" | "const" | "default" | "examples", _) => value.clone(),
                        _ => grammar_bounded(value),
                    };
                    (key.clone(), bounded)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(grammar_bounded).collect()),
        other => other.clone(),
    }
}

/// Characters of JSON counted for one completion token when a schema is sized to a budget:
/// English text and JSON take 3 to 4 in the tokenizers of small models, digits and punctuation
/// fewer.
pub const CHARS_PER_TOKEN: usize = 2;

/// The length [`longest_admitted`] gives what a schema leaves unbounded.
pub const UNBOUNDED: usize = usize::MAX / 4;

/// The length of the longest compact JSON text an instance of `schema` can take, from its
/// bounds: a string by its `maxLength`, a list by its `maxItems`, an object with every property
/// present; whatever the schema leaves open is [`UNBOUNDED`]. The whitespace a grammar lets a
/// model write between tokens is not counted.
pub fn longest_admitted(schema: &Value) -> usize {
    let Value::Object(map) = schema else {
        // `true` admits anything; `false` admits nothing.
        return if schema == &Value::Bool(false) { 0 } else { UNBOUNDED };
    };
    if let Some(options) = map.get("enum").and_then(Value::as_array) {
        return options.iter().map(|option| option.to_string().len()).max().unwrap_or(0);
    }
    if let Some(value) = map.get("const") {
        return value.to_string().len();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = map.get(key).and_then(Value::as_array) {
            return options.iter().map(longest_admitted).max().unwrap_or(0);
        }
    }
    let kinds: Vec<&str> = match map.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ if map.contains_key("properties") => vec!["object"],
        _ => return UNBOUNDED,
    };
    kinds.into_iter().map(|kind| longest_of_kind(map, kind)).max().unwrap_or(UNBOUNDED)
}

fn longest_of_kind(map: &serde_json::Map<String, Value>, kind: &str) -> usize {
    let bound = |key: &str| map.get(key).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
    match kind {
        "string" => bound("maxLength").map_or(UNBOUNDED, |chars| chars.saturating_add(2)),
        "integer" => 20,
        "number" => 24,
        "boolean" => 5,
        "null" => 4,
        "array" => match (bound("maxItems"), map.get("items")) {
            (Some(0), _) => 2,
            (Some(items), Some(item)) => {
                items.saturating_mul(longest_admitted(item).saturating_add(1)).saturating_add(2).min(UNBOUNDED)
            }
            _ => UNBOUNDED,
        },
        "object" => {
            if map.get("additionalProperties") != Some(&Value::Bool(false)) {
                return UNBOUNDED;
            }
            let properties = map.get("properties").and_then(Value::as_object);
            properties
                .into_iter()
                .flatten()
                .map(|(key, value)| (key.len() + 4).saturating_add(longest_admitted(value)))
                .fold(2usize, usize::saturating_add)
                .min(UNBOUNDED)
        }
        _ => UNBOUNDED,
    }
}

/// Fields [`outline`] lists at most.
const OUTLINE_FIELDS: usize = 24;
/// Nesting [`outline`] descends to at most.
const OUTLINE_DEPTH: usize = 4;

/// What each described field of `schema` means, one line per field (`checks[].step: What this
/// check establishes.`), shallow fields first: a model answering under a grammar is shown
/// neither the schema nor its descriptions, only the keys the grammar lets it write. Branches
/// (`anyOf`, `oneOf`) are merged by path; only the first sentence of a description is kept, at
/// most 160 characters of it (a tool's argument descriptions come from its MCP server).
pub fn outline(schema: &Value) -> String {
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut level = vec![(String::new(), schema)];
    for _ in 0..OUTLINE_DEPTH {
        let mut next = Vec::new();
        for (path, node) in level {
            for node in branches(node) {
                let items = node.get("items").map(|item| (format!("{path}[]"), item));
                let properties = node.get("properties").and_then(Value::as_object).into_iter().flatten();
                let children = properties.map(|(key, property)| {
                    (if path.is_empty() { key.clone() } else { format!("{path}.{key}") }, property)
                });
                for (field, child) in items.into_iter().chain(children) {
                    let described = branches(child).into_iter().find_map(|c| c.get("description")?.as_str());
                    if let Some(text) = described.filter(|_| !fields.iter().any(|(known, _)| *known == field)) {
                        fields.push((field.clone(), first_sentence(text)));
                    }
                    next.push((field, child));
                }
            }
        }
        level = next;
    }
    let lines: Vec<String> =
        fields.into_iter().take(OUTLINE_FIELDS).map(|(path, text)| format!("{path}: {text}")).collect();
    lines.join("\n")
}

/// `schema` and its `anyOf`/`oneOf` options.
fn branches(schema: &Value) -> Vec<&Value> {
    let options = ["anyOf", "oneOf"].iter().filter_map(|key| schema.get(*key)?.as_array()).flatten();
    std::iter::once(schema).chain(options).collect()
}

/// Characters of one field's description an outline keeps.
const OUTLINE_DESCRIPTION_CHARS: usize = 160;

fn first_sentence(text: &str) -> String {
    let end = text.find(". ").map_or(text.len(), |at| at + 1);
    crate::text::truncate_chars(text[..end].trim(), OUTLINE_DESCRIPTION_CHARS, crate::text::ELLIPSIS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_instance_is_measured_from_the_bounds() {
        let schema = json!({"type": "object", "additionalProperties": false, "properties": {
            "a": {"type": "string", "maxLength": 5},
            "b": {"type": "array", "maxItems": 2, "items": {"enum": ["x", "yy"]}},
            "c": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
        }});
        let longest = r#"{"a":"12345","b":["yy","yy"],"c":-1234567890123456789}"#;
        assert_eq!(
            longest_admitted(&schema),
            longest.len() + 2,
            "a comma counted after the last item of each list and object"
        );
        assert_eq!(longest_admitted(&json!({"type": "string"})), UNBOUNDED);
        assert_eq!(longest_admitted(&json!({"type": "object"})), UNBOUNDED, "an open object");
        assert_eq!(longest_admitted(&json!({"type": "array", "items": {"type": "integer"}})), UNBOUNDED);
        assert_eq!(longest_admitted(&json!({"type": ["string", "null"], "maxLength": 1})), 4);
    }

    #[test]
    fn an_outline_says_what_each_described_field_means_shallow_first() {
        let check = |tool: &str| {
            json!({"type": "object", "properties": {
            "tool": {"enum": [tool], "description": "Exact tool name."},
            "step": {"type": "string", "description": "What this check establishes. Write it in English."},
            "arguments": {"type": "object", "properties": {"pod": {"type": "string"}}}}})
        };
        let schema = json!({"type": "object", "properties": {
            "checks": {"type": "array", "description": "Checks to run.", "items": {"anyOf": [check("a"), check("b")]}},
            "gaps": {"type": "array", "items": {"type": "string"}}}});
        assert_eq!(
            outline(&schema),
            "checks: Checks to run.\nchecks[].tool: Exact tool name.\nchecks[].step: What this check establishes.",
            "undescribed fields are left out, and a field of several branches is listed once"
        );
        let long = json!({"type": "object", "properties": {"q": {"type": "string", "description": "x".repeat(5_000)}}});
        assert!(outline(&long).chars().count() <= "q: ".len() + OUTLINE_DESCRIPTION_CHARS, "a description is bounded");
    }
}
