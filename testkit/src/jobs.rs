//! Alert jobs settled the way the worker settles them, for tests and benches that fill a store
//! without running investigations.

use akritas::alerts::store::{AlertStore, AlertStoreError, Failure, Job, JobStatus, Step};

/// Takes a waiting job through one attempt that gives up (promoted first when deferred), as
/// the worker does: each step is one journal record.
pub async fn give_up(store: &AlertStore, mut job: Job, error: &str) -> Result<Job, AlertStoreError> {
    if job.status == JobStatus::Deferred {
        store.step(&mut job, Step::Promote).await?;
    }
    store.step(&mut job, Step::Start).await?;
    let failure = Failure { run: None, code: "upstream_error".into(), error: error.into() };
    store.step(&mut job, Step::Fail { failure, notifications: Vec::new() }).await?;
    Ok(job)
}

/// Every incident (at most `limit`, newest update first) in its API shape, with its events and
/// jobs: what a reader of the store sees.
pub async fn incident_details(store: &AlertStore, limit: usize) -> Vec<serde_json::Value> {
    let mut details = Vec::new();
    for listed in store.incidents(limit).await.expect("incidents") {
        if let Some((incident, events, jobs)) = store.incident(&listed.id).await.expect("incident") {
            details.push(akritas::alerts::store::incident_json(&incident, &events, &jobs));
        }
    }
    details
}
