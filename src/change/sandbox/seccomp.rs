//! The seccomp filter of a sandboxed program, whatever the kernel's Landlock ABI:
//!
//! * **No sockets at all**: `socket()` fails with `EACCES` for every family (IPv4, IPv6,
//!   UDP, packet, vsock, and Unix and netlink too: a Unix socket file of the host, such as
//!   a database's, is reachable by path and Landlock has no rule for connecting to it;
//!   netlink `sock_diag` lists every socket of the host). `socketpair` stays: it only
//!   connects the program to itself.
//! * **No change of owners, modes, times or extended attributes** (`chmod`, `chown`,
//!   `utime` families, `setxattr`/`removexattr`, POSIX ACLs included): Landlock does not
//!   cover them, so a program running under the host's uid could lock the host out of its
//!   own data directory. They fail with `EPERM`, in the copy too.
//! * **No `truncate(path)` below Landlock ABI 3**, which cannot restrict it.
//! * **No `io_uring`** (its socket and file operations would bypass the filter).
//! * **No foreign system call ABI** (x32, i386), whose calls the filter could not read:
//!   the process is killed.
//!
//! The rules are declared in [`RULES`]; [`filter`] assembles them into BPF.

/// What a matching system call gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Fails with this errno; the program goes on.
    Errno(i32),
}

/// The system calls denied under a Landlock of `abi`, with their verdict.
fn rules(abi: u32) -> Vec<(libc::c_long, Verdict)> {
    use Verdict::Errno;
    // Numbers shared by every architecture (the unified table from Linux 5.1 on); the
    // kernel answers ENOSYS where they do not exist yet, so denying them costs nothing.
    const FCHMODAT2: libc::c_long = 452;
    const SETXATTRAT: libc::c_long = 463;
    const REMOVEXATTRAT: libc::c_long = 466;
    let mut rules = vec![
        (libc::SYS_socket, Errno(libc::EACCES)),
        (libc::SYS_io_uring_setup, Errno(libc::ENOSYS)),
        (libc::SYS_io_uring_enter, Errno(libc::ENOSYS)),
        (libc::SYS_io_uring_register, Errno(libc::ENOSYS)),
    ];
    let modes = [
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        FCHMODAT2,
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_utimensat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        SETXATTRAT,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        REMOVEXATTRAT,
    ];
    rules.extend(modes.into_iter().map(|nr| (nr, Errno(libc::EPERM))));
    if abi < 3 {
        // Landlock handles truncation from ABI 3 on; before, `truncate(path)` would empty
        // any file the uid may write. (`ftruncate` needs a descriptor opened for writing,
        // which Landlock already controls.)
        rules.push((libc::SYS_truncate, Errno(libc::EPERM)));
    }
    #[cfg(target_arch = "x86_64")]
    rules.extend(
        [libc::SYS_chmod, libc::SYS_chown, libc::SYS_lchown, libc::SYS_utime, libc::SYS_utimes, libc::SYS_futimesat]
            .into_iter()
            .map(|nr| (nr, Errno(libc::EPERM))),
    );
    rules
}

/// The filter for this architecture under a Landlock of `abi`, or `None` where the host
/// has no filter for the architecture.
pub fn filter(abi: u32) -> Option<Vec<libc::sock_filter>> {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return None;
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    Some(assemble(ARCH, &rules(abi)))
}

/// The BPF program: the architecture check, the x32 check, one comparison a rule (each
/// jumping to its verdict), then allow.
fn assemble(arch: u32, rules: &[(libc::c_long, Verdict)]) -> Vec<libc::sock_filter> {
    // Offsets in `struct seccomp_data`: nr, then arch.
    const NR: u32 = 0;
    const ARCH_AT: u32 = 4;
    // x32 system calls carry this bit on x86_64; never a native number elsewhere.
    const X32_BIT: u32 = 0x4000_0000;
    let ld = |k| stmt(0x20, k); // BPF_LD | BPF_W | BPF_ABS
    let ret = |k| stmt(0x06, k); // BPF_RET | BPF_K
    let eq = |k, jt, jf| jump(0x15, k, jt, jf); // BPF_JMP | BPF_JEQ | BPF_K
    let ge = |k, jt, jf| jump(0x35, k, jt, jf); // BPF_JMP | BPF_JGE | BPF_K
    let kill = libc::SECCOMP_RET_KILL_PROCESS;
    let mut verdicts: Vec<Verdict> = Vec::new();
    for (_, verdict) in rules {
        if !verdicts.contains(verdict) {
            verdicts.push(*verdict);
        }
    }
    let mut program = vec![ld(ARCH_AT), eq(arch, 1, 0), ret(kill), ld(NR), ge(X32_BIT, 0, 1), ret(kill)];
    // After the comparisons: `ret allow`, then one `ret` a verdict.
    for (i, (nr, verdict)) in rules.iter().enumerate() {
        let at = verdicts.iter().position(|v| v == verdict).unwrap_or(0);
        // Instructions after this one up to its verdict's `ret`.
        let skip = (rules.len() - 1 - i) + 1 + at;
        let skip = u8::try_from(skip).unwrap_or(u8::MAX);
        program.push(eq(*nr as u32, skip, 0));
    }
    program.push(ret(libc::SECCOMP_RET_ALLOW));
    for verdict in verdicts {
        let Verdict::Errno(errno) = verdict;
        program.push(ret(libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA)));
    }
    program
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Installs `filter` on the calling thread (and what it executes); `no_new_privs` is
/// set. Async-signal-safe.
pub(super) fn install_raw(filter: &[libc::sock_filter]) -> libc::c_int {
    let program = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut libc::sock_filter };
    // SAFETY: `program` points at `filter`, which outlives the call.
    unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &program as *const libc::sock_fprog) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the BPF program over one system call number, as the kernel would.
    fn verdict(program: &[libc::sock_filter], arch: u32, nr: u32) -> u32 {
        let data = |k: u32| if k == 0 { nr } else { arch };
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let ins = program[pc];
            match ins.code {
                0x20 => acc = data(ins.k),
                0x06 => return ins.k,
                0x15 | 0x35 => {
                    let taken = if ins.code == 0x15 { acc == ins.k } else { acc >= ins.k };
                    pc += usize::from(if taken { ins.jt } else { ins.jf });
                }
                code => panic!("unexpected instruction {code:#x}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn every_rule_reaches_its_own_verdict_and_everything_else_is_allowed() {
        let arch = 0xC000_003E;
        let rules = rules(2);
        assert!(rules.contains(&(libc::SYS_truncate, Verdict::Errno(libc::EPERM))));
        assert!(!super::rules(3).iter().any(|(nr, _)| *nr == libc::SYS_truncate));
        let program = assemble(arch, &rules);
        for (nr, Verdict::Errno(errno)) in &rules {
            assert_eq!(verdict(&program, arch, *nr as u32), libc::SECCOMP_RET_ERRNO | *errno as u32, "syscall {nr}");
        }
        for allowed in [libc::SYS_read, libc::SYS_openat, libc::SYS_socketpair, libc::SYS_execve, libc::SYS_kill] {
            assert_eq!(verdict(&program, arch, allowed as u32), libc::SECCOMP_RET_ALLOW, "syscall {allowed}");
        }
        assert_eq!(verdict(&program, arch, 0x4000_0000 | 41), libc::SECCOMP_RET_KILL_PROCESS, "x32");
        assert_eq!(verdict(&program, 0x4000_0003, 41), libc::SECCOMP_RET_KILL_PROCESS, "i386");
    }
}
