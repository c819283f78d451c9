//! A host to attack through its change pipeline: the real `akritas serve` binary with a path
//! Workspace (a git working tree) whose ValidatorProfile runs `sh attack.sh`, and a scripted
//! model that writes `attack.sh` into the change, as a model under an attacker's control would.
//! The host runs as root or as an unprivileged uid that owns its data, resource and workspace
//! directories and its `TMPDIR` (the chart's way).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::scripted_llm::{Reply, ScriptedLlm, Step};
use crate::{Server, serve_command};

/// The admin key (namespace `default`).
pub const OPS_KEY: &str = "ops-admin-key-0123456789";
/// A chat key of namespace `default`.
pub const DEV_KEY: &str = "dev-chat-key-0123456789";
/// A chat key of namespace `team-b`.
pub const TEAM_B_KEY: &str = "team-b-chat-key-0123456789";
/// A chat key of namespace `platform`.
pub const PLATFORM_KEY: &str = "platform-chat-key-0123456789";

/// Who the host runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The test's own user (root in CI).
    Own,
    /// An unprivileged uid (and gid) owning the host's directories.
    User(u32),
}

impl Identity {
    /// Root and an unprivileged uid when the test runs as root; else the test's own user.
    pub fn all() -> Vec<Identity> {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } == 0 { vec![Identity::Own, Identity::User(54_321)] } else { vec![Identity::Own] }
    }
}

/// The confinements every attack runs under: namespaces of its own (where the kernel and
/// runtime allow them, as on a root host or with unprivileged user namespaces), and Landlock
/// with the seccomp filter alone (what a pod under the runtime's default seccomp profile
/// gets).
pub const MODES: [&str; 2] = ["namespaces", "landlock"];

/// Every (identity, `validator_sandbox` mode) an attack runs under.
pub fn setups() -> Vec<(Identity, &'static str)> {
    Identity::all().into_iter().flat_map(|identity| MODES.map(|mode| (identity, mode))).collect()
}

/// Directories of one attacked host.
pub struct Target {
    dir: tempfile::TempDir,
    /// Who the host runs as.
    pub identity: Identity,
    /// `AKRITAS_DATA_DIR`.
    pub data: PathBuf,
    /// The resource directory.
    pub resources: PathBuf,
    /// The Workspace's git working tree.
    pub workspace: PathBuf,
    /// The host's `TMPDIR` (where validator copies are made).
    pub tmp: PathBuf,
    /// More environment for the host.
    pub env: Vec<(String, String)>,
    /// The containers started (removed with the target).
    pub containers: std::sync::Mutex<Vec<Container>>,
    /// Run the host in a container of this image (`e2e/sandbox-image.sh` builds it), the
    /// way the chart runs the pod: non-root, read-only root filesystem, every capability
    /// dropped, `no-new-privileges`, the runtime's default seccomp profile, a tmpfs `/tmp`;
    /// the host's network, and this target's directory at its own path.
    pub container: Option<String>,
}

/// `podman` with the project's settings (`e2e/containers.conf`).
pub fn podman() -> Command {
    let mut command = Command::new("podman");
    command.env("CONTAINERS_CONF", crate::root().join("e2e/containers.conf"));
    command
}

/// Builds the image the container tests run (`e2e/sandbox-image.sh`) from `bin`, once per
/// process; returns its name.
pub fn sandbox_image(bin: &str) -> &'static str {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let output = Command::new(crate::root().join("e2e/sandbox-image.sh")).arg(bin).output().expect("bash runs");
        assert!(
            output.status.success(),
            "e2e/sandbox-image.sh failed (install podman, buildah and debootstrap with e2e/install-test-deps.sh):\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    });
    "localhost/akritas-validators:sandbox-test"
}

/// Removes a container when the test is done with it (killing `podman run` leaves it).
pub struct Container(String);

impl Container {
    /// The container named `name`, removed when this is dropped.
    pub fn named(name: &str) -> Container {
        Container(name.to_string())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman().args(["rm", "-f", "-t", "0", &self.0]).output();
    }
}

fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git").current_dir(dir).args(args).output().expect("git runs");
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// Gives `path` (recursively) to `uid:uid`.
pub fn give(path: &Path, uid: u32) {
    let status = Command::new("chown").arg("-R").arg(format!("{uid}:{uid}")).arg(path).status().expect("chown");
    assert!(status.success(), "chown {}", path.display());
}

impl Target {
    /// A host's directories: a Workspace `app` with `app.yaml`, the ValidatorProfile
    /// `attack` (`sh attack.sh`, 30 s) in namespace `default`, validators confined by
    /// `mode` (`validator_sandbox`), nothing started.
    pub fn new(identity: Identity, mode: &str) -> Target {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.path();
        let (data, resources, workspace, tmp) =
            (root.join("data"), root.join("resources"), root.join("workspaces/app"), root.join("tmp"));
        for d in [&data, &resources, &workspace, &tmp] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(workspace.join("app.yaml"), "replicas: 1\n").unwrap();
        git(&workspace, &["init", "-q", "-b", "main"]);
        git(&workspace, &["-c", "user.name=t", "-c", "user.email=t@example.com", "add", "."]);
        git(&workspace, &["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "initial"]);
        let env = vec![("AKRITAS_VALIDATOR_SANDBOX".to_string(), mode.to_string())];
        let target = Target {
            dir,
            identity,
            data,
            resources,
            workspace,
            tmp,
            env,
            container: None,
            containers: Default::default(),
        };
        target.declare("default", "app", &target.workspace.clone(), &[], 30);
        target
    }

    /// The directory everything lives in.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Declares (or replaces) the Workspace `name` of `namespace` on `tree`, with a
    /// ValidatorProfile `attack` that runs `sh attack.sh` and passes `env`.
    pub fn declare(&self, namespace: &str, name: &str, tree: &Path, env: &[&str], timeout_seconds: u32) {
        let yaml = format!(
            r#"apiVersion: akritas.io/v1alpha1
kind: ValidatorProfile
metadata:
  name: attack
  namespace: {namespace}
spec:
  argv: [sh, attack.sh]
  files: ["**"]
  timeoutSeconds: {timeout_seconds}
  env: {env:?}
---
apiVersion: akritas.io/v1alpha1
kind: Workspace
metadata:
  name: {name}
  namespace: {namespace}
spec:
  source:
    path: {tree}
  validatorProfiles: [attack]
  writable: true
"#,
            tree = tree.display()
        );
        std::fs::write(self.resources.join(format!("{namespace}-{name}.yaml")), yaml).unwrap();
    }

    /// Starts the host (`bin`: the test's `env!("CARGO_BIN_EXE_akritas")`) with a model
    /// that writes `script` as `attack.sh`; waits until every Workspace is ready.
    pub async fn start(&self, bin: &str, script: &str) -> (Server, ScriptedLlm) {
        let started = self.start_with(bin, vec![script.to_string()]).await;
        wait_ready(&started.0.url).await;
        started
    }

    /// Starts the host with a model whose n-th proposal writes `scripts[n]` (the last one
    /// from then on); does not wait for the Workspaces.
    pub async fn start_with(&self, bin: &str, scripts: Vec<String>) -> (Server, ScriptedLlm) {
        let llm = ScriptedLlm::start_with(proposals(scripts)).await;
        if let Identity::User(uid) = self.identity {
            give(self.root(), uid);
        }
        let unprivileged = matches!(self.identity, Identity::User(_)) && self.container.is_none();
        // The checkout may sit where another uid cannot reach (under /root, say).
        let (bin, instructions) = if unprivileged { readable_by_all(bin) } else { (PathBuf::from(bin), None) };
        let mut command = serve_command(&bin);
        if let Some(instructions) = instructions {
            command.env("AKRITAS_SYSTEM_INSTRUCTIONS", instructions);
        }
        command
            .env("AKRITAS_DATA_DIR", &self.data)
            .env("AKRITAS_BASE_URL", &llm.url)
            .env("OPS_KEY", OPS_KEY)
            .env("DEV_KEY", DEV_KEY)
            .env("TEAM_B_KEY", TEAM_B_KEY)
            .env("PLATFORM_KEY", PLATFORM_KEY)
            .env("AKRITAS_WORKSPACE_ROOTS", self.root().join("workspaces"))
            .env("AKRITAS_VALIDATOR_COMMANDS", "sh")
            .env("TMPDIR", &self.tmp)
            .env("HOME", self.root())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .args(["--api-key", "ops=OPS_KEY:admin", "--api-key", "dev=DEV_KEY:chat"])
            .args(["--api-key", "team-b=TEAM_B_KEY:chat@team-b", "--api-key", "platform=PLATFORM_KEY:chat@platform"])
            .arg("--resources")
            .arg(&self.resources);
        if let Some(image) = &self.container {
            command = self.in_container(image, &command);
        } else if let Identity::User(uid) = self.identity {
            command.uid(uid).gid(uid);
        }
        let server = tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap();
        (server, llm)
    }

    /// `command` (an `akritas serve` command line) as `podman run` of `image`.
    fn in_container(&self, image: &str, command: &Command) -> Command {
        let Identity::User(uid) = self.identity else { panic!("a container runs the host as an unprivileged uid") };
        let name = format!("akritas-sandbox-{:016x}", rand::random::<u64>());
        let root = self.root().display().to_string();
        let mut podman = podman();
        podman.args(["run", "--rm", "--init", "--pull=never", "--network", "host", "--name", &name]);
        podman.args(["--user", &format!("{uid}:{uid}"), "--read-only", "--cap-drop=ALL"]);
        podman.args(["--security-opt", "no-new-privileges", "--tmpfs", "/tmp", "-v", &format!("{root}:{root}")]);
        // The image's own configuration names its instructions; the rest is passed on.
        for (key, value) in command.get_envs().filter(|(key, _)| *key != "AKRITAS_SYSTEM_INSTRUCTIONS") {
            if let Some(value) = value {
                podman.arg("-e").arg(format!("{}={}", key.to_string_lossy(), value.to_string_lossy()));
            }
        }
        podman.arg(image).args(command.get_args());
        podman.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        podman.stderr(std::process::Stdio::piped());
        self.containers.lock().unwrap().push(Container(name));
        podman
    }

    /// A service of the host's on a Unix socket anyone may connect to (a database's):
    /// the listener (non-blocking) and the socket's path.
    pub fn host_socket(&self) -> (std::os::unix::net::UnixListener, PathBuf) {
        let run = self.root().join("run");
        std::fs::create_dir(&run).unwrap();
        let path = run.join("db.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        for open in [&run, &path] {
            std::fs::set_permissions(open, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        (listener, path)
    }

    /// Moves the resources under `<root>/etc/akritas/resources`, as the image keeps them,
    /// and makes `<root>/etc` a validator read path (as `/etc` is); returns `<root>/etc`.
    pub fn resources_under_a_read_path(&mut self) -> PathBuf {
        let etc = self.root().join("etc");
        let resources = etc.join("akritas/resources");
        std::fs::create_dir_all(&resources).unwrap();
        for entry in std::fs::read_dir(&self.resources).unwrap() {
            let entry = entry.unwrap();
            std::fs::rename(entry.path(), resources.join(entry.file_name())).unwrap();
        }
        self.resources = resources;
        self.env.push(("AKRITAS_VALIDATOR_READ_PATHS".into(), etc.display().to_string()));
        etc
    }

    /// Pids of the processes whose working directory is under the host's `TMPDIR` (the
    /// validators and whatever they started).
    pub fn validator_processes(&self) -> Vec<u32> {
        processes_under(&self.tmp)
    }

    /// What is left under the host's `TMPDIR`.
    pub fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.tmp).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    }
}

/// A copy of `bin` and of `instructions/SYSTEM.md` that every uid may read and execute,
/// made once per test process: (binary, instructions).
fn readable_by_all(bin: &str) -> (PathBuf, Option<PathBuf>) {
    static COPY: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    let (bin, instructions) = COPY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("akritas-attack-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (copy, instructions) = (dir.join("akritas"), dir.join("SYSTEM.md"));
        std::fs::copy(bin, &copy).unwrap();
        std::fs::copy(crate::root().join("instructions/SYSTEM.md"), &instructions).unwrap();
        for file in [&copy, &instructions] {
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        (copy, instructions)
    });
    (bin.clone(), Some(instructions.clone()))
}

/// Pids of the processes whose working directory is under `dir`.
pub fn processes_under(dir: &Path) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)) {
            found.push(pid);
        }
    }
    found
}

/// A model whose n-th answer proposes creating `attack.sh` with `scripts[n]` (the last one
/// from then on), whatever it is asked.
pub fn proposals(scripts: Vec<String>) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    move |n, _| {
        let script = &scripts[n.min(scripts.len() - 1)];
        let arguments = json!({
            "analysis": "Add the check script the validator runs.",
            "edits": [{"operation": "create", "path": "attack.sh", "old": "", "new": script}],
            "checks": ["the validator passes"],
            "risks": ["none"],
            "rollback": "Delete attack.sh.",
            "clarifications": []
        });
        Step::from(Reply::ToolCalls(vec![("call-1".into(), "akritas_propose_edits".into(), arguments)]))
    }
}

/// A reqwest client (the crypto provider installed).
pub fn client() -> reqwest::Client {
    akritas::install_crypto_provider();
    reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap()
}

/// `GET path` with the admin key.
pub async fn get(url: &str, path: &str) -> (u16, Value) {
    let response = client().get(format!("{url}{path}")).bearer_auth(OPS_KEY).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Asks `key`'s namespace for a preview of Workspace `workspace` (of `namespace` when given).
pub async fn preview(url: &str, key: &str, namespace: Option<&str>, workspace: &str) -> (u16, Value) {
    let mut body = json!({"workspace": workspace, "request": "Add the check script.", "files": ["app.yaml"]});
    if let Some(namespace) = namespace {
        body["namespace"] = json!(namespace);
    }
    let response =
        client().post(format!("{url}/api/v1/change/simulations")).bearer_auth(key).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The first validator result of a preview answer.
pub fn validator(body: &Value) -> &Value {
    &body["result"]["validators"][0]
}

/// Waits until every Workspace reports ready.
pub async fn wait_ready(url: &str) {
    crate::wait_for("every Workspace ready", Duration::from_secs(60), || async {
        let (_, body) = get(url, "/api/v1/workspaces").await;
        body["workspaces"]
            .as_array()
            .is_some_and(|w| !w.is_empty() && w.iter().all(|w| w["ready"] == true))
            .then_some(())
    })
    .await
}
