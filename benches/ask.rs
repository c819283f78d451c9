//! Wall time and peak RSS of `akritas ask` against a zero-latency scripted model
//! (planning call + answer), started in the repository (its SYSTEM.md and six skills), alone
//! and with the sample resources (`--resources config/samples`: a KnowledgeBase indexed before
//! the Run, an McpAdapter, the rest of the samples). Prints numbers; asserts nothing.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use akritas::tools::{ToolName, openai_alias};
use akritas_testkit::scripted_llm::{Reply, ScriptedLlm, Step};
use serde_json::json;

const RUNS: usize = 30;

fn main() {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let llm = runtime.block_on(ScriptedLlm::start_with(move |_, body| {
        if body["tool_choice"] == "required" {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else {
            Step::from(Reply::Content("The host is saturated by an autovacuum worker.".into()))
        }
    }));
    llm.set_recording(false);
    let data = std::env::temp_dir().join(format!("akritas-bench-ask-{}", std::process::id()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));

    for (what, extra) in [("alone", &[][..]), ("with the sample resources", &["--resources", "config/samples"][..])] {
        measure(what, &llm.url, &data, root, extra);
    }
    let _ = std::fs::remove_dir_all(&data);
}

/// Runs `akritas ask` RUNS times (after three to warm up) with `extra` arguments and prints the
/// wall time and peak RSS percentiles.
fn measure(what: &str, url: &str, data: &Path, root: &Path, extra: &[&str]) {
    let mut walls = Vec::new();
    let mut rss_kib = Vec::new();
    for i in 0..RUNS + 3 {
        let _ = std::fs::remove_dir_all(data);
        let started = Instant::now();
        // Reaped by wait4 below, which also reports the peak RSS.
        #[allow(clippy::zombie_processes)]
        let child = Command::new(env!("CARGO_BIN_EXE_akritas"))
            .args(["ask", "Why is db-7 slow?", "--base-url", url])
            .args(extra)
            .arg("--data-dir")
            .arg(data)
            .arg("--system-instructions")
            .arg(root.join("instructions/SYSTEM.md"))
            .current_dir(root)
            .env_remove("AKRITAS_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (status, max_rss) = wait_with_rusage(child.id());
        let wall = started.elapsed();
        assert!(status == 0, "akritas ask failed with status {status}");
        if i >= 3 {
            walls.push(wall);
            rss_kib.push(max_rss);
        }
    }
    walls.sort();
    rss_kib.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "akritas ask {what} (zero-latency model, 2 model calls): {RUNS} runs, wall p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms; peak RSS p50 {:.1} MiB, max {:.1} MiB",
        ms(walls[RUNS / 2]),
        ms(walls[RUNS * 9 / 10]),
        ms(walls[RUNS - 1]),
        rss_kib[RUNS / 2] as f64 / 1024.0,
        rss_kib[RUNS - 1] as f64 / 1024.0,
    );
}

/// Waits for a child and returns its exit status and peak RSS in KiB.
fn wait_with_rusage(pid: u32) -> (i32, i64) {
    let mut status = 0;
    // SAFETY: rusage is plain old data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: valid pointers to locals; the child is ours and not waited elsewhere.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4 failed");
    (libc::WEXITSTATUS(status), usage.ru_maxrss)
}
