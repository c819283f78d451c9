//! An alert journal that cannot be written (a write failed and keeps failing, so the
//! store refuses every change) must not spin the investigation worker: it backs off,
//! and `/health` says the alert pipeline is degraded and why; once writes succeed
//! again the store recovers without a restart. The journal write is made to fail for
//! real with `RLIMIT_FSIZE`, which is process-wide, so the test runs in its own process.

use akritas_testkit as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use akritas::alerts::adapters::{DecodeContext, adapter};
use akritas::alerts::store::AlertStore;
use akritas::alerts::worker::{Worker, WorkerSettings};
use akritas::catalog::secrets::EnvSecrets;
use akritas::catalog::status::StatusBoard;
use akritas::notify::RetryPolicy;
use akritas::web::auth::ApiKeys;
use serde_json::Value;
use support::host;
use support::scripted_llm::ScriptedLlm;
use tokio_util::sync::CancellationToken;

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");

/// CPU time (user + system) this process used so far.
fn cpu_time() -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Sets the soft limit of the file size this process may write.
fn limit_file_size(bytes: libc::rlim_t) {
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) }, 0);
    limit.rlim_cur = bytes.min(limit.rlim_max);
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) }, 0);
}

fn events(starts_at: &str) -> Vec<akritas::alerts::Event> {
    let context = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    let body = FIRING.replace("2026-11-29T22:41:16Z", starts_at);
    adapter("alertmanager").unwrap().decode(body.as_bytes(), &context).unwrap()
}

#[test]
fn a_poisoned_journal_backs_the_worker_off_and_health_says_degraded() {
    if support::in_own_process(module_path!(), "a_poisoned_journal_backs_the_worker_off_and_health_says_degraded") {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(a_poisoned_journal());
    }
}

async fn a_poisoned_journal() {
    let data = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![]).await;
    let catalog = host::catalog_from(data.path());
    let (tools, _) = host::standard_tools();
    let engine = Arc::new(host::engine(&llm, host::settings(), tools, catalog.clone(), None, None));
    let path = data.path().join("alerts.jsonl");
    let store = Arc::new(AlertStore::open(&path).unwrap());
    let first = store.ingest("ops", "am", events("2026-11-29T22:41:16Z")).await.unwrap();
    assert!(first.events[0].job_id.is_some(), "a pending job exists");

    // Every journal write fails from now on (EFBIG instead of SIGXFSZ), until the limit is lifted.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    limit_file_size(std::fs::metadata(&path).unwrap().len());
    let failed = store.ingest("ops", "am", events("2026-11-29T23:41:16Z")).await;
    assert!(failed.is_err(), "the write must fail: {failed:?}");

    let settings = WorkerSettings {
        concurrency: 2,
        max_attempts: 3,
        backoff: Duration::from_millis(10),
        public_url: None,
        delivery: RetryPolicy { attempts: 1, base_delay: Duration::from_millis(10), timeout: Duration::from_secs(1) },
        tenancy: Default::default(),
    };
    let secrets = Arc::new(EnvSecrets::with_lookup(|_: &str| None));
    let worker =
        Worker::new(store.clone(), engine.clone(), catalog.clone(), secrets.clone(), StatusBoard::default(), settings)
            .unwrap();
    let cancel = CancellationToken::new();
    let running = tokio::spawn(Arc::new(worker).run(cancel.clone()));

    let (cpu, wall) = (cpu_time(), Instant::now());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (cpu, wall) = (cpu_time() - cpu, wall.elapsed());
    let share = cpu.as_secs_f64() / wall.as_secs_f64();
    println!("worker on an unwritable store: {cpu:?} CPU in {wall:?} ({:.2}% of one core)", share * 100.0);
    assert!(share < 0.05, "the worker used {:.1}% CPU on an unwritable store", share * 100.0);

    let server = host::serve_with(
        host::engine(&llm, host::settings(), host::standard_tools().0, catalog, None, None),
        host::catalog_from(data.path()),
        ApiKeys::default(),
        Some(store.clone()),
        secrets,
    )
    .await;
    let health: Value = reqwest::get(format!("{}/health", server.url)).await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["degraded"][0]["component"], "alerts", "{health}");
    let reason = health["degraded"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("alert journal"), "the reason says what failed: {health}");
    assert!(health["catalog"]["version"].is_number(), "the other fields stay: {health}");

    // Writes succeed again: the store recovers by itself (here through /health).
    limit_file_size(libc::RLIM_INFINITY);
    let recovered = support::poll(Duration::from_secs(10), || async {
        let health: Value = reqwest::get(format!("{}/health", server.url)).await.ok()?.json().await.ok()?;
        (health["status"] == "ok").then_some(health)
    })
    .await;
    assert!(recovered.is_some(), "health returns to ok once the journal can be written");
    let again = store.ingest("ops", "am", events("2026-11-30T00:41:16Z")).await;
    assert!(again.is_ok(), "deliveries are stored again without a restart: {again:?}");
    cancel.cancel();
    running.await.unwrap();
}
