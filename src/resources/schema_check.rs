//! Checks a JSON value against a CRD's structural `openAPIV3Schema`, the way the
//! API server does before it runs CEL rules: types, required and unknown fields,
//! enums, patterns, lengths, ranges, item counts and set uniqueness.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

use super::field_error::FieldError;

/// The reason given for a required field that is absent.
pub const MISSING: &str = "required field is missing";

/// Appends one error per violation found under `path`.
pub fn check(schema: &Value, value: &Value, path: &str, out: &mut Vec<FieldError>) {
    let Some(schema) = schema.as_object() else { return };
    if value.is_null() {
        if !schema.get("nullable").and_then(Value::as_bool).unwrap_or(false) {
            out.push(FieldError::new(path, "must not be null"));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            out.push(FieldError::new(path, "must be an integer or a string"));
        }
        return;
    }
    let type_ = schema.get("type").and_then(Value::as_str);
    match type_ {
        Some("object") => check_object(schema, value, path, out),
        Some("array") => check_array(schema, value, path, out),
        Some("string") => check_string(schema, value, path, out),
        Some("integer") => check_number(schema, value, path, true, out),
        Some("number") => check_number(schema, value, path, false, out),
        Some("boolean") if !value.is_boolean() => {
            out.push(FieldError::new(path, format!("must be a boolean (true or false), got {}", describe(value))));
        }
        _ => {}
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let names: Vec<String> =
            allowed.iter().map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).collect();
        out.push(FieldError::new(
            path,
            format!("unsupported value {}; expected one of: {}", describe(value), names.join(", ")),
        ));
    }
}

fn check_object(schema: &Map<String, Value>, value: &Value, path: &str, out: &mut Vec<FieldError>) {
    let Some(object) = value.as_object() else {
        out.push(FieldError::new(path, format!("must be an object, got {}", describe(value))));
        return;
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|v| v.is_object());
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !object.contains_key(name) {
                out.push(FieldError::new(&join(path, name), MISSING));
            }
        }
    }
    for (key, child) in object {
        let child_path = join(path, key);
        match (properties.and_then(|p| p.get(key)), additional) {
            (Some(child_schema), _) => check(child_schema, child, &child_path, out),
            (None, Some(extra)) => check(extra, child, &child_path, out),
            (None, None) if preserve || properties.is_none() => {}
            // The API server handles the object envelope itself; CRD root schemas omit it.
            (None, None) if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") => {}
            (None, None) => {
                let mut known: Vec<&str> =
                    properties.map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default();
                known.sort_unstable();
                out.push(FieldError::new(
                    &child_path,
                    format!("unknown field; known fields here: {}", known.join(", ")),
                ));
            }
        }
    }
    bound(schema, "minProperties", "maxProperties", object.len(), "fields", path, out);
}

fn check_array(schema: &Map<String, Value>, value: &Value, path: &str, out: &mut Vec<FieldError>) {
    let Some(items) = value.as_array() else {
        out.push(FieldError::new(path, format!("must be a list, got {}", describe(value))));
        return;
    };
    bound(schema, "minItems", "maxItems", items.len(), "items", path, out);
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(item_schema, item, &format!("{path}[{i}]"), out);
        }
    }
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set") {
        let mut seen = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            if !seen.insert(item.to_string()) {
                out.push(FieldError::new(&format!("{path}[{i}]"), format!("duplicate value {}", describe(item))));
            }
        }
    }
}

fn check_string(schema: &Map<String, Value>, value: &Value, path: &str, out: &mut Vec<FieldError>) {
    let Some(text) = value.as_str() else {
        out.push(FieldError::new(path, format!("must be a string, got {}", describe(value))));
        return;
    };
    let chars = text.chars().count();
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && (chars as u64) < min
    {
        out.push(FieldError::new(
            path,
            if min == 1 { "must not be empty".to_string() } else { format!("must be at least {min} characters long") },
        ));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars as u64 > max
    {
        out.push(FieldError::new(path, format!("must be at most {max} characters long, got {chars}")));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && !matches_pattern(pattern, text)
    {
        out.push(FieldError::new(path, format!("{} does not match the pattern {pattern}", describe(value))));
    }
}

fn check_number(schema: &Map<String, Value>, value: &Value, path: &str, integer: bool, out: &mut Vec<FieldError>) {
    let Some(number) = value.as_f64() else {
        let what = if integer { "an integer" } else { "a number" };
        out.push(FieldError::new(path, format!("must be {what}, got {}", describe(value))));
        return;
    };
    if integer && !(value.is_i64() || value.is_u64()) {
        out.push(FieldError::new(path, format!("must be an integer, got {value}")));
        return;
    }
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && number < min
    {
        out.push(FieldError::new(path, format!("must be at least {min}, got {value}")));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && number > max
    {
        out.push(FieldError::new(path, format!("must be at most {max}, got {value}")));
    }
}

fn bound(
    schema: &Map<String, Value>,
    min_key: &str,
    max_key: &str,
    len: usize,
    unit: &str,
    path: &str,
    out: &mut Vec<FieldError>,
) {
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64)
        && (len as u64) < min
    {
        out.push(FieldError::new(path, format!("must have at least {min} {unit}, got {len}")));
    }
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64)
        && len as u64 > max
    {
        out.push(FieldError::new(path, format!("must have at most {max} {unit}, got {len}")));
    }
}

fn flag(schema: &Map<String, Value>, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// Short rendering of a value for messages (bounded).
fn describe(value: &Value) -> String {
    let text = match value {
        Value::Object(_) => return "an object".to_string(),
        Value::Array(_) => return "a list".to_string(),
        other => other.to_string(),
    };
    crate::text::truncate_chars(&text, 81, "…")
}

fn matches_pattern(pattern: &str, text: &str) -> bool {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = match cache.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let regex = cache.entry(pattern.to_string()).or_insert_with(|| Regex::new(pattern).ok());
    // A pattern the regex engine cannot compile is a bug in our schema, caught by the CRD tests.
    regex.as_ref().is_none_or(|r| r.is_match(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(schema: Value, value: Value) -> Vec<String> {
        let mut out = Vec::new();
        check(&schema, &value, "spec", &mut out);
        out.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn reports_unknown_missing_and_mistyped_fields_with_paths() {
        let schema = json!({"type": "object", "required": ["a"], "properties": {
            "a": {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^[a-z]+$"},
            "n": {"type": "integer", "minimum": 1, "maximum": 5},
            "l": {"type": "array", "maxItems": 2, "x-kubernetes-list-type": "set", "items": {"type": "string", "enum": ["x", "y"]}}
        }});
        assert_eq!(errors(schema.clone(), json!({"a": "ab"})), Vec::<String>::new());
        let got = errors(schema, json!({"b": 1, "n": 9, "l": ["x", "x", "z"]}));
        assert_eq!(
            got,
            vec![
                "spec.a: required field is missing",
                "spec.b: unknown field; known fields here: a, l, n",
                "spec.n: must be at most 5, got 9",
                "spec.l: must have at most 2 items, got 3",
                "spec.l[2]: unsupported value \"z\"; expected one of: x, y",
                "spec.l[1]: duplicate value \"x\"",
            ]
        );
    }

    #[test]
    fn checks_string_bounds_and_patterns() {
        let schema = json!({"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^[a-z]+$"});
        assert_eq!(
            errors(schema.clone(), json!("")),
            vec!["spec: must not be empty", "spec: \"\" does not match the pattern ^[a-z]+$"]
        );
        assert_eq!(errors(schema.clone(), json!("abcd")), vec!["spec: must be at most 3 characters long, got 4"]);
        assert_eq!(errors(schema, json!(3)), vec!["spec: must be a string, got 3"]);
    }

    #[test]
    fn null_is_accepted_only_when_nullable() {
        assert_eq!(errors(json!({"type": "string", "nullable": true}), Value::Null), Vec::<String>::new());
        assert_eq!(errors(json!({"type": "string"}), Value::Null), vec!["spec: must not be null"]);
    }

    #[test]
    fn integers_reject_fractions() {
        assert_eq!(errors(json!({"type": "integer"}), json!(1.5)), vec!["spec: must be an integer, got 1.5"]);
    }
}
