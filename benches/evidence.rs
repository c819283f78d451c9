//! How long the host takes to verify an InvestigationResult's quoted values against large
//! stored tool outputs (`investigation::validate`, token matching of `investigation::quote`).
//!
//! Three outputs of about `EVIDENCE_BENCH_BYTES` (2 MiB, the default `max_tool_result_bytes`):
//! log lines, a JSON object of metrics, and an adversarial text (`a a a …`) against quotes
//! made to restart the match often (`a a … a b`). Each result cites the call 64 times (the
//! most evidence items), with quotes found at the end of the output or not at all.
//! Run with `cargo bench --bench evidence`. Prints numbers; asserts nothing about time.

use std::time::Instant;

use akritas::investigation::{Evidence, MAX_ITEMS, validate};
use serde_json::{Value, json};

fn result(evidence: Vec<String>) -> String {
    json!({
        "finding_status": "suspected", "actionability": "requires_human", "confidence": "low",
        "summary": "bench", "impact": "", "evidence": evidence, "ruled_out": [],
        "affected_components": [], "recommended_actions": [], "production_writes": 0
    })
    .to_string()
}

fn measure(name: &str, output: Value, quotes: &[String], expect_ok: bool) {
    let bytes = output.to_string().len();
    let evidence = Evidence::from([("call-1".to_string(), output)]);
    let items: Vec<String> = quotes.iter().map(|q| format!("tool-call:call-1 \"{q}\"")).collect();
    let text = result(items);
    let runs = 3;
    let start = Instant::now();
    for _ in 0..runs {
        let outcome = validate(&text, &evidence);
        assert_eq!(outcome.is_ok(), expect_ok, "{name}: {:?}", outcome.err().map(|e| e.to_string()));
    }
    let each = start.elapsed() / runs;
    println!(
        "{name:<34} output {bytes:>8} bytes, {:>2} quotes: {:>8.1} ms per result, {:>6.1} MB/s per quote",
        quotes.len(),
        each.as_secs_f64() * 1000.0,
        bytes as f64 * quotes.len() as f64 / each.as_secs_f64() / 1e6
    );
}

fn main() {
    let target: usize = std::env::var("EVIDENCE_BENCH_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(2 << 20);
    let line = "2026-12-01T10:01:02Z INFO request served path=/api/v1/items status=200 duration=12ms";
    let count = target / (line.len() + 12);
    let lines: Vec<String> = (0..count).map(|i| format!("{line} seq={i}")).collect();
    let last: Vec<String> = (count - MAX_ITEMS..count).map(|i| format!("status=200 duration=12ms seq={i}")).collect();
    measure("log lines, 64 quotes at the end", json!(lines.clone()), &last, true);
    measure("log lines, 1 quote absent", json!(lines), &["seq=-1".to_string()], false);

    let keys = target / 40;
    let metrics: serde_json::Map<String, Value> =
        (0..keys).map(|i| (format!("pod_{i:07}_memory_bytes"), json!((i as u64 + 1) * 1024))).collect();
    let units: Vec<String> = (keys - MAX_ITEMS..keys).map(|i| format!("pod_{i:07}_memory_bytes={}Ki", i + 1)).collect();
    measure("metrics object, 64 unit quotes", Value::Object(metrics), &units, true);

    let mut adversarial = "a ".repeat(target / 2 - 200 * MAX_ITEMS);
    for k in 0..MAX_ITEMS {
        adversarial.push_str(&format!("{}b{k} ", "a ".repeat(200)));
    }
    let quotes: Vec<String> = (0..MAX_ITEMS).map(|k| format!("{}b{k}", "a ".repeat(200))).collect();
    measure("adversarial a…ab, 64 quotes", json!(adversarial), &quotes, true);
}
