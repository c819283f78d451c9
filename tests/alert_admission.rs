//! Admission control of alert deliveries: a source may start at most
//! `alert_source_rate` investigations per minute and the host keeps at most
//! `alert_pending_jobs` waiting; a delivery over either is refused whole with 503 and
//! `Retry-After` before anything is stored, so its retry is decided afresh and then
//! deduplicated like any delivery. Alerts of one correlation key share one job.

use akritas_testkit as support;

use std::sync::Arc;

use akritas::alerts::adapters::{DecodeContext, adapter};
use akritas::alerts::admission::Limits;
use akritas::alerts::store::AlertStore;
use akritas::catalog::secrets::EnvSecrets;
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use support::host;
use support::scripted_llm::ScriptedLlm;

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const RESOLVED: &str = include_str!("fixtures/alertmanager/alertmanager-webhook-resolved.json");

const SOURCES: &str = "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: gen, namespace: ops}\n\
                       spec: {provider: generic, auth: {allowUnauthenticated: true}}\n";

/// A generic delivery of `count` firing alerts with unique correlation keys `prefix-N`.
fn unique_alerts(prefix: &str, count: usize) -> String {
    let alerts: Vec<Value> = (0..count)
        .map(|n| {
            json!({"state": "firing", "name": "HighCPU", "summary": "CPU high",
                   "entity": {"kind": "host", "id": format!("{prefix}-{n}")},
                   "started_at": "2026-11-29T22:40:00Z", "correlation_key": format!("{prefix}-{n}")})
        })
        .collect();
    json!({"schema_version": 1, "alerts": alerts}).to_string()
}

struct Answer {
    status: u16,
    retry_after: Option<u64>,
    body: Value,
}

async fn post(url: &str, body: &str) -> Answer {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    Answer { status, retry_after, body: response.json().await.unwrap_or(Value::Null) }
}

async fn serve(store: Arc<AlertStore>, manifests: &std::path::Path) -> (host::Host, ScriptedLlm) {
    std::fs::write(manifests.join("sources.yaml"), SOURCES).unwrap();
    let llm = ScriptedLlm::start(vec![]).await;
    let catalog = host::catalog_from(manifests);
    let engine = host::engine(&llm, host::settings(), host::standard_tools().0, catalog.clone(), None, None);
    let secrets = Arc::new(EnvSecrets::with_lookup(|_: &str| None));
    (host::serve_with(engine, catalog, ApiKeys::default(), Some(store), secrets).await, llm)
}

fn pending(store: &AlertStore) -> u64 {
    store.tallies().0["pending"]
}

#[tokio::test]
async fn ten_thousand_unique_keys_from_one_source_are_refused_once_the_pending_cap_is_reached() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits { source_rate_per_minute: 100_000, max_pending_jobs: 1000 };
    let store =
        Arc::new(AlertStore::open_with(&dir.path().join("alerts.jsonl"), limits, &|_| "default".into()).unwrap());
    let (server, _llm) = serve(store.clone(), dir.path()).await;
    let url = format!("{}/api/v1/alerts/ops/gen/webhook", server.url);
    let (mut accepted, mut refused) = (0, 0);
    for delivery in 0..100 {
        let answer = post(&url, &unique_alerts(&format!("d{delivery}"), 100)).await;
        match answer.status {
            202 => accepted += 1,
            503 => {
                refused += 1;
                assert!(answer.retry_after.is_some_and(|s| s >= 1), "503 says when to retry");
                let message = answer.body["error"]["message"].as_str().unwrap_or_default().to_string();
                assert!(message.contains("alert-pending-jobs"), "the message names the setting: {message}");
            }
            other => panic!("delivery {delivery}: {other} {}", answer.body),
        }
    }
    println!("10,000 unique keys: {accepted} deliveries accepted, {refused} refused, {} jobs pending", pending(&store));
    assert_eq!(accepted, 10, "the cap of 1000 pending jobs admits ten deliveries of 100");
    assert_eq!(refused, 90);
    assert_eq!(pending(&store), 1000, "pending jobs stay bounded by alert_pending_jobs");
    assert_eq!(store.pending_jobs(), 1000);
    let metrics = reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    let line = "akritas_alert_rejections_total{source=\"ops/gen\",reason=\"pending_jobs\"} 90";
    assert!(metrics.contains(line), "{line} missing in\n{metrics}");
}

#[tokio::test]
async fn a_source_over_its_rate_gets_503_and_its_retry_is_then_accepted_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(AlertStore::open(&dir.path().join("alerts.jsonl")).unwrap());
    let (server, _llm) = serve(store.clone(), dir.path()).await;
    let url = format!("{}/api/v1/alerts/gen/webhook", server.url);
    let mut refused = None;
    let mut accepted = 0;
    for n in 0..200 {
        let body = unique_alerts(&format!("r{n}"), 1);
        let answer = post(&url, &body).await;
        match answer.status {
            202 => accepted += 1,
            503 => {
                refused = Some((body, answer));
                break;
            }
            other => panic!("delivery {n}: {other} {}", answer.body),
        }
    }
    let (body, answer) = refused.expect("the default rate of 60 new investigations per minute is enforced");
    println!("accepted {accepted} deliveries before the first 503: {}", answer.body);
    assert!(accepted >= 60, "a full minute's worth is admitted at once");
    let message = answer.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("ops/gen") && message.contains("alert-source-rate"), "{message}");
    let wait = answer.retry_after.expect("Retry-After");
    let before = pending(&store);

    // Nothing of the refused delivery was stored: its retry opens its incident once.
    tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
    let retried = post(&url, &body).await;
    assert_eq!(retried.status, 202, "{}", retried.body);
    assert_eq!(retried.body["events"][0]["status"], "accepted");
    let again = post(&url, &body).await;
    assert_eq!(again.status, 200, "a second retry is a duplicate: {}", again.body);
    assert_eq!(again.body["events"][0]["event_id"], retried.body["events"][0]["event_id"]);
    assert_eq!(pending(&store), before + 1);

    let metrics = reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    let line = "akritas_alert_rejections_total{source=\"ops/gen\",reason=\"rate\"} ";
    assert!(metrics.lines().any(|l| l.starts_with(line)), "{line} missing in\n{metrics}");
}

fn am(body: &str) -> Vec<akritas::alerts::Event> {
    let context = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    adapter("alertmanager").unwrap().decode(body.as_bytes(), &context).unwrap()
}

#[tokio::test]
async fn alerts_of_one_correlation_key_share_one_job_while_it_waits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.jsonl");
    let store = AlertStore::open(&path).unwrap();

    // Within one delivery: two firing alerts of one correlation key, one incident, one job.
    let context = DecodeContext { source_type: "generic", source_name: "gen", observed_at: jiff::Timestamp::now() };
    let body = json!({"schema_version": 1, "alerts": [
        {"state": "firing", "name": "HighCPU", "summary": "cpu", "entity": {"kind": "host", "id": "db-1"}, "correlation_key": "db-1"},
        {"state": "firing", "name": "HighLoad", "summary": "load", "entity": {"kind": "host", "id": "db-1"}, "correlation_key": "db-1"}
    ]});
    let events = adapter("generic").unwrap().decode(body.to_string().as_bytes(), &context).unwrap();
    let batch = store.ingest("ops", "gen", events).await.unwrap();
    assert_eq!(batch.events.iter().filter(|e| e.job_id.is_some()).count(), 1);
    assert_eq!(batch.events[0].incident_id, batch.events[1].incident_id);

    // A flapping alert: fired, resolved, fired again while its job still waits.
    let first = store.ingest("ops", "am", am(FIRING)).await.unwrap();
    let job = first.events[0].job_id.clone().unwrap();
    store.ingest("ops", "am", am(RESOLVED)).await.unwrap();
    let refired =
        store.ingest("ops", "am", am(&FIRING.replace("2026-11-29T22:41:16Z", "2026-11-29T23:30:00Z"))).await.unwrap();
    let item = &refired.events[0];
    assert_eq!(item.status, "accepted");
    assert_ne!(item.incident_id, first.events[0].incident_id, "a new incident");
    assert_eq!(item.job_id, None, "no second job while the first one waits");
    let (incident, _, jobs) = store.incident(&item.incident_id).unwrap();
    assert_eq!(incident.last_job.as_deref(), Some(job.as_str()));
    assert_eq!(jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), [job.as_str()]);
    assert_eq!(pending(&store), 2, "one job for gen/db-1, one for the flapping alert");

    // The journal replays to the same decisions.
    drop(store);
    let reopened = AlertStore::open(&path).unwrap();
    assert_eq!(pending(&reopened), 2);
    assert_eq!(reopened.incident(&item.incident_id).unwrap().0.last_job.as_deref(), Some(job.as_str()));
}
