//! How severe an alert is, normalised from whatever the provider sends: what alerts
//! correlate on, receivers filter on and notifications say.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An alert's severity, normalised ([`Severity::normalize`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    #[default]
    Unknown,
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Unknown => "unknown",
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// A provider's severity word, normalised: critical/crit/emergency/fatal/down/error → critical;
    /// warning/warn/degraded/minor → warning; info/informational/notice/up/ok → info; else unknown.
    pub fn normalize(raw: &str) -> Severity {
        match raw.trim().to_ascii_lowercase().as_str() {
            "critical" | "crit" | "emergency" | "fatal" | "down" | "error" => Severity::Critical,
            "warning" | "warn" | "degraded" | "minor" => Severity::Warning,
            "info" | "informational" | "notice" | "up" | "ok" => Severity::Info,
            _ => Severity::Unknown,
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
