//! `GET /metrics`: Prometheus text exposition of the host's state — Catalog,
//! resources not ready, failed status writes, alert deliveries per source, investigation jobs,
//! incidents and Runs, read from the live stores at scrape time — and the activity the
//! host recorded since start (`crate::telemetry`): model calls, tool calls, Runs,
//! notifications, journal writes, fsync latency and replay time.

use std::fmt::Write;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::AppState;

use crate::telemetry::label;

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Renders every metric.
pub async fn render(state: &AppState) -> String {
    let mut out = String::new();
    let catalog = state.catalog.current();
    family(&mut out, "akritas_info", "gauge", "Version and mode of this host.");
    let _ = writeln!(out, "akritas_info{{version=\"{}\",mode=\"{}\"}} 1", env!("CARGO_PKG_VERSION"), state.info.mode);
    family(&mut out, "akritas_catalog_version", "gauge", "Version of the Catalog in force.");
    let _ = writeln!(out, "akritas_catalog_version {}", catalog.version);
    family(&mut out, "akritas_catalog_resources", "gauge", "Resources in force, by kind.");
    for (kind, count) in catalog.counts() {
        let _ = writeln!(out, "akritas_catalog_resources{{kind=\"{kind}\"}} {count}");
    }
    let board = state.board.get();
    let not_ready = board.resources.iter().filter(|r| !crate::resources::common::is_ready(&r.conditions)).count();
    family(&mut out, "akritas_resources_not_ready", "gauge", "Declared resources whose newest version is not Ready.");
    let _ = writeln!(out, "akritas_resources_not_ready {not_ready}");
    family(
        &mut out,
        "akritas_status_write_failures_total",
        "counter",
        "Status writes to the Kubernetes API that failed (retried with a per-object backoff), by kind.",
    );
    for (kind, failures) in state.board.write_failures() {
        let _ = writeln!(out, "akritas_status_write_failures_total{{kind=\"{}\"}} {failures}", kind.as_str());
    }
    if let Some(alerts) = &state.alerts {
        family(
            &mut out,
            "akritas_alert_events_total",
            "counter",
            "Alert events per source and outcome (rejected counts deliveries since start).",
        );
        for (source, counters) in alerts.all_counters() {
            let source = label(&source);
            for (outcome, value) in
                [("accepted", counters.accepted), ("duplicate", counters.duplicate), ("rejected", counters.rejected)]
            {
                let _ =
                    writeln!(out, "akritas_alert_events_total{{source=\"{source}\",outcome=\"{outcome}\"}} {value}");
            }
        }
        family(
            &mut out,
            "akritas_alert_investigations_shed_total",
            "counter",
            "New alert investigations deferred (over alert_source_rate or alert_pending_jobs) or coalesced into a \
             storm job (past alert_deferred_jobs), per source.",
        );
        for (source, counters) in alerts.all_counters() {
            let source = label(&source);
            for (how, value) in [("deferred", counters.deferred), ("coalesced", counters.coalesced)] {
                let _ = writeln!(
                    out,
                    "akritas_alert_investigations_shed_total{{source=\"{source}\",how=\"{how}\"}} {value}"
                );
            }
        }
        let (jobs, incidents) = alerts.tallies();
        family(&mut out, "akritas_investigation_jobs", "gauge", "Investigation jobs by status.");
        for (status, count) in jobs {
            let _ = writeln!(out, "akritas_investigation_jobs{{status=\"{status}\"}} {count}");
        }
        family(&mut out, "akritas_incidents", "gauge", "Incidents by state.");
        for (state, count) in incidents {
            let _ = writeln!(out, "akritas_incidents{{state=\"{state}\"}} {count}");
        }
    }
    if let Some(audit) = state.engine.audit() {
        match audit.status_counts().await {
            Ok(counts) => {
                family(&mut out, "akritas_runs", "gauge", "Runs in the audit journal by status.");
                for (status, count) in counts {
                    let _ = writeln!(out, "akritas_runs{{status=\"{status}\"}} {count}");
                }
            }
            // Left out rather than reported as zero.
            Err(error) => tracing::warn!(%error, "cannot count the Runs for /metrics"),
        }
    }
    // Model, tool, Run, notification and journal activity since start.
    crate::telemetry::render(&mut out);
    out
}

/// The handler.
pub async fn metrics(State(state): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], render(&state).await).into_response()
}
