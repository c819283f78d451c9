//! The alert store's bounded storage: a restart loads the last snapshot and replays only the
//! journal after it; a snapshot that does not match the journal is ignored; the dedup window
//! and the resolved incidents kept are bounded, and replay decides as the live store did even
//! when the settings changed; retention deletes old segments but never what an open incident
//! needs, and the kept journal still verifies; the snapshot keeps the signatures whose replay
//! is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use akritas::alerts::adapters::{DecodeContext, adapter};
use akritas::alerts::admission::Limits;
use akritas::alerts::event::Event;
use akritas::alerts::signature::Signed;
use akritas::alerts::store::{AlertStore, AlertStoreError, DedupLimits, Storage};
use akritas::journal::JournalOptions;
use akritas_testkit::jobs::give_up;
use serde_json::{Value, json};

fn alerts(list: &[(&str, &str)]) -> Vec<Event> {
    let alerts: Vec<Value> = list
        .iter()
        .map(|(state, key)| {
            json!({"state": state, "name": "HighCPU", "summary": format!("CPU high on {key}"),
                   "entity": {"kind": "host", "id": key}, "started_at": "2026-11-29T22:40:00Z",
                   "correlation_key": key, "labels": {"team": "storage", "padding": "x".repeat(200)}})
        })
        .collect();
    let body = json!({"schema_version": 1, "alerts": alerts}).to_string();
    let ctx = DecodeContext { source_type: "generic", source_name: "gen", observed_at: jiff::Timestamp::now() };
    adapter("generic").unwrap().decode(body.as_bytes(), &ctx).unwrap()
}

fn storage(segment_bytes: u64, snapshot_records: u64) -> Storage {
    Storage {
        journal: JournalOptions { segment_bytes, segment_age: None, ..JournalOptions::default() },
        snapshot_records,
        ..Storage::default()
    }
}

/// Opens the store; waits for a snapshot still being written by a store dropped just before
/// (it holds the journal until it is done).
fn open(path: &Path, storage: Storage) -> AlertStore {
    let limits = Limits {
        source_rate_per_minute: 1_000_000,
        max_pending_jobs: 1_000_000,
        max_pending_per_namespace: 1_000_000,
        max_deferred_per_source: 10_000,
    };
    for _ in 0..200 {
        match AlertStore::open_stored(path, limits, storage.clone(), &|_| "default".into()) {
            Ok(store) => return store,
            Err(e) if e.to_string().contains("already open") => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("the journal stayed locked");
}

fn snapshot_of(path: &Path) -> PathBuf {
    akritas::journal::snapshot::snapshot_path(path)
}

/// Waits until `done` holds (a snapshot is written in the background).
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The incident's first job, if it has one.
async fn first_job(store: &AlertStore, incident: &str) -> Option<akritas::alerts::store::Job> {
    store.incident(incident).await.unwrap().unwrap().2.into_iter().next()
}

/// Everything a reader sees: incidents with their events and jobs, tallies, counters.
async fn view(store: &AlertStore) -> Value {
    let incidents = akritas_testkit::jobs::incident_details(store, 100_000).await;
    let (jobs, states) = store.tallies();
    json!({"incidents": incidents, "jobs": jobs, "states": states, "counters": store.all_counters()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loads_the_snapshot_and_replays_only_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.jsonl");
    let store = open(&path, storage(16 << 10, 100));
    for i in 0..250 {
        let key = format!("host-{i}");
        store.ingest("ops", "gen", alerts(&[("firing", &key)])).await.unwrap();
        if i % 2 == 0 {
            store.ingest("ops", "gen", alerts(&[("resolved", &key)])).await.unwrap();
        }
        if i % 5 == 0 {
            let newest = store.incidents(1).await.unwrap()[0].id.clone();
            let (_, _, jobs) = store.incident(&newest).await.unwrap().unwrap();
            give_up(&store, jobs[0].clone(), "model unavailable").await.unwrap();
        }
    }
    eventually("a snapshot", || snapshot_of(&path).exists()).await;
    let before = view(&store).await;
    let sizes = store.index_sizes();
    drop(store);

    let reopened = open(&path, storage(16 << 10, 100));
    let (replayed, from_snapshot) = reopened.replayed_at_open();
    assert!(from_snapshot, "the snapshot was used");
    assert!(replayed < 150, "only the tail after the snapshot is replayed: {replayed} of about 425 records");
    assert_eq!(view(&reopened).await, before, "the same incidents, events, jobs and counters as before the restart");
    assert_eq!(reopened.index_sizes(), sizes);
    let layout_segments = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("alerts.jsonl.0"))
        .count();
    assert!(layout_segments > 3, "small segments were sealed: {layout_segments}");
    drop(reopened);

    // A snapshot whose checkpoint is not in the journal is ignored: the journal decides.
    let text = std::fs::read_to_string(snapshot_of(&path)).unwrap();
    let mut snapshot: Value = serde_json::from_str(&text).unwrap();
    snapshot["checkpoint"]["hash"] = json!("0".repeat(64));
    std::fs::write(snapshot_of(&path), snapshot.to_string()).unwrap();
    let rebuilt = open(&path, storage(16 << 10, 100));
    assert!(!rebuilt.replayed_at_open().1, "the forged snapshot is not used");
    assert_eq!(view(&rebuilt).await, before);
    drop(rebuilt);
    akritas::alerts::store::verify(&path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dedup_window_is_bounded_and_replay_keeps_the_recorded_limits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.jsonl");
    let small = Storage { dedup: DedupLimits { window_secs: 86_400, max_keys: 3 }, ..storage(1 << 20, 10_000) };
    let store = open(&path, small.clone());
    let first = store.ingest("ops", "gen", alerts(&[("firing", "a")])).await.unwrap();
    let again = store.ingest("ops", "gen", alerts(&[("firing", "a")])).await.unwrap();
    assert_eq!(again.events[0].status, "duplicate", "within the window");
    for key in ["b", "c", "d", "e"] {
        store.ingest("ops", "gen", alerts(&[("firing", key)])).await.unwrap();
    }
    assert!(store.index_sizes()["dedup_keys"] <= 4, "{:?}", store.index_sizes());
    let late = store.ingest("ops", "gen", alerts(&[("firing", "a")])).await.unwrap();
    assert_eq!(late.events[0].status, "accepted", "forgotten past the count: no longer a duplicate");
    assert_eq!(late.events[0].incident_id, first.events[0].incident_id, "it joins the incident still open");
    assert_eq!(late.events[0].job_id, None, "no second investigation");
    let before = view(&store).await;
    drop(store);

    // Replayed with other limits, every record still decides as it was recorded.
    let wide = Storage { dedup: DedupLimits { window_secs: 3600, max_keys: 1_000_000 }, ..small };
    let reopened = open(&path, wide);
    assert_eq!(view(&reopened).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolved_incidents_past_the_bound_are_forgotten_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.jsonl");
    let bounded = Storage { resolved_kept: 5, ..storage(1 << 20, 10_000) };
    let store = open(&path, bounded.clone());
    let mut ids = Vec::new();
    for i in 0..20 {
        let key = format!("node-{i}");
        let fired = store.ingest("ops", "gen", alerts(&[("firing", &key)])).await.unwrap();
        store.ingest("ops", "gen", alerts(&[("resolved", &key)])).await.unwrap();
        ids.push(fired.events[0].clone());
    }
    let open_one = store.ingest("ops", "gen", alerts(&[("firing", "still-open")])).await.unwrap();
    assert_eq!(store.incidents(1000).await.unwrap().len(), 6, "five resolved and the open one");
    assert!(store.incident(&ids[0].incident_id).await.unwrap().is_none(), "the oldest resolved is forgotten");
    assert!(store.event(&ids[0].event_id).await.unwrap().is_none());
    let (_, events, jobs) = store.incident(&ids[19].incident_id).await.unwrap().unwrap();
    assert_eq!((events.len(), jobs.len()), (2, 1), "a kept one is whole, read back from the journal");
    assert!(store.event(&open_one.events[0].event_id).await.unwrap().is_some());
    assert_eq!(store.index_sizes()["events"], 11);
    let before = view(&store).await;
    drop(store);
    assert_eq!(view(&open(&path, bounded)).await, before, "the same after a restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_segments_but_keeps_what_open_incidents_need() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.jsonl");
    let retained = Storage { retention: Some(Duration::ZERO), ..storage(8 << 10, 60) };
    let store = open(&path, retained.clone());
    let mut early = Vec::new();
    for i in 0..80 {
        let key = format!("old-{i}");
        let fired = store.ingest("ops", "gen", alerts(&[("firing", &key)])).await.unwrap();
        store.ingest("ops", "gen", alerts(&[("resolved", &key)])).await.unwrap();
        if let Some(job) = first_job(&store, &fired.events[0].incident_id).await {
            give_up(&store, job, "model unavailable").await.unwrap();
        }
        early.push(fired.events[0].clone());
    }
    let open_one = store.ingest("ops", "gen", alerts(&[("firing", "kept-open")])).await.unwrap();
    if let Some(job) = first_job(&store, &open_one.events[0].incident_id).await {
        give_up(&store, job, "model unavailable").await.unwrap();
    }
    for i in 0..80 {
        let key = format!("new-{i}");
        let fired = store.ingest("ops", "gen", alerts(&[("firing", &key)])).await.unwrap();
        store.ingest("ops", "gen", alerts(&[("resolved", &key)])).await.unwrap();
        if let Some(job) = first_job(&store, &fired.events[0].incident_id).await {
            give_up(&store, job, "model unavailable").await.unwrap();
        }
    }
    let anchor = path.with_file_name("alerts.jsonl.anchor");
    eventually("retention", || anchor.exists()).await;
    assert!(!path.exists(), "the first segment was deleted");
    let (report, _) = akritas::journal::read(&path).unwrap();
    assert!(report.first_seq > 1, "{report:?}");
    assert!(
        store.incident(&early[0].incident_id).await.unwrap().is_none(),
        "an old resolved incident went with its records"
    );
    let event = store.event(&open_one.events[0].event_id).await.unwrap().expect("the open incident's event is kept");
    assert_eq!(event.event.entity.id, "kept-open");
    drop(store);
    akritas::alerts::store::verify(&path).expect("the kept journal verifies from its anchor");
    // Without the snapshot the removed start cannot be replayed: the store says what to do.
    let snapshot = snapshot_of(&path);
    let kept = std::fs::read(&snapshot).unwrap();
    std::fs::remove_file(&snapshot).unwrap();
    let limits = Limits {
        source_rate_per_minute: 1_000_000,
        max_pending_jobs: 1_000_000,
        max_pending_per_namespace: 1_000_000,
        max_deferred_per_source: 10_000,
    };
    let err = AlertStore::open_stored(&path, limits, retained.clone(), &|_| "default".into()).err().unwrap();
    assert!(err.to_string().contains("restore the snapshot from the same backup"), "{err}");
    std::fs::write(&snapshot, kept).unwrap();
    let reopened = open(&path, retained);
    assert!(reopened.event(&open_one.events[0].event_id).await.unwrap().is_some());
    assert!(reopened.incidents(1000).await.unwrap().iter().any(|i| i.id == open_one.events[0].incident_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_written_under_constant_concurrent_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.jsonl");
    let store = std::sync::Arc::new(open(&path, storage(1 << 20, 100)));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..24 {
        let (store, stop) = (store.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("t{t}-{i}");
                store.ingest("ops", "gen", alerts(&[("firing", &key)])).await.unwrap();
                i += 1;
            }
            i
        }));
    }
    // The writers never pause by themselves: a snapshot needs the in-flight records to settle.
    eventually("a snapshot under load", || snapshot_of(&path).exists()).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut delivered = 0;
    for task in tasks {
        delivered += task.await.unwrap();
    }
    let text = std::fs::read_to_string(snapshot_of(&path)).unwrap();
    let snapshot: Value = serde_json::from_str(&text).unwrap();
    assert!(snapshot["checkpoint"]["seq"].as_u64().unwrap() >= 100, "{}", snapshot["checkpoint"]);
    let before = view(&store).await;
    drop(store);
    let reopened = open(&path, storage(1 << 20, 100));
    assert!(reopened.replayed_at_open().1);
    assert_eq!(view(&reopened).await, before, "{delivered} deliveries, the same after a restart from the snapshot");
}

/// The signatures of timestamped deliveries are kept in the snapshot: a restart that loads it
/// (and replays only the tail) still refuses their replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_keeps_the_signatures_whose_replay_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.jsonl");
    let store = open(&path, storage(1 << 20, 100));
    let signed = Signed { at: jiff::Timestamp::now().as_second(), digest: format!("{:032x}", 7) };
    store.ingest_signed("ops", "gen", alerts(&[("firing", "signed")]), 0, Some(signed.clone())).await.unwrap();
    for i in 0..150 {
        store.ingest("ops", "gen", alerts(&[("firing", &format!("host-{i}"))])).await.unwrap();
    }
    eventually("a snapshot", || snapshot_of(&path).exists()).await;
    drop(store);
    let reopened = open(&path, storage(1 << 20, 100));
    let (replayed, from_snapshot) = reopened.replayed_at_open();
    assert!(from_snapshot && replayed < 100, "the signed delivery's record is in the snapshot: {replayed}");
    let again = reopened.ingest_signed("ops", "gen", alerts(&[("firing", "signed")]), 0, Some(signed)).await;
    assert!(matches!(again, Err(AlertStoreError::Replayed)), "{again:?}");
}
