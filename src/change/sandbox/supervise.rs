//! The process side of the sandbox: a supervisor forked from the host, and the program
//! it starts.
//!
//! The supervisor is a child of a multi-threaded process, so between `fork` and its
//! `_exit` it makes only async-signal-safe system calls on memory prepared before the
//! fork (no allocation, no locks, no panics). It closes every descriptor it does not
//! need, leads a new session, becomes the subreaper of everything the program starts
//! (so a `setsid` child cannot escape it), starts the program, waits for it until the
//! deadline, then kills every descendant left and reports how the program ended.
//! When the host dies, the kernel sends the supervisor `SIGTERM` and it does the same.

use std::ffi::CString;
use std::os::fd::RawFd;
use std::time::Duration;

use std::sync::Mutex;

use super::raw::{close_all, close_except, kill_descendants, kill_user, last_errno, now, pipe, read_full, write_words};
use super::{cgroup, landlock, namespaces, seccomp};

/// Where the program's start failed (reported with the errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Step {
    /// Redirecting standard input, output and error.
    Stdio = 1,
    /// Setting a resource limit.
    Limits = 2,
    /// Dropping to the sandbox's user and group.
    User = 3,
    /// Entering the working directory.
    Chdir = 4,
    /// `no_new_privs`.
    NoNewPrivs = 5,
    /// Entering the Landlock domain.
    Landlock = 6,
    /// Installing the seccomp filter.
    Seccomp = 7,
    /// `execve`.
    Exec = 8,
    /// Starting the supervisor or the program (`fork`).
    Fork = 9,
    /// Joining the run's cgroup.
    Cgroup = 10,
    /// Entering namespaces of its own.
    Namespaces = 11,
    /// Building its filesystem view.
    Mount = 12,
    /// Dropping its capabilities.
    Capabilities = 13,
}

impl Step {
    fn from_raw(raw: i32) -> Option<Step> {
        [
            Step::Stdio,
            Step::Limits,
            Step::User,
            Step::Chdir,
            Step::NoNewPrivs,
            Step::Landlock,
            Step::Seccomp,
            Step::Exec,
            Step::Fork,
            Step::Cgroup,
            Step::Namespaces,
            Step::Mount,
            Step::Capabilities,
        ]
        .into_iter()
        .find(|s| *s as i32 == raw)
    }

    /// What the step does, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Step::Stdio => "redirecting its output",
            Step::Limits => "setting its resource limits",
            Step::User => "switching to the sandbox user",
            Step::Chdir => "entering the copy",
            Step::NoNewPrivs => "setting no_new_privs",
            Step::Landlock => "entering the Landlock sandbox",
            Step::Seccomp => "installing the network filter",
            Step::Exec => "executing it",
            Step::Fork => "starting a process",
            Step::Cgroup => "joining its cgroup",
            Step::Namespaces => "entering its own namespaces",
            Step::Mount => "building its filesystem view",
            Step::Capabilities => "dropping its capabilities",
        }
    }
}

/// How the program ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
    /// The deadline passed; it and its descendants were killed.
    TimedOut,
    /// The host went away or asked the supervisor to stop.
    Stopped,
    /// It could not be started.
    NotStarted {
        /// The setup step that failed (stdio, limits, Landlock, seccomp, `execve`, `fork`, ...).
        step: Step,
        /// The OS error number.
        errno: i32,
    },
}

/// Everything the supervisor and the program use, prepared before the fork.
pub struct Prepared {
    /// The program's absolute path.
    pub program: CString,
    /// argv, NUL-terminated pointers into `_argv_storage`.
    pub argv: Vec<*const libc::c_char>,
    /// Keeps the strings of `argv` alive.
    pub _argv_storage: Vec<CString>,
    /// envp, NUL-terminated pointers into `_env_storage`.
    pub envp: Vec<*const libc::c_char>,
    /// Keeps the strings of `envp` alive.
    pub _env_storage: Vec<CString>,
    /// Working directory.
    pub cwd: CString,
    /// Resource limits (resource, soft = hard).
    pub limits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    /// User and group to run as (when the host runs as root).
    pub run_as: Option<(libc::uid_t, libc::gid_t)>,
    /// Whether `run_as` is a user of this run alone: then one `kill(-1)` as that user
    /// ends the whole tree at once (a fork bomb included).
    pub own_user: bool,
    /// Set `no_new_privs` (always when confined).
    pub no_new_privs: bool,
    /// The Landlock ruleset to enter.
    pub ruleset: Option<landlock::Ruleset>,
    /// The seccomp filter to install.
    pub filter: Option<Vec<libc::sock_filter>>,
    /// Wall-time limit.
    pub timeout: Duration,
    /// `cgroup.procs` of the run's cgroup, which the program joins first (-1: none).
    pub cgroup_procs: RawFd,
    /// Namespaces of its own, and the filesystem view in them.
    pub namespaces: Option<namespaces::View>,
}

/// The host's hold on a running supervisor: [`Control::stop`] asks it to end the run,
/// from any thread, while its pid cannot have been reused (it is cleared before the
/// supervisor is reaped).
#[derive(Debug, Default)]
pub struct Control {
    supervisor: Mutex<Option<libc::pid_t>>,
}

impl Control {
    fn set(&self, pid: Option<libc::pid_t>) {
        *self.supervisor.lock().unwrap_or_else(|p| p.into_inner()) = pid;
    }

    /// Asks the supervisor to kill the tree and report [`Ending::Stopped`].
    pub fn stop(&self) {
        if let Some(pid) = *self.supervisor.lock().unwrap_or_else(|p| p.into_inner()) {
            // SAFETY: signalling our own child, not reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

/// Builds a NUL-terminated pointer array over `strings`.
pub fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
}

// SAFETY (whole type): the raw pointers point into the CStrings owned alongside them.
unsafe impl Send for Prepared {}

const REPORT_EXITED: i32 = 1;
const REPORT_SIGNALED: i32 = 2;
const REPORT_TIMED_OUT: i32 = 3;
const REPORT_STOPPED: i32 = 4;
const REPORT_NOT_STARTED: i32 = 5;

/// Runs `prepared` under a supervisor with its standard output and error on `output`
/// (a pipe's write end, which this closes). Blocking: call it on a thread that lives
/// until it returns (the supervisor's parent-death signal follows the forking thread).
pub fn run(prepared: &Prepared, output: RawFd, control: &Control) -> Ending {
    let Ok((report_read, report_write)) = pipe() else {
        let errno = last_errno();
        close_all(&[output]);
        return Ending::NotStarted { step: Step::Fork, errno };
    };
    // SAFETY: O_RDWR on a constant path.
    let devnull = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if devnull < 0 {
        let errno = last_errno();
        close_all(&[report_read, report_write, output]);
        return Ending::NotStarted { step: Step::Stdio, errno };
    }
    // SAFETY: trivially safe.
    let host = unsafe { libc::getpid() };
    // SAFETY: the child runs only async-signal-safe code on memory prepared above and
    // never returns (see the module documentation).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the forked child.
        unsafe { supervise(prepared, host, output, report_write, devnull) }
    }
    close_all(&[report_write, devnull, output]);
    if pid < 0 {
        let errno = last_errno();
        close_all(&[report_read]);
        return Ending::NotStarted { step: Step::Fork, errno };
    }
    control.set(Some(pid));
    loop {
        // Waits for the end without reaping, so `control` never signals a reused pid.
        // SAFETY: waiting for our own child; `info` is a valid out-pointer.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let done = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if done == 0 || last_errno() != libc::EINTR {
            break;
        }
    }
    control.set(None);
    let mut status = 0;
    loop {
        // SAFETY: reaping our own child.
        let done = unsafe { libc::waitpid(pid, &mut status, 0) };
        if done == pid || (done < 0 && last_errno() != libc::EINTR) {
            break;
        }
    }
    let mut report = [0u8; 16];
    let got = read_full(report_read, &mut report);
    close_all(&[report_read]);
    if got != report.len() {
        return Ending::Stopped;
    }
    let word = |i: usize| i32::from_ne_bytes([report[i * 4], report[i * 4 + 1], report[i * 4 + 2], report[i * 4 + 3]]);
    match word(0) {
        REPORT_EXITED => Ending::Exited(word(1)),
        REPORT_SIGNALED => Ending::Signaled(word(1)),
        REPORT_TIMED_OUT => Ending::TimedOut,
        REPORT_NOT_STARTED => {
            Ending::NotStarted { step: Step::from_raw(word(2)).unwrap_or(Step::Exec), errno: word(3) }
        }
        _ => Ending::Stopped,
    }
}

/// The supervisor. Never returns.
unsafe fn supervise(p: &Prepared, host: libc::pid_t, output: RawFd, report: RawFd, devnull: RawFd) -> ! {
    // SAFETY: async-signal-safe system calls only, on memory prepared before the fork.
    unsafe {
        let ruleset = p.ruleset.as_ref().map_or(-1, landlock::Ruleset::fd);
        close_except(&mut [output, report, devnull, ruleset, p.cgroup_procs]);
        libc::setsid();
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
        if libc::getppid() != host {
            write_words(report, [REPORT_STOPPED, 0, 0, 0]);
            libc::_exit(0);
        }
        let mut watched: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut watched);
        for signal in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut watched, signal);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &watched, std::ptr::null_mut());
        let deadline = now() + p.timeout;
        let mut failed = [0i32; 2];
        let (failure_read, failure_write) = match pipe() {
            Ok(fds) => fds,
            Err(_) => {
                write_words(report, [REPORT_NOT_STARTED, 0, Step::Fork as i32, last_errno()]);
                libc::_exit(0);
            }
        };
        // Namespaces: the setup child says when it has its user namespace (`ready`), this
        // process writes its uid and gid maps and answers with an errno (`go`), and the
        // namespaces' init reports how the program ended (`status`).
        let mut sync = [-1; 6];
        if p.namespaces.is_some() {
            for pair in sync.chunks_mut(2) {
                match pipe() {
                    Ok((read, write)) => (pair[0], pair[1]) = (read, write),
                    Err(_) => {
                        write_words(report, [REPORT_NOT_STARTED, 0, Step::Fork as i32, last_errno()]);
                        libc::_exit(0);
                    }
                }
            }
        }
        let [ready_read, ready_write, go_read, go_write, status_read, status_write] = sync;
        let child = libc::fork();
        if child == 0 {
            match &p.namespaces {
                Some(view) => {
                    close_all(&[ready_read, go_write, status_read]);
                    start_in_namespaces(p, view, [output, devnull, failure_write, ready_write, go_read, status_write])
                }
                None => start_program(p, output, devnull, failure_write),
            }
        }
        close_all(&[output, devnull, failure_write]);
        if let Some(view) = &p.namespaces {
            close_all(&[ready_write, go_read, status_write]);
            let mut byte = [0u8; 1];
            if child > 0 && read_full(ready_read, &mut byte) == 1 {
                let errno = namespaces::write_maps(child, view);
                libc::write(go_write, errno.to_ne_bytes().as_ptr().cast(), 4);
            }
            close_all(&[ready_read, go_write]);
        }
        for fd in [ruleset, p.cgroup_procs] {
            if fd >= 0 {
                close_all(&[fd]);
            }
        }
        if child < 0 {
            write_words(report, [REPORT_NOT_STARTED, 0, Step::Fork as i32, last_errno()]);
            libc::_exit(0);
        }
        // Eight bytes when the program could not start; end of file once it executes.
        let mut bytes = [0u8; 8];
        if read_full(failure_read, &mut bytes) == 8 {
            failed = [
                i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
                i32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            ];
        }
        close_all(&[failure_read]);
        let mut ending = [REPORT_STOPPED, 0, 0, 0];
        loop {
            let mut status = 0;
            let mut main_done = false;
            loop {
                let reaped = libc::waitpid(-1, &mut status, libc::WNOHANG);
                if reaped <= 0 {
                    break;
                }
                if reaped == child {
                    main_done = true;
                    ending = if p.namespaces.is_some() {
                        // The init reported the program's end before it and its parent exited.
                        let mut bytes = [0u8; 8];
                        if read_full(status_read, &mut bytes) == 8 {
                            let word =
                                |i: usize| i32::from_ne_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
                            [word(0), word(4), 0, 0]
                        } else {
                            [REPORT_STOPPED, 0, 0, 0]
                        }
                    } else if libc::WIFSIGNALED(status) {
                        [REPORT_SIGNALED, libc::WTERMSIG(status), 0, 0]
                    } else {
                        [REPORT_EXITED, libc::WEXITSTATUS(status), 0, 0]
                    };
                    break;
                }
            }
            if main_done {
                break;
            }
            let left = deadline.saturating_sub(now());
            if left.is_zero() {
                ending = [REPORT_TIMED_OUT, 0, 0, 0];
                break;
            }
            let wait = libc::timespec { tv_sec: left.as_secs() as libc::time_t, tv_nsec: left.subsec_nanos() as _ };
            let signal = libc::sigtimedwait(&watched, std::ptr::null_mut(), &wait);
            if signal == libc::SIGTERM || signal == libc::SIGINT || signal == libc::SIGHUP {
                ending = [REPORT_STOPPED, 0, 0, 0];
                break;
            }
        }
        if failed[0] != 0 {
            ending = [REPORT_NOT_STARTED, 0, failed[0], failed[1]];
        }
        if let (Some((uid, _)), true) = (p.run_as, p.own_user) {
            kill_user(uid);
        }
        kill_descendants();
        write_words(report, ending);
        libc::_exit(0);
    }
}

/// The program's side of the second fork: confine, then execute. Never returns.
unsafe fn start_program(p: &Prepared, output: RawFd, devnull: RawFd, failure: RawFd) -> ! {
    // SAFETY: async-signal-safe system calls only, on memory prepared before the fork.
    unsafe {
        let fail = |step: Step| -> ! {
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&(step as i32).to_ne_bytes());
            bytes[4..].copy_from_slice(&last_errno().to_ne_bytes());
            libc::write(failure, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127);
        };
        // In namespaces, the setup child did this before entering them.
        if p.namespaces.is_none() && !join_cgroup_first_for_oom(p) {
            fail(Step::Cgroup);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // The host ignores SIGPIPE; a program expects the default.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if libc::dup2(devnull, 0) < 0 || libc::dup2(output, 1) < 0 || libc::dup2(output, 2) < 0 {
            fail(Step::Stdio);
        }
        for (resource, value) in &p.limits {
            let limit = libc::rlimit { rlim_cur: *value, rlim_max: *value };
            if libc::setrlimit(*resource, &limit) < 0 {
                fail(Step::Limits);
            }
        }
        if let (Some((uid, gid)), None) = (p.run_as, &p.namespaces)
            && (libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) < 0
                || libc::syscall(libc::SYS_setresgid, gid, gid, gid) < 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) < 0)
        {
            fail(Step::User);
        }
        if libc::chdir(p.cwd.as_ptr()) < 0 {
            fail(Step::Chdir);
        }
        if p.namespaces.is_some() && !namespaces::drop_capabilities() {
            fail(Step::Capabilities);
        }
        if p.no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            fail(Step::NoNewPrivs);
        }
        if let Some(ruleset) = &p.ruleset {
            // Its own /proc/<pid>, readable (what a runtime reads of itself); nothing else
            // of /proc.
            // (In namespaces whose runtime forbids a fresh /proc there is none to read.)
            let me = libc::open(c"/proc/self".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
            let unreadable = me < 0 && p.namespaces.is_none();
            // In namespaces, directories of the view may be listed: the view holds nothing
            // but what the program may read anyway.
            let view = if p.namespaces.is_some() {
                libc::open(c"/".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            } else {
                -1
            };
            if view >= 0 && landlock::add_rule(ruleset.fd(), view, landlock::fs::READ_DIR).is_err() {
                fail(Step::Landlock);
            }
            if view >= 0 {
                libc::close(view);
            }
            if unreadable
                || (me >= 0
                    && landlock::add_rule(ruleset.fd(), me, landlock::fs::READ_FILE | landlock::fs::READ_DIR).is_err())
                || landlock::restrict_self_raw(ruleset.fd()) < 0
            {
                fail(Step::Landlock);
            }
            if me >= 0 {
                libc::close(me);
            }
        }
        if let Some(filter) = &p.filter
            && seccomp::install_raw(filter) < 0
        {
            fail(Step::Seccomp);
        }
        close_except(&mut [failure]);
        libc::execve(p.program.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
        fail(Step::Exec);
    }
}

/// Joins the run's cgroup (while the process still has the host's rights over it: from
/// then on the host can kill the whole tree without the supervisor) and makes the process
/// the one the kernel's OOM killer picks first. Async-signal-safe.
unsafe fn join_cgroup_first_for_oom(p: &Prepared) -> bool {
    // SAFETY: system calls on constant paths.
    unsafe {
        if p.cgroup_procs >= 0 && !cgroup::join_raw(p.cgroup_procs) {
            return false;
        }
        let score = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if score >= 0 {
            libc::write(score, b"1000".as_ptr().cast(), 4);
            libc::close(score);
        }
        true
    }
}

/// The setup child of a run in namespaces of its own. Never returns.
///
/// It joins the cgroup, drops a root host's supplementary groups, enters new user, mount,
/// PID, network, IPC and UTS namespaces, waits for the supervisor to map its uid, becomes
/// uid 0 there, builds the filesystem view, and starts the namespaces' init, which enters
/// the view, starts the program ([`start_program`]) and, once it ends, reports how on
/// `status` and exits: the kernel then kills whatever the program left in the namespace.
unsafe fn start_in_namespaces(p: &Prepared, view: &namespaces::View, fds: [RawFd; 6]) -> ! {
    let [output, devnull, failure, ready, go, status] = fds;
    // SAFETY: async-signal-safe system calls only, on memory prepared before the fork.
    unsafe {
        let fail = |step: Step, errno: i32| -> ! {
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&(step as i32).to_ne_bytes());
            bytes[4..].copy_from_slice(&errno.to_ne_bytes());
            libc::write(failure, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127);
        };
        if !join_cgroup_first_for_oom(p) {
            fail(Step::Cgroup, last_errno());
        }
        if p.run_as.is_some() && libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) < 0 {
            fail(Step::User, last_errno());
        }
        let flags = libc::CLONE_NEWUSER
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWNET
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS;
        if libc::unshare(flags) < 0 {
            fail(Step::Namespaces, last_errno());
        }
        libc::write(ready, b"1".as_ptr().cast(), 1);
        let mut answer = [0u8; 4];
        if read_full(go, &mut answer) != 4 {
            fail(Step::Namespaces, libc::EPIPE);
        }
        let errno = i32::from_ne_bytes(answer);
        if errno != 0 {
            fail(Step::Namespaces, errno);
        }
        close_all(&[ready, go]);
        if libc::syscall(libc::SYS_setresgid, 0, 0, 0) < 0 || libc::syscall(libc::SYS_setresuid, 0, 0, 0) < 0 {
            fail(Step::User, last_errno());
        }
        if !namespaces::build(view) {
            fail(Step::Mount, last_errno());
        }
        let init = libc::fork();
        if init == 0 {
            if !namespaces::enter(view) {
                fail(Step::Mount, last_errno());
            }
            let program = libc::fork();
            if program == 0 {
                close_all(&[status]);
                start_program(p, output, devnull, failure);
            }
            if program < 0 {
                fail(Step::Fork, last_errno());
            }
            close_all(&[output, devnull, failure]);
            // The init: reaps everything re-parented to it until the program itself ends.
            loop {
                let mut code = 0;
                let reaped = libc::waitpid(-1, &mut code, 0);
                if reaped == program {
                    let words = if libc::WIFSIGNALED(code) {
                        [REPORT_SIGNALED, libc::WTERMSIG(code)]
                    } else {
                        [REPORT_EXITED, libc::WEXITSTATUS(code)]
                    };
                    let mut bytes = [0u8; 8];
                    bytes[..4].copy_from_slice(&words[0].to_ne_bytes());
                    bytes[4..].copy_from_slice(&words[1].to_ne_bytes());
                    libc::write(status, bytes.as_ptr().cast(), 8);
                    libc::_exit(0);
                }
                if reaped < 0 && last_errno() != libc::EINTR {
                    libc::_exit(0);
                }
            }
        }
        if init < 0 {
            fail(Step::Fork, last_errno());
        }
        close_all(&[output, devnull, failure, status]);
        loop {
            let done = libc::waitpid(init, std::ptr::null_mut(), 0);
            if done == init || (done < 0 && last_errno() != libc::EINTR) {
                libc::_exit(0);
            }
        }
    }
}
