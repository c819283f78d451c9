//! A cgroup v2 of one sandboxed run, where the host may create one under its own
//! cgroup: the host (not the supervisor, whom the program might have killed) ends the
//! whole tree with one write to `cgroup.kill`, and the tree's processes and memory are
//! capped where those controllers are enabled for the host's cgroup.

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How the cgroups of runs are named: this prefix, the host's pid, a random number.
const PREFIX: &str = "akritas-validator-";

/// Where the cgroups of runs are made: under the host's own cgroup.
fn parent() -> Option<PathBuf> {
    Some(mount_point()?.join(own_path()?.trim_start_matches('/')))
}

/// Removes the empty cgroups that hosts which are gone left behind (a host killed while a
/// validator ran cannot remove its own). Best effort.
pub fn remove_stale() {
    let Some(entries) = parent().and_then(|p| fs::read_dir(p).ok()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()) else { continue };
        if pid.parse::<u32>().is_ok_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// The cgroup of one run; removed by [`Cgroup::kill_and_remove`].
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
    procs: OwnedFd,
}

/// Where cgroup v2 is mounted (from `/proc/self/mountinfo`).
fn mount_point() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(point))
    })
}

/// This process's cgroup v2 path (from `/proc/self/cgroup`).
fn own_path() -> Option<String> {
    let list = fs::read_to_string("/proc/self/cgroup").ok()?;
    list.lines().find_map(|line| line.strip_prefix("0::").map(str::to_owned))
}

impl Cgroup {
    /// A new cgroup under the host's own, with `cgroup.kill` (Linux 5.14+), and the
    /// process and memory caps written where those controllers are enabled. `None`
    /// where cgroup v2 is absent or not writable (a pod's usual read-only cgroup mount).
    pub fn create(max_processes: u64, max_memory: u64) -> Option<Cgroup> {
        let parent = parent()?;
        let dir = parent.join(format!("{PREFIX}{}-{:016x}", std::process::id(), rand::random::<u64>()));
        fs::create_dir(&dir).ok()?;
        let procs = dir
            .join("cgroup.kill")
            .exists()
            .then(|| fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs")).ok())
            .flatten();
        let Some(procs) = procs.map(OwnedFd::from) else {
            let _ = fs::remove_dir(&dir);
            return None;
        };
        for (file, value) in [("pids.max", max_processes), ("memory.max", max_memory), ("memory.swap.max", 0)] {
            if dir.join(file).exists() {
                let _ = fs::write(dir.join(file), value.to_string());
            }
        }
        Some(Cgroup { dir, procs })
    }

    /// The descriptor of `cgroup.procs`: the program writes `0` to it to join.
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// Kills every process in the cgroup, waits for it to empty (bounded), then removes
    /// it. Blocking.
    pub fn kill_and_remove(&self) {
        let _ = fs::write(self.dir.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(5);
        while populated(&self.dir) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Err(error) = fs::remove_dir(&self.dir) {
            tracing::warn!(cgroup = %self.dir.display(), %error, "could not remove a validator's cgroup");
        }
    }

    /// Kills every process in the cgroup now (from any thread). Blocking, brief.
    pub fn kill(&self) {
        let _ = fs::write(self.dir.join("cgroup.kill"), "1");
    }
}

/// Whether the cgroup still holds a process.
fn populated(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .map(|events| events.lines().any(|l| l == "populated 1"))
        .unwrap_or(false)
}

/// Writes `0` to a `cgroup.procs` descriptor: the calling process joins that cgroup.
/// Async-signal-safe.
pub(super) fn join_raw(procs: RawFd) -> bool {
    // SAFETY: a two-byte constant buffer.
    unsafe { libc::write(procs, b"0\n".as_ptr().cast(), 2) == 2 }
}
