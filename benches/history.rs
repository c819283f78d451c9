//! A long history and a restart of the real `akritas serve` binary: the alert journal
//! with 1,000,000 Alertmanager deliveries of 50,000 incidents and the audit journal with 100,000
//! Runs with tool results, then a restart on that data directory.
//!
//! 1. Fill, in-process: the alert store with the production storage defaults (64 MiB segments, a
//!    snapshot every 20,000 records) under the sample AlertSource `default/alertmanager-main`. Per
//!    incident: one firing delivery (its job is settled as failed right away, so no investigation
//!    waits), `HISTORY_REPEATS` identical re-sent firing deliveries (Alertmanager's
//!    `repeat_interval`) and one resolved delivery; 64 ingest tasks, each cycling over 8 open
//!    incidents, so about 512 incidents are open at any time. Then the audit journal: Runs with
//!    three `tool_call` events each carrying a ~4 KB result, 64 Runs at a time. Both stores stop
//!    cleanly (the alert store writes its snapshot, as `serve` does on a clean stop), and the
//!    alert store is reopened in-process once to check it replays to the same state.
//! 2. Restart: `akritas serve` on that directory; start-up is the time from spawn to the first
//!    `200` of `/health`; then VmRSS/VmHWM and what the server logged about loading.
//! 3. Old Run detail: `GET /api/v1/runs/{id}` of an early Run, 50 times.
//! 4. Steady state over HTTP (32 connections, closed loop): 20,000 deliveries, every tenth a new
//!    firing alert and the rest re-sent duplicates of recent incidents; then VmRSS/VmHWM.
//! 5. A summary against the targets (`TARGET_*`: resident memory under 120 MiB, start-up under
//!    10 s, old Run detail p95 under 20 ms, ingest of at least 2,700 alerts/s), printed, never
//!    asserted.
//!
//! With `HISTORY_MIGRATE` set, phases 2 to 5 give way to `akritas storage migrate --to postgres`
//! of that data directory into a PostgreSQL the bench starts: a first run stopped with SIGKILL
//! after `HISTORY_MIGRATE_KILL_AFTER` seconds (20), the run that resumes it, one more that
//! finds everything copied and verifies it again, and `--to embedded` of the database into a new
//! data directory; each timed.
//!
//! Run with `TMPDIR=/some/big/disk cargo bench --bench history` (the full size writes a few GB).
//! Knobs: `HISTORY_DELIVERIES_INCIDENTS` (50000), `HISTORY_REPEATS` (18), `HISTORY_RUNS` (100000),
//! `HISTORY_KEEP_DATA` (keep the data directory), `HISTORY_DATA=dir` (use `dir`, kept; the fill is
//! skipped when `dir` already holds a filled history). Exits non-zero only when the bench itself
//! failed: a store error, a server that never started, a wrong state after reopening or an old Run
//! whose detail is missing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use akritas::alerts::adapters::{DecodeContext, adapter};
use akritas::alerts::admission::Limits;
use akritas::alerts::event::Event;
use akritas::alerts::store::{AlertStore, Storage};
use akritas::audit::{AuditLog, Finish, NewEvent, NewRun, RunId, RunStatus};
use akritas_testkit::jobs::give_up;
use serde_json::{Value, json};
use tokio::time::Instant;

const FIRING: &str = include_str!("../tests/fixtures/alertmanager/alertmanager-webhook.json");
const RESOLVED: &str = include_str!("../tests/fixtures/alertmanager/alertmanager-webhook-resolved.json");
/// Namespace and name of the AlertSource in `config/samples/alert-source.yaml` (standalone: `default`).
const NAMESPACE: &str = "default";
const SOURCE: &str = "alertmanager-main";
const TOKEN_ENV: &str = "AKRITAS_ALERTMANAGER_TOKEN";
const TOKEN: &str = "history-bench-token-0123456789";
const API_KEY: &str = "history-bench-api-key-0123456789";
/// Ingest tasks of the fill, and the incidents each keeps open at a time.
const FILL_TASKS: usize = 64;
const OPEN_PER_TASK: usize = 8;
/// Runs written at a time in the audit fill, and the tool calls of each.
const RUN_TASKS: usize = 64;
const CALLS_PER_RUN: usize = 3;
/// The early Run whose detail phase 3 reads.
const EARLY_RUN: usize = 9;
const DETAIL_READS: usize = 50;
const STEADY_DELIVERIES: usize = 20_000;
const STEADY_NEW_EVERY: usize = 10;
const STEADY_CONNECTIONS: usize = 32;
/// Duplicates of phase 4 re-send the firing delivery of one of the last this many incidents.
const STEADY_RECENT: usize = 5_000;
const TARGET_RSS_MIB: f64 = 120.0;
const TARGET_STARTUP_S: f64 = 10.0;
const TARGET_DETAIL_MS: f64 = 20.0;
const TARGET_INGEST: f64 = 2_700.0;
/// What the fill leaves in the data directory, for `HISTORY_DATA` reuse.
const META: &str = "history-bench.json";

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|v| *v > 0).unwrap_or(default)
}

/// The sample webhook `template` with its one alert made unique by `index`.
fn payload(template: &Value, index: usize) -> String {
    let mut hook = template.clone();
    let pod = format!("hist-{index:07}");
    hook["alerts"][0]["fingerprint"] = format!("hb{index:014x}").into();
    hook["alerts"][0]["labels"]["pod"] = pod.clone().into();
    hook["commonLabels"]["pod"] = pod.clone().into();
    hook["groupKey"] = format!("{{}}:{{alertname=\"KubePodCrashLooping\",pod=\"{pod}\"}}").into();
    hook.to_string()
}

fn decode(template: &Value, index: usize) -> Vec<Event> {
    let ctx = DecodeContext { source_type: "alertmanager", source_name: SOURCE, observed_at: jiff::Timestamp::now() };
    let am = adapter("alertmanager").expect("alertmanager adapter");
    am.decode(payload(template, index).as_bytes(), &ctx).expect("decode the sample webhook")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `q`-quantile of sorted durations.
fn pick(sorted: &[Duration], q: f64) -> Duration {
    sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default()
}

/// Bytes and segment count of the journal at `base` (`base` and `base.<seq>`), and its snapshot's bytes.
fn journal_files(base: &Path) -> (u64, usize, u64) {
    let name = base.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (mut bytes, mut segments) = (0, 0);
    for entry in std::fs::read_dir(base.parent().expect("journal directory")).into_iter().flatten().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let sealed = file.strip_prefix(&format!("{name}.")).is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()));
        if file == name || sealed {
            bytes += entry.metadata().map_or(0, |m| m.len());
            segments += 1;
        }
    }
    let snapshot = std::fs::metadata(akritas::journal::snapshot::snapshot_path(base)).map_or(0, |m| m.len());
    (bytes, segments, snapshot)
}

/// Opens the alert store as `serve` would, waiting for a store dropped just before to release the journal.
fn open_alerts(path: &Path) -> Result<AlertStore, String> {
    let limits = Limits {
        source_rate_per_minute: u32::MAX,
        max_pending_jobs: usize::MAX,
        max_pending_per_namespace: usize::MAX,
        max_deferred_per_source: usize::MAX,
    };
    for _ in 0..600 {
        match AlertStore::open_stored(path, limits, Storage::default(), &|_| NAMESPACE.into()) {
            Err(e) if e.to_string().contains("already open") => std::thread::sleep(Duration::from_millis(100)),
            other => return other.map_err(|e| e.to_string()),
        }
    }
    Err("the alert journal stayed locked".into())
}

/// Prints a line per tenth of `total` done, with the rate since the previous one.
fn progress(name: &'static str, done: Arc<AtomicUsize>, total: usize) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (start, mut last, mut last_at, mut tenth) = (Instant::now(), 0, Instant::now(), 1);
        while tenth <= 10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = done.load(Ordering::Relaxed);
            while tenth <= 10 && now >= total * tenth / 10 {
                let rate = (now - last) as f64 / last_at.elapsed().as_secs_f64().max(1e-9);
                println!(
                    "history: {name} {:>3}%  {now} in {:.1} s  {rate:.0}/s",
                    tenth * 10,
                    start.elapsed().as_secs_f64()
                );
                (last, last_at, tenth) = (now, Instant::now(), tenth + 1);
            }
        }
    })
}

/// Phase 1a: the alert journal. Returns deliveries per second.
async fn fill_alerts(path: &Path, incidents: usize, repeats: usize) -> Result<f64, String> {
    let store = Arc::new(open_alerts(path)?);
    let templates = Arc::new([FIRING, RESOLVED].map(|t| serde_json::from_str::<Value>(t).expect("sample webhook")));
    let total = incidents * (repeats + 2);
    let done = Arc::new(AtomicUsize::new(0));
    let reporter = progress("alert fill", done.clone(), total);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..FILL_TASKS {
        let (store, templates, done) = (store.clone(), templates.clone(), done.clone());
        tasks.spawn(async move {
            let mine: Vec<usize> = (task..incidents).step_by(FILL_TASKS).collect();
            let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
            for open in mine.chunks(OPEN_PER_TASK) {
                let events: Vec<[Vec<Event>; 2]> =
                    open.iter().map(|&i| [decode(&templates[0], i), decode(&templates[1], i)]).collect();
                for step in 0..repeats + 2 {
                    for pair in &events {
                        let delivery = pair[usize::from(step == repeats + 1)].clone();
                        let accepted = store.ingest(NAMESPACE, SOURCE, delivery).await.map_err(|e| e.to_string())?;
                        done.fetch_add(1, Ordering::Relaxed);
                        let item = &accepted.events[0];
                        let kind =
                            if step == 0 && item.job_id.is_some() { "accepted+job" } else { item.status.as_str() };
                        *outcomes.entry(kind.to_string()).or_default() += 1;
                        if let (0, Some(job_id)) = (step, &item.job_id) {
                            let job = store
                                .job(job_id)
                                .await
                                .unwrap()
                                .ok_or(format!("job {job_id} not found after ingest"))?;
                            give_up(&store, job, "bench").await.map_err(|e| e.to_string())?;
                        }
                    }
                }
            }
            Ok::<_, String>(outcomes)
        });
    }
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    while let Some(result) = tasks.join_next().await {
        for (kind, n) in result.map_err(|e| e.to_string())?? {
            *outcomes.entry(kind).or_default() += n;
        }
    }
    let elapsed = start.elapsed();
    let _ = reporter.await;
    let rate = total as f64 / elapsed.as_secs_f64();
    println!(
        "history: alert fill  {total} deliveries ({total} alert events) of {incidents} incidents in {:.1} s  \
         {rate:.0} deliveries/s = {rate:.0} alert events/s  outcomes {outcomes:?}",
        elapsed.as_secs_f64()
    );
    let saved = store.save_snapshot().await;
    let (sizes, tallies) = (store.index_sizes(), store.tallies());
    println!("history: alert store before stop  indexes {sizes:?}  jobs {:?}  incidents {:?}", tallies.0, tallies.1);
    drop(Arc::into_inner(store).ok_or("alert store still shared")?);
    // The same start `serve` makes, in-process: it must reach the same state.
    let opened = Instant::now();
    let reopened = tokio::task::spawn_blocking({
        let path = path.to_owned();
        move || open_alerts(&path)
    })
    .await
    .map_err(|e| e.to_string())??;
    let (replayed, from_snapshot) = reopened.replayed_at_open();
    let again = (reopened.index_sizes(), reopened.tallies());
    println!(
        "history: alert store reopened in-process in {:.0} ms  replayed {replayed} records, from snapshot {from_snapshot}",
        ms(opened.elapsed())
    );
    drop(reopened);
    // Measured once the journal is released: a snapshot started in the background is written by then.
    let (bytes, segments, snapshot) = journal_files(path);
    println!(
        "history: alert journal  {:.1} MiB in {segments} segments  snapshot {:.1} MiB (a clean-stop snapshot written: {saved}; \
         false when a background one was being written)",
        mib(bytes),
        mib(snapshot)
    );
    if again != (sizes.clone(), tallies.clone()) {
        return Err(format!("reopened alert store differs: {:?} vs {:?}", again, (sizes, tallies)));
    }
    Ok(rate)
}

/// A tool result of about 4 KB.
fn tool_output(run: usize, call: usize) -> String {
    let mut out = String::with_capacity(4200);
    let mut line = 0;
    while out.len() < 4000 {
        out.push_str(&format!(
            "node_cpu_seconds_total{{instance=\"node-{:03}\",mode=\"idle\",run=\"{run}\",call=\"{call}\"}} {}.{:02}\n",
            line % 97,
            1_700_000 + run * 7 + line,
            line % 100
        ));
        line += 1;
    }
    out
}

async fn one_run(audit: &AuditLog, index: usize) -> Result<RunId, String> {
    let new = NewRun {
        namespace: NAMESPACE.into(),
        source: "chat".into(),
        actor: "history-bench".into(),
        model: Some("bench-model".into()),
        catalog_version: 1,
        metadata: BTreeMap::new(),
    };
    let id = audit.start(new).await.map_err(|e| e.to_string())?;
    for call in 0..CALLS_PER_RUN {
        let metadata = BTreeMap::from([
            ("call_id".to_string(), json!(format!("call-{}", index * CALLS_PER_RUN + call))),
            ("call_kind".to_string(), json!("execution")),
            ("tool".to_string(), json!("vm_query")),
        ]);
        let event = NewEvent {
            kind: akritas::audit::TOOL_CALL.into(),
            status: Some("succeeded".into()),
            metadata,
            arguments: Some(
                json!({"query": "rate(node_cpu_seconds_total{mode=\"idle\"}[5m])", "time": "2026-11-29T22:41:16Z"}),
            ),
            result: Some(json!({"output": tool_output(index, call)})),
        };
        audit.event(&id, event).await.map_err(|e| e.to_string())?;
    }
    let finish = Finish { status: RunStatus::Succeeded, error: None, error_code: None, metadata: BTreeMap::new() };
    audit.finish(&id, finish).await.map_err(|e| e.to_string())?;
    Ok(id)
}

/// Phase 1b: the audit journal. Returns the id of an early Run.
async fn fill_audit(path: &Path, runs: usize) -> Result<String, String> {
    let audit = Arc::new(AuditLog::open(path).map_err(|e| e.to_string())?);
    let (next, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let early = Arc::new(Mutex::new(None));
    let reporter = progress("audit fill", done.clone(), runs);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..RUN_TASKS {
        let (audit, next, done, early) = (audit.clone(), next.clone(), done.clone(), early.clone());
        tasks.spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= runs {
                    return Ok::<_, String>(());
                }
                let id = one_run(&audit, index).await?;
                if index == EARLY_RUN.min(runs - 1) {
                    *early.lock().unwrap_or_else(|p| p.into_inner()) = Some(id.as_str().to_string());
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.map_err(|e| e.to_string())??;
    }
    let elapsed = start.elapsed();
    let _ = reporter.await;
    let audit = Arc::into_inner(audit).ok_or("audit log still shared")?;
    // As `serve` does on a clean stop.
    let snapshot = audit.snapshot().await;
    println!("history: audit stopped cleanly  snapshot at seq {snapshot:?}");
    drop(audit);
    let (bytes, segments, _) = journal_files(path);
    println!(
        "history: audit fill  {runs} Runs ({} tool results of ~4 KB) in {:.1} s  {:.0} Runs/s  journal {:.1} MiB in {segments} segments",
        runs * CALLS_PER_RUN,
        elapsed.as_secs_f64(),
        runs as f64 / elapsed.as_secs_f64(),
        mib(bytes)
    );
    let early = early.lock().unwrap_or_else(|p| p.into_inner()).clone();
    early.ok_or_else(|| "no early Run recorded".to_string())
}

/// A running `akritas serve` (the testkit's harness) and how long it took to become healthy.
struct Server {
    inner: akritas_testkit::Server,
    url: String,
    startup: Duration,
}

impl Server {
    async fn start(client: &reqwest::Client, data: &Path, resources: &Path, llm_port: u16) -> Result<Server, String> {
        let spawned = Instant::now();
        let mut command = akritas_testkit::serve_command(env!("CARGO_BIN_EXE_akritas"));
        command
            .arg("--resources")
            .arg(resources)
            .env("AKRITAS_DATA_DIR", data)
            .env("AKRITAS_BASE_URL", format!("http://127.0.0.1:{llm_port}/v1"))
            .env(TOKEN_ENV, TOKEN)
            .env("AKRITAS_API_KEY", API_KEY)
            .env("AKRITAS_ALERT_SOURCE_RATE", "100000")
            .env("AKRITAS_ALERT_PENDING_JOBS", "100000")
            .env("AKRITAS_ALERT_PENDING_JOBS_PER_NAMESPACE", "100000");
        let starting = akritas_testkit::Server::spawn(command);
        let inner = tokio::task::spawn_blocking(move || starting.try_listening(Duration::from_secs(600)))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|starting| format!("akritas serve did not start: {}", starting.log_text()))?;
        let url = inner.url.clone();
        let deadline = Instant::now() + Duration::from_secs(120);
        while !client.get(format!("{url}/health")).send().await.is_ok_and(|r| r.status().is_success()) {
            if Instant::now() > deadline {
                return Err(format!("akritas serve at {url} never became healthy"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(Server { inner, url, startup: spawned.elapsed() })
    }

    /// (VmRSS, VmHWM) in MiB.
    fn memory(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.inner.pid())).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .map_or(f64::NAN, |kib| kib / 1024.0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// The log lines about loading, and warnings and errors, from line `from` on.
    fn notable(&self, from: usize) -> Vec<String> {
        notable(&self.inner.log.lock().unwrap_or_else(|p| p.into_inner())[from..])
    }

    fn log_len(&self) -> usize {
        self.inner.log.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// SIGTERM (a clean stop writes the snapshots); returns the stop time and the lines it logged.
    fn stop(self) -> (Duration, Vec<String>) {
        let (log, logged) = (self.inner.log.clone(), self.log_len());
        let asked = std::time::Instant::now();
        self.inner.terminate();
        let stopped = asked.elapsed();
        (stopped, notable(&log.lock().unwrap_or_else(|p| p.into_inner())[logged..]))
    }
}

/// `timestamp level fields` of the lines about loading, warnings and errors.
fn notable(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|line| {
            let value: Value = serde_json::from_str(line).unwrap_or_default();
            let level = value["level"].as_str().unwrap_or("stderr");
            let loading =
                ["journal", "replay", "loaded", "snapshot", "audit", "listening"].iter().any(|w| line.contains(w));
            (loading || level != "INFO").then(|| match value["timestamp"].as_str() {
                Some(at) => format!("{at} {level} {}", value["fields"]),
                None => line.clone(),
            })
        })
        .collect()
}

/// Phase 3: p50, p95, max of reading an old Run's detail; an error when it lacks its tool results.
async fn run_detail(client: &reqwest::Client, url: &str, run: &str) -> Result<[f64; 3], String> {
    let mut times = Vec::with_capacity(DETAIL_READS);
    let mut bytes = 0;
    for _ in 0..DETAIL_READS {
        let sent = Instant::now();
        let response = client
            .get(format!("{url}/api/v1/runs/{run}"))
            .bearer_auth(API_KEY)
            .send()
            .await
            .map_err(|e| format!("GET run {run}: {e}"))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| format!("GET run {run}: {e}"))?;
        times.push(sent.elapsed());
        if !status.is_success() {
            return Err(format!("GET run {run}: {status} {}", String::from_utf8_lossy(&body)));
        }
        let value: Value = serde_json::from_slice(&body).map_err(|e| format!("run {run}: {e}"))?;
        let results = value["run"]["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["type"] == "tool_call" && e["result"]["output"].as_str().is_some_and(|o| o.len() >= 4000))
            .count();
        if results != CALLS_PER_RUN {
            return Err(format!("run {run} has {results} tool results, expected {CALLS_PER_RUN}"));
        }
        bytes = body.len();
    }
    times.sort();
    let [p50, p95, max] = [0.5, 0.95, 1.0].map(|q| ms(pick(&times, q)));
    println!(
        "history: old Run detail  {DETAIL_READS} x GET /api/v1/runs/{run} ({bytes} bytes, {CALLS_PER_RUN} tool results)  \
         p50={p50:.2} ms  p95={p95:.2} ms  max={max:.2} ms"
    );
    Ok([p50, p95, max])
}

/// Phase 4: answered alerts per second.
async fn steady_state(client: &reqwest::Client, url: &str, incidents: usize) -> f64 {
    let templates = Arc::new(serde_json::from_str::<Value>(FIRING).expect("sample webhook"));
    let base = incidents + 1_000_000 + (rand::random::<u32>() as usize % 1_000_000) * 100;
    let recent = incidents.min(STEADY_RECENT);
    let indices: Arc<Vec<usize>> = Arc::new(
        (0..STEADY_DELIVERIES)
            .map(|k| if k % STEADY_NEW_EVERY == 0 { base + k } else { incidents - 1 - (k * 7919) % recent })
            .collect(),
    );
    let webhook = Arc::new(format!("{url}/api/v1/alerts/{SOURCE}/webhook"));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..STEADY_CONNECTIONS {
        let (client, templates, indices, webhook, next) =
            (client.clone(), templates.clone(), indices.clone(), webhook.clone(), next.clone());
        workers.spawn(async move {
            let mut replies = Vec::new();
            while let Some(&index) = indices.get(next.fetch_add(1, Ordering::Relaxed)) {
                let sent = Instant::now();
                let answer = client
                    .post(webhook.as_str())
                    .header("content-type", "application/json")
                    .bearer_auth(TOKEN)
                    .body(payload(&templates, index))
                    .send()
                    .await;
                let (status, outcome) = match answer {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let body: Value = response.json().await.unwrap_or_default();
                        (status, body.pointer("/events/0/status").and_then(Value::as_str).unwrap_or("-").to_string())
                    }
                    Err(_) => (0, "no answer".to_string()),
                };
                replies.push((status, outcome, sent.elapsed()));
            }
            replies
        });
    }
    let mut replies = Vec::with_capacity(STEADY_DELIVERIES);
    while let Some(batch) = workers.join_next().await {
        replies.extend(batch.expect("steady-state worker"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut outcomes: BTreeMap<(u16, String), usize> = BTreeMap::new();
    for (status, outcome, _) in &replies {
        *outcomes.entry((*status, outcome.clone())).or_default() += 1;
    }
    let answered = replies.iter().filter(|r| r.0 == 200 || r.0 == 202).count();
    let accepted = replies.iter().filter(|r| r.0 == 202).count();
    let mut latencies: Vec<Duration> = replies.iter().filter(|r| r.0 != 0).map(|r| r.2).collect();
    latencies.sort();
    let rate = answered as f64 / elapsed;
    println!(
        "history: steady state  {STEADY_DELIVERIES} deliveries over {STEADY_CONNECTIONS} connections in {elapsed:.1} s  \
         {rate:.0} alerts/s answered (each journaled), of them {:.0}/s new accepted  p50={:.2} ms  p99={:.2} ms  \
         max={:.2} ms",
        accepted as f64 / elapsed,
        ms(pick(&latencies, 0.5)),
        ms(pick(&latencies, 0.99)),
        ms(pick(&latencies, 1.0))
    );
    println!("history: steady state  answers by (status, outcome): {outcomes:?}");
    rate
}

fn main() -> ExitCode {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            println!("history: FAILED: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let incidents = knob("HISTORY_DELIVERIES_INCIDENTS", 50_000);
    let repeats = knob("HISTORY_REPEATS", 18);
    let runs = knob("HISTORY_RUNS", 100_000);
    let keep = std::env::var_os("HISTORY_KEEP_DATA").is_some();
    let scratch = tempfile::Builder::new().prefix("akritas-history-").tempdir().map_err(|e| e.to_string())?;
    let (data, reuse) = match std::env::var_os("HISTORY_DATA") {
        Some(dir) => (PathBuf::from(dir), true),
        None => (scratch.path().join("data"), keep),
    };
    let resources = scratch.path().join("resources");
    std::fs::create_dir_all(&resources).map_err(|e| e.to_string())?;
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/samples/alert-source.yaml");
    std::fs::copy(&sample, resources.join("alert-source.yaml")).map_err(|e| e.to_string())?;
    let alerts_path = data.join("alerts").join("alerts.jsonl");
    let audit_path = data.join("audit").join("akritas.jsonl");

    let meta_path = data.join(META);
    let (meta, fill_rate) = match std::fs::read_to_string(&meta_path) {
        Ok(text) => {
            let meta: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", meta_path.display()))?;
            println!("history: reusing the filled history in {} ({meta}); fill skipped", data.display());
            (meta, f64::NAN)
        }
        Err(_) => {
            println!(
                "history: filling {}: {incidents} incidents x {} deliveries, {runs} Runs x {CALLS_PER_RUN} tool results",
                data.display(),
                repeats + 2
            );
            std::fs::create_dir_all(alerts_path.parent().expect("alerts dir")).map_err(|e| e.to_string())?;
            let rate = fill_alerts(&alerts_path, incidents, repeats).await?;
            let early = fill_audit(&audit_path, runs).await?;
            let meta = json!({"incidents": incidents, "repeats": repeats, "runs": runs, "early_run": early});
            std::fs::write(&meta_path, meta.to_string()).map_err(|e| e.to_string())?;
            (meta, rate)
        }
    };
    let incidents = meta["incidents"].as_u64().unwrap_or_default() as usize;
    let early = meta["early_run"].as_str().unwrap_or_default().to_string();
    if std::env::var_os("HISTORY_MIGRATE").is_some() {
        let migrated = migrate(&data);
        if reuse && std::env::var_os("HISTORY_DATA").is_none() {
            let _ = scratch.keep();
        }
        return migrated;
    }

    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let llm_port = silent.local_addr().map_err(|e| e.to_string())?.port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let client =
        reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build().map_err(|e| e.to_string())?;
    let server = Server::start(&client, &data, &resources, llm_port).await?;
    let (rss_start, hwm_start) = server.memory();
    println!(
        "history: restart  healthy {:.2} s after spawn  VmRSS={rss_start:.1} MiB  VmHWM={hwm_start:.1} MiB",
        server.startup.as_secs_f64()
    );
    for line in server.notable(0) {
        println!("history: restart log  {line}");
    }

    let detail = run_detail(&client, &server.url, &early).await;
    let (rss_detail, _) = server.memory();
    println!("history: after the Run detail reads  VmRSS={rss_detail:.1} MiB");
    let rate = steady_state(&client, &server.url, incidents).await;
    let (rss_steady, hwm_steady) = server.memory();
    println!("history: after steady state  VmRSS={rss_steady:.1} MiB  VmHWM={hwm_steady:.1} MiB");
    // The same a little later, once a snapshot the load triggered has been written.
    let mut idle = 0;
    for wait in [2u64, 3, 5] {
        tokio::time::sleep(Duration::from_secs(wait)).await;
        idle += wait;
        println!("history: idle after the steady state  {idle} s  VmRSS={:.1} MiB", server.memory().0);
    }
    let startup = server.startup;
    let (stopped, stop_log) = server.stop();
    println!("history: clean stop (SIGTERM) took {:.2} s", stopped.as_secs_f64());
    for line in stop_log {
        println!("history: stop log  {line}");
    }

    let detail_p95 = detail.as_ref().map_or(f64::NAN, |d| d[1]);
    let rows = [
        ("RSS after start-up (VmRSS)", rss_start, "MiB", TARGET_RSS_MIB, true),
        ("peak RSS during start-up (VmHWM)", hwm_start, "MiB", TARGET_RSS_MIB, true),
        ("RSS at steady state (VmRSS)", rss_steady, "MiB", TARGET_RSS_MIB, true),
        ("start-up (spawn to /health 200)", startup.as_secs_f64(), "s", TARGET_STARTUP_S, true),
        ("old Run detail p95", detail_p95, "ms", TARGET_DETAIL_MS, true),
        ("ingest over HTTP (steady state)", rate, "alerts/s", TARGET_INGEST, false),
        ("ingest in-process (fill)", fill_rate, "alerts/s", TARGET_INGEST, false),
    ];
    println!("history: summary  {incidents} incidents, {} Runs", meta["runs"]);
    println!("history: | {:<34} | {:>14} | {:>18} | {:<5} |", "metric", "measured", "target", "");
    for (name, value, unit, target, below) in rows {
        let (sign, ok) = if below { ("<", value < target) } else { (">=", value >= target) };
        let mark = if value.is_nan() {
            "n/a"
        } else if ok {
            "pass"
        } else {
            "OVER"
        };
        let target = format!("{sign} {target} {unit}");
        println!("history: | {name:<34} | {value:>9.1} {unit:<4} | {target:>18} | {mark:<5} |");
    }
    if reuse {
        println!("history: data kept in {}", data.display());
        if std::env::var_os("HISTORY_DATA").is_none() {
            let _ = scratch.keep();
        }
    }
    detail.map(|_| ())
}

/// `akritas storage migrate --to postgres` of `data` into a new PostgreSQL: interrupted, resumed,
/// and run again on what is copied.
fn migrate(data: &Path) -> Result<(), String> {
    let pg = akritas_testkit::postgres::Postgres::start();
    let kill_after = Duration::from_secs(knob("HISTORY_MIGRATE_KILL_AFTER", 20) as u64);
    let back = tempfile::Builder::new().prefix("akritas-history-back-").tempdir().map_err(|e| e.to_string())?;
    let command_to = |to: &str, dir: &Path| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_akritas"));
        command
            .args(["storage", "migrate", "--to", to])
            .env("AKRITAS_DATA_DIR", dir)
            .env("AKRITAS_DATABASE_URL", pg.url("disable"))
            .env_remove("AKRITAS_CONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    };
    let command = || command_to("postgres", data);
    let started = std::time::Instant::now();
    let mut first = command().spawn().map_err(|e| e.to_string())?;
    while started.elapsed() < kill_after && first.try_wait().map_err(|e| e.to_string())?.is_none() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = first.kill();
    let _ = first.wait();
    let copied = pg.psql("SELECT string_agg(store || ' ' || seq, ', ' ORDER BY store) FROM akritas_heads");
    println!(
        "history: migrate  first run stopped with SIGKILL after {:.1} s; the database's heads then: {copied}",
        started.elapsed().as_secs_f64()
    );
    let runs = [
        ("resumed", "copies the rest and verifies", command()),
        ("again", "finds everything copied, verifies", command()),
        ("back", "--to embedded into a new data directory, verifies", command_to("embedded", back.path())),
    ];
    for (name, what, mut command) in runs {
        let started = std::time::Instant::now();
        let output = command.output().map_err(|e| e.to_string())?;
        let elapsed = started.elapsed().as_secs_f64();
        for line in
            String::from_utf8_lossy(&output.stdout).lines().chain(String::from_utf8_lossy(&output.stderr).lines())
        {
            println!("history: migrate {name}  {line}");
        }
        if !output.status.success() {
            return Err(format!("storage migrate ({name}) failed"));
        }
        println!("history: migrate {name} ({what}) took {elapsed:.1} s");
    }
    let records = pg.psql("SELECT count(*) FROM akritas_records");
    let size = pg.psql("SELECT pg_size_pretty(pg_database_size(current_database()))");
    println!("history: migrate  {records} records in the database, {size}");
    Ok(())
}
