//! A validator in namespaces of its own (where the kernel and runtime allow them: a root
//! host, or unprivileged user namespaces): a user namespace whose only uid is the run's
//! (a fresh one on a root host, the host's own otherwise, shown inside as 0 without any
//! capability), a mount namespace whose root is an empty tmpfs holding only read-only binds
//! of the system directories (Akritas's own directories carved out), the copy and its
//! scratch directories, a few devices and a fresh `/proc`; a PID namespace whose init is
//! ours, so the whole tree dies with it; and empty network, IPC and UTS namespaces.
//!
//! The plan ([`View`]) is built before the fork; the child that carries it out makes only
//! async-signal-safe system calls on that memory.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::raw::{last_errno, put, put_number};

/// One step of building the view, under the new root.
#[derive(Debug)]
pub enum Step {
    /// `mkdir` (an existing one is fine).
    Dir(CString),
    /// An empty file to bind a file onto.
    File(CString),
    /// A symbolic link (`path` → `target`), as `/bin` → `usr/bin`.
    Link {
        /// What it points to.
        target: CString,
        /// Where it is made.
        path: CString,
    },
    /// A bind mount of `source` onto `target`, read-only unless `writable`.
    Bind {
        /// The host's path.
        source: CString,
        /// Its place under the new root.
        target: CString,
        /// Whether the program may write there.
        writable: bool,
    },
}

/// The filesystem view and identity of a run in its own namespaces.
#[derive(Debug)]
pub struct View {
    /// `0 <uid> 1`, written to the setup child's `uid_map`.
    pub uid_map: Vec<u8>,
    /// `0 <gid> 1`, for `gid_map`.
    pub gid_map: Vec<u8>,
    /// The new root: an empty directory of the host's, where a tmpfs is mounted.
    pub root: CString,
    /// Where `/proc` is mounted, under the new root.
    pub proc_dir: CString,
    /// What is made and mounted there, in order.
    pub steps: Vec<Step>,
}

fn c(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{} contains a NUL byte", path.display()))
}

/// `path` under `root` (`root` + the absolute `path`).
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// The view for a run: `read` (already carved, canonical) bound read-only, `links` (a
/// system directory that is a symbolic link, with its target) recreated, `devices` and
/// `writable` (the copy, HOME and TMPDIR) bound read-write at their own paths.
pub fn plan(
    root: &Path,
    ids: (u32, u32),
    read: &[PathBuf],
    links: &[(PathBuf, PathBuf)],
    devices: &[&str],
    writable: &[&Path],
) -> Result<View, String> {
    let mut steps = Vec::new();
    let mut made: Vec<PathBuf> = Vec::new();
    let mut dirs = |steps: &mut Vec<Step>, path: &Path| -> Result<(), String> {
        let mut chain: Vec<&Path> = path.ancestors().filter(|a| *a != Path::new("/")).collect();
        chain.reverse();
        for dir in chain {
            if !made.iter().any(|m| m == dir) {
                made.push(dir.to_path_buf());
                steps.push(Step::Dir(c(&under(root, dir))?));
            }
        }
        Ok(())
    };
    // Nested paths (`/usr` and `/usr/bin` when `/bin` resolves there) are bound once.
    let mut read: Vec<&PathBuf> = read.iter().collect();
    read.sort();
    read.dedup_by(|later, earlier| later.starts_with(earlier.as_path()));
    let mut bind = |steps: &mut Vec<Step>, path: &Path, writable: bool| -> Result<(), String> {
        let target = under(root, path);
        if path.is_dir() {
            dirs(steps, path)?;
        } else {
            if let Some(parent) = path.parent() {
                dirs(steps, parent)?;
            }
            steps.push(Step::File(c(&target)?));
        }
        steps.push(Step::Bind { source: c(path)?, target: c(&target)?, writable });
        Ok(())
    };
    for path in read {
        bind(&mut steps, path, false)?;
    }
    for device in devices.iter().map(Path::new).filter(|d| d.exists()) {
        bind(&mut steps, device, true)?;
    }
    for path in writable {
        bind(&mut steps, path, true)?;
    }
    for (link, target) in links {
        steps.push(Step::Link { target: c(target)?, path: c(&under(root, link))? });
    }
    steps.push(Step::Dir(c(&under(root, Path::new("/proc")))?));
    steps.push(Step::Dir(c(&under(root, Path::new("/tmp")))?));
    Ok(View {
        uid_map: format!("0 {} 1\n", ids.0).into_bytes(),
        gid_map: format!("0 {} 1\n", ids.1).into_bytes(),
        root: c(root)?,
        proc_dir: c(&under(root, Path::new("/proc")))?,
        steps,
    })
}

/// Mount flags the kernel locks on a bind mount made in a user namespace: a read-only
/// remount must repeat them (`statvfs` reports them as `ST_*`).
pub(super) fn locked_flags(statfs_flags: libc::c_ulong) -> libc::c_ulong {
    const ST_RELATIME: libc::c_ulong = 4096;
    let mut flags =
        statfs_flags & (libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_NOATIME | libc::MS_NODIRATIME);
    if statfs_flags & ST_RELATIME != 0 {
        flags |= libc::MS_RELATIME;
    }
    flags
}

/// Carries out `view` in the calling process, which has just entered its user and mount
/// namespaces and become uid 0 there: an empty tmpfs at the new root, then every step.
/// Returns `false` (errno set) at the first failure. Async-signal-safe.
pub(super) unsafe fn build(view: &View) -> bool {
    // SAFETY: system calls on NUL-terminated strings prepared before the fork.
    unsafe {
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) < 0
        {
            return false;
        }
        let options = c"mode=0755,size=1m,nr_inodes=16384";
        if libc::mount(
            c"tmpfs".as_ptr(),
            view.root.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        ) < 0
        {
            return false;
        }
        for step in &view.steps {
            let done = match step {
                Step::Dir(path) => libc::mkdir(path.as_ptr(), 0o755) == 0 || last_errno() == libc::EEXIST,
                Step::File(path) => {
                    let fd = libc::open(path.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o644);
                    fd >= 0 && libc::close(fd) == 0
                }
                Step::Link { target, path } => libc::symlink(target.as_ptr(), path.as_ptr()) == 0,
                Step::Bind { source, target, writable } => bind(source, target, *writable),
            };
            if !done {
                return false;
            }
        }
        true
    }
}

unsafe fn bind(source: &CString, target: &CString, writable: bool) -> bool {
    // SAFETY: as in `build`.
    unsafe {
        let flags = libc::MS_BIND | libc::MS_REC;
        if libc::mount(source.as_ptr(), target.as_ptr(), std::ptr::null(), flags, std::ptr::null()) < 0 {
            return false;
        }
        let mut stat: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(target.as_ptr(), &mut stat) < 0 {
            return false;
        }
        let mut remount =
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_NOSUID | locked_flags(stat.f_flag as libc::c_ulong);
        if !writable {
            remount |= libc::MS_RDONLY;
        }
        libc::mount(std::ptr::null(), target.as_ptr(), std::ptr::null(), remount, std::ptr::null()) == 0
    }
}

/// In the namespaces' init, before the program starts: a fresh `/proc` (left empty where
/// the runtime's masked `/proc` forbids one), then the new root becomes `/` and the host's
/// tree is detached, and the root itself is made read-only. Async-signal-safe.
pub(super) unsafe fn enter(view: &View) -> bool {
    // SAFETY: as in `build`.
    unsafe {
        libc::mount(
            c"proc".as_ptr(),
            view.proc_dir.as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        );
        if libc::chdir(view.root.as_ptr()) < 0
            || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) < 0
            || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) < 0
            || libc::chdir(c"/".as_ptr()) < 0
        {
            return false;
        }
        let flags = libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
        libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), flags, std::ptr::null()) == 0
    }
}

/// Writes `/proc/<child>/setgroups` (`deny`), `uid_map` and `gid_map`; returns 0 or the
/// errno of the first failure. Async-signal-safe.
pub(super) unsafe fn write_maps(child: libc::pid_t, view: &View) -> i32 {
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

/// Drops every capability the program would have as uid 0 of its user namespace, for
/// good: no bounding or ambient set, and no capabilities gained at `execve`.
/// Async-signal-safe.
pub(super) unsafe fn drop_capabilities() -> bool {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: prctl and capset with valid arguments.
    unsafe {
        let bits = SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_SETUID_FIXUP
            | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED;
        if libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) < 0 {
            return false;
        }
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        let header = Header { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
        let data =
            [Data { effective: 0, permitted: 0, inheritable: 0 }, Data { effective: 0, permitted: 0, inheritable: 0 }];
        libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_binds_each_tree_once_makes_mount_points_and_recreates_links() {
        let scratch = tempfile::tempdir().unwrap();
        let copy = scratch.path().join("tree");
        std::fs::create_dir(&copy).unwrap();
        let read = [PathBuf::from("/usr"), PathBuf::from("/usr/bin"), PathBuf::from("/etc/hostname")];
        let links = [(PathBuf::from("/bin"), PathBuf::from("usr/bin"))];
        let root = scratch.path().join("root");
        let view = plan(&root, (7, 8), &read, &links, &["/dev/null"], &[copy.as_path()]).unwrap();
        assert_eq!(view.uid_map, b"0 7 1\n");
        assert_eq!(view.gid_map, b"0 8 1\n");
        let binds: Vec<(String, bool)> = view
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Bind { source, writable, .. } => Some((source.to_string_lossy().into_owned(), *writable)),
                _ => None,
            })
            .collect();
        let copy_text = copy.display().to_string();
        assert_eq!(
            binds,
            [
                ("/etc/hostname".to_string(), false),
                ("/usr".to_string(), false),
                ("/dev/null".to_string(), true),
                (copy_text.clone(), true)
            ]
        );
        let under_root = |p: &str| CString::new(format!("{}{p}", root.display())).unwrap();
        assert!(view.steps.iter().any(|s| matches!(s, Step::File(f) if *f == under_root("/etc/hostname"))));
        assert!(view.steps.iter().any(|s| matches!(s, Step::Dir(d) if *d == under_root(&copy_text))));
        assert!(view.steps.iter().any(|s| matches!(s, Step::Link { path, .. } if *path == under_root("/bin"))));
        // Every mount point's directory is made before it is used.
        let first_bind = view.steps.iter().position(|s| matches!(s, Step::Bind { .. })).unwrap();
        assert!(view.steps[..first_bind].iter().any(|s| matches!(s, Step::Dir(d) if *d == under_root("/etc"))));
    }
}
