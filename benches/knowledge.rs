//! Knowledge index benchmark: build a 10,000-document synthetic corpus on disk, then open it and
//! run 1,000 searches; each phase runs in its own process so each peak RSS is its own.
//!
//! `cargo bench --bench knowledge`; prints numbers only.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use akritas::knowledge::{ChunkingParams, Document, KnowledgeIndex};

const DOCUMENTS: usize = 10_000;
const QUERIES: usize = 1_000;
const WARMUP: usize = 100;
const TOP_K: usize = 5;
const PHASE_ENV: &str = "AKRITAS_BENCH_KNOWLEDGE_PHASE";
const DIR_ENV: &str = "AKRITAS_BENCH_KNOWLEDGE_DIR";

const OPS_WORDS: &[&str] = &[
    "cpu",
    "memory",
    "disk",
    "network",
    "latency",
    "error",
    "timeout",
    "restart",
    "pod",
    "node",
    "cluster",
    "deployment",
    "service",
    "ingress",
    "certificate",
    "dns",
    "postgres",
    "connection",
    "replication",
    "wal",
    "slot",
    "vacuum",
    "index",
    "query",
    "lock",
    "deadlock",
    "transaction",
    "kafka",
    "consumer",
    "lag",
    "partition",
    "broker",
    "redis",
    "eviction",
    "cache",
    "hit",
    "miss",
    "nginx",
    "upstream",
    "502",
    "503",
    "oom",
    "killed",
    "throttling",
    "steal",
    "iowait",
    "load",
    "average",
    "filesystem",
    "inode",
    "volume",
    "pvc",
    "snapshot",
    "backup",
    "restore",
    "rollback",
    "deploy",
    "canary",
    "alert",
    "runbook",
    "escalation",
    "owner",
    "team",
    "prometheus",
    "victoriametrics",
    "grafana",
    "dashboard",
    "rate",
    "histogram",
    "quantile",
    "predict_linear",
    "scrape",
    "target",
    "exporter",
    "kubelet",
    "scheduler",
    "taint",
    "toleration",
    "affinity",
    "hpa",
    "replica",
    "statefulset",
    "daemonset",
    "cronjob",
    "job",
    "configmap",
    "secret",
    "rbac",
    "token",
    "expiry",
    "tls",
    "handshake",
    "packet",
    "loss",
    "retransmit",
    "mtu",
    "bandwidth",
    "saturation",
    "queue",
    "backlog",
    "retry",
    "circuit",
    "breaker",
    "budget",
    "slo",
    "sli",
    "availability",
    "incident",
    "postmortem",
    "mitigation",
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "for",
    "on",
    "when",
    "check",
    "look",
    "graph",
    "compare",
];

/// splitmix64: small, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Zipf-like skew towards small indices.
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((u * u * u) * n as f64) as usize % n
    }
}

/// 20,000 pseudo-words built from syllables.
fn random_vocabulary(rng: &mut Rng) -> Vec<String> {
    const SYL: &[&str] = &["ka", "ro", "ti", "mex", "sul", "ve", "dra", "on", "qui", "zat", "lo", "pen", "gru", "ish"];
    (0..20_000).map(|_| (0..2 + rng.below(3)).map(|_| SYL[rng.below(SYL.len())]).collect::<String>()).collect()
}

fn word<'a>(rng: &mut Rng, vocab: &'a [String]) -> &'a str {
    if rng.below(2) == 0 { OPS_WORDS[rng.skewed(OPS_WORDS.len())] } else { &vocab[rng.skewed(vocab.len())] }
}

fn corpus(rng: &mut Rng, vocab: &[String]) -> Vec<Document> {
    (0..DOCUMENTS)
        .map(|i| {
            let words = 300 + rng.below(1201);
            let mut text = String::with_capacity(words * 8);
            for w in 0..words {
                text.push_str(word(rng, vocab));
                text.push(match w % 60 {
                    59 => '\n',
                    _ if w % 12 == 11 => '\n',
                    _ => ' ',
                });
                if w % 60 == 59 {
                    text.push('\n');
                }
            }
            let title = format!("Runbook {i}: {} {} {}", word(rng, vocab), word(rng, vocab), word(rng, vocab));
            let mut doc = Document::from_text(format!("synthetic/{i:05}.md"), "bench".into(), None, &text, &title);
            doc.title = title;
            doc
        })
        .collect()
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| it.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

fn peak_rss_kib() -> i64 {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) == 0 { usage.ru_maxrss } else { -1 }
    }
}

fn main() {
    match (std::env::var(PHASE_ENV).as_deref(), std::env::var(DIR_ENV)) {
        (Ok("build"), Ok(dir)) => build_phase(Path::new(&dir)),
        (Ok("search"), Ok(dir)) => search_phase(Path::new(&dir)),
        _ => {
            // Each phase runs in its own child of this small process: Linux keeps ru_maxrss across
            // fork and exec, so a child of the building process would report the build's peak.
            let tmp = tempfile::tempdir().expect("tempdir");
            let dir = tmp.path().join("index");
            let exe = std::env::current_exe().expect("current exe");
            for phase in ["build", "search"] {
                let status = Command::new(&exe).env(PHASE_ENV, phase).env(DIR_ENV, &dir).status().expect("run phase");
                assert!(status.success(), "{phase} phase failed");
            }
            serve_phase(tmp.path());
        }
    }
}

/// Generates the corpus, builds the on-disk index and prints time, size and peak RSS.
fn build_phase(dir: &Path) {
    let mut rng = Rng(0x00C0_FFEE);
    let vocab = random_vocabulary(&mut rng);
    let started = Instant::now();
    let docs = corpus(&mut rng, &vocab);
    let generated = started.elapsed();
    let text_bytes: usize = docs.iter().map(|d| d.text.len()).sum();
    let started = Instant::now();
    let index = KnowledgeIndex::build_on_disk(dir, &docs, ChunkingParams::default(), None).expect("build");
    let build = started.elapsed();
    let stats = index.stats();
    let bytes = dir_bytes(dir);
    println!("corpus: documents={DOCUMENTS} text_bytes={text_bytes} generated_in={:.2}s", generated.as_secs_f64());
    println!("build: {:.2}s documents={} chunks={}", build.as_secs_f64(), stats.documents, stats.chunks);
    println!("index size: {bytes} bytes ({:.1} MiB)", bytes as f64 / (1024.0 * 1024.0));
    println!("build process peak RSS (corpus in memory + build): {:.1} MiB", peak_rss_kib() as f64 / 1024.0);
}

/// Opens the index, runs the queries and prints latency and peak RSS.
fn search_phase(dir: &Path) {
    let started = Instant::now();
    let index = KnowledgeIndex::open(dir).expect("open");
    let opened = started.elapsed();
    let mut rng = Rng(0xBEEF);
    let vocab = random_vocabulary(&mut Rng(0x00C0_FFEE));
    let queries: Vec<String> = (0..WARMUP + QUERIES)
        .map(|_| (0..1 + rng.below(4)).map(|_| word(&mut rng, &vocab)).collect::<Vec<_>>().join(" "))
        .collect();
    let mut latencies: Vec<Duration> = Vec::with_capacity(QUERIES);
    let mut empty = 0usize;
    for (i, q) in queries.iter().enumerate() {
        let t = Instant::now();
        let hits = index.search(q, TOP_K).expect("search");
        let elapsed = t.elapsed();
        if i >= WARMUP {
            latencies.push(elapsed);
            empty += usize::from(hits.is_empty());
        }
    }
    latencies.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at =
        |p: f64| latencies[((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1).min(latencies.len() - 1)];
    println!("open: {:.1} ms", opened.as_secs_f64() * 1e3);
    println!(
        "search: queries={QUERIES} top_k={TOP_K} (after {WARMUP} warm-up) p50={:.0}µs p99={:.0}µs max={:.0}µs \
         empty_results={empty}",
        us(at(0.50)),
        us(at(0.99)),
        us(latencies[latencies.len() - 1])
    );
    println!("search process peak RSS (open + search): {:.1} MiB", peak_rss_kib() as f64 / 1024.0);
}

/// Writes the corpus as runbook files with a KnowledgeBase manifest, starts
/// `akritas serve` on them, waits until the knowledge base is indexed and prints the
/// server's indexing time and resident memory.
fn serve_phase(tmp: &Path) {
    let mut rng = Rng(0x00C0_FFEE);
    let vocab = random_vocabulary(&mut rng);
    let docs = corpus(&mut rng, &vocab);
    let runbooks = tmp.join("runbooks");
    let resources = tmp.join("resources");
    std::fs::create_dir_all(runbooks.join("synthetic")).expect("runbooks dir");
    std::fs::create_dir_all(&resources).expect("resources dir");
    for doc in &docs {
        std::fs::write(runbooks.join(&doc.id), format!("# {}\n\n{}", doc.title, doc.text)).expect("write runbook");
    }
    std::fs::write(
        resources.join("kb.yaml"),
        format!(
            "apiVersion: akritas.io/v1alpha1\nkind: KnowledgeBase\nmetadata: {{name: synthetic, namespace: bench}}\nspec:\n  sources:\n    - directory: {{path: \"{}\"}}\n",
            runbooks.display()
        ),
    )
    .expect("write manifest");
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["serve", "--address", &format!("127.0.0.1:{port}"), "--skills-dir", ""])
        .arg("--resources")
        .arg(&resources)
        .arg("--data-dir")
        .arg(tmp.join("data"))
        .arg("--system-instructions")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("instructions/SYSTEM.md"))
        .env_remove("AKRITAS_CONFIG")
        .env_remove("AKRITAS_API_KEY")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start serve");
    let deadline = Instant::now() + std::time::Duration::from_secs(300);
    let indexed = loop {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve did not index the knowledge base in time");
        }
        if http_get(port, "/api/v1/resources").is_some_and(|body| body.contains(&format!("\"documents\":{DOCUMENTS}")))
        {
            break started.elapsed();
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let field = |name: &str| {
        status.lines().find(|l| l.starts_with(name)).map(|l| l[name.len()..].trim().to_string()).unwrap_or_default()
    };
    println!(
        "serve with the {DOCUMENTS}-document knowledge base: indexed {:.1}s after start, RSS {}, peak RSS {}",
        indexed.as_secs_f64(),
        field("VmRSS:"),
        field("VmHWM:")
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// A minimal HTTP/1.0 GET on loopback; the body, or None on any failure.
fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}
