//! Prometheus Alertmanager webhook (version "4"), decoded strictly: unknown fields are rejected.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Deserialize;

use super::{Adapter, AdapterError, DecodeContext, Decoded, check_body, check_count, json_error, parse_rfc3339};
use crate::alerts::event::{Entity, Event, EventState, Link, Severity};

pub struct AlertmanagerAdapter;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Webhook {
    version: String,
    #[serde(default)]
    group_key: String,
    #[serde(default)]
    truncated_alerts: i64,
    /// Group status is not checked: each alert's own status decides.
    #[serde(default, rename = "status")]
    _status: String,
    #[serde(default)]
    receiver: String,
    #[serde(default)]
    group_labels: BTreeMap<String, String>,
    #[serde(default)]
    common_labels: BTreeMap<String, String>,
    #[serde(default)]
    common_annotations: BTreeMap<String, String>,
    #[serde(default, rename = "externalURL")]
    external_url: String,
    #[serde(default)]
    alerts: Vec<WebhookAlert>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WebhookAlert {
    #[serde(default)]
    status: String,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    starts_at: String,
    #[serde(default)]
    ends_at: String,
    #[serde(default, rename = "generatorURL")]
    generator_url: String,
    #[serde(default)]
    fingerprint: String,
}

/// Group-level context shared by Alertmanager and Grafana (Alertmanager-shaped) payloads.
pub(crate) struct Group<'a> {
    pub group_key: &'a str,
    pub group_labels: &'a BTreeMap<String, String>,
    pub common_labels: &'a BTreeMap<String, String>,
    pub common_annotations: &'a BTreeMap<String, String>,
    pub external_url: &'a str,
}

/// One Alertmanager-shaped alert, provider-neutral view.
pub(crate) struct AmAlert<'a> {
    pub status: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
    pub starts_at: &'a str,
    pub ends_at: &'a str,
    pub generator_url: &'a str,
    pub fingerprint: &'a str,
    /// Extra links (type, url) added by the caller, e.g. Grafana dashboards.
    pub extra_links: Vec<(&'static str, &'a str)>,
}

const ENTITY_LABELS: [(&str, &str); 6] = [
    ("instance", "instance"),
    ("host", "host"),
    ("hostname", "host"),
    ("pod", "pod"),
    ("service", "service"),
    ("job", "job"),
];

fn non_blank<'a>(map: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    map.get(key).map(|s| s.trim()).filter(|s| !s.is_empty())
}

fn parse_time(field: String, raw: &str) -> Result<Option<Timestamp>, AdapterError> {
    let raw = raw.trim();
    if raw.is_empty() || raw.starts_with("0001-01-01T") {
        return Ok(None);
    }
    parse_rfc3339(raw).map(Some).ok_or_else(|| AdapterError::payload(field, "must be an RFC 3339 timestamp"))
}

/// Map one Alertmanager-shaped alert to a normalised event.
pub(crate) fn map_alert(
    index: usize,
    alert: &AmAlert<'_>,
    group: &Group<'_>,
    ctx: &DecodeContext<'_>,
) -> Result<Event, AdapterError> {
    let state = EventState::parse_lenient(alert.status)
        .ok_or_else(|| AdapterError::payload(format!("alerts[{index}].status"), "unknown alert state"))?;
    let name = non_blank(alert.labels, "alertname")
        .or_else(|| non_blank(group.group_labels, "alertname"))
        .unwrap_or("AlertmanagerAlert");
    let entity = ENTITY_LABELS
        .iter()
        .find_map(|(label, kind)| {
            non_blank(alert.labels, label).map(|id| Entity {
                kind: (*kind).to_owned(),
                id: id.to_owned(),
                display_name: None,
            })
        })
        .unwrap_or_else(|| Entity { kind: "alert".into(), id: name.to_owned(), display_name: None });

    let mut event = Event::new(ctx.source_type, ctx.source_name, state, name, entity, ctx.observed_at);
    if let Some(started) = parse_time(format!("alerts[{index}].startsAt"), alert.starts_at)? {
        event.started_at = started;
    }
    event.ended_at = parse_time(format!("alerts[{index}].endsAt"), alert.ends_at)?;
    event.summary = non_blank(alert.annotations, "summary")
        .or_else(|| non_blank(alert.annotations, "message"))
        .or_else(|| non_blank(group.common_annotations, "summary"))
        .unwrap_or(name)
        .to_owned();
    event.description = non_blank(alert.annotations, "description")
        .or_else(|| non_blank(group.common_annotations, "description"))
        .map(str::to_owned);
    event.severity = alert.labels.get("severity").map(|s| Severity::normalize(s)).unwrap_or_default();

    event.labels = group.common_labels.clone();
    event.labels.extend(alert.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    event.annotations = group.common_annotations.clone();
    event.annotations.extend(alert.annotations.iter().map(|(k, v)| (k.clone(), v.clone())));

    let mut links = vec![("generator", alert.generator_url), ("alertmanager", group.external_url)];
    links.extend(alert.extra_links.iter().copied());
    event.links = links
        .into_iter()
        .filter(|(_, url)| !url.trim().is_empty())
        .map(|(kind, url)| Link { kind: kind.to_owned(), url: url.to_owned() })
        .collect();

    let fingerprint = alert.fingerprint.trim();
    if !fingerprint.is_empty() {
        event.source.provider_event_id = Some(fingerprint.to_owned());
        event.correlation_key = fingerprint.to_owned();
    } else if !group.group_key.trim().is_empty() {
        event.correlation_key = group.group_key.to_owned();
    }
    // Deduplication key is always derived: firing vs resolved and different startsAt are distinct.
    event.normalize().map_err(|e| AdapterError::event(index, e))
}

impl Adapter for AlertmanagerAdapter {
    fn provider(&self) -> &'static str {
        "alertmanager"
    }

    fn decode(&self, body: &[u8], ctx: &DecodeContext<'_>) -> Result<Vec<Event>, AdapterError> {
        self.decode_batch(body, ctx).map(|decoded| decoded.events)
    }

    fn decode_batch(&self, body: &[u8], ctx: &DecodeContext<'_>) -> Result<Decoded, AdapterError> {
        check_body(body)?;
        let hook: Webhook = serde_json::from_slice(body).map_err(json_error)?;
        if hook.version != "4" {
            return Err(AdapterError::UnsupportedVersion(crate::alerts::event::bound(&hook.version, 32)));
        }
        if hook.receiver.trim().is_empty() {
            return Err(AdapterError::payload("receiver", "required"));
        }
        if hook.truncated_alerts < 0 {
            return Err(AdapterError::payload("truncatedAlerts", "must not be negative"));
        }
        check_count(hook.alerts.len())?;
        let group = Group {
            group_key: &hook.group_key,
            group_labels: &hook.group_labels,
            common_labels: &hook.common_labels,
            common_annotations: &hook.common_annotations,
            external_url: &hook.external_url,
        };
        let events = hook
            .alerts
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let labels = a
                    .labels
                    .as_ref()
                    .ok_or_else(|| AdapterError::payload(format!("alerts[{i}].labels"), "required"))?;
                let alert = AmAlert {
                    status: &a.status,
                    labels,
                    annotations: &a.annotations,
                    starts_at: &a.starts_at,
                    ends_at: &a.ends_at,
                    generator_url: &a.generator_url,
                    fingerprint: &a.fingerprint,
                    extra_links: Vec::new(),
                };
                map_alert(i, &alert, &group, ctx)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Decoded { events, truncated_by_provider: hook.truncated_alerts.unsigned_abs() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRING: &str = include_str!("../../../../tests/fixtures/alertmanager/alertmanager-webhook.json");
    const RESOLVED: &str = include_str!("../../../../tests/fixtures/alertmanager/alertmanager-webhook-resolved.json");
    const FROM_RULE: &str =
        include_str!("../../../../tests/fixtures/alertmanager/alertmanager-webhook-from-prometheus-rule.json");
    const POST_V2: &str = include_str!("../../../../tests/fixtures/alertmanager/alertmanager-post-alerts-v2.json");

    fn ctx() -> DecodeContext<'static> {
        DecodeContext {
            source_type: "alertmanager",
            source_name: "alertmanager-main",
            observed_at: "2026-11-29T22:45:00Z".parse().unwrap(),
        }
    }

    fn decode(body: &str) -> Result<Vec<Event>, AdapterError> {
        AlertmanagerAdapter.decode(body.as_bytes(), &ctx())
    }

    fn json(body: &str) -> serde_json::Value {
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn normalizes_each_alert_of_the_firing_sample() {
        let events = decode(FIRING).unwrap();
        assert_eq!(events.len(), 1);
        let e = &events[0];
        assert_eq!(e.source.kind, "alertmanager");
        assert_eq!(e.source.name, "alertmanager-main");
        assert_eq!(e.source.provider_event_id.as_deref(), Some("540006078af5d72d"));
        assert_eq!(e.state, EventState::Firing);
        assert_eq!(e.name, "KubePodCrashLooping");
        assert_eq!(e.severity, Severity::Critical);
        assert_eq!(e.summary, "Pod shop/cart-7d9f-abcde is crash looping");
        assert_eq!(e.entity, Entity { kind: "pod".into(), id: "cart-7d9f-abcde".into(), display_name: None });
        assert_eq!(e.started_at.to_string(), "2026-11-29T22:41:16Z");
        assert_eq!(e.ended_at, None, "0001-01-01 endsAt means none");
        assert_eq!(e.observed_at.to_string(), "2026-11-29T22:45:00Z");
        assert_eq!(e.labels.get("namespace").map(String::as_str), Some("shop"));
        assert!(e.annotations.contains_key("runbook_url"));
        assert_eq!(e.correlation_key, "540006078af5d72d");
        assert_eq!(e.deduplication_key.len(), 64);
        let kinds: Vec<_> = e.links.iter().map(|l| l.kind.as_str()).collect();
        assert_eq!(kinds, ["generator", "alertmanager"]);
    }

    #[test]
    fn entity_from_instance_label_and_each_alert_normalised() {
        let mut v = json(FIRING);
        let first = v["alerts"][0].clone();
        let mut second = first.clone();
        second["labels"]["instance"] = "db-1:9100".into();
        second["labels"]["severity"] = "crit".into();
        second["fingerprint"] = "aaaabbbbccccdddd".into();
        v["alerts"] = serde_json::json!([first, second]);
        let events = decode(&v.to_string()).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].entity.kind, "pod");
        assert_eq!(events[1].entity, Entity { kind: "instance".into(), id: "db-1:9100".into(), display_name: None });
        assert!(events.iter().all(|e| e.severity == Severity::Critical));
        assert!(events.iter().all(|e| !e.deduplication_key.is_empty() && !e.correlation_key.is_empty()));
        assert_ne!(events[0].deduplication_key, events[1].deduplication_key);
    }

    #[test]
    fn resolved_sample_is_resolved_with_same_correlation_key() {
        let firing = decode(FIRING).unwrap().remove(0);
        let resolved = decode(RESOLVED).unwrap().remove(0);
        assert_eq!(resolved.state, EventState::Resolved);
        assert_eq!(resolved.ended_at.map(|t| t.to_string()).as_deref(), Some("2026-11-29T22:41:20Z"));
        assert_eq!(resolved.correlation_key, firing.correlation_key);
        assert_ne!(resolved.deduplication_key, firing.deduplication_key);
    }

    #[test]
    fn identical_redelivery_has_identical_keys() {
        let a = decode(FIRING).unwrap();
        let later = DecodeContext { observed_at: "2026-11-29T23:00:00Z".parse().unwrap(), ..ctx() };
        let b = AlertmanagerAdapter.decode(FIRING.as_bytes(), &later).unwrap();
        assert_eq!(a[0].deduplication_key, b[0].deduplication_key);
    }

    #[test]
    fn rule_sample_without_entity_labels_falls_back_to_alert_entity() {
        let e = decode(FROM_RULE).unwrap().remove(0);
        assert_eq!(e.entity, Entity { kind: "alert".into(), id: "AkritasAlwaysFiring".into(), display_name: None });
        assert_eq!(e.severity, Severity::Warning);
        assert_eq!(e.started_at.to_string(), "2026-11-29T22:42:48.108Z");
    }

    #[test]
    fn rejects_other_versions_unknown_fields_and_api_v2_arrays() {
        let mut v = json(FIRING);
        v["version"] = "3".into();
        assert_eq!(decode(&v.to_string()), Err(AdapterError::UnsupportedVersion("3".into())));

        let mut v = json(FIRING);
        v["unexpected"] = true.into();
        assert!(matches!(decode(&v.to_string()), Err(AdapterError::InvalidJson(_))));

        let mut v = json(FIRING);
        v["alerts"][0]["extra"] = 1.into();
        assert!(matches!(decode(&v.to_string()), Err(AdapterError::InvalidJson(_))));

        // The Alertmanager API v2 `POST /api/v2/alerts` body is not a webhook.
        assert!(matches!(decode(POST_V2), Err(AdapterError::InvalidJson(_))));
        assert!(matches!(decode("{not json"), Err(AdapterError::InvalidJson(_))));
    }

    #[test]
    fn rejects_structural_problems() {
        let mut v = json(FIRING);
        v["receiver"] = " ".into();
        assert_eq!(decode(&v.to_string()), Err(AdapterError::payload("receiver", "required")));

        let mut v = json(FIRING);
        v["truncatedAlerts"] = (-1).into();
        assert!(matches!(decode(&v.to_string()), Err(AdapterError::InvalidPayload { .. })));

        let mut v = json(FIRING);
        v["alerts"][0].as_object_mut().unwrap().remove("labels");
        assert_eq!(decode(&v.to_string()), Err(AdapterError::payload("alerts[0].labels", "required")));

        let mut v = json(FIRING);
        v["alerts"][0]["status"] = "pending".into();
        assert!(matches!(decode(&v.to_string()), Err(AdapterError::InvalidPayload { .. })));

        let mut v = json(FIRING);
        v["alerts"][0]["startsAt"] = "yesterday".into();
        assert!(matches!(decode(&v.to_string()), Err(AdapterError::InvalidPayload { .. })));

        let mut v = json(FIRING);
        v["alerts"] = serde_json::json!([]);
        assert_eq!(decode(&v.to_string()), Err(AdapterError::NoEvents));
    }

    #[test]
    fn big_groups_decode_whole_with_the_providers_truncation_and_oversized_strings_truncated() {
        let mut v = json(FIRING);
        let alert = v["alerts"][0].clone();
        v["alerts"] = serde_json::Value::Array(vec![alert; 1_000]);
        v["truncatedAlerts"] = 250.into();
        let decoded = AlertmanagerAdapter.decode_batch(v.to_string().as_bytes(), &ctx()).unwrap();
        assert_eq!((decoded.events.len(), decoded.truncated_by_provider), (1_000, 250));

        let mut v = json(FIRING);
        v["alerts"][0]["annotations"]["summary"] = "s".repeat(10_000).into();
        v["alerts"][0]["labels"]["alertname"] = "n".repeat(1_000).into();
        let e = decode(&v.to_string()).unwrap().remove(0);
        assert_eq!(e.summary.len(), 4096);
        assert_eq!(e.name.len(), 256);
        assert_eq!(e.labels["alertname"].len(), 1_000, "label values bound at 2048");
    }
}
