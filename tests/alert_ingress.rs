//! Alert ingress: per-source authentication (Bearer, HMAC over the exact body),
//! the real Alertmanager payloads, dedup and correlation into Incidents with an
//! investigation job, one durable journal record per delivery, and restart.

use akritas_testkit as support;

use std::sync::Arc;

use akritas::alerts::store::{AlertStore, JobStatus};
use akritas::catalog::secrets::EnvSecrets;
use akritas::web::auth::ApiKeys;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use support::host;
use support::scripted_llm::ScriptedLlm;

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const RESOLVED: &str = include_str!("fixtures/alertmanager/alertmanager-webhook-resolved.json");
const TOKEN: &str = "am-token-0123456789";
const HMAC_SECRET: &str = "hmac-secret-0123456789";

fn sources(dir: &std::path::Path) {
    std::fs::write(
        dir.join("sources.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am, namespace: ops}\n\
         spec: {provider: alertmanager, auth: {bearerToken: {env: AM_TOKEN}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: signed, namespace: ops}\n\
         spec: {provider: generic, auth: {hmacSecret: {env: HOOK_HMAC}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: broken, namespace: ops}\n\
         spec: {provider: alertmanager, auth: {bearerToken: {env: UNSET_TOKEN}}}\n",
    )
    .unwrap();
}

async fn start(data: &std::path::Path, manifests: &std::path::Path) -> (host::Host, ScriptedLlm) {
    let llm = ScriptedLlm::start(vec![]).await;
    let catalog = host::catalog_from(manifests);
    let (tools, _) = host::standard_tools();
    let engine = host::engine(&llm, host::settings(), tools, catalog.clone(), None, None);
    let store = Arc::new(AlertStore::open(&data.join("alerts.jsonl")).unwrap());
    let secrets = EnvSecrets::with_lookup(|name: &str| match name {
        "AM_TOKEN" => Some(TOKEN.to_string()),
        "HOOK_HMAC" => Some(HMAC_SECRET.to_string()),
        _ => None,
    });
    let server = host::serve_with(engine, catalog, ApiKeys::default(), Some(store), Arc::new(secrets)).await;
    (server, llm)
}

async fn post(url: &str, body: &str, headers: &[(&str, String)]) -> (u16, Value) {
    let mut request =
        reqwest::Client::new().post(url).body(body.to_string()).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn get(url: &str) -> Value {
    reqwest::Client::new().get(url).send().await.unwrap().json().await.unwrap()
}

fn bearer() -> Vec<(&'static str, String)> {
    vec![("authorization", format!("Bearer {TOKEN}"))]
}

#[tokio::test]
async fn alertmanager_deliveries_are_authenticated_deduplicated_correlated_and_durable() {
    let dir = tempfile::tempdir().unwrap();
    sources(dir.path());
    let (server, llm) = start(dir.path(), dir.path()).await;
    let url = format!("{}/api/v1/alerts/ops.am/webhook", server.url);

    assert_eq!(post(&url, FIRING, &[]).await.0, 401);
    assert_eq!(post(&url, FIRING, &[("authorization", "Bearer wrong-token-0000".into())]).await.0, 401);
    let (status, broken) = post(&format!("{}/api/v1/alerts/ops.broken/webhook", server.url), FIRING, &bearer()).await;
    assert_eq!(status, 503, "{broken}");
    assert!(!broken.to_string().contains("UNSET_TOKEN"), "the error names no secret reference to callers");
    assert_eq!(post(&format!("{}/api/v1/alerts/nope/webhook", server.url), FIRING, &bearer()).await.0, 404);
    let (status, body) = post(&url, &FIRING.replace("\"version\": \"4\"", "\"version\": \"3\""), &bearer()).await;
    assert_eq!(status, 400, "{body}");

    let (status, first) = post(&url, FIRING, &bearer()).await;
    assert_eq!(status, 202, "{first}");
    let item = &first["events"][0];
    assert_eq!(item["status"], "accepted");
    let incident_id = item["incident_id"].as_str().unwrap().to_string();
    let job_id = item["job_id"].as_str().unwrap().to_string();

    let (status, again) = post(&url, FIRING, &bearer()).await;
    assert_eq!(status, 200, "a repeated delivery is a duplicate");
    assert_eq!(again["events"][0]["status"], "duplicate");
    assert_eq!(again["events"][0]["event_id"], item["event_id"]);

    let incident_url = format!("{}/api/v1/incidents/{incident_id}", server.url);
    let detail = get(&incident_url).await;
    assert_eq!(detail["incident"]["state"], "firing");
    assert_eq!(detail["jobs"][0]["id"], job_id.as_str());
    assert_eq!(detail["jobs"][0]["status"], "pending");

    let (status, resolved) = post(&url, RESOLVED, &bearer()).await;
    assert_eq!(status, 202, "{resolved}");
    assert_eq!(resolved["events"][0]["incident_id"], incident_id.as_str());
    let detail = get(&incident_url).await;
    assert_eq!(detail["incident"]["state"], "resolved");
    assert_eq!(llm.chat_requests(), 0, "ingestion never calls the model");
    let metrics = reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    for line in [
        "akritas_alert_events_total{source=\"ops/am\",outcome=\"accepted\"} 2",
        "akritas_alert_events_total{source=\"ops/am\",outcome=\"duplicate\"} 1",
        "akritas_alert_events_total{source=\"ops/am\",outcome=\"rejected\"} 3",
        "akritas_investigation_jobs{status=\"pending\"} 1",
        "akritas_incidents{state=\"resolved\"} 1",
        "akritas_catalog_resources{kind=\"AlertSource\"} 3",
    ] {
        assert!(metrics.contains(line), "{line} missing in\n{metrics}");
    }

    // Restart: the journal replays to the same state.
    drop(server);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let reopened = AlertStore::open(&dir.path().join("alerts.jsonl")).unwrap();
    let (incident, events, jobs) = reopened.incident(&incident_id).await.unwrap().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(jobs[0].status, JobStatus::Pending);
    assert_eq!(serde_json::to_value(&incident).unwrap()["state"], "resolved");
    assert_eq!(reopened.unfinished_jobs().len(), 1);
}

#[tokio::test]
async fn hmac_signatures_cover_the_exact_body() {
    let dir = tempfile::tempdir().unwrap();
    sources(dir.path());
    let (server, _llm) = start(dir.path(), dir.path()).await;
    let url = format!("{}/api/v1/alerts/ops.signed/webhook", server.url);
    let body = include_str!("fixtures/generic/generic-batch.json");
    let mut mac = Hmac::<Sha256>::new_from_slice(HMAC_SECRET.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(post(&url, body, &[("x-akritas-signature", "sha256=00".into())]).await.0, 401);
    assert_eq!(post(&url, &body.replace("db-1", "db-9"), &[("x-akritas-signature", signature.clone())]).await.0, 401);
    let (status, accepted) = post(&url, body, &[("x-akritas-signature", signature)]).await;
    assert_eq!(status, 202, "a valid signature over the exact body is accepted: {accepted}");
    assert_eq!(accepted["events"][0]["status"], "accepted");
}
