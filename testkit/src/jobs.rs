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
