//! The investigation worker in process: a job is investigated once with the forced
//! structuring call, the result is accepted only with evidence the Run really
//! produced, stored in the audit journal (re-validated at replay), and delivered to
//! the operator's receivers; failures retry with backoff and end with a sanitised
//! reason; failed notifications are retried without a second investigation.

use akritas_testkit as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use akritas::alerts::adapters::{DecodeContext, adapter};
use akritas::alerts::admission::Limits;
use akritas::alerts::store::{self, AlertStore, DeliveryStatus, Job, JobStatus};
use akritas::alerts::worker::{Worker, WorkerSettings};
use akritas::audit::{AuditLog, Finish, NewRun, RunId, RunStatus};
use akritas::catalog::secrets::EnvSecrets;
use akritas::catalog::status::StatusBoard;
use akritas::investigation::FindingStatus;
use akritas::notify::RetryPolicy;
use akritas::tenancy::Tenancy;
use akritas::tools::{ToolName, openai_alias};
use axum::http::HeaderMap;
use serde_json::{Value, json};
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use tokio_util::sync::CancellationToken;

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const HMAC_SECRET: &str = "receiver-hmac-secret-0123";
const TG_TOKEN: &str = "123456:receiver-token-0123";

/// A model that plans one `postgres.activity` check, answers, then submits `result`.
fn investigator(result: Value) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    support::scripted_llm::investigator(result, "A 30-minute query holds db-7; autovacuum competes for CPU.")
}

fn result(evidence: Value, writes: u64) -> Value {
    json!({
        "finding_status": "suspected", "actionability": "requires_human", "confidence": "medium",
        "summary": "A long-running query on db-7 saturates CPU", "impact": "checkout latency",
        "evidence": evidence, "ruled_out": ["disk pressure"], "affected_components": ["db-7"],
        "recommended_actions": ["cancel query 4242 after review"], "production_writes": writes
    })
}

/// Headers and body of each request a stand-in received.
type Requests = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

/// A webhook stand-in answering the statuses in `script` in order, then 200.
#[derive(Clone, Default)]
struct Hook {
    received: Requests,
    script: Arc<Mutex<Vec<u16>>>,
}

impl Hook {
    async fn start(script: Vec<u16>) -> (Hook, String) {
        let hook = Hook { received: Arc::default(), script: Arc::new(Mutex::new(script)) };
        let state = hook.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
                let state = state.clone();
                async move {
                    state.received.lock().unwrap().push((headers, body.to_vec()));
                    let mut script = state.script.lock().unwrap();
                    let status = if script.is_empty() { 200 } else { script.remove(0) };
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (hook, url)
    }

    fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

struct Rig {
    store: Arc<AlertStore>,
    audit: Arc<AuditLog>,
    worker_cancel: CancellationToken,
    postgres_calls: Arc<AtomicUsize>,
    _manifests: tempfile::TempDir,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.worker_cancel.cancel();
    }
}

fn worker_settings(attempts: u32, backoff: Duration) -> WorkerSettings {
    WorkerSettings {
        concurrency: 2,
        max_attempts: attempts,
        backoff,
        public_url: Some("https://akritas.example".into()),
        delivery: RetryPolicy { attempts: 3, base_delay: Duration::from_millis(20), timeout: Duration::from_secs(5) },
        tenancy: Tenancy::default(),
    }
}

async fn start_rig(data: &std::path::Path, llm: &ScriptedLlm, hook_url: &str, settings: WorkerSettings) -> Rig {
    start_rig_with(data, llm, hook_url, settings, Limits::default()).await
}

async fn start_rig_with(
    data: &std::path::Path,
    llm: &ScriptedLlm,
    hook_url: &str,
    settings: WorkerSettings,
    limits: Limits,
) -> Rig {
    start_rig_receiving(data, llm, &hook_receiver(hook_url), settings, limits).await
}

/// The `incident-hook` webhook receiver of namespace `ops`.
fn hook_receiver(hook_url: &str) -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: incident-hook, namespace: ops}}\n\
         spec: {{type: webhook, webhook: {{url: \"{hook_url}\", hmacSecret: {{env: HOOK_HMAC}}}}}}\n"
    )
}

/// A rig whose receivers are the manifests `receivers` (secrets `HOOK_HMAC`, `TG_TOKEN`).
async fn start_rig_receiving(
    data: &std::path::Path,
    llm: &ScriptedLlm,
    receivers: &str,
    settings: WorkerSettings,
    limits: Limits,
) -> Rig {
    let manifests = tempfile::tempdir().unwrap();
    std::fs::write(manifests.path().join("receivers.yaml"), receivers).unwrap();
    let catalog = host::catalog_from(manifests.path());
    let (tools, counters) = host::standard_tools();
    let audit = Arc::new(AuditLog::open(&data.join("audit.jsonl")).unwrap());
    let engine = Arc::new(host::engine(llm, host::settings(), tools, catalog.clone(), Some(audit.clone()), None));
    let store = Arc::new(AlertStore::open_with(&data.join("alerts.jsonl"), limits, &|_| "default".into()).unwrap());
    let secrets = Arc::new(EnvSecrets::with_lookup(|name: &str| match name {
        "HOOK_HMAC" => Some(HMAC_SECRET.into()),
        "TG_TOKEN" => Some(TG_TOKEN.into()),
        _ => None,
    }));
    let worker = Worker::new(store.clone(), engine, catalog, secrets, StatusBoard::default(), settings).unwrap();
    worker.recover().await.unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(Arc::new(worker).run(cancel.clone()));
    Rig { store, audit, worker_cancel: cancel, postgres_calls: counters.postgres, _manifests: manifests }
}

async fn ingest(store: &AlertStore) -> String {
    let context = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    let events = adapter("alertmanager").unwrap().decode(FIRING.as_bytes(), &context).unwrap();
    let accepted = store.ingest("ops", "am", events).await.unwrap();
    accepted.events[0].job_id.clone().expect("the first firing event opens a job").into()
}

async fn wait_job(store: &AlertStore, id: &str, done: impl Fn(&Job) -> bool) -> Job {
    support::poll(Duration::from_secs(20), || async { store.job(id).await.unwrap().filter(|j| done(j)) })
        .await
        .map(|(job, _)| job)
        .unwrap_or_else(|| panic!("job {id} did not settle"))
}

fn finished(job: &Job) -> bool {
    matches!(job.status, JobStatus::Succeeded | JobStatus::Failed) && !job.has_pending_deliveries()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_investigation_is_promoted_and_run_by_the_worker_once_room_comes_back() {
    let llm = ScriptedLlm::start_with(investigator(result(json!(["tool-call:call-1"]), 0))).await;
    let (_hook, url) = Hook::start(vec![]).await;
    let data = tempfile::tempdir().unwrap();
    let limits = Limits { max_pending_jobs: 1, ..Limits::default() };
    let rig = start_rig_with(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(50)), limits).await;
    let context = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    let mut two: Value = serde_json::from_str(FIRING).unwrap();
    let mut second = two["alerts"][0].clone();
    second["fingerprint"] = json!("0123456789abcdef");
    second["labels"]["pod"] = json!("cart-2");
    two["alerts"].as_array_mut().unwrap().push(second);
    let events = adapter("alertmanager").unwrap().decode(two.to_string().as_bytes(), &context).unwrap();
    let accepted = rig.store.ingest("ops", "am", events).await.unwrap();
    let deferred: Vec<bool> = accepted.events.iter().map(|e| e.deferred).collect();
    assert_eq!(deferred, [false, true], "past alert_pending_jobs the second waits");
    for event in &accepted.events {
        let job = wait_job(&rig.store, event.job_id.as_deref().unwrap(), finished).await;
        assert_eq!((job.status, job.attempts), (JobStatus::Succeeded, 1), "{job:?}");
    }
    assert_eq!(rig.store.deferred_jobs(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_is_investigated_once_validated_audited_and_notified() {
    let llm = ScriptedLlm::start_with(investigator(result(json!(["tool-call:call-1"]), 0))).await;
    let (hook, url) = Hook::start(vec![]).await;
    let data = tempfile::tempdir().unwrap();
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(50))).await;
    let job_id = ingest(&rig.store).await;
    let job = wait_job(&rig.store, &job_id, finished).await;

    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    assert_eq!((job.attempts, job.runs.len()), (1, 1));
    let result = job.result.as_ref().unwrap();
    assert_eq!(result.evidence, ["tool-call:call-1"]);
    assert_eq!(rig.postgres_calls.load(Ordering::SeqCst), 1);
    assert_eq!(llm.chat_requests(), 3, "plan, answer, structuring");

    // The structuring request: forced, deterministic, with every host-owned reference.
    let structuring = llm.requests().into_iter().last().unwrap();
    assert_eq!(structuring["tool_choice"], "required");
    assert_eq!(structuring["temperature"], 0.0);
    let input: Value = serde_json::from_str(structuring["messages"][1]["content"].as_str().unwrap()).unwrap();
    let references: Vec<&str> =
        input["host_owned_evidence"].as_array().unwrap().iter().map(|e| e["call"].as_str().unwrap()).collect();
    assert_eq!(references, ["call-1"], "only successful execution calls are offered");

    // The Run: alert source and ids, succeeded, the result as its own record.
    let run = rig.audit.get(&RunId::parse(job.run_id.as_deref().unwrap()).unwrap()).await.unwrap().unwrap();
    assert_eq!(
        (run.source.as_str(), run.actor.as_str(), run.status),
        ("alert:alertmanager", "alert-source:am", RunStatus::Succeeded)
    );
    assert_eq!(run.metadata["job_id"], json!(job_id));
    assert_eq!(run.investigation.as_ref(), Some(result));

    // One signed webhook delivery with the structured result.
    assert_eq!(hook.count(), 1);
    let (headers, body) = hook.received.lock().unwrap()[0].clone();
    assert_eq!(headers["x-akritas-signature"], akritas::notify::deliver::signature_header(HMAC_SECRET, &body));
    let envelope: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(envelope["event"], "incident.investigated");
    assert_eq!(envelope["incident"]["finding"], "suspected");
    assert_eq!(envelope["incident"]["evidence"], json!(["tool-call:call-1"]));
    assert_eq!(envelope["incident"]["run_url"], json!(format!("https://akritas.example/runs/{}", run.id)));
    assert_eq!(job.deliveries.len(), 1);
    assert_eq!((job.deliveries[0].status, job.deliveries[0].attempts), (DeliveryStatus::Delivered, 1));
    assert_eq!(envelope["delivery_id"], json!(job.deliveries[0].delivery_id));

    // Restart: the job stays done, the result is re-validated from the journal, nothing runs again.
    drop(rig);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(50))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rig.store.job(&job_id).await.unwrap().unwrap(), job);
    assert_eq!(rig.audit.get(&run.id).await.unwrap().unwrap().investigation.as_ref(), Some(result));
    assert_eq!((llm.chat_requests(), hook.count()), (3, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_writes_fail_the_job_with_the_reason() {
    let llm = ScriptedLlm::start_with(investigator(result(json!(["tool-call:call-1"]), 3))).await;
    let (hook, url) = Hook::start(vec![]).await;
    let data = tempfile::tempdir().unwrap();
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(10))).await;
    let job_id = ingest(&rig.store).await;
    let job = wait_job(&rig.store, &job_id, finished).await;
    let reason = "claims 3 production writes";
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.attempts, 1, "a rejected result is not retried");
    assert_eq!(job.error_code.as_deref(), Some("structure_failed"));
    assert!(job.error.as_deref().unwrap().contains(reason), "{job:?}");
    assert!(job.result.is_none());
    let run = rig.audit.get(&RunId::parse(&job.runs[0]).unwrap()).await.unwrap().unwrap();
    assert_eq!((run.status, run.error_code.as_deref()), (RunStatus::Failed, Some("structure_failed")));
    assert!(run.investigation.is_none());
    let told = failure_notices(&hook);
    assert_eq!(told.len(), 1, "the receiver is told once that the alert was not investigated");
    assert_eq!(told[0]["incident"]["error_code"], "structure_failed");
    assert!(told[0]["incident"]["error"].as_str().unwrap().contains(reason), "{}", told[0]);
}

/// Runs an alert whose model cites `evidence` (the same result when asked again), and returns
/// the job, the webhook's envelopes and the number of result requests the model answered.
async fn refused(evidence: Value) -> (Job, Vec<Value>, usize) {
    let llm = ScriptedLlm::start_with(investigator(result(evidence, 0))).await;
    let (hook, url) = Hook::start(vec![]).await;
    let data = tempfile::tempdir().unwrap();
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(10))).await;
    let job = wait_job(&rig.store, &ingest(&rig.store).await, finished).await;
    let submit = openai_alias(&ToolName::try_from("local.investigation.submit_result").unwrap());
    let asked = llm.requests().iter().filter(|r| offers(r, &submit)).count();
    let received =
        hook.received.lock().unwrap().iter().map(|(_, body)| serde_json::from_slice(body).unwrap()).collect();
    (job, received, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invented_evidence_is_asked_again_then_refused_and_the_status_lowered_not_the_run_failed() {
    let (job, received, asked) = refused(json!(["tool-call:call_made_up", "tool-call:call-1"])).await;
    assert_eq!(asked, 2, "one repair turn names the item");
    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    let result = job.result.unwrap();
    assert_eq!(result.evidence, ["tool-call:call-1"], "the verified item is kept");
    assert_eq!(result.refused_evidence[0].item, "tool-call:call_made_up");
    assert!(result.refused_evidence[0].reason.contains("names no successful tool call of this Run"));
    assert_eq!(result.finding_status, FindingStatus::Suspected, "a cited call backs suspected");
    assert!(result.status_downgrade.is_none());
    assert_eq!(received.len(), 1);
    assert_eq!(received[0]["incident"]["refused_evidence"], 1, "receivers are told how many were refused");
}

/// The webhook envelopes a stand-in received for failed investigations; every
/// envelope it received must be one.
fn failure_notices(hook: &Hook) -> Vec<Value> {
    let received = hook.received.lock().unwrap().clone();
    received
        .iter()
        .map(|(headers, body)| {
            assert_eq!(headers["x-akritas-event"], "incident.investigation_failed");
            let envelope: Value = serde_json::from_slice(body).unwrap();
            assert_eq!(envelope["event"], "incident.investigation_failed");
            envelope
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_retry_with_backoff_then_fail_with_a_sanitised_error() {
    let times = Arc::new(Mutex::new(Vec::new()));
    let seen = times.clone();
    let llm = ScriptedLlm::start_with(move |_, _| {
        seen.lock().unwrap().push(Instant::now());
        Step::from(Reply::Error {
            status: 500,
            body: json!({"error": {"message": format!("overloaded; debug: Authorization: Bearer tok-991 hmac {HMAC_SECRET}")}}),
        })
    })
    .await;
    let (hook, url) = Hook::start(vec![]).await;
    let data = tempfile::tempdir().unwrap();
    let backoff = Duration::from_millis(300);
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, backoff)).await;
    let job_id = ingest(&rig.store).await;
    let job = wait_job(&rig.store, &job_id, finished).await;

    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!((job.attempts, job.runs.len()), (3, 3), "bounded: three attempts, three Runs");
    assert_eq!(job.error_code.as_deref(), Some("upstream_error"));
    let error = job.error.as_deref().unwrap();
    assert!(error.contains("HTTP 500") && error.contains("[redacted]"), "{error}");
    assert!(!error.contains(HMAC_SECRET) && !error.contains("tok-991"), "secrets leaked into {error}");
    let times = times.lock().unwrap().clone();
    assert_eq!(times.len(), 3);
    assert!(times[1] - times[0] >= backoff, "first retry after the base backoff");
    assert!(times[2] - times[1] >= backoff * 2, "second retry after twice the backoff");
    let stored = std::fs::read_to_string(data.path().join("alerts.jsonl")).unwrap();
    assert!(!stored.contains(HMAC_SECRET) && !stored.contains("tok-991"));

    // Only the final failure is told, once, with what failed, why and the last Run.
    let told = failure_notices(&hook);
    assert_eq!(told.len(), 1, "retries are not notified; the final failure is, once");
    let notice = &told[0]["incident"];
    assert_eq!((notice["error_code"].as_str(), notice["attempts"].as_u64()), (Some("upstream_error"), Some(3)));
    assert_eq!(notice["run_id"].as_str(), job.run_id.as_deref());
    assert_eq!(notice["incident_id"].as_str(), Some(job.incident_id.as_str()));
    assert_eq!(notice["error"].as_str(), job.error.as_deref(), "the sanitised reason");
    let body = String::from_utf8(hook.received.lock().unwrap()[0].1.clone()).unwrap();
    assert!(!body.contains(HMAC_SECRET) && !body.contains("tok-991"), "secrets leaked into {body}");
    assert_eq!(job.deliveries.len(), 1);
    assert_eq!(job.deliveries[0].status, DeliveryStatus::Delivered);

    // A restart neither investigates again nor tells again.
    drop(rig);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, backoff)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rig.store.job(&job_id).await.unwrap().unwrap().status, JobStatus::Failed);
    assert_eq!((llm.chat_requests(), hook.count()), (3, 1));
}

/// One investigation notified through a webhook answering `script`; the job once settled.
async fn notified(llm: &ScriptedLlm, script: Vec<u16>) -> (Hook, Job) {
    let (hook, url) = Hook::start(script).await;
    let data = tempfile::tempdir().unwrap();
    let rig = start_rig(data.path(), llm, &url, worker_settings(3, Duration::from_millis(10))).await;
    let job_id = ingest(&rig.store).await;
    let job = wait_job(&rig.store, &job_id, finished).await;
    assert_eq!(job.status, JobStatus::Succeeded, "a notification never fails the investigation");
    (hook, job)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_notifications_are_retried_without_a_second_investigation() {
    let llm = ScriptedLlm::start_with(investigator(result(json!(["tool-call:call-1"]), 0))).await;
    let (hook, job) = notified(&llm, vec![503, 502]).await;
    let delivery = &job.deliveries[0];
    assert_eq!((delivery.status, delivery.attempts, delivery.http_status), (DeliveryStatus::Delivered, 3, Some(200)));
    assert_eq!(hook.count(), 3);
    let ids: Vec<String> = hook
        .received
        .lock()
        .unwrap()
        .iter()
        .map(|(h, _)| h["x-akritas-delivery"].to_str().unwrap().to_string())
        .collect();
    assert!(ids.iter().all(|id| id == &delivery.delivery_id), "retries keep the delivery id");
    assert_eq!(llm.chat_requests(), 3, "one investigation");

    // A receiver that keeps failing: the delivery fails after its attempts.
    let (hook, job) = notified(&llm, vec![500, 500, 500, 500]).await;
    let delivery = &job.deliveries[0];
    assert_eq!((delivery.status, delivery.attempts), (DeliveryStatus::Failed, 3));
    assert_eq!((delivery.http_status, delivery.error.as_deref()), (Some(500), Some("http_status")));
    let detail = delivery.detail.as_deref().unwrap_or_default();
    assert!(detail.starts_with("HTTP 500 from 127.0.0.1:"), "{detail}");
    assert_eq!(hook.count(), 3);
}

/// With the receiver down, the delivery says why, with the host and port (not the URL's path
/// or query, which may hold a secret), on the incident's job and as a bounded metric label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_to_a_closed_port_says_connection_refused_with_its_host_and_port() {
    let llm = ScriptedLlm::start_with(investigator(result(json!(["tool-call:call-1"]), 0))).await;
    let port = support::free_port();
    let data = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/hooks/path-secret?token=query-secret");
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(10))).await;
    let job_id = ingest(&rig.store).await;
    let job = wait_job(&rig.store, &job_id, finished).await;
    let delivery = &job.deliveries[0];
    assert_eq!((delivery.status, delivery.attempts), (DeliveryStatus::Failed, 3));
    assert_eq!(delivery.error.as_deref(), Some("request_failed"));
    assert_eq!(delivery.detail, Some(format!("connection refused by 127.0.0.1:{port}")));
    let (incident, events, jobs) = rig.store.incident(&job.incident_id).await.unwrap().unwrap();
    let shown = store::incident_json(&incident, &events, &jobs).to_string();
    assert!(shown.contains(&format!("connection refused by 127.0.0.1:{port}")), "{shown}");
    assert!(!shown.contains("secret"), "{shown}");
    let mut metrics = String::new();
    akritas::telemetry::render(&mut metrics);
    let line = metrics
        .lines()
        .find(|l| l.starts_with("akritas_notification_failures_total") && l.contains("cause=\"connection_refused\""))
        .unwrap_or_else(|| panic!("no connection_refused failure in:\n{metrics}"));
    assert!(line.contains("receiver=\"ops/incident-hook\""), "{line}");
}

/// The process stopped after the investigation's Run had succeeded with its result
/// but before the job recorded it: the restart keeps that result and notifies; the
/// alert is not investigated again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_succeeded_before_a_crash_completes_its_job_without_a_second_investigation() {
    let data = tempfile::tempdir().unwrap();
    let (job_id, run_id) = {
        let store = AlertStore::open(&data.path().join("alerts.jsonl")).unwrap();
        let job_id = ingest(&store).await;
        let mut job = store.job(&job_id).await.unwrap().unwrap();
        store.step(&mut job, store::Step::Start).await.unwrap();
        let audit = AuditLog::open(&data.path().join("audit.jsonl")).unwrap();
        let run = audit
            .start(NewRun {
                namespace: "ops".into(),
                source: "alert:alertmanager".into(),
                actor: "alert-source:am".into(),
                model: Some("scripted-model".into()),
                catalog_version: 1,
                metadata: [("job_id".to_string(), json!(job_id))].into(),
            })
            .await
            .unwrap();
        let found = serde_json::from_value(result(json!([]), 0)).unwrap();
        audit.record_investigation(&run, &found).await.unwrap();
        let finish =
            Finish { status: RunStatus::Succeeded, error: None, error_code: None, metadata: Default::default() };
        audit.finish(&run, finish).await.unwrap();
        (job_id, run.to_string())
    };
    let llm = ScriptedLlm::start_with(investigator(result(json!([]), 0))).await;
    let (hook, url) = Hook::start(vec![]).await;
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(10))).await;
    let job = wait_job(&rig.store, &job_id, finished).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    assert_eq!((job.runs.clone(), job.run_id.clone(), job.attempts), (vec![run_id.clone()], Some(run_id), 1));
    assert_eq!(job.result.as_ref().map(|r| r.summary.as_str()), Some("A long-running query on db-7 saturates CPU"));
    assert_eq!(job.deliveries[0].status, DeliveryStatus::Delivered);
    assert_eq!((llm.chat_requests(), hook.count()), (0, 1), "notified once, never investigated again");
}

#[tokio::test]
async fn a_tampered_result_is_refused_at_replay() {
    let data = tempfile::tempdir().unwrap();
    let path = data.path().join("audit.jsonl");
    {
        let (journal, _) = akritas::journal::Journal::open(&path, Default::default()).unwrap();
        let id = "run_0123456789abcdef0123456789abcdef";
        journal
            .append(
                "run_started",
                &json!({"run": {"id": id, "source": "alert:alertmanager", "actor": "alert-source:am",
                                                    "catalog_version": 1, "status": "running"}}),
            )
            .await
            .unwrap();
        journal
            .append("run_event", &json!({"run_id": id, "event": {"sequence": 1, "type": "tool_call", "status": "succeeded",
                                                                 "metadata": {"call_id": "call_real", "tool": "postgres.activity"}}}))
            .await
            .unwrap();
        let forged = result(json!(["tool-call:call_forged"]), 0);
        journal.append("investigation_result", &json!({"run_id": id, "result": forged})).await.unwrap();
    }
    let error = AuditLog::open(&path).err().expect("the forged result is refused").to_string();
    assert!(error.contains("record 3 is inconsistent") && error.contains("names no successful tool call"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normalised_quotes_are_verified_and_the_coverage_shows_in_the_run_incident_and_notification() {
    // postgres.activity returned {"active": 3, "longest_query_seconds": 1820, "waiting": 0}.
    let evidence = json!([
        "tool-call:call-1 \"longest_query_seconds=1,820\"",
        "tool-call:call-1 \"1820000ms\"",
        "tool-call:call-1"
    ]);
    let llm = ScriptedLlm::start_with(investigator(result(evidence, 0))).await;
    let (hook, url) = Hook::start(vec![]).await;
    let data = tempfile::tempdir().unwrap();
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(10))).await;
    let job_id = ingest(&rig.store).await;
    let job = wait_job(&rig.store, &job_id, finished).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    let coverage = job.result.as_ref().unwrap().evidence_coverage.expect("the host records the coverage");
    assert_eq!((coverage.claims, coverage.verified, coverage.describe()), (3, 2, "2/3 (67%)".to_string()));

    let run = rig.audit.get(&RunId::parse(job.run_id.as_deref().unwrap()).unwrap()).await.unwrap().unwrap();
    assert_eq!(run.investigation.as_ref().unwrap().evidence_coverage, Some(coverage));
    let run_status = akritas::operator::projection::run_status(&run);
    assert_eq!((run_status["evidenceCount"].as_u64(), run_status["evidenceVerified"].as_u64()), (Some(3), Some(2)));
    let (incident, _, jobs) = rig.store.incident(&job.incident_id).await.unwrap().unwrap();
    let incident_status = akritas::operator::projection::incident_status(&incident, &jobs);
    assert_eq!(incident_status["investigation"]["evidenceCount"], 3);
    assert_eq!(incident_status["investigation"]["evidenceVerified"], 2);

    let (_, body) = hook.received.lock().unwrap()[0].clone();
    let envelope: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        envelope["incident"]["evidence_coverage"],
        json!({"claims": 3, "verified": 2, "ratio": 2.0 / 3.0, "backs_status": true})
    );

    // The coverage is re-validated from the journal at restart.
    drop(rig);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(10))).await;
    assert_eq!(rig.audit.get(&run.id).await.unwrap().unwrap().investigation.unwrap().evidence_coverage, Some(coverage));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_run_exports_with_its_input_rebuilt_from_the_store_and_replays_the_same() {
    let evidence = json!(["tool-call:call-1 \"longest_query_seconds=1820\""]);
    let llm = ScriptedLlm::start_with(investigator(result(evidence, 0))).await;
    let (_hook, url) = Hook::start(vec![]).await;
    let data = tempfile::tempdir().unwrap();
    let rig = start_rig(data.path(), &llm, &url, worker_settings(3, Duration::from_millis(10))).await;
    let job_id = ingest(&rig.store).await;
    let job = wait_job(&rig.store, &job_id, finished).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    // The alert resolves: the incident's state changes, the input of the Run that
    // investigated it does not.
    let resolved = FIRING
        .replace("\"status\": \"firing\"", "\"status\": \"resolved\"")
        .replace("\"endsAt\": \"0001-01-01T00:00:00Z\"", "\"endsAt\": \"2026-11-29T23:02:00Z\"");
    let context = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    let events = adapter("alertmanager").unwrap().decode(resolved.as_bytes(), &context).unwrap();
    rig.store.ingest("ops", "am", events).await.unwrap();
    let (incident, _, _) = rig.store.incident(&job.incident_id).await.unwrap().unwrap();
    assert_eq!(incident.event_ids.len(), 2, "{incident:?}");

    let run = rig.audit.get(&RunId::parse(job.run_id.as_deref().unwrap()).unwrap()).await.unwrap().unwrap();
    let (tools, _) = host::standard_tools();
    let skills = std::collections::BTreeMap::new();
    let catalog = akritas::replay::ExportCatalog { tools: &tools, skills: &skills, version: 1 };
    let mut case = akritas::replay::export(&run, &catalog).unwrap();
    assert!(case.input.messages.is_empty() && case.input.investigate);
    let (turns, context) =
        akritas::alerts::request::rebuilt_input(&rig.store, &job_id).await.expect("the store holds the job");
    case.supply_turns(turns, context).expect("the rebuilt input hashes to what the Run recorded");
    let prompt = &case.input.messages[0].content;
    assert!(
        prompt.starts_with(akritas::alerts::request::ALERT_PROMPT) && prompt.contains(job.incident_id.as_str()),
        "{prompt}"
    );
    assert_eq!(
        case.input.context.get("alertname").map(String::as_str),
        Some("KubePodCrashLooping"),
        "{:?}",
        case.input.context
    );

    let config = akritas::llm::LlmConfig {
        system_instructions: Some(Arc::from(host::system_instructions())),
        ..akritas::llm::LlmConfig::new(llm.url.clone())
    };
    let client = akritas::llm::LlmClient::new(config, reqwest::Client::new()).unwrap();
    let calls_before = rig.postgres_calls.load(Ordering::SeqCst);
    let replayed =
        akritas::replay::replay(&case, client, host::settings(), &akritas::replay::SkillSource::Case).await.unwrap();
    assert_eq!(replayed.status, "succeeded", "{:?}", replayed.error);
    assert!(replayed.comparison.same_tool_calls && replayed.comparison.same_status, "{:?}", replayed.comparison);
    assert_eq!(replayed.unknown_calls, 0);
    assert_eq!(
        replayed.investigation.as_ref(),
        job.result.as_ref(),
        "the same structured result, quote verified again"
    );
    assert_eq!(rig.postgres_calls.load(Ordering::SeqCst), calls_before, "a replay never calls the real tool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quote_that_is_only_part_of_a_value_is_refused_with_the_reason_and_the_status_lowered() {
    // "182" is a substring of 1820 but not a value the output holds.
    let (job, received, asked) = refused(json!(["tool-call:call-1 \"182\""])).await;
    assert_eq!(asked, 2);
    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    let result = job.result.unwrap();
    assert!(result.evidence.is_empty());
    assert!(
        result.refused_evidence[0]
            .reason
            .contains("tool-call:call-1 \\\"182\\\"\" quotes a value that does not occur in that call's output"),
        "{:?}",
        result.refused_evidence
    );
    assert_eq!(result.finding_status, FindingStatus::Inconclusive);
    let downgrade = result.status_downgrade.unwrap();
    assert_eq!(downgrade.from, FindingStatus::Suspected);
    assert_eq!(downgrade.reason, "no evidence item cites a successful call of this Run (1 item(s) refused)");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0]["incident"]["finding"], "inconclusive");
    assert_eq!(received[0]["incident"]["status_downgrade"]["from"], "suspected", "receivers are told what was lowered");
}

/// A webhook that answers 200 only once `released` says `true`.
async fn held_hook(released: tokio::sync::watch::Receiver<bool>) -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let mut released = released.clone();
            async move {
                let _ = released.wait_for(|released| *released).await;
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_thread_is_linked_to_its_incident_once_its_message_is_out_not_after_the_slowest_receiver() {
    // A person may reply to the Telegram notification while a webhook receiver is still
    // being retried: the reply must find the incident. The webhook here answers only when
    // released, so the link can be seen only if it does not wait for the webhook.
    let dir = tempfile::tempdir().unwrap();
    let telegram = support::telegram::TelegramStandIn::start(TG_TOKEN).await;
    let (release, released) = tokio::sync::watch::channel(false);
    let hook_url = held_hook(released).await;
    let receivers = format!(
        "{}---\napiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: oncall-chat, namespace: ops}}\n\
         spec: {{type: telegram, telegram: {{botToken: {{env: TG_TOKEN}}, chatId: \"-100777\", baseUrl: \"{}\"}}}}\n",
        hook_receiver(&hook_url),
        telegram.url
    );
    let llm = ScriptedLlm::start_with(investigator(result(json!(["tool-call:call-1"]), 0))).await;
    let mut settings = worker_settings(1, Duration::from_millis(10));
    settings.delivery.timeout = Duration::from_secs(30);
    let rig = start_rig_receiving(dir.path(), &llm, &receivers, settings, Limits::default()).await;
    let job_id = ingest(&rig.store).await;
    let sent = support::poll(Duration::from_secs(20), || async { telegram.sent().into_iter().next() }).await;
    assert!(sent.is_some(), "the Telegram notification was not sent");
    let job = rig.store.job(&job_id).await.unwrap().unwrap();
    let linked = support::poll(Duration::from_secs(10), || async {
        // The stand-in numbers its messages from 1; this is its only one.
        rig.store.incident_for_thread("ops", "oncall-chat", "1")
    })
    .await;
    assert_eq!(linked.map(|(incident, _)| incident), Some(job.incident_id.clone()));
    assert!(rig.store.job(&job_id).await.unwrap().unwrap().has_pending_deliveries(), "the webhook is still held");
    release.send(true).unwrap();
    let job = wait_job(&rig.store, &job_id, finished).await;
    assert!(job.deliveries.iter().all(|d| d.status == DeliveryStatus::Delivered), "{:?}", job.deliveries);
}
