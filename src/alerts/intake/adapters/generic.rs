//! Generic source: the canonical batch `{"schema_version":1,"alerts":[Event…]}`, decoded strictly
//! (unknown fields rejected). Client `event_id` is ignored and source type/name are forced from config.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Adapter, AdapterError, DecodeContext, check_body, check_count, json_error, parse_rfc3339};
use crate::alerts::event::{Entity, Event, EventState, Link, SCHEMA_VERSION, Severity};

pub struct GenericAdapter;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    schema_version: u32,
    alerts: Option<Vec<WireEvent>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireSource {
    #[serde(default, rename = "type")]
    _kind: Option<String>,
    #[serde(default, rename = "name")]
    _name: Option<String>,
    #[serde(default)]
    provider_event_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEntity {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    display_name: Option<String>,
}

impl From<WireEntity> for Entity {
    fn from(w: WireEntity) -> Entity {
        Entity { kind: w.kind, id: w.id, display_name: w.display_name }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireLink {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    url: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEvent {
    #[serde(default)]
    schema_version: Option<u32>,
    #[serde(default, rename = "event_id")]
    _event_id: Option<String>,
    #[serde(default)]
    source: Option<WireSource>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    severity: Option<String>,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    description: Option<String>,
    entity: Option<WireEntity>,
    #[serde(default)]
    related_entities: Vec<WireEntity>,
    #[serde(default)]
    started_at: Option<String>,
    #[serde(default)]
    ended_at: Option<String>,
    #[serde(default)]
    observed_at: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    links: Vec<WireLink>,
    #[serde(default)]
    deduplication_key: Option<String>,
    #[serde(default)]
    correlation_key: Option<String>,
}

fn time(index: usize, field: &str, raw: Option<&str>) -> Result<Option<jiff::Timestamp>, AdapterError> {
    match raw.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => parse_rfc3339(s)
            .map(Some)
            .ok_or_else(|| AdapterError::payload(format!("alerts[{index}].{field}"), "must be an RFC 3339 timestamp")),
    }
}

fn convert(index: usize, w: WireEvent, ctx: &DecodeContext<'_>) -> Result<Event, AdapterError> {
    let field = |f: &str| format!("alerts[{index}].{f}");
    if w.schema_version.is_some_and(|v| v != SCHEMA_VERSION) {
        return Err(AdapterError::payload(field("schema_version"), "must be 1"));
    }
    let state = match w.state.trim() {
        "firing" => EventState::Firing,
        "resolved" => EventState::Resolved,
        _ => return Err(AdapterError::payload(field("state"), "must be firing or resolved")),
    };
    let severity = match w.severity.as_deref().map(str::trim).unwrap_or("") {
        "" | "unknown" => Severity::Unknown,
        "info" => Severity::Info,
        "warning" => Severity::Warning,
        "critical" => Severity::Critical,
        _ => return Err(AdapterError::payload(field("severity"), "must be unknown, info, warning or critical")),
    };
    let entity = w.entity.ok_or_else(|| AdapterError::payload(field("entity"), "required"))?;
    let observed_at = time(index, "observed_at", w.observed_at.as_deref())?.unwrap_or(ctx.observed_at);

    let mut e = Event::new(ctx.source_type, ctx.source_name, state, &w.name, entity.into(), observed_at);
    e.source.provider_event_id = w.source.and_then(|s| s.provider_event_id);
    e.severity = severity;
    e.summary = w.summary;
    e.description = w.description;
    e.related_entities = w.related_entities.into_iter().map(Entity::from).collect();
    e.started_at = time(index, "started_at", w.started_at.as_deref())?.unwrap_or(observed_at);
    e.ended_at = time(index, "ended_at", w.ended_at.as_deref())?;
    e.labels = w.labels;
    e.annotations = w.annotations;
    e.links = w.links.into_iter().map(|l| Link { kind: l.kind, url: l.url }).collect();
    e.deduplication_key = w.deduplication_key.unwrap_or_default();
    e.correlation_key = w.correlation_key.unwrap_or_default();
    e.normalize().map_err(|err| AdapterError::event(index, err))
}

impl Adapter for GenericAdapter {
    fn provider(&self) -> &'static str {
        "generic"
    }

    fn decode(&self, body: &[u8], ctx: &DecodeContext<'_>) -> Result<Vec<Event>, AdapterError> {
        check_body(body)?;
        let batch: Batch = serde_json::from_slice(body).map_err(json_error)?;
        if batch.schema_version != SCHEMA_VERSION {
            return Err(AdapterError::UnsupportedVersion(batch.schema_version.to_string()));
        }
        let alerts = batch.alerts.ok_or_else(|| AdapterError::payload("alerts", "required"))?;
        check_count(alerts.len())?;
        alerts.into_iter().enumerate().map(|(i, w)| convert(i, w, ctx)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCH: &str = include_str!("../../../../tests/fixtures/generic/generic-batch.json");

    fn ctx() -> DecodeContext<'static> {
        DecodeContext {
            source_type: "generic",
            source_name: "ops-generic",
            observed_at: "2026-11-29T22:45:00Z".parse().unwrap(),
        }
    }

    fn json() -> serde_json::Value {
        serde_json::from_str(BATCH).unwrap()
    }

    #[test]
    fn decodes_canonical_batch_and_forces_source() {
        let events = GenericAdapter.decode(BATCH.as_bytes(), &ctx()).unwrap();
        assert_eq!(events.len(), 2);
        let e = &events[0];
        assert_eq!(e.event_id, "", "client event_id is ignored");
        assert_eq!(e.source.kind, "generic");
        assert_eq!(e.source.name, "ops-generic");
        assert_eq!(e.source.provider_event_id.as_deref(), Some("chk-991"));
        assert_eq!(e.severity, Severity::Critical);
        assert_eq!(e.entity.kind, "host");
        assert_eq!(e.related_entities.len(), 1, "duplicates and empties dropped");
        assert_eq!(e.started_at.to_string(), "2026-11-29T21:40:00Z", "offset normalised to UTC");
        assert_eq!(e.observed_at.to_string(), "2026-11-29T22:45:00Z", "defaults to receive time");
        assert_eq!(e.labels.get("team").map(String::as_str), Some("dba"), "keys lower-cased");
        assert_eq!(e.links.len(), 1, "non-http links dropped");
        assert_eq!(e.correlation_key, "db-1-cpu", "client key kept");
        assert_eq!(e.deduplication_key.len(), 64, "derived when absent");
        let r = &events[1];
        assert_eq!(r.state, EventState::Resolved);
        assert_eq!(r.severity, Severity::Unknown);
        assert_eq!(r.correlation_key, "db-1-cpu");
    }

    #[test]
    fn strict_decoding() {
        let mut v = json();
        v["alerts"][0]["surprise"] = 1.into();
        assert!(matches!(GenericAdapter.decode(v.to_string().as_bytes(), &ctx()), Err(AdapterError::InvalidJson(_))));

        let mut v = json();
        v["schema_version"] = 2.into();
        assert_eq!(
            GenericAdapter.decode(v.to_string().as_bytes(), &ctx()),
            Err(AdapterError::UnsupportedVersion("2".into()))
        );

        let mut v = json();
        v["alerts"][0]["state"] = "triggered".into();
        assert!(matches!(
            GenericAdapter.decode(v.to_string().as_bytes(), &ctx()),
            Err(AdapterError::InvalidPayload { field, .. }) if field == "alerts[0].state"
        ));

        let mut v = json();
        v["alerts"][1]["severity"] = "high".into();
        assert!(matches!(
            GenericAdapter.decode(v.to_string().as_bytes(), &ctx()),
            Err(AdapterError::InvalidPayload { field, .. }) if field == "alerts[1].severity"
        ));

        let mut v = json();
        v["alerts"][0]["summary"] = "".into();
        assert_eq!(
            GenericAdapter.decode(v.to_string().as_bytes(), &ctx()),
            Err(AdapterError::payload("alerts[0].summary", "required"))
        );

        let mut v = json();
        v["alerts"] = serde_json::Value::Array(vec![v["alerts"][1].clone(); 1_000]);
        assert_eq!(
            GenericAdapter.decode(v.to_string().as_bytes(), &ctx()).unwrap().len(),
            1_000,
            "never refused for its size"
        );
    }
}
