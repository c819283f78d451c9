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
        /// Where.
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

/// The calling thread's errno. Async-signal-safe.
pub(super) fn errno() -> i32 {
    last_errno()
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A close-on-exec pipe: (read, write).
fn pipe() -> std::io::Result<(RawFd, RawFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

fn close_all(fds: &[RawFd]) {
    for fd in fds {
        // SAFETY: closing descriptors this module opened.
        unsafe { libc::close(*fd) };
    }
}

/// Reads until `buf` is full or end of file. Async-signal-safe.
fn read_full(fd: RawFd, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: writing into the unread part of `buf`.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n > 0 {
            got += n as usize;
        } else if n == 0 || last_errno() != libc::EINTR {
            break;
        }
    }
    got
}

fn write_words(fd: RawFd, words: [i32; 4]) {
    let mut bytes = [0u8; 16];
    for (i, word) in words.iter().enumerate() {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    // SAFETY: a 16-byte buffer, under PIPE_BUF: written whole.
    unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
}

/// Closes every descriptor from 3 up except `keep`. Async-signal-safe.
fn close_except(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut from: libc::c_uint = 3;
    for fd in keep.iter().filter(|fd| **fd >= 3) {
        let fd = *fd as libc::c_uint;
        if fd > from {
            close_range(from, fd - 1);
        }
        from = fd + 1;
    }
    close_range(from, libc::c_uint::MAX);
}

fn close_range(first: libc::c_uint, last: libc::c_uint) {
    // SAFETY: closing descriptors; none is used afterwards.
    let done = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if done < 0 {
        // Before Linux 5.9: one at a time, up to the descriptor limit.
        // SAFETY: as above.
        let max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) }.clamp(0, 1 << 20) as libc::c_uint;
        for fd in first..=last.min(max) {
            // SAFETY: as above.
            unsafe { libc::close(fd as RawFd) };
        }
    }
}

fn now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
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
                let errno = write_maps(child, view);
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

/// Kills every process of `uid` (the run's own user) from a child that becomes that
/// user: the kernel signals them all under one lock, so none can fork meanwhile.
pub(super) unsafe fn kill_user(uid: libc::uid_t) {
    // SAFETY: async-signal-safe system calls only.
    unsafe {
        let killer = libc::fork();
        if killer == 0 {
            if libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0 {
                libc::kill(-1, libc::SIGKILL);
            }
            libc::_exit(0);
        }
        if killer > 0 {
            libc::waitpid(killer, std::ptr::null_mut(), 0);
        }
    }
}

/// Kills every descendant: each round kills the direct children (orphans of killed
/// processes are re-parented here, the subreaper) and reaps the dead, until none is left.
unsafe fn kill_descendants() {
    // SAFETY: async-signal-safe system calls only.
    unsafe {
        let me = libc::getpid();
        loop {
            for_each_child(me, |pid| {
                libc::kill(pid, libc::SIGKILL);
            });
            // The list can miss a process that is being re-parented: never block on it.
            loop {
                let reaped = libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG);
                if reaped < 0 && last_errno() == libc::ECHILD {
                    return;
                }
                if reaped <= 0 {
                    break;
                }
            }
            let pause = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
    }
}

/// Calls `f` with each child of `me`: from `/proc/<me>/task/<me>/children`, or, on a
/// kernel without that file, from a scan of every `/proc/<pid>/stat`. Async-signal-safe.
unsafe fn for_each_child(me: libc::pid_t, mut f: impl FnMut(libc::pid_t)) {
    let mut path = [0u8; 64];
    let mut at = put(&mut path, 0, b"/proc/");
    at = put_number(&mut path, at, me as u64);
    at = put(&mut path, at, b"/task/");
    at = put_number(&mut path, at, me as u64);
    put(&mut path, at, b"/children\0");
    // SAFETY: a NUL-terminated path in `path`.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd >= 0 {
        let mut buf = [0u8; 4096];
        let mut pid: u64 = 0;
        loop {
            // SAFETY: reading into `buf`.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                if b.is_ascii_digit() {
                    pid = pid.saturating_mul(10).saturating_add(u64::from(b - b'0'));
                } else if pid > 0 {
                    f(pid as libc::pid_t);
                    pid = 0;
                }
            }
        }
        if pid > 0 {
            f(pid as libc::pid_t);
        }
        close_all(&[fd]);
        return;
    }
    // SAFETY: as above.
    unsafe { scan_proc(me, f) };
}

/// The fallback of [`for_each_child`]: every process whose parent is `me`.
unsafe fn scan_proc(me: libc::pid_t, mut f: impl FnMut(libc::pid_t)) {
    // SAFETY: async-signal-safe system calls on stack buffers.
    unsafe {
        let dir = libc::open(c"/proc".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
        if dir < 0 {
            return;
        }
        let mut entries = [0u8; 8192];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, entries.as_mut_ptr(), entries.len());
            if n <= 0 {
                break;
            }
            let mut offset = 0usize;
            while offset + 19 < n as usize {
                // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
                let reclen = u16::from_ne_bytes([entries[offset + 16], entries[offset + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                let name = &entries[offset + 19..(offset + reclen).min(n as usize)];
                let len = name.iter().position(|b| *b == 0).unwrap_or(name.len());
                let name = &name[..len];
                if !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
                    let pid = name.iter().fold(0u64, |acc, b| acc.saturating_mul(10) + u64::from(b - b'0'));
                    if parent_of(pid) == Some(me as u64) {
                        f(pid as libc::pid_t);
                    }
                }
                offset += reclen;
            }
        }
        close_all(&[dir]);
    }
}

/// The parent pid in `/proc/<pid>/stat` (the field after the `)` ending the name).
fn parent_of(pid: u64) -> Option<u64> {
    let mut path = [0u8; 40];
    let mut at = put(&mut path, 0, b"/proc/");
    at = put_number(&mut path, at, pid);
    put(&mut path, at, b"/stat\0");
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 512];
    let n = read_full(fd, &mut buf);
    close_all(&[fd]);
    let text = &buf[..n];
    let close = text.iter().rposition(|b| *b == b')')?;
    // ") S 1234 ..."
    let rest = text.get(close + 4..)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit());
    Some(digits.fold(0u64, |acc, b| acc.saturating_mul(10) + u64::from(b - b'0')))
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) -> usize {
    let end = (at + bytes.len()).min(buf.len());
    buf[at..end].copy_from_slice(&bytes[..end - at]);
    end
}

fn put_number(buf: &mut [u8], at: usize, mut n: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut len = 0;
    loop {
        digits[19 - len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    put(buf, at, &digits[20 - len..])
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

/// Writes `/proc/<child>/setgroups` (`deny`), `uid_map` and `gid_map`; returns 0 or the
/// errno of the first failure. Async-signal-safe.
unsafe fn write_maps(child: libc::pid_t, view: &namespaces::View) -> i32 {
    let files: [(&[u8], &[u8]); 3] =
        [(b"/setgroups\0", b"deny"), (b"/uid_map\0", &view.uid_map), (b"/gid_map\0", &view.gid_map)];
    for (name, content) in files {
        let mut path = [0u8; 64];
        let mut at = put(&mut path, 0, b"/proc/");
        at = put_number(&mut path, at, child as u64);
        put(&mut path, at, name);
        // SAFETY: a NUL-terminated path and a buffer of `content.len()` bytes.
        let written = unsafe {
            let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return last_errno();
            }
            let n = libc::write(fd, content.as_ptr().cast(), content.len());
            let errno = last_errno();
            libc::close(fd);
            if n < 0 { Err(errno) } else { Ok(()) }
        };
        if let Err(errno) = written {
            return errno;
        }
    }
    0
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
