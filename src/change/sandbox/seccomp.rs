//! A seccomp filter that keeps a sandboxed program off the network whatever the kernel's
//! Landlock ABI: `socket()` only for Unix and netlink sockets (IPv4, IPv6, packet, vsock
//! … are `EACCES`, UDP included, which Landlock does not cover), no `io_uring` (its
//! socket operations would bypass the filter), and no foreign system call ABI (x32,
//! i386), whose calls the filter could not read.

/// The filter for this architecture, or `None` where the host has no filter for it.
pub fn network_filter() -> Option<Vec<libc::sock_filter>> {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return None;
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        // Offsets in `struct seccomp_data`: nr, arch, then args[0] at 16 (low word first).
        const NR: u32 = 0;
        const ARCH_AT: u32 = 4;
        const ARG0: u32 = 16;
        // x32 system calls carry this bit on x86_64; never a native number elsewhere.
        const X32_BIT: u32 = 0x4000_0000;
        let ld = |k| stmt(0x20, k); // BPF_LD | BPF_W | BPF_ABS
        let ret = |k| stmt(0x06, k); // BPF_RET | BPF_K
        let eq = |k, jt, jf| jump(0x15, k, jt, jf); // BPF_JMP | BPF_JEQ | BPF_K
        let ge = |k, jt, jf| jump(0x35, k, jt, jf); // BPF_JMP | BPF_JGE | BPF_K
        let kill = libc::SECCOMP_RET_KILL_PROCESS;
        let allow = libc::SECCOMP_RET_ALLOW;
        let eacces = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let socket = libc::SYS_socket as u32;
        let io_uring =
            [libc::SYS_io_uring_setup as u32, libc::SYS_io_uring_enter as u32, libc::SYS_io_uring_register as u32];
        Some(vec![
            /* 0 */ ld(ARCH_AT),
            /* 1 */ eq(ARCH, 1, 0),
            /* 2 */ ret(kill),
            /* 3 */ ld(NR),
            /* 4 */ ge(X32_BIT, 0, 1),
            /* 5 */ ret(kill),
            /* 6 */ eq(socket, 0, 5),
            /* 7 */ ld(ARG0),
            /* 8 */ eq(libc::AF_UNIX as u32, 2, 0),
            /* 9 */ eq(libc::AF_NETLINK as u32, 1, 0),
            /* 10 */ ret(eacces),
            /* 11 */ ret(allow),
            /* 12 */ eq(io_uring[0], 3, 0),
            /* 13 */ eq(io_uring[1], 2, 0),
            /* 14 */ eq(io_uring[2], 1, 0),
            /* 15 */ ret(allow),
            /* 16 */ ret(enosys),
        ])
    }
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
