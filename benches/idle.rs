//! Idle CPU of `akritas serve --resources config/samples`: after a warm-up, the
//! process's user + system time (from `/proc/<pid>/stat`) over a window, as a
//! percentage of one core, and how many warnings it logged meanwhile. Run it on a
//! release build (`cargo bench --bench idle`); `IDLE_BENCH_SECONDS` sets the window
//! (default 60) and `IDLE_BENCH_INVALID=1` adds one invalid manifest to the samples.
//! Prints numbers; asserts nothing.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn main() {
    let seconds: u64 = std::env::var("IDLE_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let resources = tempfile::tempdir().unwrap();
    akritas_testkit::copy_dir(&root.join("config/samples"), resources.path());
    if std::env::var("IDLE_BENCH_INVALID").is_ok_and(|v| v == "1") {
        let invalid = "apiVersion: akritas.io/v1alpha1\nkind: Skill\nmetadata: {name: broken}\nspec: {match: []}\n";
        std::fs::write(resources.path().join("broken.yaml"), invalid).unwrap();
    }
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["serve", "--address", "127.0.0.1:0", "--log-format", "json"])
        .arg("--resources")
        .arg(resources.path())
        .arg("--data-dir")
        .arg(data.path())
        .current_dir(root)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let warnings = Arc::new(AtomicUsize::new(0));
    let counted = warnings.clone();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("\"level\":\"WARN\"") {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    std::thread::sleep(Duration::from_secs(10));
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let (before, warned, started) = (cpu_ticks(child.id()), warnings.load(Ordering::SeqCst), Instant::now());
    std::thread::sleep(Duration::from_secs(seconds));
    let (after, elapsed) = (cpu_ticks(child.id()), started.elapsed().as_secs_f64());
    let _ = child.kill();
    let _ = child.wait();
    let cpu = (after - before) as f64 / ticks_per_second;
    println!(
        "idle: {cpu:.2} s of CPU in {elapsed:.1} s = {:.3}% of one core; {} warnings logged in the window ({warned} at start-up)",
        100.0 * cpu / elapsed,
        warnings.load(Ordering::SeqCst) - warned,
    );
}
