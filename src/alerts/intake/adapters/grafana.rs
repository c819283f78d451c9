//! Grafana unified-alerting webhook (Alertmanager-shaped, `version` "1"). Decoded leniently: Grafana adds
//! fields between releases (`orgId`, `state`, `title`, `message`, per-alert `values`, `valueString`,
//! `dashboardURL`, `panelURL`, `silenceURL`, `imageURL`, …), so unknown fields are ignored.
//! It reuses the Alertmanager mapping.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::alertmanager::{AmAlert, Group, map_alert};
use super::{Adapter, AdapterError, DecodeContext, check_body, check_count, json_error};
use crate::alerts::event::Event;

pub struct GrafanaAdapter;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Webhook {
    #[serde(default)]
    group_key: String,
    #[serde(default)]
    group_labels: BTreeMap<String, String>,
    #[serde(default)]
    common_labels: BTreeMap<String, String>,
    #[serde(default)]
    common_annotations: BTreeMap<String, String>,
    #[serde(default, rename = "externalURL")]
    external_url: String,
    alerts: Option<Vec<Alert>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Alert {
    #[serde(default)]
    status: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
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
    #[serde(default, rename = "dashboardURL")]
    dashboard_url: String,
    #[serde(default, rename = "panelURL")]
    panel_url: String,
    #[serde(default, rename = "silenceURL")]
    silence_url: String,
    #[serde(default)]
    value_string: String,
}

impl Adapter for GrafanaAdapter {
    fn provider(&self) -> &'static str {
        "grafana"
    }

    fn decode(&self, body: &[u8], ctx: &DecodeContext<'_>) -> Result<Vec<Event>, AdapterError> {
        check_body(body)?;
        let hook: Webhook = serde_json::from_slice(body).map_err(json_error)?;
        let alerts = hook.alerts.as_deref().ok_or_else(|| AdapterError::payload("alerts", "required"))?;
        check_count(alerts.len())?;
        let group = Group {
            group_key: &hook.group_key,
            group_labels: &hook.group_labels,
            common_labels: &hook.common_labels,
            common_annotations: &hook.common_annotations,
            external_url: &hook.external_url,
        };
        alerts
            .iter()
            .enumerate()
            .map(|(i, a)| {
                // `valueString` is the evaluated query result, e.g. "[ var='B' labels={...} value=97.2 ]".
                let mut annotations = a.annotations.clone();
                if !a.value_string.trim().is_empty() {
                    annotations.entry("value_string".into()).or_insert_with(|| a.value_string.clone());
                }
                let alert = AmAlert {
                    status: &a.status,
                    labels: &a.labels,
                    annotations: &annotations,
                    starts_at: &a.starts_at,
                    ends_at: &a.ends_at,
                    generator_url: &a.generator_url,
                    fingerprint: &a.fingerprint,
                    extra_links: vec![
                        ("dashboard", a.dashboard_url.as_str()),
                        ("panel", a.panel_url.as_str()),
                        ("silence", a.silence_url.as_str()),
                    ],
                };
                let mut event = map_alert(i, &alert, &group, ctx)?;
                // Grafana's group-level link is the Grafana instance, not an Alertmanager.
                for link in &mut event.links {
                    if link.kind == "alertmanager" {
                        link.kind = "grafana".into();
                    }
                }
                Ok(event)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::event::{EventState, Severity};

    const FIRING: &str = include_str!("../../../../tests/fixtures/grafana/grafana-webhook-firing.json");

    fn ctx() -> DecodeContext<'static> {
        DecodeContext {
            source_type: "grafana",
            source_name: "grafana-main",
            observed_at: "2026-11-29T22:45:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn decodes_unified_alerting_payload() {
        let events = GrafanaAdapter.decode(FIRING.as_bytes(), &ctx()).unwrap();
        assert_eq!(events.len(), 2);
        let e = &events[0];
        assert_eq!(e.state, EventState::Firing);
        assert_eq!(e.name, "PostgresHighCPU");
        assert_eq!(e.severity, Severity::Critical);
        assert_eq!(e.entity.kind, "instance");
        assert_eq!(e.entity.id, "pg-0.db.svc:9187");
        assert_eq!(e.summary, "PostgreSQL CPU above 90% on pg-0");
        assert_eq!(e.correlation_key, "a1b2c3d4e5f60718");
        assert!(e.annotations["value_string"].contains("value=97.2"));
        let kinds: Vec<_> = e.links.iter().map(|l| l.kind.as_str()).collect();
        assert_eq!(kinds, ["generator", "grafana", "dashboard", "panel", "silence"]);
        assert_eq!(events[1].state, EventState::Resolved);
        assert_eq!(events[1].severity, Severity::Unknown);
        assert!(events[1].ended_at.is_some());
    }

    #[test]
    fn rejects_missing_alerts_and_bad_json() {
        assert_eq!(GrafanaAdapter.decode(br#"{"orgId":1}"#, &ctx()), Err(AdapterError::payload("alerts", "required")));
        assert!(matches!(GrafanaAdapter.decode(b"[]", &ctx()), Err(AdapterError::InvalidJson(_))));
    }
}
