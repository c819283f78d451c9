//! Journal replay of damaged files. The two journals (audit, alerts) are written by
//! the real `AuditLog` and `AlertStore`; then either their bytes are damaged (the hash
//! chain must catch it, a torn tail is cut, no verified record is lost) or records are
//! rewritten with a valid chain and mutated payloads, reordered, dropped or repeated
//! (the replay of each store must refuse them with a typed error, never panic).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use akritas::alerts::adapter;
use akritas::alerts::adapters::DecodeContext;
use akritas::alerts::store::AlertStore;
use akritas::audit::{self, AuditLog, Finish, NewEvent, NewRun, RunStatus};
use akritas::journal::{self, DEFAULT_MAX_RECORD_BYTES, JournalError, Record};
use proptest::prelude::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::harness::{self, Verdict};
use super::mutate::{self, Edit};

/// A journal written by the product, its bytes and its records.
struct Written {
    name: &'static str,
    bytes: Vec<u8>,
    records: Vec<Record>,
}

fn scratch() -> tempfile::TempDir {
    // tmpfs when there is one: the cases fsync on every open.
    tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).expect("temp dir")
}

async fn write_audit(path: &Path) {
    let audit = AuditLog::open(path).expect("open audit");
    for n in 0..3 {
        let run = audit
            .start(NewRun {
                namespace: "default".into(),
                source: if n == 2 { "alert".into() } else { "chat".into() },
                actor: format!("user-{n}"),
                model: Some("m".into()),
                catalog_version: 7,
                metadata: BTreeMap::from([("job_id".to_string(), json!(format!("job_{n}")))]),
            })
            .await
            .expect("start");
        let event = NewEvent {
            kind: "tool_call".into(),
            status: Some("succeeded".into()),
            metadata: BTreeMap::from([("tool".to_string(), json!("inventory.host"))]),
            arguments: Some(json!({"host": "db-7"})),
            result: Some(json!({"id": "call-1", "name": "inventory.host", "output": {"roles": ["postgresql"]}})),
        };
        audit.event(&run, event).await.expect("event");
        if n < 2 {
            let usage = BTreeMap::from([("output_tokens".to_string(), json!(15))]);
            let finish = Finish { status: RunStatus::Succeeded, error: None, error_code: None, metadata: usage };
            audit.finish(&run, finish).await.expect("finish");
        }
    }
}

async fn write_alerts(path: &Path) {
    let store = AlertStore::open(path).expect("open alerts");
    for (provider, fixture) in [
        ("alertmanager", "tests/fixtures/alertmanager/alertmanager-webhook.json"),
        ("alertmanager", "tests/fixtures/alertmanager/alertmanager-webhook-resolved.json"),
        ("generic", "tests/fixtures/generic/generic-batch.json"),
    ] {
        let context = DecodeContext {
            source_type: provider,
            source_name: provider,
            observed_at: jiff::Timestamp::from_second(1_780_000_000).expect("time"),
        };
        let body = std::fs::read(harness::root().join(fixture)).expect("fixture");
        let events = adapter(provider).expect("adapter").decode(&body, &context).expect("decode");
        store.ingest("default", provider, events).await.expect("ingest");
    }
}

fn written() -> Vec<Written> {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let audit = dir.path().join("audit.jsonl");
    let alerts = dir.path().join("alerts.jsonl");
    runtime.block_on(write_audit(&audit));
    runtime.block_on(write_alerts(&alerts));
    [("audit", audit), ("alerts", alerts)]
        .into_iter()
        .map(|(name, path)| {
            let (_, replay) = journal::read(&path).expect("the product's own journal verifies");
            Written { name, bytes: std::fs::read(&path).expect("read"), records: replay.records }
        })
        .collect()
}

/// Opens the journal as its store does at start; the error, when there is one, as text.
fn open_store(name: &str, path: &Path) -> Result<(), String> {
    match name {
        "audit" => AuditLog::open(path).map(drop).map_err(|e| e.to_string()),
        _ => AlertStore::open(path).map(drop).map_err(|e| e.to_string()),
    }
}

fn same(a: &Record, b: &Record) -> bool {
    (a.seq, &a.kind, &a.data, &a.hash) == (b.seq, &b.kind, &b.data, &b.hash)
}

#[test]
fn journal_damaged_bytes() {
    let journals = written();
    let dir = scratch();
    let path = dir.path().join("journal.jsonl");
    harness::run("journal_bytes", (0..journals.len(), mutate::byte_edits()), |(which, edits)| {
        let original = &journals[*which];
        let mut bytes = original.bytes.clone();
        mutate::edit_bytes(&mut bytes, edits);
        std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
        let verdict = match journal::read(&path) {
            Ok((_, replay)) => {
                // The chain admits only the original records, in order; a complete one is never dropped.
                let complete = bytes.iter().filter(|b| **b == b'\n').count();
                let ok = replay.records.len() <= original.records.len()
                    && replay.records.iter().zip(&original.records).all(|(a, b)| same(a, b))
                    && replay.records.len() + replay.recovered.len() == complete;
                if !ok {
                    return Err(format!("{}: verified records differ from the ones written", original.name));
                }
                // What verified must open, and nothing verified is lost by opening it.
                open_store(original.name, &path)
                    .map_err(|e| format!("{}: a verified prefix does not open: {e}", original.name))?;
                let (_, reopened) =
                    journal::read(&path).map_err(|e| format!("reopened journal does not verify: {e}"))?;
                if reopened.records != replay.records {
                    return Err("opening changed the verified records".into());
                }
                Verdict::Accepted
            }
            Err(JournalError::Corrupt { reason, .. }) if !reason.trim().is_empty() => {
                if edits.is_empty() {
                    return Err(format!("the product's own journal is corrupt: {reason}"));
                }
                // Start-up refuses the same file with the same kind of error.
                let error = open_store(original.name, &path).err().ok_or("a corrupt journal opened")?;
                if !error.contains("corrupt") {
                    return Err(format!("start-up error does not say the journal is corrupt: {error}"));
                }
                Verdict::Rejected
            }
            Err(error) => return Err(format!("unexpected error: {error}")),
        };
        Ok(verdict)
    });
}

/// `sha256(prev \n seq \n time \n kind \n data)`, the documented record hash.
fn encode(records: &[(String, String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut prev = "0".repeat(64);
    for (n, (time, kind, data)) in records.iter().enumerate() {
        let seq = n as u64 + 1;
        let mut hasher = Sha256::new();
        hasher.update(format!("{prev}\n{seq}\n{time}\n{kind}\n{data}"));
        let hash = hex::encode(hasher.finalize());
        let line = format!(
            "{{\"seq\":{seq},\"time\":{},\"kind\":{},\"prev\":\"{prev}\",\"data\":{data},\"hash\":\"{hash}\"}}\n",
            Value::String(time.clone()),
            Value::String(kind.clone())
        );
        out.extend_from_slice(line.as_bytes());
        prev = hash;
    }
    out
}

/// What happens to the record list besides the payload edits.
#[derive(Clone, Debug)]
enum Reorder {
    None,
    Drop(usize),
    Repeat(usize),
    Swap(usize, usize),
    Kind(usize, String),
}

fn reorder() -> impl Strategy<Value = Reorder> {
    prop_oneof![
        4 => Just(Reorder::None),
        1 => any::<usize>().prop_map(Reorder::Drop),
        1 => any::<usize>().prop_map(Reorder::Repeat),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Reorder::Swap(a, b)),
        1 => (any::<usize>(), "[a-z][a-z._]{0,20}").prop_map(|(a, k)| Reorder::Kind(a, k)),
    ]
}

#[test]
fn journal_replay_of_rewritten_records() {
    let journals = written();
    let dir = scratch();
    let path: PathBuf = dir.path().join("journal.jsonl");
    let edits = prop_oneof![1 => Just(Vec::new()), 4 => mutate::edits()];
    let strategy = (0..journals.len(), any::<usize>(), edits, reorder());
    harness::run("journal_replay", strategy, |(which, at, edits, reorder): &(usize, usize, Vec<Edit>, Reorder)| {
        let original = &journals[*which];
        let mut records: Vec<(String, String, Value)> =
            original.records.iter().map(|r| (r.time.clone(), r.kind.clone(), r.data.clone())).collect();
        let n = records.len();
        mutate::edit_value(&mut records[at % n].2, edits);
        match reorder {
            Reorder::None => {}
            Reorder::Drop(i) => drop(records.remove(i % n)),
            Reorder::Repeat(i) => records.insert(i % n, records[i % n].clone()),
            Reorder::Swap(a, b) => records.swap(a % n, b % n),
            Reorder::Kind(i, kind) => records[i % n].1.clone_from(kind),
        }
        let unchanged = edits.is_empty() && matches!(reorder, Reorder::None);
        let lines: Vec<(String, String, String)> =
            records.into_iter().map(|(time, kind, data)| (time, kind, data.to_string())).collect();
        let fits = lines.iter().all(|(_, _, data)| data.len() + 512 < DEFAULT_MAX_RECORD_BYTES);
        std::fs::write(&path, encode(&lines)).map_err(|e| e.to_string())?;
        if original.name == "audit" {
            // `akritas audit verify`: the chain, then the same replay as start-up.
            match audit::verify(&path) {
                Ok(_) => {}
                // Only a record over the line limit may fail the chain check.
                Err(audit::AuditError::Journal(JournalError::Corrupt { .. })) if !fits => {}
                Err(audit::AuditError::Journal(error)) => {
                    return Err(format!("a valid chain does not verify: {error}"));
                }
                Err(error) if unchanged => return Err(format!("the product's own audit journal fails: {error}")),
                Err(error) if error.to_string().trim().is_empty() => return Err("an error without a message".into()),
                Err(_) => {}
            }
        }
        match open_store(original.name, &path) {
            Ok(()) => Ok(Verdict::Accepted),
            Err(error) if unchanged => Err(format!("the product's own journal does not open: {error}")),
            Err(error) if error.trim().is_empty() => Err("an error without a message".into()),
            Err(_) => Ok(Verdict::Rejected),
        }
    });
}
