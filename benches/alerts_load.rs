//! Load on the alert ingress of the real `akritas serve` binary, whose alert journal fsyncs every
//! delivery before answering.
//!
//! The server runs on a fresh data directory with the sample Alertmanager AlertSource
//! (`config/samples/alert-source.yaml`, Bearer token from the environment). Its model server accepts
//! connections and never answers, so the investigation worker holds its slots the way slow real
//! investigations do (rather than failing every job at once and retrying). Then:
//! - throughput: N Alertmanager v4 webhooks, each with one new firing alert, over C connections;
//! - fixed rate: an open-loop timetable of R deliveries/s for D seconds, latency measured from the
//!   scheduled send time, so a slow server cannot lower the offered rate;
//! - the server's memory (VmRSS, VmHWM) after both phases;
//! - durability: SIGKILL, check that the journal holds every accepted alert, restart on the same data
//!   directory and re-send a sample of accepted deliveries, each of which must come back as a duplicate.
//!
//! With `ALERTS_BENCH_STORM=1` the server keeps its default admission limits (60 new
//! investigations a minute, 100 deferred per source): the load is a storm, every delivery must
//! still be stored (202), and the numbers show the investigations deferred and coalesced and the
//! memory after the restart (`ALERTS_BENCH_STORM=1 ALERTS_BENCH_N=100000 ALERTS_BENCH_MAX_SECONDS=600
//! ALERTS_BENCH_SECONDS=1` holds 100,000 open incidents).
//!
//! Run with `cargo bench --bench alerts_load`. Knobs: `ALERTS_BENCH_N` (20000), `ALERTS_BENCH_CONCURRENCY`
//! (32), `ALERTS_BENCH_RATE` (500), `ALERTS_BENCH_SECONDS` (10), and `ALERTS_BENCH_MAX_SECONDS` (60), after
//! which the throughput phase starts no new delivery. A delivery unanswered after 30 s counts as failed.
//! Prints numbers; asserts nothing about time, and exits non-zero only when an accepted alert was lost or
//! could not be checked.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

const FIRING: &str = include_str!("../tests/fixtures/alertmanager/alertmanager-webhook.json");
/// Name and token variable of the AlertSource in `config/samples/alert-source.yaml`.
const SOURCE: &str = "alertmanager-main";
const TOKEN_ENV: &str = "AKRITAS_ALERTMANAGER_TOKEN";
const TOKEN: &str = "alerts-bench-token-0123456789";
/// Accepted deliveries re-sent after the restart, spread evenly, plus the last ones of each phase.
const RESEND_SPREAD: usize = 2000;
const RESEND_TAIL: usize = 500;

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|v| *v > 0).unwrap_or(default)
}

fn fingerprint(index: usize) -> String {
    format!("be{index:014x}")
}

/// The sample webhook with its one alert made unique by `index`.
fn payload(template: &Value, index: usize) -> String {
    let mut hook = template.clone();
    let pod = format!("load-{index:06}");
    hook["alerts"][0]["fingerprint"] = fingerprint(index).into();
    hook["alerts"][0]["labels"]["pod"] = pod.clone().into();
    hook["commonLabels"]["pod"] = pod.clone().into();
    hook["groupKey"] = format!("{{}}:{{alertname=\"KubePodCrashLooping\",pod=\"{pod}\"}}").into();
    hook.to_string()
}

/// A running `akritas serve`; killed on drop.
struct Server {
    child: Child,
    url: String,
    /// `LEVEL message` of every warning, error or unparsable stderr line, with counts.
    notable: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl Server {
    async fn start(client: &reqwest::Client, data: &Path, resources: &Path, llm_port: u16, storm: bool) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_akritas"));
        if !storm {
            // Load, not admission: every alert may start an investigation at once.
            command
                .env("AKRITAS_ALERT_SOURCE_RATE", "100000")
                .env("AKRITAS_ALERT_PENDING_JOBS", "100000")
                .env("AKRITAS_ALERT_PENDING_JOBS_PER_NAMESPACE", "100000");
        }
        let mut child = command
            .arg("serve")
            .arg("--resources")
            .arg(resources)
            .env("AKRITAS_ADDRESS", "127.0.0.1:0")
            .env("AKRITAS_LOG_FORMAT", "json")
            .env("AKRITAS_SYSTEM_INSTRUCTIONS", Path::new(env!("CARGO_MANIFEST_DIR")).join("instructions/SYSTEM.md"))
            .env("AKRITAS_DATA_DIR", data)
            .env("AKRITAS_SKILLS_DIR", "")
            .env("AKRITAS_BASE_URL", format!("http://127.0.0.1:{llm_port}/v1"))
            .env(TOKEN_ENV, TOKEN)
            .env_remove("AKRITAS_API_KEY")
            .env_remove("AKRITAS_CONFIG")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start akritas serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let notable = Arc::new(Mutex::new(BTreeMap::new()));
        let sink = notable.clone();
        let (address_tx, address_rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut address_tx = Some(address_tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let value: Value = serde_json::from_str(&line).unwrap_or_default();
                let message = value.pointer("/fields/message").and_then(Value::as_str).unwrap_or_default();
                if message == "Akritas listening"
                    && let Some(address) = value.pointer("/fields/address").and_then(Value::as_str)
                    && let Some(tx) = address_tx.take()
                {
                    let _ = tx.send(address.to_string());
                }
                let key = match value["level"].as_str() {
                    Some(level @ ("WARN" | "ERROR")) => format!("{level} {message}"),
                    Some(_) => continue,
                    None => format!("stderr {line}"),
                };
                *sink.lock().unwrap_or_else(|p| p.into_inner()).entry(key).or_insert(0) += 1;
            }
        });
        let address = match tokio::time::timeout(Duration::from_secs(120), address_rx).await {
            Ok(Ok(address)) => address,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("akritas serve did not start: {:?}", notable.lock().unwrap_or_else(|p| p.into_inner()));
            }
        };
        let url = format!("http://{address}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !client.get(format!("{url}/health")).send().await.is_ok_and(|r| r.status().is_success()) {
            assert!(Instant::now() < deadline, "akritas serve at {url} never became healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Server { child, url, notable }
    }

    fn memory(&self) -> String {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let mib = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .map_or("?".to_string(), |kib| format!("{:.1} MiB", kib / 1024.0))
        };
        format!("VmRSS={} VmHWM={}", mib("VmRSS:"), mib("VmHWM:"))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn print_log(&self, name: &str) {
        let notable = self.notable.lock().unwrap_or_else(|p| p.into_inner());
        if notable.is_empty() {
            println!("alerts_load: {name} server log: no warnings or errors");
        }
        for (line, count) in notable.iter() {
            println!("alerts_load: {name} server log: {count} x {line}");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One delivery as the client saw it.
struct Reply {
    index: usize,
    /// HTTP status, 0 for a transport error.
    status: u16,
    /// `events[0].status` of the response.
    outcome: String,
    latency: Duration,
    /// Completion time since the phase started.
    done: Duration,
}

#[derive(Clone)]
struct Target {
    client: reqwest::Client,
    webhook: String,
    template: Arc<Value>,
}

impl Target {
    async fn deliver(&self, index: usize) -> (u16, String) {
        let sent = self
            .client
            .post(&self.webhook)
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(payload(&self.template, index))
            .send()
            .await;
        let Ok(response) = sent else { return (0, String::new()) };
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or_default();
        (status, body.pointer("/events/0/status").and_then(Value::as_str).unwrap_or_default().to_string())
    }
}

/// Sends `indices` over `connections` connections, each sending its next delivery as soon as the last one
/// was answered; starts no new delivery after `budget`.
async fn closed_loop(
    target: &Target,
    indices: Vec<usize>,
    connections: usize,
    budget: Option<Duration>,
) -> (Vec<Reply>, Duration) {
    let indices = Arc::new(indices);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let stop = budget.map(|b| start + b);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (target, indices, next) = (target.clone(), indices.clone(), next.clone());
        workers.spawn(async move {
            let mut replies = Vec::new();
            while stop.is_none_or(|stop| Instant::now() < stop)
                && let Some(&index) = indices.get(next.fetch_add(1, Ordering::Relaxed))
            {
                let sent = Instant::now();
                let (status, outcome) = target.deliver(index).await;
                replies.push(Reply { index, status, outcome, latency: sent.elapsed(), done: start.elapsed() });
            }
            replies
        });
    }
    let mut replies = Vec::with_capacity(indices.len());
    while let Some(batch) = workers.join_next().await {
        replies.extend(batch.expect("worker task"));
    }
    (replies, start.elapsed())
}

/// Sends `count` deliveries starting at `first` on a fixed timetable of `rate` per second.
async fn open_loop(target: &Target, first: usize, count: usize, rate: usize) -> (Vec<Reply>, Duration) {
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for k in 0..count {
        let due = start + period.mul_f64(k as f64);
        tokio::time::sleep_until(due).await;
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let (status, outcome) = target.deliver(first + k).await;
            Reply { index: first + k, status, outcome, latency: due.elapsed(), done: start.elapsed() }
        }));
    }
    let mut replies = Vec::with_capacity(count);
    for task in tasks {
        replies.push(task.await.expect("delivery task"));
    }
    (replies, start.elapsed())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn accepted(replies: &[Reply]) -> usize {
    replies.iter().filter(|r| r.status == 202).count()
}

/// `p50=.. ms p99=.. ms max=.. ms` of the deliveries that were answered.
fn latencies(replies: &[Reply]) -> String {
    let mut lat: Vec<Duration> = replies.iter().filter(|r| r.status != 0).map(|r| r.latency).collect();
    lat.sort();
    let pick = |q: f64| lat.get(((lat.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default();
    format!("p50={:.2} ms  p99={:.2} ms  max={:.2} ms", ms(pick(0.5)), ms(pick(0.99)), ms(pick(1.0)))
}

/// Answers other than `expected`, by status (0 = no HTTP answer) and outcome.
fn print_unexpected(name: &str, replies: &[Reply], expected: u16) {
    let mut counts = BTreeMap::new();
    for reply in replies.iter().filter(|r| r.status != expected) {
        *counts.entry((reply.status, reply.outcome.as_str())).or_insert(0) += 1;
    }
    for ((status, outcome), count) in counts {
        match status {
            0 => println!("alerts_load: {name} PROBLEM: {count} deliveries not answered within 30 s"),
            _ => println!("alerts_load: {name} PROBLEM: {count} deliveries answered {status} {outcome}"),
        }
    }
}

/// Completions per second in each tenth of the phase, to show whether the rate holds as the store grows.
fn rate_by_tenth(replies: &[Reply]) -> String {
    let mut done: Vec<Duration> = replies.iter().map(|r| r.done).collect();
    done.sort();
    let tenth = done.len() / 10;
    if tenth == 0 {
        return String::new();
    }
    let mut previous = Duration::ZERO;
    let mut rates = Vec::new();
    for chunk in done.chunks(tenth).filter(|c| c.len() == tenth) {
        let last = chunk[chunk.len() - 1];
        rates.push(format!("{:.0}", tenth as f64 / (last - previous).as_secs_f64().max(1e-9)));
        previous = last;
    }
    rates.join(" ")
}

/// What the alert journal holds: (lines, delivery records, fingerprints of accepted alerts, incidents).
fn read_journal(path: &Path) -> (usize, usize, HashSet<String>, HashSet<String>) {
    let (mut lines, mut deliveries) = (0, 0);
    let (mut fingerprints, mut incidents) = (HashSet::new(), HashSet::new());
    // Every segment, in order (a big run seals several).
    let scanned = akritas::journal::scan_from(path, None, &mut |record| {
        lines += 1;
        if record.kind != "alerts.delivery" {
            return Ok::<(), std::convert::Infallible>(());
        }
        deliveries += 1;
        for item in record.data.pointer("/items").and_then(Value::as_array).into_iter().flatten() {
            if item.pointer("/outcome/status").and_then(Value::as_str) == Some("accepted") {
                let id = item.pointer("/event/source/provider_event_id").and_then(Value::as_str).unwrap_or_default();
                fingerprints.insert(id.to_string());
                let incident = item.pointer("/outcome/incident_id").and_then(Value::as_str).unwrap_or_default();
                incidents.insert(incident.to_string());
            }
        }
        Ok(())
    });
    if let Err(error) = scanned {
        println!("alerts_load: the journal could not be read whole: {error:?}");
    }
    (lines, deliveries, fingerprints, incidents)
}

/// Evenly spread accepted indices plus the last accepted ones of each phase.
fn resend_sample(phases: &[&[Reply]]) -> Vec<usize> {
    let mut sample = BTreeSet::new();
    let mut all = Vec::new();
    for replies in phases {
        let mut indices: Vec<usize> = replies.iter().filter(|r| r.status == 202).map(|r| r.index).collect();
        indices.sort_unstable();
        sample.extend(indices.iter().rev().take(RESEND_TAIL));
        all.extend(indices);
    }
    sample.extend(all.iter().step_by((all.len() / RESEND_SPREAD).max(1)));
    sample.into_iter().collect()
}

/// Incidents and jobs by state, and investigations shed, from `/metrics`.
async fn investigations(client: &reqwest::Client, url: &str) -> String {
    let text = match client.get(format!("{url}/metrics")).send().await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(error) => return format!("no metrics: {error}"),
    };
    let wanted = ["akritas_incidents{", "akritas_investigation_jobs{", "akritas_alert_investigations_shed_total{"];
    let lines: Vec<&str> =
        text.lines().filter(|l| wanted.iter().any(|w| l.starts_with(w)) && !l.ends_with(" 0")).collect();
    lines.join("  ")
}

fn main() -> ExitCode {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(run())
}

async fn run() -> ExitCode {
    let n = knob("ALERTS_BENCH_N", 20_000);
    let connections = knob("ALERTS_BENCH_CONCURRENCY", 32);
    let rate = knob("ALERTS_BENCH_RATE", 500);
    let seconds = knob("ALERTS_BENCH_SECONDS", 10);
    let budget = knob("ALERTS_BENCH_MAX_SECONDS", 60);
    let storm = std::env::var("ALERTS_BENCH_STORM").is_ok_and(|v| v == "1");

    let scratch = tempfile::Builder::new().prefix("akritas-alerts-bench-").tempdir().expect("scratch directory");
    let data = scratch.path().join("data");
    let resources = scratch.path().join("resources");
    std::fs::create_dir_all(&resources).expect("resources directory");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/samples/alert-source.yaml");
    std::fs::copy(&sample, resources.join("alert-source.yaml")).expect("copy the sample AlertSource");
    let journal = data.join("alerts").join("alerts.jsonl");
    // A model server that accepts and never answers: investigations stay in flight.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the silent model server");
    let llm_port = silent.local_addr().expect("silent model address").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });

    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build().expect("HTTP client");
    let mut server = Server::start(&client, &data, &resources, llm_port, storm).await;
    println!("alerts_load: server {} healthy, data {}, storm {storm}", server.url, data.display());
    let template: Value = serde_json::from_str(FIRING).expect("sample webhook");
    let target = Target {
        client: client.clone(),
        webhook: format!("{}/api/v1/alerts/{SOURCE}/webhook", server.url),
        template: Arc::new(template),
    };

    let (bulk, elapsed) =
        closed_loop(&target, (0..n).collect(), connections, Some(Duration::from_secs(budget as u64))).await;
    if bulk.len() < n {
        println!("alerts_load: throughput  stopped after {budget} s with {} of {n} deliveries sent", bulk.len());
    }
    println!(
        "alerts_load: throughput  N={} c={connections}  accepted={}  rate={:.0} alerts/s  {}",
        bulk.len(),
        accepted(&bulk),
        accepted(&bulk) as f64 / elapsed.as_secs_f64(),
        latencies(&bulk),
    );
    println!("alerts_load: throughput  alerts/s by tenth of the run: {}", rate_by_tenth(&bulk));
    print_unexpected("throughput", &bulk, 202);

    let (timed, elapsed) = open_loop(&target, n, rate * seconds, rate).await;
    let last_done = timed.iter().map(|r| r.done).max().unwrap_or(elapsed);
    println!(
        "alerts_load: fixed rate  target={rate}/s for {seconds} s  sent={}  accepted={}  achieved={:.1} alerts/s  {}",
        timed.len(),
        accepted(&timed),
        accepted(&timed) as f64 / last_done.as_secs_f64(),
        latencies(&timed),
    );
    print_unexpected("fixed rate", &timed, 202);

    println!("alerts_load: server memory after load  {}", server.memory());
    println!("alerts_load: investigations after load  {}", investigations(&client, &server.url).await);
    server.print_log("first run");
    server.kill();

    let expected: HashSet<String> =
        bulk.iter().chain(&timed).filter(|r| r.status == 202).map(|r| fingerprint(r.index)).collect();
    let chain = akritas::journal::verify(&journal);
    let (lines, deliveries, stored, incidents) = read_journal(&journal);
    let missing = expected.iter().filter(|f| !stored.contains(*f)).count();
    println!(
        "alerts_load: journal after SIGKILL  lines={lines}  delivery records={deliveries}  accepted alerts={}  incidents={}  \
         (client saw {} accepted)  chain={}",
        stored.len(),
        incidents.len(),
        expected.len(),
        match &chain {
            Ok(report) => format!("ok, {} records, torn tail {}", report.records, report.torn_tail.is_some()),
            Err(error) => format!("BROKEN: {error}"),
        },
    );

    let restarted = Instant::now();
    let mut server = Server::start(&client, &data, &resources, llm_port, storm).await;
    let listed = match client.get(format!("{}/api/v1/incidents?limit=1000", server.url)).send().await {
        Ok(response) => response.json::<Value>().await.unwrap_or_default(),
        Err(_) => Value::Null,
    };
    let listed = listed["incidents"].as_array().map_or(0, Vec::len);
    println!(
        "alerts_load: restart  replayed {lines} records and healthy after {:.0} ms  {}  incidents listed (limit 1000): {listed}",
        ms(restarted.elapsed()),
        server.memory(),
    );
    println!("alerts_load: after restart  {}", investigations(&client, &server.url).await);

    let target = Target { webhook: format!("{}/api/v1/alerts/{SOURCE}/webhook", server.url), ..target };
    let (resent, _) = closed_loop(&target, resend_sample(&[&bulk, &timed]), connections, None).await;
    let duplicate = resent.iter().filter(|r| r.status == 200 && r.outcome == "duplicate").count();
    let accepted_again = accepted(&resent);
    let unchecked = resent.len() - duplicate - accepted_again;
    println!(
        "alerts_load: re-sent {} accepted deliveries after restart  duplicate={duplicate}  accepted again={accepted_again}  \
         other={unchecked}",
        resent.len(),
    );
    print_unexpected("re-send", &resent, 200);
    server.print_log("restart");
    server.kill();

    let lost = missing + accepted_again;
    println!("alerts_load: lost: {lost}");
    let incomplete = unchecked > 0 || chain.is_err() || incidents.len() != stored.len() || deliveries != stored.len();
    if lost > 0 || incomplete {
        println!("alerts_load: keeping {} for inspection", scratch.keep().display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
