//! What the validator sandbox costs: `yamllint` on one changed file of a small copy, run
//! 30 times each way through `validators::run`, with the sandbox `off` (the supervisor,
//! its process controls and the scrubbed environment only), with `landlock` (plus the
//! Landlock rules, the seccomp filter and, on a root host, the fresh uid and the hand-over
//! of the copy) and with `namespaces` (plus its own user, mount, PID and network
//! namespaces and the read-only view), and once as a plain child process, as validators
//! ran before the sandbox.
//! Run with `cargo bench --bench sandbox` (needs `yamllint` on PATH). Prints p50 and p95
//! wall times; asserts nothing about time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use akritas::catalog::secrets::EnvAccess;
use akritas::change::sandbox::{Sandbox, SandboxMode};
use akritas::change::validators::{self, CopyLimits, Scope, ValidatorPolicy};
use akritas::change::{FileChange, Operation, ValidatorSpec, ValidatorStatus};
use tokio_util::sync::CancellationToken;

const RUNS: usize = 30;

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index].as_secs_f64() * 1000.0
}

fn report(label: &str, samples: &mut [Duration]) {
    let (p50, p95) = (percentile(samples, 0.5), percentile(samples, 0.95));
    println!("{label:<44} p50 {p50:>7.1} ms   p95 {p95:>7.1} ms   n {}", samples.len());
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(workspace.join("deploy")).unwrap();
    for i in 0..50 {
        std::fs::write(workspace.join(format!("deploy/app-{i}.yaml")), format!("name: app-{i}\nreplicas: 2\n"))
            .unwrap();
    }
    let change = FileChange {
        path: "deploy/app-0.yaml".into(),
        operation: Operation::Replace,
        before: Some("name: app-0\nreplicas: 2\n".into()),
        after: "name: app-0\nreplicas: 3\n".into(),
        mode: 0o644,
    };
    let spec = ValidatorSpec {
        name: "yamllint".into(),
        argv: vec!["yamllint".into(), "-d".into(), "relaxed".into(), "{files}".into()],
        files: vec!["**/*.yaml".into()],
        timeout: Duration::from_secs(60),
        output_limit: 65536,
        env: Vec::new(),
        full_tree: true,
    };
    let data = dir.path().join("data");
    let changes = [change];
    println!("validator sandbox: yamllint on one changed file, a copy of 50 files, {RUNS} runs each");
    let program = validators::resolve("yamllint", std::env::var_os("PATH").as_ref()).expect("yamllint on PATH");
    let mut plain = Vec::new();
    for _ in 0..RUNS {
        let copy = validators::prepare(&workspace, &changes, &CopyLimits::default()).unwrap();
        let started = Instant::now();
        let status = std::process::Command::new(&program)
            .args(["-d", "relaxed", "deploy/app-0.yaml"])
            .current_dir(copy.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .unwrap()
            .status;
        plain.push(started.elapsed());
        assert!(status.success());
    }
    report("plain child process (before the sandbox)", &mut plain);
    let never = CancellationToken::new();
    let scope = Scope { workspace: "default", requester: "default", cancel: &never };
    for mode in [SandboxMode::Off, SandboxMode::Landlock, SandboxMode::Namespaces] {
        let policy = ValidatorPolicy {
            commands: vec!["yamllint".into()],
            env: EnvAccess::new(Vec::new(), Vec::new()),
            sandbox: Arc::new(Sandbox::new(mode, &[], &data)),
        };
        let mut samples = Vec::new();
        for _ in 0..RUNS {
            let copy = validators::prepare(&workspace, &changes, &CopyLimits::default()).unwrap();
            let started = Instant::now();
            let results = validators::run(&copy, &changes, std::slice::from_ref(&spec), &policy, scope).await;
            samples.push(started.elapsed());
            assert_eq!(results[0].status, ValidatorStatus::Passed, "{}", results[0].output);
        }
        println!("  sandbox {}: {}", mode.as_str(), policy.sandbox.describe());
        report(&format!("validators::run, sandbox {}", mode.as_str()), &mut samples);
    }
}
