//! 1,000 RunSchedules due in the same minute, in process as `serve` builds them: 20
//! namespaces of 50 schedules, a zero-latency scripted model (the host's cost only), the
//! schedule journal and the audit on disk, a clock the bench moves. Prints the scheduler's
//! first look (every schedule seen and journaled), an idle pass over 1,000 schedules, the
//! time until every tick is claimed, until every Run has started and ended (the Runs wait
//! for the host's slots: 3 at once, 2 per namespace, as `max_concurrent_runs: 4`,
//! `alert_reserved_runs: 1`, `max_runs_per_namespace: 2`), the process's CPU time over the
//! minute and its memory. Asserts nothing about speed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use akritas::audit::AuditLog;
use akritas::catalog::secrets::EnvSecrets;
use akritas::catalog::status::StatusBoard;
use akritas::journal::JournalOptions;
use akritas::schedules::{ManualClock, ScheduleStore, Scheduler, SchedulerParts};
use akritas::tools::{ToolName, openai_alias};
use akritas_testkit::host;
use akritas_testkit::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NAMESPACES: usize = 20;
const PER_NAMESPACE: usize = 50;

fn main() {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run());
}

/// CPU seconds this process used (user + system), from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Resident and peak memory, MiB.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
    };
    (field("VmRSS:").unwrap_or(0.0) / 1024.0, field("VmHWM:").unwrap_or(0.0) / 1024.0)
}

fn disk_bytes(dir: &std::path::Path) -> u64 {
    akritas_testkit::files_under(dir).iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum()
}

async fn run() {
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let submit = openai_alias(&ToolName::try_from("local.investigation.submit_result").unwrap());
    let llm = ScriptedLlm::start_with(move |_, request| {
        if offers(request, &plan) {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else if offers(request, &submit) {
            let result = json!({"finding_status": "inconclusive", "actionability": "no_action", "confidence": "high",
                                "summary": "All well", "evidence": [], "production_writes": 0});
            Step::from(Reply::ToolCalls(vec![("r".into(), submit.clone(), result)]))
        } else {
            Step::from(Reply::Content("All well.".into()))
        }
    })
    .await;
    llm.set_recording(false);
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("resources");
    std::fs::create_dir_all(&manifests).unwrap();
    for ns in 0..NAMESPACES {
        let docs: Vec<String> = (0..PER_NAMESPACE)
            .map(|i| {
                format!(
                    "apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {{name: check-{i}, namespace: team-{ns}}}\n\
                     spec: {{schedule: \"0 8 * * *\", timeZone: Europe/Berlin, prompt: \"Is service {i} healthy?\"}}\n"
                )
            })
            .collect();
        std::fs::write(manifests.join(format!("team-{ns}.yaml")), docs.join("---\n")).unwrap();
    }
    let catalog = host::catalog_from(&manifests);
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut settings = host::settings();
    settings.max_concurrent_runs = 4;
    settings.max_runs_per_namespace = 2;
    let audit = Arc::new(AuditLog::open(&data.join("audit.jsonl")).unwrap());
    let engine =
        Arc::new(host::engine(&llm, settings, host::standard_tools().0, catalog.clone(), Some(audit.clone()), None));
    let journal = data.join("schedules").join("schedules.jsonl");
    let store = ScheduleStore::open(&journal, JournalOptions::default(), 20_000).unwrap();
    // 08:00 Europe/Berlin on 2026-12-07 is 07:00 UTC.
    let clock = Arc::new(ManualClock::new("2026-12-07T06:59:00Z".parse().unwrap()));
    let (rss_before, _) = memory();
    let scheduler = Arc::new(
        Scheduler::new(SchedulerParts {
            store: store.clone(),
            engine,
            catalog,
            secrets: Arc::new(EnvSecrets::with_lookup(|_: &str| None)),
            board: StatusBoard::default(),
            clock: clock.clone(),
            settings: akritas_testkit::host::scheduler_settings(u64::MAX, 3, 2),
        })
        .unwrap(),
    );
    let total = NAMESPACES * PER_NAMESPACE;
    let cancel = CancellationToken::new();
    let (started, cpu) = (Instant::now(), cpu_seconds());
    tokio::spawn(scheduler.clone().run(cancel.clone()));
    wait(|| store.state().schedules.len() == total).await;
    println!(
        "schedules: first look at {total} schedules (each seen and journaled): {:.2} s, CPU {:.2} s",
        started.elapsed().as_secs_f64(),
        cpu_seconds() - cpu
    );
    let (pass_started, cpu) = (Instant::now(), cpu_seconds());
    let passes = 20;
    for _ in 0..passes {
        scheduler.pass(&cancel).await;
    }
    println!(
        "schedules: an idle pass over {total} schedules (nothing due): {:.2} ms wall, {:.2} ms CPU",
        pass_started.elapsed().as_secs_f64() * 1000.0 / passes as f64,
        (cpu_seconds() - cpu) * 1000.0 / passes as f64
    );
    let (rss_idle, _) = memory();
    let (due, cpu) = (Instant::now(), cpu_seconds());
    clock.set("2026-12-07T07:00:00Z".parse().unwrap());
    let claimed =
        |store: &ScheduleStore| store.state().schedules.values().filter(|b| b.last_claimed.is_some()).count() == total;
    wait(|| claimed(&store)).await;
    let all_claimed = due.elapsed();
    let tick = |ns: usize, i: usize| format!("schedule:team-{ns}/check-{i}@2026-12-07T07:00:00Z");
    let ids: Vec<String> = (0..NAMESPACES).flat_map(|ns| (0..PER_NAMESPACE).map(move |i| tick(ns, i))).collect();
    let mut last_started = None;
    loop {
        let runs = audit.runs_of_jobs(&ids.iter().map(String::as_str).collect::<BTreeSet<_>>()).await.unwrap();
        if last_started.is_none() && runs.len() == total {
            last_started = Some(due.elapsed());
        }
        if store.state().schedules.values().all(|b| b.running.is_none() && b.result.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_done = due.elapsed();
    let cpu_used = cpu_seconds() - cpu;
    let (rss_after, hwm) = memory();
    println!(
        "schedules: {total} due at 08:00 Europe/Berlin: every tick claimed (journaled) in {:.2} s; the last Run started \
         at {:.2} s; all {total} ended in {:.2} s ({:.0} Runs/s; at most 3 at once, 2 per namespace)",
        all_claimed.as_secs_f64(),
        last_started.unwrap_or(all_done).as_secs_f64(),
        all_done.as_secs_f64(),
        total as f64 / all_done.as_secs_f64()
    );
    println!(
        "schedules: CPU over the minute {cpu_used:.2} s (scheduler, {total} Runs on the engine, journal and audit fsyncs); \
         memory: {rss_before:.1} MiB before, {rss_idle:.1} MiB with {total} schedules known ({:+.1} MiB), \
         {rss_after:.1} MiB after the Runs, peak {hwm:.1} MiB; schedule journal {:.0} KiB",
        rss_idle - rss_before,
        disk_bytes(&data.join("schedules")) as f64 / 1024.0
    );
    cancel.cancel();
}

async fn wait(done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(600), "the bench did not finish in 10 minutes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
