//! The real alerting pipeline the Alertmanager alert source is fed by: a Prometheus 2.42 alerting rule
//! on a scraped gauge → Alertmanager 0.25 → a Bearer-authenticated webhook, checked at a local recording
//! receiver, firing and then resolved.

use akritas_testkit::prom;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, http::HeaderMap, routing::post};
use prom::{Alertmanager, MetricSwitch, Prometheus};
use serde_json::Value;

const TOKEN: &str = "pipeline-token-0123456789";
const ALERT: &str = "AkritasPipelineTest";

/// One webhook delivery as the receiver saw it.
#[derive(Clone, Debug)]
struct Delivery {
    authorization: Option<String>,
    body: Value,
}

type Deliveries = Arc<Mutex<Vec<Delivery>>>;

/// Starts a recording webhook receiver on a free loopback port; returns its `/hook` URL.
async fn receiver(deliveries: Deliveries) -> String {
    async fn hook(State(deliveries): State<Deliveries>, headers: HeaderMap, body: Bytes) -> &'static str {
        let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
        let body =
            serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
        deliveries.lock().unwrap().push(Delivery { authorization, body });
        "ok"
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/hook", post(hook)).with_state(deliveries);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{address}/hook")
}

/// Our alert in a delivery whose group and alert status are both `status`.
fn find(delivery: &Delivery, status: &str) -> Option<Value> {
    if delivery.body["status"] != status {
        return None;
    }
    delivery.body["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["labels"]["alertname"] == ALERT && a["status"] == status)
        .cloned()
}

/// Waits up to `limit` for a delivery carrying our alert with `status`.
async fn wait_for(
    deliveries: &Deliveries,
    status: &str,
    limit: Duration,
    prometheus: &Prometheus,
    am: &Alertmanager,
) -> (Delivery, Value) {
    let started = Instant::now();
    loop {
        let found = deliveries.lock().unwrap().iter().find_map(|d| find(d, status).map(|alert| (d.clone(), alert)));
        if let Some(found) = found {
            return found;
        }
        if started.elapsed() > limit {
            let seen = deliveries.lock().unwrap().clone();
            panic!(
                "no `{status}` webhook within {limit:?}; deliveries: {:#?}\nPrometheus alerts: {}\n\
                 Alertmanager alerts: {}\nPrometheus log:\n{}\nAlertmanager log:\n{}",
                seen,
                prometheus.alerts().await,
                am.alerts().await,
                prometheus.log(),
                am.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_rule_reaches_the_webhook_through_alertmanager_firing_then_resolved() {
    let started = Instant::now();
    let deliveries: Deliveries = Arc::default();
    let hook = receiver(deliveries.clone()).await;
    let switch = MetricSwitch::start("akritas_pipeline_switch", 1.0).await;
    let am = Alertmanager::start(&hook, Some(TOKEN)).await;
    let rules = format!(
        "groups:\n- name: akritas-pipeline\n  rules:\n  - alert: {ALERT}\n    expr: {} == 1\n    labels:\n      \
         severity: critical\n      service: checkout\n      instance: db-7\n    annotations:\n      \
         summary: Checkout database db-7 is down\n      description: The pipeline test switch is on.\n",
        switch.name()
    );
    let prometheus = Prometheus::start(&am.url(), Some(&switch.target()), &rules).await;
    let wired = started.elapsed();

    let (firing, alert) = wait_for(&deliveries, "firing", Duration::from_secs(30), &prometheus, &am).await;
    let fired = started.elapsed();
    assert_eq!(firing.authorization.as_deref(), Some(format!("Bearer {TOKEN}").as_str()));
    let body = &firing.body;
    assert_eq!(body["version"], "4", "{body:#}");
    assert_eq!(body["receiver"], "webhook", "{body:#}");
    assert_eq!(body["externalURL"], am.url(), "{body:#}");
    assert_eq!(body["groupLabels"]["alertname"], ALERT, "{body:#}");
    assert_eq!(body["truncatedAlerts"], 0, "{body:#}");
    assert_eq!(alert["labels"]["severity"], "critical", "{alert:#}");
    assert_eq!(alert["labels"]["service"], "checkout", "{alert:#}");
    assert_eq!(alert["labels"]["instance"], "db-7", "{alert:#}");
    assert_eq!(alert["annotations"]["summary"], "Checkout database db-7 is down", "{alert:#}");
    assert_eq!(alert["annotations"]["description"], "The pipeline test switch is on.", "{alert:#}");
    assert_eq!(alert["endsAt"], "0001-01-01T00:00:00Z", "{alert:#}");
    assert!(alert["generatorURL"].as_str().is_some_and(|u| u.starts_with(&prometheus.url())), "{alert:#}");
    let fingerprint = alert["fingerprint"].as_str().expect("fingerprint").to_string();

    switch.set(0.0);
    let switched_off = Instant::now();
    let (resolved, alert) = wait_for(&deliveries, "resolved", Duration::from_secs(30), &prometheus, &am).await;
    let resolved_after = switched_off.elapsed();
    assert_eq!(resolved.authorization.as_deref(), Some(format!("Bearer {TOKEN}").as_str()));
    assert_eq!(resolved.body["version"], "4", "{:#}", resolved.body);
    assert_eq!(alert["fingerprint"], fingerprint.as_str(), "{alert:#}");
    assert_eq!(alert["labels"]["instance"], "db-7", "{alert:#}");
    assert_ne!(alert["endsAt"], "0001-01-01T00:00:00Z", "{alert:#}");

    eprintln!(
        "prometheus pipeline: Prometheus wired (AM + target active) {wired:?} after start; firing webhook \
         {fired:?} after start ({:?} after wiring); resolved webhook {resolved_after:?} after the switch went \
         off; {} scrapes; {} deliveries",
        fired - wired,
        switch.scrapes(),
        deliveries.lock().unwrap().len()
    );
}
