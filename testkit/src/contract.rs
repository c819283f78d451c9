//! Store contracts: the same test code run against every storage backend. The fast tier runs
//! each against the embedded journal, the e2e tier against a real PostgreSQL; a backend passes
//! when it gives the same answers.

use std::collections::BTreeMap;

use akritas::alerts::store::{AlertStore, Failure, JobStatus, Step};
use akritas::audit::{AuditError, AuditLog, Finish, NewEvent, NewRun, RunId, RunStatus, TOOL_CALL};
use serde_json::{Value, json};

/// Run `n`'s `call`-th tool call, an execution call with a payload.
pub fn call_event(n: usize, call: usize) -> NewEvent {
    let metadata = BTreeMap::from([
        ("call_id".to_string(), json!(format!("call-{n}-{call}"))),
        ("call_kind".to_string(), json!("execution")),
        ("tool".to_string(), json!("postgres.activity")),
    ]);
    NewEvent {
        kind: TOOL_CALL.into(),
        status: Some("succeeded".into()),
        metadata,
        arguments: Some(json!({"query": call})),
        result: Some(json!({"output": {"rows": format!("{n}-{call}-").repeat(50), "n": n}})),
    }
}

/// A Run of `namespace` opened with a `job_id` and a credential-looking key in its metadata.
pub fn new_run(namespace: &str, n: usize) -> NewRun {
    NewRun {
        namespace: namespace.into(),
        source: "alert:alertmanager".into(),
        actor: "tester".into(),
        model: Some("m".into()),
        catalog_version: 1,
        metadata: BTreeMap::from([
            ("n".to_string(), json!(n)),
            ("job_id".to_string(), json!(format!("job_{n}"))),
            ("api_key".to_string(), json!("sk-never-stored")),
        ]),
    }
}

fn finish(status: RunStatus) -> Finish {
    Finish {
        status,
        error: (status == RunStatus::Failed).then(|| "boom".to_string()),
        error_code: None,
        metadata: BTreeMap::from([("output_tokens".to_string(), json!(7))]),
    }
}

/// A structured result citing `call`.
pub fn result_citing(call: &str) -> akritas::investigation::InvestigationResult {
    let text = json!({
        "finding_status": "suspected", "actionability": "requires_human", "confidence": "low",
        "summary": "db-7 is busy", "impact": "", "evidence": [format!("tool-call:{call}")], "ruled_out": [],
        "affected_components": ["db-7"], "recommended_actions": [], "production_writes": 0
    });
    let evidence = akritas::investigation::Evidence::from([(call.to_string(), json!({}))]);
    akritas::investigation::validate(&text.to_string(), &evidence).unwrap()
}

/// Runs are opened, written, finished, listed newest first (per namespace too), read whole,
/// counted; a listing leaves payloads out; credentials never reach the record.
pub async fn audit_lifecycle_reads_and_counts(audit: &AuditLog) {
    let before = audit.len().await.unwrap();
    let a = audit.start(new_run("team-a", 1)).await.unwrap();
    let b = audit.start(new_run("team-b", 2)).await.unwrap();
    for call in 0..3 {
        assert_eq!(audit.event(&a, call_event(1, call)).await.unwrap(), call as u32 + 1);
    }
    audit.event(&b, call_event(2, 0)).await.unwrap();
    audit.finish(&a, finish(RunStatus::Succeeded)).await.unwrap();

    let run = audit.get(&a).await.unwrap().expect("the Run is read back");
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.namespace, "team-a");
    assert_eq!(run.events.len(), 3);
    assert_eq!(run.events.iter().map(|e| e.sequence).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(run.events[2].result, call_event(1, 2).result);
    assert!(!run.metadata.contains_key("api_key"), "a credential-looking key is dropped: {:?}", run.metadata);
    assert_eq!(run.metadata.get("output_tokens"), Some(&json!(7)));
    assert!(run.completed_at.is_some() && !run.started_at.is_empty());

    let listed = audit.list(1000).await.unwrap();
    let position = |id: &RunId| listed.iter().position(|r| &r.id == id);
    assert!(position(&b).unwrap() < position(&a).unwrap(), "newest first");
    let summary = &listed[position(&a).unwrap()];
    assert!(summary.events.iter().all(|e| e.result.is_none() && e.arguments.is_none()), "no payloads in a listing");
    let team_b = audit.list_where(1000, |ns| ns == "team-b").await.unwrap();
    assert!(team_b.iter().all(|r| r.namespace == "team-b") && team_b.iter().any(|r| r.id == b));
    assert_eq!(audit.list(1).await.unwrap().len(), 1);

    assert_eq!(audit.namespace_of(&b).await.unwrap().as_deref(), Some("team-b"));
    assert_eq!(audit.namespace_of(&RunId::generate()).await.unwrap(), None);
    assert_eq!(audit.get(&RunId::generate()).await.unwrap(), None);
    assert_eq!(audit.len().await.unwrap(), before + 2);
    let counts = audit.status_counts().await.unwrap();
    assert!(counts["running"] >= 1 && counts["succeeded"] >= 1, "{counts:?}");

    let jobs = std::collections::BTreeSet::from(["job_1"]);
    let of_job = audit.runs_of_jobs(&jobs).await.unwrap();
    assert_eq!(of_job.iter().map(|r| &r.id).collect::<Vec<_>>(), [&a], "the Run of job_1, with payloads");
    assert!(of_job[0].events[0].result.is_some());
}

/// What a Run's lifecycle does not allow is refused and writes nothing; a result must cite the
/// Run's own successful calls.
pub async fn audit_refusals(audit: &AuditLog) {
    let id = audit.start(new_run("team-a", 3)).await.unwrap();
    audit.event(&id, call_event(3, 0)).await.unwrap();
    let unknown = RunId::generate();
    assert!(matches!(audit.event(&unknown, call_event(3, 1)).await, Err(AuditError::UnknownRun(_))));
    assert!(matches!(audit.claim(&unknown).await, Err(AuditError::UnknownRun(_))));

    let rejected = audit.record_investigation(&id, &result_citing("call-9-9")).await;
    assert!(matches!(rejected, Err(AuditError::ResultRejected { .. })), "{rejected:?}");
    audit.record_investigation(&id, &result_citing("call-3-0")).await.unwrap();
    let twice = audit.record_investigation(&id, &result_citing("call-3-0")).await;
    assert!(matches!(twice, Err(AuditError::AlreadyFinished(_))), "{twice:?}");

    audit.finish(&id, finish(RunStatus::Failed)).await.unwrap();
    assert!(matches!(audit.finish(&id, finish(RunStatus::Failed)).await, Err(AuditError::AlreadyFinished(_))));
    // A follow-up appends to a finished Run.
    let claimed = audit.claim(&id).await.unwrap();
    assert!(matches!(audit.claim(&id).await, Err(AuditError::RunActive(_))));
    assert_eq!(audit.event(&id, call_event(3, 1)).await.unwrap(), 2);
    drop(claimed);
    audit.claim(&id).await.unwrap();

    let run = audit.get(&id).await.unwrap().unwrap();
    assert_eq!(run.events.len(), 2, "the refused writes left nothing");
    assert_eq!(run.investigation.map(|r| r.evidence), Some(vec!["tool-call:call-3-0".to_string()]));
    assert_eq!(run.status, RunStatus::Failed);
}

/// Many tasks write many Runs at once: every Run's events are numbered 1..n in order.
pub async fn audit_concurrent_writers(audit: std::sync::Arc<AuditLog>) {
    let mut tasks = Vec::new();
    for n in 0..8 {
        let audit = audit.clone();
        tasks.push(tokio::spawn(async move {
            let id = audit.start(new_run(if n % 2 == 0 { "team-a" } else { "team-b" }, 100 + n)).await.unwrap();
            for call in 0..20 {
                audit.event(&id, call_event(100 + n, call)).await.unwrap();
            }
            audit.finish(&id, finish(RunStatus::Succeeded)).await.unwrap();
            id
        }));
    }
    for task in tasks {
        let id = task.await.unwrap();
        let run = audit.get(&id).await.unwrap().unwrap();
        let sequences: Vec<u32> = run.events.iter().map(|e| e.sequence).collect();
        assert_eq!(sequences, (1..=20).collect::<Vec<u32>>());
        let calls: Vec<Value> = run.events.iter().map(|e| e.arguments.clone().unwrap()).collect();
        assert_eq!(calls, (0..20).map(|call| json!({"query": call})).collect::<Vec<_>>(), "in the order written");
        assert_eq!(run.status, RunStatus::Succeeded);
    }
}

/// Generic-webhook alerts, one per `(state, key)`, each correlated by its key.
pub fn alert_events(list: &[(&str, &str)]) -> Vec<akritas::alerts::event::Event> {
    use akritas::alerts::adapters::{DecodeContext, adapter};
    let alerts: Vec<Value> = list
        .iter()
        .map(|(state, key)| {
            json!({"state": state, "name": "HighCPU", "summary": format!("CPU high on {key}"),
                   "entity": {"kind": "host", "id": key}, "started_at": "2026-11-29T22:40:00Z",
                   "correlation_key": key, "labels": {"team": "storage"}})
        })
        .collect();
    let body = json!({"schema_version": 1, "alerts": alerts}).to_string();
    let context = DecodeContext { source_type: "generic", source_name: "gen", observed_at: jiff::Timestamp::now() };
    adapter("generic").unwrap().decode(body.as_bytes(), &context).unwrap()
}

/// Limits that never defer a job (the contract is about storage, not admission).
pub fn open_limits() -> akritas::alerts::admission::Limits {
    akritas::alerts::admission::Limits {
        source_rate_per_minute: 1_000_000,
        max_pending_jobs: 1_000_000,
        max_pending_per_namespace: 1_000_000,
        max_deferred_per_source: 10_000,
    }
}

/// Deduplication and correlation, a job's steps, and every read: the answers a store gives.
pub async fn alerts_deliveries_jobs_and_reads(store: &AlertStore) {
    let first = store.ingest("ops", "gen", alert_events(&[("firing", "db-1")])).await.unwrap();
    assert_eq!(first.events[0].status, "accepted");
    let job_id = first.events[0].job_id.clone().expect("a new incident gets a job");
    let again = store.ingest("ops", "gen", alert_events(&[("firing", "db-1")])).await.unwrap();
    assert_eq!(again.events[0].status, "duplicate");
    assert_eq!(again.events[0].incident_id, first.events[0].incident_id);
    let other = store.ingest("team-b", "gen", alert_events(&[("firing", "db-2")])).await.unwrap();
    assert_ne!(other.events[0].incident_id, first.events[0].incident_id);

    let incident_id = first.events[0].incident_id.clone();
    let (incident, events, jobs) = store.incident(&incident_id).await.unwrap().expect("the incident is read back");
    assert_eq!((incident.namespace.as_str(), events.len(), jobs.len()), ("ops", 1, 1));
    assert_eq!(events[0].event.labels["team"], "storage");
    let event = store.event(&first.events[0].event_id).await.unwrap().expect("the event is read back");
    assert_eq!(event.incident_id, incident_id);
    let listed = store.incidents(10).await.unwrap();
    assert_eq!(listed.len(), 2);
    let team_b = store.incidents_where(10, |namespace, _| namespace == "team-b").await.unwrap();
    assert_eq!(team_b.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), [other.events[0].incident_id.as_str()]);

    let mut job = store.job(&job_id).await.unwrap().expect("the job is read back");
    assert_eq!(job.status, JobStatus::Pending);
    store.step(&mut job, Step::Start).await.unwrap();
    assert_eq!(store.job(&job_id).await.unwrap().unwrap().status, JobStatus::Running);
    let failure = Failure { run: None, code: "upstream_error".into(), error: "model unavailable".into() };
    store.step(&mut job, Step::Fail { failure, notifications: Vec::new() }).await.unwrap();
    let settled = store.job(&job_id).await.unwrap().unwrap();
    assert_eq!((settled.status, settled.error.as_deref()), (JobStatus::Failed, Some("model unavailable")));

    let resolved = store.ingest("ops", "gen", alert_events(&[("resolved", "db-1")])).await.unwrap();
    assert_eq!(resolved.events[0].status, "accepted");
    let (incident, events, _) = store.incident(&incident_id).await.unwrap().unwrap();
    assert!(incident.resolved_at.is_some() && events.len() == 2, "{incident:?}");
    let (jobs, states) = store.tallies();
    assert_eq!((jobs["failed"], jobs["pending"], states["resolved"], states["firing"]), (1, 1, 1, 1));
    assert_eq!(store.counters("ops/gen").duplicate, 1);
    assert!(store.incident("inc_missing").await.unwrap().is_none());
    assert!(store.job("job_missing").await.unwrap().is_none());
}

/// What a store holds survives a reopen, from its snapshot and the records after it: the same
/// incidents, events, jobs and tallies.
pub async fn alerts_survive_a_reopen<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = AlertStore>,
{
    let store = open().await;
    for n in 0..40 {
        let key = format!("host-{n}");
        let fired = store.ingest("ops", "gen", alert_events(&[("firing", &key)])).await.unwrap();
        if n % 3 == 0 {
            store.ingest("ops", "gen", alert_events(&[("resolved", &key)])).await.unwrap();
        }
        if n % 4 == 0
            && let Some(job) = store.job(fired.events[0].job_id.as_deref().unwrap()).await.unwrap()
        {
            crate::jobs::give_up(&store, job, "model unavailable").await.unwrap();
        }
        if n == 20 {
            assert!(store.save_snapshot().await, "a snapshot halfway");
        }
    }
    let before = (crate::jobs::incident_details(&store, 1000).await, store.tallies(), store.all_counters());
    drop(store);
    let reopened = open().await;
    let (replayed, from_snapshot) = reopened.replayed_at_open();
    assert!(from_snapshot && replayed > 0, "from the snapshot, then the records after it ({replayed})");
    let after = (crate::jobs::incident_details(&reopened, 1000).await, reopened.tallies(), reopened.all_counters());
    assert_eq!(after.0, before.0);
    assert_eq!((after.1, after.2.len()), (before.1, before.2.len()));
}
