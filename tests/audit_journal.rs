//! The audit journal: restart replays identical state, tampering is detected by
//! `akritas audit verify` and at start, a torn tail is truncated and recorded,
//! and credentials never reach the file.

use akritas_testkit as support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use akritas::audit::{AuditLog, Finish, NewEvent, NewRun, RunStatus};
use serde_json::json;

async fn write_runs(path: &Path) -> AuditLog {
    let audit = AuditLog::open(path).unwrap();
    for n in 0..3 {
        let id = audit
            .start(NewRun {
                namespace: "default".into(),
                source: "chat".into(),
                actor: format!("user-{n}"),
                model: Some("m".into()),
                catalog_version: 7,
                metadata: [
                    ("api_key".to_string(), serde_json::json!("k-1")),
                    ("job_id".to_string(), serde_json::json!("job_1")),
                ]
                .into(),
            })
            .await
            .unwrap();
        let metadata = BTreeMap::from([
            ("tool".to_string(), json!("inventory.host")),
            ("Authorization".to_string(), json!("Bearer s3cr3t-value")),
            ("bearer_token".to_string(), json!("s3cr3t-value")),
            ("api_key".to_string(), json!("s3cr3t-value")),
        ]);
        audit
            .event(
                &id,
                NewEvent {
                    kind: "tool_call".into(),
                    status: Some("succeeded".into()),
                    metadata,
                    arguments: Some(json!({"host": "db-7"})),
                    result: Some(json!({"id": "c1", "name": "inventory.host", "output": {"roles": ["postgresql"]}})),
                },
            )
            .await
            .unwrap();
        let usage =
            BTreeMap::from([("output_tokens".to_string(), json!(15)), ("prompt_tokens".to_string(), json!(30))]);
        audit
            .finish(&id, Finish { status: RunStatus::Succeeded, error: None, error_code: None, metadata: usage })
            .await
            .unwrap();
    }
    audit
}

/// Every listed Run, in detail.
async fn details(audit: &AuditLog) -> Vec<akritas::audit::RunRecord> {
    let mut runs = Vec::new();
    for run in audit.list(10).await.unwrap() {
        runs.push(audit.get(&run.id).await.unwrap().unwrap());
    }
    runs
}

#[tokio::test]
async fn restart_replays_identical_state_and_keeps_usage_but_not_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit/akritas.jsonl");
    let before = write_runs(&path).await;
    let runs_before = details(&before).await;
    drop(before);
    let after = AuditLog::open(&path).unwrap();
    let runs_after = details(&after).await;
    assert_eq!(runs_before, runs_after);
    assert_eq!(runs_after.len(), 3);
    let run = &runs_after[0];
    assert_eq!(run.metadata["output_tokens"], json!(15), "usage counters are not redacted");
    assert_eq!(run.metadata["job_id"], json!("job_1"), "start metadata is kept");
    assert!(!run.metadata.contains_key("api_key"), "start metadata is redacted like the rest");
    assert_eq!(run.events[0].metadata.keys().collect::<Vec<_>>(), ["tool"]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("s3cr3t"), "credentials reached the journal");
    // A finished Run cannot finish twice.
    let error = after
        .finish(&run.id, Finish { status: RunStatus::Failed, error: None, error_code: None, metadata: BTreeMap::new() })
        .await
        .unwrap_err();
    assert!(error.to_string().contains("already finished"), "{error}");
}

fn akritas() -> Command {
    Command::new(env!("CARGO_BIN_EXE_akritas"))
}

#[tokio::test]
async fn a_flipped_byte_is_detected_by_verify_and_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let path = data.join("audit/akritas.jsonl");
    drop(write_runs(&path).await);

    let output = akritas().args(["audit", "verify"]).arg(&path).output().unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("9 records in 1 segment(s) from seq 1 verified"));

    // Change one letter inside the second record (valid JSON, wrong hash).
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[1] = lines[1].replacen("postgresql", "postgresqL", 1);
    assert_ne!(lines[1], text.lines().nth(1).unwrap());
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();

    let output = akritas().args(["audit", "verify"]).arg(&path).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 2"), "{stderr}");

    let mut serve = support::serve_command(env!("CARGO_BIN_EXE_akritas"));
    serve.arg("--data-dir").arg(&data);
    let (code, stderr) = support::run_to_end(serve);
    assert_ne!(code, 0);
    assert!(stderr.contains("audit journal") && stderr.contains("line 2"), "{stderr}");
}

#[tokio::test]
async fn a_torn_tail_is_truncated_and_recorded_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("akritas.jsonl");
    drop(write_runs(&path).await);
    let full = std::fs::read(&path).unwrap();
    // Cut the last record in the middle, as a kill -9 during a write would.
    std::fs::write(&path, &full[..full.len() - 40]).unwrap();
    let output = akritas().args(["audit", "verify"]).arg(&path).output().unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("torn final record"));

    let audit = AuditLog::open(&path).unwrap();
    // The third Run lost its finish record: it is still running after the crash.
    let statuses: Vec<RunStatus> = audit.list(10).await.unwrap().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [RunStatus::Running, RunStatus::Succeeded, RunStatus::Succeeded]);
    drop(audit);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    assert!(text.lines().last().unwrap().contains("journal.torn_tail_truncated"));
    let output = akritas().args(["audit", "verify"]).arg(&path).output().unwrap();
    assert!(output.status.success(), "the chain verifies after recovery");
}
