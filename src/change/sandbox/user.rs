//! The user a confined program runs as when the host is root: a fresh unprivileged uid of
//! its own for each run, and the copy handed to it.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// First uid of the range a root host runs confined programs as (one fresh uid a run).
const FRESH_UID_BASE: u32 = 0x8000_0000;
/// Size of that range.
const FRESH_UID_SPAN: u32 = 1 << 20;
/// The uid (and gid) used when the user namespace maps no fresh range: `nobody`.
const NOBODY: u32 = 65534;

/// The fresh uids of the runs under way (a uid is never shared by two runs).
static FRESH_IN_USE: std::sync::Mutex<std::collections::BTreeSet<u32>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A fresh uid held by one run; released on drop.
pub(super) struct UidLease(u32);

impl Drop for UidLease {
    fn drop(&mut self) {
        FRESH_IN_USE.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.0);
    }
}

/// A fresh unprivileged user for one run of a root host: a random uid (not used by
/// another run) of a range the user namespace maps, else `nobody`.
pub(super) fn fresh_user() -> ((libc::uid_t, libc::gid_t), Option<UidLease>) {
    let mapped = |file: &str| {
        fs::read_to_string(file).is_ok_and(|map| {
            map.lines().any(|line| {
                let fields: Vec<u64> = line.split_whitespace().filter_map(|f| f.parse().ok()).collect();
                matches!(fields[..], [inside, _, count]
                    if inside <= u64::from(FRESH_UID_BASE) && u64::from(FRESH_UID_BASE + FRESH_UID_SPAN) <= inside + count)
            })
        })
    };
    if mapped("/proc/self/uid_map") && mapped("/proc/self/gid_map") {
        let mut in_use = FRESH_IN_USE.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let id = FRESH_UID_BASE + rand::random::<u32>() % FRESH_UID_SPAN;
            if in_use.insert(id) {
                return ((id, id), Some(UidLease(id)));
            }
        }
    }
    ((NOBODY, NOBODY), None)
}

/// Threads of this process (they count against a shared user's process limit).
pub(super) fn own_threads() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Threads:").and_then(|n| n.trim().parse().ok())))
        .unwrap_or(64)
}

/// Gives `dirs` (recursively) to `uid:gid` and makes the directories from `root` down to
/// each of them traversable by others. Blocking.
pub(super) fn hand_over<'a>(
    root: &Path,
    dirs: impl Iterator<Item = &'a PathBuf>,
    uid: libc::uid_t,
    gid: libc::gid_t,
) -> io::Result<()> {
    for dir in dirs {
        let mut at = dir.parent();
        while let Some(parent) = at.filter(|p| p.starts_with(root)) {
            let mode = fs::metadata(parent)?.permissions().mode();
            fs::set_permissions(parent, fs::Permissions::from_mode(mode | 0o001))?;
            at = parent.parent();
        }
        chown_tree(dir, uid, gid)?;
    }
    Ok(())
}

fn chown_tree(path: &Path, uid: libc::uid_t, gid: libc::gid_t) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    if fs::symlink_metadata(path)?.is_dir() {
        for entry in fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}
