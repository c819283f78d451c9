//! One problem with one field of a manifest: what every validation step reports.

use std::fmt;

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    /// Dotted path, for example `spec.transport.stdio.command`.
    pub field: String,
    /// What is wrong and, where it is not obvious, what to do.
    pub reason: String,
}

impl FieldError {
    /// A new error.
    pub fn new(field: &str, reason: impl Into<String>) -> Self {
        Self { field: field.to_string(), reason: reason.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() { write!(f, "{}", self.reason) } else { write!(f, "{}: {}", self.field, self.reason) }
    }
}
