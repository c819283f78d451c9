//! The isolated copy validators run on: the workspace tree (without version-control and
//! build directories, symlinks and secret-looking files) in a private temporary directory,
//! with the changed files written over it, removed whatever a validator left in it.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::FileChange;

/// Directories never copied (version control, dependencies, build output, caches).
const SKIPPED_DIRS: &[&str] = &[".git", ".hg", ".svn", "node_modules", "dist", "build", ".cache", "target"];

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
pub(super) struct TempDir {
    pub(super) path: PathBuf,
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

/// Removes a tree of any shape (iteratively: a validator may have nested directories far
/// deeper than a thread's stack, or locked them).
fn remove_tree(path: &Path) -> io::Result<()> {
    super::tree::remove(path)
}

/// A copy of a workspace with a change applied, where validators run. Removed on drop.
#[derive(Debug)]
pub struct IsolatedCopy {
    pub(super) base: TempDir,
    tree: PathBuf,
}

impl IsolatedCopy {
    /// Removes the copy on a blocking thread and waits for it: what a validator left
    /// there is gone when this returns.
    pub async fn remove(self) {
        let _ = tokio::task::spawn_blocking(move || drop(self)).await;
    }

    /// What the copy and the validators' scratch directories hold now, counted up to
    /// just past `bounds`.
    pub(super) fn size(&self, bounds: &super::tree::Bounds) -> io::Result<super::tree::Size> {
        super::tree::measure(&self.base.path, bounds)
    }

    /// The root of the copied tree.
    pub fn path(&self) -> &Path {
        &self.tree
    }

    /// A fresh scratch directory next to the tree (not inside it), with `home` and `tmp`.
    pub(super) fn scratch(&self) -> io::Result<TempDir> {
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
