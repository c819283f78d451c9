//! Namespaces for a run: whether they can be had here (one trial run, once), and the
//! filesystem view of a run in them.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{
    Availability, DEVICES, Ending, Request, SYSTEM_READ_PATHS, Sandbox, carve, namespaces, seccomp, supervise,
};

impl Sandbox {
    /// Whether a program runs in namespaces of its own here: `true` run that way, once a
    /// process (the answer cannot change while it runs). Blocking, brief.
    pub(super) fn probe_namespaces(&self, abi: Option<u32>) -> Result<Availability, String> {
        static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        let confined = Availability::Confined {
            namespaces: true,
            abi: abi.unwrap_or(0),
            filter: seccomp::filter(abi.unwrap_or(0)).is_some(),
            lost: Vec::new(),
            fallback: None,
        };
        let probe = Sandbox { availability: confined.clone(), ..self.clone() };
        PROBE.get_or_init(|| probe.run_true()).clone().map(|()| confined)
    }

    /// Runs `true` confined, synchronously, on an empty copy. Blocking.
    fn run_true(&self) -> Result<(), String> {
        let program = ["/usr/bin/true", "/bin/true"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .ok_or("no true program to try them with")?;
        let base = std::env::temp_dir().join(format!("akritas-probe-{:032x}", rand::random::<u128>()));
        let (cwd, home) = (base.join("tree"), base.join("home"));
        for dir in [&base, &cwd, &home] {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot make a directory to try them in: {e}"))?;
        }
        let outcome = self.run_true_in(program, &base, cwd, home);
        let _ = crate::change::tree::remove(&base);
        outcome
    }

    fn run_true_in(&self, program: PathBuf, base: &Path, cwd: PathBuf, home: PathBuf) -> Result<(), String> {
        let request = Request {
            program,
            argv: vec!["true".into()],
            cwd,
            writable: vec![home],
            root: base.to_path_buf(),
            env: Vec::new(),
            timeout: Duration::from_secs(10),
            output_limit: 0,
        };
        let (prepared, _lease) = self.prepare(&request, -1)?;
        // SAFETY: a constant path; the descriptor is handed to `supervise::run`.
        let output = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        if output < 0 {
            return Err(format!("cannot open /dev/null: {}", io::Error::last_os_error()));
        }
        match supervise::run(&prepared, output, &supervise::Control::default()) {
            Ending::Exited(0) => Ok(()),
            Ending::NotStarted { step, errno } => {
                Err(format!("{} failed: {}", step.describe(), io::Error::from_raw_os_error(errno)))
            }
            other => Err(format!("a trial run ended {other:?}")),
        }
    }

    /// The filesystem view of a run in namespaces: the carved read paths, the system
    /// directories that are links, the devices, the copy and its scratch directories, under
    /// a new root beside the copy. Blocking.
    pub(super) fn view(&self, request: &Request, ids: (libc::uid_t, libc::gid_t)) -> Result<namespaces::View, String> {
        let root = request.root.join("view");
        match fs::DirBuilder::new().mode(0o755).create(&root) {
            // Another validator of the same copy made it; it stays empty on the host's side.
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(format!("cannot make the validator's root directory: {e}"));
            }
            _ => {}
        }
        let links: Vec<(PathBuf, PathBuf)> = SYSTEM_READ_PATHS
            .iter()
            .filter_map(|p| {
                let path = Path::new(p);
                let target =
                    fs::symlink_metadata(path).ok()?.file_type().is_symlink().then(|| fs::read_link(path).ok())??;
                Some((path.to_path_buf(), target))
            })
            .collect();
        let writable: Vec<&Path> =
            std::iter::once(request.cwd.as_path()).chain(request.writable.iter().map(PathBuf::as_path)).collect();
        namespaces::plan(&root, ids, &carve(&self.read_paths, &self.hidden), &links, DEVICES, &writable)
    }
}
