//! Fair shares of the alert worker between namespaces (docs/tenancy.md), on the real
//! `akritas serve`: one team's alert storm never delays another team's first investigation
//! (the worker takes due jobs round-robin across namespaces), and a namespace holds at most
//! `alert_pending_jobs_per_namespace` pending investigations, the rest deferred with the
//! setting named and counted in `akritas_refusals_total`.

use akritas_testkit as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use akritas::tools::{ToolName, openai_alias};
use serde_json::{Value, json};
use support::scripted_llm::{Reply, ScriptedLlm, Step, inconclusive_result, offers};
use support::{Server, serve_command};

/// Two teams, each with a generic AlertSource in its own namespace.
const SOURCES: &str = "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: gen, namespace: team-a}\n\
                       spec: {provider: generic, auth: {allowUnauthenticated: true}}\n---\n\
                       apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: gen, namespace: team-b}\n\
                       spec: {provider: generic, auth: {allowUnauthenticated: true}}\n";

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

/// A generic delivery of one firing alert per host, each its own incident.
fn alerts(hosts: &[String], severity: &str) -> String {
    let alerts: Vec<Value> = hosts
        .iter()
        .map(|host| {
            json!({"state": "firing", "name": "HighCPU", "summary": "CPU high", "severity": severity,
                   "entity": {"kind": "host", "id": host}, "started_at": "2026-11-29T22:40:00Z",
                   "correlation_key": host})
        })
        .collect();
    json!({"schema_version": 1, "alerts": alerts}).to_string()
}

fn hosts(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{prefix}-{n:02}")).collect()
}

/// A model that plans nothing and submits an inconclusive result, noting which of `hosts`
/// each investigation (its planning request) is about, in the order they reach it.
fn recorder(hosts: Vec<String>, seen: Arc<Mutex<Vec<String>>>) -> impl Fn(usize, &Value) -> Step + Send + Sync {
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    move |_, request| {
        let reply = if offers(request, &plan) {
            // The alert is in the request, escaped as JSON text; the names are all as long.
            let text = request.to_string();
            if let Some(host) = hosts.iter().find(|h| text.contains(h.as_str())) {
                seen.lock().unwrap().push(host.clone());
            }
            Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))])
        } else if offers(request, &submit) {
            Reply::ToolCalls(vec![("r".into(), submit.clone(), inconclusive_result())])
        } else {
            Reply::Content("Nothing conclusive.".into())
        };
        Step::from(reply)
    }
}

/// `akritas serve` with the two sources, the scripted model and `settings` (`AKRITAS_*` values).
async fn serve(llm: &ScriptedLlm, settings: &[(&str, &str)]) -> (Server, tempfile::TempDir) {
    let resources = tempfile::tempdir().unwrap();
    std::fs::write(resources.path().join("sources.yaml"), SOURCES).unwrap();
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command.env("AKRITAS_BASE_URL", &llm.url).arg("--resources").arg(resources.path());
    for (name, value) in settings {
        command.env(name, value);
    }
    let server = tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap();
    (server, resources)
}

async fn post(server: &Server, namespace: &str, body: String) -> Value {
    let url = format!("{}/api/v1/alerts/{namespace}/gen/webhook", server.url);
    let response =
        reqwest::Client::new().post(url).header("content-type", "application/json").body(body).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 202);
    response.json().await.unwrap()
}

/// The red team's storm: team A's 30 alerts were all investigated before team B's one
/// critical alert. Now, with one worker, team B's investigation is the next one taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_namespaces_alert_storm_never_delays_another_namespaces_first_investigation() {
    let (storm, theirs) = (hosts("a-host", 30), hosts("b-host", 1));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let everyone: Vec<String> = storm.iter().chain(&theirs).cloned().collect();
    let llm = ScriptedLlm::start_with(recorder(everyone, seen.clone())).await;
    let settings = [("AKRITAS_ALERT_WORKERS", "1"), ("AKRITAS_ALERT_SOURCE_RATE", "100000")];
    let (server, _resources) = serve(&llm, &settings).await;

    // Team A's first investigation reaches the model and is held there, so the rest of the
    // storm and team B's alert are all waiting when the worker takes its next job.
    llm.hold();
    post(&server, "team-a", alerts(&storm[..1], "warning")).await;
    support::wait_for("team A's first investigation at the model", Duration::from_secs(30), || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    for host in &storm[1..] {
        post(&server, "team-a", alerts(std::slice::from_ref(host), "warning")).await;
    }
    post(&server, "team-b", alerts(&theirs, "critical")).await;
    llm.release();

    let order = support::wait_for("the next investigations", Duration::from_secs(60), || async {
        let seen = seen.lock().unwrap();
        (seen.len() >= 3).then(|| seen.clone())
    })
    .await;
    assert_eq!(order[0], storm[0]);
    assert_eq!(order[1], theirs[0], "team B's alert is taken right after the job that was running: {order:?}");
    assert!(storm[1..].contains(&order[2]), "then team A's storm goes on: {order:?}");
}

/// Past `alert_pending_jobs_per_namespace`, a namespace's new alerts are still stored and
/// correlated; their investigations are deferred, naming the setting, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_past_its_pending_bound_has_its_new_investigations_deferred_and_counted() {
    let llm = ScriptedLlm::start_with(recorder(Vec::new(), Arc::default())).await;
    // Nothing finishes while the test looks: the first investigation waits at the model.
    llm.hold();
    let settings = [
        ("AKRITAS_ALERT_WORKERS", "1"),
        ("AKRITAS_ALERT_SOURCE_RATE", "100000"),
        ("AKRITAS_ALERT_PENDING_JOBS_PER_NAMESPACE", "4"),
    ];
    let (server, _resources) = serve(&llm, &settings).await;
    let storm = post(&server, "team-a", alerts(&hosts("a-host", 10), "warning")).await;
    let events = storm["events"].as_array().unwrap();
    assert!(events.iter().all(|e| e["status"] == "accepted" && e["job_id"].is_string()), "{storm}");
    let deferred: Vec<&Value> = events.iter().filter(|e| e["deferred"] == true).collect();
    assert_eq!(deferred.len(), 6, "4 pending, the other 6 deferred: {storm}");
    assert!(deferred.iter().all(|e| e["deferred_by"] == "alert_pending_jobs_per_namespace"), "{storm}");

    let theirs = post(&server, "team-b", alerts(&hosts("b-host", 1), "critical")).await;
    assert_eq!(theirs["events"][0].get("deferred"), None, "another namespace's bound is its own: {theirs}");

    let client = reqwest::Client::new();
    let incidents: Value =
        client.get(format!("{}/api/v1/incidents", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(incidents["incidents"].as_array().unwrap().len(), 11, "every alert is an Incident: {incidents}");
    let metrics = client.get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    let line = "akritas_refusals_total{pool=\"alert_investigations\",setting=\"alert_pending_jobs_per_namespace\",\
                namespace=\"team-a\"} 6";
    assert!(metrics.contains(line), "{line} missing in\n{metrics}");
    assert!(!metrics.contains("namespace=\"team-b\"} "), "team B was refused nothing:\n{metrics}");
    llm.release();
}
