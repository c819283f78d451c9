//! RunSchedules in operator mode against a real API server (etcd + kube-apiserver, RBAC on,
//! the chart's Roles): a schedule in a tenant namespace runs on its minute, its Runs are `Run`
//! objects owned by it (the reference Kubernetes' garbage collector follows), its status shows the tick and the result,
//! its receiver hears about it; a schedule naming another tenant's receiver is `Ready=False`.
//! Two schedulers on one PostgreSQL database run each tick once.

use akritas_testkit as support;
use akritas_testkit::kube_api;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use akritas::tools::{ToolName, openai_alias};
use kube_api::{KubeApi, OPERATOR_NAMESPACE};
use serde_json::{Value, json};
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use support::{Server, serve_command};

const WATCHED: [&str; 2] = ["team-a", "team-b"];

/// Plans nothing and submits a finding without evidence.
fn model() -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let submit = openai_alias(&ToolName::try_from("local.investigation.submit_result").unwrap());
    move |_, request| {
        if offers(request, &plan) {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else if offers(request, &submit) {
            Step::from(Reply::ToolCalls(vec![(
                "r".into(),
                submit.clone(),
                json!({"finding_status": "inconclusive", "actionability": "requires_human", "confidence": "low",
                       "summary": "The rollout of shop has not become available", "evidence": [],
                       "recommended_actions": ["look at the shop rollout"], "production_writes": 0}),
            )]))
        } else {
            Step::from(Reply::Content("shop is not available.".into()))
        }
    }
}

fn get_json(api: &KubeApi, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&api.kubectl_ok(&all)).unwrap()
}

fn condition(object: &Value, type_: &str) -> Option<(String, String, String)> {
    let found = object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)?;
    Some((
        found["status"].as_str()?.to_string(),
        found["reason"].as_str()?.to_string(),
        found["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// A webhook receiver keeping every body.
async fn webhook_receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = bodies.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let kept = kept.clone();
            async move { kept.lock().unwrap().push(body) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, bodies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_schedule_in_a_tenant_namespace_owns_its_runs_and_shows_its_status() {
    let api = KubeApi::start().await;
    api.install_crds(&support::root().join("crds"));
    api.create_operator_namespace();
    for namespace in WATCHED {
        api.create_namespace(namespace);
    }
    api.apply(&kube_api::chart_rbac(&WATCHED));
    let can = |args: &[&str]| {
        let (_, out, _) = api.kubectl_as(&api.operator_kubeconfig(), &[&["auth", "can-i"][..], args].concat(), None);
        out.trim().to_string()
    };
    for args in [
        &["watch", "runschedules.akritas.io", "-n", "team-a"][..],
        &["patch", "runschedules.akritas.io", "--subresource=status", "-n", "team-b"],
    ] {
        assert_eq!(can(args), "yes", "the chart lacks {args:?}");
    }
    assert_eq!(can(&["create", "runschedules.akritas.io", "-n", "team-a"]), "no", "the operator only reads schedules");
    let (hook, bodies) = webhook_receiver().await;
    api.apply(&format!(
        "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: hook, namespace: team-a}}\n\
         spec: {{type: webhook, webhook: {{url: \"{hook}\"}}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: chat, namespace: team-b}}\n\
         spec: {{type: webhook, webhook: {{url: \"{hook}\"}}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {{name: rollouts, namespace: team-a}}\n\
         spec: {{schedule: \"* * * * *\", prompt: \"Which rollouts are not available?\", receivers: [hook]}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {{name: foreign, namespace: team-a}}\n\
         spec: {{schedule: \"@hourly\", prompt: p, receivers: [team-b/chat]}}\n"
    ));
    // The API server refuses what the schema can: a six-field schedule is not refused there
    // (a pattern cannot say it), but the operator marks it invalid.
    api.apply(
        "apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {name: bad, namespace: team-b}\n\
         spec: {schedule: \"0 0 8 * * *\", prompt: p}\n",
    );
    let llm = ScriptedLlm::start_with(model()).await;
    let data = tempfile::tempdir().unwrap();
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--kubernetes")
        .env("AKRITAS_DATA_DIR", data.path())
        .env("AKRITAS_EGRESS_ALLOW", "127.0.0.1")
        .env("KUBECONFIG", api.operator_kubeconfig())
        .env("POD_NAMESPACE", OPERATOR_NAMESPACE)
        .env("AKRITAS_NAMESPACES", WATCHED.join(","))
        .env("AKRITAS_BASE_URL", &llm.url)
        .env("RUST_LOG", "info,kube=warn");
    let server = Server::start(command);

    let foreign = support::wait_for("foreign Ready=False", Duration::from_secs(30), || async {
        let object = get_json(&api, &["get", "runschedules", "foreign", "-n", "team-a"]);
        // `Ready` is False (`Checking`) until the scheduler has looked at the schedule.
        condition(&object, "Ready").filter(|(status, reason, _)| status == "False" && reason != "Checking")
    })
    .await;
    assert_eq!(foreign.1, "ReferenceNotFound", "{foreign:?}");
    assert!(foreign.2.contains("team-b/chat is not a NotificationReceiver this namespace sees"), "{foreign:?}");
    let bad = support::wait_for("bad Ready=False", Duration::from_secs(30), || async {
        condition(&get_json(&api, &["get", "runschedules", "bad", "-n", "team-b"]), "Ready")
    })
    .await;
    assert_eq!((bad.0.as_str(), bad.1.as_str()), ("False", "Invalid"), "{bad:?}");
    assert!(bad.2.contains("expected 5 fields"), "{bad:?}");

    // The every-minute schedule ticks within a minute; its Run is an owned `Run` object.
    let schedule = get_json(&api, &["get", "runschedules", "rollouts", "-n", "team-a"]);
    let uid = schedule["metadata"]["uid"].as_str().unwrap().to_string();
    let run = support::wait_for("an owned, finished Run object", Duration::from_secs(100), || async {
        let runs = get_json(&api, &["get", "runs", "-n", "team-a", "-l", "akritas.io/schedule=rollouts"]);
        runs["items"].as_array()?.iter().find(|r| r["status"]["phase"] == "Succeeded").cloned()
    })
    .await;
    let owner = &run["metadata"]["ownerReferences"][0];
    assert_eq!((owner["kind"].as_str(), owner["uid"].as_str()), (Some("RunSchedule"), Some(uid.as_str())), "{run}");
    assert_eq!(run["status"]["source"], "schedule");
    assert!(run["spec"]["prompt"].as_str().unwrap().starts_with("Scheduled check team-a/rollouts for "), "{run}");
    let status = support::wait_for("the schedule's status", Duration::from_secs(30), || async {
        let object = get_json(&api, &["get", "runschedules", "rollouts", "-n", "team-a"]);
        object["status"]["lastResult"].is_object().then_some(object["status"].clone())
    })
    .await;
    assert_eq!(status["lastResult"]["findingStatus"], "inconclusive", "{status}");
    assert_eq!(status["lastResult"]["changes"], json!(["first finding: inconclusive"]), "{status}");
    assert!(status["lastScheduleTime"].is_string() && status["nextScheduleTime"].is_string(), "{status}");
    assert_eq!(status["lastResult"]["runName"], run["metadata"]["name"], "{status}");
    let ready = condition(&json!({"status": status}), "Ready").unwrap();
    assert_eq!(ready.0, "True", "{status}");
    let received = support::wait_for("the receiver told", Duration::from_secs(30), || async {
        bodies.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(received["check"]["schedule"], "team-a/rollouts");
    assert_eq!(owner["name"], "rollouts");
    drop(server);
}

/// Two schedulers on one PostgreSQL database, each with its own copy of the schedule store
/// (two replicas that both believe they lead): every tick is claimed by one of them and run
/// once, and both read the same books.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_schedulers_on_one_database_run_each_tick_once() {
    use akritas::audit::AuditLog;
    use akritas::catalog::secrets::EnvSecrets;
    use akritas::catalog::status::StatusBoard;
    use akritas::schedules::{ManualClock, ScheduleStore, Scheduler, SchedulerParts};
    use std::collections::BTreeSet;
    use tokio_util::sync::CancellationToken;

    let pg = support::postgres::Postgres::start();
    let db = akritas::journal::database::Database::connect(&pg.url("disable"), None, 8).unwrap();
    db.migrate().await.unwrap();
    let manifests = tempfile::tempdir().unwrap();
    std::fs::write(
        manifests.path().join("schedule.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {name: db, namespace: ops}\n\
         spec: {schedule: \"* * * * *\", prompt: \"Is db-7 healthy?\"}\n",
    )
    .unwrap();
    let catalog = support::host::catalog_from(manifests.path());
    let llm = ScriptedLlm::start_with(model()).await;
    let data = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&data.path().join("audit.jsonl")).unwrap());
    let engine = Arc::new(support::host::engine(
        &llm,
        support::host::settings(),
        support::host::standard_tools().0,
        catalog.clone(),
        Some(audit.clone()),
        None,
    ));
    let clock = Arc::new(ManualClock::new("2026-12-06T07:59:30Z".parse().unwrap()));
    let mut stores = Vec::new();
    let cancel = CancellationToken::new();
    for _ in 0..2 {
        let stamp: akritas::journal::Clock = Arc::new(|| jiff::Timestamp::now().to_string());
        let store = ScheduleStore::open_database(&db, stamp, 100).await.unwrap();
        let scheduler = Scheduler::new(SchedulerParts {
            store: store.clone(),
            engine: engine.clone(),
            catalog: catalog.clone(),
            secrets: Arc::new(EnvSecrets::with_lookup(|_: &str| None)),
            board: StatusBoard::default(),
            clock: clock.clone(),
            settings: support::host::scheduler_settings(u64::MAX, 4, 4),
        })
        .unwrap();
        tokio::spawn(Arc::new(scheduler).run(cancel.clone()));
        stores.push(store);
    }
    let (a, b) = (stores[0].clone(), stores[1].clone());
    support::wait_for("the schedule seen", Duration::from_secs(20), || async { a.book("ops/db") }).await;
    for minute in 0..3 {
        let tick: jiff::Timestamp = format!("2026-12-06T08:0{minute}:00Z").parse().unwrap();
        clock.set(tick.checked_add(jiff::SignedDuration::from_secs(1)).unwrap());
        let id = format!("schedule:ops/db@{tick}");
        for _ in 0..100 {
            a.refresh().await.unwrap();
            if a.book("ops/db").and_then(|b| b.result).is_some_and(|r| r.scheduled_time == tick.to_string()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let runs = audit.runs_of_jobs(&BTreeSet::from([id.as_str()])).await.unwrap();
        assert_eq!(runs.len(), 1, "tick {tick} ran {} times", runs.len());
    }
    b.refresh().await.unwrap();
    let (book_a, book_b) = (a.book("ops/db").unwrap(), b.book("ops/db").unwrap());
    assert_eq!(book_a, book_b, "both replicas read the same books");
    assert_eq!((book_a.recent.len(), book_a.skipped, book_a.missed), (3, 0, 0), "{book_a:?}");
    cancel.cancel();
}
