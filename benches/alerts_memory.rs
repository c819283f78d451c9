//! Memory of the alert store's state per open incident, counted by the allocator.
//!
//! A storm is written into a fresh alert journal through the store (`ALERTS_MEMORY_INCIDENTS`
//! open incidents, 100,000 by default, in five-alert Alertmanager groups), the store is closed,
//! and the same journal is opened again the way `akritas serve` opens it at start: once
//! replaying the whole journal, once from the snapshot a clean stop writes. Twice over:
//! - with the default admission limits: 60 investigations start, 100 are deferred and the rest
//!   of the storm shares one storm job, so the bytes are those of the open incidents;
//! - with no bound on deferred jobs, so that every incident keeps a deferred job of its own.
//!
//! Prints the bytes the reopened store holds, per open incident, its jobs by status and how long
//! the opening took, then the bytes per open incident and per deferred job.
//!
//! Run with `cargo bench --bench alerts_memory`. Prints numbers; asserts nothing about size or
//! time, and exits non-zero only when a reopened store does not hold every incident.

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use akritas::alerts::Event;
use akritas::alerts::adapters::{DecodeContext, adapter};
use akritas::alerts::admission::Limits;
use akritas::alerts::store::{AlertStore, Storage};
use serde_json::Value;

const FIRING: &str = include_str!("../tests/fixtures/alertmanager/alertmanager-webhook.json");
const GROUP: usize = 5;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// One five-alert group of the sample webhook, every alert its own incident.
fn group(template: &Value, index: usize) -> Vec<Event> {
    let mut hook = template.clone();
    let alert = hook["alerts"][0].clone();
    let severities = ["critical", "warning", "info", "warning", "critical"];
    hook["alerts"] = (0..GROUP)
        .map(|i| {
            let n = index * GROUP + i;
            let mut a = alert.clone();
            a["fingerprint"] = format!("{n:016x}").into();
            a["labels"]["pod"] = format!("storm-{n:07}").into();
            a["labels"]["severity"] = severities[i].into();
            a
        })
        .collect();
    let ctx = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
    adapter("alertmanager").expect("adapter").decode(hook.to_string().as_bytes(), &ctx).expect("decode")
}

fn open(path: &std::path::Path, limits: Limits) -> AlertStore {
    AlertStore::open_stored(path, limits, Storage::default(), &|_| "ops".into()).expect("open")
}

/// Waits until the bytes live stop changing (background tasks of a dropped store let go).
async fn settle() -> isize {
    let mut last = live();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let now = live();
        if now == last {
            return now;
        }
        last = now;
    }
}

fn report(label: &str, store: &AlertStore, before: isize, took: std::time::Duration, incidents: usize) -> bool {
    let held = live() - before;
    let (jobs, by_state) = store.tallies();
    let open = by_state.get("firing").copied().unwrap_or_default() as usize;
    println!(
        "alerts_memory: {label}: {open} open incidents, jobs {jobs:?}, {:.1} MiB held ({:.0} bytes per open \
         incident), opened in {:.2} s",
        held as f64 / (1024.0 * 1024.0),
        held as f64 / open.max(1) as f64,
        took.as_secs_f64()
    );
    open == incidents
}

/// Writes the storm under `limits`, then opens the journal again twice (replaying it whole,
/// then from the snapshot a clean stop writes); returns the bytes per open incident held after
/// the second opening, or `None` when an opening lost incidents.
async fn scenario(label: &str, limits: Limits, incidents: usize, template: &Value) -> Option<f64> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("alerts.jsonl");
    let started = Instant::now();
    {
        let store = std::sync::Arc::new(open(&path, limits));
        let mut tasks = tokio::task::JoinSet::new();
        let groups = incidents.div_ceil(GROUP);
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for _ in 0..32 {
            let (store, next, template) = (store.clone(), next.clone(), template.clone());
            tasks.spawn(async move {
                let mut refused = 0usize;
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= groups {
                        return refused;
                    }
                    if store.ingest("ops", "am", group(&template, index)).await.is_err() {
                        refused += 1;
                    }
                }
            });
        }
        let mut refused = 0;
        while let Some(done) = tasks.join_next().await {
            refused += done.expect("task");
        }
        println!(
            "alerts_memory: {label}: stored {groups} deliveries of {GROUP} alerts in {:.1} s; {refused} refused",
            started.elapsed().as_secs_f64()
        );
    }
    let before = settle().await;
    let started = Instant::now();
    let store = open(&path, limits);
    let mut ok = report(&format!("{label}, replayed from the journal"), &store, before, started.elapsed(), incidents);
    store.save_snapshot().await;
    drop(store);
    let before = settle().await;
    let started = Instant::now();
    let store = open(&path, limits);
    ok &= report(&format!("{label}, loaded from the snapshot"), &store, before, started.elapsed(), incidents);
    let per_incident = (live() - before) as f64 / incidents.max(1) as f64;
    ok.then_some(per_incident)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let incidents: usize =
        std::env::var("ALERTS_MEMORY_INCIDENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let template: Value = serde_json::from_str(FIRING).expect("fixture");
    let storm = scenario("default limits (a storm)", Limits::default(), incidents, &template).await;
    let unbounded = Limits { max_deferred_per_source: usize::MAX, ..Limits::default() };
    let deferred = scenario("a deferred job per incident", unbounded, incidents, &template).await;
    match (storm, deferred) {
        (Some(storm), Some(deferred)) => {
            println!(
                "alerts_memory: {storm:.0} bytes per open incident; {:.0} more per deferred job of its own",
                deferred - storm
            );
            ExitCode::SUCCESS
        }
        _ => ExitCode::FAILURE,
    }
}
