//! Harnesses shared by Akritas's integration tests (`tests/*.rs`) and benches.
//!
//! One library crate instead of files each test binary includes with `#[path]`: every test
//! and bench links the same module tree, a harness lives in one place, and its public items
//! are API, so no test binary needs a blanket `dead_code` allowance for the helpers it does
//! not call. It is a workspace member outside `default-members` and a `[dev-dependencies]`
//! path dependency of `akritas`, so a plain `cargo build` never compiles it.
//!
//! - [`Server`], [`serve_command`], [`run_to_end`]: the real `akritas` binary as a process.
//! - [`host`]: the real router and engine in-process, on a scripted model.
//! - [`scripted_llm`]: a scripted OpenAI-compatible model server; with a [`brain`] behind a
//!   [`personality`], a stand-in for Ollama, llama-server, vLLM, OpenAI or a reasoning model.
//! - [`starter_suite`]: the brain that plays the starter eval suite `evals/starter`.
//! - [`contract`]: store contracts, the same test code run against each storage backend.
//! - [`one_question`]: one `akritas ask` on a scripted model, as the `ask` bench times it and
//!   `symbol-order` profiles it.
//! - [`raw_http`]: hand-written HTTP/1.1 bytes over TCP, for malformed requests.
//! - [`attack`]: the real binary with a Workspace whose validator runs what the scripted model
//!   wrote, as root or as an unprivileged uid, for attacks on the validator sandbox.
//! - [`git_server`]: the real `git http-backend` behind token authentication, and bare-repository helpers.
//! - [`sink`]: a webhook receiver that records every notification it gets.
//! - [`telegram`], [`mattermost`], [`slack`]: Telegram Bot API, Mattermost and Slack (Web API,
//!   Events API, Socket Mode) stand-ins that speak the real wire formats and record every
//!   request, with builders for what those services send.
//! - [`kubelet`]: a kubelet stand-in serving container logs to [`kube_api`]'s API server.
//! - [`clients`]: the Python venv (openai, mcp, schemathesis), playwright-core and Chromium.
//! - [`prom`], [`vm`], [`kube_api`], [`everything`], [`postgres`]: real third-party programs (Prometheus and
//!   Alertmanager, VictoriaMetrics, etcd and kube-apiserver, the MCP reference server, PostgreSQL).
//!
//! Paths are resolved from the repository root ([`root`]), so the harnesses find
//! `instructions/`, `config/samples`, `e2e/` and `target/` wherever a test runs.

pub mod attack;
pub mod brain;
pub mod clients;
pub mod contract;
pub mod everything;
pub mod git_server;
pub mod host;
pub mod jobs;
pub mod kube_api;
pub mod kubelet;
pub mod mattermost;
pub mod one_question;
pub mod personality;
pub mod postgres;
pub mod prom;
pub mod raw_http;
pub mod scripted_llm;
pub mod sink;
pub mod slack;
pub mod starter_suite;
pub mod telegram;
pub mod vm;
pub mod wire;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The repository root (the `akritas` package; this crate lives in `testkit/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testkit/ has a parent").to_path_buf()
}

/// The build cache shared by every clone on this machine: `$AKRITAS_CACHE`, else
/// `$XDG_CACHE_HOME/akritas`, else `~/.cache/akritas` (what `e2e/cache.sh` prints). The Go test
/// binaries and the real-model servers and models live there, keyed by version, so a fresh
/// clone does not build them again.
pub fn cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("AKRITAS_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("akritas")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/akritas")))
        .unwrap_or_else(|| root().join("target/cache"))
}

/// The code blocks of a Markdown text whose info string is `<lang> <tag>`, in order: the
/// runnable steps of a documented walk-through (README tour, worked examples).
pub fn doc_blocks(markdown: &str, tag: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else { continue };
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        if info.split_whitespace().nth(1) == Some(tag) {
            found.push(body.join("\n"));
        }
    }
    found
}

/// `bash -euo pipefail` running `env` then `script` in `dir`, as a reader of a documented
/// walk-through would: `bin`'s directory first on `PATH`, and none of the Akritas variables of
/// the machine running the test (key, configuration file, model name, kubeconfig).
pub fn walkthrough_shell(bin: &Path, env: &str, script: &str, dir: &Path) -> Command {
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new("bash");
    command
        .args(["-euo", "pipefail", "-c", &format!("{env}\n{script}")])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("AKRITAS_API_KEY")
        .env_remove("AKRITAS_CONFIG")
        .env_remove("AKRITAS_DATA_DIR")
        .env_remove("AKRITAS_UPSTREAM_MODEL")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null());
    command
}

/// Returns a currently free loopback port.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// A free loopback port below the kernel's ephemeral range (which starts at 32768 by default),
/// for a server that restarts on the same port: no `bind(…:0)` and no outgoing connection of
/// another test takes it while the server is down.
pub fn stable_port() -> u16 {
    loop {
        let port = 20_000 + rand::random_range(0..12_000u16);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Copies `config/samples` into a fresh temporary directory.
pub fn copy_samples() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&root().join("config/samples"), dir.path());
    dir
}

/// Copies a directory tree (files and directories only).
/// Every file under `dir`, recursively (none when it does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { files.extend(files_under(&path)) } else { files.push(path) }
    }
    files
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A running `akritas serve`. Killed on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Every stderr line so far.
    pub log: Arc<Mutex<Vec<String>>>,
}

/// Base command for the `akritas` executable at `bin` (a test passes
/// `env!("CARGO_BIN_EXE_akritas")`): loopback on a free port, JSON logs, the repo's SYSTEM.md.
pub fn serve_command(bin: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(bin);
    command
        .arg("serve")
        // Through the environment, so a test can still override them with flags.
        .env("AKRITAS_ADDRESS", "127.0.0.1:0")
        .env("AKRITAS_LOG_FORMAT", "json")
        .env("AKRITAS_SYSTEM_INSTRUCTIONS", root().join("instructions/SYSTEM.md"))
        // Each server gets its own journals (the journal file is locked by its owner).
        .env("AKRITAS_DATA_DIR", tempfile::tempdir().unwrap().keep())
        .env("AKRITAS_SKILLS_DIR", "")
        .env_remove("AKRITAS_API_KEY")
        .env_remove("AKRITAS_CONFIG")
        // Standalone Kubernetes tools fall back to `$KUBECONFIG`: only a test that sets it gets them.
        .env_remove("KUBECONFIG")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

impl Server {
    /// Starts the command and waits for the "listening" log line.
    pub fn start(command: Command) -> Server {
        Server::spawn(command).listening(Duration::from_secs(20))
    }

    /// Starts the command without waiting (a standby replica, for example).
    pub fn spawn(mut command: Command) -> Starting {
        akritas::install_crypto_provider();
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str::<serde_json::Value>(&line)
                    && value.pointer("/fields/message").and_then(|m| m.as_str()) == Some("Akritas listening")
                    && let Some(address) = value.pointer("/fields/address").and_then(|a| a.as_str())
                {
                    let _ = tx.send(address.to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        Starting { child: Some(child), log, rx }
    }

    /// Sends SIGTERM and waits for the exit status code.
    pub fn terminate(mut self) -> Option<i32> {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: sending a signal to our own child process has no memory-safety preconditions.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The collected log.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server process that has not (yet) logged that it listens.
pub struct Starting {
    child: Option<Child>,
    /// Every stderr line so far.
    pub log: Arc<Mutex<Vec<String>>>,
    rx: mpsc::Receiver<String>,
}

impl Starting {
    /// Waits for the "listening" line; panics with the log after `limit`.
    pub fn listening(mut self, limit: Duration) -> Server {
        match self.rx.recv_timeout(limit) {
            Ok(address) => Server { child: self.take_child(), url: format!("http://{address}"), log: self.log.clone() },
            Err(_) => {
                drop(self.take_child().kill());
                panic!("server did not start; log:\n{}", self.log.lock().unwrap().join("\n"));
            }
        }
    }

    /// Whether the "listening" line came within `limit` (without consuming it on success).
    pub fn try_listening(self, limit: Duration) -> Result<Server, Starting> {
        match self.rx.recv_timeout(limit) {
            Ok(address) => {
                let log = self.log.clone();
                let mut this = self;
                Ok(Server { child: this.take_child(), url: format!("http://{address}"), log })
            }
            Err(_) => Err(self),
        }
    }

    /// The collected log.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn take_child(&mut self) -> Child {
        self.child.take().expect("the process is still owned")
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs a command to completion and returns (exit code, stderr).
pub fn run_to_end(mut command: Command) -> (i32, String) {
    let output = command.output().unwrap();
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// Polls `check` every 20 ms until it returns `Some`, for at most `limit`;
/// returns the value and the time it took.
pub async fn poll<T, F, Fut>(limit: Duration, mut check: F) -> Option<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(value) = check().await {
            return Some((value, started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Waits up to `limit` for `check` to return `Some`; panics naming `what` when it does not.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match poll(limit, check).await {
        Some((value, _)) => value,
        None => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// Waits until the server at `url` offers the tool `name` (an MCP adapter is connected).
pub async fn wait_for_tool(url: &str, name: &str) {
    let tools = format!("{url}/api/v1/tools");
    wait_for(&format!("the tool {name}"), Duration::from_secs(30), || async {
        let body: serde_json::Value = reqwest::get(&tools).await.ok()?.json().await.ok()?;
        body["tools"].as_array()?.iter().any(|t| t["name"] == name).then_some(())
    })
    .await;
}

/// The newest Runs (`GET /api/v1/runs?limit=100`) of the server at `url`, newest first.
pub async fn runs(url: &str) -> Vec<serde_json::Value> {
    let body: serde_json::Value =
        reqwest::get(format!("{url}/api/v1/runs?limit=100")).await.unwrap().json().await.unwrap();
    body["runs"].as_array().cloned().unwrap_or_default()
}

/// One Run with its events (`GET /api/v1/runs/{id}`).
pub async fn run_detail(url: &str, id: &str) -> serde_json::Value {
    let body: serde_json::Value = reqwest::get(format!("{url}/api/v1/runs/{id}")).await.unwrap().json().await.unwrap();
    body["run"].clone()
}

/// The `q` quantile (0.0–1.0) of `values` by nearest rank; sorts them. For benches.
pub fn percentile<T: Ord + Copy + Default>(values: &mut [T], q: f64) -> T {
    values.sort_unstable();
    values.get(((values.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default()
}

/// Environment variable that marks a child process started by [`in_own_process`] and names
/// the one test it runs.
const OWN_PROCESS_ENV: &str = "AKRITAS_TEST_OWN_PROCESS";

/// For a test that changes process-wide state (a resource limit, a signal disposition), which
/// would reach every other test of its tier binary: returns `true` in a child process of the
/// same test binary that runs this test alone, where the caller runs the test's body; in the
/// calling process, runs that child, fails unless it ran exactly this test and it passed, and
/// returns `false`. `module` is the caller's `module_path!()` and `test` its function name.
pub fn in_own_process(module: &str, test: &str) -> bool {
    // `module_path!()` starts with the tier crate's name, which the harness leaves out.
    let path = format!("{}::{test}", module.split_once("::").map_or(module, |(_, rest)| rest));
    if std::env::var(OWN_PROCESS_ENV).is_ok_and(|running| running == path) {
        return true;
    }
    let output = std::process::Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([path.as_str(), "--exact", "--nocapture", "--test-threads", "1"])
        .env(OWN_PROCESS_ENV, &path)
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed;"),
        "{path} in its own process ({}):\n{stdout}\n{stderr}",
        output.status
    );
    print!("{stdout}");
    false
}
