//! The snapshot a preview works from: the change request and the files it names,
//! each read once, bounded, UTF-8 without NUL, and confined to the root.
//!
//! Reading is blocking: callers run [`load`] and [`read_file`] in `spawn_blocking`.

use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::paths::{self, PathError};
use super::{MAX_FILE_BYTES, MAX_FILES, MAX_REQUEST_BYTES, MAX_SNAPSHOT_BYTES, SourceFile};

/// The request and the files read for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The change request text.
    pub request: String,
    /// The files, in the order they were named (or ranked).
    pub files: Vec<SourceFile>,
}

/// Why a snapshot cannot be loaded. Each message says which path and which rule.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Blank request.
    #[error("the change request is empty; describe the change you want")]
    RequestEmpty,
    /// Request over [`MAX_REQUEST_BYTES`].
    #[error("the change request has {bytes} bytes; the limit is {MAX_REQUEST_BYTES}: shorten it")]
    RequestTooLarge {
        /// Its size.
        bytes: usize,
    },
    /// NUL in the request.
    #[error("the change request contains a NUL character; send plain UTF-8 text")]
    RequestNul,
    /// `load` without paths.
    #[error("no files given; name 1 to {MAX_FILES} files, or none to let discovery choose them")]
    NoFiles,
    /// More than [`MAX_FILES`] paths.
    #[error("{count} files given; at most {MAX_FILES} files fit in one change: name fewer")]
    TooManyFiles {
        /// How many were given.
        count: usize,
    },
    /// Two names for one file.
    #[error("file {path:?} is named twice (as {first:?} and {path:?}); name each file once")]
    Duplicate {
        /// The second name.
        path: String,
        /// The first name of the same file.
        first: String,
    },
    /// A path rule.
    #[error(transparent)]
    Path(#[from] PathError),
    /// Over [`MAX_FILE_BYTES`].
    #[error("file {path:?} is larger than {MAX_FILE_BYTES} bytes; Akritas only changes files up to that size")]
    TooLarge {
        /// The file.
        path: String,
    },
    /// Invalid UTF-8.
    #[error("file {path:?} is not valid UTF-8 text; Akritas only changes text files")]
    NotUtf8 {
        /// The file.
        path: String,
    },
    /// NUL in content.
    #[error("file {path:?} contains a NUL byte (binary content); Akritas only changes text files")]
    Nul {
        /// The file.
        path: String,
    },
    /// Request plus contents over [`MAX_SNAPSHOT_BYTES`].
    #[error(
        "the request and files add up to {bytes} bytes; the limit is {MAX_SNAPSHOT_BYTES}: name fewer or smaller files"
    )]
    SnapshotTooLarge {
        /// The total.
        bytes: usize,
    },
    /// The filesystem refused.
    #[error("cannot read file {path:?}: {error}")]
    Io {
        /// The file.
        path: String,
        /// The system error.
        error: String,
    },
}

/// Checks the request text: non-blank, at most [`MAX_REQUEST_BYTES`], no NUL.
pub fn check_request(text: &str) -> Result<(), SnapshotError> {
    if text.trim().is_empty() {
        return Err(SnapshotError::RequestEmpty);
    }
    if text.len() > MAX_REQUEST_BYTES {
        return Err(SnapshotError::RequestTooLarge { bytes: text.len() });
    }
    if text.contains('\0') {
        return Err(SnapshotError::RequestNul);
    }
    Ok(())
}

/// Reads one file named by `rel` under the canonical `root`: path rules, root
/// confinement through symlinks, a regular file of at most [`MAX_FILE_BYTES`],
/// UTF-8 without NUL; the mode is the file's permission bits. Also used by apply
/// to re-verify the original bytes. Blocking.
pub fn read_file(root: &Path, rel: &str) -> Result<SourceFile, SnapshotError> {
    read_resolved(root, rel).map(|(file, _)| file)
}

fn read_resolved(root: &Path, rel: &str) -> Result<(SourceFile, PathBuf), SnapshotError> {
    let path = paths::check(rel)?;
    let resolved = paths::confine(root, &path)?;
    let io = |error: std::io::Error| SnapshotError::Io { path: path.clone(), error: error.to_string() };
    // Non-blocking so a FIFO swapped in cannot hang the read; no-follow so a symlink
    // swapped in after resolution is refused.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(&resolved)
        .map_err(io)?;
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(PathError::NotRegular(path).into());
    }
    if metadata.len() > MAX_FILE_BYTES as u64 {
        return Err(SnapshotError::TooLarge { path });
    }
    // Read at most one byte past the limit: the file may grow after the metadata call.
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(SnapshotError::TooLarge { path });
    }
    let Ok(content) = String::from_utf8(bytes) else {
        return Err(SnapshotError::NotUtf8 { path });
    };
    if content.contains('\0') {
        return Err(SnapshotError::Nul { path });
    }
    let mode = metadata.permissions().mode() & 0o7777;
    Ok((SourceFile { path, content, mode }, resolved))
}

/// Loads the explicit files of a preview: 1..=[`MAX_FILES`] paths, no file named
/// twice (two names resolving to one file count as a duplicate), request plus
/// contents at most [`MAX_SNAPSHOT_BYTES`]. Blocking.
pub fn load(root: &Path, request: &str, paths: &[String]) -> Result<Snapshot, SnapshotError> {
    check_request(request)?;
    if paths.is_empty() {
        return Err(SnapshotError::NoFiles);
    }
    if paths.len() > MAX_FILES {
        return Err(SnapshotError::TooManyFiles { count: paths.len() });
    }
    let mut seen: Vec<(PathBuf, String)> = Vec::with_capacity(paths.len());
    let mut files = Vec::with_capacity(paths.len());
    let mut total = request.len();
    for rel in paths {
        let (file, resolved) = read_resolved(root, rel)?;
        if let Some((_, first)) = seen.iter().find(|(seen, _)| *seen == resolved) {
            return Err(SnapshotError::Duplicate { path: file.path, first: first.clone() });
        }
        total += file.content.len();
        if total > MAX_SNAPSHOT_BYTES {
            return Err(SnapshotError::SnapshotTooLarge { bytes: total });
        }
        seen.push((resolved, file.path.clone()));
        files.push(file);
    }
    Ok(Snapshot { request: request.to_owned(), files })
}

#[cfg(test)]
impl Snapshot {
    /// Bytes of the request plus every file's content (bounded by [`MAX_SNAPSHOT_BYTES`]).
    pub(crate) fn bytes(&self) -> usize {
        self.request.len() + self.files.iter().map(|f| f.content.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::testing::root;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn loads_named_files_with_their_modes() {
        let (_dir, root) = root();
        std::fs::create_dir(root.join("bin")).unwrap();
        std::fs::write(root.join("bin/run.sh"), "#!/bin/sh\necho hi\n").unwrap();
        std::fs::set_permissions(root.join("bin/run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(root.join("a.txt"), "héllo\n").unwrap();
        std::fs::set_permissions(root.join("a.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
        let snapshot = load(&root, "change it", &names(&["a.txt", "bin/run.sh"])).unwrap();
        assert_eq!(snapshot.request, "change it");
        assert_eq!(
            snapshot.files,
            vec![
                SourceFile { path: "a.txt".into(), content: "héllo\n".into(), mode: 0o640 },
                SourceFile { path: "bin/run.sh".into(), content: "#!/bin/sh\necho hi\n".into(), mode: 0o755 },
            ]
        );
        assert_eq!(snapshot.bytes(), "change it".len() + "héllo\n".len() + 18);
    }

    #[test]
    fn request_rules() {
        assert!(matches!(check_request(" \n\t"), Err(SnapshotError::RequestEmpty)));
        assert!(matches!(check_request("a\0b"), Err(SnapshotError::RequestNul)));
        let long = "x".repeat(MAX_REQUEST_BYTES + 1);
        assert!(matches!(check_request(&long), Err(SnapshotError::RequestTooLarge { .. })));
        assert!(check_request(&long[1..]).is_ok());
    }

    #[test]
    fn file_count_is_bounded() {
        let (_dir, root) = root();
        assert!(matches!(load(&root, "r", &[]), Err(SnapshotError::NoFiles)));
        let many: Vec<String> = (0..=MAX_FILES).map(|i| format!("f{i}.txt")).collect();
        for name in &many {
            std::fs::write(root.join(name), "x").unwrap();
        }
        let error = load(&root, "r", &many).unwrap_err();
        assert!(matches!(error, SnapshotError::TooManyFiles { count } if count == MAX_FILES + 1));
        assert!(load(&root, "r", &many[..MAX_FILES]).is_ok());
    }

    #[test]
    fn oversized_binary_and_nul_files_are_refused() {
        let (_dir, root) = root();
        std::fs::write(root.join("big.txt"), "x".repeat(MAX_FILE_BYTES + 1)).unwrap();
        std::fs::write(root.join("limit.txt"), "x".repeat(MAX_FILE_BYTES)).unwrap();
        std::fs::write(root.join("latin1.txt"), b"caf\xe9\n").unwrap();
        std::fs::write(root.join("nul.txt"), "a\0b").unwrap();
        std::fs::create_dir(root.join("dir")).unwrap();
        assert!(matches!(read_file(&root, "big.txt"), Err(SnapshotError::TooLarge { path }) if path == "big.txt"));
        assert!(read_file(&root, "limit.txt").is_ok());
        let error = read_file(&root, "latin1.txt").unwrap_err();
        assert!(error.to_string().contains("\"latin1.txt\" is not valid UTF-8"), "{error}");
        assert!(matches!(read_file(&root, "nul.txt"), Err(SnapshotError::Nul { .. })));
        assert!(matches!(read_file(&root, "dir"), Err(SnapshotError::Path(PathError::NotRegular(_)))));
        assert!(matches!(read_file(&root, "nope.txt"), Err(SnapshotError::Path(PathError::Missing(_)))));
        assert!(matches!(read_file(&root, "../x"), Err(SnapshotError::Path(PathError::Escapes(_)))));
    }

    #[test]
    fn total_size_is_bounded() {
        let (_dir, root) = root();
        let files: Vec<String> = (0..4).map(|i| format!("f{i}.txt")).collect();
        for name in &files {
            std::fs::write(root.join(name), "x".repeat(MAX_FILE_BYTES)).unwrap();
        }
        // Four full files are exactly the limit; the request pushes them over.
        let error = load(&root, "r", &files).unwrap_err();
        assert!(matches!(error, SnapshotError::SnapshotTooLarge { bytes } if bytes == MAX_SNAPSHOT_BYTES + 1));
        assert!(load(&root, "r", &files[..3]).is_ok());
    }

    #[test]
    fn duplicates_after_normalisation_are_refused() {
        let (_dir, root) = root();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(root.join("sub"), root.join("alias")).unwrap();
        let error = load(&root, "r", &names(&["sub/a.txt", "sub/a.txt"])).unwrap_err();
        assert!(matches!(error, SnapshotError::Duplicate { .. }), "{error}");
        let error = load(&root, "r", &names(&["sub/a.txt", "alias/a.txt"])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "file \"alias/a.txt\" is named twice (as \"sub/a.txt\" and \"alias/a.txt\"); name each file once"
        );
        // A non-canonical spelling never reaches the duplicate check: it is refused first.
        let error = load(&root, "r", &names(&["sub/a.txt", "./sub/a.txt"])).unwrap_err();
        assert!(matches!(error, SnapshotError::Path(PathError::NotCanonical(_))), "{error}");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let (_dir, root) = root();
        let fifo = std::ffi::CString::new(root.join("pipe").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        assert!(matches!(read_file(&root, "pipe"), Err(SnapshotError::Path(PathError::NotRegular(_)))));
    }

    #[test]
    fn symlink_out_of_the_root_is_refused() {
        let (_dir, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("passwd"), "root:x:0:0\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("passwd"), root.join("passwd")).unwrap();
        let error = load(&root, "r", &names(&["passwd"])).unwrap_err();
        assert!(matches!(error, SnapshotError::Path(PathError::Outside { .. })), "{error}");
    }
}
