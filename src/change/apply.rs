//! Writing an approved change to its workspace.
//!
//! Every original is re-read and compared byte for byte with what the preview saw, and
//! every create target is checked to be still absent under a directory of the workspace,
//! before anything is written. Each file is then staged next to its target
//! (`.akritas-apply-*`: written, chmodded, fsynced) and published: a create by a hard link
//! (which cannot clobber a file that appeared meanwhile), a replacement by moving the
//! original aside (`.akritas-backup-*`) and renaming the staged file into place. Any
//! failure restores every file already published and removes what was staged, so the
//! workspace ends either fully changed or as it was (short of a crash mid-apply, and of
//! someone else writing the same files during the apply itself).

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::{FileChange, Operation};

/// Why a change was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The workspace no longer matches what the preview read: prepare a new preview.
    #[error("stale preview: {reason}; prepare a new preview")]
    Stale {
        /// The relative path concerned.
        path: String,
        /// What changed.
        reason: String,
    },
    /// A file could not be read or staged; nothing was written.
    #[error("cannot apply the change to \"{path}\": {error}; nothing was written")]
    Io {
        /// The relative path concerned.
        path: String,
        /// What failed.
        error: String,
    },
    /// Publishing failed part-way and what was already written was restored.
    #[error("{}", rolled_back_message(path, error, rollback_errors))]
    RolledBack {
        /// The relative path whose publication failed.
        path: String,
        /// What failed.
        error: String,
        /// What could not be restored (empty when the workspace is back as it was).
        rollback_errors: Vec<String>,
    },
}

fn rolled_back_message(path: &str, error: &str, rollback_errors: &[String]) -> String {
    if rollback_errors.is_empty() {
        format!(
            "writing \"{path}\" failed ({error}); every file already written was restored, the workspace is unchanged"
        )
    } else {
        format!(
            "writing \"{path}\" failed ({error}) and restoring the files already written failed too; check these by hand: {}",
            rollback_errors.join("; ")
        )
    }
}

fn stale(path: &str, reason: impl Into<String>) -> ApplyError {
    ApplyError::Stale { path: path.to_owned(), reason: reason.into() }
}

fn io_error(path: &str) -> impl FnOnce(io::Error) -> ApplyError + '_ {
    move |e| ApplyError::Io { path: path.to_owned(), error: e.to_string() }
}

/// The filesystem operations that publish and roll back (replaceable in tests).
trait Ops {
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The real filesystem.
struct Real;

impl Ops for Real {
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// A file to write, verified.
struct Target<'a> {
    /// Relative path, as in the change.
    path: &'a str,
    /// Canonical directory inside the root.
    dir: PathBuf,
    /// The file in `dir`.
    file: PathBuf,
    content: &'a [u8],
    mode: u32,
    create: bool,
}

fn relative(path: &str) -> Option<&Path> {
    let rel = Path::new(path);
    (!path.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)))).then_some(rel)
}

/// Checks that the original of a replacement is still exactly `before` (root-confined,
/// a regular file); returns its target with the file's current permission bits.
fn verify_replace<'a>(root: &Path, change: &'a FileChange, rel: &Path) -> Result<Target<'a>, ApplyError> {
    let path = change.path.as_str();
    let changed = |detail: &str| stale(path, format!("\"{path}\" changed after proposal generation{detail}"));
    let before = change.before.as_deref().ok_or_else(|| ApplyError::Io {
        path: path.to_owned(),
        error: "the pending change has no original content for a replacement".into(),
    })?;
    let file = match fs::canonicalize(root.join(rel)) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(changed(" (it no longer exists)")),
        Err(e) => return Err(io_error(path)(e)),
    };
    if !file.starts_with(root) || file == root {
        return Err(changed(" (it now resolves outside the workspace)"));
    }
    if super::paths::resolves_to_secret(root, &file) {
        return Err(changed(" (it now resolves to a secret-looking file or into .git)"));
    }
    let mut handle = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&file) {
        Ok(handle) => handle,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(changed(" (it was moved or replaced)"));
        }
        Err(e) => return Err(io_error(path)(e)),
    };
    let metadata = handle.metadata().map_err(io_error(path))?;
    if !metadata.is_file() {
        return Err(changed(" (it is no longer a regular file)"));
    }
    let mut current = Vec::with_capacity(before.len() + 1);
    (&mut handle).take(before.len() as u64 + 1).read_to_end(&mut current).map_err(io_error(path))?;
    if current != before.as_bytes() {
        return Err(changed(""));
    }
    let dir = file.parent().map(Path::to_owned).ok_or_else(|| changed(" (it has no parent directory)"))?;
    Ok(Target {
        path,
        dir,
        file,
        content: change.after.as_bytes(),
        mode: metadata.permissions().mode() & 0o7777,
        create: false,
    })
}

/// Checks that a create target is still absent and its parent a directory inside the root.
fn verify_create<'a>(root: &Path, change: &'a FileChange, rel: &Path) -> Result<Target<'a>, ApplyError> {
    let path = change.path.as_str();
    let refused = |why: &str| stale(path, format!("cannot create \"{path}\": {why}"));
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(refused("it has no file name"));
    };
    let dir = match fs::canonicalize(root.join(parent)) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(refused("its parent directory no longer exists")),
        Err(e) => return Err(io_error(path)(e)),
    };
    if !dir.starts_with(root) || !fs::metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return Err(refused("its parent is not a directory inside the workspace"));
    }
    if super::paths::resolves_to_secret(root, &dir) {
        return Err(refused("its parent resolves to a secret-looking directory or into .git"));
    }
    let file = dir.join(name);
    match fs::symlink_metadata(&file) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Ok(_) => return Err(refused("it already exists")),
        Err(e) => return Err(io_error(path)(e)),
    }
    Ok(Target { path, dir, file, content: change.after.as_bytes(), mode: change.mode & 0o7777, create: true })
}

fn verify<'a>(root: &Path, change: &'a FileChange) -> Result<Target<'a>, ApplyError> {
    let rel = relative(&change.path).ok_or_else(|| {
        stale(&change.path, format!("\"{}\" is not a relative path inside the workspace", change.path))
    })?;
    match change.operation {
        Operation::Replace => verify_replace(root, change, rel),
        Operation::Create => verify_create(root, change, rel),
    }
}

fn random_name(prefix: &str) -> String {
    format!("{prefix}{:032x}", rand::random::<u128>())
}

/// Writes `content` to a new temporary file in `dir` with `mode`, fsynced.
fn stage(dir: &Path, content: &[u8], mode: u32) -> io::Result<PathBuf> {
    let temp = dir.join(random_name(".akritas-apply-"));
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
    let written = file
        .write_all(content)
        .and_then(|()| file.set_permissions(fs::Permissions::from_mode(mode)))
        .and_then(|()| file.sync_all());
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    Ok(temp)
}

/// A file already published, and how to undo it.
enum Published {
    Created(PathBuf),
    Replaced { file: PathBuf, backup: PathBuf },
}

/// Writes an approved change under `root`: re-verifies every original byte and every
/// create target, stages every file, then publishes them all or none (see the module
/// docs). Returns the changed paths, sorted. Blocking (the caller runs it in
/// `spawn_blocking`).
pub fn apply(root: &Path, changes: &[FileChange]) -> Result<Vec<String>, ApplyError> {
    apply_with(&Real, root, changes)
}

fn apply_with(ops: &dyn Ops, root: &Path, changes: &[FileChange]) -> Result<Vec<String>, ApplyError> {
    let root = fs::canonicalize(root).map_err(|e| ApplyError::Io {
        path: String::new(),
        error: format!("the workspace root {} cannot be opened: {e}", root.display()),
    })?;
    let mut sorted: Vec<&FileChange> = changes.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut targets = Vec::with_capacity(sorted.len());
    let mut seen = BTreeSet::new();
    for change in sorted {
        let target = verify(&root, change)?;
        if !seen.insert(target.file.clone()) {
            return Err(stale(
                target.path,
                format!("\"{}\" names a file another path of the change names", target.path),
            ));
        }
        targets.push(target);
    }

    let mut staged = Vec::with_capacity(targets.len());
    for target in &targets {
        match stage(&target.dir, target.content, target.mode) {
            Ok(temp) => staged.push(temp),
            Err(e) => {
                for temp in &staged {
                    let _ = fs::remove_file(temp);
                }
                return Err(io_error(target.path)(e));
            }
        }
    }

    let dirs: BTreeSet<&Path> = targets.iter().map(|t| t.dir.as_path()).collect();
    let mut published = Vec::with_capacity(targets.len());
    let mut outcome = Ok(());
    for (target, temp) in targets.iter().zip(&staged) {
        if let Err(e) = publish(ops, target, temp, &mut published) {
            outcome = Err((target.path.to_owned(), e));
            break;
        }
    }
    if outcome.is_ok()
        && let Some((dir, error)) = dirs.iter().find_map(|dir| ops.sync_dir(dir).err().map(|e| (dir, e)))
    {
        let relative = dir.strip_prefix(&root).unwrap_or(dir).display().to_string();
        outcome = Err((if relative.is_empty() { ".".to_owned() } else { relative }, error));
    }
    if let Err((path, error)) = outcome {
        let rollback_errors = roll_back(ops, published, &staged, &dirs);
        tracing::warn!(component = "akritas_change", path, %error, restored = rollback_errors.is_empty(), "apply failed and was rolled back");
        return Err(ApplyError::RolledBack { path, error: error.to_string(), rollback_errors });
    }
    for entry in &published {
        if let Published::Replaced { backup, .. } = entry
            && let Err(error) = ops.remove_file(backup)
        {
            tracing::warn!(component = "akritas_change", path = %backup.display(), %error, "could not remove an apply backup");
        }
    }
    for dir in &dirs {
        let _ = ops.sync_dir(dir);
    }
    Ok(targets.iter().map(|t| t.path.to_owned()).collect())
}

/// Publishes one staged file, recording what it did before each step that can fail after it.
fn publish(ops: &dyn Ops, target: &Target<'_>, temp: &Path, published: &mut Vec<Published>) -> io::Result<()> {
    if target.create {
        // Fails if a file appeared at the target meanwhile.
        ops.hard_link(temp, &target.file)?;
        published.push(Published::Created(target.file.clone()));
        ops.remove_file(temp)
    } else {
        let backup = target.dir.join(random_name(".akritas-backup-"));
        ops.rename(&target.file, &backup)?;
        published.push(Published::Replaced { file: target.file.clone(), backup });
        ops.rename(temp, &target.file)
    }
}

/// Undoes `published` (newest first), removes every staged file left and syncs the
/// directories; returns what could not be undone.
fn roll_back(ops: &dyn Ops, published: Vec<Published>, staged: &[PathBuf], dirs: &BTreeSet<&Path>) -> Vec<String> {
    let mut errors = Vec::new();
    for entry in published.into_iter().rev() {
        match entry {
            Published::Created(file) => {
                if let Err(e) = ops.remove_file(&file) {
                    errors.push(format!("could not remove created {}: {e}", file.display()));
                }
            }
            Published::Replaced { file, backup } => {
                if let Err(e) = ops.rename(&backup, &file) {
                    errors.push(format!(
                        "could not restore {} from its backup {}: {e}",
                        file.display(),
                        backup.display()
                    ));
                }
            }
        }
    }
    for temp in staged {
        match ops.remove_file(temp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                errors.push(format!("could not remove staged {}: {e}", temp.display()));
            }
            _ => {}
        }
    }
    for dir in dirs {
        let _ = ops.sync_dir(dir);
    }
    errors
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::change::testing::{create, replace};

    fn workspace() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("pillar/prod")).unwrap();
        fs::write(root.join("pillar/prod/nftables.sls"), "backends:\n  - orders-v1\n").unwrap();
        fs::write(root.join("run.sh"), "#!/bin/sh\necho v1\n").unwrap();
        fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(root.join("untouched.txt"), "same\n").unwrap();
        dir
    }

    /// Every file under `dir` with its content (relative paths).
    fn listing(dir: &Path) -> Vec<(String, String)> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
            for entry in fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                let meta = fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    walk(root, &path, out);
                } else if meta.is_symlink() {
                    out.push((rel, format!("-> {}", fs::read_link(&path).unwrap().display())));
                } else {
                    out.push((rel, fs::read_to_string(&path).unwrap()));
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn success_writes_only_the_changed_files_and_keeps_modes() {
        let ws = workspace();
        let root = ws.path();
        let changes = [
            replace("run.sh", "#!/bin/sh\necho v1\n", "#!/bin/sh\necho v2\n"),
            replace(
                "pillar/prod/nftables.sls",
                "backends:\n  - orders-v1\n",
                "backends:\n  - orders-v1\n  - orders-v2\n",
            ),
            create("pillar/prod/new.sls", "new: true\n"),
        ];
        let written = apply(root, &changes).unwrap();
        assert_eq!(written, ["pillar/prod/new.sls", "pillar/prod/nftables.sls", "run.sh"]);
        assert_eq!(
            listing(root),
            [
                ("pillar/prod/new.sls".to_owned(), "new: true\n".to_owned()),
                ("pillar/prod/nftables.sls".to_owned(), "backends:\n  - orders-v1\n  - orders-v2\n".to_owned()),
                ("run.sh".to_owned(), "#!/bin/sh\necho v2\n".to_owned()),
                ("untouched.txt".to_owned(), "same\n".to_owned()),
            ]
        );
        assert_eq!(mode(&root.join("run.sh")), 0o755);
        assert_eq!(mode(&root.join("pillar/prod/nftables.sls")), 0o644);
        assert_eq!(mode(&root.join("pillar/prod/new.sls")), 0o644);
    }

    #[test]
    fn a_source_changed_after_the_preview_is_stale_and_nothing_is_written() {
        let ws = workspace();
        let root = ws.path();
        fs::write(root.join("run.sh"), "#!/bin/sh\necho edited by hand\n").unwrap();
        let before = listing(root);
        let changes = [
            replace("pillar/prod/nftables.sls", "backends:\n  - orders-v1\n", "x\n"),
            replace("run.sh", "#!/bin/sh\necho v1\n", "#!/bin/sh\necho v2\n"),
        ];
        let err = apply(root, &changes).unwrap_err();
        assert!(matches!(&err, ApplyError::Stale { path, .. } if path == "run.sh"), "{err:?}");
        assert!(err.to_string().starts_with("stale preview: \"run.sh\" changed after proposal generation"), "{err}");
        assert_eq!(listing(root), before);
        // A prefix of the original is not the original either.
        fs::write(root.join("run.sh"), "#!/bin/sh\necho v1\nmore\n").unwrap();
        assert!(matches!(apply(root, &changes[1..]), Err(ApplyError::Stale { .. })));
    }

    #[test]
    fn a_file_created_meanwhile_at_a_create_target_is_stale() {
        let ws = workspace();
        let root = ws.path();
        fs::write(root.join("pillar/prod/new.sls"), "someone else's\n").unwrap();
        let err = apply(root, &[create("pillar/prod/new.sls", "mine\n")]).unwrap_err();
        assert!(
            err.to_string().starts_with("stale preview: cannot create \"pillar/prod/new.sls\": it already exists"),
            "{err}"
        );
        assert_eq!(fs::read_to_string(root.join("pillar/prod/new.sls")).unwrap(), "someone else's\n");
        let err = apply(root, &[create("gone/new.sls", "mine\n")]).unwrap_err();
        assert!(err.to_string().contains("parent directory no longer exists"), "{err}");
    }

    #[test]
    fn a_symlink_swapped_in_at_a_target_is_stale_and_not_followed() {
        let ws = workspace();
        let outside = tempfile::tempdir().unwrap();
        let root = ws.path();
        let secret = outside.path().join("nftables.sls");
        fs::write(&secret, "backends:\n  - orders-v1\n").unwrap();
        fs::remove_file(root.join("pillar/prod/nftables.sls")).unwrap();
        symlink(&secret, root.join("pillar/prod/nftables.sls")).unwrap();
        let changes = [replace("pillar/prod/nftables.sls", "backends:\n  - orders-v1\n", "pwned\n")];
        let err = apply(root, &changes).unwrap_err();
        assert!(matches!(err, ApplyError::Stale { .. }), "{err:?}");
        assert!(err.to_string().contains("outside the workspace"), "{err}");
        assert_eq!(fs::read_to_string(&secret).unwrap(), "backends:\n  - orders-v1\n");
        // A symlinked parent directory leading out of the root is refused for creates too.
        symlink(outside.path(), root.join("escape")).unwrap();
        let err = apply(root, &[create("escape/new.sls", "x\n")]).unwrap_err();
        assert!(err.to_string().contains("not a directory inside the workspace"), "{err}");
        assert!(!outside.path().join("new.sls").exists());
    }

    #[test]
    fn an_alias_of_git_metadata_or_a_secret_is_never_written() {
        let ws = workspace();
        let root = ws.path();
        fs::create_dir_all(root.join(".git")).unwrap();
        fs::write(root.join(".git/config"), "[core]\n").unwrap();
        fs::write(root.join(".env"), "TOKEN=x\n").unwrap();
        symlink(root.join(".git/config"), root.join("x")).unwrap();
        symlink(root.join(".env"), root.join("notes.txt")).unwrap();
        symlink(root.join(".git"), root.join("meta")).unwrap();
        for (path, before) in [("x", "[core]\n"), ("notes.txt", "TOKEN=x\n")] {
            let err = apply(root, &[replace(path, before, "pwned\n")]).unwrap_err();
            assert!(err.to_string().contains("secret-looking file or into .git"), "{path}: {err}");
        }
        let err = apply(root, &[create("meta/hooks-post-checkout", "#!/bin/sh\n")]).unwrap_err();
        assert!(err.to_string().contains("secret-looking directory or into .git"), "{err}");
        assert_eq!(fs::read_to_string(root.join(".git/config")).unwrap(), "[core]\n");
        assert_eq!(fs::read_to_string(root.join(".env")).unwrap(), "TOKEN=x\n");
        assert!(!root.join(".git/hooks-post-checkout").exists());
    }

    /// Real operations, except that the `fail_at`-th rename fails.
    struct FailingRename {
        fail_at: usize,
        renames: Cell<usize>,
    }

    impl Ops for FailingRename {
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            self.renames.set(self.renames.get() + 1);
            if self.renames.get() == self.fail_at {
                return Err(io::Error::other("injected rename failure"));
            }
            Real.rename(from, to)
        }
        fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
            Real.hard_link(from, to)
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            Real.remove_file(path)
        }
        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            Real.sync_dir(dir)
        }
    }

    #[test]
    fn a_failed_rename_of_the_second_file_rolls_everything_back() {
        // Renames: the first replacement's original aside (1) and its staged file in (2),
        // then the second's original aside (3) and its staged file in (4).
        for fail_at in [3, 4] {
            let ws = workspace();
            let root = ws.path();
            let before = listing(root);
            let changes = [
                replace("pillar/prod/nftables.sls", "backends:\n  - orders-v1\n", "changed\n"),
                create("pillar/prod/new.sls", "new\n"),
                replace("run.sh", "#!/bin/sh\necho v1\n", "#!/bin/sh\necho v2\n"),
            ];
            let ops = FailingRename { fail_at, renames: Cell::new(0) };
            let err = apply_with(&ops, root, &changes).unwrap_err();
            let ApplyError::RolledBack { path, error, rollback_errors } = &err else { panic!("{err:?}") };
            assert_eq!(path, "run.sh");
            assert_eq!(error, "injected rename failure");
            assert!(rollback_errors.is_empty(), "{rollback_errors:?}");
            assert!(err.to_string().contains("the workspace is unchanged"), "{err}");
            // Exactly the original files and bytes: no staged or backup file left.
            assert_eq!(listing(root), before, "fail_at={fail_at}");
            assert_eq!(mode(&root.join("run.sh")), 0o755);
        }
    }
}
