//! A real single-node VictoriaMetrics for integration tests (Debian package `victoria-metrics`).
//!
//! The binary is looked up in `$VICTORIA_METRICS_BIN`, then `PATH`, then `/usr/bin`. A missing
//! binary FAILS the test (nothing is skipped).
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

/// A running VictoriaMetrics process; killed on drop.
pub struct VictoriaMetrics {
    child: Child,
    pub port: u16,
    _data: tempfile::TempDir,
    http: reqwest::Client,
}

/// Current Unix time in milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_millis() as i64
}

fn find_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("VICTORIA_METRICS_BIN") {
        return PathBuf::from(bin);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
        let candidate = dir.join("victoria-metrics");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "the `victoria-metrics` binary was not found in PATH or /usr/bin; install the Debian package: \
         `apt-get update && apt-get install -y victoria-metrics` (or set VICTORIA_METRICS_BIN)"
    );
}

impl VictoriaMetrics {
    /// Starts VictoriaMetrics on a free loopback port and waits for `/health`.
    pub async fn start() -> Self {
        akritas::install_crypto_provider();
        let bin = find_binary();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("reqwest client");
        let mut last_error = String::new();
        for _attempt in 0..3 {
            let data = tempfile::tempdir().expect("tempdir");
            let port = crate::free_port();
            let child = Command::new(&bin)
                .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
                .arg(format!("-storageDataPath={}", data.path().display()))
                .arg("-search.latencyOffset=1s")
                .arg("-search.disableCache")
                .arg("-loggerLevel=ERROR")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start {}: {e}; install the `victoria-metrics` package (apt-get install -y victoria-metrics)",
                        bin.display()
                    )
                });
            let mut vm = VictoriaMetrics { child, port, _data: data, http: http.clone() };
            match vm.wait_healthy(Duration::from_secs(20)).await {
                Ok(()) => return vm,
                Err(e) => last_error = e,
            }
        }
        panic!("VictoriaMetrics did not become healthy: {last_error}");
    }

    async fn wait_healthy(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let url = format!("{}/health", self.url());
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("victoria-metrics exited early with {status}"));
            }
            if let Ok(resp) = self.http.get(&url).send().await
                && resp.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("/health not OK within {within:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Imports samples in Prometheus text format (`name{labels} value timestamp_ms`) and flushes
    /// them so they are immediately searchable.
    pub async fn import_prometheus(&self, text: &str) {
        let resp = self
            .http
            .post(format!("{}/api/v1/import/prometheus", self.url()))
            .body(text.to_owned())
            .send()
            .await
            .expect("import request");
        assert!(resp.status().is_success(), "import failed: {} {:?}", resp.status(), resp.text().await);
        self.force_flush().await;
    }

    /// `GET /internal/force_flush`
    pub async fn force_flush(&self) {
        let resp = self.http.get(format!("{}/internal/force_flush", self.url())).send().await.expect("force_flush");
        assert!(resp.status().is_success(), "force_flush failed: {}", resp.status());
    }

    /// Waits until `series` for `selector` returns at least `count` series (import is asynchronous).
    pub async fn wait_for_series(&self, selector: &str, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let resp = self
                .http
                .post(format!("{}/api/v1/series", self.url()))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(
                    url::form_urlencoded::Serializer::new(String::new())
                        .append_pair("match[]", selector)
                        .append_pair("start", "0")
                        .finish(),
                )
                .send()
                .await
                .expect("series request");
            let body: serde_json::Value = resp.json().await.expect("series JSON");
            let n = body["data"].as_array().map_or(0, Vec::len);
            if n >= count {
                return;
            }
            assert!(Instant::now() < deadline, "VictoriaMetrics did not show {count} series for {selector} (got {n})");
            self.force_flush().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for VictoriaMetrics {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
