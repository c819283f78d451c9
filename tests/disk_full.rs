//! A full data volume, for real: the data directory of `akritas serve` is a small tmpfs.
//! Deliveries are acknowledged until the volume fills, then answered 507 with the
//! directory named; `/health` is degraded; a chat gets 507 too. Freeing the space lets
//! ingestion and chat resume without a restart. After a restart every acknowledged
//! delivery is in the alert journal exactly once, nothing refused is, and both journals
//! verify. Needs root (it mounts a tmpfs).

use akritas_testkit as support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::scripted_llm::ScriptedLlm;
use support::{Server, poll, serve_command};

const TOKEN: &str = "df-am-token-0123456789";
const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
/// Size of the data volume.
const VOLUME: &str = "size=1m";

/// A tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(options: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "akritas-disk-full"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            output.status.success(),
            "this test needs root to mount a tmpfs (mount -t tmpfs -o {options}): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Bytes an unprivileged write may still use.
    fn free(&self) -> u64 {
        let path = std::ffi::CString::new(self.path().as_os_str().as_encoded_bytes()).unwrap();
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stat) }, 0);
        stat.f_bavail * stat.f_frsize
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn manifests(dir: &Path) {
    std::fs::write(
        dir.join("sources.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am, namespace: ops}\n\
         spec: {provider: alertmanager, auth: {bearerToken: {env: DF_AM_TOKEN}}}\n",
    )
    .unwrap();
}

fn serve(data: &Path, resources: &Path, llm: &str) -> Server {
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .env("AKRITAS_DATA_DIR", data)
        .env("AKRITAS_BASE_URL", llm)
        .env("AKRITAS_ALERT_JOB_BACKOFF", "1s")
        .env("AKRITAS_RESOURCE_ENV", "ops/DF_*")
        .env("DF_AM_TOKEN", TOKEN)
        .arg("--resources")
        .arg(resources);
    Server::start(command)
}

/// One delivery: the same alert (one Incident) at a new start time, so each is a new
/// event; padded so that the volume fills in a few hundred deliveries.
fn delivery(i: usize) -> String {
    let mut body: Value = serde_json::from_str(FIRING).unwrap();
    let starts = jiff::Timestamp::from_second(1_800_000_000 + i as i64).unwrap();
    body["alerts"][0]["startsAt"] = starts.to_string().into();
    body["alerts"][0]["annotations"]["description"] = format!("delivery {i} {}", "x".repeat(1500)).into();
    body.to_string()
}

struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

async fn post(client: &reqwest::Client, url: &str, body: String) -> Answer {
    let response =
        client.post(url).bearer_auth(TOKEN).header("content-type", "application/json").body(body).send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    Answer { status, retry_after, body: response.json().await.unwrap_or(Value::Null) }
}

async fn health(client: &reqwest::Client, base: &str) -> Value {
    client.get(format!("{base}/health")).send().await.unwrap().json().await.unwrap()
}

async fn chat(client: &reqwest::Client, base: &str) -> Answer {
    let body = serde_json::json!({"messages": [{"role": "user", "content": "is the cart healthy?"}]});
    let response = client.post(format!("{base}/api/v1/chat")).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    Answer { status, retry_after, body: response.json().await.unwrap_or(Value::Null) }
}

/// Delivery records of the alert journal: delivery id → number of records.
fn journaled_deliveries(journal: &Path) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for line in std::fs::read_to_string(journal).unwrap().lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        if record["kind"] == "alerts.delivery" {
            *seen.entry(record["data"]["delivery_id"].as_str().unwrap().to_string()).or_insert(0) += 1;
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_volume_refuses_with_507_degrades_health_and_recovers_without_restart() {
    akritas::install_crypto_provider();
    let volume = Tmpfs::mount(VOLUME);
    let data: PathBuf = volume.path().to_path_buf();
    let resources = tempfile::tempdir().unwrap();
    manifests(resources.path());
    let llm = ScriptedLlm::start(vec![]).await;
    let client = reqwest::Client::new();
    let server = serve(&data, resources.path(), &llm.url);
    let url = format!("{}/api/v1/alerts/ops/am/webhook", server.url);

    let mut acknowledged = Vec::new();
    let mut refused = 0usize;
    let mut next = 0usize;
    for _ in 0..5 {
        let answer = post(&client, &url, delivery(next)).await;
        next += 1;
        assert!(answer.status == 200 || answer.status == 202, "{} {}", answer.status, answer.body);
        acknowledged.push(answer.body["delivery_id"].as_str().unwrap().to_string());
    }
    assert_eq!(health(&client, &server.url).await["status"], "ok");

    // Fill the volume but for about 60 KiB, then deliver until the answers switch.
    let filler = data.join("filler");
    let keep = 60 << 10;
    std::fs::write(&filler, vec![0u8; volume.free().saturating_sub(keep) as usize]).unwrap();
    let first_refusal = loop {
        assert!(next < 1_000, "the volume never filled ({} acknowledged)", acknowledged.len());
        let answer = post(&client, &url, delivery(next)).await;
        next += 1;
        match answer.status {
            200 | 202 => acknowledged.push(answer.body["delivery_id"].as_str().unwrap().to_string()),
            _ => {
                refused += 1;
                break answer;
            }
        }
    };
    let acknowledged_before = acknowledged.len();
    assert_eq!(first_refusal.status, 507, "{}", first_refusal.body);
    assert_eq!(first_refusal.body["error"]["code"], "insufficient_storage");
    let message = first_refusal.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&data.display().to_string()), "the error names the data directory: {message}");
    assert!(message.contains("free space"), "the error says what to do: {message}");
    assert!(first_refusal.retry_after.is_some(), "507 carries Retry-After");
    for _ in 0..5 {
        let answer = post(&client, &url, delivery(next)).await;
        next += 1;
        assert_eq!(answer.status, 507, "still full: {}", answer.body);
        refused += 1;
    }

    let degraded = health(&client, &server.url).await;
    assert_eq!(degraded["status"], "degraded", "{degraded}");
    let alerts = degraded["degraded"].as_array().unwrap().iter().find(|d| d["component"] == "alerts").cloned();
    let reason = alerts.expect("the alerts component is degraded")["reason"].as_str().unwrap().to_string();
    assert!(reason.contains(&data.display().to_string()) && reason.contains("507"), "{reason}");
    // Readiness sends traffic elsewhere while deliveries are refused; liveness stays 200.
    let ready = client.get(format!("{}/ready", server.url)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["not_ready"], serde_json::json!(["alerts"]), "{ready}");
    assert_eq!(client.get(format!("{}/health", server.url)).send().await.unwrap().status(), 200);

    // Use up what the truncation freed, so the audit journal cannot write either.
    let mut spare = std::fs::File::create(data.join("spare")).unwrap();
    let _ = std::io::Write::write_all(&mut spare, &vec![0u8; volume.free() as usize + 4096]);
    drop(spare);
    // The last page of the audit journal may still hold a record or two.
    let mut chats = 0;
    let refused_chat = loop {
        let answer = chat(&client, &server.url).await;
        chats += 1;
        if answer.status != 502 || chats == 50 {
            break answer;
        }
    };
    assert_eq!(refused_chat.status, 507, "after {chats} chats: {}", refused_chat.body);
    assert_eq!(refused_chat.body["error"]["code"], "audit_unavailable");
    assert!(refused_chat.body["error"]["message"].as_str().unwrap().contains(&data.display().to_string()));
    assert!(refused_chat.retry_after.is_some());
    let degraded = health(&client, &server.url).await;
    assert!(degraded["degraded"].as_array().unwrap().iter().any(|d| d["component"] == "audit"), "{degraded}");

    // Space returns: no restart.
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(data.join("spare")).unwrap();
    let freed = std::time::Instant::now();
    let waited = loop {
        let answer = post(&client, &url, delivery(next)).await;
        if answer.status != 507 {
            assert!(answer.status == 200 || answer.status == 202, "{} {}", answer.status, answer.body);
            acknowledged.push(answer.body["delivery_id"].as_str().unwrap().to_string());
            break freed.elapsed();
        }
        assert!(freed.elapsed() < Duration::from_secs(10), "ingestion resumes once space returns: {}", answer.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    next += 1;
    let mut recovered_after = 1;
    for _ in 0..20 {
        let answer = post(&client, &url, delivery(next)).await;
        next += 1;
        assert!(answer.status == 200 || answer.status == 202, "{} {}", answer.status, answer.body);
        acknowledged.push(answer.body["delivery_id"].as_str().unwrap().to_string());
        recovered_after += 1;
    }
    let healthy = poll(Duration::from_secs(10), || {
        let client = client.clone();
        let base = server.url.clone();
        async move { Some(health(&client, &base).await).filter(|h| h["status"] == "ok") }
    })
    .await;
    assert!(healthy.is_some(), "health returns to ok: {}", health(&client, &server.url).await);
    assert_eq!(client.get(format!("{}/ready", server.url)).send().await.unwrap().status(), 200, "ready again");
    let after_chat = chat(&client, &server.url).await;
    assert_ne!(after_chat.status, 507, "chat records Runs again: {}", after_chat.body);
    let runs: Value = client.get(format!("{}/api/v1/runs", server.url)).send().await.unwrap().json().await.unwrap();
    assert!(runs["runs"].as_array().is_some_and(|r| !r.is_empty()), "the chat's Run is recorded: {runs}");

    println!(
        "disk full: {acknowledged_before} deliveries acknowledged before the volume filled, {refused} refused \
         with 507, ingestion resumed {waited:?} after the space returned, {recovered_after} acknowledged after"
    );

    // Restart: every acknowledged delivery exactly once, nothing refused, journals verify.
    assert!(server.terminate().is_some(), "serve stops on SIGTERM");
    let server = serve(&data, resources.path(), &llm.url);
    let journal = data.join("alerts/alerts.jsonl");
    let journaled = journaled_deliveries(&journal);
    for id in &acknowledged {
        assert_eq!(journaled.get(id), Some(&1), "acknowledged delivery {id} is in the journal exactly once");
    }
    assert_eq!(journaled.len(), acknowledged.len(), "no refused delivery was stored");
    let report = akritas::journal::verify(&journal).unwrap();
    assert!(report.torn_tail.is_none());
    let write_failed = std::fs::read_to_string(&journal).unwrap().matches("\"kind\":\"journal.write_failed\"").count();
    assert!(write_failed >= 1, "the outage is recorded in the chain");
    for path in [data.join("audit/akritas.jsonl"), journal.clone()] {
        let verified =
            Command::new(env!("CARGO_BIN_EXE_akritas")).args(["audit", "verify"]).arg(&path).output().unwrap();
        assert!(verified.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&verified.stderr));
    }
    let incidents: Value =
        client.get(format!("{}/api/v1/incidents", server.url)).send().await.unwrap().json().await.unwrap();
    let id = incidents["incidents"][0]["id"].as_str().unwrap();
    let incident: Value =
        client.get(format!("{}/api/v1/incidents/{id}", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(incident["events"].as_array().unwrap().len(), acknowledged.len(), "every acknowledged event replays");
    println!(
        "after restart: {} deliveries in the journal, each once; {write_failed} journal.write_failed record(s); \
         {} records verified",
        journaled.len(),
        report.records
    );
    drop(server);
}
