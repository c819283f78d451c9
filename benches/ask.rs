//! Wall time and peak RSS of `akritas ask` against a zero-latency scripted model
//! (planning call + answer), started in the repository (its SYSTEM.md and six skills), alone
//! and with the sample resources (`--resources config/samples`: a KnowledgeBase indexed before
//! the Run, an McpAdapter, the rest of the samples), and with them again once the index an
//! earlier `ask` built is in the data directory. Prints numbers; asserts nothing.
//! `AKRITAS_ASK_BINARY=dist/…/akritas` measures another binary, such as the release's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use akritas_testkit::one_question;

const RUNS: usize = 30;

fn main() {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let llm = runtime.block_on(one_question::model());
    let data = std::env::temp_dir().join(format!("akritas-bench-ask-{}", std::process::id()));
    // The release (e2e/release.sh) links the binary again with its code laid out; this build's
    // own binary has not been.
    let binary = std::env::var_os("AKRITAS_ASK_BINARY")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_akritas")), PathBuf::from);
    for (what, extra) in one_question::CONFIGURATIONS {
        measure(what, &binary, &llm.url, &data, extra, Fresh::Each);
    }
    // A KnowledgeBase is indexed into the data directory once: the next `ask` opens that index.
    let (what, extra) = one_question::CONFIGURATIONS[1];
    measure(&format!("{what}, its index kept from an earlier ask"), &binary, &llm.url, &data, extra, Fresh::Once);
    let _ = std::fs::remove_dir_all(&data);
}

/// When the data directory starts empty.
#[derive(PartialEq)]
enum Fresh {
    /// For every `ask`: each one builds what it keeps there (a KnowledgeBase's index).
    Each,
    /// Before the first warm-up `ask` only.
    Once,
}

/// Runs `akritas ask` RUNS times (after three to warm up) with `extra` arguments and prints the
/// wall time and peak RSS percentiles.
fn measure(what: &str, binary: &Path, url: &str, data: &Path, extra: &[&str], fresh: Fresh) {
    let mut walls = Vec::new();
    let mut rss_kib = Vec::new();
    for i in 0..RUNS + 3 {
        if i == 0 || fresh == Fresh::Each {
            let _ = std::fs::remove_dir_all(data);
        }
        let started = Instant::now();
        // Reaped by wait4 below, which also reports the peak RSS.
        #[allow(clippy::zombie_processes)]
        let child = one_question::command(&[], binary, url, data, extra).spawn().unwrap();
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
