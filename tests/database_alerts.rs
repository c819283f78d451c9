//! The alert store on a real PostgreSQL: the contract suite the fast tier runs on the embedded
//! journal (`alert_contract`), then what only replicas sharing a database can show: the same
//! alerts posted to two replicas at once are deduplicated as one, a job is started by one
//! replica only, a replica left behind by retention rebuilds from the snapshot, a write that
//! fails after deciding leaves no trace of its decision, and a stopped database fails
//! deliveries cleanly until it is back.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use akritas::alerts::signature::Signed;
use akritas::alerts::store::{AlertStore, AlertStoreError, Failure, JobStatus, Step, Storage};
use akritas::alerts::worker::delivery::pending_delivery;
use akritas::journal::database::Database;
use akritas::resources::notification_receiver::ReceiverType;
use akritas_testkit::contract::{self, alert_events};
use akritas_testkit::jobs::incident_details;
use akritas_testkit::postgres::Postgres;

async fn database(pg: &Postgres) -> Database {
    let db = Database::connect(&pg.url("disable"), None, 8).unwrap();
    db.migrate().await.unwrap();
    db
}

async fn open(db: &Database, storage: Storage) -> AlertStore {
    AlertStore::open_database(db, contract::open_limits(), storage).await.unwrap()
}

/// Two replicas sharing `db`.
async fn replicas(db: &Database) -> (Arc<AlertStore>, Arc<AlertStore>) {
    (Arc::new(open(db, Storage::default()).await), Arc::new(open(db, Storage::default()).await))
}

/// The jobs of one firing alert per key, posted one by one to `store`'s source `namespace/am`.
async fn jobs_of(store: &AlertStore, namespace: &str, keys: impl Iterator<Item = String>) -> Vec<String> {
    let mut jobs = Vec::new();
    for key in keys {
        let accepted = store.ingest(namespace, "am", alert_events(&[("firing", &key)])).await.unwrap();
        jobs.push(accepted.events[0].job_id.as_deref().unwrap().to_string());
    }
    jobs
}

#[tokio::test]
async fn the_contract_holds_on_the_database() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    contract::alerts_deliveries_jobs_and_reads(&open(&db, Storage::default()).await).await;
    let other = Postgres::start();
    let db = database(&other).await;
    contract::alerts_survive_a_reopen(|| open(&db, Storage::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_posted_to_two_replicas_at_once_are_deduplicated_as_one() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let (a, b) = replicas(&db).await;
    // Alertmanager sends every notification to both replicas: each key arrives twice, at once.
    let mut posts = Vec::new();
    for round in 0..3 {
        for n in 0..20 {
            for store in [a.clone(), b.clone()] {
                let key = format!("host-{n}");
                posts.push(tokio::spawn(async move {
                    store.ingest("ops", "am", alert_events(&[("firing", &key)])).await.map(|accepted| (round, accepted))
                }));
            }
        }
    }
    let mut accepted = 0;
    let mut incidents = BTreeSet::new();
    let mut jobs = BTreeSet::new();
    for post in posts {
        let (_, answer) = post.await.unwrap().unwrap();
        let item = &answer.events[0];
        accepted += usize::from(item.status == "accepted");
        incidents.insert(item.incident_id.clone());
        jobs.extend(item.job_id.clone());
    }
    assert_eq!((accepted, incidents.len(), jobs.len()), (20, 20, 20), "one incident and one job per key");
    assert_eq!(incident_details(&a, 100).await, incident_details(&b, 100).await, "both replicas see the same");
    assert_eq!(a.tallies(), b.tallies());
    let delivered = pg.psql("SELECT count(*) FROM akritas_records WHERE store = 'alerts' AND kind = 'alerts.delivery'");
    assert_eq!(delivered, "120", "every acknowledged delivery is stored once");
}

/// Replicas take jobs in the same turns: a start recorded by one replica moves its namespace
/// behind the others for every replica, so another team's alert posted to any replica after a
/// storm is the next job any of them takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_takes_another_namespaces_first_job_before_the_rest_of_a_storm() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let (a, b) = replicas(&db).await;
    let storm = jobs_of(&a, "team-a", (0..30).map(|n| format!("a-{n:02}"))).await;
    let theirs = jobs_of(&b, "team-b", ["b-00".to_string()].into_iter()).await.remove(0);
    let due = |store: &AlertStore, max| {
        let (jobs, _) = store.due_jobs(jiff::Timestamp::now(), &BTreeSet::new(), max);
        jobs.into_iter().map(|job| job.id.to_string()).collect::<Vec<_>>()
    };
    a.follow().await.unwrap();
    let mut first = a.job(&due(&a, 1)[0]).await.unwrap().unwrap();
    assert_eq!(first.id, storm[0], "oldest first while no namespace has started a job");
    a.step_as(&mut first, Step::Start, Some("replica-a")).await.unwrap();
    b.follow().await.unwrap();
    assert_eq!(due(&b, 2), [theirs.clone(), storm[1].clone()], "replica b saw replica a's start");
    assert_eq!(due(&a, 2), [theirs, storm[1].clone()]);
}

/// A signed delivery one replica accepted is refused as a replay by every other, and by a
/// replica started later: the signatures are decided under the head lock and kept with the
/// deliveries in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_accepted_by_one_replica_is_a_replay_at_every_other() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let (a, b) = (open(&db, Storage::default()).await, open(&db, Storage::default()).await);
    let at = jiff::Timestamp::now().as_second();
    let signed = |n: u128| Some(Signed { at, digest: format!("{n:032x}") });
    let events = || alert_events(&[("firing", "db-1")]);
    a.ingest_signed("ops", "grafana", events(), 0, signed(1)).await.unwrap();
    let replayed = b.ingest_signed("ops", "grafana", events(), 0, signed(1)).await;
    assert!(matches!(replayed, Err(AlertStoreError::Replayed)), "{replayed:?}");
    let later = open(&db, Storage::default()).await;
    let replayed = later.ingest_signed("ops", "grafana", events(), 0, signed(1)).await;
    assert!(matches!(replayed, Err(AlertStoreError::Replayed)), "{replayed:?}");
    let fresh = b.ingest_signed("ops", "grafana", events(), 0, signed(2)).await.unwrap();
    assert_eq!(fresh.events[0].status, "duplicate", "signed anew, the delivery is taken");
    let delivered = pg.psql("SELECT count(*) FROM akritas_records WHERE store = 'alerts' AND kind = 'alerts.delivery'");
    assert_eq!(delivered, "2", "a refused replay stores nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_started_by_one_replica_however_they_race() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let (a, b) = replicas(&db).await;
    let ids = jobs_of(&a, "ops", (0..10).map(|n| format!("db-{n}"))).await;
    let mut races = Vec::new();
    for id in &ids {
        for store in [a.clone(), b.clone()] {
            let id = id.clone();
            races.push(tokio::spawn(async move {
                let mut job = store.job(&id).await.unwrap().expect("both replicas read the job");
                store.step(&mut job, Step::Start).await
            }));
        }
    }
    let (mut started, mut taken) = (0, 0);
    for race in races {
        match race.await.unwrap() {
            Ok(()) => started += 1,
            // Told the job was taken, or (its copy read after the winner's start) refused as a
            // start of a running job.
            Err(AlertStoreError::Taken { status: JobStatus::Running, .. } | AlertStoreError::IllegalStep(_)) => {
                taken += 1
            }
            Err(other) => panic!("a losing start is told the job was taken, not {other}"),
        }
    }
    assert_eq!((started, taken), (10, 10));
    assert_eq!(b.tallies().0["running"], 10);
    // Their replicas stopped: each finished job's notifications are claimed by one of two.
    for id in &ids {
        let mut job = a.job(id).await.unwrap().unwrap();
        let failure = Failure { run: None, code: "upstream_error".into(), error: "model unavailable".into() };
        let notifications = vec![pending_delivery("default/hook", ReceiverType::Webhook)];
        a.step(&mut job, Step::Fail { failure, notifications }).await.unwrap();
    }
    let mut claims = Vec::new();
    for id in &ids {
        for (store, me) in [(a.clone(), "replica-a"), (b.clone(), "replica-b")] {
            let id = id.clone();
            claims.push(tokio::spawn(async move {
                // As the worker does: a job another replica has claimed is left to it.
                let mut job = store.job(&id).await.unwrap().unwrap();
                if job.claimed_by.is_some() {
                    return Err(AlertStoreError::Taken { job: id.to_string(), status: job.status });
                }
                store.step_as(&mut job, Step::Claim, Some(me)).await
            }));
        }
    }
    let mut claimed = 0;
    for claim in claims {
        match claim.await.unwrap() {
            Ok(()) => claimed += 1,
            Err(AlertStoreError::Taken { .. }) => {}
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(claimed, 10, "one claim per job");
    for id in &ids {
        let job = b.job(id).await.unwrap().unwrap();
        assert!(matches!(job.claimed_by.as_deref(), Some("replica-a" | "replica-b")), "{job:?}");
    }
}

#[tokio::test]
async fn a_replica_left_behind_by_retention_rebuilds_from_the_snapshot() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let retained = Storage { retention: Some(Duration::ZERO), ..Storage::default() };
    let a = open(&db, retained.clone()).await;
    let b = open(&db, retained).await;
    for n in 0..30 {
        let key = format!("old-{n}");
        let fired = a.ingest("ops", "am", alert_events(&[("firing", &key)])).await.unwrap();
        a.ingest("ops", "am", alert_events(&[("resolved", &key)])).await.unwrap();
        let job = a.job(fired.events[0].job_id.as_deref().unwrap()).await.unwrap().unwrap();
        akritas_testkit::jobs::give_up(&a, job, "model unavailable").await.unwrap();
    }
    let open_one = a.ingest("ops", "am", alert_events(&[("firing", "kept-open")])).await.unwrap();
    assert!(a.save_snapshot().await);
    let kept: u64 = pg.psql("SELECT count(*) FROM akritas_records WHERE store = 'alerts'").parse().unwrap();
    assert!(kept < 10, "retention deleted what neither the snapshot nor the open incident needs ({kept} kept)");
    // B applied nothing yet: the records it needs next are gone, so it starts from the snapshot.
    assert_eq!(incident_details(&b, 100).await, incident_details(&a, 100).await);
    let again = b.ingest("ops", "am", alert_events(&[("firing", "kept-open")])).await.unwrap();
    assert_eq!(again.events[0].status, "duplicate");
    assert_eq!(again.events[0].incident_id, open_one.events[0].incident_id);
}

#[tokio::test]
async fn a_write_that_fails_after_deciding_leaves_no_trace_of_its_decision() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let store = open(&db, Storage::default()).await;
    store.ingest("ops", "am", alert_events(&[("firing", "db-1")])).await.unwrap();
    // The database refuses the next records after the store decided on them.
    pg.psql("ALTER TABLE akritas_records ADD CONSTRAINT refuse_new CHECK (seq < 2) NOT VALID");
    let refused = store.ingest("ops", "am", alert_events(&[("firing", "db-2")])).await.unwrap_err();
    assert!(matches!(refused, AlertStoreError::Database(_)), "{refused}");
    assert!(store.degraded().is_some(), "the store says it must rebuild before deciding again");
    pg.psql("ALTER TABLE akritas_records DROP CONSTRAINT refuse_new");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let retried = store.ingest("ops", "am", alert_events(&[("firing", "db-2")])).await.unwrap();
    assert_eq!(retried.events[0].status, "accepted", "db-2's first decision was not kept");
    assert_eq!(store.incidents(10).await.unwrap().len(), 2);
    assert!(store.degraded().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_fails_deliveries_cleanly_until_it_is_back() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let store = open(&db, Storage::default()).await;
    let first = store.ingest("ops", "am", alert_events(&[("firing", "db-1")])).await.unwrap();
    pg.stop();
    let refused = store.ingest("ops", "am", alert_events(&[("firing", "db-2")])).await.unwrap_err();
    assert!(matches!(refused, AlertStoreError::Database(_)), "{refused}");
    assert!(store.incidents(10).await.is_err(), "a read says the database is down, not that nothing is there");
    pg.start_again();
    let mut stored = None;
    for _ in 0..50 {
        match store.ingest("ops", "am", alert_events(&[("firing", "db-2")])).await {
            Ok(accepted) => {
                stored = Some(accepted);
                break;
            }
            Err(AlertStoreError::Database(_) | AlertStoreError::Unavailable(_)) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(stored.expect("the database is back").events[0].status, "accepted");
    let again = store.ingest("ops", "am", alert_events(&[("firing", "db-1")])).await.unwrap();
    assert_eq!(again.events[0].incident_id, first.events[0].incident_id, "what was stored before is kept");
    assert_eq!(store.incidents(10).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_give_up_mid_write_leave_no_decision_the_database_does_not_hold() {
    let pg = Postgres::start();
    let db = database(&pg).await;
    let store = Arc::new(open(&db, Storage::default()).await);
    for round in 0..8u64 {
        let mut tasks = Vec::new();
        for n in 0..60u64 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let key = format!("host-{round}-{}", n % 20);
                let posted = store.ingest("ops", "am", alert_events(&[("firing", &key)]));
                // Some callers go away at once, most while their group is decided or written.
                let _ = tokio::time::timeout(Duration::from_micros((n * 7919 + round * 131) % 40_000), posted).await;
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    }
    // Whatever this replica decided is what a replica reading the database fresh sees.
    let fresh = open(&db, Storage::default()).await;
    store.ingest("ops", "am", alert_events(&[("firing", "last")])).await.unwrap();
    assert_eq!(incident_details(&store, 1000).await, incident_details(&fresh, 1000).await);
    assert_eq!(store.tallies(), fresh.tallies());
    let stored: usize = pg.psql("SELECT count(*) FROM akritas_records WHERE store = 'alerts'").parse().unwrap();
    assert!(stored >= 1);
}
