//! The committed `crds/` match the Rust types, and every CRD is structural with
//! CEL rules that compile and stay within the API server's cost budget.

use std::path::Path;

use akritas::resources::{Kind, crd_file_name};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::cel::{ScopeContext, analyze_rule, compile_schema};
use serde_json::Value;

fn crds_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/crds"))
}

#[test]
fn committed_crds_match_the_rust_types() {
    let problems = akritas::cli::crds::check_dir(crds_dir()).unwrap();
    assert!(problems.is_empty(), "crds/ drifted:\n{}", problems.join("\n"));
}

#[test]
fn drift_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    akritas::cli::crds::write_dir(dir.path()).unwrap();
    assert!(akritas::cli::crds::check_dir(dir.path()).unwrap().is_empty());
    let skill = dir.path().join(crd_file_name(Kind::Skill));
    let text = std::fs::read_to_string(&skill).unwrap().replace("maxLength: 512", "maxLength: 513");
    std::fs::write(&skill, text).unwrap();
    std::fs::write(dir.path().join("stale.akritas.io.yaml"), "x: 1\n").unwrap();
    let problems = akritas::cli::crds::check_dir(dir.path()).unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("differs from the Skill type"), "{problems:?}");
    assert!(problems[1].contains("stale.akritas.io.yaml"), "{problems:?}");
}

fn parse_committed(kind: Kind) -> CustomResourceDefinition {
    let path = crds_dir().join(crd_file_name(kind));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_crd_parses_back_and_is_structural() {
    for kind in Kind::ALL {
        let crd = parse_committed(*kind);
        assert_eq!(crd.spec.group, "akritas.io");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.kind, kind.as_str());
        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        assert!(
            version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(),
            "{}: no status subresource",
            kind.as_str()
        );
        let columns = version.additional_printer_columns.as_deref().unwrap_or_default();
        assert!(columns.iter().any(|c| c.name == "Age"), "{}: no Age column", kind.as_str());
        let schema =
            serde_json::to_value(version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap()).unwrap();
        let mut problems = Vec::new();
        check_structural(&schema, kind.as_str(), true, &mut problems);
        assert!(problems.is_empty(), "{} is not structural:\n{}", kind.as_str(), problems.join("\n"));
    }
}

/// The rules of a structural schema (Kubernetes `apiextensions` validation):
/// every node has a type (or an explicit int-or-string / preserve-unknown-fields),
/// no references or unsupported keywords, `properties` and `additionalProperties`
/// never together, and `metadata` at the root carries at most name/generateName.
fn check_structural(schema: &Value, path: &str, root: bool, problems: &mut Vec<String>) {
    let Some(node) = schema.as_object() else {
        problems.push(format!("{path}: schema node is not an object"));
        return;
    };
    const ALLOWED: &[&str] = &[
        "type",
        "format",
        "title",
        "description",
        "default",
        "nullable",
        "enum",
        "maximum",
        "minimum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "maxProperties",
        "minProperties",
        "required",
        "items",
        "properties",
        "additionalProperties",
        "example",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
        "x-kubernetes-embedded-resource",
    ];
    for key in node.keys() {
        if !ALLOWED.contains(&key.as_str()) {
            problems.push(format!("{path}: unsupported keyword {key:?}"));
        }
    }
    let typed = node.get("type").and_then(Value::as_str);
    let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    match typed {
        Some("object" | "array" | "string" | "integer" | "number" | "boolean") => {}
        Some(other) => problems.push(format!("{path}: unknown type {other:?}")),
        None if int_or_string || preserve => {}
        None => problems.push(format!("{path}: node has no type")),
    }
    if node.contains_key("properties") && node.contains_key("additionalProperties") {
        problems.push(format!("{path}: properties and additionalProperties together"));
    }
    if node.get("additionalProperties") == Some(&Value::Bool(false)) {
        problems.push(format!("{path}: additionalProperties: false is not allowed"));
    }
    if let Some(format) = node.get("format").and_then(Value::as_str) {
        const FORMATS: &[&str] = &[
            "int32",
            "int64",
            "float",
            "double",
            "byte",
            "date",
            "date-time",
            "password",
            "uint32",
            "uint64",
            "uint8",
            "uint16",
        ];
        if !FORMATS.contains(&format) {
            problems.push(format!("{path}: unknown format {format:?}"));
        }
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        if root {
            for key in properties.keys() {
                if !matches!(key.as_str(), "spec" | "status" | "apiVersion" | "kind" | "metadata") {
                    problems.push(format!("{path}: unexpected root property {key:?}"));
                }
            }
        }
        for (key, child) in properties {
            check_structural(child, &format!("{path}.{key}"), false, problems);
        }
    }
    if let Some(items) = node.get("items") {
        check_structural(items, &format!("{path}[]"), false, problems);
    }
    if let Some(extra) = node.get("additionalProperties").filter(|v| v.is_object()) {
        check_structural(extra, &format!("{path}{{}}"), false, problems);
    }
}

#[test]
fn cel_rules_compile_and_fit_the_cost_budget() {
    let mut rules = 0;
    for kind in Kind::ALL {
        let schema = kind.schema();
        let compiled = compile_schema(schema);
        let errors: Vec<String> = compiled.compilation_errors().iter().map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: CEL rules do not compile: {errors:?}", kind.as_str());
        visit_rules(schema, &mut |node, rule| {
            rules += 1;
            let warnings = analyze_rule(rule, &compile_schema(node), ScopeContext::CrdValidation);
            assert!(warnings.is_empty(), "{}: rule {rule:?}: {warnings:?}", kind.as_str());
        });
    }
    assert!(rules >= 10, "expected the mutual-exclusion rules, found {rules}");
}

fn visit_rules(node: &Value, f: &mut dyn FnMut(&Value, &str)) {
    if let Some(rules) = node.get("x-kubernetes-validations").and_then(Value::as_array) {
        for rule in rules.iter().filter_map(|r| r.get("rule").and_then(Value::as_str)) {
            f(node, rule);
        }
    }
    for key in ["properties"] {
        if let Some(children) = node.get(key).and_then(Value::as_object) {
            for child in children.values() {
                visit_rules(child, f);
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = node.get(key).filter(|v| v.is_object()) {
            visit_rules(child, f);
        }
    }
}

#[test]
fn chart_crds_match_the_rust_types() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/charts/akritas/crds"));
    let problems = akritas::cli::crds::check_dir(dir).unwrap();
    assert!(problems.is_empty(), "charts/akritas/crds drifted:\n{}", problems.join("\n"));
}
