//! Uptime Kuma webhook (lenient: unknown fields ignored, numeric ids kept as written). The body may be a
//! JSON string that itself contains the JSON payload (double-encoded), as some Kuma versions send it.

use serde_json::Value;

use super::{
    Adapter, AdapterError, DecodeContext, check_body, is_http_url, json_error, parse_civil_utc, parse_rfc3339,
    scalar_text,
};
use crate::alerts::event::{Entity, Event, EventState, Link, Severity};

pub struct UptimeKumaAdapter;

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

impl Adapter for UptimeKumaAdapter {
    fn provider(&self) -> &'static str {
        "uptime-kuma"
    }

    fn decode(&self, body: &[u8], ctx: &DecodeContext<'_>) -> Result<Vec<Event>, AdapterError> {
        check_body(body)?;
        let mut root: Value = serde_json::from_slice(body).map_err(json_error)?;
        if let Value::String(inner) = &root {
            root = serde_json::from_str(inner).map_err(json_error)?;
        }
        let heartbeat = root.get("heartbeat").filter(|v| v.is_object());
        let heartbeat = heartbeat.ok_or_else(|| AdapterError::payload("heartbeat", "required"))?;
        let monitor = root.get("monitor").filter(|v| v.is_object());
        let monitor = monitor.ok_or_else(|| AdapterError::payload("monitor", "required"))?;

        let (state, severity) = match heartbeat.get("status").and_then(Value::as_i64) {
            Some(0) => (EventState::Firing, Severity::Critical),
            Some(1) => (EventState::Resolved, Severity::Info),
            _ => return Err(AdapterError::payload("heartbeat.status", "must be 0 (down) or 1 (up)")),
        };
        let id = scalar_text(heartbeat.get("monitorID"))
            .or_else(|| scalar_text(monitor.get("id")))
            .ok_or_else(|| AdapterError::payload("monitor.id", "required"))?;
        let observed = match text(heartbeat, "time") {
            None => ctx.observed_at,
            Some(raw) => parse_rfc3339(raw)
                .or_else(|| parse_civil_utc(raw))
                .ok_or_else(|| AdapterError::payload("heartbeat.time", "unrecognised time format"))?,
        };
        let fallback_name = format!("Uptime Kuma monitor {id}");
        let name = text(monitor, "name").unwrap_or(&fallback_name);
        let url = text(monitor, "url");
        let display = text(monitor, "hostname").or(url).unwrap_or(name);
        let entity = Entity { kind: "monitor".into(), id: id.clone(), display_name: Some(display.to_owned()) };

        let mut e = Event::new(ctx.source_type, ctx.source_name, state, name, entity, ctx.observed_at);
        e.started_at = observed;
        e.severity = severity;
        e.summary = text(&root, "msg").or_else(|| text(heartbeat, "msg")).unwrap_or(name).to_owned();
        e.description = text(heartbeat, "msg").map(str::to_owned);
        e.labels.insert("monitor_id".into(), id.clone());
        if let Some(kind) = scalar_text(monitor.get("type")) {
            e.labels.insert("monitor_type".into(), kind);
        }
        if let Some(ping) = scalar_text(heartbeat.get("ping")) {
            e.labels.insert("ping_ms".into(), ping);
        }
        if let Some(duration) = heartbeat.get("duration").filter(|d| d.as_f64().is_some_and(|d| d > 0.0)) {
            e.labels.insert("duration_seconds".into(), duration.to_string());
        }
        if let Some(url) = url.filter(|u| is_http_url(u)) {
            e.links.push(Link { kind: "target".into(), url: url.to_owned() });
        }
        e.correlation_key = id;
        Ok(vec![e.normalize().map_err(|err| AdapterError::event(0, err))?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOWN: &str = include_str!("../../../../tests/fixtures/uptime_kuma/uptime-kuma-down.json");
    const UP: &str = include_str!("../../../../tests/fixtures/uptime_kuma/uptime-kuma-up.json");

    fn ctx() -> DecodeContext<'static> {
        DecodeContext {
            source_type: "uptime-kuma",
            source_name: "kuma",
            observed_at: "2026-11-29T22:45:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn status_zero_is_firing_on_monitor_entity() {
        let e = UptimeKumaAdapter.decode(DOWN.as_bytes(), &ctx()).unwrap().remove(0);
        assert_eq!(e.state, EventState::Firing);
        assert_eq!(e.severity, Severity::Critical);
        assert_eq!(e.entity.kind, "monitor");
        assert_eq!(e.entity.id, "10");
        assert_eq!(e.entity.display_name.as_deref(), Some("https://shop.example.invalid/health"));
        assert_eq!(e.name, "shop-api");
        assert_eq!(e.summary, "[shop-api] [🔴 Down] connect ECONNREFUSED 10.0.0.7:443");
        assert_eq!(e.description.as_deref(), Some("connect ECONNREFUSED 10.0.0.7:443"));
        assert_eq!(e.started_at.to_string(), "2026-11-29T22:41:16.123Z");
        assert_eq!(e.labels["monitor_type"], "http");
        assert_eq!(e.labels["duration_seconds"], "60");
        assert!(!e.labels.contains_key("ping_ms"), "null ping omitted");
        assert_eq!(e.links[0].kind, "target");
        assert_eq!(e.correlation_key, "10");
    }

    #[test]
    fn status_one_is_resolved_and_double_encoded_body_accepted() {
        let double = serde_json::to_string(&serde_json::Value::String(UP.to_owned())).unwrap();
        let e = UptimeKumaAdapter.decode(double.as_bytes(), &ctx()).unwrap().remove(0);
        assert_eq!(e.state, EventState::Resolved);
        assert_eq!(e.severity, Severity::Info);
        assert_eq!(e.entity.id, "10");
        assert_eq!(e.labels["ping_ms"], "42");
        let down = UptimeKumaAdapter.decode(DOWN.as_bytes(), &ctx()).unwrap().remove(0);
        assert_eq!(e.correlation_key, down.correlation_key);
    }

    #[test]
    fn rejects_missing_parts() {
        let err = |body: &str| UptimeKumaAdapter.decode(body.as_bytes(), &ctx()).unwrap_err();
        assert_eq!(err(r#"{"monitor":{"id":1}}"#), AdapterError::payload("heartbeat", "required"));
        assert_eq!(err(r#"{"heartbeat":{"status":0}}"#), AdapterError::payload("monitor", "required"));
        assert!(matches!(err(r#"{"heartbeat":{"status":2},"monitor":{"id":1}}"#), AdapterError::InvalidPayload { .. }));
        assert_eq!(err(r#"{"heartbeat":{"status":0},"monitor":{}}"#), AdapterError::payload("monitor.id", "required"));
        let e = UptimeKumaAdapter.decode(br#"{"heartbeat":{"status":0,"monitorID":7},"monitor":{}}"#, &ctx()).unwrap();
        assert_eq!(e[0].name, "Uptime Kuma monitor 7");
        assert_eq!(e[0].started_at, ctx().observed_at);
    }
}
