//! The sandbox programs of a change run in (validators and their `--version`
//! preflight): whatever a model wrote into the copy, and whatever a tenant declared,
//! runs without the host's rights (an invariant in docs/architecture.md).
//!
//! * **Files** (Landlock): read and execute only the system directories
//!   (`/usr /bin /sbin /lib* /etc /opt`, plus `validator_read_paths`); read and write
//!   only the copy and the run's scratch HOME and TMPDIR; a few character devices
//!   (`/dev/null` …); of `/proc`, only the program's own entry. Never the data directory
//!   (refused when a read path would contain it).
//! * **Network**: Landlock denies TCP bind and connect (ABI 4+); a seccomp filter denies
//!   every socket but Unix and netlink ones (UDP too) and `io_uring`, on any ABI.
//! * **Signals and abstract Unix sockets** outside the sandbox: scoped away (ABI 6+).
//! * **Process**: `no_new_privs`; limits on CPU time, address space, processes, file
//!   size and open files; a supervisor that is the subreaper of the whole tree kills
//!   every descendant, `setsid` ones included, when the program ends or the deadline
//!   passes; when the host runs as root the program runs as a fresh unprivileged user
//!   (so the process limit counts its tree alone, and root's capabilities are gone).
//! * **Environment**: only what the caller passes (the validators pass `PATH`, `HOME`,
//!   `TMPDIR`, `LANG=C.UTF-8` and names `validator_env` allows).
//!
//! Without Landlock nothing runs, unless `validator_sandbox: off` says so explicitly
//! (then only the process controls apply, and `/health` says so).

pub(crate) mod landlock;
mod seccomp;
mod supervise;

use std::ffi::{CString, OsString};
use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncReadExt;

pub use crate::config::SandboxMode;

pub use supervise::{Ending, Step};

/// The system directories a confined program reads and executes (those that exist).
pub const SYSTEM_READ_PATHS: &[&str] =
    &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"];

/// Character devices a confined program reads and writes.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// Processes (and threads) a confined program's tree may hold.
pub const MAX_PROCESSES: u64 = 256;
/// Address space of each confined process.
pub const MAX_ADDRESS_SPACE: u64 = 4 << 30;
/// Largest file a confined process writes.
pub const MAX_FILE_SIZE: u64 = 256 << 20;
/// Open files of each confined process.
pub const MAX_OPEN_FILES: u64 = 4096;

/// First uid of the range a root host runs confined programs as (one fresh uid a run).
const FRESH_UID_BASE: u32 = 0x8000_0000;
/// Size of that range.
const FRESH_UID_SPAN: u32 = 1 << 20;
/// The uid (and gid) used when the user namespace maps no fresh range: `nobody`.
const NOBODY: u32 = 65534;

/// Whether programs can run, and how confined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Landlock of this ABI, plus the seccomp network filter where the architecture has one.
    Confined {
        /// The kernel's Landlock ABI.
        abi: u32,
        /// Whether the seccomp network filter is installed.
        network_filter: bool,
    },
    /// `validator_sandbox: off`.
    Unconfined,
    /// Landlock is required and cannot be had: nothing runs.
    Unavailable(String),
}

/// How confined programs run on this host.
#[derive(Clone, Debug)]
pub struct Sandbox {
    availability: Availability,
    read_paths: Vec<PathBuf>,
}

/// One program to run confined.
#[derive(Clone, Debug)]
pub struct Request {
    /// The program, an absolute path.
    pub program: PathBuf,
    /// Its arguments (argv[0] is the program as named).
    pub argv: Vec<String>,
    /// Working directory (writable).
    pub cwd: PathBuf,
    /// Directories the program may write besides `cwd` (its HOME and TMPDIR).
    pub writable: Vec<PathBuf>,
    /// A directory owned by the host that contains `cwd` and `writable`: when the program
    /// runs as another user, the directories from here down become traversable by it.
    pub root: PathBuf,
    /// The whole environment.
    pub env: Vec<(String, OsString)>,
    /// Wall-time limit for the whole tree.
    pub timeout: Duration,
    /// Bytes of combined output kept.
    pub output_limit: usize,
}

/// How a confined program ended and what it printed.
#[derive(Debug)]
pub struct Outcome {
    /// How it ended.
    pub ending: Ending,
    /// Standard output and error, interleaved, at most the limit.
    pub output: Vec<u8>,
    /// Whether output was cut at the limit.
    pub truncated: bool,
}

impl Sandbox {
    /// The sandbox for `mode`, with the system directories and `extra_read` readable.
    /// `data_dir` must not be under any of them.
    pub fn new(mode: SandboxMode, extra_read: &[PathBuf], data_dir: &Path) -> Sandbox {
        let read_paths: Vec<PathBuf> = SYSTEM_READ_PATHS
            .iter()
            .map(PathBuf::from)
            .chain(extra_read.iter().cloned())
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        let data = data_dir.canonicalize().unwrap_or_else(|_| data_dir.to_path_buf());
        let overlap = read_paths.iter().find(|p| data.starts_with(p) || p.starts_with(&data));
        let availability = if let (SandboxMode::Landlock, Some(path)) = (mode, overlap) {
            Availability::Unavailable(format!(
                "the data directory {} overlaps the validators' read path {}; move the data directory or remove the path from validator_read_paths",
                data.display(),
                path.display()
            ))
        } else {
            match (mode, landlock::abi()) {
                (SandboxMode::Off, _) => Availability::Unconfined,
                (SandboxMode::Landlock, Some(abi)) => {
                    Availability::Confined { abi, network_filter: seccomp::network_filter().is_some() }
                }
                (SandboxMode::Landlock, None) => Availability::Unavailable(
                    "this kernel has no Landlock (Linux 5.13+ with landlock in the lsm= list), so validators do not run; \
                     enable Landlock, or set validator_sandbox: off to run them unconfined"
                        .into(),
                ),
            }
        };
        Sandbox { availability, read_paths }
    }

    /// Whether and how programs run.
    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// One line for `/health` and logs.
    pub fn describe(&self) -> String {
        match &self.availability {
            Availability::Confined { abi, network_filter } => format!(
                "landlock ABI {abi}{}",
                if *network_filter { " with the seccomp network filter" } else { " (TCP only from ABI 4)" }
            ),
            Availability::Unconfined => "off: validators run unconfined (validator_sandbox: off)".into(),
            Availability::Unavailable(why) => format!("unavailable: {why}"),
        }
    }

    /// Why nothing can run, if so.
    pub fn refusal(&self) -> Option<&str> {
        match &self.availability {
            Availability::Unavailable(why) => Some(why),
            _ => None,
        }
    }

    /// Whether `program` (symlinks resolved) can be executed from inside the sandbox.
    pub fn reaches(&self, program: &Path) -> bool {
        if self.availability == Availability::Unconfined {
            return true;
        }
        let real = program.canonicalize().unwrap_or_else(|_| program.to_path_buf());
        self.read_paths.iter().any(|p| real.starts_with(p))
    }

    /// The directories a confined program reads.
    pub fn read_paths(&self) -> &[PathBuf] {
        &self.read_paths
    }

    /// Runs `request` confined and collects its output. `Err` when it cannot run at all.
    pub async fn run(&self, request: Request) -> Result<Outcome, String> {
        if let Some(why) = self.refusal() {
            return Err(why.to_string());
        }
        let sandbox = self.clone();
        let limit = request.output_limit;
        let (read, write) = output_pipe().map_err(|e| format!("cannot create the output pipe: {e}"))?;
        let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(read)
            .map_err(|e| format!("cannot read the output pipe: {e}"))?;
        let supervised = tokio::task::spawn_blocking(move || match sandbox.prepare(&request) {
            Ok((prepared, _lease)) => Ok(supervise::run(&prepared, write)),
            Err(why) => {
                // SAFETY: the write end was never handed on.
                drop(unsafe { OwnedFd::from_raw_fd(write) });
                Err(why)
            }
        });
        let (output, truncated) = collect(reader, limit).await;
        let ending = supervised.await.map_err(|e| format!("the supervisor thread failed: {e}"))??;
        Ok(Outcome { ending, output, truncated })
    }

    /// Everything the supervisor needs, built before the fork, and the lease on the run's
    /// own user (held until the run ends). Blocking.
    fn prepare(&self, request: &Request) -> Result<(supervise::Prepared, Option<UidLease>), String> {
        let c = |bytes: &[u8], what: &str| CString::new(bytes).map_err(|_| format!("{what} contains a NUL byte"));
        let argv_storage =
            request.argv.iter().map(|a| c(a.as_bytes(), "an argument")).collect::<Result<Vec<_>, _>>()?;
        let env_storage = request
            .env
            .iter()
            .map(|(name, value)| {
                let mut entry = OsString::from(name);
                entry.push("=");
                entry.push(value);
                c(&entry.into_vec(), "an environment variable")
            })
            .collect::<Result<Vec<_>, _>>()?;
        // SAFETY: trivially safe.
        let root = unsafe { libc::geteuid() } == 0;
        let (run_as, lease) = match root.then(fresh_user) {
            Some((ids, lease)) => (Some(ids), lease),
            None => (None, None),
        };
        let own_user = lease.is_some();
        if let Some((uid, gid)) = run_as {
            hand_over(&request.root, std::iter::once(&request.cwd).chain(&request.writable), uid, gid)
                .map_err(|e| format!("cannot hand the copy to the sandbox user: {e}"))?;
        }
        let processes = if own_user {
            MAX_PROCESSES
        } else {
            // The limit counts every process of the user, the host's threads included.
            MAX_PROCESSES + own_threads()
        };
        let limits = vec![
            (libc::RLIMIT_CPU, request.timeout.as_secs().saturating_add(1)),
            (libc::RLIMIT_AS, MAX_ADDRESS_SPACE),
            (libc::RLIMIT_NPROC, processes),
            (libc::RLIMIT_FSIZE, MAX_FILE_SIZE),
            (libc::RLIMIT_NOFILE, MAX_OPEN_FILES),
            (libc::RLIMIT_CORE, 0),
        ];
        let (ruleset, filter) = match &self.availability {
            Availability::Confined { abi, .. } => (
                Some(self.ruleset(*abi, request).map_err(|e| format!("cannot build the Landlock rules: {e}"))?),
                seccomp::network_filter(),
            ),
            _ => (None, None),
        };
        let argv = supervise::pointers(&argv_storage);
        let envp = supervise::pointers(&env_storage);
        let prepared = supervise::Prepared {
            program: c(request.program.as_os_str().as_bytes(), "the program path")?,
            argv,
            _argv_storage: argv_storage,
            envp,
            _env_storage: env_storage,
            cwd: c(request.cwd.as_os_str().as_bytes(), "the working directory")?,
            limits,
            run_as,
            own_user,
            no_new_privs: ruleset.is_some(),
            ruleset,
            filter,
            timeout: request.timeout,
        };
        Ok((prepared, lease))
    }

    fn ruleset(&self, abi: u32, request: &Request) -> io::Result<landlock::Ruleset> {
        use landlock::fs;
        let mut rules = landlock::Ruleset::new(abi)?;
        for path in &self.read_paths {
            rules.allow(path, fs::READ)?;
        }
        for device in DEVICES {
            rules.allow(Path::new(device), fs::READ_FILE | fs::WRITE_FILE | fs::TRUNCATE | fs::IOCTL_DEV)?;
        }
        for dir in std::iter::once(&request.cwd).chain(&request.writable) {
            rules.allow(dir, u64::MAX)?;
        }
        Ok(rules)
    }
}

/// A pipe for the program's output: (read end, write end), both close-on-exec.
fn output_pipe() -> io::Result<(OwnedFd, RawFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we own; the write end is handed to `supervise::run`.
    Ok((unsafe { OwnedFd::from_raw_fd(fds[0]) }, fds[1]))
}

/// Reads `reader` to its end, keeping at most `limit` bytes (the rest is drained so the
/// program never blocks on a full pipe).
async fn collect(mut reader: tokio::net::unix::pipe::Receiver, limit: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut chunk = vec![0u8; 8192];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return (kept, truncated),
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
                truncated |= n > room;
            }
        }
    }
}

/// The fresh uids of the runs under way (a uid is never shared by two runs).
static FRESH_IN_USE: std::sync::Mutex<std::collections::BTreeSet<u32>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A fresh uid held by one run; released on drop.
struct UidLease(u32);

impl Drop for UidLease {
    fn drop(&mut self) {
        FRESH_IN_USE.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.0);
    }
}

/// A fresh unprivileged user for one run of a root host: a random uid (not used by
/// another run) of a range the user namespace maps, else `nobody`.
fn fresh_user() -> ((libc::uid_t, libc::gid_t), Option<UidLease>) {
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
fn own_threads() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Threads:").and_then(|n| n.trim().parse().ok())))
        .unwrap_or(64)
}

/// Gives `dirs` (recursively) to `uid:gid` and makes the directories from `root` down to
/// each of them traversable by others. Blocking.
fn hand_over<'a>(
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

#[cfg(test)]
mod tests;
