//! The audit's contract suite ([`akritas_testkit::contract`]) on the embedded journal; the e2e
//! tier runs the same code on PostgreSQL (`database_audit`).

use std::sync::Arc;

use akritas::audit::AuditLog;
use akritas_testkit::contract;

fn open(dir: &tempfile::TempDir) -> AuditLog {
    AuditLog::open(&dir.path().join("audit.jsonl")).unwrap()
}

#[tokio::test]
async fn lifecycle_reads_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    contract::audit_lifecycle_reads_and_counts(&open(&dir)).await;
}

#[tokio::test]
async fn refusals_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    contract::audit_refusals(&open(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_keep_each_run_in_order() {
    let dir = tempfile::tempdir().unwrap();
    contract::audit_concurrent_writers(Arc::new(open(&dir))).await;
}
