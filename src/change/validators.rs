//! Running ValidatorProfiles on an isolated copy of a workspace with a change applied.
//!
//! [`prepare`] copies the workspace tree (without version-control and build directories,
//! symlinks and secret-looking files) into a private temporary directory and overlays
//! the changed files; [`run`] runs each profile there, in order, as a plain program (never
//! a shell) with a scrubbed environment, a wall-time limit that kills the whole process
//! group, and one bounded, masked output buffer.

use std::ffi::OsString;
use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{FileChange, ValidatorResult, ValidatorSpec, ValidatorStatus};

/// Directories never copied (version control, dependencies, build output, caches).
const SKIPPED_DIRS: &[&str] = &[".git", ".hg", ".svn", "node_modules", "dist", "build", ".cache", "target"];

/// Marker appended to output cut at the profile's limit.
const TRUNCATED: &str = "\n<output truncated by Akritas>";

/// Bounds of the isolated copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyLimits {
    /// Most files copied.
    pub max_files: usize,
    /// Most bytes copied.
    pub max_bytes: u64,
}

impl Default for CopyLimits {
    fn default() -> Self {
        CopyLimits { max_files: 20_000, max_bytes: 256 << 20 }
    }
}

/// Why the isolated copy could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The workspace holds more files than a validator copy may.
    #[error(
        "the workspace has more than {limit} files to copy for validators; move generated or vendored files out of it or into a skipped directory (.git, node_modules, dist, build, .cache, target)"
    )]
    TooManyFiles {
        /// The file limit.
        limit: usize,
    },
    /// The workspace holds more bytes than a validator copy may.
    #[error(
        "the workspace holds more than {limit} bytes to copy for validators; move large files out of it or into a skipped directory (.git, node_modules, dist, build, .cache, target)"
    )]
    TooLarge {
        /// The byte limit.
        limit: u64,
    },
    /// A file or directory could not be read or written.
    #[error("cannot prepare the validator copy at {}: {error}; check the workspace's permissions and the temporary directory's free space", path.display())]
    Io {
        /// The path concerned.
        path: PathBuf,
        /// What failed.
        error: io::Error,
    },
    /// A changed path is not a relative path inside the workspace.
    #[error("changed path {path:?} is not a relative path inside the workspace")]
    BadPath {
        /// The path as given.
        path: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> CopyError + '_ {
    move |error| CopyError::Io { path: path.to_owned(), error }
}

/// A private temporary directory (mode 0700), removed with everything in it on drop.
#[derive(Debug)]
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `<parent>/<prefix><32 random hex>`.
    fn new(parent: &Path, prefix: &str) -> io::Result<TempDir> {
        let path = parent.join(format!("{prefix}{:032x}", rand::random::<u128>()));
        DirBuilder::new().mode(0o700).create(&path)?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(error) = remove_tree(&self.path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), %error, "could not remove a validator copy");
        }
    }
}

/// Removes a tree, first making directories writable (a validator may have made one read-only).
fn remove_tree(path: &Path) -> io::Result<()> {
    if fs::remove_dir_all(path).is_ok() {
        return Ok(());
    }
    fn unlock(dir: &Path) {
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    unlock(&entry.path());
                }
            }
        }
    }
    unlock(path);
    fs::remove_dir_all(path)
}

/// A copy of a workspace with a change applied, where validators run. Removed on drop.
#[derive(Debug)]
pub struct IsolatedCopy {
    base: TempDir,
    tree: PathBuf,
}

impl IsolatedCopy {
    /// The root of the copied tree.
    pub fn path(&self) -> &Path {
        &self.tree
    }

    /// A fresh scratch directory next to the tree (not inside it), with `home` and `tmp`.
    fn scratch(&self) -> io::Result<TempDir> {
        let scratch = TempDir::new(&self.base.path, "run-")?;
        for name in ["home", "tmp"] {
            DirBuilder::new().mode(0o700).create(scratch.path.join(name))?;
        }
        Ok(scratch)
    }
}

/// Counts what is copied against the limits.
struct Budget<'a> {
    limits: &'a CopyLimits,
    files: usize,
    bytes: u64,
}

impl Budget<'_> {
    fn add(&mut self, bytes: u64) -> Result<(), CopyError> {
        self.files += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.files > self.limits.max_files {
            return Err(CopyError::TooManyFiles { limit: self.limits.max_files });
        }
        if self.bytes > self.limits.max_bytes {
            return Err(CopyError::TooLarge { limit: self.limits.max_bytes });
        }
        Ok(())
    }
}

/// Copies the regular files and directories under `from` into `to` (which exists).
fn copy_tree(from: &Path, to: &Path, budget: &mut Budget<'_>) -> Result<(), CopyError> {
    for entry in fs::read_dir(from).map_err(io_error(from))? {
        let entry = entry.map_err(io_error(from))?;
        let name = entry.file_name();
        let source = entry.path();
        // Not followed: a symlink's type is "symlink".
        let kind = entry.file_type().map_err(io_error(&source))?;
        let text = name.to_string_lossy();
        let target = to.join(&name);
        if kind.is_dir() {
            if SKIPPED_DIRS.contains(&text.as_ref()) {
                continue;
            }
            let mode = entry.metadata().map_err(io_error(&source))?.permissions().mode() & 0o7777;
            // Writable and searchable by us whatever the original says.
            DirBuilder::new().mode(0o700).create(&target).map_err(io_error(&target))?;
            copy_tree(&source, &target, budget)?;
            fs::set_permissions(&target, fs::Permissions::from_mode(mode | 0o700)).map_err(io_error(&target))?;
        } else if kind.is_file() && !super::paths::is_secret_name(&text) {
            let len = entry.metadata().map_err(io_error(&source))?.len();
            budget.add(len)?;
            // Copies the permission bits too.
            fs::copy(&source, &target).map_err(io_error(&source))?;
        }
    }
    Ok(())
}

/// The relative path of a change, checked to stay inside the tree.
fn relative(path: &str) -> Result<&Path, CopyError> {
    let rel = Path::new(path);
    let normal = !path.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if normal { Ok(rel) } else { Err(CopyError::BadPath { path: path.to_owned() }) }
}

/// Copies the workspace at `root` into a private temporary directory and writes every
/// change's `after` (with its mode) over it. Skips `.git .hg .svn node_modules dist build
/// .cache target`, symlinks, non-regular files and secret-looking names; copies file modes.
/// Blocking (the caller runs it in `spawn_blocking`).
pub fn prepare(root: &Path, changes: &[FileChange], limits: &CopyLimits) -> Result<IsolatedCopy, CopyError> {
    prepare_in(&std::env::temp_dir(), root, changes, limits)
}

/// [`prepare`] with the temporary directory created under `parent`. Blocking.
pub fn prepare_in(
    parent: &Path,
    root: &Path,
    changes: &[FileChange],
    limits: &CopyLimits,
) -> Result<IsolatedCopy, CopyError> {
    overlay(parent, Some(root), changes, limits)
}

/// A private temporary directory holding only the changed files (their final
/// content and mode, under their relative paths): for validators that read
/// nothing else (`copy: changedFiles`), so a large workspace is not copied.
/// Blocking (the caller runs it in `spawn_blocking`).
pub fn prepare_changed_only(changes: &[FileChange], limits: &CopyLimits) -> Result<IsolatedCopy, CopyError> {
    overlay(&std::env::temp_dir(), None, changes, limits)
}

/// The copy of `root` (when given) with every change written over it.
fn overlay(
    parent: &Path,
    root: Option<&Path>,
    changes: &[FileChange],
    limits: &CopyLimits,
) -> Result<IsolatedCopy, CopyError> {
    let base = TempDir::new(parent, "akritas-validate-").map_err(io_error(parent))?;
    let tree = base.path.join("tree");
    DirBuilder::new().mode(0o700).create(&tree).map_err(io_error(&tree))?;
    let mut budget = Budget { limits, files: 0, bytes: 0 };
    if let Some(root) = root {
        copy_tree(root, &tree, &mut budget)?;
    }
    for change in changes {
        let target = tree.join(relative(&change.path)?);
        if let Some(dir) = target.parent() {
            fs::create_dir_all(dir).map_err(io_error(dir))?;
        }
        if fs::symlink_metadata(&target).is_err() {
            budget.add(change.after.len() as u64)?;
        }
        fs::write(&target, change.after.as_bytes()).map_err(io_error(&target))?;
        fs::set_permissions(&target, fs::Permissions::from_mode(change.mode & 0o7777)).map_err(io_error(&target))?;
    }
    Ok(IsolatedCopy { base, tree })
}

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
fn resolve(program: &str, path: Option<&OsString>) -> Option<PathBuf> {
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

/// One output buffer shared by stdout and stderr, bounded.
#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
    truncated: bool,
}

/// Reads `reader` to its end into `capture`, keeping at most `limit` bytes in all and
/// discarding the rest (so the child never blocks on a full pipe).
async fn pump(mut reader: impl AsyncRead + Unpin, capture: Arc<Mutex<Capture>>, limit: usize) {
    let mut chunk = vec![0u8; 8192];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut capture = capture.lock().unwrap_or_else(|p| p.into_inner());
                let room = limit.saturating_sub(capture.bytes.len());
                let kept = n.min(room);
                capture.bytes.extend_from_slice(&chunk[..kept]);
                if kept < n {
                    capture.truncated = true;
                }
            }
        }
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

/// Runs every profile in `specs` on `copy`, in order; a failure does not stop the ones after
/// it, so the reviewer sees every result. A profile runs when one of its `files` globs
/// matches a changed path, else it is skipped.
pub async fn run(copy: &IsolatedCopy, changes: &[FileChange], specs: &[ValidatorSpec]) -> Vec<ValidatorResult> {
    let mut results = Vec::with_capacity(specs.len());
    for spec in specs {
        let started = Instant::now();
        let mut result = run_one(copy, changes, spec).await;
        if result.status != ValidatorStatus::Skipped {
            result.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        }
        results.push(result);
    }
    results
}

/// Kills the process group a validator leads (its own children included).
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()).filter(|p| *p > 0) {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

/// A changed path as a program argument: never mistaken for an option.
fn argument(path: &str) -> String {
    if path.starts_with('-') { format!("./{path}") } else { path.to_owned() }
}

async fn run_one(copy: &IsolatedCopy, changes: &[FileChange], spec: &ValidatorSpec) -> ValidatorResult {
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
    let host_path = std::env::var_os("PATH");
    let Some(program) = command.first().and_then(|p| resolve(p, host_path.as_ref())) else {
        let name = command.first().map_or("", String::as_str);
        let message = format!(
            "validator program {name:?} was not found on PATH or is not executable; install it on the host or fix the ValidatorProfile's argv"
        );
        return failed(spec, files, command, message);
    };
    let scratch = match copy.scratch() {
        Ok(scratch) => scratch,
        Err(e) => return failed(spec, files, command, format!("cannot create the validator's scratch directory: {e}")),
    };
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(&command[1..])
        .current_dir(copy.path())
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    if let Some(path) = &host_path {
        cmd.env("PATH", path);
    }
    for name in &spec.env {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd.env("HOME", scratch.path.join("home")).env("TMPDIR", scratch.path.join("tmp")).env("LANG", "C.UTF-8");
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return failed(spec, files, command, format!("validator program {program:?} could not start: {e}")),
    };
    let pid = child.id();
    let capture = Arc::new(Mutex::new(Capture::default()));
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let limit = spec.output_limit;
    let outcome = tokio::time::timeout(spec.timeout, async {
        let out = async {
            if let Some(s) = stdout {
                pump(s, capture.clone(), limit).await;
            }
        };
        let err = async {
            if let Some(s) = stderr {
                pump(s, capture.clone(), limit).await;
            }
        };
        let wait = async {
            let status = child.wait().await;
            // What the validator left running would hold the pipes open.
            kill_group(pid);
            status
        };
        let (status, (), ()) = tokio::join!(wait, out, err);
        status
    })
    .await;
    let timed_out = outcome.is_err();
    let status = match outcome {
        Ok(status) => status.ok(),
        Err(_) => {
            kill_group(pid);
            let _ = child.kill().await;
            None
        }
    };
    let captured = std::mem::take(&mut *capture.lock().unwrap_or_else(|p| p.into_inner()));
    let mut output = String::from_utf8_lossy(&captured.bytes).into_owned();
    if captured.truncated {
        output.push_str(TRUNCATED);
    }
    let exit_code = status.and_then(|s| s.code());
    let mut append = |line: String| {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&line);
    };
    if timed_out {
        append(format!("validator timed out after {}s", spec.timeout.as_secs_f64()));
    } else if let Some(signal) = status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s)) {
        append(format!("validator was killed by signal {signal}"));
    } else if status.is_none() {
        append("could not wait for the validator process".to_owned());
    }
    drop(scratch);
    ValidatorResult {
        name: spec.name.clone(),
        status: if !timed_out && exit_code == Some(0) { ValidatorStatus::Passed } else { ValidatorStatus::Failed },
        files,
        command,
        exit_code,
        output: mask(&output),
        truncated: captured.truncated,
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
        let results = run(&copy, &changes, &specs).await;
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
        let results = run(&copy, &changes, &[env]).await;
        let mut names: Vec<&str> = results[0].output.lines().filter_map(|l| l.split('=').next()).collect();
        names.sort();
        assert_eq!(names, ["CARGO_PKG_NAME", "HOME", "LANG", "PATH", "TMPDIR"]);
        let home = results[0].output.lines().find_map(|l| l.strip_prefix("HOME=")).unwrap();
        assert!(!Path::new(home).starts_with(copy.path()), "HOME {home} is inside the copy");
        assert!(Path::new(home).starts_with(copy.path().parent().unwrap()));
        assert!(results[0].output.contains("LANG=C.UTF-8"));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_process_group() {
        let ws = workspace();
        let changes = [change("src/a.yaml", "a: 2\n", 0o644)];
        let copy = prepare(ws.path(), &changes, &CopyLimits::default()).unwrap();
        let pid_file = copy.path().parent().unwrap().join("grandchild.pid");
        let script = format!("sleep 300 & echo $! > {}; echo started; wait", pid_file.display());
        let mut slow = spec("slow", &["sh", "-c", &script], &["**"]);
        slow.timeout = Duration::from_secs(1);
        let results = run(&copy, &changes, &[slow]).await;
        assert_eq!(results[0].status, ValidatorStatus::Failed);
        assert_eq!(results[0].exit_code, None);
        assert_eq!(results[0].output, "started\nvalidator timed out after 1s");
        let grandchild: i32 = fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        // Killed; at most a zombie waiting for its reaper.
        let stat = fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
        assert!(stat.is_empty() || stat.contains(") Z "), "the grandchild survived: {stat}");
    }

    #[tokio::test]
    async fn output_is_capped_and_the_child_is_not_blocked() {
        let ws = workspace();
        let changes = [change("src/a.yaml", "a: 2\n", 0o644)];
        let copy = prepare(ws.path(), &changes, &CopyLimits::default()).unwrap();
        let mut noisy =
            spec("noisy", &["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' a; echo done >&2; exit 1"], &["**"]);
        noisy.output_limit = 1000;
        let results = run(&copy, &changes, &[noisy]).await;
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
        let results = run(&copy, &changes, &specs).await;
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
