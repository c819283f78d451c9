//! Helpers shared by the change pipeline's unit tests.

use std::path::{Path, PathBuf};

use super::{FileChange, Operation};

/// A temporary directory and its canonical path (symlink-resolved, as the pipeline uses roots).
pub(crate) fn root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

/// Writes `content` at `rel` under `root`, creating parent directories.
pub(crate) fn write(root: &Path, rel: &str, content: impl AsRef<[u8]>) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// A replacement of `path` from `before` to `after` (mode 0644).
pub(crate) fn replace(path: &str, before: &str, after: &str) -> FileChange {
    FileChange {
        path: path.into(),
        operation: Operation::Replace,
        before: Some(before.into()),
        after: after.into(),
        mode: 0o644,
    }
}

/// A created file (mode 0644).
pub(crate) fn create(path: &str, after: &str) -> FileChange {
    FileChange { path: path.into(), operation: Operation::Create, before: None, after: after.into(), mode: 0o644 }
}
