//! The async-signal-safe building blocks of the sandbox's processes: what a child of the
//! multi-threaded host may call between `fork` and `execve` (system calls on memory
//! prepared before the fork: no allocation, no locks, no panics).

use std::os::fd::RawFd;
use std::time::Duration;

/// The calling thread's errno. Async-signal-safe.
pub(super) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A close-on-exec pipe: (read, write).
pub(super) fn pipe() -> std::io::Result<(RawFd, RawFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

pub(super) fn close_all(fds: &[RawFd]) {
    for fd in fds {
        // SAFETY: closing descriptors this module opened.
        unsafe { libc::close(*fd) };
    }
}

/// Reads until `buf` is full or end of file. Async-signal-safe.
pub(super) fn read_full(fd: RawFd, buf: &mut [u8]) -> usize {
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

pub(super) fn write_words(fd: RawFd, words: [i32; 4]) {
    let mut bytes = [0u8; 16];
    for (i, word) in words.iter().enumerate() {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    // SAFETY: a 16-byte buffer, under PIPE_BUF: written whole.
    unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
}

/// Closes every descriptor from 3 up except `keep`. Async-signal-safe.
pub(super) fn close_except(keep: &mut [RawFd]) {
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

pub(super) fn now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
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
pub(super) unsafe fn kill_descendants() {
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

pub(super) fn put(buf: &mut [u8], at: usize, bytes: &[u8]) -> usize {
    let end = (at + bytes.len()).min(buf.len());
    buf[at..end].copy_from_slice(&bytes[..end - at]);
    end
}

pub(super) fn put_number(buf: &mut [u8], at: usize, mut n: u64) -> usize {
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
