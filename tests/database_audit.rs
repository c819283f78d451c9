//! The audit on a real PostgreSQL: the contract suite the fast tier runs on the embedded journal
//! (`audit_contract`), then what only replicas sharing a database can show: a Run written from
//! two replicas at once stays in order, the Runs of a stopped replica are closed by another,
//! `audit verify` checks the rows (a changed or re-filed row fails), retention keeps what a
//! running Run needs, and a stopped database fails writes and reads cleanly until it is back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use akritas::audit::{AuditError, AuditLog, AuditStorage, Finish, RunStatus};
use akritas::journal::JournalOptions;
use akritas::journal::database::{Database, Replica};
use akritas_testkit::contract;
use akritas_testkit::postgres::Postgres;

async fn database(pg: &Postgres) -> Database {
    let db = Database::connect(&pg.url("disable"), None, 8).unwrap();
    db.migrate().await.unwrap();
    db
}

async fn replica(db: &Database, lease: Duration) -> Replica {
    Replica::register(db, "test", lease).await.unwrap()
}

async fn open(db: &Database) -> AuditLog {
    AuditLog::open_database(db, AuditStorage::default(), replica(db, Duration::from_secs(30)).await)
}

fn done(status: RunStatus) -> Finish {
    Finish { status, error: None, error_code: None, metadata: BTreeMap::new() }
}

#[tokio::test]
async fn the_contract_holds_on_the_database() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let audit = Arc::new(open(&db).await);
    contract::audit_lifecycle_reads_and_counts(&audit).await;
    contract::audit_refusals(&audit).await;
    contract::audit_concurrent_writers(audit.clone()).await;
    let verified = akritas::audit::verify_database(&db, None).await.unwrap();
    assert_eq!(verified.runs, audit.len().await.unwrap() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_write_one_run_at_once_and_it_stays_in_order() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let (a, b) = (Arc::new(open(&db).await), Arc::new(open(&db).await));
    let id = a.start(contract::new_run("team-a", 1)).await.unwrap();
    assert_eq!(b.namespace_of(&id).await.unwrap().as_deref(), Some("team-a"), "B reads the Run A started");
    let mut writers = Vec::new();
    for (audit, offset) in [(a.clone(), 0), (b.clone(), 100)] {
        let id = id.clone();
        writers.push(tokio::spawn(async move {
            for call in 0..20 {
                audit.event(&id, contract::call_event(1, offset + call)).await.unwrap();
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let run = b.get(&id).await.unwrap().unwrap();
    let sequences: Vec<u32> = run.events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=40).collect::<Vec<u32>>(), "one numbering across both replicas");
    // A follow-up continues the Run on the other replica; the finish is taken once.
    b.finish(&id, done(RunStatus::Succeeded)).await.unwrap();
    assert!(matches!(a.finish(&id, done(RunStatus::Failed)).await, Err(AuditError::AlreadyFinished(_))));
    let _follow_up = a.claim(&id).await.unwrap();
    assert_eq!(a.event(&id, contract::call_event(1, 500)).await.unwrap(), 41);
    assert_eq!(a.list(10).await.unwrap(), b.list(10).await.unwrap());
    akritas::audit::verify_database(&db, None).await.unwrap();
}

#[tokio::test]
async fn the_runs_of_a_stopped_replica_are_closed_by_another_and_no_others() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let lease = Duration::from_secs(1);
    // A never beats again after registering: it stopped.
    let a = AuditLog::open_database(&db, AuditStorage::default(), replica(&db, lease).await);
    let b_replica = replica(&db, lease).await;
    let b = AuditLog::open_database(&db, AuditStorage::default(), b_replica.clone());
    let orphan = a.start(contract::new_run("team-a", 1)).await.unwrap();
    let finished = a.start(contract::new_run("team-a", 2)).await.unwrap();
    a.finish(&finished, done(RunStatus::Succeeded)).await.unwrap();
    let own = b.start(contract::new_run("team-b", 3)).await.unwrap();
    assert!(b.close_interrupted().await.unwrap().is_empty(), "A's lease has not run out yet");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    b_replica.beat().await.unwrap();
    let closed = b.close_interrupted().await.unwrap();
    assert_eq!(closed.iter().map(|r| &r.id).collect::<Vec<_>>(), [&orphan]);
    assert_eq!(closed[0].error_code.as_deref(), Some("interrupted"));
    assert_eq!(b.get(&own).await.unwrap().unwrap().status, RunStatus::Running, "B's own Run is left running");
    assert!(b.close_interrupted().await.unwrap().is_empty(), "closed once");
}

#[tokio::test]
async fn audit_verify_checks_every_row_and_refuses_a_changed_or_refiled_one() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let key: Arc<[u8]> = Arc::from(&b"audit-key-for-tests"[..]);
    let storage = AuditStorage {
        journal: JournalOptions { mac_key: Some(key.clone()), ..JournalOptions::default() },
        ..AuditStorage::default()
    };
    let audit = AuditLog::open_database(&db, storage, replica(&db, Duration::from_secs(30)).await);
    let id = audit.start(contract::new_run("team-a", 1)).await.unwrap();
    audit.event(&id, contract::call_event(1, 0)).await.unwrap();
    audit.record_investigation(&id, &contract::result_citing("call-1-0")).await.unwrap();
    audit.finish(&id, done(RunStatus::Succeeded)).await.unwrap();
    let verified = akritas::audit::verify_database(&db, Some(&key)).await.unwrap();
    assert_eq!((verified.runs, verified.chain.records, verified.chain.sealed), (1, 4, 4));
    assert!(akritas::audit::verify_database(&db, Some(b"another key")).await.is_err(), "the seals need the key");

    let url = pg.url("disable");
    let cli = |env: &[(&str, &str)]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_akritas"));
        command.args(["audit", "verify", "--database-env", "AKRITAS_TEST_DB", "--key-env", "AKRITAS_TEST_KEY"]);
        command.env("AKRITAS_TEST_DB", &url).env("AKRITAS_TEST_KEY", "audit-key-for-tests").envs(env.iter().copied());
        command.output().unwrap()
    };
    let clean = cli(&[]);
    assert!(clean.status.success(), "{clean:?}");
    let said = String::from_utf8_lossy(&clean.stdout);
    assert!(said.contains("4 records from seq 1 verified (4 sealed with the key) and 1 Run(s) replayed"), "{said}");

    // A tool result changed in place: its hash no longer matches.
    let original = pg.psql("SELECT data FROM akritas_records WHERE store = 'audit' AND kind = 'run_event'");
    pg.psql(
        "UPDATE akritas_records SET data = replace(data, '1-0-', '1-9-') WHERE store = 'audit' AND kind = 'run_event'",
    );
    let changed = akritas::audit::verify_database(&db, None).await.unwrap_err().to_string();
    assert!(changed.contains("record 2") && changed.contains("changed after it was written"), "{changed}");
    let refused = cli(&[]);
    assert!(!refused.status.success());
    assert!(!String::from_utf8_lossy(&refused.stderr).contains("127.0.0.1"), "no connection string in errors");
    let restore = format!(
        "UPDATE akritas_records SET data = '{}' WHERE store = 'audit' AND kind = 'run_event'",
        original.replace('\'', "''")
    );
    pg.psql(&restore);
    akritas::audit::verify_database(&db, None).await.unwrap();

    // A record taken out of its Run (the key is not hashed): reads would miss it, verify does not.
    pg.psql("UPDATE akritas_records SET key = NULL WHERE store = 'audit' AND kind = 'run_event'");
    let unfiled = akritas::audit::verify_database(&db, None).await.unwrap_err().to_string();
    assert!(unfiled.contains("filed under no Run"), "{unfiled}");
    pg.psql(&format!("UPDATE akritas_records SET key = '{id}' WHERE store = 'audit' AND kind = 'run_event'"));
    let other = audit.start(contract::new_run("team-a", 2)).await.unwrap();
    pg.psql(&format!("UPDATE akritas_records SET key = '{other}' WHERE store = 'audit' AND kind = 'run_event'"));
    assert!(audit.get(&other).await.is_err(), "a read refuses a record filed under another Run");
    let misfiled = akritas::audit::verify_database(&db, None).await.unwrap_err().to_string();
    assert!(misfiled.contains("filed under another Run"), "{misfiled}");
}

#[tokio::test]
async fn retention_deletes_old_finished_runs_and_keeps_what_a_running_run_needs() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let now = Arc::new(Mutex::new("2020-01-01T00:00:00Z".to_string()));
    let clock = now.clone();
    let storage = AuditStorage {
        journal: JournalOptions { clock: Arc::new(move || clock.lock().unwrap().clone()), ..JournalOptions::default() },
        snapshot_records: 1_000_000,
        retention: Some(Duration::from_secs(24 * 3600)),
    };
    let audit = AuditLog::open_database(&db, storage, replica(&db, Duration::from_secs(30)).await);
    let old_done = audit.start(contract::new_run("team-a", 1)).await.unwrap();
    audit.event(&old_done, contract::call_event(1, 0)).await.unwrap();
    audit.finish(&old_done, done(RunStatus::Succeeded)).await.unwrap();
    let old_running = audit.start(contract::new_run("team-a", 2)).await.unwrap();
    let old_after = audit.start(contract::new_run("team-a", 3)).await.unwrap();
    audit.finish(&old_after, done(RunStatus::Failed)).await.unwrap();
    *now.lock().unwrap() = jiff::Timestamp::now().to_string();
    let fresh = audit.start(contract::new_run("team-b", 4)).await.unwrap();
    audit.event(&old_running, contract::call_event(2, 0)).await.unwrap();

    assert_eq!(audit.snapshot().await, None, "on the database a snapshot pass applies retention only");
    assert_eq!(audit.get(&old_done).await.unwrap(), None, "the old finished Run is gone");
    for id in [&old_running, &old_after, &fresh] {
        assert!(audit.get(id).await.unwrap().is_some(), "kept: everything from the oldest running Run on");
    }
    assert_eq!(audit.len().await.unwrap(), 3);
    let verified = akritas::audit::verify_database(&db, None).await.unwrap();
    assert_eq!((verified.chain.first_seq, verified.runs), (4, 3), "the chain verifies from its new anchor");
    // The running Run finishes; the next pass deletes the rest of the old records.
    audit.finish(&old_running, done(RunStatus::Succeeded)).await.unwrap();
    audit.snapshot().await;
    assert_eq!(audit.len().await.unwrap(), 1);
    assert_eq!(audit.list(10).await.unwrap().iter().map(|r| &r.id).collect::<Vec<_>>(), [&fresh]);
    akritas::audit::verify_database(&db, None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_fails_writes_and_reads_cleanly_until_it_is_back() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let audit = open(&db).await;
    let id = audit.start(contract::new_run("team-a", 1)).await.unwrap();
    pg.stop();
    let write = audit.event(&id, contract::call_event(1, 0)).await.unwrap_err();
    assert!(write.is_unreachable(), "{write}");
    let read = audit.list(10).await.unwrap_err();
    assert!(read.is_unreachable(), "{read}");
    assert!(!write.to_string().contains("password"), "{write}");
    pg.start_again();
    // The pool's broken connections are replaced: no restart of Akritas.
    let mut written = None;
    for _ in 0..50 {
        match audit.event(&id, contract::call_event(1, 0)).await {
            Ok(sequence) => {
                written = Some(sequence);
                break;
            }
            Err(error) if error.is_unreachable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(error) => panic!("{error}"),
        }
    }
    assert_eq!(written, Some(1), "the failed write left nothing; the next one is the first event");
    assert_eq!(audit.get(&id).await.unwrap().unwrap().events.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_verify_reads_one_snapshot_while_replicas_write() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let audit = Arc::new(open(&db).await);
    let id = audit.start(contract::new_run("team-a", 1)).await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (audit, id, stop) = (audit.clone(), id.clone(), stop.clone());
        tokio::spawn(async move {
            let mut call = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                audit.event(&id, contract::call_event(1, call)).await.unwrap();
                call += 1;
            }
            call
        })
    };
    for _ in 0..20 {
        akritas::audit::verify_database(&db, None).await.unwrap_or_else(|e| panic!("{e}"));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(writer.await.unwrap() > 0, "the writer wrote while verify read");
}
