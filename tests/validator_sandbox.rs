//! Attacks on the validator sandbox (docs/architecture.md, `change::sandbox`): what a
//! validator, or a file the model wrote for one to execute, tries against the host. Each test runs real
//! programs through `validators::run` in the default sandbox (Landlock, the network
//! filter, the process controls) and checks the host afterwards.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use akritas::catalog::secrets::EnvAccess;
use akritas::change::sandbox::{Sandbox, SandboxMode};
use akritas::change::validators::{self, CopyLimits, Scope, ValidatorPolicy};
use akritas::change::{FileChange, Operation, ValidatorResult, ValidatorSpec, ValidatorStatus};
use akritas_testkit::attack::processes_under;
use tokio_util::sync::CancellationToken;

struct Fixture {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    data: PathBuf,
}

/// A workspace with one YAML file, and a data directory holding a journal line.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("app.yaml"), "replicas: 1\n").unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("audit")).unwrap();
    std::fs::write(data.join("audit/akritas.jsonl"), "{\"secret\":\"journal-marker-5f2c\"}\n").unwrap();
    Fixture { _dir: dir, workspace, data }
}

fn policy(data: &Path, commands: &[&str]) -> ValidatorPolicy {
    ValidatorPolicy {
        commands: commands.iter().map(|c| c.to_string()).collect(),
        env: EnvAccess::new(Vec::new(), Vec::new()),
        sandbox: Arc::new(Sandbox::new(SandboxMode::Landlock, &[], data)),
    }
}

fn spec(argv: &[&str], timeout: Duration) -> ValidatorSpec {
    ValidatorSpec {
        name: "attack".into(),
        argv: argv.iter().map(|a| a.to_string()).collect(),
        files: vec!["**".into()],
        timeout,
        output_limit: 64 * 1024,
        env: Vec::new(),
        full_tree: true,
    }
}

/// `namespace` previewing its own Workspace, never abandoned.
fn scope(namespace: &'static str) -> Scope<'static> {
    static NEVER: std::sync::OnceLock<CancellationToken> = std::sync::OnceLock::new();
    Scope { workspace: namespace, requester: namespace, cancel: NEVER.get_or_init(CancellationToken::new) }
}

fn edit() -> FileChange {
    FileChange {
        path: "app.yaml".into(),
        operation: Operation::Replace,
        before: Some("replicas: 1\n".into()),
        after: "replicas: 2\n".into(),
        mode: 0o644,
    }
}

/// Runs `script` with `sh -c` on a copy of the fixture's workspace; also returns the
/// copy's path (removed by then).
async fn attack(fixture: &Fixture, script: &str, timeout: Duration) -> (ValidatorResult, PathBuf) {
    let changes = [edit()];
    let copy = validators::prepare(&fixture.workspace, &changes, &CopyLimits::default()).unwrap();
    let path = copy.path().to_path_buf();
    let policy = policy(&fixture.data, &["sh"]);
    let mut results =
        validators::run(&copy, &changes, &[spec(&["sh", "-c", script], timeout)], &policy, scope("default")).await;
    // Nothing may still run in the copy once the run has returned.
    assert_eq!(processes_under(&path), Vec::<u32>::new(), "processes outlived the validator");
    (results.remove(0), path)
}

#[tokio::test]
async fn a_validator_cannot_read_the_hosts_environment_or_the_data_directory() {
    let fixture = fixture();
    // The host's own environment (cargo sets CARGO_MANIFEST_DIR for the test process),
    // the supervisor's (a fork of the host), every other process's, and the journals.
    let script = format!(
        "cat /proc/{host}/environ; cat /proc/$PPID/environ; for p in /proc/[0-9]*; do cat $p/environ; done; \
         cat {data}/audit/akritas.jsonl; ls {data}; read line < /proc/self/status; echo \"$line\"; echo end",
        host = std::process::id(),
        data = fixture.data.display()
    );
    let (result, _) = attack(&fixture, &script, Duration::from_secs(30)).await;
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    assert!(!result.output.contains("CARGO_MANIFEST_DIR"), "the host's environment leaked: {}", result.output);
    assert!(!result.output.contains("journal-marker-5f2c"), "the data directory leaked: {}", result.output);
    assert!(result.output.contains("Permission denied"), "{}", result.output);
    // What the program needs of itself stays readable (its own /proc entry).
    assert!(result.output.contains("Name:\tsh"), "{}", result.output);
    assert!(result.output.ends_with("end\n"), "{}", result.output);
}

#[tokio::test]
async fn a_validator_cannot_connect_to_a_port_of_the_host() {
    let fixture = fixture();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "/usr/bin/python3 -c \"import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\nexcept OSError as e: print('tcp', e)\ntry:\n socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {port})); print('sent')\nexcept OSError as e: print('udp', e)\""
    );
    let (result, _) = attack(&fixture, &script, Duration::from_secs(30)).await;
    assert!(result.output.contains("tcp [Errno 13] Permission denied"), "{}", result.output);
    assert!(result.output.contains("udp [Errno 13] Permission denied"), "{}", result.output);
    assert!(!result.output.contains("connected") && !result.output.contains("sent"), "{}", result.output);
    assert!(matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "a connection arrived");
}

#[tokio::test]
async fn a_validator_cannot_write_outside_its_copy() {
    let fixture = fixture();
    let outside = std::env::temp_dir().join(format!("akritas-escape-{}", std::process::id()));
    let script = format!(
        "echo x > {outside}; echo x > {workspace}/escaped; echo x > {data}/audit/akritas.jsonl; \
         echo ok > written-in-copy && echo ok > $HOME/h && echo ok > $TMPDIR/t && cat written-in-copy $HOME/h $TMPDIR/t",
        outside = outside.display(),
        workspace = fixture.workspace.display(),
        data = fixture.data.display()
    );
    let (result, _) = attack(&fixture, &script, Duration::from_secs(30)).await;
    assert!(!outside.exists(), "wrote {}", outside.display());
    assert!(!fixture.workspace.join("escaped").exists(), "wrote into the workspace");
    let journal = std::fs::read_to_string(fixture.data.join("audit/akritas.jsonl")).unwrap();
    assert!(journal.contains("journal-marker-5f2c"), "the journal was overwritten");
    assert_eq!(result.output.matches("Permission denied").count(), 3, "{}", result.output);
    // The copy, HOME and TMPDIR stay writable.
    assert!(result.output.ends_with("ok\nok\nok\n"), "{}", result.output);
    assert_eq!(result.status, ValidatorStatus::Passed, "{}", result.output);
}

#[tokio::test]
async fn a_setsid_child_does_not_outlive_its_validator() {
    let fixture = fixture();
    let (result, _) = attack(&fixture, "setsid sleep 600 & echo $!", Duration::from_secs(30)).await;
    assert_eq!(result.status, ValidatorStatus::Passed, "{}", result.output);
    let pid = result.output.trim();
    assert!(!pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()), "{}", result.output);
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the setsid child {pid} survived");
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_killed_at_the_timeout() {
    let fixture = fixture();
    let (result, _) = attack(&fixture, "f() { f | f & }; f; sleep 600", Duration::from_secs(3)).await;
    assert_eq!(result.status, ValidatorStatus::Failed);
    assert!(result.output.contains("validator timed out after 3s"), "{}", result.output);
    // The process limit stopped it: forks failed.
    assert!(result.output.contains("fork") || result.output.contains("Resource"), "{}", result.output);
}

#[tokio::test]
async fn a_program_not_on_validator_commands_is_refused_without_running() {
    let fixture = fixture();
    let changes = [edit()];
    let copy = validators::prepare(&fixture.workspace, &changes, &CopyLimits::default()).unwrap();
    let marker = fixture.data.parent().unwrap().join("ran");
    let script = fixture.data.parent().unwrap().join("tenant.sh");
    std::fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let policy = policy(&fixture.data, &["yamllint"]);
    // A tenant's `sh -c env` with the upstream key asked through.
    let mut env = spec(&["sh", "-c", "env"], Duration::from_secs(10));
    env.env = vec!["OPENAI_API_KEY".into()];
    let tenant = spec(&[script.to_str().unwrap()], Duration::from_secs(10));
    let results = validators::run(&copy, &changes, &[env, tenant], &policy, scope("team-b")).await;
    for result in &results {
        assert_eq!(result.status, ValidatorStatus::Failed);
        assert!(
            result.output.contains("is not allowed: the validator_commands setting allows yamllint"),
            "{}",
            result.output
        );
    }
    assert!(!marker.exists(), "the refused program ran");
    // Allowed as a program, the environment name is still refused.
    let policy = policy_with_sh(&fixture.data);
    let mut env = spec(&["sh", "-c", "env"], Duration::from_secs(10));
    env.env = vec!["OPENAI_API_KEY".into()];
    let refusal = policy.check("team-b", &env.argv, &env.env).unwrap_err();
    assert_eq!(refusal.reason, "EnvNotAllowed");
    assert!(refusal.message.contains("\"OPENAI_API_KEY\" may not be passed to validators"), "{}", refusal.message);
}

fn policy_with_sh(data: &Path) -> ValidatorPolicy {
    ValidatorPolicy {
        commands: vec!["sh".into()],
        // `OPENAI_API_KEY` is the service's upstream key here: never allowed, whatever the patterns.
        env: EnvAccess::new(vec!["*".into()], vec!["OPENAI_API_KEY".into()]),
        sandbox: Arc::new(Sandbox::new(SandboxMode::Landlock, &[], data)),
    }
}
