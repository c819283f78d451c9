//! Data written by an earlier version opens with this one. `tests/fixtures/data-f6d8654/`
//! holds data dirs that `akritas serve` at commit f6d8654 wrote while its own end-to-end
//! tests ran (alerts with investigations and notifications, a bot conversation, change
//! approvals, a crash-and-restart run with segments and snapshots), and `expected.json`,
//! what that version's host reported about each (`record.py` there says how it was made).
//! Today's binary must verify each journal, report the same Runs and incidents, keep each
//! change preview's state and each accepted chat message, and do so again after its own
//! restart on the same directory.

use akritas_testkit as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use akritas::bots::sessions::{SessionOptions, SessionStore};
use akritas::change::approvals::{ApprovalOptions, ApprovalStore};
use serde_json::Value;
use support::{Server, serve_command};

fn fixtures() -> PathBuf {
    support::root().join("tests/fixtures/data-f6d8654")
}

/// `akritas audit verify` on `journal`: the hash chain and the replay `serve` runs.
fn verify(journal: &Path) {
    let output = Command::new(env!("CARGO_BIN_EXE_akritas")).args(["audit", "verify"]).arg(journal).output().unwrap();
    assert!(
        output.status.success(),
        "audit verify {}:\n{}{}",
        journal.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A time shortly after the fixture was written: stores that forget settled entries after a
/// while read it as then, so the test does not age.
fn written_at() -> jiff::Timestamp {
    "2026-12-05T00:00:00Z".parse().unwrap()
}

/// The approval and bot journals of `data`, opened by the library as `serve` opens them:
/// each preview's state by the hash of its id, and the chat messages already accepted.
fn change_and_bot_journals(data: &Path, want: &Value) {
    let clock: Arc<dyn Fn() -> jiff::Timestamp + Send + Sync> = Arc::new(written_at);
    let approvals = ApprovalStore::open(
        &data.join("change/approvals.jsonl"),
        ApprovalOptions { clock: clock.clone(), ..Default::default() },
    )
    .unwrap();
    let states: Value = serde_json::to_value(approvals.states()).unwrap();
    assert_eq!(states, want["approvals"], "{}", data.display());
    drop(approvals);
    let sessions =
        SessionStore::open(&data.join("bots/sessions.jsonl"), SessionOptions { clock, ..Default::default() }).unwrap();
    for id in want["bot_events"].as_array().unwrap() {
        assert!(sessions.is_duplicate(id.as_str().unwrap()), "{}: {id} was accepted", data.display());
    }
}

/// What the host at `url` reports: its Runs and incidents, as `expected.json` has them.
async fn report(url: &str) -> Value {
    let get = |path: String| async move {
        reqwest::get(format!("{url}{path}")).await.unwrap().json::<Value>().await.unwrap()
    };
    let runs = get("/api/v1/runs?limit=1000".into()).await;
    let incidents = get("/api/v1/incidents?limit=1000".into()).await;
    let mut runs: Vec<(String, String)> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_owned(), r["status"].as_str().unwrap().to_owned()))
        .collect();
    runs.sort();
    let mut incidents: Vec<(String, String)> = incidents["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["id"].as_str().unwrap().to_owned(), i["state"].as_str().unwrap().to_owned()))
        .collect();
    incidents.sort();
    serde_json::json!({"runs": runs, "incidents": incidents})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_dirs_written_by_f6d8654_open_verify_and_report_the_same() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap()).unwrap();
    let expected = expected.as_object().unwrap();
    assert!(expected.len() >= 4, "the fixture holds the data dirs: {:?}", expected.keys());
    for (name, want) in expected {
        let work = tempfile::tempdir().unwrap();
        let data = work.path().join("data");
        support::copy_dir(&fixtures().join(name), &data);
        for journal in ["audit/akritas.jsonl", "alerts/alerts.jsonl"] {
            if data.join(journal).exists() {
                verify(&data.join(journal));
            }
        }
        change_and_bot_journals(&data, want);
        let reported = serde_json::json!({"runs": want["runs"], "incidents": want["incidents"]});
        for round in ["first start", "restart"] {
            let server = Server::start({
                let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
                // Retention keeps everything: the fixture only gets older.
                c.env("AKRITAS_DATA_DIR", &data)
                    .env("AKRITAS_AUDIT_RETENTION", "0s")
                    .env("AKRITAS_ALERT_RETENTION", "0s");
                c
            });
            let health: Value = reqwest::get(format!("{}/health", server.url)).await.unwrap().json().await.unwrap();
            // The stores only (no model server runs here).
            let storage = health["degraded"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| matches!(d["component"].as_str(), Some("alerts" | "audit" | "database")));
            assert_eq!(storage.count(), 0, "{name} ({round}): {health}");
            assert_eq!(report(&server.url).await, reported, "{name} ({round}):\n{}", server.log_text());
            assert_eq!(server.terminate(), Some(0), "{name} ({round})");
        }
        for journal in ["audit/akritas.jsonl", "alerts/alerts.jsonl"] {
            if data.join(journal).exists() {
                verify(&data.join(journal));
            }
        }
    }
}
