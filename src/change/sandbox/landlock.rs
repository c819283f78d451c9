//! Landlock rulesets through the raw system calls (Linux 5.13+, no privileges).
//!
//! The ruleset is built in the parent (which may allocate); the sandboxed child only
//! adds its own `/proc/<pid>` and restricts itself with [`restrict_self_raw`], both
//! async-signal-safe system calls.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const CREATE_RULESET_VERSION: libc::c_uint = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

/// Filesystem rights (`LANDLOCK_ACCESS_FS_*`).
pub(super) mod fs {
    pub const EXECUTE: u64 = 1 << 0;
    pub const WRITE_FILE: u64 = 1 << 1;
    pub const READ_FILE: u64 = 1 << 2;
    pub const READ_DIR: u64 = 1 << 3;
    pub const REFER: u64 = 1 << 13;
    pub const TRUNCATE: u64 = 1 << 14;
    pub const IOCTL_DEV: u64 = 1 << 15;
    /// Every right of ABI 1 (execute … make symlink).
    pub const ABI1: u64 = (1 << 13) - 1;
    /// Rights that apply to a file (the others need a directory).
    pub const FILE: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
    /// Reading and executing.
    pub const READ: u64 = EXECUTE | READ_FILE | READ_DIR;
}

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version this kernel speaks, or `None` without Landlock (not built
/// in, or disabled at boot).
pub fn abi() -> Option<u32> {
    // SAFETY: the documented version query takes no pointer.
    let version = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, CREATE_RULESET_VERSION)
    };
    u32::try_from(version).ok().filter(|v| *v >= 1)
}

/// Filesystem rights the kernel of `abi` handles.
fn handled_fs(abi: u32) -> u64 {
    let mut rights = fs::ABI1;
    if abi >= 2 {
        rights |= fs::REFER;
    }
    if abi >= 3 {
        rights |= fs::TRUNCATE;
    }
    if abi >= 5 {
        rights |= fs::IOCTL_DEV;
    }
    rights
}

/// A ruleset under construction: everything the kernel can restrict is denied except
/// what [`Ruleset::allow`] grants. TCP bind and connect (ABI 4+) are denied outright;
/// abstract Unix sockets and signals outside the sandbox are scoped away (ABI 6+).
pub struct Ruleset {
    fd: OwnedFd,
    handled: u64,
}

impl Ruleset {
    /// A new ruleset for the kernel's ABI.
    pub fn new(abi: u32) -> io::Result<Ruleset> {
        let attr = RulesetAttr {
            handled_access_fs: handled_fs(abi),
            handled_access_net: if abi >= 4 { NET_BIND_TCP | NET_CONNECT_TCP } else { 0 },
            scoped: if abi >= 6 { SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL } else { 0 },
        };
        // Older kernels take the prefix they know (the rest is zero).
        let size = match abi {
            1..=3 => 8,
            4 | 5 => 16,
            _ => std::mem::size_of::<RulesetAttr>(),
        };
        // SAFETY: `attr` outlives the call and `size` does not exceed it.
        let fd = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, &attr as *const RulesetAttr, size, 0u32) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel returned a new descriptor we own (close-on-exec).
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(Ruleset { fd, handled: attr.handled_access_fs })
    }

    /// Grants `rights` beneath `path` (a file gets only the file rights among them).
    /// A path that does not exist is skipped.
    pub fn allow(&mut self, path: &Path, rights: u64) -> io::Result<()> {
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: a valid NUL-terminated path; O_PATH opens without reading.
        let raw = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if raw < 0 {
            let error = io::Error::last_os_error();
            return if error.kind() == io::ErrorKind::NotFound { Ok(()) } else { Err(error) };
        }
        // SAFETY: a descriptor we just opened.
        let parent = unsafe { OwnedFd::from_raw_fd(raw) };
        let is_dir = std::fs::metadata(path)?.is_dir();
        let rights = if is_dir { rights } else { rights & fs::FILE } & self.handled;
        add_rule(self.fd.as_raw_fd(), parent.as_raw_fd(), rights)
    }

    /// The descriptor the child restricts itself with.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `landlock_add_rule` for a path beneath `parent`. Async-signal-safe.
pub(super) fn add_rule(ruleset: RawFd, parent: RawFd, rights: u64) -> io::Result<()> {
    let attr = PathBeneathAttr { allowed_access: rights, parent_fd: parent };
    // SAFETY: `attr` outlives the call.
    let done = unsafe {
        libc::syscall(libc::SYS_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &attr as *const PathBeneathAttr, 0u32)
    };
    if done < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// `landlock_restrict_self`; the caller set `no_new_privs`. Async-signal-safe.
pub(super) fn restrict_self_raw(ruleset: RawFd) -> libc::c_long {
    // SAFETY: no pointer is passed.
    unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) }
}
