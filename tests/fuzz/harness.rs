//! Runs one fuzz target: `AKRITAS_FUZZ_CASES` generated inputs (default
//! [`DEFAULT_CASES`]) from a fixed RNG seed (`AKRITAS_FUZZ_SEED`, a number or
//! `random`), each checked by the target's property. A panic or a property failure
//! fails the test with the shrunk input; an input still running after
//! `AKRITAS_FUZZ_HANG_SECS` (default 20) is a hang: the watchdog prints it and ends
//! the process. Prints cases, cases/s and the slowest case (figures, not assertions).

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use super::mutate::{Seed, Syntax};

/// Cases per target in the default test run (all targets together well under a minute).
pub const DEFAULT_CASES: u32 = 300;

/// What a property saw: the parser accepted the input or rejected it with an error.
pub enum Verdict {
    Accepted,
    Rejected,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn rng_seed(target: &str) -> u64 {
    match std::env::var("AKRITAS_FUZZ_SEED").ok().as_deref().map(str::trim) {
        Some("random") => rand::random(),
        Some(number) if number.parse::<u64>().is_ok() => number.parse().unwrap_or_default(),
        // Fixed per target, so the default run is the same every time.
        _ => target.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)),
    }
}

type Current = Arc<Mutex<Option<(Instant, String)>>>;

/// Ends the process when one input runs longer than the hang limit.
fn watchdog(target: &'static str, current: Current, limit: Duration) -> Arc<Mutex<bool>> {
    let done = Arc::new(Mutex::new(false));
    let stop = done.clone();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(200));
            if *stop.lock().unwrap_or_else(|e| e.into_inner()) {
                return;
            }
            let slot = current.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((started, input)) = slot.as_ref()
                && started.elapsed() > limit
            {
                eprintln!("fuzz {target}: HANG: one input ran over {limit:?}; input: {input}");
                std::process::exit(3);
            }
        }
    });
    done
}

/// Runs `property` over inputs from `strategy` and reports the figures.
pub fn run<S>(target: &'static str, strategy: S, property: impl Fn(&S::Value) -> Result<Verdict, String>)
where
    S: Strategy,
    S::Value: Debug,
{
    let cases = env_u64("AKRITAS_FUZZ_CASES").map_or(DEFAULT_CASES, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let hang = Duration::from_secs(env_u64("AKRITAS_FUZZ_HANG_SECS").unwrap_or(20));
    let seed = rng_seed(target);
    let config = Config { cases, failure_persistence: None, max_shrink_iters: 4096, ..Config::default() };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes));

    let current: Current = Arc::new(Mutex::new(None));
    let done = watchdog(target, current.clone(), hang);
    let stats = Mutex::new((0u64, 0u64, Duration::ZERO));
    let started = Instant::now();
    let result = runner.run(&strategy, |input| {
        *current.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), format!("{input:?}")));
        let case = Instant::now();
        let verdict = property(&input);
        let took = case.elapsed();
        *current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let mut stats = stats.lock().unwrap_or_else(|e| e.into_inner());
        stats.2 = stats.2.max(took);
        match verdict.map_err(TestCaseError::fail)? {
            Verdict::Accepted => stats.0 += 1,
            Verdict::Rejected => stats.1 += 1,
        }
        Ok(())
    });
    *done.lock().unwrap_or_else(|e| e.into_inner()) = true;
    let elapsed = started.elapsed();
    let (accepted, rejected, slowest) = *stats.lock().unwrap_or_else(|e| e.into_inner());
    let total = accepted + rejected;
    println!(
        "fuzz {target}: {total} cases in {:.1} s ({:.0} cases/s), {accepted} accepted, {rejected} rejected, \
         slowest case {:.1} ms, rng seed {seed}",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64().max(1e-9),
        slowest.as_secs_f64() * 1000.0,
    );
    if let Err(failure) = result {
        panic!("fuzz {target} (rng seed {seed}): {failure}");
    }
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Seeds from every file with one of `extensions` directly under each directory
/// (relative to the repository root), plus `tests/fixtures/fuzz/<target>/`.
pub fn seeds(target: &str, dirs: &[&str], extensions: &[&str], syntax: Syntax) -> Vec<Seed> {
    let corpus = format!("tests/fixtures/fuzz/{target}");
    let mut out = Vec::new();
    for dir in dirs.iter().copied().chain([corpus.as_str()]) {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else { continue };
        let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if path.is_file() && has_extension(&path, extensions) {
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let name = path.strip_prefix(root()).unwrap_or(&path).display().to_string();
                out.push(Seed { name, text, syntax });
            }
        }
    }
    assert!(!out.is_empty(), "fuzz {target}: no seeds found");
    out
}

fn has_extension(path: &Path, extensions: &[&str]) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    extensions.iter().any(|e| name.ends_with(e))
}
