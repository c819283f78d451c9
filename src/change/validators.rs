//! Running ValidatorProfiles on an isolated copy of a workspace with a change applied.
//!
//! [`prepare`] copies the workspace tree (without version-control and build directories,
//! symlinks and secret-looking files) into a private temporary directory and overlays
//! the changed files; [`run`] runs each profile there, in order, as a plain program (never
//! a shell) that the [`ValidatorPolicy`] allows, in the [`super::sandbox`], with a
//! scrubbed environment, a wall-time limit that kills the whole process tree, and one
//! bounded, masked output buffer.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use tokio_util::sync::CancellationToken;

pub use super::copy::{CopyError, CopyLimits, IsolatedCopy, prepare, prepare_changed_only, prepare_in};
use super::sandbox::{self, Ending, Sandbox};
use super::{FileChange, ValidatorResult, ValidatorSpec, ValidatorStatus};

/// Marker appended to output cut at the profile's limit.
const TRUNCATED: &str = "\n<output truncated by Akritas>";

/// The changed paths a profile's globs match, in the order given.
fn matching(spec: &ValidatorSpec, changes: &[FileChange]) -> Result<Vec<String>, String> {
    let mut set = GlobSetBuilder::new();
    for pattern in &spec.files {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("file glob {pattern:?} is invalid ({e}); fix the ValidatorProfile's files"))?;
        set.add(glob);
    }
    let set: GlobSet = set.build().map_err(|e| format!("file globs are invalid ({e}); fix the ValidatorProfile"))?;
    Ok(changes.iter().filter(|c| set.is_match(&c.path)).map(|c| c.path.clone()).collect())
}

/// `program` as an executable file: a path containing `/` as is, else looked up in `PATH`.
pub fn resolve(program: &str, path: Option<&OsString>) -> Option<PathBuf> {
    let executable = |p: &Path| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    if program.is_empty() {
        return None;
    }
    std::env::split_paths(path?).map(|dir| dir.join(program)).find(|p| p.is_absolute() && executable(p))
}

/// What validators may run and read, from the settings (never from a resource):
/// `validator_commands`, `validator_env` and the sandbox.
#[derive(Clone, Debug)]
pub struct ValidatorPolicy {
    /// Programs a ValidatorProfile may name as `argv[0]`: a bare name (found on the
    /// service's `PATH`) or an absolute path, compared literally.
    pub commands: Vec<String>,
    /// Host environment variables a profile's `env` may pass through.
    pub env: crate::catalog::secrets::EnvAccess,
    /// Where the programs run.
    pub sandbox: Arc<Sandbox>,
}

/// Why a profile's program may not run: a condition reason and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Condition reason (`CommandNotAllowed`, `EnvNotAllowed`, `SandboxUnavailable`,
    /// `ProgramNotFound`).
    pub reason: &'static str,
    /// What was refused and how to allow it.
    pub message: String,
}

impl ValidatorPolicy {
    /// The program a profile runs, resolved, when the policy allows it and its
    /// environment names; else why not. Nothing is executed.
    pub fn check(&self, namespace: &str, argv: &[String], env: &[String]) -> Result<PathBuf, Refusal> {
        use crate::catalog::readiness::reasons;
        let refuse = |reason, message| Err(Refusal { reason, message });
        let program = argv.first().map_or("", String::as_str);
        if !self.commands.iter().any(|allowed| allowed == program) {
            let allowed = if self.commands.is_empty() { "nothing".to_string() } else { self.commands.join(", ") };
            return refuse(
                reasons::COMMAND_NOT_ALLOWED,
                format!(
                    "validator program {program:?} is not allowed: the validator_commands setting allows {allowed}; an operator adds it there (a bare name is looked up on the service's PATH)"
                ),
            );
        }
        self.check_env(namespace, env)?;
        if let Some(why) = self.sandbox.refusal() {
            return refuse(reasons::SANDBOX_UNAVAILABLE, format!("validators cannot run: {why}"));
        }
        let Some(resolved) = resolve(program, std::env::var_os("PATH").as_ref()) else {
            return refuse(
                reasons::PROGRAM_NOT_FOUND,
                format!(
                    "validator program {program:?} was not found on PATH or is not executable; install it on the host or fix the ValidatorProfile's argv"
                ),
            );
        };
        if !self.sandbox.reaches(&resolved) {
            let paths: Vec<String> = self.sandbox.read_paths().iter().map(|p| p.display().to_string()).collect();
            return refuse(
                reasons::PROGRAM_NOT_FOUND,
                format!(
                    "validator program {} is outside the directories the sandbox lets validators read ({}); install it there or add its directory to validator_read_paths",
                    resolved.display(),
                    paths.join(", ")
                ),
            );
        }
        Ok(resolved)
    }

    /// Whether `validator_env` lets validators of `namespace` receive every name of `env`.
    pub fn check_env(&self, namespace: &str, env: &[String]) -> Result<(), Refusal> {
        match env.iter().find(|name| self.env.check_in(namespace, name).is_err()) {
            None => Ok(()),
            Some(name) => Err(Refusal {
                reason: crate::catalog::readiness::reasons::ENV_NOT_ALLOWED,
                message: format!(
                    "environment variable {name:?} may not be passed to validators of namespace {namespace}: the validator_env setting does not allow it (the service's own credentials are never allowed)"
                ),
            }),
        }
    }

    /// The environment of a validator: `PATH` (the service's), `HOME`, `TMPDIR`,
    /// `LANG=C.UTF-8` and the allowed names that are set.
    fn environment(&self, namespace: &str, names: &[String], home: &Path, tmp: &Path) -> Vec<(String, OsString)> {
        let mut env = Vec::new();
        if let Some(path) = std::env::var_os("PATH") {
            env.push(("PATH".to_string(), path));
        }
        env.push(("HOME".to_string(), home.as_os_str().to_owned()));
        env.push(("TMPDIR".to_string(), tmp.as_os_str().to_owned()));
        env.push(("LANG".to_string(), OsString::from("C.UTF-8")));
        for name in names.iter().filter(|name| self.env.check_in(namespace, name).is_ok()) {
            if let Some(value) = std::env::var_os(name) {
                env.push((name.clone(), value));
            }
        }
        env
    }
}

fn skipped(spec: &ValidatorSpec) -> ValidatorResult {
    ValidatorResult {
        name: spec.name.clone(),
        status: ValidatorStatus::Skipped,
        files: Vec::new(),
        command: Vec::new(),
        exit_code: None,
        output: format!("no changed file matches {}", spec.files.join(", ")),
        truncated: false,
        duration_ms: 0,
    }
}

fn failed(spec: &ValidatorSpec, files: Vec<String>, command: Vec<String>, output: String) -> ValidatorResult {
    ValidatorResult {
        name: spec.name.clone(),
        status: ValidatorStatus::Failed,
        files,
        command,
        exit_code: None,
        output,
        truncated: false,
        duration_ms: 0,
    }
}

/// Masks credentials and secret values in validator output.
fn mask(text: &str) -> String {
    crate::kubernetes::redact::mask_text(text).0
}

/// Whose validators run, for whom, and until when.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// The Workspace's namespace.
    pub workspace: &'a str,
    /// The namespace of whoever asked for the preview: a name `validator_env` passes
    /// must be allowed for both (a tenant previewing a shared namespace's Workspace gets
    /// none of that namespace's own variables).
    pub requester: &'a str,
    /// Fires when the preview is abandoned (its client went away): the running
    /// validator's tree is killed and the rest are not started.
    pub cancel: &'a CancellationToken,
}

/// Most entries a validator may leave in its copy and scratch directories (a tree past
/// any of these bounds fails the validator).
const LEFT_ENTRIES: u64 = 200_000;
/// Deepest directory a validator may leave there.
const LEFT_DEPTH: u64 = 256;

/// Runs every profile in `specs` on `copy`, in order, in the policy's sandbox; a failure
/// does not stop the ones after it, so the reviewer sees every result. A profile runs
/// when one of its `files` globs matches a changed path, else it is skipped; a profile
/// the policy refuses (for the scope's namespaces) fails with the reason and runs
/// nothing. Values passed in from the environment never appear in a result.
pub async fn run(
    copy: &IsolatedCopy,
    changes: &[FileChange],
    specs: &[ValidatorSpec],
    policy: &ValidatorPolicy,
    scope: Scope<'_>,
) -> Vec<ValidatorResult> {
    let mut results = Vec::with_capacity(specs.len());
    for spec in specs {
        let started = Instant::now();
        let mut result = if scope.cancel.is_cancelled() {
            failed(spec, Vec::new(), Vec::new(), "validator was not started: the preview was abandoned".into())
        } else {
            run_one(copy, changes, spec, policy, scope).await
        };
        if result.status != ValidatorStatus::Skipped {
            result.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        }
        results.push(result);
    }
    results
}

/// Values shorter than this, passed in from the environment, are not masked (masking
/// `1` would garble every number in the output).
const MASKED_MIN_CHARS: usize = 4;

/// Longest wait for a validator's `--version`.
const VERSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The first line of `program --version`, run in the sandbox on an empty copy (bounded
/// in time and size), or `None` when it prints nothing or fails: not every validator
/// has a `--version`, which says nothing about whether it can validate. `Err` when it
/// cannot be started at all.
pub async fn version(policy: &ValidatorPolicy, name: &str, program: &Path) -> Result<Option<String>, String> {
    let copy = tokio::task::spawn_blocking(|| prepare_changed_only(&[], &CopyLimits::default()))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let scratch = copy.scratch().map_err(|e| format!("cannot create a scratch directory: {e}"))?;
    let (home, tmp) = (scratch.path.join("home"), scratch.path.join("tmp"));
    let request = sandbox::Request {
        program: program.to_path_buf(),
        argv: vec![name.to_string(), "--version".to_string()],
        cwd: copy.path().to_path_buf(),
        env: policy.environment("", &[], &home, &tmp),
        writable: vec![home, tmp],
        root: copy.base.path.clone(),
        timeout: VERSION_TIMEOUT,
        output_limit: 4096,
    };
    let outcome = policy.sandbox.run(request, &CancellationToken::new()).await?;
    if let Ending::NotStarted { step, errno } = outcome.ending {
        let error = std::io::Error::from_raw_os_error(errno);
        return Err(format!("{} cannot be started ({}): {error}", program.display(), step.describe()));
    }
    let text = String::from_utf8_lossy(&outcome.output);
    Ok(text.lines().map(str::trim).find(|l| !l.is_empty()).map(|l| crate::text::prefix_chars(l, 256).to_string()))
}

/// A changed path as a program argument: never mistaken for an option.
fn argument(path: &str) -> String {
    if path.starts_with('-') { format!("./{path}") } else { path.to_owned() }
}

async fn run_one(
    copy: &IsolatedCopy,
    changes: &[FileChange],
    spec: &ValidatorSpec,
    policy: &ValidatorPolicy,
    scope: Scope<'_>,
) -> ValidatorResult {
    let files = match matching(spec, changes) {
        Ok(files) if files.is_empty() => return skipped(spec),
        Ok(files) => files,
        Err(message) => return failed(spec, Vec::new(), Vec::new(), message),
    };
    let command: Vec<String> = spec
        .argv
        .iter()
        .flat_map(|arg| if arg == "{files}" { files.iter().map(|f| argument(f)).collect() } else { vec![arg.clone()] })
        .collect();
    let checked = policy.check(scope.workspace, &spec.argv, &spec.env).and_then(|program| {
        policy.check_env(scope.requester, &spec.env)?;
        Ok(program)
    });
    let program = match checked {
        Ok(program) => program,
        Err(refusal) => return failed(spec, files, command, refusal.message),
    };
    let scratch = match copy.scratch() {
        Ok(scratch) => scratch,
        Err(e) => return failed(spec, files, command, format!("cannot create the validator's scratch directory: {e}")),
    };
    let (home, tmp) = (scratch.path.join("home"), scratch.path.join("tmp"));
    let env = policy.environment(scope.workspace, &spec.env, &home, &tmp);
    // The values a profile asked for: masked wherever the output goes (answer, audit,
    // approvals), whether or not they look like secrets.
    let passed: Vec<String> = env
        .iter()
        .filter(|(name, _)| spec.env.contains(name))
        .map(|(_, value)| value.to_string_lossy().into_owned())
        .filter(|value| value.chars().count() >= MASKED_MIN_CHARS)
        .collect();
    let request = sandbox::Request {
        program,
        argv: command.clone(),
        cwd: copy.path().to_path_buf(),
        env,
        writable: vec![home, tmp],
        root: copy.base.path.clone(),
        timeout: spec.timeout,
        output_limit: spec.output_limit,
    };
    let outcome = match policy.sandbox.run(request, scope.cancel).await {
        Ok(outcome) => outcome,
        Err(why) => return failed(spec, files, command, format!("validator could not run: {why}")),
    };
    let bounds = super::tree::Bounds { entries: LEFT_ENTRIES, bytes: u64::MAX, depth: LEFT_DEPTH };
    let left = copy.size(&bounds);
    let _ = tokio::task::spawn_blocking(move || drop(scratch)).await;
    let mut output = String::from_utf8_lossy(&outcome.output).into_owned();
    if outcome.truncated {
        output.push_str(TRUNCATED);
    }
    let mut append = |line: String| {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&line);
    };
    let exit_code = match outcome.ending {
        Ending::Exited(code) => Some(code),
        Ending::Signaled(signal) => {
            append(format!("validator was killed by signal {signal}"));
            None
        }
        Ending::TimedOut => {
            append(format!("validator timed out after {}s", spec.timeout.as_secs_f64()));
            None
        }
        Ending::Stopped if scope.cancel.is_cancelled() => {
            append("validator was stopped: the preview was abandoned (its client went away)".to_owned());
            None
        }
        Ending::Stopped => {
            append("validator was stopped: the host is shutting down".to_owned());
            None
        }
        Ending::NotStarted { step, errno } => {
            let error = std::io::Error::from_raw_os_error(errno);
            append(format!("validator program could not start ({}): {error}", step.describe()));
            None
        }
    };
    let overflowed = match left {
        Ok(size) if size.exceeds(&bounds) => {
            append(format!(
                "validator left more than {LEFT_ENTRIES} entries or directories deeper than {LEFT_DEPTH} levels in its copy; the copy was removed"
            ));
            true
        }
        Ok(_) => false,
        Err(error) => {
            append(format!("the validator's copy could not be measured afterwards: {error}"));
            true
        }
    };
    let mut output = mask(&output);
    for value in &passed {
        output = output.replace(value.as_str(), "[redacted]");
    }
    ValidatorResult {
        name: spec.name.clone(),
        status: if exit_code == Some(0) && !overflowed { ValidatorStatus::Passed } else { ValidatorStatus::Failed },
        files,
        command,
        exit_code,
        output,
        truncated: outcome.truncated,
        duration_ms: 0,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::time::Duration;

    use super::*;
    use crate::change::Operation;

    fn change(path: &str, after: &str, mode: u32) -> FileChange {
        FileChange { path: path.into(), operation: Operation::Replace, before: None, after: after.into(), mode }
    }

    #[test]
    fn a_changed_files_copy_holds_only_the_changes() {
        let changes = vec![FileChange {
            path: "deploy/app.yaml".into(),
            operation: crate::change::Operation::Replace,
            before: Some("a: 1\n".into()),
            after: "a: 2\n".into(),
            mode: 0o640,
        }];
        let copy = prepare_changed_only(&changes, &CopyLimits::default()).unwrap();
        let written = copy.path().join("deploy/app.yaml");
        assert_eq!(fs::read_to_string(&written).unwrap(), "a: 2\n");
        assert_eq!(fs::metadata(&written).unwrap().permissions().mode() & 0o777, 0o640);
        assert_eq!(fs::read_dir(copy.path()).unwrap().count(), 1, "nothing but the changed file's directory");
        let dir = copy.path().to_path_buf();
        drop(copy);
        assert!(!dir.exists(), "removed on drop");
    }

    fn spec(name: &str, argv: &[&str], files: &[&str]) -> ValidatorSpec {
        ValidatorSpec {
            name: name.into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            files: files.iter().map(|s| s.to_string()).collect(),
            timeout: Duration::from_secs(30),
            output_limit: 64 * 1024,
            full_tree: true,
            env: Vec::new(),
        }
    }

    /// The default namespace previewing its own Workspace, never abandoned.
    fn scope() -> Scope<'static> {
        static NEVER: std::sync::OnceLock<CancellationToken> = std::sync::OnceLock::new();
        Scope { workspace: "default", requester: "default", cancel: NEVER.get_or_init(CancellationToken::new) }
    }

    /// A policy allowing `commands`, `CARGO_PKG_NAME` through, in the default sandbox.
    pub(crate) fn policy(commands: &[&str]) -> ValidatorPolicy {
        let data = std::env::temp_dir().join("akritas-validators-test-data");
        ValidatorPolicy {
            commands: commands.iter().map(|c| c.to_string()).collect(),
            env: crate::catalog::secrets::EnvAccess::new(
                vec!["CARGO_PKG_NAME".into(), "AKRITAS_VALIDATOR_TEST_*".into()],
                Vec::new(),
            ),
            sandbox: Arc::new(Sandbox::new(sandbox::SandboxMode::Landlock, &[], &data)),
        }
    }

    fn workspace() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("src/deep")).unwrap();
        fs::write(root.join("src/a.yaml"), "a: 1\n").unwrap();
        fs::write(root.join("src/deep/run.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(root.join("src/deep/run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
        for skipped in [".git", "node_modules", "target", "build"] {
            fs::create_dir_all(root.join(skipped)).unwrap();
            fs::write(root.join(skipped).join("x"), "skip").unwrap();
        }
        fs::create_dir_all(root.join("vendor")).unwrap();
        fs::write(root.join("vendor/lib.txt"), "kept").unwrap();
        for secret in [".env", ".env.prod", "id_rsa", "tls.key", "cert.pem"] {
            fs::write(root.join(secret), "secret").unwrap();
        }
        symlink("/etc/passwd", root.join("outside")).unwrap();
        dir
    }

    #[test]
    fn copy_skips_vcs_build_dirs_symlinks_and_secrets_keeps_modes_and_overlays_changes() {
        let ws = workspace();
        let scratch = tempfile::tempdir().unwrap();
        let changes =
            [change("src/a.yaml", "a: 2\n", 0o640), change("src/new/b.yaml", "b: 1\n", 0o644), change("-x", "", 0o644)];
        let copy = prepare_in(scratch.path(), ws.path(), &changes, &CopyLimits::default()).unwrap();
        let tree = copy.path().to_owned();
        assert_eq!(fs::read_to_string(tree.join("src/a.yaml")).unwrap(), "a: 2\n");
        assert_eq!(fs::metadata(tree.join("src/a.yaml")).unwrap().permissions().mode() & 0o777, 0o640);
        assert_eq!(fs::read_to_string(tree.join("src/new/b.yaml")).unwrap(), "b: 1\n");
        assert_eq!(fs::metadata(tree.join("src/deep/run.sh")).unwrap().permissions().mode() & 0o777, 0o750);
        assert_eq!(fs::read_to_string(tree.join("vendor/lib.txt")).unwrap(), "kept");
        for absent in
            [".git", "node_modules", "target", "build", ".env", ".env.prod", "id_rsa", "tls.key", "cert.pem", "outside"]
        {
            assert!(fs::symlink_metadata(tree.join(absent)).is_err(), "{absent} was copied");
        }
        let base = tree.parent().unwrap().to_owned();
        assert_eq!(fs::metadata(&base).unwrap().permissions().mode() & 0o777, 0o700);
        drop(copy);
        assert!(!base.exists(), "the copy is removed on drop");
    }

    #[test]
    fn copy_refuses_too_many_files_and_too_many_bytes_and_bad_paths() {
        let ws = workspace();
        let few = CopyLimits { max_files: 2, max_bytes: 1 << 20 };
        assert!(matches!(prepare(ws.path(), &[], &few), Err(CopyError::TooManyFiles { limit: 2 })));
        let small = CopyLimits { max_files: 100, max_bytes: 5 };
        let err = prepare(ws.path(), &[], &small).unwrap_err();
        assert!(matches!(err, CopyError::TooLarge { limit: 5 }));
        assert!(err.to_string().contains("move large files"), "{err}");
        let escape = [change("../x", "", 0o644)];
        assert!(matches!(prepare(ws.path(), &escape, &CopyLimits::default()), Err(CopyError::BadPath { .. })));
    }

    #[tokio::test]
    async fn profiles_run_in_order_on_the_copy_and_a_failure_does_not_stop_the_rest() {
        let ws = workspace();
        let changes = [change("src/a.yaml", "a: 2\n", 0o644)];
        let copy = prepare(ws.path(), &changes, &CopyLimits::default()).unwrap();
        let specs = [
            spec("fails", &["sh", "-c", "echo broken >&2; exit 3"], &["**"]),
            spec("cat", &["cat", "{files}"], &["src/*.yaml"]),
            spec("go", &["go", "vet"], &["*.go"]),
            spec("top-level-only", &["true"], &["*.yaml"]),
        ];
        let results = run(&copy, &changes, &specs, &policy(&["sh", "cat", "go", "true"]), scope()).await;
        assert_eq!(results.len(), 4);
        assert_eq!(results[0].status, ValidatorStatus::Failed);
        assert_eq!(results[0].exit_code, Some(3));
        assert_eq!(results[0].output, "broken\n");
        assert_eq!(results[1].status, ValidatorStatus::Passed);
        assert_eq!(results[1].command, ["cat", "src/a.yaml"]);
        assert_eq!(results[1].files, ["src/a.yaml"]);
        assert_eq!(results[1].output, "a: 2\n", "the validator reads the changed copy");
        assert_eq!(results[2].status, ValidatorStatus::Skipped);
        assert_eq!(results[2].output, "no changed file matches *.go");
        // `*` does not cross `/`.
        assert_eq!(results[3].status, ValidatorStatus::Skipped);
    }

    #[tokio::test]
    async fn environment_is_scrubbed_and_home_is_outside_the_copy() {
        let ws = workspace();
        let changes = [change("src/a.yaml", "a: 2\n", 0o644)];
        let copy = prepare(ws.path(), &changes, &CopyLimits::default()).unwrap();
        // Cargo sets these for the test process; one is allowed through, the other not.
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some() && std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let mut env = spec("env", &["env"], &["**"]);
        env.env = vec!["CARGO_PKG_NAME".into(), "AKRITAS_VALIDATOR_TEST_UNSET".into()];
        let results = run(&copy, &changes, &[env], &policy(&["env"]), scope()).await;
        let mut names: Vec<&str> = results[0].output.lines().filter_map(|l| l.split('=').next()).collect();
        names.sort();
        assert_eq!(names, ["CARGO_PKG_NAME", "HOME", "LANG", "PATH", "TMPDIR"]);
        // The value passed in is masked wherever it appears, even inside a path.
        let value = std::env::var("CARGO_PKG_NAME").unwrap();
        assert!(results[0].output.contains("CARGO_PKG_NAME=[redacted]\n"), "{}", results[0].output);
        assert!(!results[0].output.contains(&value), "{}", results[0].output);
        let masked = |p: &Path| PathBuf::from(p.to_string_lossy().replace(&value, "[redacted]"));
        let home = results[0].output.lines().find_map(|l| l.strip_prefix("HOME=")).unwrap();
        assert!(!Path::new(home).starts_with(masked(copy.path())), "HOME {home} is inside the copy");
        assert!(Path::new(home).starts_with(masked(copy.path().parent().unwrap())));
        assert!(results[0].output.contains("LANG=C.UTF-8"));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_process_tree() {
        let ws = workspace();
        let changes = [change("src/a.yaml", "a: 2\n", 0o644)];
        let copy = prepare(ws.path(), &changes, &CopyLimits::default()).unwrap();
        let mut slow = spec("slow", &["sh", "-c", "sleep 300 & echo $!; wait"], &["**"]);
        slow.timeout = Duration::from_secs(1);
        let results = run(&copy, &changes, &[slow], &policy(&["sh"]), scope()).await;
        assert_eq!(results[0].status, ValidatorStatus::Failed);
        assert_eq!(results[0].exit_code, None);
        let (grandchild, rest) = results[0].output.split_once('\n').unwrap();
        assert_eq!(rest, "validator timed out after 1s");
        // Killed and reaped by the supervisor.
        assert!(!Path::new(&format!("/proc/{grandchild}")).exists(), "the grandchild {grandchild} survived");
    }

    #[tokio::test]
    async fn output_is_capped_and_the_child_is_not_blocked() {
        let ws = workspace();
        let changes = [change("src/a.yaml", "a: 2\n", 0o644)];
        let copy = prepare(ws.path(), &changes, &CopyLimits::default()).unwrap();
        let mut noisy =
            spec("noisy", &["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' a; echo done >&2; exit 1"], &["**"]);
        noisy.output_limit = 1000;
        let results = run(&copy, &changes, &[noisy], &policy(&["sh"]), scope()).await;
        let result = &results[0];
        assert_eq!(result.exit_code, Some(1), "the child ran to its end");
        assert!(result.truncated);
        assert_eq!(result.output, format!("{}{TRUNCATED}", "a".repeat(1000)));
    }

    #[tokio::test]
    async fn missing_program_fails_clearly_and_secrets_in_output_are_masked() {
        let ws = workspace();
        let changes = [change("src/a.yaml", "a: 2\n", 0o644)];
        let copy = prepare(ws.path(), &changes, &CopyLimits::default()).unwrap();
        let specs = [
            spec("missing", &["akritas-no-such-validator", "{files}"], &["**"]),
            spec("leaky", &["sh", "-c", "echo password=hunter22 token: abcdef123"], &["**"]),
        ];
        let results = run(&copy, &changes, &specs, &policy(&["akritas-no-such-validator", "sh"]), scope()).await;
        assert_eq!(results[0].status, ValidatorStatus::Failed);
        assert!(
            results[0].output.contains("\"akritas-no-such-validator\" was not found on PATH"),
            "{}",
            results[0].output
        );
        assert_eq!(results[0].command, ["akritas-no-such-validator", "src/a.yaml"]);
        assert!(!results[1].output.contains("hunter22"), "{}", results[1].output);
        assert!(!results[1].output.contains("abcdef123"), "{}", results[1].output);
        assert!(results[1].output.contains("[redacted]"));
    }

    #[test]
    fn a_changed_path_is_never_an_option() {
        assert_eq!(argument("-rf"), "./-rf");
        assert_eq!(argument("src/a.yaml"), "src/a.yaml");
    }
}
