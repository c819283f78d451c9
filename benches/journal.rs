//! Journal throughput and latency: sequential single writer, then 16 concurrent writers (group commit).
//! With `JOURNAL_BENCH_POSTGRES=1` the same two loads also run on the database backend
//! (`journal::database::Group`) against a PostgreSQL cluster the bench starts (Debian's
//! `postgresql` package), and the chain is verified.
//!
//! Run with `cargo bench --bench journal`. Prints numbers only; no assertions.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use akritas::journal::{Journal, JournalOptions};

const SEQUENTIAL: usize = 2000;
const WRITERS: usize = 16;
const PER_WRITER: usize = 500;

fn payload(i: usize) -> serde_json::Value {
    // With the envelope (seq, time, kind, two 64-hex hashes) the line is ~300 bytes.
    serde_json::json!({
        "tool": "kubectl_get",
        "args": { "resource": "pods", "ns": "prod", "selector": "app=web" },
        "i": i,
    })
}

fn scratch_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    std::env::temp_dir().join(format!("akritas-journal-bench-{}-{nanos}", std::process::id()))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary(name: &str, mut lat: Vec<Duration>, total: Duration) {
    lat.sort();
    let pick = |q: f64| lat.get(((lat.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default();
    println!(
        "journal {name}: {} records, {:.0} rec/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(),
        lat.len() as f64 / total.as_secs_f64(),
        ms(pick(0.5)),
        ms(pick(0.99)),
        ms(pick(1.0)),
    );
}

fn main() {
    let dir = scratch_dir();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    println!("journal bench: dir {}", dir.display());

    rt.block_on(async {
        let path = dir.join("sequential.jsonl");
        let (journal, _) = Journal::open(&path, JournalOptions::default()).expect("open journal");
        sequential("sequential", |i| {
            let journal = journal.clone();
            async move {
                journal.append("bench.sequential", &payload(i)).await.expect("append");
            }
        })
        .await;
        journal.close().await.expect("close");
        if let Ok(meta) = std::fs::metadata(&path) {
            println!("journal record size: {} bytes/line on average", meta.len() / SEQUENTIAL as u64);
        }

        let path = dir.join("concurrent.jsonl");
        let (journal, _) = Journal::open(&path, JournalOptions::default()).expect("open journal");
        let writer = journal.clone();
        concurrent("concurrent", move |i| {
            let journal = writer.clone();
            async move {
                journal.append("bench.concurrent", &payload(i)).await.expect("append");
            }
        })
        .await;
        journal.close().await.expect("close");
    });

    if let Ok(report) = akritas::journal::verify(&dir.join("concurrent.jsonl")) {
        println!("journal concurrent file verified: {} records, last seq {}", report.records, report.last_seq);
    }
    let _ = std::fs::remove_dir_all(&dir);
    if std::env::var_os("JOURNAL_BENCH_POSTGRES").is_some() {
        rt.block_on(database());
    }
}

/// One writer appending `SEQUENTIAL` records with `append` (given the record's number), one at a time.
async fn sequential<A: std::future::Future<Output = ()>>(name: &str, append: impl Fn(usize) -> A) {
    let mut lat = Vec::with_capacity(SEQUENTIAL);
    let start = Instant::now();
    for i in 0..SEQUENTIAL {
        let t = Instant::now();
        append(i).await;
        lat.push(t.elapsed());
    }
    summary(name, lat, start.elapsed());
}

/// `WRITERS` tasks, each appending `PER_WRITER` records with `append` (given the record's number).
async fn concurrent<F, A>(name: &str, append: F)
where
    F: Fn(usize) -> A + Clone + Send + 'static,
    A: std::future::Future<Output = ()> + Send,
{
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(WRITERS);
    for w in 0..WRITERS {
        let append = append.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(PER_WRITER);
            for i in 0..PER_WRITER {
                let t = Instant::now();
                append(w * PER_WRITER + i).await;
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut lat = Vec::with_capacity(WRITERS * PER_WRITER);
    for task in tasks {
        lat.extend(task.await.expect("writer task"));
    }
    summary(&format!("{name}({WRITERS})"), lat, start.elapsed());
}

/// The same loads on the database backend.
async fn database() {
    use akritas::journal::database::{Database, Group, Log};
    let pg = akritas_testkit::postgres::Postgres::start();
    let db = Database::connect(&pg.url("disable"), None, 8).expect("connect");
    db.migrate().await.expect("migrate");
    let clock: akritas::journal::Clock = std::sync::Arc::new(|| jiff::Timestamp::now().to_string());
    let log = |store| Log::new(&db, store, clock.clone(), akritas::journal::DEFAULT_MAX_RECORD_BYTES, None);
    let group = Group::start(log("sequential"));
    sequential("database sequential", |i| {
        let group = group.clone();
        async move {
            group.append("bench.sequential", &payload(i)).await.expect("append");
        }
    })
    .await;
    let group = Group::start(log("concurrent"));
    concurrent("database concurrent", move |i| {
        let group = group.clone();
        async move {
            group.append("bench.concurrent", &payload(i)).await.expect("append");
        }
    })
    .await;
    let started = Instant::now();
    let verified = log("concurrent").verify(None).await.expect("verify");
    println!(
        "journal database concurrent verified: {} records, last seq {}, in {:.0} ms",
        verified.records,
        verified.last_seq,
        ms(started.elapsed())
    );
}
