//! Provider adapters: one module per provider, registered in [`adapter`].
//!
//! Every adapter turns a raw webhook body into one or more normalised [`Event`]s: as many as the body carries
//! (the body limit bounds them; the store records what it cannot keep, never a 4xx for a big group). Source
//! type is the adapter's provider name unless the caller overrides it; source name always comes from
//! configuration.

use jiff::Timestamp;
use serde_json::Value;

use crate::alerts::intake::event::{Event, ValidationError};

pub(crate) mod alertmanager;
pub(crate) mod generic;
pub(crate) mod grafana;
pub(crate) mod pingdom;
pub(crate) mod uptime_kuma;

/// Ingress bounds a body by `max_body_bytes` (1 MiB by default, at most 64 MiB); adapters
/// re-check the largest value that setting allows, so raising it admits bigger groups.
pub const MAX_BODY_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    #[error("invalid payload: {field}: {reason}")]
    InvalidPayload { field: String, reason: String },
    #[error("payload contains no events")]
    NoEvents,
    #[error("unsupported payload version {0:?}")]
    UnsupportedVersion(String),
    #[error("body too large: {size} bytes (maximum {max})")]
    BodyTooLarge { size: usize, max: usize },
}

impl AdapterError {
    pub fn payload(field: impl Into<String>, reason: impl Into<String>) -> AdapterError {
        AdapterError::InvalidPayload { field: field.into(), reason: reason.into() }
    }

    /// Wrap a normalisation error for the event at `index`.
    pub fn event(index: usize, err: ValidationError) -> AdapterError {
        AdapterError::InvalidPayload { field: format!("alerts[{index}].{}", err.field), reason: err.reason }
    }
}

/// Where a delivery came from: source type and name are forced from configuration (never the payload).
#[derive(Debug, Clone, Copy)]
pub struct DecodeContext<'a> {
    pub source_type: &'a str,
    pub source_name: &'a str,
    /// Host receive time; default `observed_at`/`started_at`.
    pub observed_at: Timestamp,
}

/// One decoded delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The events, in payload order.
    pub events: Vec<Event>,
    /// Alerts the provider says it left out of this delivery (Alertmanager's `truncatedAlerts`, set by its
    /// `max_alerts`); 0 for providers that do not say.
    pub truncated_by_provider: u64,
}

pub trait Adapter: Send + Sync {
    /// Provider / source type name (`alertmanager`, `grafana`, `generic`, `uptime-kuma`, `pingdom`).
    fn provider(&self) -> &'static str;

    /// Decode and normalise one webhook body (a batch of alerts).
    fn decode(&self, body: &[u8], ctx: &DecodeContext<'_>) -> Result<Vec<Event>, AdapterError>;

    /// [`Adapter::decode`] with what the provider says it left out.
    fn decode_batch(&self, body: &[u8], ctx: &DecodeContext<'_>) -> Result<Decoded, AdapterError> {
        Ok(Decoded { events: self.decode(body, ctx)?, truncated_by_provider: 0 })
    }
}

static ALERTMANAGER: alertmanager::AlertmanagerAdapter = alertmanager::AlertmanagerAdapter;
static GRAFANA: grafana::GrafanaAdapter = grafana::GrafanaAdapter;
static GENERIC: generic::GenericAdapter = generic::GenericAdapter;
static UPTIME_KUMA: uptime_kuma::UptimeKumaAdapter = uptime_kuma::UptimeKumaAdapter;
static PINGDOM: pingdom::PingdomAdapter = pingdom::PingdomAdapter;

/// All registered adapters.
pub fn adapters() -> [&'static dyn Adapter; 5] {
    [&ALERTMANAGER, &GRAFANA, &GENERIC, &UPTIME_KUMA, &PINGDOM]
}

/// Registry lookup by source type (case-insensitive, surrounding whitespace ignored; `uptime_kuma` accepted).
pub fn adapter(provider: &str) -> Option<&'static dyn Adapter> {
    let wanted = provider.trim().to_ascii_lowercase().replace('_', "-");
    adapters().into_iter().find(|a| a.provider() == wanted)
}

// ---- shared helpers -------------------------------------------------------------------------------------

pub(crate) fn check_body(body: &[u8]) -> Result<(), AdapterError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(AdapterError::BodyTooLarge { size: body.len(), max: MAX_BODY_BYTES });
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(AdapterError::payload("body", "empty"));
    }
    Ok(())
}

pub(crate) fn check_count(count: usize) -> Result<(), AdapterError> {
    if count == 0 { Err(AdapterError::NoEvents) } else { Ok(()) }
}

pub(crate) fn json_error(err: serde_json::Error) -> AdapterError {
    AdapterError::InvalidJson(crate::alerts::intake::event::bound(&err.to_string(), 512))
}

/// RFC 3339 (any offset, optional fraction), normalised to UTC.
pub(crate) fn parse_rfc3339(raw: &str) -> Option<Timestamp> {
    raw.trim().parse::<Timestamp>().ok()
}

/// A zone-less civil date-time such as `2006-01-02 15:04:05` or `2006-01-02T15:04:05`, interpreted as UTC.
pub(crate) fn parse_civil_utc(raw: &str) -> Option<Timestamp> {
    let dt: jiff::civil::DateTime = raw.trim().parse().ok()?;
    dt.to_zoned(jiff::tz::TimeZone::UTC).ok().map(|z| z.timestamp())
}

/// A JSON scalar rendered as text: strings as-is (trimmed), numbers in their original notation.
pub(crate) fn scalar_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(crate) fn is_http_url(s: &str) -> bool {
    crate::alerts::intake::event::is_absolute_http_url(s.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_has_one_adapter_per_provider() {
        for name in ["alertmanager", "grafana", "generic", "uptime-kuma", "pingdom"] {
            assert_eq!(adapter(name).map(|a| a.provider()), Some(name));
        }
        assert_eq!(adapter(" Uptime_Kuma ").map(|a| a.provider()), Some("uptime-kuma"));
        assert!(adapter("pagerduty").is_none());
    }

    #[test]
    fn time_parsing() {
        assert_eq!(
            parse_rfc3339("2026-11-29T23:41:16+01:00").map(|t| t.to_string()).as_deref(),
            Some("2026-11-29T22:41:16Z")
        );
        assert_eq!(
            parse_civil_utc("2024-01-02 03:04:05").map(|t| t.to_string()).as_deref(),
            Some("2024-01-02T03:04:05Z")
        );
        assert_eq!(
            parse_civil_utc("2024-01-02 03:04:05.250").map(|t| t.to_string()).as_deref(),
            Some("2024-01-02T03:04:05.25Z")
        );
        assert!(parse_rfc3339("yesterday").is_none());
    }

    #[test]
    fn body_and_count_limits() {
        assert_eq!(check_body(b"  \n"), Err(AdapterError::payload("body", "empty")));
        assert!(matches!(check_body(&vec![b' '; MAX_BODY_BYTES + 1]), Err(AdapterError::BodyTooLarge { .. })));
        assert_eq!(check_count(0), Err(AdapterError::NoEvents));
        assert!(check_count(10_000).is_ok(), "a big group is never refused for its size");
    }
}
