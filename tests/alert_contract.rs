//! The alert store's contract suite ([`akritas_testkit::contract`]) on the embedded journal; the
//! e2e tier runs the same code on PostgreSQL (`database_alerts`).

use std::path::Path;
use std::time::Duration;

use akritas::alerts::store::{AlertStore, Storage};
use akritas_testkit::contract;

/// Opens the journal at `path`, waiting for a store dropped just before to let it go (its last
/// snapshot is written in the background).
async fn open(path: &Path) -> AlertStore {
    for _ in 0..200 {
        match AlertStore::open_stored(path, contract::open_limits(), Storage::default(), &|_| "default".into()) {
            Ok(store) => return store,
            Err(error) if error.to_string().contains("already open") => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("{error}"),
        }
    }
    panic!("the journal stayed locked");
}

#[tokio::test]
async fn deliveries_jobs_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    contract::alerts_deliveries_jobs_and_reads(&open(&dir.path().join("alerts.jsonl")).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_stored_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alerts.jsonl");
    contract::alerts_survive_a_reopen(|| open(&path)).await;
}
