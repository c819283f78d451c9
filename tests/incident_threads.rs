//! One thread per incident for chat receivers, resolve notices, and receiver routing,
//! in process with the real alert store and worker against the Telegram and Mattermost
//! stand-ins: the first notification of an incident is the only top-level message per
//! receiver (also across a restart), the resolve notice replies in that thread once, and
//! a receiver's routing filters (recorded, counted, not sent).

use akritas_testkit as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use akritas::alerts::adapters::{DecodeContext, adapter};
use akritas::alerts::store::{AlertStore, DeliveryStatus, Job, JobStatus};
use akritas::alerts::worker::{Worker, WorkerSettings};
use akritas::catalog::secrets::EnvSecrets;
use akritas::catalog::status::StatusBoard;
use akritas::notify::RetryPolicy;
use akritas::tenancy::Tenancy;
use serde_json::{Value, json};
use support::host;
use support::mattermost::MattermostStandIn;
use support::scripted_llm::ScriptedLlm;
use support::telegram::TelegramStandIn;
use tokio_util::sync::CancellationToken;

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const RESOLVED: &str = include_str!("fixtures/alertmanager/alertmanager-webhook-resolved.json");
const TG_TOKEN: &str = "123456:threads-test-token";
const MM_TOKEN: &str = "mm-threads-test-token";
const MM_CHANNEL: &str = "chan1chan1chan1chan1chan1c";

fn result() -> Value {
    json!({
        "finding_status": "suspected", "actionability": "requires_human", "confidence": "medium",
        "summary": "cart crash-loops after the last deploy", "impact": "checkout errors",
        "evidence": ["tool-call:call-1"], "ruled_out": [], "affected_components": ["cart"],
        "recommended_actions": ["roll back cart"], "production_writes": 0
    })
}

/// Webhook bodies received.
#[derive(Clone, Default)]
struct Hook(Arc<Mutex<Vec<Value>>>);

impl Hook {
    async fn start() -> (Hook, String) {
        let hook = Hook::default();
        let seen = hook.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    seen.0.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                    axum::http::StatusCode::OK
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

    fn events(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|b| b["event"].as_str().unwrap_or_default().to_string()).collect()
    }
}

/// The receivers `tg`, `mm` and `hook` in namespace `ops`, each with its `routing` (YAML flow).
fn receivers(tg: &TelegramStandIn, mm: &MattermostStandIn, hook: &str, routing: [&str; 3]) -> String {
    let [tg_routing, mm_routing, hook_routing] =
        routing.map(|r| if r.is_empty() { String::new() } else { format!(", routing: {r}") });
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: tg, namespace: ops}}\n\
         spec: {{type: telegram, telegram: {{botToken: {{env: TG_TOKEN}}, chatId: \"-1001\", messageThreadId: 7, baseUrl: \"{}\"}}{tg_routing}}}\n\
         ---\napiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: mm, namespace: ops}}\n\
         spec: {{type: mattermost, mattermost: {{baseUrl: \"{}\", botToken: {{env: MM_TOKEN}}, channelId: {MM_CHANNEL}}}{mm_routing}}}\n\
         ---\napiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: hook, namespace: ops}}\n\
         spec: {{type: webhook, webhook: {{url: \"{hook}\"}}{hook_routing}}}\n",
        tg.url, mm.url
    )
}

struct Rig {
    store: Arc<AlertStore>,
    cancel: CancellationToken,
    _manifests: tempfile::TempDir,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The worker on the store in `data`, its clock fixed at `now`.
async fn start(data: &std::path::Path, llm: &ScriptedLlm, manifests: String, now: jiff::Timestamp) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("receivers.yaml"), manifests).unwrap();
    let catalog = host::catalog_from(dir.path());
    let (tools, _) = host::standard_tools();
    let engine = Arc::new(host::engine(llm, host::settings(), tools, catalog.clone(), None, None));
    let store = Arc::new(AlertStore::open(&data.join("alerts.jsonl")).unwrap());
    let secrets = Arc::new(EnvSecrets::with_lookup(|name: &str| match name {
        "TG_TOKEN" => Some(TG_TOKEN.to_string()),
        "MM_TOKEN" => Some(MM_TOKEN.to_string()),
        _ => None,
    }));
    let settings = WorkerSettings {
        concurrency: 2,
        max_attempts: 2,
        backoff: Duration::from_millis(20),
        public_url: None,
        delivery: RetryPolicy { attempts: 2, base_delay: Duration::from_millis(20), timeout: Duration::from_secs(5) },
        tenancy: Tenancy::default(),
    };
    let worker = Worker::new(store.clone(), engine, catalog, secrets, StatusBoard::default(), settings)
        .unwrap()
        .with_clock(Arc::new(move || now));
    worker.recover().await.unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(Arc::new(worker).run(cancel.clone()));
    Rig { store, cancel, _manifests: dir }
}

/// Ingests an Alertmanager payload, its first alert's `startsAt` replaced when given.
async fn ingest(store: &AlertStore, payload: &str, starts_at: Option<&str>) -> (String, Option<String>) {
    let mut body: Value = serde_json::from_str(payload).unwrap();
    if let Some(at) = starts_at {
        body["alerts"][0]["startsAt"] = json!(at);
    }
    let context = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    let events = adapter("alertmanager").unwrap().decode(body.to_string().as_bytes(), &context).unwrap();
    let accepted = store.ingest("ops", "am", events).await.unwrap();
    (accepted.events[0].incident_id.to_string(), accepted.events[0].job_id.as_deref().map(str::to_string))
}

async fn settled_job(store: &AlertStore, id: &str) -> Job {
    support::poll(Duration::from_secs(20), || async {
        store.job(id).await.unwrap().filter(|j| j.status == JobStatus::Succeeded && !j.has_pending_deliveries())
    })
    .await
    .map(|(job, _)| job)
    .unwrap_or_else(|| panic!("job {id} did not settle"))
}

async fn wait_for(what: &str, check: impl Fn() -> bool) {
    let seen = support::poll(Duration::from_secs(20), || async { check().then_some(()) }).await;
    assert!(seen.is_some(), "timed out waiting for {what}");
}

fn noon() -> jiff::Timestamp {
    // A Monday.
    "2026-03-02T12:00:00Z".parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_is_one_thread_per_chat_receiver_across_a_restart_with_one_resolve_notice() {
    let llm = ScriptedLlm::start_with(support::scripted_llm::investigator(result(), "cart crash-loops")).await;
    let (tg, mm) = (TelegramStandIn::start(TG_TOKEN).await, MattermostStandIn::start(MM_TOKEN).await);
    let (hook, hook_url) = Hook::start().await;
    let data = tempfile::tempdir().unwrap();
    let manifests = || receivers(&tg, &mm, &hook_url, ["", "", ""]);
    let rig = start(data.path(), &llm, manifests(), noon()).await;

    // Fire: the investigation result opens one thread per chat receiver.
    let (incident, job_id) = ingest(&rig.store, FIRING, None).await;
    let job = settled_job(&rig.store, &job_id.expect("a job")).await;
    assert!(job.deliveries.iter().all(|d| d.status == DeliveryStatus::Delivered), "{:?}", job.deliveries);
    let sent = tg.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!((sent[0]["chat_id"].clone(), sent[0]["message_thread_id"].clone()), (json!("-1001"), json!(7)));
    assert!(sent[0].get("reply_parameters").is_none(), "the first message is top-level: {}", sent[0]);
    let posts = mm.posts();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0]["root_id"].as_str().unwrap_or_default(), "", "the first post is top-level");
    let tg_root = rig.store.told(&incident, "ops/tg").and_then(|t| t.thread_id).expect("telegram thread stored");
    let mm_root = posts[0]["id"].as_str().unwrap().to_string();
    assert_eq!(rig.store.told(&incident, "ops/mm").and_then(|t| t.thread_id), Some(mm_root.clone()));
    assert_eq!(rig.store.incident_for_thread("ops", "tg", &tg_root).as_deref(), Some(incident.as_str()));
    assert_eq!(rig.store.incident_for_thread("ops", "mm", &mm_root).as_deref(), Some(incident.as_str()));
    assert_eq!(rig.store.incident_for_thread("ops", "mm", "no-such-post"), None);
    assert_eq!(rig.store.incident_for_thread("ops", "tg", &mm_root), None);

    // Re-fire: the alert fires again into the same open incident; no new top-level post.
    let (again, job) = ingest(&rig.store, FIRING, Some("2026-11-29T22:50:00Z")).await;
    assert_eq!((again.as_str(), job), (incident.as_str(), None));

    // Restart between fire and resolve, from a snapshot: the thread survives. The store shows a
    // job's deliveries before their record is written, and takes no snapshot while a record is in
    // flight: the snapshot is taken once the worker's last record has settled.
    let snapshot = support::poll(Duration::from_secs(20), || async { rig.store.save_snapshot().await.then_some(()) });
    assert!(snapshot.await.is_some(), "a snapshot once the records in flight settle");
    drop(rig);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rig = start(data.path(), &llm, manifests(), noon()).await;
    assert_eq!(rig.store.replayed_at_open(), (0, true), "loaded from the snapshot alone");
    assert_eq!(rig.store.incident_for_thread("ops", "tg", &tg_root).as_deref(), Some(incident.as_str()));

    // Resolve: one notice per receiver, in the thread.
    let (resolved, _) = ingest(&rig.store, RESOLVED, None).await;
    assert_eq!(resolved, incident);
    wait_for("the resolve notices", || tg.sent().len() == 2 && mm.posts().len() == 2 && hook.events().len() == 2).await;
    let notice = &tg.sent()[1];
    assert_eq!(notice["reply_parameters"]["message_id"].to_string(), tg_root, "{notice}");
    assert_eq!(notice["message_thread_id"], json!(7));
    let text = notice["text"].as_str().unwrap();
    assert!(text.starts_with(&format!("Resolved: KubePodCrashLooping ({incident}) at ")), "{text}");
    let post = &mm.posts()[1];
    assert_eq!(post["root_id"].as_str(), Some(mm_root.as_str()), "{post}");
    assert!(post["message"].as_str().unwrap().starts_with("Resolved: KubePodCrashLooping"), "{post}");
    assert_eq!(hook.events(), ["incident.investigated", "incident.resolved"]);
    let envelope = hook.0.lock().unwrap()[1].clone();
    assert_eq!((envelope["version"].clone(), envelope["incident"]["incident_id"].clone()), (json!(1), json!(incident)));
    assert!(envelope["delivery_id"].is_string() && envelope["created_at"].is_string());
    // A stand-in has the notice as soon as it is sent; the outcome is journaled after its answer.
    let all_delivered = || {
        let told = rig.store.told_all(&incident);
        told.values().all(|t| t.resolve.as_ref().is_some_and(|d| d.status == DeliveryStatus::Delivered))
    };
    support::poll(Duration::from_secs(20), || async { all_delivered().then_some(()) }).await;
    let told = rig.store.told_all(&incident);
    assert!(all_delivered(), "{told:?}");

    // Another restart sends nothing again.
    drop(rig);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rig = start(data.path(), &llm, manifests(), noon()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!((tg.sent().len(), mm.posts().len(), hook.events().len()), (2, 2, 2));
    assert_eq!(rig.store.told_all(&incident), told, "the outcomes replay from the journal");
    let top_level = tg.sent().iter().filter(|m| m.get("reply_parameters").is_none()).count();
    assert_eq!(top_level, 1, "exactly one top-level Telegram message for the incident");
    assert_eq!(llm.chat_requests(), 3, "one investigation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_filters_are_recorded_and_counted_not_sent() {
    let llm = ScriptedLlm::start_with(support::scripted_llm::investigator(result(), "cart crash-loops")).await;
    let (tg, mm) = (TelegramStandIn::start(TG_TOKEN).await, MattermostStandIn::start(MM_TOKEN).await);
    let (hook, hook_url) = Hook::start().await;
    let data = tempfile::tempdir().unwrap();
    // The alert is critical; the injected time is Monday 12:00 UTC (14:00 at +02:00).
    let manifests = receivers(
        &tg,
        &mm,
        &hook_url,
        [
            "{severities: [warning]}",
            "{quietWindows: [{days: [mon], start: \"13:30\", end: \"15:00\", utcOffset: \"+02:00\"}]}",
            "{severities: [critical], matchLabels: {container: cart}, quietWindows: [{start: \"22:00\", end: \"06:00\"}]}",
        ],
    );
    let rig = start(data.path(), &llm, manifests, noon()).await;
    let (incident, job_id) = ingest(&rig.store, FIRING, None).await;
    let job = settled_job(&rig.store, &job_id.unwrap()).await;
    let outcome = |receiver: &str| {
        let d = job.deliveries.iter().find(|d| d.receiver == receiver).unwrap();
        (d.status, d.reason.clone())
    };
    assert_eq!(outcome("ops/tg"), (DeliveryStatus::Filtered, Some("severity".into())));
    assert_eq!(outcome("ops/mm"), (DeliveryStatus::Filtered, Some("quiet_window".into())));
    assert_eq!(outcome("ops/hook"), (DeliveryStatus::Delivered, None), "outside its quiet window");
    assert!(tg.sent().is_empty() && mm.posts().is_empty(), "nothing sent to filtered receivers");
    assert_eq!(hook.events(), ["incident.investigated"]);
    let mut metrics = String::new();
    akritas::telemetry::render(&mut metrics);
    for line in [
        "akritas_notifications_filtered_total{receiver=\"ops/tg\",reason=\"severity\"} 1",
        "akritas_notifications_filtered_total{receiver=\"ops/mm\",reason=\"quiet_window\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from:\n{metrics}");
    }
    // The filtered deliveries are on the incident, with their reason.
    let (_, _, jobs) = rig.store.incident(&incident).await.unwrap().unwrap();
    let stored = serde_json::to_value(&jobs[0].deliveries).unwrap();
    assert!(
        stored.as_array().unwrap().iter().any(|d| d["status"] == "filtered" && d["reason"] == "severity"),
        "{stored}"
    );

    // Resolve: only the receiver that was told gets the notice.
    ingest(&rig.store, RESOLVED, None).await;
    wait_for("the webhook's resolve notice", || hook.events().len() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(tg.sent().is_empty() && mm.posts().is_empty());
    assert_eq!(rig.store.told_all(&incident).keys().collect::<Vec<_>>(), ["ops/hook"]);
}
