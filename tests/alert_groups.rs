//! Big Alertmanager groups are never refused for their size (Alertmanager does not
//! retry a 4xx, so a refused group is lost): a 1,000-alert group is accepted whole,
//! every alert becomes an event of its Incident, the provider's `truncatedAlerts` is
//! kept in the journal record and shown in the response and the source's status, and a
//! delivery too big for one journal record is kept in several and replays whole.

use akritas_testkit as support;

use std::sync::Arc;

use akritas::alerts::adapters::{DecodeContext, adapter};
use akritas::alerts::store::AlertStore;
use akritas::catalog::secrets::EnvSecrets;
use akritas::web::auth::ApiKeys;
use serde_json::Value;
use support::host;
use support::scripted_llm::ScriptedLlm;

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const TOKEN: &str = "am-token-0123456789";

/// A group as Alertmanager sends it for a node going down: `n` alerts sharing the
/// group labels, each with its own pod, fingerprint and annotations.
fn group(alerts: std::ops::Range<usize>, truncated: u64, description_bytes: usize) -> Value {
    let mut body: Value = serde_json::from_str(FIRING).unwrap();
    let alert = body["alerts"][0].clone();
    body["alerts"] = alerts
        .map(|i| {
            let mut a = alert.clone();
            a["labels"]["pod"] = format!("cart-7d9f-{i:05}").into();
            a["fingerprint"] = format!("{:016x}", 0x5400_0000_0000u64 + i as u64).into();
            a["annotations"]["summary"] = format!("Pod shop/cart-7d9f-{i:05} is crash looping").into();
            if description_bytes > 0 {
                a["annotations"]["description"] = "d".repeat(description_bytes).into();
            }
            a
        })
        .collect();
    body["commonLabels"] = serde_json::json!({"alertname": "KubePodCrashLooping", "namespace": "shop"});
    body["truncatedAlerts"] = truncated.into();
    body
}

#[tokio::test]
async fn a_thousand_alert_group_is_accepted_whole_with_its_truncation_recorded() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sources.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am, namespace: default}\n\
         spec: {provider: alertmanager, auth: {bearerToken: {env: AM_TOKEN}}}\n",
    )
    .unwrap();
    let llm = ScriptedLlm::start(vec![]).await;
    let catalog = host::catalog_from(dir.path());
    let engine = host::engine(&llm, host::settings(), host::standard_tools().0, catalog.clone(), None, None);
    let journal = dir.path().join("alerts.jsonl");
    let store = Arc::new(AlertStore::open(&journal).unwrap());
    let secrets = EnvSecrets::with_lookup(|name: &str| (name == "AM_TOKEN").then(|| TOKEN.to_string()));
    let server = host::serve_with(engine, catalog, ApiKeys::default(), Some(store.clone()), Arc::new(secrets)).await;
    let client = reqwest::Client::new();

    let body = group(0..1_000, 37, 0).to_string();
    println!("1,000-alert Alertmanager group: {} bytes", body.len());
    let response = client
        .post(format!("{}/api/v1/alertmanager/webhook", server.url))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let accepted: Value = response.json().await.unwrap();
    let events = accepted["events"].as_array().unwrap();
    assert_eq!(events.len(), 1_000, "every alert is stored");
    assert!(events.iter().all(|e| e["status"] == "accepted"));
    assert_eq!(accepted["truncated"], serde_json::json!({"by_provider": 37, "by_host": 0}));

    let incidents: Value =
        client.get(format!("{}/api/v1/incidents?limit=1000", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(incidents["incidents"].as_array().unwrap().len(), 1_000, "one Incident per alert");
    let event_id = events[999]["event_id"].as_str().unwrap();
    let event: Value = client
        .get(format!("{}/api/v1/alert-events/{event_id}", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(event["event"]["labels"]["pod"], "cart-7d9f-00999");

    // The AlertSource status (`/api/v1/resources`) shows these counters.
    let counters = store.counters("default/am");
    assert_eq!((counters.accepted, counters.truncated_by_provider, counters.truncated_by_host), (1_000, 37, 0));

    let text = std::fs::read_to_string(&journal).unwrap();
    let deliveries: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == "alerts.delivery")
        .collect();
    assert_eq!(deliveries.len(), 1, "a real-shaped group of 1,000 fits one record");
    assert_eq!(deliveries[0]["data"]["truncated"]["by_provider"], 37, "the truncation is journaled");
}

/// The events of alerts `0..n` with `description_bytes` descriptions, decoded 200 at a
/// time (each body under the adapter's 1 MiB).
fn events(n: usize, description_bytes: usize) -> Vec<akritas::alerts::Event> {
    let context = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    (0..n)
        .step_by(200)
        .flat_map(|start| {
            let body = group(start..(start + 200).min(n), 0, description_bytes).to_string();
            adapter("alertmanager").unwrap().decode(body.as_bytes(), &context).unwrap()
        })
        .collect()
}

#[tokio::test]
async fn a_delivery_over_one_record_is_kept_in_several_and_replays_whole() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("alerts.jsonl");
    // 2,000 alerts with 2 KiB descriptions: about 6 MB of events, over the 4 MiB record limit.
    let store = AlertStore::open(&journal).unwrap();
    let accepted = store.ingest_batch("ops", "am", events(2_000, 2048), 5).await.unwrap();
    assert_eq!(accepted.events.len(), 2_000);
    drop(store);

    let text = std::fs::read_to_string(&journal).unwrap();
    let parts: Vec<Value> = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect();
    assert!(parts.len() > 1, "kept in several records");
    assert!(parts.iter().all(|p| p["data"]["delivery_id"] == accepted.delivery_id.as_str()));
    println!("2,000-alert delivery of {} bytes kept in {} records", text.len(), parts.len());
    akritas::journal::verify(&journal).unwrap();

    let reopened = AlertStore::open(&journal).unwrap();
    assert_eq!(reopened.incidents(1000).await.unwrap().len(), 1000);
    assert_eq!(reopened.counters("ops/am").accepted, 2_000, "every event replays");
    let last = accepted.events.last().unwrap();
    assert_eq!(reopened.event(&last.event_id).await.unwrap().unwrap().event.labels["pod"], "cart-7d9f-01999");
}

#[tokio::test]
async fn raising_max_body_bytes_admits_a_group_bigger_than_one_mebibyte() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sources.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am, namespace: ops}\n\
         spec: {provider: alertmanager, auth: {bearerToken: {env: AM_TOKEN}}}\n",
    )
    .unwrap();
    let llm = ScriptedLlm::start(vec![]).await;
    let catalog = host::catalog_from(dir.path());
    let engine = Arc::new(host::engine(&llm, host::settings(), host::standard_tools().0, catalog.clone(), None, None));
    let store = Arc::new(AlertStore::open(&dir.path().join("alerts.jsonl")).unwrap());
    let secrets = EnvSecrets::with_lookup(|name: &str| (name == "AM_TOKEN").then(|| TOKEN.to_string()));
    // max_body_bytes = 8 MiB, as an operator would set it for large groups.
    let state = host::app_state(engine, catalog, ApiKeys::default(), Some(store), Arc::new(secrets), 8 << 20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(akritas::web::serve(
        listener,
        akritas::web::router(state),
        cancel.clone(),
        std::time::Duration::from_secs(1),
    ));
    let body = group(0..1_500, 0, 2048).to_string();
    assert!(body.len() > 1 << 20, "the group is over the default limit: {} bytes", body.len());
    let response = reqwest::Client::new()
        .post(format!("{url}/api/v1/alerts/ops/am/webhook"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let accepted: Value = response.json().await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["events"].as_array().unwrap().len(), 1_500);
    cancel.cancel();
}
