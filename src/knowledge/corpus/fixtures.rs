//! Files and options the corpus tests share.

use std::fs;
use std::path::Path;

use super::ImportOptions;

/// A paragraph long enough to pass the quality rules, starting with `word`.
pub(super) fn long(word: &str) -> String {
    format!("{word} {}\n", "lorem ipsum dolor sit amet ".repeat(6))
}

/// Writes `bytes` at `root/rel`, creating directories.
pub(super) fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
}

/// Import options with a test source label.
pub(super) fn opts() -> ImportOptions {
    ImportOptions { source: "test".into(), ..ImportOptions::default() }
}
