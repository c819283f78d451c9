//! The database backend of the journal-backed stores, against a real PostgreSQL: several
//! replicas of the approval and bot-session stores share one database, a change is taken once
//! however the replicas race, a lagging replica catches up across a snapshot, a changed row is
//! refused, the schema migrates once, and TLS is verified.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use akritas::bots::{Inbound, Provider, SessionKey, SessionOptions, SessionStore, Turn};
use akritas::change::approvals::{ApprovalOptions, ApprovalStore, ChangeState, PendingChange, TakeError};
use akritas::journal::database::{Database, DatabaseError, Group, Log, Migrated};
use akritas_testkit::postgres::Postgres;
use serde_json::json;

async fn database(pg: &Postgres) -> Database {
    let db = Database::connect(&pg.url("disable"), None, 8).unwrap();
    db.migrate().await.unwrap();
    db
}

fn change(workspace: &str) -> PendingChange {
    serde_json::from_value(json!({
        "namespace": "default", "workspace": workspace, "commit": "0123abcd", "location": "path /srv/workspaces/infra",
        "run_id": "run_1", "requester": "alice", "diff": "diff --git a/x b/x\n", "diff_sha256": "d".repeat(64),
        "changes": [{ "path": "x", "operation": "replace", "before": "old\n", "after": "new\n", "mode": 0o644 }],
        "validators": [], "validators_sha256": "v".repeat(64), "created_at": "", "expires_at": "",
        "summary": { "analysis": "a" },
    }))
    .unwrap()
}

fn approval_options() -> ApprovalOptions {
    ApprovalOptions { max_pending: 64, max_pending_per_namespace: 64, ..ApprovalOptions::default() }
}

#[tokio::test]
async fn replicas_share_approvals_and_each_change_is_taken_once_however_they_race() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let a = ApprovalStore::open_database(&db, approval_options()).await.unwrap();
    let b = ApprovalStore::open_database(&db, approval_options()).await.unwrap();
    let mut ids = Vec::new();
    for n in 0..12 {
        let store = if n % 2 == 0 { &a } else { &b };
        ids.push(store.insert(change(&format!("ws{n}"))).await.unwrap());
    }
    for id in &ids {
        let current = b.get_current(id).await.unwrap();
        assert_eq!(current.map(|(_, state)| state), Some(ChangeState::Pending), "B reads what A stored");
    }
    // Both replicas take every change at once: exactly one take of each wins.
    let mut races = Vec::new();
    for id in &ids {
        for (store, approver) in [(a.clone(), "alice"), (b.clone(), "bob")] {
            let id = id.clone();
            races.push(tokio::spawn(async move { store.take(&id, approver).await.map(|change| change.workspace) }));
        }
    }
    let mut won = BTreeMap::new();
    for race in races {
        match race.await.unwrap() {
            Ok(workspace) => *won.entry(workspace).or_insert(0) += 1,
            Err(TakeError::Used) => {}
            Err(other) => panic!("a losing take says the change was used, not {other}"),
        }
    }
    assert_eq!(won.len(), 12, "every change was taken: {won:?}");
    assert!(won.values().all(|&takes| takes == 1), "each change once: {won:?}");
    // A third replica started now sees every change applying.
    let c = ApprovalStore::open_database(&db, approval_options()).await.unwrap();
    let states = c.states();
    assert_eq!(states.len(), 12);
    assert!(states.values().all(|state| *state == "applying"), "{states:?}");
    let applied = ChangeState::Applied {
        run_id: "run_2".into(),
        approver: "bob".into(),
        at: "2026-12-05T00:00:00Z".into(),
        detail: json!({}),
    };
    c.finish(&ids[0], applied.clone()).await.unwrap();
    assert_eq!(a.get_current(&ids[0]).await.unwrap().map(|(_, state)| state), Some(applied));
    let rows = pg.psql("SELECT count(*) FROM akritas_records WHERE store = 'approvals'");
    assert_eq!(rows, "25", "12 stored, 12 taken, 1 finished: one row each");
}

fn session_options(snapshot_every: u64) -> SessionOptions {
    SessionOptions { snapshot_every, ..SessionOptions::default() }
}

fn message(n: usize) -> Inbound {
    Inbound {
        provider: Provider::Telegram,
        receiver: "default/telegram".into(),
        event_id: format!("telegram:default/telegram:{n}"),
        conversation_id: "42".into(),
        user_id: "u1".into(),
        message_id: Some(n.to_string()),
        thread_id: None,
        reply_to: None,
        response_url: None,
        text: format!("question {n}"),
    }
}

#[tokio::test]
async fn a_lagging_replica_catches_up_across_a_snapshot_and_an_event_is_accepted_once() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let a = SessionStore::open_database(&db, session_options(4)).await.unwrap();
    let b = SessionStore::open_database(&db, session_options(4)).await.unwrap();
    let key = SessionKey::of(&message(0));
    for n in 1..=10 {
        let inbound = message(n);
        assert!(a.accept(&inbound).await.unwrap());
        a.record_turn(&key, &inbound.event_id, &inbound.text, &format!("answer {n}")).await.unwrap();
    }
    let snapshot = pg.psql("SELECT seq FROM akritas_snapshots WHERE store = 'bot_sessions'");
    assert_eq!(snapshot, "20", "a snapshot every 4 records: the last at 20");
    assert_eq!(
        pg.psql("SELECT count(*) FROM akritas_records WHERE store = 'bot_sessions'"),
        "0",
        "the snapshot replaced the rows"
    );
    // B read nothing since it opened: its records are gone, so it rebuilds from the snapshot.
    b.refresh().await.unwrap();
    let expected: Vec<Turn> =
        (1..=10).map(|n| Turn { user: format!("question {n}"), assistant: format!("answer {n}") }).collect();
    assert_eq!(b.history(&key), expected);
    // A redelivered event is accepted by one replica only, whichever gets it.
    let again = message(11);
    let (first, second) = tokio::join!(a.accept(&again), b.accept(&again));
    assert_eq!([first.unwrap(), second.unwrap()].iter().filter(|accepted| **accepted).count(), 1);
    assert!(!b.accept(&message(3)).await.unwrap(), "an old event is still a duplicate on B");
}

#[tokio::test]
async fn a_row_changed_in_the_database_is_refused_naming_the_store_and_the_record() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let store = ApprovalStore::open_database(&db, approval_options()).await.unwrap();
    store.insert(change("one")).await.unwrap();
    store.insert(change("two")).await.unwrap();
    drop(store);
    pg.psql(
        "UPDATE akritas_records SET data = replace(data, '\"two\"', '\"evil\"') WHERE store = 'approvals' AND seq = 2",
    );
    let error = ApprovalStore::open_database(&db, approval_options()).await.unwrap_err().to_string();
    assert!(
        error.starts_with("the approval journal (database store \"approvals\") has a record (seq 2)")
            && error.contains("does not match its hash")
            && error.contains("restore the database from backup, or delete the store's rows"),
        "{error}"
    );
    // Put back, it opens again.
    pg.psql(
        "UPDATE akritas_records SET data = replace(data, '\"evil\"', '\"two\"') WHERE store = 'approvals' AND seq = 2",
    );
    let store = ApprovalStore::open_database(&db, approval_options()).await.unwrap();
    store.insert(change("three")).await.unwrap();
    drop(store);
    // Changed again and hashed again: the next record no longer follows it.
    pg.psql(
        "UPDATE akritas_records SET data = replace(data, '\"two\"', '\"evil\"') WHERE store = 'approvals' AND seq = 2",
    );
    pg.psql(
        "UPDATE akritas_records SET hash = encode(sha256(convert_to(prev || E'\\n' || seq || E'\\n' || time || E'\\n' || kind || E'\\n' || data, 'UTF8')), 'hex') \
         WHERE store = 'approvals' AND seq = 2",
    );
    let error = ApprovalStore::open_database(&db, approval_options()).await.unwrap_err().to_string();
    assert!(error.contains("(seq 3)") && error.contains("does not follow the record before it"), "{error}");
}

#[tokio::test]
async fn replicas_starting_together_migrate_once_and_a_newer_schema_is_refused() {
    let pg = Postgres::start();
    let db = Database::connect(&pg.url("disable"), None, 8).unwrap();
    let mut starts = Vec::new();
    for _ in 0..4 {
        let db = db.clone();
        starts.push(tokio::spawn(async move { db.migrate().await.unwrap() }));
    }
    let mut from_empty = 0;
    for start in starts {
        let migrated = start.await.unwrap();
        assert_eq!(migrated.to, 2);
        from_empty += usize::from(migrated == Migrated { from: 0, to: 2 });
    }
    assert_eq!(from_empty, 1, "one replica migrated, the others found it done");
    assert_eq!(pg.psql("SELECT count(*) FROM akritas_schema"), "2");
    pg.psql("INSERT INTO akritas_schema (version, about) VALUES (3, 'from a newer version')");
    let error = db.migrate().await.unwrap_err();
    assert!(matches!(error, DatabaseError::NewerSchema { found: 3, known: 2 }), "{error}");
    assert!(error.to_string().contains("run a version at least as new"), "{error}");
}

#[tokio::test]
async fn a_database_the_previous_version_migrated_is_migrated_on_and_keeps_its_records() {
    let pg = Postgres::start();
    let db = Database::connect(&pg.url("disable"), None, 2).unwrap();
    // What version 1 of the schema left: its tables, its version row, a store's records (written
    // now, then the database is taken back to version 1's shape).
    db.migrate().await.unwrap();
    let old = Group::start(log(&db, "sessions", now(), None));
    for n in 0..3 {
        old.append("bots.turn", &json!({ "n": n })).await.unwrap();
    }
    drop(old);
    pg.psql("ALTER TABLE akritas_records DROP COLUMN key; DROP INDEX akritas_records_by_kind; DROP TABLE akritas_replicas; DELETE FROM akritas_schema WHERE version = 2");
    let columns = "SELECT count(*) FROM information_schema.columns WHERE table_name = 'akritas_records'";
    assert_eq!(pg.psql(columns), "8", "the version 1 table");
    assert_eq!(db.migrate().await.unwrap(), Migrated { from: 1, to: 2 });
    assert_eq!(pg.psql(columns), "9");
    let log = log(&db, "sessions", now(), None);
    assert_eq!(log.verify(None).await.unwrap().records, 3, "the records written before the migration verify");
    assert_eq!(log.read(2).await.unwrap().unwrap().data, json!({ "n": 1 }));
    Group::start(log.clone()).append("bots.turn", &json!({ "n": 3 })).await.unwrap();
    assert_eq!(log.verify(None).await.unwrap().last_seq, 4, "and the chain goes on after them");
}

#[tokio::test]
async fn tls_is_verified_against_the_given_ca_and_the_password_never_shows() {
    let pg = Postgres::start_tls();
    let ca = pg.ca_pem.clone().unwrap();
    let url = format!("{} password=hunter2-secret", pg.url("require"));
    let db = Database::connect(&url, Some(&ca), 2).unwrap();
    assert_eq!(db.migrate().await.unwrap().to, 2, "TLS with the CA that signed the server");
    let untrusted = Database::connect(&url, None, 2).unwrap();
    let error = untrusted.migrate().await.unwrap_err().to_string();
    assert!(error.contains("unreachable") && error.to_lowercase().contains("certificate"), "{error}");
    assert!(!error.contains("hunter2"), "{error}");
    let bad =
        Database::connect("host=127.0.0.1 port=notaport password=hunter2-secret", None, 2).unwrap_err().to_string();
    assert!(!bad.contains("hunter2"), "{bad}");
}

#[tokio::test]
async fn a_database_restart_fails_a_write_cleanly_and_the_next_one_succeeds() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let store = ApprovalStore::open_database(&db, approval_options()).await.unwrap();
    let first = store.insert(change("before")).await.unwrap();
    pg.restart();
    let mut stored = Vec::new();
    for n in 0..3 {
        match store.insert(change(&format!("after{n}"))).await {
            Ok(id) => stored.push(id),
            Err(error) => assert!(error.to_string().contains("database"), "{error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!stored.is_empty(), "a write after the restart succeeds");
    let reopened = ApprovalStore::open_database(&db, approval_options()).await.unwrap();
    assert_eq!(reopened.states().len(), 1 + stored.len(), "a failed write stored nothing");
    for id in stored.iter().chain([&first]) {
        assert!(reopened.get(id).is_some());
    }
}

fn log(db: &Database, store: &'static str, clock: akritas::journal::Clock, key: Option<&[u8]>) -> Log {
    Log::new(db, store, clock, akritas::journal::DEFAULT_MAX_RECORD_BYTES, key.map(Arc::from))
}

fn now() -> akritas::journal::Clock {
    Arc::new(|| jiff::Timestamp::now().to_string())
}

#[tokio::test]
async fn group_commit_puts_concurrent_appends_in_one_sealed_chain_that_verify_checks() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let key = b"an audit key of at least 32 bytes!!".as_slice();
    let group = Group::start(log(&db, "audit", now(), Some(key)));
    let mut writers = Vec::new();
    for writer in 0..16 {
        let group = group.clone();
        writers.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for n in 0..50 {
                let record = group.append("audit.tool_call", &json!({ "writer": writer, "n": n })).await.unwrap();
                seqs.push(record.seq);
            }
            seqs
        }));
    }
    let mut seqs = Vec::new();
    for writer in writers {
        let mine = writer.await.unwrap();
        assert!(mine.windows(2).all(|pair| pair[0] < pair[1]), "a writer's appends keep their order");
        seqs.extend(mine);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=800).collect::<Vec<u64>>(), "every append got its own seq, none lost");
    let store = log(&db, "audit", now(), Some(key));
    let verified = store.verify(Some(key)).await.unwrap();
    assert_eq!((verified.records, verified.first_seq, verified.last_seq, verified.sealed), (800, 1, 800, 800));
    assert_eq!(store.read(17).await.unwrap().unwrap().kind, "audit.tool_call");
    // A bad kind and an oversized record are refused before anything is queued.
    assert!(group.enqueue("Bad Kind", &json!({})).is_err());
    let small = Group::start(Log::new(&db, "small", now(), 64, None));
    assert!(small.append("audit.x", &json!({ "text": "x".repeat(100) })).await.is_err());
    // The wrong key, a removed last record, a removed middle record: each is found.
    let error = store.verify(Some(b"another key of at least 32 bytes!!!")).await.unwrap_err().to_string();
    assert!(error.contains("record 1 ") && error.contains("keyed seal"), "{error}");
    pg.psql("DELETE FROM akritas_records WHERE store = 'audit' AND seq = 800");
    let error = store.verify(None).await.unwrap_err().to_string();
    assert!(error.contains("records were deleted"), "{error}");
    pg.psql("DELETE FROM akritas_records WHERE store = 'audit' AND seq = 400");
    let error = store.verify(None).await.unwrap_err().to_string();
    assert!(error.contains("record 401 ") && error.contains("does not follow"), "{error}");
}

#[tokio::test]
async fn retention_deletes_old_records_up_to_what_is_still_needed_and_the_chain_still_verifies() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let old = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let is_old = old.clone();
    let clock: akritas::journal::Clock = Arc::new(move || {
        if is_old.load(std::sync::atomic::Ordering::SeqCst) {
            "2020-01-01T00:00:00Z".to_string()
        } else {
            jiff::Timestamp::now().to_string()
        }
    });
    let store = log(&db, "alerts", clock, None);
    let group = Group::start(store.clone());
    for n in 0..10 {
        group.append("alert.event", &json!({ "n": n })).await.unwrap();
    }
    old.store(false, std::sync::atomic::Ordering::SeqCst);
    for n in 10..15 {
        group.append("alert.event", &json!({ "n": n })).await.unwrap();
    }
    // Records 1-10 are old, but an open incident still needs record 7 onwards.
    assert_eq!(store.retain(Duration::from_secs(86_400), 7).await.unwrap().records, 6);
    assert_eq!(store.retain(Duration::from_secs(86_400), 7).await.unwrap().records, 0, "nothing more to delete");
    let verified = store.verify(None).await.unwrap();
    assert_eq!((verified.records, verified.first_seq, verified.last_seq), (9, 7, 15));
    assert!(store.read(6).await.unwrap().is_none() && store.read(7).await.unwrap().is_some());
    // Deleting past the anchor by hand is found.
    pg.psql("DELETE FROM akritas_records WHERE store = 'alerts' AND seq = 7");
    let error = store.verify(None).await.unwrap_err().to_string();
    assert!(error.contains("record 8 ") && error.contains("anchor"), "{error}");
}

#[tokio::test]
async fn a_database_that_accepts_but_never_answers_fails_the_call_instead_of_hanging_it() {
    // A listener that accepts connections and never says a word.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let db = Database::connect(&format!("host=127.0.0.1 port={port} user=akritas sslmode=disable"), None, 2).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(120), db.migrate()).await;
    let error = outcome.expect("the connection attempt is bounded").unwrap_err();
    assert!(matches!(error, DatabaseError::Unreachable(_)), "{error}");
    held.abort();
}

/// Replicas snapshot every 5 records, so a reader often finds the records after its state
/// already replaced by a snapshot (also when no record is left after it).
#[tokio::test]
async fn replicas_writing_and_reading_at_once_end_in_the_state_a_fresh_replica_reads() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let replicas: Vec<SessionStore> = {
        let mut opened = Vec::new();
        for _ in 0..3 {
            opened.push(SessionStore::open_database(&db, session_options(5)).await.unwrap());
        }
        opened
    };
    let mut tasks = Vec::new();
    for (r, store) in replicas.iter().enumerate() {
        // Each replica answers its own conversation while also reading the others'.
        let writer = store.clone();
        tasks.push(tokio::spawn(async move {
            let store = writer;
            for n in 0..15 {
                let mut inbound = message(r * 100 + n);
                inbound.conversation_id = format!("chat-{r}");
                assert!(store.accept(&inbound).await.unwrap());
                let key = SessionKey::of(&inbound);
                store.record_turn(&key, &inbound.event_id, &inbound.text, "ok").await.unwrap();
                store.refresh().await.unwrap();
            }
        }));
        let reader = store.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..30 {
                reader.refresh().await.unwrap();
                tokio::task::yield_now().await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let fresh = SessionStore::open_database(&db, session_options(5)).await.unwrap();
    for store in replicas.iter().chain([&fresh]) {
        store.refresh().await.unwrap();
        for r in 0..3 {
            let mut inbound = message(r * 100);
            inbound.conversation_id = format!("chat-{r}");
            let history = store.history(&SessionKey::of(&inbound));
            assert_eq!(history.len(), 10, "chat-{r}: the session keeps its last 10 turns (20 messages), each once");
            let questions: Vec<String> = history.iter().map(|turn| turn.user.clone()).collect();
            let expected: Vec<String> = (5..15).map(|n| format!("question {}", r * 100 + n)).collect();
            assert_eq!(questions, expected);
        }
        assert!(store.pending().is_empty());
    }
    assert_eq!(store_head(&pg), "90", "3 replicas x 15 messages x (accept + turn)");
}

fn store_head(pg: &Postgres) -> String {
    pg.psql("SELECT seq FROM akritas_heads WHERE store = 'bot_sessions'")
}

#[tokio::test]
async fn callers_that_go_away_mid_write_leave_no_lock_and_no_half_write_behind() {
    let pg = Postgres::start();
    let db = Database::connect(&pg.url("disable"), None, 1).unwrap();
    db.migrate().await.unwrap();
    let store = ApprovalStore::open_database(&db, approval_options()).await.unwrap();
    // Another replica, with its own connections.
    let other_db = Database::connect(&pg.url("disable"), None, 1).unwrap();
    let other = ApprovalStore::open_database(&other_db, approval_options()).await.unwrap();
    for n in 0..30u64 {
        // Give up on the insert at a different point each time (while it waits for the
        // connection, holds the head lock, writes, or commits)...
        let cut = Duration::from_micros(n * 100);
        let _ = tokio::time::timeout(cut, store.insert(change(&format!("cut{n}")))).await;
        // ...and the other replica can still write at once: no lock was left held.
        tokio::time::timeout(Duration::from_secs(20), other.insert(change(&format!("other{n}"))))
            .await
            .unwrap_or_else(|_| panic!("after a write given up at {cut:?}, the store's head stayed locked"))
            .unwrap();
    }
    let id = store.insert(change("after")).await.unwrap();
    let fresh = ApprovalStore::open_database(&db, approval_options()).await.unwrap();
    assert!(fresh.get(&id).is_some());
    assert_eq!(fresh.states(), store.states(), "what the store applied is what the database committed");
    let log = Log::new(&db, "approvals", now(), akritas::journal::DEFAULT_MAX_RECORD_BYTES, None);
    assert_eq!(log.verify(None).await.unwrap().records as usize, fresh.states().len());
    // Each given-up transaction's rollback was sent when it was dropped; a loaded machine may
    // take a moment to run them.
    let idle = "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pg.psql(idle) != "0" {
        assert!(std::time::Instant::now() < deadline, "a transaction was left open: {}", pg.psql(idle));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_leads_and_another_takes_over_when_it_stops_or_loses_the_database() {
    use akritas::journal::database::lead;
    use tokio_util::sync::CancellationToken;
    let pg = Postgres::start();
    let db_a = database(&pg).await;
    let db_b = database(&pg).await;
    let every = Duration::from_millis(100);
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let a = lead(&db_a, every, stop_a.clone());
    let b = lead(&db_b, every, stop_b.clone());
    let leaders =
        |a: &tokio::sync::watch::Receiver<bool>, b: &tokio::sync::watch::Receiver<bool>| (*a.borrow(), *b.borrow());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !(*a.borrow() || *b.borrow()) {
        assert!(std::time::Instant::now() < deadline, "nobody leads");
        tokio::time::sleep(every).await;
    }
    tokio::time::sleep(every * 5).await;
    let (first_a, first_b) = leaders(&a, &b);
    assert!(first_a ^ first_b, "exactly one leads: {:?}", (first_a, first_b));
    // The leader stops: the other takes over.
    let (leader_stop, mut follower) = if first_a { (stop_a.clone(), b.clone()) } else { (stop_b.clone(), a.clone()) };
    leader_stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), follower.wait_for(|leads| *leads))
        .await
        .expect("the other replica took over")
        .unwrap();
    // The database goes away: the leader steps down.
    pg.stop();
    tokio::time::timeout(Duration::from_secs(5), follower.wait_for(|leads| !*leads))
        .await
        .expect("the leader stepped down without its database")
        .unwrap();
    pg.start_again();
    tokio::time::timeout(Duration::from_secs(10), follower.wait_for(|leads| *leads))
        .await
        .expect("it leads again once the database is back")
        .unwrap();
    stop_a.cancel();
    stop_b.cancel();
}

/// `storage migrate` of a bot-session journal that retention cut (its chain starts after an
/// anchor, its state in a snapshot) and that holds a record of the journal's own (a torn tail
/// truncated at a start): a replica on the database reads the same conversation.
#[tokio::test]
async fn a_journal_cut_by_retention_with_a_torn_tail_record_moves_into_the_database_and_reads_the_same() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let data = tempfile::tempdir().unwrap();
    let path = data.path().join("bots").join("sessions.jsonl");
    let options = || SessionOptions { snapshot_every: 4, segment_bytes: 512, ..SessionOptions::default() };
    let key = SessionKey::of(&message(0));
    let talk = |store: &SessionStore, range: std::ops::Range<usize>| {
        let store = store.clone();
        let key = key.clone();
        async move {
            for n in range {
                let inbound = message(n);
                assert!(store.accept(&inbound).await.unwrap());
                store.record_turn(&key, &inbound.event_id, &inbound.text, &format!("answer {n}")).await.unwrap();
            }
        }
    };
    let store = SessionStore::open(&path, options()).unwrap();
    talk(&store, 1..9).await;
    drop(store);
    // A crash mid-write left half a line; the next start truncates it and records that.
    let active = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| {
            // The segments: `sessions.jsonl` and `sessions.jsonl.<first seq>`.
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.strip_prefix("sessions.jsonl")
                .is_some_and(|rest| rest.bytes().all(|b| b == b'.' || b.is_ascii_digit()))
        })
        .max()
        .unwrap();
    std::fs::OpenOptions::new().append(true).open(&active).unwrap().write_all(b"{\"seq\":").unwrap();
    let store = SessionStore::open(&path, options()).unwrap();
    talk(&store, 9..11).await;
    let history = store.history(&key);
    drop(store);
    assert!(akritas::journal::anchor(&path).unwrap().is_some(), "retention cut the journal's start");

    let settings = akritas::config::Settings { data_dir: data.path().to_path_buf(), ..Default::default() };
    let mut lines = Vec::new();
    let moved =
        akritas::app::migrate::to_database(&settings, &db, &mut |store| lines.push(store.to_string())).await.unwrap();
    let sessions = moved.iter().find(|m| m.store == "bot_sessions").unwrap();
    assert!(sessions.first_seq > 1 && sessions.copied == sessions.records, "{lines:?}");
    assert!(sessions.checked.contains("snapshot at record"), "{lines:?}");
    let internal =
        pg.psql("SELECT count(*) FROM akritas_records WHERE store = 'bot_sessions' AND kind LIKE 'journal.%'");
    assert_ne!(internal, "0", "the torn-tail record is in the chain");
    let replica = SessionStore::open_database(&db, options()).await.unwrap();
    assert_eq!(replica.history(&key), history);
    assert!(!replica.accept(&message(10)).await.unwrap(), "an event seen before the move is still a duplicate");
    // Moving again copies nothing.
    let again = akritas::app::migrate::to_database(&settings, &db, &mut |_| {}).await.unwrap();
    assert!(again.iter().all(|m| m.copied == 0), "{again:?}");
}

/// `storage migrate --to embedded` of a bot-session store the database compacted down to its
/// snapshot: the journal written starts after the anchor, with the state as its snapshot.
#[tokio::test]
async fn a_store_compacted_in_the_database_is_written_back_as_a_journal_that_opens_the_same() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let store = SessionStore::open_database(&db, session_options(4)).await.unwrap();
    let key = SessionKey::of(&message(0));
    for n in 1..=6 {
        let inbound = message(n);
        assert!(store.accept(&inbound).await.unwrap());
        store.record_turn(&key, &inbound.event_id, &inbound.text, &format!("answer {n}")).await.unwrap();
    }
    assert_eq!(
        pg.psql("SELECT count(*) FROM akritas_records WHERE store = 'bot_sessions'"),
        "0",
        "compacted into the snapshot"
    );
    let history = store.history(&key);
    let data = tempfile::tempdir().unwrap();
    let settings = akritas::config::Settings { data_dir: data.path().to_path_buf(), ..Default::default() };
    let moved = akritas::app::migrate::to_journals(&settings, &db, &mut |_| {}).await.unwrap();
    let sessions = moved.iter().find(|m| m.store == "bot_sessions").unwrap();
    assert_eq!((sessions.copied, sessions.last_seq), (0, 12), "{sessions:?}");
    assert!(sessions.checked.contains("snapshot at record 12"), "{sessions:?}");
    let path = data.path().join("bots").join("sessions.jsonl");
    let reopened = SessionStore::open(&path, session_options(4)).unwrap();
    assert_eq!(reopened.history(&key), history);
    assert!(!reopened.accept(&message(6)).await.unwrap(), "a dedup id kept in the snapshot");
    assert!(reopened.accept(&message(7)).await.unwrap(), "and the journal takes new records after the anchor");
    drop(reopened);
    assert!(!data.path().join("bots.migrating").exists());
    let again = akritas::app::migrate::to_journals(&settings, &db, &mut |_| {}).await.unwrap_err();
    assert!(again.to_string().contains("a journal is already there"), "{again:#}");
}

/// What `storage migrate` writes goes through `Log::import`, and what it reads back through
/// `Log::export`: a record that does not match its hash, or does not follow the store's head, is
/// refused and nothing is written; a row changed in the database is refused on the way out.
#[tokio::test]
async fn a_copied_record_that_is_forged_or_out_of_place_is_refused_and_a_changed_row_is_not_exported() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let store = SessionStore::open_database(&db, session_options(100)).await.unwrap();
    for n in 1..=3 {
        assert!(store.accept(&message(n)).await.unwrap());
    }
    let records = log(&db, "bot_sessions", now(), None).export(0, 10).await.unwrap();
    assert_eq!(records.len(), 3);
    let target = log(&db, "copy", now(), None);
    // A forged record: its data changed, its hash kept.
    let mut forged = records.clone();
    forged[1].data = forged[1].data.replace("question 2", "question X");
    let error = target.import(&forged).await.unwrap_err();
    assert!(error.to_string().contains("record 2") && error.to_string().contains("does not match its hash"), "{error}");
    // Out of place: the second record without the first, into an empty store.
    target.import(&records[..1]).await.unwrap();
    let error = target.import(&records[2..]).await.unwrap_err();
    assert!(error.to_string().contains("does not follow the store's head"), "{error}");
    assert_eq!(pg.psql("SELECT seq FROM akritas_heads WHERE store = 'copy'"), "1", "nothing of the refused batches");
    target.import(&records[1..]).await.unwrap();
    assert_eq!(target.verify(None).await.unwrap().last_hash, records[2].hash);
    // A row changed in the database is not exported as if it were the record.
    pg.psql(
        "UPDATE akritas_records SET data = replace(data, 'question 3', 'question Y') WHERE store = 'copy' AND seq = 3",
    );
    let error = target.export(0, 10).await.unwrap_err();
    assert!(matches!(error, DatabaseError::Changed { seq: 3, .. }), "{error}");
}
