//! Store contracts: the same test code run against every storage backend. The fast tier runs
//! each against the embedded journal, the e2e tier against a real PostgreSQL; a backend passes
//! when it gives the same answers.

use std::collections::BTreeMap;

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
