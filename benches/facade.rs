//! The OpenAI facade's overhead against native chat, and its time to the first
//! streamed byte, on the in-process host with a zero-latency scripted model (a
//! plan with one check, then the answer). Prints numbers; asserts nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use akritas::audit::AuditLog;
use akritas::catalog::CatalogStore;
use akritas::web::auth::ApiKeys;
use akritas_testkit::host;
use akritas_testkit::scripted_llm::{ScriptedLlm, investigator};
use serde_json::{Value, json};

const RUNS: usize = 200;
const WARMUP: usize = 10;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let llm = ScriptedLlm::start_with(investigator(Value::Null, "Autovacuum on db-7 holds the CPU.")).await;
    llm.set_recording(false);
    let dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&dir.path().join("audit.jsonl")).unwrap());
    let (tools, _) = host::standard_tools();
    let engine = host::engine(&llm, host::settings(), tools, CatalogStore::new(), Some(audit), None);
    let server = host::serve(engine, CatalogStore::new(), ApiKeys::default()).await;
    let client = reqwest::Client::new();
    let messages = json!([{"role": "user", "content": "Why is db-7 slow?"}]);

    let native = measure(&client, &format!("{}/api/v1/chat", server.url), json!({"messages": messages}), false).await;
    let facade_url = format!("{}/v1/chat/completions", server.url);
    let facade = measure(&client, &facade_url, json!({"model": "akritas", "messages": messages}), false).await;
    let streamed = json!({"model": "akritas", "messages": messages, "stream": true});
    let first_byte = measure(&client, &facade_url, streamed.clone(), true).await;
    let stream_total = measure(&client, &facade_url, streamed, false).await;

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let line = |name: &str, samples: &[Duration]| {
        println!(
            "{name:<44} p50 {:>6.2} ms  p95 {:>6.2} ms  ({RUNS} Runs, 2 model calls + 1 tool each)",
            ms(samples[RUNS / 2]),
            ms(samples[RUNS * 95 / 100])
        );
    };
    line("native POST /api/v1/chat", &native);
    line("facade POST /v1/chat/completions", &facade);
    line("facade stream: time to first byte", &first_byte);
    line("facade stream: whole stream", &stream_total);
    println!("facade overhead vs native at p50: {:+.2} ms", ms(facade[RUNS / 2]) - ms(native[RUNS / 2]));
}

/// Sorted durations of `RUNS` requests (after a warm-up): until the first body
/// byte when `first_byte`, else until the whole body was read.
async fn measure(client: &reqwest::Client, url: &str, body: Value, first_byte: bool) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(RUNS);
    for i in 0..RUNS + WARMUP {
        let started = Instant::now();
        let mut response = client.post(url).json(&body).send().await.unwrap();
        assert!(response.status().is_success(), "{url}: {}", response.status());
        let elapsed = if first_byte {
            let elapsed = response.chunk().await.unwrap().map(|_| started.elapsed()).unwrap();
            while response.chunk().await.unwrap().is_some() {}
            elapsed
        } else {
            response.bytes().await.unwrap();
            started.elapsed()
        };
        if i >= WARMUP {
            samples.push(elapsed);
        }
    }
    samples.sort();
    samples
}
