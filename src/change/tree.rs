//! Measuring and removing a directory tree that a validator may have shaped to hurt the
//! host: any depth (a path deeper than `PATH_MAX`, a recursion deeper than a thread's
//! stack), directories it made unreadable, many entries. Both walks are iterative and
//! work through directory descriptors, never through whole paths. Blocking.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What a tree holds, as far as it was counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Size {
    /// Files, directories and other entries below the root.
    pub entries: u64,
    /// Bytes of the regular files.
    pub bytes: u64,
    /// Deepest directory level (the root's entries are at 1).
    pub depth: u64,
}

/// Where a measure stops counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Stop once more entries than this are counted.
    pub entries: u64,
    /// Stop once the regular files counted hold more bytes than this (`u64::MAX`: never).
    pub bytes: u64,
    /// Stop once a directory deeper than this level is counted (the root's entries are at 1).
    pub depth: u64,
}

impl Size {
    /// Whether any count is over `bounds`.
    pub fn exceeds(&self, bounds: &Bounds) -> bool {
        self.entries > bounds.entries || self.bytes > bounds.bytes || self.depth > bounds.depth
    }
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::ErrorKind::InvalidInput.into())
}

fn open_dir_at(parent: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid descriptor and NUL-terminated name.
    let fd = unsafe { libc::openat(parent, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a directory below `parent`, making it searchable first when it is not (the
/// validator may have set its mode to 000; only the host's own copy is ever walked).
fn enter(parent: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    match open_dir_at(parent, name) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            // SAFETY: as above.
            unsafe { libc::fchmodat(parent, name.as_ptr(), 0o700, 0) };
            open_dir_at(parent, name)
        }
        other => other,
    }
}

/// The entries of a directory (without `.` and `..`), each with whether it is a
/// directory (not followed when a symlink).
fn entries(dir: RawFd) -> io::Result<Vec<(CString, bool, u64)>> {
    // fdopendir takes the descriptor it is given: hand it a duplicate.
    // SAFETY: duplicating a valid descriptor.
    let copy = unsafe { libc::fcntl(dir, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `copy` is ours; fdopendir owns it from here (closedir closes it).
    let stream = unsafe { libc::fdopendir(copy) };
    if stream.is_null() {
        // SAFETY: still ours on failure.
        unsafe { libc::close(copy) };
        return Err(io::Error::last_os_error());
    }
    // SAFETY: rewinding a stream we own (a duplicate shares the offset).
    unsafe { libc::rewinddir(stream) };
    let mut found = Vec::new();
    loop {
        // SAFETY: a valid stream; the entry is read before the next call.
        let entry = unsafe { libc::readdir64(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: readdir returned a valid entry with a NUL-terminated name.
        let (name, kind) = unsafe { (CStr::from_ptr((*entry).d_name.as_ptr()), (*entry).d_type) };
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor, name and out-pointer.
        let known = unsafe { libc::fstatat(dir, name.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW) } == 0;
        let is_dir = if known { stat.st_mode & libc::S_IFMT == libc::S_IFDIR } else { kind == libc::DT_DIR };
        let bytes = if known && stat.st_mode & libc::S_IFMT == libc::S_IFREG { stat.st_size.max(0) as u64 } else { 0 };
        found.push((name.to_owned(), is_dir, bytes));
    }
    // SAFETY: closing the stream we opened.
    unsafe { libc::closedir(stream) };
    Ok(found)
}

/// Counts what lies under `root`, stopping as soon as a count passes `bounds` (so a
/// hostile tree costs at most the bounds to measure). Open descriptors never exceed
/// `bounds.depth + 1`.
pub fn measure(root: &Path, bounds: &Bounds) -> io::Result<Size> {
    let root = open_dir_at(libc::AT_FDCWD, &c_name(root.as_os_str())?)?;
    let mut size = Size::default();
    // Each level: its descriptor and the subdirectories still to visit.
    let mut stack: Vec<(OwnedFd, Vec<CString>)> = Vec::new();
    let first = entries(root.as_raw_fd())?;
    let mut pending = Vec::new();
    for (name, is_dir, bytes) in first {
        size.entries += 1;
        size.bytes = size.bytes.saturating_add(bytes);
        if is_dir {
            pending.push(name);
        }
    }
    size.depth = u64::from(size.entries > 0);
    stack.push((root, pending));
    while let Some((dir, pending)) = stack.last_mut() {
        if size.exceeds(bounds) {
            break;
        }
        let Some(name) = pending.pop() else {
            stack.pop();
            continue;
        };
        let child = enter(dir.as_raw_fd(), &name)?;
        let mut subdirs = Vec::new();
        let level = stack.len() as u64 + 1;
        for (name, is_dir, bytes) in entries(child.as_raw_fd())? {
            size.entries += 1;
            size.bytes = size.bytes.saturating_add(bytes);
            size.depth = size.depth.max(level);
            if is_dir {
                subdirs.push(name);
            }
        }
        stack.push((child, subdirs));
    }
    Ok(size)
}

/// Removes the files of `dir` and returns its subdirectories. The directory is made
/// writable and searchable first.
fn clear_files(dir: RawFd) -> io::Result<Vec<CString>> {
    // SAFETY: making our own directory writable and searchable.
    unsafe { libc::fchmod(dir, 0o700) };
    let mut subdirs = Vec::new();
    for (name, is_dir, _) in entries(dir)? {
        if is_dir {
            subdirs.push(name);
        // SAFETY: a valid descriptor and name.
        } else if unsafe { libc::unlinkat(dir, name.as_ptr(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(subdirs)
}

/// Removes `root` and everything under it, at any depth, with one directory open at a
/// time: it climbs back through `..`, which nothing can move once the tree's processes
/// are gone, and keeps only the names still to visit.
pub fn remove(root: &Path) -> io::Result<()> {
    let mut current = open_dir_at(libc::AT_FDCWD, &c_name(root.as_os_str())?)?;
    let mut pending = clear_files(current.as_raw_fd())?;
    // For each level above `current`: the name `current` has there, and what is left there.
    let mut levels: Vec<(CString, Vec<CString>)> = Vec::new();
    loop {
        if let Some(name) = pending.pop() {
            let child = enter(current.as_raw_fd(), &name)?;
            let below = clear_files(child.as_raw_fd())?;
            levels.push((name, std::mem::replace(&mut pending, below)));
            current = child;
            continue;
        }
        let Some((name, rest)) = levels.pop() else { break };
        current = open_dir_at(current.as_raw_fd(), c"..")?;
        // SAFETY: a valid descriptor and name.
        if unsafe { libc::unlinkat(current.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) } < 0 {
            return Err(io::Error::last_os_error());
        }
        pending = rest;
    }
    drop(current);
    std::fs::remove_dir(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `depth` nested directories `d/d/d/...` under `root`, built through
    /// descriptors (the path is far longer than PATH_MAX), with a file at the bottom.
    fn nest(root: &Path, depth: usize) {
        let mut dir = open_dir_at(libc::AT_FDCWD, &c_name(root.as_os_str()).unwrap()).unwrap();
        for _ in 0..depth {
            // SAFETY: test code on our own directories.
            assert_eq!(unsafe { libc::mkdirat(dir.as_raw_fd(), c"d".as_ptr(), 0o700) }, 0);
            dir = open_dir_at(dir.as_raw_fd(), c"d").unwrap();
        }
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c"f".as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o600) };
        assert!(fd >= 0);
        unsafe { libc::write(fd, b"abc".as_ptr().cast(), 3) };
        // A directory nobody may enter, as a validator leaves one.
        unsafe { libc::mkdirat(dir.as_raw_fd(), c"locked".as_ptr(), 0o000) };
        unsafe { libc::close(fd) };
    }

    #[test]
    fn a_tree_deeper_than_path_max_and_a_stack_is_measured_within_bounds_and_removed() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("copy");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("top.yaml"), "a: 1\n").unwrap();
        nest(&root, 15_000);
        let bounds = Bounds { entries: 1_000, bytes: 1 << 20, depth: 256 };
        let size = measure(&root, &bounds).unwrap();
        assert!(size.exceeds(&bounds), "{size:?}");
        assert!(size.depth <= 258 && size.entries <= 1_002, "measuring stopped at the bounds: {size:?}");
        let all = Bounds { entries: u64::MAX, bytes: u64::MAX, depth: u64::MAX };
        let full = measure(&root, &all).unwrap();
        assert_eq!(full.entries, 1 + 15_000 + 2);
        assert_eq!(full.depth, 15_001);
        assert_eq!(full.bytes, 5 + 3);
        // On a thread with a small stack: a recursive removal would overflow it.
        let target = root.clone();
        std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || remove(&target).unwrap())
            .unwrap()
            .join()
            .unwrap();
        assert!(!root.exists());
    }
}
