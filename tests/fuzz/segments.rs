//! Damaged storage files of a segmented alert journal: a sealed segment, the retention
//! anchor or the snapshot. Written by the real `AlertStore` with small segments, frequent
//! snapshots and retention. Whatever the damage, opening either reaches exactly the state
//! that was written, or refuses with a message, or (a sealed segment before the snapshot,
//! which a start does not re-read) leaves the damaged records out of what it reads back;
//! and `verify` finds any change to a sealed segment or the anchor.

use std::path::{Path, PathBuf};
use std::time::Duration;

use akritas::alerts::adapter;
use akritas::alerts::adapters::DecodeContext;
use akritas::alerts::admission::Limits;
use akritas::alerts::store::{self, AlertStore, Storage};
use akritas::journal::JournalOptions;
use serde_json::{Value, json};

use super::harness::{self, Verdict};
use super::mutate;

fn storage() -> Storage {
    Storage {
        journal: JournalOptions { segment_bytes: 2048, segment_age: None, ..JournalOptions::default() },
        snapshot_records: 10,
        retention: Some(Duration::ZERO),
        ..Storage::default()
    }
}

fn open(path: &Path) -> Result<AlertStore, String> {
    let limits = Limits {
        source_rate_per_minute: 1_000_000,
        max_pending_jobs: 1_000_000,
        max_pending_per_namespace: 1_000_000,
        max_deferred_per_source: 10_000,
    };
    AlertStore::open_stored(path, limits, storage(), &|_| "default".into()).map_err(|e| e.to_string())
}

async fn view(store: &AlertStore) -> Value {
    let incidents = akritas_testkit::jobs::incident_details(store, 10_000).await;
    json!({"incidents": incidents, "tallies": store.tallies(), "counters": store.all_counters()})
}

/// [`view`] from sync code (a case of the harness).
fn view_now(store: &AlertStore) -> Value {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    runtime.block_on(view(store))
}

/// Writes the journal: incidents firing and resolving, their jobs settled, one left open.
async fn write(path: &Path) {
    let store = open(path).expect("open");
    for i in 0..30 {
        let key = format!("host-{i}");
        for state in ["firing", "resolved"] {
            if state == "resolved" && i % 7 == 3 {
                continue;
            }
            let body = json!({"schema_version": 1, "alerts": [{"state": state, "name": "HighCPU",
                "summary": "CPU high", "entity": {"kind": "host", "id": key}, "correlation_key": key,
                "started_at": "2026-11-29T22:40:00Z"}]});
            let context = DecodeContext {
                source_type: "generic",
                source_name: "gen",
                observed_at: jiff::Timestamp::from_second(1_780_000_000).expect("time"),
            };
            let events = adapter("generic").expect("adapter").decode(body.to_string().as_bytes(), &context).unwrap();
            let accepted = store.ingest("default", "gen", events).await.expect("ingest");
            let job = match accepted.events[0].job_id.as_deref() {
                Some(id) => store.job(id).await.unwrap(),
                None => None,
            };
            if let Some(job) = job {
                akritas_testkit::jobs::give_up(&store, job, "settled by the test").await.expect("job");
            }
        }
    }
    store.save_snapshot().await;
}

/// The files of the written journal, its directory and the state it opens to.
struct Written {
    dir: tempfile::TempDir,
    files: Vec<PathBuf>,
    state: Value,
}

fn written() -> Written {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("alerts.jsonl");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    runtime.block_on(async {
        write(&path).await;
        // The background snapshot and retention release the journal when done.
        for _ in 0..200 {
            if open(&path).is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    drop(runtime);
    let state = view_now(&open(&path).expect("the written journal opens"));
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| !p.to_string_lossy().ends_with(".lock"))
        .collect();
    names.sort();
    let active = akritas::journal::verify(&path).expect("verifies").last_seq;
    // Sealed segments, the anchor and the snapshot; the active segment is the journal target's.
    names.retain(|p| {
        let name = p.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let segment = name.strip_prefix("alerts.jsonl.").and_then(|n| n.parse::<u64>().ok());
        segment.is_none_or(|first| first <= active && !is_active(p, active))
    });
    assert!(names.iter().any(|p| p.to_string_lossy().ends_with(".anchor")), "retention ran: {names:?}");
    Written { dir, files: names, state }
}

/// Whether the segment file holds the last record.
fn is_active(path: &Path, last: u64) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| text.contains(&format!("{{\"seq\":{last},")))
}

#[test]
fn storage_files_damaged() {
    let written = written();
    // tmpfs when there is one: every case fsyncs.
    let scratch = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).expect("temp dir");
    harness::run("journal_storage", (0..written.files.len(), mutate::byte_edits()), |(which, edits)| {
        let work = scratch.path().join("case");
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
        for entry in std::fs::read_dir(written.dir.path()).map_err(|e| e.to_string())? {
            let from = entry.map_err(|e| e.to_string())?.path();
            let to = work.join(from.file_name().unwrap_or_default());
            std::fs::copy(&from, &to).map_err(|e| e.to_string())?;
        }
        let target = work.join(written.files[*which].file_name().unwrap_or_default());
        let original = std::fs::read(&target).map_err(|e| e.to_string())?;
        let mut bytes = original.clone();
        mutate::edit_bytes(&mut bytes, edits);
        std::fs::write(&target, &bytes).map_err(|e| e.to_string())?;
        let path = work.join("alerts.jsonl");
        let name = target.to_string_lossy().into_owned();
        let verified = store::verify(&path);
        if bytes != original && !name.ends_with(".snapshot") && verified.is_ok() {
            // The anchor may be re-spaced JSON with the same values; a segment never.
            let same_anchor = name.ends_with(".anchor")
                && serde_json::from_slice::<Value>(&bytes).ok() == serde_json::from_slice::<Value>(&original).ok();
            if !same_anchor {
                return Err(format!("a changed {name} verifies"));
            }
        }
        let segment = !name.ends_with(".snapshot") && !name.ends_with(".anchor");
        match open(&path) {
            Ok(store) if view_now(&store) == written.state => Ok(Verdict::Accepted),
            // A start does not re-read the sealed segments before its snapshot; a damaged
            // record there is unreadable (left out, logged) and `verify` reports it.
            Ok(_) if segment && verified.is_err() => Ok(Verdict::Accepted),
            Ok(_) => Err(format!("the damaged {name} opened to another state")),
            Err(error) if !error.trim().is_empty() => Ok(Verdict::Rejected),
            Err(_) => Err("an empty error".into()),
        }
    });
}
