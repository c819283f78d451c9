//! Admission of alert investigations: a valid delivery is always stored and correlated,
//! whatever its size and however many came before it; only its investigations are shed. A
//! source starts at most `alert_source_rate` investigations per minute and the host keeps at
//! most `alert_pending_jobs` waiting for a worker; the other new jobs are deferred (visible on
//! their incidents) and promoted most severe first, then oldest; past `alert_deferred_jobs`
//! per source the rest of a storm shares one storm job that counts its incidents. Alerts of
//! one correlation key share one job.

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

fn tally(store: &AlertStore, status: &str) -> u64 {
    store.tallies().0[status]
}

/// The storm that got 503 before: 13 small deliveries, then one 300-alert group, with the
/// default limits (60 investigations a minute, 1000 pending, 100 pending per namespace, 100
/// deferred per source).
#[tokio::test]
async fn an_alert_storm_is_stored_whole_and_only_its_investigations_wait() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(AlertStore::open(&dir.path().join("alerts.jsonl")).unwrap());
    let (server, _llm) = serve(store.clone(), dir.path()).await;
    let url = format!("{}/api/v1/alerts/ops.gen/webhook", server.url);
    let first = std::time::Instant::now();
    for n in 0..13 {
        let answer = post(&url, &unique_alerts(&format!("small{n}"), 1)).await;
        assert_eq!(answer.status, 202, "{}", answer.body);
    }
    let storm = post(&url, &unique_alerts("storm", 300)).await;
    // The bucket refills a token a second while the deliveries go in.
    let refilled = first.elapsed().as_secs() as usize + 1;
    assert_eq!(storm.status, 202, "a storm is stored, never refused: {}", storm.body);
    assert_eq!(storm.retry_after, None);
    let events = storm.body["events"].as_array().unwrap();
    assert_eq!(events.len(), 300);
    assert!(events.iter().all(|e| e["status"] == "accepted"), "every alert stored");
    let started = events.iter().filter(|e| e["job_id"].is_string() && e.get("deferred").is_none()).count();
    let deferred = events.iter().filter(|e| e["deferred"] == true).count();
    let stormed: Vec<&Value> = events.iter().filter(|e| e["storm"] == true).collect();
    println!(
        "300-alert storm after 13 alerts: {started} started, {deferred} deferred, {} in the storm job",
        stormed.len()
    );
    assert!((47..=47 + refilled).contains(&started), "the rest of the minute's 60 tokens: {started}");
    assert_eq!(deferred, 101, "100 deferred, and the storm job itself");
    let count = 300 - started - 100;
    assert_eq!(stormed.len(), count, "the rest share the storm job");
    let storm_job = stormed[0]["job_id"].as_str().expect("the first one over the bound opens the storm job");
    assert!(stormed[1..].iter().all(|e| e["shared_job"] == storm_job), "the rest share it");
    let (incidents, pending, waiting) =
        (store.tallies().1["firing"], tally(&store, "pending"), tally(&store, "deferred"));
    assert_eq!((incidents, pending, waiting), (313, 13 + started as u64, 101));

    // Visible on each incident: a deferred job, and the storm job with its count.
    let client = reqwest::Client::new();
    let incident = |e: &Value| format!("{}/api/v1/incidents/{}", server.url, e["incident_id"].as_str().unwrap());
    let first_deferred = events.iter().find(|e| e["deferred"] == true).unwrap();
    let detail: Value = client.get(incident(first_deferred)).send().await.unwrap().json().await.unwrap();
    assert_eq!(detail["jobs"][0]["status"], "deferred", "{detail}");
    let last = stormed.last().unwrap();
    let detail: Value = client.get(incident(last)).send().await.unwrap().json().await.unwrap();
    assert_eq!(detail["jobs"][0]["id"], storm_job, "{detail}");
    assert_eq!(
        (&detail["jobs"][0]["status"], &detail["jobs"][0]["storm_incidents"]),
        (&json!("deferred"), &json!(count))
    );
    let (incident, _, jobs) = store.incident(last["incident_id"].as_str().unwrap()).await.unwrap().unwrap();
    let projected = akritas::operator::projection::incident_status(&incident, &jobs);
    assert_eq!(
        projected["job"],
        json!({"status": "deferred", "stormIncidents": count}),
        "the Incident object shows it"
    );
    let (turns, _) = akritas::alerts::request::rebuilt_input(&store, storm_job).await.unwrap();
    assert!(turns[0].content.contains(&format!("\"incidents\": {count}")), "the storm investigation is told its size");

    let metrics = reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    for line in [
        "akritas_alert_investigations_shed_total{source=\"ops/gen\",how=\"deferred\"} 101".to_string(),
        format!("akritas_alert_investigations_shed_total{{source=\"ops/gen\",how=\"coalesced\"}} {count}"),
        "akritas_investigation_jobs{status=\"deferred\"} 101".to_string(),
    ] {
        assert!(metrics.contains(&line), "{line} missing in\n{metrics}");
    }

    // The journal replays to the same decisions, storm count included (a copy: the server
    // keeps the journal open).
    let copy = tempfile::tempdir().unwrap();
    support::copy_dir(dir.path(), copy.path());
    // The namespace's pending room as big as the host's, so only the tokens decide below.
    let roomy = Limits { max_pending_per_namespace: 1000, ..Limits::default() };
    let reopened = AlertStore::open_with(&copy.path().join("alerts.jsonl"), roomy, &|_| "default".into()).unwrap();
    assert_eq!((tally(&reopened, "pending"), tally(&reopened, "deferred")), (13 + started as u64, 101));
    assert_eq!(reopened.job(storm_job).await.unwrap().unwrap().storm_incidents, Some(count as u64));
    // Tokens are not journaled: a restart starts with a full minute's 60, then the storm goes on.
    let after = adapter("generic").unwrap().decode(unique_alerts("after", 61).as_bytes(), &generic()).unwrap();
    let more = reopened.ingest("ops", "gen", after).await.unwrap();
    assert_eq!(more.events.iter().filter(|e| e.job_id.is_some() && !e.deferred).count(), 60);
    assert_eq!(more.events[60].shared_job.as_deref(), Some(storm_job), "the storm job still counts after a restart");
    assert_eq!(reopened.job(storm_job).await.unwrap().unwrap().storm_incidents, Some(count as u64 + 1));
}

fn generic() -> DecodeContext<'static> {
    DecodeContext { source_type: "generic", source_name: "gen", observed_at: jiff::Timestamp::now() }
}

fn alert(key: &str, severity: &str) -> Vec<akritas::alerts::Event> {
    let body = json!({"schema_version": 1, "alerts": [{"state": "firing", "name": "HighCPU", "summary": "cpu",
        "severity": severity, "entity": {"kind": "host", "id": key}, "correlation_key": key}]});
    adapter("generic").unwrap().decode(body.to_string().as_bytes(), &generic()).unwrap()
}

#[tokio::test]
async fn deferred_investigations_start_most_severe_first_then_oldest() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        source_rate_per_minute: 100_000,
        max_pending_jobs: 1,
        max_pending_per_namespace: 1,
        max_deferred_per_source: 10,
    };
    let store = AlertStore::open_with(&dir.path().join("alerts.jsonl"), limits, &|_| "ops".into()).unwrap();
    let mut jobs = Vec::new();
    for (key, severity) in [("first", "info"), ("a", "warning"), ("b", "critical"), ("c", "warning"), ("d", "info")] {
        let accepted = store.ingest("ops", "gen", alert(key, severity)).await.unwrap();
        jobs.push((key, accepted.events[0].job_id.clone().unwrap(), accepted.events[0].deferred));
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let deferred: Vec<bool> = jobs.iter().map(|(_, _, d)| *d).collect();
    assert_eq!(deferred, [false, true, true, true, true], "past alert_pending_jobs they wait");
    assert_eq!(store.promote_deferred().await.unwrap(), 0, "no room while one is pending");
    let mut order = Vec::new();
    let mut running = jobs[0].1.clone();
    for _ in 0..4 {
        let mut job = store.job(&running).await.unwrap().unwrap();
        store.step(&mut job, akritas::alerts::store::Step::Start).await.unwrap();
        assert_eq!(store.promote_deferred().await.unwrap(), 1, "room for one");
        let promoted = store.due_jobs(jiff::Timestamp::now(), &Default::default(), 10).0;
        running = promoted[0].id.clone();
        order.push(jobs.iter().find(|(_, id, _)| *id == running).unwrap().0);
    }
    assert_eq!(order, ["b", "a", "c", "d"]);
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
    let (incident, _, jobs) = store.incident(&item.incident_id).await.unwrap().unwrap();
    assert_eq!(incident.last_job.as_deref(), Some(job.as_str()));
    assert_eq!(jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), [job.as_str()]);
    assert_eq!(tally(&store, "pending"), 2, "one job for gen/db-1, one for the flapping alert");

    // The journal replays to the same decisions.
    drop(store);
    let reopened = AlertStore::open(&path).unwrap();
    assert_eq!(tally(&reopened, "pending"), 2);
    assert_eq!(reopened.incident(&item.incident_id).await.unwrap().unwrap().0.last_job.as_deref(), Some(job.as_str()));
}

/// One tenant's storm does not shed another's investigations: rates, deferred jobs and storm
/// jobs are per AlertSource `namespace/name`, even for sources of one name.
#[tokio::test]
async fn a_storm_of_one_namespace_never_defers_or_coalesces_another_namespaces_alerts() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        source_rate_per_minute: 1,
        max_pending_jobs: 1000,
        max_pending_per_namespace: 1000,
        max_deferred_per_source: 1,
    };
    let store = AlertStore::open_with(&dir.path().join("alerts.jsonl"), limits, &|_| "ops".into()).unwrap();
    let body = unique_alerts("a", 4);
    let storm = store.ingest("team-a", "gen", adapter("generic").unwrap().decode(body.as_bytes(), &generic()).unwrap());
    let storm = storm.await.unwrap();
    let shed: Vec<(bool, bool)> = storm.events.iter().map(|e| (e.deferred, e.storm)).collect();
    assert_eq!(shed, [(false, false), (true, false), (true, true), (false, true)], "started, deferred, storm, shared");
    let other = adapter("generic").unwrap().decode(unique_alerts("a", 1).as_bytes(), &generic()).unwrap();
    let other = store.ingest("team-b", "gen", other).await.unwrap();
    let event = &other.events[0];
    assert!(event.job_id.is_some() && !event.deferred && !event.storm, "team-b's alert starts at once: {event:?}");
    assert_eq!(event.shared_job, None);
}
