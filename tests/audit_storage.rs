//! The audit keeps a Run index in memory and reads Run detail from the journal: detail
//! survives restarts from a snapshot with Runs spanning small segments, a restart replays
//! only the tail, a stale snapshot falls back to a full replay, retention drops old Runs
//! (never a running one) and structured results are still checked against evidence read
//! back from disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use akritas::audit::{self, AuditLog, AuditStorage, Finish, NewEvent, NewRun, RunId, RunRecord, RunStatus, TOOL_CALL};
use akritas::journal::{self, Journal, JournalOptions};
use serde_json::{Value, json};

const SEGMENT: u64 = 4096;

fn storage(snapshot_records: u64, retention: Option<Duration>) -> AuditStorage {
    AuditStorage {
        journal: JournalOptions { segment_bytes: SEGMENT, ..JournalOptions::default() },
        snapshot_records,
        retention,
    }
}

fn open(path: &Path, snapshot_records: u64, retention: Option<Duration>) -> AuditLog {
    AuditLog::open_with(path, storage(snapshot_records, retention)).unwrap_or_else(|e| panic!("{e}"))
}

fn raw_result(n: usize, call: usize) -> Value {
    json!({"output": {"rows": format!("{n}-{call}-").repeat(200), "n": n}})
}

fn call_event(n: usize, call: usize) -> NewEvent {
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
        result: Some(raw_result(n, call)),
    }
}

/// Starts Run `n` (namespace `team-a` or `team-b`) with `calls` tool calls and finishes it if asked.
async fn run(audit: &AuditLog, n: usize, calls: usize, finish: bool) -> RunId {
    let new = NewRun {
        namespace: if n.is_multiple_of(2) { "team-a" } else { "team-b" }.into(),
        source: "cli".into(),
        actor: "tester".into(),
        model: Some("m".into()),
        catalog_version: 1,
        metadata: BTreeMap::from([("n".to_string(), json!(n))]),
    };
    let id = audit.start(new).await.unwrap();
    for call in 0..calls {
        audit.event(&id, call_event(n, call)).await.unwrap();
    }
    if finish {
        let finish = Finish {
            status: RunStatus::Succeeded,
            error: None,
            error_code: None,
            metadata: BTreeMap::from([("output_tokens".to_string(), json!(n * 10))]),
        };
        audit.finish(&id, finish).await.unwrap();
    }
    id
}

/// What the log shows: every Run's detail, the listings and the counts.
type View = (Vec<Option<RunRecord>>, Vec<RunRecord>, Vec<RunRecord>, BTreeMap<&'static str, u64>);

async fn view(audit: &AuditLog, ids: &[RunId]) -> View {
    let mut details = Vec::new();
    for id in ids {
        details.push(audit.get(id).await.unwrap());
    }
    let team_b = audit.list_where(1000, |ns| ns == "team-b").await.unwrap();
    (details, audit.list(1000).await.unwrap(), team_b, audit.status_counts().await.unwrap())
}

fn segments(path: &Path) -> Vec<PathBuf> {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let mut found: Vec<PathBuf> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let file = p.file_name().unwrap().to_string_lossy();
            file == name
                || file.strip_prefix(&format!("{name}.")).is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn detail_survives_a_restart_from_a_snapshot_and_only_the_tail_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = open(&path, 1_000_000, None);
    let mut ids = Vec::new();
    for n in 0..12 {
        ids.push(run(&audit, n, 3, n != 11).await);
    }
    assert!(segments(&path).len() > 5, "Runs span several 4 KiB segments");
    let before = view(&audit, &ids).await;
    let checkpoint = audit.snapshot().await.expect("a snapshot is written");
    print_index_size(&audit).await;
    drop(audit);

    let audit = open(&path, 1_000_000, None);
    assert_eq!(audit.start_report().snapshot, Some(checkpoint));
    assert_eq!(audit.start_report().replayed, 0, "nothing after the snapshot");
    assert_eq!(view(&audit, &ids).await, before);
    for (n, id) in ids.iter().enumerate() {
        let detail = audit.get(id).await.unwrap().unwrap();
        assert_eq!(detail.events.len(), 3);
        for (call, event) in detail.events.iter().enumerate() {
            assert_eq!(event.result.as_ref(), Some(&raw_result(n, call)), "raw result of Run {n} call {call}");
            assert_eq!(event.arguments, Some(json!({"query": call})));
            assert_eq!(event.metadata["call_id"], json!(format!("call-{n}-{call}")));
        }
        assert_eq!(detail.status, if n == 11 { RunStatus::Running } else { RunStatus::Succeeded });
    }
    // The tail: two more Runs (5 records each) and an event on a finished Run.
    ids.push(run(&audit, 12, 3, true).await);
    ids.push(run(&audit, 13, 3, true).await);
    audit.event(&ids[0], call_event(0, 3)).await.unwrap();
    let before = view(&audit, &ids).await;
    drop(audit);

    let audit = open(&path, 1_000_000, None);
    assert_eq!(audit.start_report().snapshot, Some(checkpoint));
    assert_eq!(audit.start_report().replayed, 11, "only the records after the snapshot");
    assert_eq!(view(&audit, &ids).await, before);
    drop(audit);

    journal::snapshot::discard(&path);
    let audit = open(&path, 1_000_000, None);
    assert_eq!(audit.start_report().snapshot, None);
    assert_eq!(audit.start_report().replayed, 13 * 5 + 4 + 1, "a full replay");
    assert_eq!(view(&audit, &ids).await, before, "a full replay gives the same Runs");
    assert_eq!(audit.status_counts().await.unwrap()["running"], 1);
    assert_eq!(audit.list_where(1000, |ns| ns == "team-b").await.unwrap().len(), 7);
}

#[tokio::test]
async fn snapshots_are_taken_in_the_background_every_n_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = open(&path, 100, None);
    let mut ids = Vec::new();
    for n in 0..30 {
        ids.push(run(&audit, n, 2, true).await);
    }
    let before = view(&audit, &ids).await;
    // Waits for a snapshot being written, then takes one of the rest.
    audit.snapshot().await;
    drop(audit);
    let audit = open(&path, 100, None);
    assert_eq!(audit.start_report().snapshot, Some(120), "the last record of the 30 Runs");
    assert_eq!(audit.start_report().replayed, 0);
    assert_eq!(view(&audit, &ids).await, before);
}

/// Runs written by `tasks` tasks at once, `each` Runs a task (4 records a Run).
async fn concurrently(audit: &std::sync::Arc<AuditLog>, tasks: usize, each: usize, first: usize) -> Vec<RunId> {
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let audit = audit.clone();
        set.spawn(async move {
            let mut ids = Vec::new();
            for n in 0..each {
                ids.push(run(&audit, first + task * each + n, 2, true).await);
            }
            ids
        });
    }
    let mut ids = Vec::new();
    while let Some(done) = set.join_next().await {
        ids.extend(done.unwrap());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshots_taken_while_runs_write_concurrently_match_a_full_replay() {
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = std::sync::Arc::new(open(&path, 100, None));
    let mut ids = concurrently(&audit, 8, 5, 0).await;
    // One at a time: nothing in flight after each append, so a snapshot is due in here.
    for n in 1000..1030 {
        ids.push(run(&audit, n, 2, true).await);
    }
    ids.extend(concurrently(&audit, 8, 5, 2000).await);
    audit.snapshot_settled().await;
    let total = ids.len() as u64 * 4;
    let audit = std::sync::Arc::into_inner(audit).expect("no other holder");
    let before = view(&audit, &ids).await;
    print_index_size(&audit).await;
    drop(audit);

    let audit = open(&path, 1_000_000, None);
    let report = audit.start_report();
    let snapshot = report.snapshot.expect("a background snapshot was written");
    assert_eq!(snapshot + report.replayed, total, "the snapshot reflects exactly the records up to its checkpoint");
    assert_eq!(view(&audit, &ids).await, before);
    drop(audit);
    journal::snapshot::discard(&path);
    let audit = open(&path, 1_000_000, None);
    assert_eq!(audit.start_report().replayed, total);
    assert_eq!(view(&audit, &ids).await, before, "the same Runs as a full replay");
}

#[tokio::test]
async fn a_stale_or_forged_snapshot_falls_back_to_a_full_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = open(&path, 1_000_000, None);
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(run(&audit, n, 2, true).await);
    }
    let seq = audit.snapshot().await.unwrap();
    ids.push(run(&audit, 4, 2, false).await);
    let before = view(&audit, &ids).await;
    drop(audit);

    // The checkpoint's hash changed: the snapshot's own SHA-256 no longer matches.
    let snapshot_path = journal::snapshot::snapshot_path(&path);
    let original = std::fs::read_to_string(&snapshot_path).unwrap();
    let mut forged: Value = serde_json::from_str(&original).unwrap();
    forged["checkpoint"]["hash"] = json!("0".repeat(64));
    std::fs::write(&snapshot_path, forged.to_string()).unwrap();
    let audit = open(&path, 1_000_000, None);
    assert_eq!(audit.start_report().snapshot, None, "the forged snapshot is not used");
    assert_eq!(audit.start_report().replayed, 4 * 4 + 3);
    assert_eq!(view(&audit, &ids).await, before);
    drop(audit);

    // The journal was replaced by another one at least as long: the old snapshot does not match it.
    for segment in segments(&path) {
        std::fs::remove_file(segment).unwrap();
    }
    let audit = open(&path, 1_000_000, None);
    let mut other = Vec::new();
    for n in 100..106 {
        other.push(run(&audit, n, 2, true).await);
    }
    let expected = view(&audit, &other).await;
    drop(audit);
    std::fs::write(&snapshot_path, &original).unwrap();
    assert!(serde_json::from_str::<Value>(&original).unwrap()["checkpoint"]["seq"] == json!(seq));
    let audit = open(&path, 1_000_000, None);
    assert_eq!(audit.start_report().snapshot, None);
    assert!(!snapshot_path.exists(), "the stale snapshot is discarded");
    assert_eq!(view(&audit, &other).await, expected);
    for id in &ids {
        assert!(audit.get(id).await.unwrap().is_none(), "no Run of the old journal");
    }
    assert_eq!(audit.len().await.unwrap(), 6);
}

fn removed_total() -> f64 {
    let mut out = String::new();
    akritas::telemetry::render(&mut out);
    out.lines()
        .find_map(|line| line.strip_prefix("akritas_audit_runs_removed_total "))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

#[tokio::test]
async fn retention_removes_old_runs_but_never_a_running_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = open(&path, 1_000_000, Some(Duration::ZERO));
    let mut old = Vec::new();
    for n in 0..6 {
        old.push(run(&audit, n, 2, true).await);
    }
    let running = run(&audit, 6, 2, false).await;
    let mut new = Vec::new();
    for n in 7..12 {
        new.push(run(&audit, n, 2, true).await);
    }
    let running_before = audit.get(&running).await.unwrap().unwrap();
    // A follow-up holds this finished Run: it is kept with everything after it.
    let follow_up = audit.claim(&old[3]).await.unwrap();
    let counted = removed_total();
    audit.snapshot().await.unwrap();
    assert!(audit.get(&old[3]).await.unwrap().is_some(), "a claimed Run is kept");
    for id in &old[4..] {
        assert!(audit.get(id).await.unwrap().is_some());
    }
    audit.event(&old[3], call_event(3, 2)).await.unwrap();
    drop(follow_up);

    let mut gone: Vec<&RunId> = Vec::new();
    for id in &old {
        if audit.get(id).await.unwrap().is_none() {
            gone.push(id);
        }
    }
    assert!(!gone.is_empty(), "retention removed old Runs");
    assert_eq!(removed_total() - counted, gone.len() as f64, "counted");
    assert_eq!(audit.len().await.unwrap(), 12 - gone.len());
    assert_eq!(audit.get(&running).await.unwrap(), Some(running_before), "the running Run is kept whole");
    for id in &new {
        assert!(audit.get(id).await.unwrap().is_some());
    }
    assert!(journal::anchor(&path).unwrap().unwrap().first_seq > 1);
    audit::verify(&path).unwrap_or_else(|e| panic!("the kept journal verifies: {e}"));

    // The running Run still writes and finishes.
    audit.event(&running, call_event(6, 2)).await.unwrap();
    audit
        .finish(
            &running,
            Finish { status: RunStatus::Failed, error: None, error_code: None, metadata: BTreeMap::new() },
        )
        .await
        .unwrap();
    let all: Vec<RunId> = old.iter().chain([&running]).chain(&new).cloned().collect();
    let live = view(&audit, &all).await;
    drop(audit);

    // From the snapshot taken before the Runs were dropped, and from a full replay of what is kept.
    let audit = open(&path, 1_000_000, None);
    assert!(audit.start_report().snapshot.is_some());
    assert_eq!(audit.start_report().removed_runs, gone.len() as u64);
    assert_eq!(view(&audit, &all).await, live);
    drop(audit);
    journal::snapshot::discard(&path);
    let audit = open(&path, 1_000_000, None);
    assert_eq!(audit.start_report().snapshot, None);
    assert_eq!(view(&audit, &all).await, live, "a full replay of the kept journal gives the same Runs");
    audit::verify(&path).unwrap_or_else(|e| panic!("{e}"));
}

fn result_citing(call: &str) -> Value {
    json!({
        "finding_status": "suspected", "actionability": "requires_human", "confidence": "low",
        "summary": "db-7 is busy", "impact": "", "evidence": [format!("tool-call:{call}")], "ruled_out": [],
        "affected_components": ["db-7"], "recommended_actions": [], "production_writes": 0
    })
}

fn investigation(call: &str) -> akritas::investigation::InvestigationResult {
    let evidence = akritas::investigation::Evidence::from([(call.to_string(), json!({}))]);
    akritas::investigation::validate(&result_citing(call).to_string(), &evidence).unwrap()
}

#[tokio::test]
async fn a_result_is_checked_against_evidence_read_from_disk_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = open(&path, 1_000_000, None);
    let a = run(&audit, 0, 2, false).await;
    let b = run(&audit, 1, 2, false).await;
    audit.close().await.unwrap();
    drop(audit);

    let audit = open(&path, 1_000_000, None);
    assert!(audit.start_report().snapshot.is_some());
    let error = audit.record_investigation(&a, &investigation("call-1-0")).await.expect_err("call-1-0 is Run b's");
    assert!(error.to_string().contains("names no successful tool call"), "{error}");
    audit.record_investigation(&a, &investigation("call-0-1")).await.unwrap();
    assert_eq!(audit.get(&a).await.unwrap().unwrap().investigation.unwrap().evidence, ["tool-call:call-0-1"]);
    drop(audit);

    // A result record citing another Run's call, written behind the audit's back after the snapshot.
    {
        let options = JournalOptions { segment_bytes: SEGMENT, ..JournalOptions::default() };
        let (journal, _) = Journal::open(&path, options).unwrap();
        journal
            .append("investigation_result", &json!({"run_id": b, "result": result_citing("call-0-0")}))
            .await
            .unwrap();
        journal.close().await.unwrap();
    }
    let error = AuditLog::open_with(&path, storage(1_000_000, None)).err().expect("the forged result is refused");
    assert!(error.to_string().contains("names no successful tool call"), "{error}");
    let error = audit::verify(&path).expect_err("verify refuses it too");
    assert!(error.to_string().contains("names no successful tool call"), "{error}");
}

/// Prints the index's size (a figure, not an assertion).
async fn print_index_size(audit: &AuditLog) {
    println!(
        "index: {} bytes for {} Runs ({} bytes a Run)",
        audit.index_bytes(),
        audit.len().await.unwrap(),
        audit.index_bytes() / audit.len().await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_written_under_constant_concurrent_load() {
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = std::sync::Arc::new(open(&path, 100, None));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for task in 0..16 {
        let (audit, stop) = (audit.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ids.push(run(&audit, task * 100_000 + ids.len(), 2, true).await);
            }
            ids
        }));
    }
    // The writers never pause by themselves: a snapshot needs the appends in flight to settle.
    let snapshot = journal::snapshot::snapshot_path(&path);
    for _ in 0..400 {
        if snapshot.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut ids = Vec::new();
    for task in tasks {
        ids.extend(task.await.unwrap());
    }
    assert!(snapshot.exists(), "a snapshot was written while {} Runs were written without a pause", ids.len());
    audit.snapshot_settled().await;
    let audit = std::sync::Arc::into_inner(audit).expect("no other holder");
    let before = view(&audit, &ids).await;
    drop(audit);
    let audit = open(&path, 1_000_000, None);
    assert!(audit.start_report().snapshot.is_some());
    assert_eq!(view(&audit, &ids).await, before);
}
