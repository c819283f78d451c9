//! The one validation pipeline every resource source runs (directory manifests,
//! `akritas validate`, Kubernetes objects): identity, structural schema, CEL rules,
//! typed decoding and the semantic checks a schema cannot express.

use std::fmt;

use kube::core::cel::Validator;
use serde_json::Value;

pub(crate) use super::field_error::FieldError;
use super::{API_VERSION, Kind, Resource, schema_check, semantic};

/// Longest Akritas resource name (a DNS-1123 label: names become tool namespaces,
/// skill names and URL path segments).
pub const MAX_NAME_LEN: usize = 63;

/// What could be read of an object's identity, even when it is invalid.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Identity {
    /// `kind`, when present.
    pub kind: Option<String>,
    /// `metadata.namespace`, defaulted by the caller.
    pub namespace: Option<String>,
    /// `metadata.name`, when present.
    pub name: Option<String>,
}

impl Identity {
    /// Reads the identity fields of a manifest without judging them.
    pub fn of(value: &Value) -> Self {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        Self {
            kind: text(value.get("kind")),
            namespace: text(value.pointer("/metadata/namespace")),
            name: text(value.pointer("/metadata/name")),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.as_deref().unwrap_or("<no kind>"), self.name.as_deref().unwrap_or("<no name>"))
    }
}

/// Whether `name` is a DNS-1123 label.
pub fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Validates a manifest as an operator wrote it and returns the typed resource.
///
/// `status` must be absent: it belongs to the host. Every problem found is returned,
/// not only the first.
pub fn parse_manifest(value: Value) -> Result<Resource, Vec<FieldError>> {
    let mut errors = Vec::new();
    let Some(object) = value.as_object() else {
        return Err(vec![FieldError::new("", "a manifest must be a YAML or JSON object")]);
    };
    match object.get("apiVersion").and_then(Value::as_str) {
        Some(API_VERSION) => {}
        Some(other) => {
            errors.push(FieldError::new("apiVersion", format!("{other:?} is not supported; use {API_VERSION}")))
        }
        None => errors.push(FieldError::new("apiVersion", format!("required field is missing; use {API_VERSION}"))),
    }
    let kind = match object.get("kind").and_then(Value::as_str) {
        Some(kind) => match Kind::parse(kind) {
            Some(kind) => Some(kind),
            None => {
                let names: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                errors.push(FieldError::new(
                    "kind",
                    format!("unknown kind {kind:?}; expected one of: {}", names.join(", ")),
                ));
                None
            }
        },
        None => {
            errors.push(FieldError::new("kind", "required field is missing"));
            None
        }
    };
    check_metadata(object.get("metadata"), &mut errors);
    if object.contains_key("status") {
        errors.push(FieldError::new("status", "is written by Akritas; remove it from the manifest"));
    }
    let Some(kind) = kind else { return Err(errors) };
    if !errors.is_empty() {
        return Err(errors);
    }
    validate_object(kind, value)
}

/// Validates an object of a known kind (schema, CEL rules, typed decoding, semantic
/// checks). Identity checks are the caller's.
pub fn validate_object(kind: Kind, value: Value) -> Result<Resource, Vec<FieldError>> {
    let mut errors = Vec::new();
    let schema = kind.schema();
    schema_check::check(schema, &value, "", &mut errors);
    if !errors.is_empty() {
        for error in errors.iter_mut().filter(|e| e.reason == schema_check::MISSING) {
            if let Some(what) = what_to_write(kind, &error.field) {
                error.reason = format!("{}; {what}", schema_check::MISSING);
            }
        }
        return Err(errors);
    }
    CEL.with(|validator| {
        if let Err(failures) = validator.validate(schema, &value, None) {
            for failure in failures.iter() {
                errors.push(FieldError::new(&failure.field_path, failure.message.clone()));
            }
        }
    });
    let resource = match Resource::from_value(kind, value) {
        Ok(resource) => resource,
        Err(error) => {
            errors.push(FieldError::new(&error.path().to_string(), error.inner().to_string()));
            return Err(errors);
        }
    };
    semantic::check(&resource, &mut errors);
    if errors.is_empty() { Ok(resource) } else { Err(errors) }
}

/// For a missing field whose name alone does not say how to fill it in: the choices
/// and a minimal example.
fn what_to_write(kind: Kind, field: &str) -> Option<&'static str> {
    match (kind, field) {
        (Kind::AlertSource, "spec.auth") => Some(super::alert_source::AUTH_CHOICES),
        _ => None,
    }
}

fn check_metadata(metadata: Option<&Value>, errors: &mut Vec<FieldError>) {
    let Some(metadata) = metadata.and_then(Value::as_object) else {
        errors.push(FieldError::new("metadata.name", "required field is missing"));
        return;
    };
    match metadata.get("name").and_then(Value::as_str) {
        None => errors.push(FieldError::new("metadata.name", "required field is missing")),
        Some(name) if !is_dns_label(name) => errors.push(FieldError::new(
            "metadata.name",
            format!("{name:?} is not a valid name: use at most {MAX_NAME_LEN} lower-case letters, digits and '-', starting and ending with a letter or digit"),
        )),
        Some(_) => {}
    }
    if let Some(namespace) = metadata.get("namespace") {
        match namespace.as_str() {
            Some(ns) if is_dns_label(ns) => {}
            _ => {
                errors.push(FieldError::new("metadata.namespace", format!("{namespace} is not a valid namespace name")))
            }
        }
    }
    if metadata.contains_key("generateName") {
        errors.push(FieldError::new("metadata.generateName", "is not supported in manifests; set metadata.name"));
    }
}

thread_local! {
    /// The CEL evaluator with the Kubernetes function libraries (`Send`, not `Sync`).
    static CEL: Validator = Validator::new();
}
