//! A real Prometheus (Debian package `prometheus`, 2.42) and Prometheus Alertmanager (Debian package
//! `prometheus-alertmanager`, 0.25) for integration tests, plus [`MetricSwitch`], a tiny `/metrics`
//! endpoint whose gauge a test flips to make an alerting rule fire and resolve.
//!
//! Binaries are looked up in `$PROMETHEUS_BIN` / `$ALERTMANAGER_BIN`, then `PATH`, then `/usr/bin`
//! (Debian names: `prometheus`, `prometheus-alertmanager`). A missing binary FAILS the test (nothing is
//! skipped); `e2e/install-test-deps.sh` installs both.
//!
//! Measured on the 2-core dev machine (Prometheus 2.42.0+ds, Alertmanager 0.25.0):
//! - `Alertmanager::start` / `Prometheus::start`: the processes answer `/-/ready` in ~0.2 s, but
//!   Prometheus hands targets and Alertmanagers from its discovery manager to the scrape manager and
//!   the notifier only after a hard-coded 5 s throttle. `Prometheus::start` therefore also waits until
//!   the Alertmanager (and the scrape target, if any) is active: it returns 5.3-5.7 s after spawning.
//! - rule → Alertmanager → webhook: a rule on a [`MetricSwitch`] gauge fires at the first evaluation
//!   after the first scrape; the webhook arrives 1.8-2.6 s after `Prometheus::start` returned
//!   (Alertmanager `group_wait: 1s`), 7.3-8.0 s after the test began (7 runs, up to 3 in parallel).
//! - `MetricSwitch::set(0.0)` → `resolved` webhook: 1.0 s in every run (next scrape + next evaluation,
//!   both every 1 s; Prometheus sends resolved alerts at once; Alertmanager flushes on
//!   `group_interval: 1s`).
//! - Resolving by rewriting the rules file and `POST /-/reload` instead took ~6 s: a reload re-applies
//!   the notifier config, `/api/v1/alertmanagers` is empty for 2-3 s (rediscovery), the resolved alert
//!   sent meanwhile is dropped and only re-sent after the resend delay. Hence no reload helper.
//! - Without `--rules.alert.resend-delay=2s` (default 1m) a rule that fires before the Alertmanager is
//!   discovered (e.g. `expr: vector(1)`) is dropped and only re-sent a minute later.
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

fn find_binary(env: &str, name: &str, package: &str) -> PathBuf {
    if let Some(bin) = std::env::var_os(env) {
        return PathBuf::from(bin);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "the `{name}` binary was not found in PATH or /usr/bin; install the Debian package: \
         `apt-get update && apt-get install -y {package}` (or run e2e/install-test-deps.sh, or set {env})"
    );
}

fn http_client() -> reqwest::Client {
    akritas::install_crypto_provider();
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("reqwest client")
}

/// Spawns `bin` with `args`, stderr (the process log) into `log`.
fn spawn(bin: &Path, args: &[String], log: &Path, package: &str) -> Child {
    let log_file = std::fs::File::create(log).expect("create log file");
    Command::new(bin).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(log_file).spawn().unwrap_or_else(
        |e| {
            panic!(
                "cannot start {}: {e}; install the `{package}` package (apt-get install -y {package})",
                bin.display()
            )
        },
    )
}

/// Polls `url` until it answers 2xx; fails early if the child exits.
async fn wait_ready(child: &mut Child, http: &reqwest::Client, url: &str, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited early with {status}"));
        }
        if let Ok(resp) = http.get(url).send().await
            && resp.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{url} not OK within {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn yaml_string(s: &str) -> String {
    // A JSON string is a valid YAML double-quoted scalar.
    serde_json::to_string(s).expect("string to JSON")
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A running Alertmanager with one webhook receiver; killed on drop.
///
/// Route: `group_by: ['alertname']`, `group_wait: 1s`, `group_interval: 1s`, `repeat_interval: 1h`, so
/// alerts with distinct `alertname`s arrive as separate notifications and alerts sharing one arrive
/// grouped. Receiver: `webhook_configs: [{url, send_resolved: true, max_alerts: 0}]`, plus
/// `http_config.authorization` (type `Bearer`) when a token is given.
pub struct Alertmanager {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Alertmanager {
    /// Starts Alertmanager on a free loopback port (clustering off) and waits for `/-/ready`.
    pub async fn start(webhook_url: &str, bearer_token: Option<&str>) -> Alertmanager {
        Alertmanager::start_fanout(&[webhook_url], bearer_token).await
    }

    /// [`Alertmanager::start`] with one receiver listing several webhooks: each notification goes
    /// to every one of them (the replicas of one service, for example).
    pub async fn start_fanout(webhook_urls: &[&str], bearer_token: Option<&str>) -> Alertmanager {
        let bin = find_binary("ALERTMANAGER_BIN", "prometheus-alertmanager", "prometheus-alertmanager");
        let http = http_client();
        let authorization = match bearer_token {
            Some(token) => format!(
                "    http_config:\n      authorization:\n        type: Bearer\n        credentials: {}\n",
                yaml_string(token)
            ),
            None => String::new(),
        };
        let webhooks: String = webhook_urls
            .iter()
            .map(|url| {
                format!("  - url: {}\n    send_resolved: true\n    max_alerts: 0\n{authorization}", yaml_string(url))
            })
            .collect();
        let config = format!(
            "route:\n  receiver: webhook\n  group_by: ['alertname']\n  group_wait: 1s\n  group_interval: 1s\n  \
             repeat_interval: 1h\nreceivers:\n- name: webhook\n  webhook_configs:\n{webhooks}"
        );
        let mut last_error = String::new();
        for _attempt in 0..3 {
            let dir = tempfile::tempdir().expect("tempdir");
            let config_path = dir.path().join("alertmanager.yml");
            std::fs::write(&config_path, &config).expect("write alertmanager.yml");
            let port = crate::free_port();
            let args = [
                format!("--config.file={}", config_path.display()),
                format!("--storage.path={}", dir.path().join("data").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
                format!("--web.external-url=http://127.0.0.1:{port}"),
                "--cluster.listen-address=".to_string(),
                "--log.level=info".to_string(),
            ];
            let child = spawn(&bin, &args, &dir.path().join("alertmanager.log"), "prometheus-alertmanager");
            let mut am = Alertmanager { child, port, dir, http: http.clone() };
            let ready = format!("{}/-/ready", am.url());
            match wait_ready(&mut am.child, &am.http, &ready, Duration::from_secs(20)).await {
                Ok(()) => return am,
                Err(e) => last_error = format!("{e}; log:\n{}", am.log()),
            }
        }
        panic!("Alertmanager did not become ready: {last_error}");
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `POST /api/v2/alerts` with a JSON array of postable alerts
    /// (`[{"labels": {...}, "annotations": {...}, "startsAt": ..., "endsAt": ...}]`).
    pub async fn post_alerts(&self, alerts: serde_json::Value) {
        let resp =
            self.http.post(format!("{}/api/v2/alerts", self.url())).json(&alerts).send().await.expect("post alerts");
        let status = resp.status();
        assert!(status.is_success(), "POST /api/v2/alerts failed: {status} {:?}", resp.text().await);
    }

    /// `GET /api/v2/alerts`: the alerts Alertmanager currently holds.
    pub async fn alerts(&self) -> serde_json::Value {
        let resp = self.http.get(format!("{}/api/v2/alerts", self.url())).send().await.expect("get alerts");
        resp.json().await.expect("alerts JSON")
    }

    /// The process log (stderr) so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("alertmanager.log")).unwrap_or_default()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// A running Prometheus (scrape and evaluation every 1 s) sending to one Alertmanager; killed on drop.
pub struct Prometheus {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port with `rules_yaml` (a Prometheus rule file:
    /// `groups: [{name, rules: [...]}]`), sending alerts to `alertmanager_url` (`http://host:port`) and,
    /// if given, scraping `scrape_target` (`host:port`, path `/metrics`, job `target`) every second.
    /// Returns once `/-/ready` answers AND the Alertmanager (and the target) are active, which takes
    /// ~5 s because of Prometheus' discovery throttle.
    pub async fn start(alertmanager_url: &str, scrape_target: Option<&str>, rules_yaml: &str) -> Prometheus {
        let bin = find_binary("PROMETHEUS_BIN", "prometheus", "prometheus");
        let http = http_client();
        let am = url::Url::parse(alertmanager_url).expect("alertmanager_url is a URL");
        let am_host = format!(
            "{}:{}",
            am.host_str().expect("alertmanager_url has a host"),
            am.port_or_known_default().expect("alertmanager_url has a port")
        );
        let scrape = match scrape_target {
            Some(target) => format!(
                "scrape_configs:\n- job_name: target\n  static_configs:\n  - targets: [{}]\n",
                yaml_string(target)
            ),
            None => String::new(),
        };
        let mut last_error = String::new();
        for _attempt in 0..3 {
            let dir = tempfile::tempdir().expect("tempdir");
            let rules_path = dir.path().join("rules.yml");
            std::fs::write(&rules_path, rules_yaml).expect("write rules.yml");
            let config = format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 alerting:\n  alertmanagers:\n  - scheme: {}\n    path_prefix: {}\n    static_configs:\n    \
                 - targets: [{}]\nrule_files: [{}]\n{scrape}",
                am.scheme(),
                yaml_string(am.path().trim_end_matches('/')),
                yaml_string(&am_host),
                yaml_string(&rules_path.display().to_string()),
            );
            let config_path = dir.path().join("prometheus.yml");
            std::fs::write(&config_path, &config).expect("write prometheus.yml");
            let port = crate::free_port();
            let args = [
                format!("--config.file={}", config_path.display()),
                format!("--storage.tsdb.path={}", dir.path().join("data").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
                format!("--web.external-url=http://127.0.0.1:{port}"),
                "--rules.alert.resend-delay=2s".to_string(),
                "--log.level=info".to_string(),
            ];
            let child = spawn(&bin, &args, &dir.path().join("prometheus.log"), "prometheus");
            let mut prometheus = Prometheus { child, port, dir, http: http.clone() };
            let ready = format!("{}/-/ready", prometheus.url());
            match wait_ready(&mut prometheus.child, &prometheus.http, &ready, Duration::from_secs(30)).await {
                Ok(()) => {
                    prometheus.wait_wired(scrape_target.is_some(), Duration::from_secs(30)).await;
                    return prometheus;
                }
                Err(e) => last_error = format!("{e}; log:\n{}", prometheus.log()),
            }
        }
        panic!("Prometheus did not become ready: {last_error}");
    }

    /// Waits until the notifier knows the Alertmanager and, if `target`, a scrape target is active.
    async fn wait_wired(&self, target: bool, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let alertmanagers = self.api("/api/v1/alertmanagers").await;
            let targets = self.api("/api/v1/targets").await;
            let am_ok = alertmanagers["data"]["activeAlertmanagers"].as_array().is_some_and(|a| !a.is_empty());
            let target_ok = !target || targets["data"]["activeTargets"].as_array().is_some_and(|a| !a.is_empty());
            if am_ok && target_ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus did not activate its Alertmanager/target within {within:?}: {alertmanagers} {targets}\nlog:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `GET {path}` on the HTTP API, as JSON (`Null` on any error).
    pub async fn api(&self, path: &str) -> serde_json::Value {
        match self.http.get(format!("{}{path}", self.url())).send().await {
            Ok(resp) => resp.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        }
    }

    /// `GET /api/v1/alerts`: the alerts the rules currently hold (pending and firing).
    pub async fn alerts(&self) -> serde_json::Value {
        self.api("/api/v1/alerts").await
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The process log (stderr) so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// A loopback HTTP endpoint serving `GET /metrics` with one gauge (`NAME VALUE`) that a test can
/// change at any time; Prometheus picks the new value up at its next scrape (every 1 s). A rule such as
/// `expr: NAME == 1` fires while the value is 1 and resolves when it is set to anything else. The
/// server runs on the current tokio runtime and stops on drop.
pub struct MetricSwitch {
    pub port: u16,
    name: String,
    value: Arc<AtomicU64>,
    scrapes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl MetricSwitch {
    /// Serves gauge `name` (a valid metric name) with `initial` on a free loopback port.
    pub async fn start(name: &str, initial: f64) -> MetricSwitch {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let value = Arc::new(AtomicU64::new(initial.to_bits()));
        let scrapes = Arc::new(AtomicU64::new(0));
        let (metric, served, counter) = (name.to_string(), value.clone(), scrapes.clone());
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let (metric, served, counter) = (metric.clone(), served.clone(), counter.clone());
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let value = f64::from_bits(served.load(Ordering::SeqCst));
                    (
                        [("content-type", "text/plain; version=0.0.4")],
                        format!("# TYPE {metric} gauge\n{metric} {value}\n"),
                    )
                }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MetricSwitch { port, name: name.to_string(), value, scrapes, task }
    }

    /// `127.0.0.1:PORT`, for [`Prometheus::start`]'s `scrape_target`.
    pub fn target(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The gauge name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the value served from now on.
    pub fn set(&self, value: f64) {
        self.value.store(value.to_bits(), Ordering::SeqCst);
    }

    /// The value currently served.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.value.load(Ordering::SeqCst))
    }

    /// How many times `/metrics` was fetched.
    pub fn scrapes(&self) -> u64 {
        self.scrapes.load(Ordering::SeqCst)
    }
}

impl Drop for MetricSwitch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
