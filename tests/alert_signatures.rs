//! Signed alert deliveries on the real `akritas serve`: an AlertSource whose HMAC covers a
//! timestamp (`hmacTimestampHeader`, Grafana's `{timestamp}:{body}` format) refuses a delivery
//! replayed at once, after a restart, or signed more than 5 minutes ago (401, saying what to
//! send); a source signing only the body works as before.

use akritas_testkit as support;

use std::path::Path;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use support::{Server, serve_command};

const GRAFANA: &str = include_str!("fixtures/grafana/grafana-webhook-firing.json");
const SECRET: &str = "grafana-hmac-secret-0123456789";
const TIMESTAMP_HEADER: &str = "X-Grafana-Alerting-Timestamp";

/// A Grafana source that signs a timestamp, and a generic one that signs the body only.
const SOURCES: &str = "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: grafana, namespace: ops}\n\
                       spec: {provider: grafana, auth: {hmacSecret: {env: SIG_SECRET}, \
                       hmacTimestampHeader: X-Grafana-Alerting-Timestamp}}\n---\n\
                       apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: legacy, namespace: ops}\n\
                       spec: {provider: generic, auth: {hmacSecret: {env: SIG_SECRET}}}\n";

fn hmac_hex(message: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(message);
    hex::encode(mac.finalize().into_bytes())
}

/// The headers Grafana sends with HMAC and a timestamp header: the bare hex HMAC of
/// `{timestamp}:{body}` (its `Header` set to `X-Akritas-Signature`) and the timestamp.
fn grafana_headers(at: i64, body: &str) -> Vec<(&'static str, String)> {
    vec![("x-akritas-signature", hmac_hex(format!("{at}:{body}").as_bytes())), (TIMESTAMP_HEADER, at.to_string())]
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

async fn serve(data: &Path, resources: &Path) -> Server {
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .env("AKRITAS_DATA_DIR", data)
        .env("AKRITAS_RESOURCE_ENV", "ops/SIG_*")
        .env("SIG_SECRET", SECRET)
        // Nothing is investigated here: the model is never reached.
        .env("AKRITAS_BASE_URL", "http://127.0.0.1:9/v1")
        .arg("--resources")
        .arg(resources);
    tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap()
}

async fn post(server: &Server, source: &str, body: &str, headers: &[(&str, String)]) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/api/v1/alerts/ops/{source}/webhook", server.url))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

fn message(answer: &Value) -> &str {
    answer["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_delivery_replayed_or_signed_long_ago_is_refused() {
    let (data, resources) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(resources.path().join("sources.yaml"), SOURCES).unwrap();
    let server = serve(data.path(), resources.path()).await;

    let at = now();
    let signed = grafana_headers(at, GRAFANA);
    let (status, accepted) = post(&server, "grafana", GRAFANA, &signed).await;
    assert_eq!(status, 202, "a fresh signed delivery is taken: {accepted}");

    let (status, replayed) = post(&server, "grafana", GRAFANA, &signed).await;
    assert_eq!(status, 401, "the same bytes again: {replayed}");
    assert!(message(&replayed).contains("already accepted"), "{replayed}");

    let old = grafana_headers(now() - 600, GRAFANA);
    let (status, expired) = post(&server, "grafana", GRAFANA, &old).await;
    assert_eq!(status, 401, "validly signed ten minutes ago: {expired}");
    assert!(message(&expired).contains("X-Grafana-Alerting-Timestamp is more than 5 minutes"), "{expired}");

    let body_only = [("x-akritas-signature", hmac_hex(GRAFANA.as_bytes()))];
    let (status, unstamped) = post(&server, "grafana", GRAFANA, &body_only).await;
    assert_eq!(status, 401, "a signature without its timestamp: {unstamped}");
    assert!(message(&unstamped).contains("missing or malformed X-Grafana-Alerting-Timestamp"), "{unstamped}");
    let mut moved = signed.clone();
    moved[1].1 = (at + 1).to_string();
    let (status, _) = post(&server, "grafana", GRAFANA, &moved).await;
    assert_eq!(status, 401, "the timestamp is part of what is signed");

    let metrics = reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    let line = "akritas_alert_events_total{source=\"ops/grafana\",outcome=\"rejected\"} 4";
    assert!(metrics.contains(line), "{line} missing in\n{metrics}");
    let journal = std::fs::read_to_string(data.path().join("alerts/alerts.jsonl")).unwrap();
    assert_eq!(journal.matches("\"kind\":\"alerts.delivery\"").count(), 1, "only the first delivery is stored");

    // The signatures accepted are journaled with their deliveries: a restart remembers them.
    drop(server);
    let server = serve(data.path(), resources.path()).await;
    let (status, replayed) = post(&server, "grafana", GRAFANA, &signed).await;
    assert_eq!(status, 401, "replayed after a restart: {replayed}");
    let (status, _) = post(&server, "grafana", GRAFANA, &grafana_headers(at + 1, GRAFANA)).await;
    assert_eq!(status, 200, "signed anew, the same alerts are taken (as duplicates)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_signing_only_the_body_keeps_working_as_before() {
    let (data, resources) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(resources.path().join("sources.yaml"), SOURCES).unwrap();
    let server = serve(data.path(), resources.path()).await;
    let body = r#"{"schema_version": 1, "alerts": [{"state": "firing", "name": "HighCPU", "summary": "CPU high",
                   "entity": {"kind": "host", "id": "db-1"}, "started_at": "2026-11-29T22:40:00Z",
                   "correlation_key": "db-1"}]}"#;
    let signature = [("x-akritas-signature", format!("sha256={}", hmac_hex(body.as_bytes())))];
    assert_eq!(post(&server, "legacy", body, &signature).await.0, 202);
    let (status, again) = post(&server, "legacy", body, &signature).await;
    assert_eq!(status, 200, "sent again, the alert is a duplicate as before, not refused: {again}");
    assert_eq!(again["events"][0]["status"], "duplicate");
    let (status, wrong) = post(&server, "legacy", body, &[("x-akritas-signature", "sha256=00".into())]).await;
    assert_eq!(status, 401);
    assert!(message(&wrong).contains("HMAC-SHA256 of the body"), "says what to sign: {wrong}");
}
