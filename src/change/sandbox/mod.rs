//! The sandbox programs of a change run in (validators and their `--version`
//! preflight): whatever a model wrote into the copy, and whatever a tenant declared,
//! runs without the host's rights (an invariant in docs/architecture.md; what each
//! guarantee rests on, and its test, is in docs/changes.md).
//!
//! * **Files** (Landlock): read and execute only the system directories
//!   (`/usr /bin /sbin /lib* /etc /opt`, plus `validator_read_paths`) minus Akritas's own
//!   directories ([`Options::hidden`]: `/etc/akritas`, the configuration file, the
//!   resource, data, workspace and knowledge directories), which are carved out of them;
//!   read and write only the copy and the run's scratch HOME and TMPDIR; a few character
//!   devices (`/dev/null` …); of `/proc`, only the program's own entry.
//! * **System calls** (seccomp, on any ABI): no socket of any family (Unix and netlink
//!   included), no change of file modes, owners, times or extended attributes, no
//!   `io_uring`, no foreign system call ABI.
//! * **Signals and abstract Unix sockets** outside the sandbox: scoped away (ABI 6+).
//!   Below [`MIN_ABI`] nothing runs unless `validator_sandbox_allow_weak_landlock` says
//!   so explicitly, and then [`Availability::Confined::lost`] says what is lost.
//! * **Process**: `no_new_privs`; limits on CPU time, address space, processes, file
//!   size and open files; the program is the first the kernel's OOM killer picks; a
//!   supervisor that is the subreaper of the whole tree kills every descendant, `setsid`
//!   ones included, when the program ends or the deadline passes. The host does not
//!   trust the supervisor (the program may have killed it): where it can create a cgroup
//!   v2 it kills the tree through `cgroup.kill` (and caps its processes and memory where
//!   those controllers are enabled); when the host runs as root the program runs as a
//!   fresh unprivileged user, whose every process the host kills at the end. Output is
//!   read until the supervisor ends, never past it.
//! * **Environment**: only what the caller passes (the validators pass `PATH`, `HOME`,
//!   `TMPDIR`, `LANG=C.UTF-8` and names `validator_env` allows).
//!
//! Where the kernel and runtime allow it (`validator_sandbox: auto` or `namespaces`),
//! each program also runs in namespaces of its own ([`namespaces`]): only a read-only view
//! of the read paths, the copy and a few devices exists for it. Without namespaces and
//! without Landlock (or below [`MIN_ABI`]) nothing runs, unless `validator_sandbox: off`
//! says so explicitly (then only the process controls apply, and `/health` says so).

pub mod cgroup;
pub(crate) mod landlock;
mod namespaces;
mod probe;
mod raw;
mod seccomp;
mod supervise;
mod user;

use std::ffi::{CString, OsString};
use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

pub use crate::config::SandboxMode;

pub use supervise::{Ending, Step};

/// The system directories a confined program reads and executes (those that exist).
pub const SYSTEM_READ_PATHS: &[&str] =
    &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"];

/// Akritas's own directory under `/etc` (the image's configuration and resources):
/// never readable by a confined program, whatever the settings say.
pub const AKRITAS_ETC: &str = "/etc/akritas";

/// Character devices a confined program reads and writes.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// The lowest Landlock ABI whose guarantees validators rely on: ABI 6 (Linux 6.12)
/// scopes signals and abstract Unix sockets to the sandbox, so a program can neither kill
/// its supervisor nor reach the host's abstract sockets.
pub const MIN_ABI: u32 = 6;

/// Processes (and threads) a confined program's tree may hold.
pub const MAX_PROCESSES: u64 = 256;
/// Address space of each confined process.
pub const MAX_ADDRESS_SPACE: u64 = 4 << 30;
/// Memory of a confined program's whole tree, where the host's cgroup can cap it.
pub const MAX_TREE_MEMORY: u64 = 2 << 30;
/// Largest file a confined process writes.
pub const MAX_FILE_SIZE: u64 = 256 << 20;
/// Open files of each confined process.
pub const MAX_OPEN_FILES: u64 = 4096;
/// Most Landlock rules the carving of hidden directories may add.
const MAX_RULES: usize = 4096;

/// How long after its deadline the host stops a supervisor that has not ended the run.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long output already written is still read once the supervisor has ended (an
/// escaped process holding the pipe never keeps a run open).
const DRAIN: Duration = Duration::from_millis(200);

/// Whether programs can run, and how confined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Confined: in namespaces of their own and/or by Landlock, with the seccomp filter
    /// where the architecture has one.
    Confined {
        /// Whether each program runs in its own user, mount, PID, network, IPC and UTS
        /// namespaces (see [`namespaces`]).
        namespaces: bool,
        /// The Landlock ABI in use (the kernel's, or less when `abi_limit` says so); 0:
        /// none (only in namespaces).
        abi: u32,
        /// Whether the seccomp filter is installed.
        filter: bool,
        /// What this ABI does not give that [`MIN_ABI`] would, outside namespaces (empty at
        /// or above it): only with `validator_sandbox_allow_weak_landlock`.
        lost: Vec<&'static str>,
        /// Why `auto` could not use namespaces, when it could not.
        fallback: Option<String>,
    },
    /// `validator_sandbox: off`.
    Unconfined,
    /// The required confinement cannot be had: nothing runs.
    Unavailable(String),
}

/// What the settings say about the sandbox.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `validator_sandbox`.
    pub mode: SandboxMode,
    /// `validator_read_paths`: read and executed besides the system directories.
    pub read_paths: Vec<PathBuf>,
    /// Akritas's own directories and files (data, resources, configuration, workspace
    /// and knowledge roots): never readable, even under a read path ([`AKRITAS_ETC`] is
    /// always added).
    pub hidden: Vec<PathBuf>,
    /// `validator_sandbox_allow_weak_landlock`: run below [`MIN_ABI`].
    pub allow_weak_landlock: bool,
    /// `validator_sandbox_landlock_abi_max`: use at most this ABI (to see what an older
    /// kernel gives).
    pub abi_limit: Option<u32>,
}

/// What a kernel of Landlock `abi` does not give that [`MIN_ABI`] would.
pub fn lost_below_minimum(abi: u32) -> Vec<&'static str> {
    let mut lost = Vec::new();
    if abi < MIN_ABI {
        lost.push(
            "signals are not scoped: a validator can signal every process of the host's uid, its supervisor included, \
             and then outlive its timeout where the host has no cgroup v2 and does not run as root",
        );
        lost.push("abstract Unix sockets are not scoped (the seccomp filter still refuses every socket)");
    }
    if abi < 5 {
        lost.push("ioctl on devices is not restricted");
    }
    lost
}

/// Landlock alone (with the seccomp filter), at the kernel's `abi`: below [`MIN_ABI`] only
/// when allowed.
fn landlock_only(abi: Option<u32>, allow_weak: bool, fallback: Option<String>) -> Availability {
    let namespaces_note =
        fallback.as_ref().map(|why| format!(" (namespaces are not available here: {why})")).unwrap_or_default();
    let Some(abi) = abi else {
        return Availability::Unavailable(format!(
            "this kernel has no Landlock (Linux 5.13+ with landlock in the lsm= list){namespaces_note}, so validators do not run; \
             enable Landlock, or set validator_sandbox: off to run them unconfined"
        ));
    };
    let lost = lost_below_minimum(abi);
    if !lost.is_empty() && !allow_weak {
        return Availability::Unavailable(format!(
            "Landlock ABI {abi} is below the {MIN_ABI} validators need (Linux 6.12+){namespaces_note}, so validators do not run: {}; \
             upgrade the kernel, or set validator_sandbox_allow_weak_landlock: true to run them with less",
            lost.join("; ")
        ));
    }
    Availability::Confined { namespaces: false, abi, filter: seccomp::filter(abi).is_some(), lost, fallback }
}

/// How confined programs run on this host.
#[derive(Clone, Debug)]
pub struct Sandbox {
    availability: Availability,
    read_paths: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
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
    /// The sandbox for `mode`, with the system directories and `extra_read` readable and
    /// `data_dir` hidden; the minimum ABI is required.
    pub fn new(mode: SandboxMode, extra_read: &[PathBuf], data_dir: &Path) -> Sandbox {
        Sandbox::with(Options {
            mode,
            read_paths: extra_read.to_vec(),
            hidden: vec![data_dir.to_path_buf()],
            ..Options::default()
        })
    }

    /// The sandbox the options describe.
    pub fn with(options: Options) -> Sandbox {
        let read_paths: Vec<PathBuf> = SYSTEM_READ_PATHS
            .iter()
            .map(PathBuf::from)
            .chain(options.read_paths.iter().cloned())
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        let hidden: Vec<PathBuf> = options
            .hidden
            .iter()
            .map(PathBuf::as_path)
            .chain(std::iter::once(Path::new(AKRITAS_ETC)))
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.to_path_buf()))
            .collect();
        let overlap =
            read_paths.iter().find_map(|p| hidden.iter().find(|h| p.starts_with(h)).map(|h| (p.clone(), h.clone())));
        let kernel = landlock::abi().map(|kernel| options.abi_limit.map_or(kernel, |limit| kernel.min(limit.max(1))));
        let mut sandbox = Sandbox { availability: Availability::Unconfined, read_paths, hidden };
        if options.mode != SandboxMode::Off {
            cgroup::remove_stale();
        }
        sandbox.availability = match (options.mode, overlap) {
            (SandboxMode::Off, _) => Availability::Unconfined,
            (_, Some((path, hidden))) => Availability::Unavailable(format!(
                "the validators' read path {} is inside Akritas's own directory {}; remove it from validator_read_paths or move the directory",
                path.display(),
                hidden.display()
            )),
            (SandboxMode::Landlock, None) => landlock_only(kernel, options.allow_weak_landlock, None),
            (SandboxMode::Namespaces, None) => match sandbox.probe_namespaces(kernel) {
                Ok(confined) => confined,
                Err(why) => Availability::Unavailable(format!(
                    "validator_sandbox is namespaces, but a validator cannot run in namespaces of its own here ({why}), so validators do not run; \
                     allow user namespaces, or set validator_sandbox: auto or landlock"
                )),
            },
            (SandboxMode::Auto, None) => match sandbox.probe_namespaces(kernel) {
                Ok(confined) => confined,
                Err(why) => landlock_only(kernel, options.allow_weak_landlock, Some(why)),
            },
        };
        sandbox
    }

    /// Whether and how programs run.
    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// One line for `/health`, ValidatorProfile status and logs.
    pub fn describe(&self) -> String {
        match &self.availability {
            Availability::Confined { namespaces, abi, filter, lost, fallback } => {
                let mut parts = Vec::new();
                if *namespaces {
                    parts.push("namespaces of its own (user, mount, PID, network) with a read-only view".to_string());
                }
                if *abi > 0 {
                    parts.push(format!("landlock ABI {abi}"));
                }
                parts.push(if *filter {
                    "the seccomp filter (no sockets, no mode, owner or time changes)".to_string()
                } else {
                    "no seccomp filter (none for this architecture)".to_string()
                });
                let mut text = parts.join(", ");
                if !lost.is_empty() {
                    text.push_str(&format!(
                        "; below ABI {MIN_ABI} by validator_sandbox_allow_weak_landlock, so: {}",
                        lost.join("; ")
                    ));
                }
                if let Some(why) = fallback {
                    text.push_str(&format!("; not in namespaces: {why}"));
                }
                text
            }
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
        self.read_paths.iter().any(|p| real.starts_with(p)) && !self.hidden.iter().any(|h| real.starts_with(h))
    }

    /// The directories a confined program reads.
    pub fn read_paths(&self) -> &[PathBuf] {
        &self.read_paths
    }

    /// Runs `request` confined and collects its output. `Err` when it cannot run at all.
    /// When `cancel` fires, the tree is killed and the run ends as [`Ending::Stopped`];
    /// either way this returns only once the supervisor has ended and the host has killed
    /// what it can of the tree.
    pub async fn run(&self, request: Request, cancel: &CancellationToken) -> Result<Outcome, String> {
        if let Some(why) = self.refusal() {
            return Err(why.to_string());
        }
        let sandbox = self.clone();
        let limit = request.output_limit;
        let stop_at = tokio::time::Instant::now() + request.timeout + STOP_GRACE;
        let (read, write) = output_pipe().map_err(|e| format!("cannot create the output pipe: {e}"))?;
        let mut reader = tokio::net::unix::pipe::Receiver::from_owned_fd(read)
            .map_err(|e| format!("cannot read the output pipe: {e}"))?;
        let control = Arc::new(supervise::Control::default());
        let cgroup = if sandbox.availability == Availability::Unconfined {
            None
        } else {
            cgroup::Cgroup::create(MAX_PROCESSES, MAX_TREE_MEMORY).map(Arc::new)
        };
        let (thread_control, thread_cgroup) = (Arc::clone(&control), cgroup.clone());
        let mut supervised = tokio::task::spawn_blocking(move || {
            let procs = thread_cgroup.as_ref().map_or(-1, |c| c.procs_fd());
            match sandbox.prepare(&request, procs) {
                Ok((prepared, lease)) => {
                    let ending = supervise::run(&prepared, write, &thread_control);
                    // The host ends what is left, whatever the supervisor did.
                    if let Some(cgroup) = &thread_cgroup {
                        cgroup.kill();
                    }
                    if let (Some((uid, _)), true) = (prepared.run_as, prepared.own_user) {
                        // SAFETY: the killer child runs only async-signal-safe calls.
                        unsafe { raw::kill_user(uid) };
                    }
                    drop(lease);
                    Ok(ending)
                }
                Err(why) => {
                    // SAFETY: the write end was never handed on.
                    drop(unsafe { OwnedFd::from_raw_fd(write) });
                    Err(why)
                }
            }
        });
        let mut kept = Vec::new();
        let mut truncated = false;
        let mut chunk = vec![0u8; 8192];
        let mut keep = |n: usize, chunk: &[u8]| {
            let room = limit.saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..n.min(room)]);
            truncated |= n > room;
        };
        let (mut open, mut stopped, mut overdue) = (true, false, false);
        let joined = loop {
            tokio::select! {
                read = reader.read(&mut chunk), if open => match read {
                    Ok(0) | Err(_) => open = false,
                    Ok(n) => keep(n, &chunk),
                },
                joined = &mut supervised => break joined,
                _ = cancel.cancelled(), if !stopped => {
                    stopped = true;
                    control.stop();
                    if let Some(cgroup) = &cgroup { cgroup.kill(); }
                }
                _ = tokio::time::sleep_until(stop_at), if !stopped => {
                    (stopped, overdue) = (true, true);
                    control.stop();
                    if let Some(cgroup) = &cgroup { cgroup.kill(); }
                }
            }
        };
        // What is already in the pipe; a process that escaped and holds it open never
        // keeps the run going.
        let drained = tokio::time::Instant::now() + DRAIN;
        while open {
            match tokio::time::timeout_at(drained, reader.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => keep(n, &chunk),
                _ => open = false,
            }
        }
        if let Some(cgroup) = cgroup {
            let _ = tokio::task::spawn_blocking(move || cgroup.kill_and_remove()).await;
        }
        let mut ending = joined.map_err(|e| format!("the supervisor thread failed: {e}"))??;
        if overdue && ending == Ending::Stopped {
            ending = Ending::TimedOut;
        }
        Ok(Outcome { ending, output: kept, truncated })
    }

    /// Everything the supervisor needs, built before the fork, and the lease on the run's
    /// own user (held until the run ends). Blocking.
    fn prepare(
        &self,
        request: &Request,
        cgroup_procs: RawFd,
    ) -> Result<(supervise::Prepared, Option<user::UidLease>), String> {
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
        let (run_as, lease) = match root.then(user::fresh_user) {
            Some((ids, lease)) => (Some(ids), lease),
            None => (None, None),
        };
        let own_user = lease.is_some();
        if let Some((uid, gid)) = run_as {
            user::hand_over(&request.root, std::iter::once(&request.cwd).chain(&request.writable), uid, gid)
                .map_err(|e| format!("cannot hand the copy to the sandbox user: {e}"))?;
        }
        let processes = if own_user {
            MAX_PROCESSES
        } else {
            // The limit counts every process of the user, the host's threads included.
            MAX_PROCESSES + user::own_threads()
        };
        let limits = vec![
            (libc::RLIMIT_CPU, request.timeout.as_secs().saturating_add(1)),
            (libc::RLIMIT_AS, MAX_ADDRESS_SPACE),
            (libc::RLIMIT_NPROC, processes),
            (libc::RLIMIT_FSIZE, MAX_FILE_SIZE),
            (libc::RLIMIT_NOFILE, MAX_OPEN_FILES),
            (libc::RLIMIT_CORE, 0),
        ];
        let (ruleset, filter, view) = match &self.availability {
            Availability::Confined { abi, namespaces, .. } => {
                let ruleset = if *abi > 0 {
                    Some(self.ruleset(*abi, request).map_err(|e| format!("cannot build the Landlock rules: {e}"))?)
                } else {
                    None
                };
                let view = if *namespaces {
                    // SAFETY: trivially safe.
                    let ids = run_as.unwrap_or_else(|| unsafe { (libc::geteuid(), libc::getegid()) });
                    Some(self.view(request, ids)?)
                } else {
                    None
                };
                (ruleset, seccomp::filter(*abi), view)
            }
            _ => (None, None, None),
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
            no_new_privs: ruleset.is_some() || filter.is_some(),
            ruleset,
            filter,
            timeout: request.timeout,
            cgroup_procs,
            namespaces: view,
        };
        Ok((prepared, lease))
    }

    fn ruleset(&self, abi: u32, request: &Request) -> io::Result<landlock::Ruleset> {
        use landlock::fs;
        let mut rules = landlock::Ruleset::new(abi)?;
        for path in carve(&self.read_paths, &self.hidden) {
            rules.allow(&path, fs::READ)?;
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

/// What to grant read access to so that every `read` path is readable except what lies
/// under a `hidden` one: a read path that holds a hidden one is replaced by its entries
/// (recursively, symlinks left out: their targets are granted where they lie). Landlock
/// grants whole hierarchies, so this is the only way to take a subtree back. Blocking.
fn carve(read: &[PathBuf], hidden: &[PathBuf]) -> Vec<PathBuf> {
    fn walk(path: &Path, hidden: &[PathBuf], out: &mut Vec<PathBuf>) {
        if out.len() >= MAX_RULES || hidden.iter().any(|h| path.starts_with(h)) {
            return;
        }
        if !hidden.iter().any(|h| h.starts_with(path)) {
            out.push(path.to_path_buf());
            return;
        }
        let Ok(entries) = fs::read_dir(path) else { return };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| !t.is_symlink()) {
                walk(&entry.path(), hidden, out);
            }
        }
    }
    let mut out = Vec::new();
    for path in read {
        walk(path, hidden, &mut out);
    }
    out
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

#[cfg(test)]
mod tests;
