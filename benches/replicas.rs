//! Replicas of the real `akritas serve` on one PostgreSQL (`storage_backend: postgres`), against
//! one replica on the embedded journal, on this machine:
//! - ingest: `REPLICAS_BENCH_N` Alertmanager v4 webhooks (each one new firing alert) over
//!   `REPLICAS_BENCH_CONCURRENCY` connections, spread round robin over 1 and then 3 replicas;
//!   alerts/s and the p50/p99 answer time; then every acknowledged delivery is looked up in the
//!   database (`0 lost` when each is there exactly once);
//! - chat Run overhead: `REPLICAS_BENCH_CHATS` chats one after another against a model that
//!   answers at once, on the embedded journal and on the database (median and p95).
//!
//! The model server never answers investigations (they hold the worker's slots, as slow real
//! investigations do); it answers chats at once. Prints numbers; asserts nothing about time,
//! and exits non-zero only when an acknowledged delivery was lost or stored twice.
//!
//! `cargo bench --bench replicas` (needs PostgreSQL: `e2e/install-test-deps.sh`).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use akritas_testkit::postgres::Postgres;
use akritas_testkit::scripted_llm::{Reply, ScriptedLlm, Step};
use akritas_testkit::{Server, serve_command};
use serde_json::{Value, json};

const API_KEY: &str = "replicas-bench-key-0123456789abcdef";
const AM_TOKEN: &str = "replicas-bench-am-0123456789abcdef";

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|v| *v > 0).unwrap_or(default)
}

fn delivery(index: usize) -> Value {
    json!({
        "receiver": "akritas", "status": "firing", "alerts": [{
            "status": "firing",
            "labels": {"alertname": "BenchAlert", "severity": "warning", "pod": format!("bench-{index:07}")},
            "annotations": {"summary": "replica bench"}, "startsAt": "2026-12-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "", "fingerprint": format!("bb{index:014x}"),
        }],
        "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://alertmanager.invalid",
        "version": "4", "groupKey": "{}:{bench=\"replicas\"}", "truncatedAlerts": 0,
    })
}

struct Bench {
    pg: Postgres,
    llm: ScriptedLlm,
    resources: tempfile::TempDir,
    http: reqwest::Client,
}

impl Bench {
    async fn replica(&self, postgres: bool) -> Server {
        let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
        command
            .env("AKRITAS_BASE_URL", &self.llm.url)
            .env("AKRITAS_API_KEY", API_KEY)
            .env("AKRITAS_RESOURCE_ENV", "BENCH_*")
            .env("BENCH_AM_TOKEN", AM_TOKEN)
            .env("AKRITAS_ALERT_SOURCE_RATE", "100000")
            .env("AKRITAS_ALERT_PENDING_JOBS", "100000")
            .env("AKRITAS_ALERT_PENDING_JOBS_PER_NAMESPACE", "100000")
            .arg("--resources")
            .arg(self.resources.path());
        if postgres {
            command.env("AKRITAS_STORAGE_BACKEND", "postgres").env("AKRITAS_DATABASE_URL", self.pg.url("disable"));
        }
        tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap()
    }

    /// Posts deliveries `first..first + count` round robin over `replicas`; returns the
    /// acknowledged delivery ids, the answer times and the elapsed time.
    async fn ingest(&self, replicas: &[&Server], first: usize, count: usize) -> (Vec<String>, Vec<Duration>, Duration) {
        let concurrency = knob("REPLICAS_BENCH_CONCURRENCY", 32);
        let next = Arc::new(AtomicUsize::new(first));
        let urls: Arc<Vec<String>> =
            Arc::new(replicas.iter().map(|r| format!("{}/api/v1/alertmanager/webhook", r.url)).collect());
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency {
            let (next, urls, http) = (next.clone(), urls.clone(), self.http.clone());
            tasks.spawn(async move {
                let mut acked = Vec::new();
                let mut times = Vec::new();
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    if index >= first + count {
                        return (acked, times);
                    }
                    let url = &urls[index % urls.len()];
                    let sent = Instant::now();
                    let answer = http.post(url).bearer_auth(AM_TOKEN).json(&delivery(index)).send().await;
                    if let Ok(response) = answer
                        && response.status().is_success()
                        && let Ok(body) = response.json::<Value>().await
                    {
                        times.push(sent.elapsed());
                        acked.extend(body["delivery_id"].as_str().map(str::to_string));
                    }
                }
            });
        }
        let (mut acked, mut times) = (Vec::new(), Vec::new());
        while let Some(done) = tasks.join_next().await {
            let (a, t) = done.unwrap();
            acked.extend(a);
            times.extend(t);
        }
        (acked, times, started.elapsed())
    }

    /// Median and p95 of `count` chats one after another on `replica`.
    async fn chats(&self, replica: &Server, count: usize) -> (Duration, Duration) {
        let mut times = Vec::new();
        for n in 0..count {
            let body = json!({"messages": [{"role": "user", "content": format!("Is the shop healthy? ({n})")}]});
            let sent = Instant::now();
            let response =
                self.http.post(format!("{}/api/v1/chat", replica.url)).bearer_auth(API_KEY).json(&body).send().await;
            if response.is_ok_and(|r| r.status().is_success()) {
                times.push(sent.elapsed());
            }
        }
        (percentile(&mut times, 50), percentile(&mut times, 95))
    }
}

fn percentile(times: &mut [Duration], p: usize) -> Duration {
    if times.is_empty() {
        return Duration::ZERO;
    }
    times.sort();
    times[(times.len() * p / 100).min(times.len() - 1)]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Each acknowledged delivery id in the database: (found once, missing, found more than once).
fn check(pg: &Postgres, acked: &[String]) -> (usize, usize, usize) {
    let stored = pg.psql(
        "SELECT data::jsonb ->> 'delivery_id', count(*) FROM akritas_records WHERE store = 'alerts' \
         AND kind = 'alerts.delivery' GROUP BY 1",
    );
    let counts: std::collections::HashMap<&str, usize> =
        stored.lines().filter_map(|line| line.split_once('|')).map(|(id, n)| (id, n.parse().unwrap_or(0))).collect();
    let mut result = (0, 0, 0);
    for id in acked {
        match counts.get(id.as_str()) {
            Some(1) => result.0 += 1,
            None => result.1 += 1,
            Some(_) => result.2 += 1,
        }
    }
    result
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run())
}

async fn run() -> ExitCode {
    akritas::install_crypto_provider();
    let count = knob("REPLICAS_BENCH_N", 3000);
    let chats = knob("REPLICAS_BENCH_CHATS", 50);
    let pg = Postgres::start();
    // Investigations wait for ever; chats are answered at once.
    let llm = ScriptedLlm::start_with(|_, request: &Value| {
        if request.to_string().contains("provider-independent alert") {
            Step::from(Reply::Content("...".into())).with_delay(Duration::from_secs(3600))
        } else {
            Step::from(Reply::Content("All good.".into()))
        }
    })
    .await;
    let resources = tempfile::tempdir().unwrap();
    std::fs::write(
        resources.path().join("bench.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am, namespace: default}\n\
         spec: {provider: alertmanager, auth: {bearerToken: {env: BENCH_AM_TOKEN}}}\n",
    )
    .unwrap();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let bench = Bench { pg, llm, resources, http };

    let mut failed = false;
    let embedded = bench.replica(false).await;
    let (acked, mut times, took) = bench.ingest(&[&embedded], 0, count).await;
    println!(
        "ingest, embedded, 1 replica: {:.0} alerts/s, p50 {:.1} ms, p99 {:.1} ms ({} of {count} acknowledged)",
        acked.len() as f64 / took.as_secs_f64(),
        ms(percentile(&mut times, 50)),
        ms(percentile(&mut times, 99)),
        acked.len()
    );
    let (p50, p95) = bench.chats(&embedded, chats).await;
    println!("chat Run, embedded: median {:.1} ms, p95 {:.1} ms ({chats} chats)", ms(p50), ms(p95));
    drop(embedded);

    let first = bench.replica(true).await;
    let (p50, p95) = bench.chats(&first, chats).await;
    println!("chat Run, postgres: median {:.1} ms, p95 {:.1} ms ({chats} chats)", ms(p50), ms(p95));
    let mut all_acked = Vec::new();
    for replicas in [1, 3] {
        let mut servers = vec![&first];
        let extra = if replicas == 3 { vec![bench.replica(true).await, bench.replica(true).await] } else { Vec::new() };
        servers.extend(extra.iter());
        let offset = count * replicas;
        let (acked, mut times, took) = bench.ingest(&servers, offset, count).await;
        println!(
            "ingest, postgres, {replicas} replica(s): {:.0} alerts/s, p50 {:.1} ms, p99 {:.1} ms ({} of {count} acknowledged)",
            acked.len() as f64 / took.as_secs_f64(),
            ms(percentile(&mut times, 50)),
            ms(percentile(&mut times, 99)),
            acked.len()
        );
        all_acked.extend(acked);
    }
    let (once, lost, twice) = check(&bench.pg, &all_acked);
    println!(
        "{} acknowledged deliveries checked in the database: {once} once, {lost} lost, {twice} duplicated",
        all_acked.len()
    );
    if lost + twice > 0 {
        failed = true;
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
