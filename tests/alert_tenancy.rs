//! Tenancy of the alert pipeline (docs/architecture.md, Tenancy): an AlertSource affects only
//! Incidents, Runs and receivers of its own namespace (plus shared namespaces), and
//! the Alertmanager alias is authenticated by the AlertSource alone.

use akritas_testkit as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use akritas::alerts::adapters::{DecodeContext, adapter};
use akritas::alerts::store::{AlertStore, Job, JobStatus};
use akritas::alerts::worker::{Worker, WorkerSettings};
use akritas::audit::{AuditLog, RunId};
use akritas::catalog::secrets::EnvSecrets;
use akritas::catalog::status::StatusBoard;
use akritas::config::ApiKeyRef;
use akritas::notify::RetryPolicy;
use akritas::tenancy::Tenancy;
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step};
use tokio_util::sync::CancellationToken;

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const TOKEN_A: &str = "team-a-token-0123456789";
const TOKEN_B: &str = "team-b-token-0123456789";
const API_KEY: &str = "ops-key-0123456789abcdef";

fn source(namespace: &str, name: &str, provider: &str, env: &str) -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         spec: {{provider: {provider}, auth: {{bearerToken: {{env: {env}}}}}}}\n---\n"
    )
}

fn secrets() -> Arc<EnvSecrets<impl Fn(&str) -> Option<String> + Send + Sync>> {
    Arc::new(EnvSecrets::with_lookup(|name: &str| match name {
        "TOKEN_A" => Some(TOKEN_A.to_string()),
        "TOKEN_B" => Some(TOKEN_B.to_string()),
        _ => None,
    }))
}

async fn post(url: &str, body: &str, token: Option<&str>) -> (u16, Value) {
    let mut request =
        reqwest::Client::new().post(url).header("content-type", "application/json").body(body.to_string());
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn serve(
    manifests: &std::path::Path,
    data: &std::path::Path,
    keys: ApiKeys,
) -> (host::Host, Arc<AlertStore>, ScriptedLlm) {
    let llm = ScriptedLlm::start(vec![]).await;
    let catalog = host::catalog_from(manifests);
    let engine = host::engine(&llm, host::settings(), host::standard_tools().0, catalog.clone(), None, None);
    let store = Arc::new(AlertStore::open(&data.join("alerts.jsonl")).unwrap());
    let server = host::serve_with(engine, catalog, keys, Some(store.clone()), secrets()).await;
    (server, store, llm)
}

#[tokio::test]
async fn identical_alerts_to_am_sources_in_two_namespaces_never_share_an_incident() {
    let dir = tempfile::tempdir().unwrap();
    let sources =
        source("team-a", "am", "alertmanager", "TOKEN_A") + &source("team-b", "am", "alertmanager", "TOKEN_B");
    std::fs::write(dir.path().join("sources.yaml"), sources).unwrap();
    let (server, store, _llm) = serve(dir.path(), dir.path(), ApiKeys::default()).await;
    let url = |path: &str| format!("{}/api/v1/alerts/{path}/webhook", server.url);

    // A plain name names the webhook namespace's (`default`) source: neither team's.
    let (status, missing) = post(&url("am"), FIRING, Some(TOKEN_A)).await;
    assert_eq!(status, 404, "{missing}");
    let message = missing["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("webhook_namespace") && message.contains("NAMESPACE.am"),
        "says what to post to: {message}"
    );
    let (status, missing) = post(&format!("{}/api/v1/alertmanager/webhook", server.url), FIRING, Some(TOKEN_A)).await;
    assert_eq!(status, 404, "the alias is the webhook namespace's source too: {missing}");

    let (status, a) = post(&url("team-a/am"), FIRING, Some(TOKEN_A)).await;
    assert_eq!(status, 202, "{a}");
    assert_eq!(post(&url("team-b/am"), FIRING, Some(TOKEN_A)).await.0, 401, "team-a's token is not team-b's");
    let (status, b) = post(&url("team-b/am"), FIRING, Some(TOKEN_B)).await;
    assert_eq!(status, 202, "the same alert in another namespace is not a duplicate: {b}");
    assert_ne!(a["events"][0]["incident_id"], b["events"][0]["incident_id"]);
    assert!(b["events"][0]["job_id"].is_string(), "team-b gets its own investigation: {b}");
    for (answer, namespace) in [(&a, "team-a"), (&b, "team-b")] {
        let id = answer["events"][0]["incident_id"].as_str().unwrap();
        let (incident, _, jobs) = store.incident(id).await.unwrap().unwrap();
        assert_eq!((incident.namespace.as_str(), incident.source.as_str()), (namespace, "am"));
        assert_eq!(jobs[0].namespace, namespace);
    }
    let metrics = reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    for namespace in ["team-a", "team-b"] {
        let line = format!("akritas_alert_events_total{{source=\"{namespace}/am\",outcome=\"accepted\"}} 1");
        assert!(metrics.contains(&line), "{line} missing in\n{metrics}");
    }
}

/// A model that plans one `postgres.activity` check, answers, then submits a valid result.
fn investigator() -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let result = json!({
        "finding_status": "suspected", "actionability": "requires_human", "confidence": "medium",
        "summary": "A long-running query on db-7 saturates CPU", "impact": "checkout latency",
        "evidence": ["tool-call:call-1"], "ruled_out": [], "affected_components": ["db-7"],
        "recommended_actions": ["review query 4242"], "production_writes": 0
    });
    support::scripted_llm::investigator(result, "A long query holds db-7.")
}

/// A webhook receiver counting what it gets.
async fn hook() -> (Arc<Mutex<usize>>, String) {
    let count = Arc::new(Mutex::new(0));
    let seen = count.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let seen = seen.clone();
            async move {
                *seen.lock().unwrap() += 1;
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (count, url)
}

fn receiver(namespace: &str, url: &str) -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: hook, namespace: {namespace}}}\n\
         spec: {{type: webhook, webhook: {{url: \"{url}\"}}}}\n---\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_reaches_only_receivers_of_its_namespace_and_shared_ones() {
    notified_receivers(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_investigation_is_told_only_to_receivers_of_its_namespace_and_shared_ones() {
    notified_receivers(false).await;
}

/// An alert of team-a investigated (`succeeds`), or failed by a rejected result: the
/// outcome goes to team-a's and the shared receiver, never team-b's.
async fn notified_receivers(succeeds: bool) {
    let ((a, url_a), (b, url_b), (shared, url_shared)) = (hook().await, hook().await, hook().await);
    let manifests = tempfile::tempdir().unwrap();
    let resources = source("team-a", "am", "alertmanager", "TOKEN_A")
        + &receiver("team-a", &url_a)
        + &receiver("team-b", &url_b)
        + &receiver("platform", &url_shared);
    std::fs::write(manifests.path().join("resources.yaml"), resources).unwrap();
    let data = tempfile::tempdir().unwrap();
    // Failing: a `confirmed` result with no evidence, which the host rejects.
    let (investigate, submit) =
        (investigator(), akritas::tools::openai_alias(&"local.investigation.submit_result".try_into().unwrap()));
    let unbacked = json!({"finding_status": "inconclusive", "actionability": "requires_human", "confidence": "high",
                          "summary": "writes", "evidence": [], "production_writes": 1});
    let llm = ScriptedLlm::start_with(move |n, request: &Value| {
        if succeeds || !support::scripted_llm::offers(request, &submit) {
            return investigate(n, request);
        }
        Step::from(Reply::ToolCalls(vec![("r".into(), submit.clone(), unbacked.clone())]))
    })
    .await;
    let catalog = host::catalog_from(manifests.path());
    let (tools, _) = host::standard_tools();
    let audit = Arc::new(AuditLog::open(&data.path().join("audit.jsonl")).unwrap());
    let engine = Arc::new(host::engine(&llm, host::settings(), tools, catalog.clone(), Some(audit.clone()), None));
    let store = Arc::new(AlertStore::open(&data.path().join("alerts.jsonl")).unwrap());
    let settings = WorkerSettings {
        concurrency: 1,
        max_attempts: 1,
        backoff: Duration::from_millis(10),
        public_url: None,
        delivery: RetryPolicy { attempts: 1, base_delay: Duration::from_millis(10), timeout: Duration::from_secs(5) },
        tenancy: Tenancy::new(["platform".to_string()]),
    };
    let worker = Worker::new(store.clone(), engine, catalog, secrets(), StatusBoard::default(), settings).unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(Arc::new(worker).run(cancel.clone()));

    let context = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    let events = adapter("alertmanager").unwrap().decode(FIRING.as_bytes(), &context).unwrap();
    let accepted = store.ingest("team-a", "am", events).await.unwrap();
    let id = accepted.events[0].job_id.clone().unwrap();
    let settled = |j: &Job| matches!(j.status, JobStatus::Succeeded | JobStatus::Failed) && !j.has_pending_deliveries();
    let (job, _) = support::poll(Duration::from_secs(30), || async { store.job(&id).await.unwrap().filter(settled) })
        .await
        .expect("the job settles");
    cancel.cancel();
    let expected = if succeeds { JobStatus::Succeeded } else { JobStatus::Failed };
    assert_eq!(job.status, expected, "{job:?}");
    let receivers: Vec<&str> = job.deliveries.iter().map(|d| d.receiver.as_str()).collect();
    assert_eq!(receivers, ["platform/hook", "team-a/hook"], "{job:?}");
    assert_eq!((*a.lock().unwrap(), *b.lock().unwrap(), *shared.lock().unwrap()), (1, 0, 1));
    if !succeeds {
        let error = job.error.as_deref().unwrap_or_default();
        assert!(error.contains("claims 1 production writes"), "rejected for its claimed write: {error}");
        return;
    }
    let run = audit.get(&RunId::parse(job.run_id.as_deref().unwrap()).unwrap()).await.unwrap().unwrap();
    assert_eq!(run.namespace, "team-a", "the investigation runs in the AlertSource's namespace");
    let mut metrics = String::new();
    akritas::telemetry::render(&mut metrics);
    assert!(
        metrics.contains("akritas_notifications_total{receiver=") && metrics.contains("outcome=\"delivered\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_alertmanager_alias_is_authenticated_by_the_source_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sources.yaml"), source("default", "am", "alertmanager", "TOKEN_A")).unwrap();
    let refs = [ApiKeyRef::admin("ops", "OPS_KEY")];
    let keys = ApiKeys::from_env(&refs, &|name: &str| (name == "OPS_KEY").then(|| API_KEY.to_string())).unwrap();
    let (server, _store, _llm) = serve(dir.path(), dir.path(), keys).await;
    let url = format!("{}/api/v1/alertmanager/webhook", server.url);
    let (status, body) = post(&url, FIRING, Some(TOKEN_A)).await;
    assert_eq!(status, 202, "Alertmanager sends one Authorization header: the source's token: {body}");
    assert_eq!(post(&url, FIRING, None).await.0, 401, "no token");
    assert_eq!(post(&url, FIRING, Some(TOKEN_B)).await.0, 401, "another source's token");
    assert_eq!(post(&url, FIRING, Some(API_KEY)).await.0, 401, "an API key is not the source's token");
}

#[tokio::test]
async fn a_journal_written_before_namespaces_replays_into_the_sources_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.jsonl");
    let context = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    let event = adapter("alertmanager").unwrap().decode(FIRING.as_bytes(), &context).unwrap().remove(0);
    {
        // The record exactly as the previous version wrote it: no version, no namespace.
        let (journal, _) = akritas::journal::Journal::open(&path, Default::default()).unwrap();
        let outcome = json!({"status": "accepted", "event_id": "evt_1", "incident_id": "inc_1", "job_id": "job_1"});
        // Received within the dedup window (24 h), so the alert sent again is a duplicate.
        let received_at = jiff::Timestamp::now().to_string();
        let record = json!({"delivery_id": "dlv_1", "source": "am", "received_at": received_at,
                            "items": [{"outcome": outcome, "event": event}]});
        assert!(record["items"][0]["event"]["source"].get("namespace").is_none());
        journal.append("alerts.delivery", &record).await.unwrap();
        journal.close().await.unwrap();
    }
    let legacy = |name: &str| if name == "am" { "team-a".to_string() } else { "default".to_string() };
    let store = AlertStore::open_with(&path, Default::default(), &legacy).unwrap();
    let (incident, _, jobs) = store.incident("inc_1").await.unwrap().unwrap();
    assert_eq!((incident.namespace.as_str(), jobs[0].namespace.as_str()), ("team-a", "team-a"));
    let again = store.ingest("team-a", "am", vec![event.clone()]).await.unwrap();
    assert_eq!(again.events[0].status, "duplicate", "the migrated source still deduplicates");
    let other = store.ingest("team-b", "am", vec![event]).await.unwrap();
    assert_eq!(other.events[0].status, "accepted");
    assert_ne!(other.events[0].incident_id, "inc_1");
}

#[tokio::test]
async fn a_key_reads_only_its_namespaces_incidents_events_and_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let sources =
        source("team-a", "am", "alertmanager", "TOKEN_A") + &source("team-b", "am", "alertmanager", "TOKEN_B");
    std::fs::write(dir.path().join("sources.yaml"), sources).unwrap();
    let refs = ["reader-a=READ_A_KEY:read@team-a".parse_key(), "admin=ADMIN_KEY".parse_key()];
    let lookup = |name: &str| match name {
        "READ_A_KEY" => Some("team-a-reader-key-0001".to_string()),
        "ADMIN_KEY" => Some("cluster-admin-key-0002".to_string()),
        _ => None,
    };
    let keys = ApiKeys::from_env(&refs, &lookup).unwrap();
    let (server, _store, _llm) = serve(dir.path(), dir.path(), keys).await;
    let url = |path: &str| format!("{}/api/v1/alerts/{path}/webhook", server.url);
    let (status, a) = post(&url("team-a/am"), FIRING, Some(TOKEN_A)).await;
    assert_eq!(status, 202, "{a}");
    // The scheme of a Bearer credential is case-insensitive.
    let request = reqwest::Client::new()
        .post(url("team-b/am"))
        .header("content-type", "application/json")
        .header("authorization", format!("bearer {TOKEN_B}"))
        .body(FIRING);
    let b: Value = request.send().await.unwrap().json().await.unwrap();
    let get = |path: String, key: &'static str| {
        let server = server.url.clone();
        async move {
            let response = reqwest::Client::new().get(format!("{server}{path}")).bearer_auth(key).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (reader, admin) = ("team-a-reader-key-0001", "cluster-admin-key-0002");
    let (_, listed) = get("/api/v1/incidents".into(), reader).await;
    let namespaces: Vec<&str> =
        listed["incidents"].as_array().unwrap().iter().filter_map(|i| i["namespace"].as_str()).collect();
    assert_eq!(namespaces, ["team-a"], "{listed}");
    let (_, all) = get("/api/v1/incidents".into(), admin).await;
    assert_eq!(all["incidents"].as_array().unwrap().len(), 2, "{all}");
    let theirs = &b["events"][0];
    for path in [
        format!("/api/v1/incidents/{}", theirs["incident_id"].as_str().unwrap()),
        format!("/api/v1/alert-events/{}", theirs["event_id"].as_str().unwrap()),
        format!("/api/v1/investigation-jobs/{}", theirs["job_id"].as_str().unwrap()),
    ] {
        assert_eq!(get(path.clone(), reader).await.0, 404, "team-b's {path} is not team-a's to read");
        assert_eq!(get(path.clone(), admin).await.0, 200, "{path}");
    }
    let ours = &a["events"][0];
    let (status, _) = get(format!("/api/v1/incidents/{}", ours["incident_id"].as_str().unwrap()), reader).await;
    assert_eq!(status, 200);
}

trait ParseKey {
    fn parse_key(&self) -> akritas::config::ApiKeyRef;
}

impl ParseKey for str {
    /// One `--api-key` entry through the real settings loader.
    fn parse_key(&self) -> akritas::config::ApiKeyRef {
        let flags = akritas::config::ServeFlags { api_keys: vec![self.to_string()], ..Default::default() };
        akritas::config::load(&flags, &|_| None).unwrap().api_keys.remove(0)
    }
}

/// A tenant declaring its own Alertmanager source does not take the platform's alias:
/// it stays the home namespace's source (a 409 there would make Alertmanager drop the
/// platform's alerts).
#[tokio::test]
async fn a_tenants_alertmanager_source_never_makes_the_alias_ambiguous() {
    let dir = tempfile::tempdir().unwrap();
    let sources =
        source("default", "platform", "alertmanager", "TOKEN_A") + &source("team-b", "am", "alertmanager", "TOKEN_B");
    std::fs::write(dir.path().join("sources.yaml"), sources).unwrap();
    let (server, store, _llm) = serve(dir.path(), dir.path(), ApiKeys::default()).await;
    let url = format!("{}/api/v1/alertmanager/webhook", server.url);
    let (status, body) = post(&url, FIRING, Some(TOKEN_A)).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(post(&url, FIRING, Some(TOKEN_B)).await.0, 401, "the tenant's token does not open the platform's alias");
    let incident = body["events"][0]["incident_id"].as_str().unwrap();
    assert_eq!(store.incident(incident).await.unwrap().unwrap().0.namespace, "default");
}
