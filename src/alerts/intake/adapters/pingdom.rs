//! Pingdom state-change webhook (lenient: unknown fields ignored, numeric ids kept as written).

use serde_json::Value;

use super::{
    Adapter, AdapterError, DecodeContext, check_body, is_http_url, json_error, parse_civil_utc, parse_rfc3339,
    scalar_text,
};
use crate::alerts::event::{Entity, Event, EventState, Link, Severity};

pub struct PingdomAdapter;

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

/// Top-level field, or the same field inside `check_params` (where Pingdom puts hostname/full_url/port).
fn param<'a>(root: &'a Value, key: &str) -> Option<&'a Value> {
    root.get(key).filter(|v| !v.is_null()).or_else(|| root.get("check_params").and_then(|p| p.get(key)))
}

impl Adapter for PingdomAdapter {
    fn provider(&self) -> &'static str {
        "pingdom"
    }

    fn decode(&self, body: &[u8], ctx: &DecodeContext<'_>) -> Result<Vec<Event>, AdapterError> {
        check_body(body)?;
        let root: Value = serde_json::from_slice(body).map_err(json_error)?;
        if !root.is_object() {
            return Err(AdapterError::payload("body", "must be a JSON object"));
        }
        let id = scalar_text(root.get("check_id")).ok_or_else(|| AdapterError::payload("check_id", "required"))?;
        let check_name = text(&root, "check_name").ok_or_else(|| AdapterError::payload("check_name", "required"))?;
        let current = text(&root, "current_state").unwrap_or("");
        let state = EventState::parse_lenient(current)
            .ok_or_else(|| AdapterError::payload("current_state", "unknown state"))?;
        let changed_at = match root.get("state_changed_timestamp").and_then(Value::as_i64) {
            Some(secs) => Some(
                jiff::Timestamp::from_second(secs)
                    .map_err(|_| AdapterError::payload("state_changed_timestamp", "out of range"))?,
            ),
            None => match text(&root, "state_changed_utc_time") {
                Some(raw) => Some(
                    parse_rfc3339(raw)
                        .or_else(|| parse_civil_utc(raw))
                        .ok_or_else(|| AdapterError::payload("state_changed_utc_time", "unrecognised time format"))?,
                ),
                None => None,
            },
        };
        let severity = match state {
            EventState::Resolved => Severity::Info,
            // Pingdom's `HIGH` is not in the severity vocabulary, so it maps to warning.
            EventState::Firing => match Severity::normalize(text(&root, "importance_level").unwrap_or("")) {
                Severity::Unknown => Severity::Warning,
                s => s,
            },
        };
        let hostname = param(&root, "hostname").and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
        let full_url = param(&root, "full_url").and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
        let display = hostname.or(full_url).unwrap_or(check_name);
        let entity = Entity { kind: "check".into(), id: id.clone(), display_name: Some(display.to_owned()) };

        let mut e = Event::new(ctx.source_type, ctx.source_name, state, check_name, entity, ctx.observed_at);
        if let Some(t) = changed_at {
            e.started_at = t;
        }
        e.severity = severity;
        e.summary = format!("{check_name} is {}", current.to_lowercase());
        if let Some(desc) = text(&root, "description") {
            e.summary = format!("{}: {desc}", e.summary);
        }
        e.description = text(&root, "long_description").map(str::to_owned);
        e.labels.insert("check_id".into(), id.clone());
        for key in ["check_type", "previous_state", "current_state"] {
            if let Some(v) = text(&root, key) {
                e.labels.insert(key.into(), v.to_owned());
            }
        }
        if let Some(port) = param(&root, "port").filter(|p| p.as_f64().is_some_and(|p| p > 0.0)) {
            e.labels.insert("port".into(), port.to_string());
        }
        if let Some(tags) = root.get("tags").and_then(Value::as_array) {
            let tags: Vec<String> = tags.iter().filter_map(|t| scalar_text(Some(t))).collect();
            if !tags.is_empty() {
                e.labels.insert("tags".into(), tags.join(","));
            }
        }
        if let Some(url) = full_url.filter(|u| is_http_url(u)) {
            e.links.push(Link { kind: "target".into(), url: url.to_owned() });
        }
        e.correlation_key = id;
        Ok(vec![e.normalize().map_err(|err| AdapterError::event(0, err))?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOWN: &str = include_str!("../../../../tests/fixtures/pingdom/pingdom-down.json");
    const UP: &str = include_str!("../../../../tests/fixtures/pingdom/pingdom-up.json");

    fn ctx() -> DecodeContext<'static> {
        DecodeContext {
            source_type: "pingdom",
            source_name: "pingdom",
            observed_at: "2026-11-29T22:45:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn down_is_firing_on_check_entity_and_unknown_fields_tolerated() {
        let e = PingdomAdapter.decode(DOWN.as_bytes(), &ctx()).unwrap().remove(0);
        assert_eq!(e.state, EventState::Firing);
        assert_eq!(e.entity.kind, "check");
        assert_eq!(e.entity.id, "12345");
        assert_eq!(e.entity.display_name.as_deref(), Some("shop.example.invalid"));
        assert_eq!(e.severity, Severity::Warning, "HIGH maps to warning");
        assert_eq!(e.summary, "Shop checkout is down: Connection timed out");
        assert_eq!(e.description.as_deref(), Some("HTTP request timed out after 30 seconds"));
        assert_eq!(e.started_at.to_string(), "2026-11-29T22:41:01Z");
        assert_eq!(e.labels["port"], "443");
        assert_eq!(e.labels["tags"], "shop,prod");
        assert_eq!(e.labels["previous_state"], "UP");
        assert_eq!(e.links[0].url, "https://shop.example.invalid/checkout");
        assert_eq!(e.correlation_key, "12345");
    }

    #[test]
    fn up_is_resolved_info_with_civil_time() {
        let e = PingdomAdapter.decode(UP.as_bytes(), &ctx()).unwrap().remove(0);
        assert_eq!(e.state, EventState::Resolved);
        assert_eq!(e.severity, Severity::Info);
        assert_eq!(e.started_at.to_string(), "2026-11-29T22:50:01Z");
        assert_eq!(e.summary, "Shop checkout is up");
    }

    #[test]
    fn rejects_missing_identity_and_unknown_state() {
        let err = |body: &str| PingdomAdapter.decode(body.as_bytes(), &ctx()).unwrap_err();
        assert_eq!(err(r#"{"check_name":"x","current_state":"DOWN"}"#), AdapterError::payload("check_id", "required"));
        assert_eq!(err(r#"{"check_id":1,"current_state":"DOWN"}"#), AdapterError::payload("check_name", "required"));
        assert_eq!(
            err(r#"{"check_id":1,"check_name":"x","current_state":"SUSPENDED"}"#),
            AdapterError::payload("current_state", "unknown state")
        );
        assert_eq!(err("[1]"), AdapterError::payload("body", "must be a JSON object"));
    }
}
