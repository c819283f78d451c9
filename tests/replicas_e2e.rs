//! Replicas of the real `akritas serve` sharing one PostgreSQL (`storage_backend: postgres`):
//! a Run started on one is read and continued on the other, the same Alertmanager delivery
//! posted to both opens one incident investigated once and notified once per receiver, and a
//! job claimed by a replica killed with SIGKILL is taken over by the other after
//! `job_claim_timeout` and completes there. The audit verifies in the database at the end.

use akritas_testkit as support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::postgres::Postgres;
use support::scripted_llm::{Reply, ScriptedLlm, Step, inconclusive_result, offers};
use support::sink::Sink;
use support::{Server, serve_command};

const API_KEY: &str = "replica-api-key-0123456789abcdef";
const AM_TOKEN: &str = "replica-am-token-0123456789abcdef";
/// `job_claim_timeout` of the replicas.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(2);

fn alias(name: &str) -> String {
    akritas::tools::openai_alias(&akritas::tools::ToolName::try_from(name).unwrap())
}

/// The model: plans no check, submits an inconclusive result, answers chats; `plans` counts the
/// investigations' plans. An investigation's plan waits `slow` milliseconds (a replica killed
/// then dies inside the Run).
fn model(slow: Arc<AtomicU64>, plans: Arc<AtomicUsize>) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    move |_, request| {
        if offers(request, PROPOSE) {
            let edit = json!({"operation": "replace", "path": PILLAR, "old": OLD, "new": NEW});
            let proposal = json!({
                "analysis": "orders-v2 is missing from the production pillar.", "edits": [edit],
                "checks": [], "risks": [], "rollback": "Revert the pillar change.", "clarifications": []
            });
            Step::from(Reply::ToolCalls(vec![("e".into(), PROPOSE.into(), proposal)]))
        } else if offers(request, &plan) {
            let investigation = request.to_string().contains("provider-independent alert");
            if investigation {
                plans.fetch_add(1, Ordering::SeqCst);
            }
            let step =
                Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]));
            match slow.load(Ordering::SeqCst) {
                0 => step,
                delay if investigation => step.with_delay(Duration::from_millis(delay)),
                _ => step,
            }
        } else if offers(request, &submit) {
            Step::from(Reply::ToolCalls(vec![("r".into(), submit.clone(), inconclusive_result())]))
        } else {
            Step::from(Reply::Content("All good.".into()))
        }
    }
}

/// The change previews' Workspace: the nftables fixture, and the edit the model proposes.
const PROPOSE: &str = "akritas_propose_edits";
const PILLAR: &str = "pillar/prod/nftables.sls";
const OLD: &str = "      port: 8443\n  log_dropped: true\n";
const NEW: &str =
    "      port: 8443\n    - name: orders-v2\n      address: 10.20.4.15\n      port: 8443\n  log_dropped: true\n";

struct Cluster {
    pg: Postgres,
    llm: ScriptedLlm,
    sink: Sink,
    resources: tempfile::TempDir,
    workspaces: tempfile::TempDir,
    http: reqwest::Client,
}

/// `git` in `dir`, which must succeed.
fn git(dir: &std::path::Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

impl Cluster {
    async fn start(slow: Arc<AtomicU64>, plans: Arc<AtomicUsize>) -> Cluster {
        akritas::install_crypto_provider();
        let pg = Postgres::start();
        let llm = ScriptedLlm::start_with(model(slow, plans)).await;
        let sink = Sink::start(Duration::from_millis(10)).await;
        let resources = tempfile::tempdir().unwrap();
        let workspaces = tempfile::tempdir().unwrap();
        let root = workspaces.path().join("nftables");
        support::copy_dir(&support::root().join("tests/fixtures/change/nftables"), &root);
        git(&root, &["init", "-q", "-b", "main"]);
        git(&root, &["add", "."]);
        git(&root, &["commit", "-qm", "initial"]);
        let manifest = format!(
            "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {{name: am, namespace: default}}\n\
             spec: {{provider: alertmanager, auth: {{bearerToken: {{env: REPLICA_AM_TOKEN}}}}}}\n---\n\
             apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: hook, namespace: default}}\n\
             spec: {{type: webhook, webhook: {{url: \"{}/hook\"}}}}\n---\n\
             apiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {{name: nftables, namespace: default}}\n\
             spec: {{source: {{path: \"{}\"}}, writable: true}}\n",
            sink.url,
            root.display()
        );
        std::fs::write(resources.path().join("replicas.yaml"), manifest).unwrap();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        Cluster { pg, llm, sink, resources, workspaces, http }
    }

    async fn replica(&self) -> Server {
        let mut command = self.serve();
        command.env("AKRITAS_STORAGE_BACKEND", "postgres");
        tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap()
    }

    /// `akritas serve` on this cluster's model, database (with `storage_backend: postgres`) and
    /// resources; its data directory is a new one.
    fn serve(&self) -> std::process::Command {
        let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
        command
            .arg("--resources")
            .arg(self.resources.path())
            .env("AKRITAS_DATABASE_URL", self.pg.url("disable"))
            .env("AKRITAS_JOB_CLAIM_TIMEOUT", format!("{}s", CLAIM_TIMEOUT.as_secs()))
            .env("AKRITAS_BASE_URL", &self.llm.url)
            .env("AKRITAS_API_KEY", API_KEY)
            .env("AKRITAS_RESOURCE_ENV", "REPLICA_*")
            .env("REPLICA_AM_TOKEN", AM_TOKEN)
            .env("AKRITAS_NOTIFICATION_TIMEOUT", "5s")
            .env("AKRITAS_WORKSPACE_ROOTS", self.workspaces.path());
        command
    }

    async fn get(&self, server: &Server, path: &str) -> Value {
        let response = self.http.get(format!("{}{path}", server.url)).bearer_auth(API_KEY).send().await.unwrap();
        assert!(response.status().is_success(), "GET {path}: {}", response.status());
        response.json().await.unwrap()
    }

    async fn metrics(&self, server: &Server) -> String {
        let response = self.http.get(format!("{}/metrics", server.url)).bearer_auth(API_KEY).send().await.unwrap();
        response.text().await.unwrap()
    }

    async fn post(&self, server: &Server, path: &str, token: &str, body: Value) -> (u16, Value) {
        let response =
            self.http.post(format!("{}{path}", server.url)).bearer_auth(token).json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Waits until job `id`, read on `server`, satisfies `done`.
    async fn job_until(&self, server: &Server, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let job = self.get(server, &format!("/api/v1/investigation-jobs/{id}")).await;
            if done(&job) {
                return job;
            }
            assert!(Instant::now() < deadline, "job {id} never got there: {job}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn delivery(name: &str) -> Value {
    json!({
        "receiver": "akritas", "status": "firing", "alerts": [{
            "status": "firing", "labels": {"alertname": name, "severity": "warning", "instance": "node-1:9100"},
            "annotations": {"summary": "replica harness"}, "startsAt": "2026-12-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "", "fingerprint": format!("{:016x}", name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))),
        }],
        "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://alertmanager.invalid",
        "version": "4", "groupKey": "{}:{replica=\"harness\"}", "truncatedAlerts": 0,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_runs_and_one_delivery_to_both_is_investigated_and_notified_once() {
    let plans = Arc::new(AtomicUsize::new(0));
    let cluster = Cluster::start(Arc::default(), plans.clone()).await;
    let (a, b) = (cluster.replica().await, cluster.replica().await);
    let (health_a, health_b) = (cluster.get(&a, "/health").await, cluster.get(&b, "/health").await);
    for health in [&health_a, &health_b] {
        assert_eq!(health["storage"]["backend"], "postgres", "{health}");
        assert_eq!(health["storage"]["database"]["reachable"], true, "{health}");
        assert_eq!(health["storage"]["database"]["schema"], 2, "{health}");
    }
    assert_ne!(health_a["storage"]["replica"], health_b["storage"]["replica"]);

    // A chat on A is read and continued on B.
    let chat = json!({"messages": [{"role": "user", "content": "Is the shop healthy?"}]});
    let (status, answer) = cluster.post(&a, "/api/v1/chat", API_KEY, chat).await;
    assert_eq!(status, 200, "{answer}");
    let run_id = answer["run_id"].as_str().unwrap().to_string();
    let (status, followed) =
        cluster.post(&b, &format!("/api/v1/runs/{run_id}/chat"), API_KEY, json!({"message": "And the db?"})).await;
    assert_eq!((status, followed["run_id"].as_str()), (200, Some(run_id.as_str())), "{followed}");
    let run = cluster.get(&a, &format!("/api/v1/runs/{run_id}")).await;
    let kinds: Vec<&str> = run["run"]["events"].as_array().unwrap().iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(kinds.contains(&"follow_up"), "A sees the follow-up B recorded: {kinds:?}");

    // Alertmanager sends the same notification to both replicas.
    let body = delivery("ReplicaAlert");
    let (sent_a, sent_b) = tokio::join!(
        cluster.post(&a, "/api/v1/alertmanager/webhook", AM_TOKEN, body.clone()),
        cluster.post(&b, "/api/v1/alertmanager/webhook", AM_TOKEN, body.clone()),
    );
    let mut outcomes = [sent_a.1["events"][0].clone(), sent_b.1["events"][0].clone()];
    assert!(sent_a.0 / 100 == 2 && sent_b.0 / 100 == 2, "{sent_a:?} {sent_b:?}");
    outcomes.sort_by_key(|o| o["status"].as_str().unwrap_or_default().to_string());
    assert_eq!((outcomes[0]["status"].as_str(), outcomes[1]["status"].as_str()), (Some("accepted"), Some("duplicate")));
    assert_eq!(outcomes[0]["incident_id"], outcomes[1]["incident_id"]);
    let job_id = outcomes[0]["job_id"].as_str().unwrap().to_string();
    let job = cluster
        .job_until(&b, &job_id, |job| {
            job["status"] == "succeeded"
                && job["deliveries"].as_array().is_some_and(|d| d.iter().all(|d| d["status"] == "delivered"))
        })
        .await;
    assert_eq!(job["runs"].as_array().unwrap().len(), 1, "investigated once: {job}");
    assert_eq!(plans.load(Ordering::SeqCst), 1, "the model was asked to plan once");
    let notified: Vec<_> = cluster.sink.received().into_iter().filter(|r| r.path == "/hook").collect();
    assert_eq!(notified.len(), 1, "notified once");
    let incidents = cluster.get(&a, "/api/v1/incidents").await;
    assert_eq!(incidents["incidents"].as_array().unwrap().len(), 1);
    let metrics = format!("{}{}", cluster.metrics(&a).await, cluster.metrics(&b).await);
    for family in [
        "akritas_database_transaction_seconds",
        "akritas_database_lock_wait_seconds",
        "akritas_job_claims_total{outcome=\"claimed\"} 1",
    ] {
        assert!(metrics.contains(family), "{family} missing from /metrics");
    }
    verify_audit(&cluster.pg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_claimed_by_a_killed_replica_completes_on_the_other() {
    let slow = Arc::new(AtomicU64::new(60_000));
    let plans = Arc::new(AtomicUsize::new(0));
    let cluster = Cluster::start(slow.clone(), plans.clone()).await;
    let a = cluster.replica().await;
    let replica_a = cluster.get(&a, "/health").await["storage"]["replica"].as_str().unwrap().to_string();
    let (status, accepted) =
        cluster.post(&a, "/api/v1/alertmanager/webhook", AM_TOKEN, delivery("FailoverAlert")).await;
    assert_eq!(status, 202, "{accepted}");
    let job_id = accepted["events"][0]["job_id"].as_str().unwrap().to_string();
    cluster.job_until(&a, &job_id, |job| job["status"] == "running" && job["claimed_by"] == replica_a.as_str()).await;
    let b = cluster.replica().await;
    while plans.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A dies inside the Run; the next attempt answers at once.
    slow.store(0, Ordering::SeqCst);
    let killed = Instant::now();
    drop(a);
    let taken = cluster
        .job_until(&b, &job_id, |job| job["status"] != "running" || job["claimed_by"] != replica_a.as_str())
        .await;
    let takeover = killed.elapsed();
    let job = cluster.job_until(&b, &job_id, |job| job["status"] == "succeeded").await;
    println!(
        "failover: job_claim_timeout {} s, taken over {:.1} s after the kill, succeeded {:.1} s after it ({})",
        CLAIM_TIMEOUT.as_secs(),
        takeover.as_secs_f64(),
        killed.elapsed().as_secs_f64(),
        taken["status"]
    );
    assert_eq!(job["attempts"], 2, "{job}");
    assert_eq!(job["runs"].as_array().unwrap().len(), 2, "the interrupted Run and the one that succeeded: {job}");
    let first = cluster.get(&b, &format!("/api/v1/runs/{}", job["runs"][0].as_str().unwrap())).await;
    assert_eq!(first["run"]["error_code"], "interrupted", "B closed A's Run: {first}");
    assert_eq!(plans.load(Ordering::SeqCst), 2);
    assert!(cluster.metrics(&b).await.contains("akritas_job_takeovers_total 1"), "the takeover is counted");
    verify_audit(&cluster.pg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_whose_sender_dies_mid_send_is_not_sent_again() {
    let cluster = Cluster::start(Arc::default(), Arc::default()).await;
    let a = cluster.replica().await;
    // The receiver takes the request and never answers while A sends it.
    cluster.sink.hold(true);
    let (status, accepted) = cluster.post(&a, "/api/v1/alertmanager/webhook", AM_TOKEN, delivery("HeldAlert")).await;
    assert_eq!(status, 202, "{accepted}");
    let job_id = accepted["events"][0]["job_id"].as_str().unwrap().to_string();
    let hooks = || cluster.sink.received().into_iter().filter(|r| r.path == "/hook").count();
    let waiting = Instant::now();
    while hooks() == 0 {
        assert!(waiting.elapsed() < Duration::from_secs(30), "the notification never reached the receiver");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let job = cluster.get(&a, &format!("/api/v1/investigation-jobs/{job_id}")).await;
    assert_eq!(job["deliveries"][0]["status"], "sending", "recorded as started before it is sent: {job}");
    drop(a);
    cluster.sink.hold(false);
    let b = cluster.replica().await;
    let job = cluster.job_until(&b, &job_id, |job| job["deliveries"][0]["status"] != "sending").await;
    assert_eq!(job["deliveries"][0]["status"], "failed", "{job}");
    assert_eq!(job["deliveries"][0]["error"], "send_interrupted", "{job}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(hooks(), 1, "not sent again by the replica that took the job over");
    verify_audit(&cluster.pg);
}

fn verify_audit(pg: &Postgres) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["audit", "verify", "--database-env", "REPLICA_DB"])
        .env("REPLICA_DB", pg.url("disable"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_get_503_with_retry_after_while_the_database_is_down_and_none_is_lost() {
    let cluster = Cluster::start(Arc::default(), Arc::default()).await;
    let a = cluster.replica().await;
    let (status, _) = cluster.post(&a, "/api/v1/alertmanager/webhook", AM_TOKEN, delivery("BeforeOutage")).await;
    assert_eq!(status, 202);
    cluster.pg.stop();
    let response = cluster
        .http
        .post(format!("{}/api/v1/alertmanager/webhook", a.url))
        .bearer_auth(AM_TOKEN)
        .json(&delivery("DuringOutage"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("5"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "database_unavailable", "{body}");
    // /health shows the database's last probe (every database_health_interval, 5 s).
    let degraded = Instant::now();
    loop {
        let health = cluster.get(&a, "/health").await;
        if (health["status"].as_str(), health["storage"]["database"]["reachable"].as_bool())
            == (Some("degraded"), Some(false))
        {
            break;
        }
        assert!(degraded.elapsed() < Duration::from_secs(30), "/health never said the database is down: {health}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.pg.start_again();
    // Alertmanager retries; once the database answers the delivery is stored, with no restart.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, answer) =
            cluster.post(&a, "/api/v1/alertmanager/webhook", AM_TOKEN, delivery("DuringOutage")).await;
        if status == 202 {
            break;
        }
        assert_eq!(status, 503, "{answer}");
        assert!(Instant::now() < deadline, "the replica did not recover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let incidents = cluster.get(&a, "/api/v1/incidents").await;
    assert_eq!(incidents["incidents"].as_array().unwrap().len(), 2, "both deliveries stored once: {incidents}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let health = cluster.get(&a, "/health").await;
        if health["status"] == "ok" {
            break;
        }
        assert!(Instant::now() < deadline, "still degraded: {}", health["degraded"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The red team's finding: an unauthenticated `/health` showed the database's error text and
/// the replica id. Without an API key it now says the status only; with one, everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_health_shows_no_database_error_or_replica_id_and_a_key_sees_them() {
    let cluster = Cluster::start(Arc::default(), Arc::default()).await;
    let a = cluster.replica().await;
    let replica = cluster.get(&a, "/health").await["storage"]["replica"].as_str().unwrap().to_string();
    cluster.pg.stop();
    let deadline = Instant::now() + Duration::from_secs(30);
    let keyed = loop {
        let health = cluster.get(&a, "/health").await;
        if health["storage"]["database"]["error"].is_string() {
            break health;
        }
        assert!(Instant::now() < deadline, "/health never said the database is down: {health}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!((keyed["status"].as_str(), keyed["storage"]["replica"].as_str()), (Some("degraded"), Some(&*replica)));
    let error = keyed["storage"]["database"]["error"].as_str().unwrap().to_string();

    let response = cluster.http.get(format!("{}/health", a.url)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "probes read the status code: it stays 200");
    let text = response.text().await.unwrap();
    let anonymous: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(anonymous["status"], "degraded", "{text}");
    assert!(
        !text.contains(&replica) && !text.contains(&error),
        "the replica id or the database's error leaked: {text}"
    );
    let mut fields: Vec<&String> = anonymous.as_object().unwrap().keys().collect();
    fields.sort_unstable();
    assert_eq!(fields, ["details", "status"], "{text}");
    let wrong = cluster.http.get(format!("{}/health", a.url)).bearer_auth("not-the-api-key-0123456789").send();
    assert_eq!(wrong.await.unwrap().json::<Value>().await.unwrap(), anonymous, "a wrong key is anonymous");
    cluster.pg.start_again();
}

/// The red team's finding: `/health` (no credentials) ran a query on the shared pool per call.
/// Now one task asks the database every `database_health_interval` (an hour here), and 200
/// concurrent `/health` calls ask it nothing: counted in the database's own statement log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_health_calls_never_each_query_the_database() {
    let cluster = Cluster::start(Arc::default(), Arc::default()).await;
    let mut command = cluster.serve();
    command.env("AKRITAS_STORAGE_BACKEND", "postgres").env("AKRITAS_DATABASE_HEALTH_INTERVAL", "1h");
    let a = tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap();
    cluster.pg.psql("ALTER SYSTEM SET log_statement = 'all'");
    cluster.pg.psql("SELECT pg_reload_conf()");
    let probes = || cluster.pg.log().matches("FROM akritas_schema").count();
    let before = probes();
    let calls = (0..200).map(|n| {
        let request = cluster.http.get(format!("{}/health", a.url));
        let request = if n % 2 == 0 { request.bearer_auth(API_KEY) } else { request };
        async move { request.send().await.map(|r| r.status().as_u16()) }
    });
    let statuses = futures_util::future::join_all(calls).await;
    assert!(statuses.iter().all(|s| matches!(s, Ok(200))), "{statuses:?}");
    let health = cluster.get(&a, "/health").await;
    assert_eq!(health["storage"]["database"]["reachable"], true, "the probe at start: {health}");
    assert_eq!(probes(), before, "no /health call queried the database");
    cluster.pg.psql("SELECT COALESCE(MAX(version), 0) FROM akritas_schema");
    assert_eq!(probes(), before + 1, "the statement log shows such a query when one is made");
    let metrics = cluster.metrics(&a).await;
    assert!(metrics.contains("akritas_database_health_probes_total 1\n"), "the probe at start only:\n{metrics}");
}

/// Posts alerts round robin to `servers` until `stop` (of `names` alert names: beyond that, the
/// same alerts re-sent), each re-sent after a refusal until it is acknowledged (as Alertmanager
/// retries); returns (delivery id, fingerprint) of each acknowledgement, and the refusals by
/// status.
async fn alertmanager_like_load(
    http: reqwest::Client,
    urls: Vec<String>,
    first: usize,
    names: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<(String, String)>, std::collections::BTreeMap<u16, usize>) {
    let mut acked = Vec::new();
    let mut refused = std::collections::BTreeMap::new();
    let mut n = first;
    while !stop.load(Ordering::SeqCst) {
        let name = format!("LoadAlert{}", n % names);
        let body = delivery(&name);
        let fingerprint = body["alerts"][0]["fingerprint"].as_str().unwrap().to_string();
        loop {
            let url = &urls[n % urls.len()];
            match http.post(url).bearer_auth(AM_TOKEN).json(&body).send().await {
                Ok(response) if response.status().is_success() => {
                    let answer: Value = response.json().await.unwrap();
                    acked.push((answer["delivery_id"].as_str().unwrap().to_string(), fingerprint));
                    break;
                }
                Ok(response) => *refused.entry(response.status().as_u16()).or_default() += 1,
                Err(_) => *refused.entry(0).or_default() += 1,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        n += 4;
    }
    (acked, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_second_database_outage_under_load_loses_no_acknowledged_delivery() {
    let cluster = Cluster::start(Arc::default(), Arc::default()).await;
    let (a, b) = (cluster.replica().await, cluster.replica().await);
    let urls = vec![format!("{}/api/v1/alertmanager/webhook", a.url), format!("{}/api/v1/alertmanager/webhook", b.url)];
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|first| {
            tokio::spawn(alertmanager_like_load(cluster.http.clone(), urls.clone(), first, usize::MAX, stop.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.pg.stop();
    tokio::time::sleep(Duration::from_secs(30)).await;
    cluster.pg.start_again();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::SeqCst);
    let (mut acked, mut refused) = (Vec::new(), std::collections::BTreeMap::new());
    for task in load {
        let (a, r) = task.await.unwrap();
        acked.extend(a);
        for (status, count) in r {
            *refused.entry(status).or_insert(0) += count;
        }
    }
    let (lost, twice) = lost_and_twice(&cluster.pg, &acked);
    let fingerprints: std::collections::BTreeSet<&String> = acked.iter().map(|(_, f)| f).collect();
    let accepted: usize = cluster
        .pg
        .psql(
            "SELECT count(*) FROM akritas_records, jsonb_array_elements(data::jsonb -> 'items') item \
             WHERE store = 'alerts' AND kind = 'alerts.delivery' AND item -> 'outcome' ->> 'status' = 'accepted'",
        )
        .parse()
        .unwrap();
    println!(
        "30 s outage under load: {} deliveries acknowledged, {lost} lost, {twice} stored twice; refusals while down: {refused:?}",
        acked.len()
    );
    assert_eq!((lost, twice), (0, 0));
    assert!(refused.get(&503).copied().unwrap_or_default() > 0, "the outage was answered 503: {refused:?}");
    assert!(refused.keys().all(|status| *status == 503), "only 503s: {refused:?}");
    assert_eq!(accepted, fingerprints.len(), "each alert acknowledged was accepted once");
    verify_audit(&cluster.pg);
}

/// Of the acknowledged deliveries `acked` (delivery id, fingerprint): how many the database's
/// alert chain does not hold, and how many it holds more than once.
fn lost_and_twice(pg: &Postgres, acked: &[(String, String)]) -> (usize, usize) {
    let stored = pg.psql(
        "SELECT data::jsonb ->> 'delivery_id', count(*) FROM akritas_records WHERE store = 'alerts' \
         AND kind = 'alerts.delivery' GROUP BY 1",
    );
    let stored: std::collections::HashMap<String, usize> = stored
        .lines()
        .filter_map(|line| line.split_once('|'))
        .map(|(id, n)| (id.to_string(), n.parse().unwrap()))
        .collect();
    let lost = acked.iter().filter(|(id, _)| !stored.contains_key(id)).count();
    let twice = acked.iter().filter(|(id, _)| stored.get(id).is_some_and(|n| *n > 1)).count();
    (lost, twice)
}

/// `akritas storage migrate --to postgres` of `data_dir` into the cluster's database.
fn migrate(pg: &Postgres, data_dir: &std::path::Path) -> (bool, String) {
    migrate_to(pg, data_dir, "postgres")
}

/// `akritas storage migrate --to TO` between `data_dir` and the cluster's database.
fn migrate_to(pg: &Postgres, data_dir: &std::path::Path, to: &str) -> (bool, String) {
    let output = migrate_command(pg, data_dir, to).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// The `akritas storage migrate --to TO` command.
fn migrate_command(pg: &Postgres, data_dir: &std::path::Path, to: &str) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_akritas"));
    command
        .args(["storage", "migrate", "--to", to])
        .env("AKRITAS_DATA_DIR", data_dir)
        .env("AKRITAS_DATABASE_URL", pg.url("disable"))
        .env_remove("AKRITAS_CONFIG")
        .env_remove("AKRITAS_STORAGE_BACKEND");
    command
}

/// The line `migrate` printed for `store`.
fn line<'a>(text: &'a str, store: &str) -> &'a str {
    text.lines()
        .find(|line| line.starts_with(&format!("{store}: ")))
        .unwrap_or_else(|| panic!("no {store} line: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_data_dir_moves_into_the_database_resumably_and_a_replica_carries_on_from_it() {
    let plans = Arc::new(AtomicUsize::new(0));
    let cluster = Cluster::start(Arc::default(), plans.clone()).await;
    let data = tempfile::tempdir().unwrap();
    let mut command = cluster.serve();
    // Small segments: the journals span several files.
    command.env("AKRITAS_DATA_DIR", data.path()).env("AKRITAS_JOURNAL_SEGMENT_BYTES", "65536");
    let embedded = tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap();
    let mut jobs = Vec::new();
    for n in 0..3 {
        let (status, accepted) =
            cluster.post(&embedded, "/api/v1/alertmanager/webhook", AM_TOKEN, delivery(&format!("Moved{n}"))).await;
        assert_eq!(status, 202, "{accepted}");
        jobs.push(accepted["events"][0]["job_id"].as_str().unwrap().to_string());
    }
    for job in &jobs {
        cluster.job_until(&embedded, job, |job| job["status"] == "succeeded").await;
    }
    let chat = json!({"messages": [{"role": "user", "content": "Is the shop healthy?"}]});
    let (status, answer) = cluster.post(&embedded, "/api/v1/chat", API_KEY, chat).await;
    assert_eq!(status, 200, "{answer}");
    let run_id = answer["run_id"].as_str().unwrap().to_string();

    // Refused while `serve` holds the journals.
    let (ok, text) = migrate(&cluster.pg, data.path());
    assert!(!ok && text.contains("holds the journal"), "{text}");
    assert_eq!(embedded.terminate(), Some(0));

    // An interrupted copy: the first half of the alert chain is in the database already.
    let alerts = data.path().join("alerts/alerts.jsonl");
    let mut records = Vec::new();
    akritas::journal::copy_out(&alerts, &mut |seen: akritas::journal::Seen| {
        records.push(akritas::journal::database::Imported {
            seq: seen.record.seq,
            time: seen.record.time,
            kind: seen.record.kind,
            data: seen.data.get().to_string(),
            prev: seen.prev,
            hash: seen.record.hash,
            mac: seen.mac,
            key: None,
        });
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap();
    let total = records.len();
    assert!(total >= 6, "deliveries and job records: {total}");
    let db = akritas::journal::database::Database::connect(&cluster.pg.url("disable"), None, 2).unwrap();
    db.migrate().await.unwrap();
    let clock: akritas::journal::Clock = Arc::new(String::new);
    let log = akritas::journal::database::Log::new(&db, "alerts", clock, 1 << 20, None);
    log.import(&records[..total / 2]).await.unwrap();

    let (ok, text) = migrate(&cluster.pg, data.path());
    assert!(ok, "{text}");
    println!("{text}");
    let alerts_line = line(&text, "alerts");
    assert!(
        alerts_line.contains(&format!("{} record(s) copied, {} already there", total - total / 2, total / 2)),
        "{alerts_line}"
    );
    assert!(alerts_line.contains("the alert state loads from the database with the journal's"), "{alerts_line}");
    assert!(line(&text, "audit").contains("Run(s) replayed, as many as the journal starts"), "{text}");
    // With nobody reading its output it ends quietly by SIGPIPE at its first line (as
    // `git log | head` does), and leaves nothing half done.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let cut = migrate_command(&cluster.pg, data.path(), "postgres").stdout(writer).output().unwrap();
    let said = String::from_utf8_lossy(&cut.stderr);
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&cut.status), Some(libc::SIGPIPE), "{said}");
    assert!(!said.contains("panicked") && !said.contains("Broken pipe"), "{said}");
    // Again: nothing left to copy, everything verified again.
    let (ok, again) = migrate(&cluster.pg, data.path());
    assert!(ok, "{again}");
    for store in ["audit", "alerts"] {
        assert!(line(&again, store).contains(": 0 record(s) copied"), "{again}");
    }

    // A replica on the database carries on: the incidents, the Run, and the deduplication.
    let replica = cluster.replica().await;
    let incidents = cluster.get(&replica, "/api/v1/incidents").await;
    assert_eq!(incidents["incidents"].as_array().unwrap().len(), 3, "{incidents}");
    for job in &jobs {
        let job = cluster.get(&replica, &format!("/api/v1/investigation-jobs/{job}")).await;
        assert_eq!(job["status"], "succeeded", "{job}");
    }
    let (status, followed) = cluster
        .post(&replica, &format!("/api/v1/runs/{run_id}/chat"), API_KEY, json!({"message": "And the db?"}))
        .await;
    assert_eq!((status, followed["run_id"].as_str()), (200, Some(run_id.as_str())), "{followed}");
    let (status, again) = cluster.post(&replica, "/api/v1/alertmanager/webhook", AM_TOKEN, delivery("Moved0")).await;
    assert_eq!((status, again["events"][0]["status"].as_str()), (200, Some("duplicate")), "{again}");
    assert_eq!(plans.load(Ordering::SeqCst), 3, "nothing was investigated again");

    // Refused while a replica runs on the database, and into a database holding another chain.
    let (ok, text) = migrate(&cluster.pg, data.path());
    assert!(!ok && text.contains("replica(s) are running on this database"), "{text}");
    assert_eq!(replica.terminate(), Some(0), "a replica stopping leaves the database's replicas");

    // And back: the database written as journals that an embedded `serve` carries on from.
    let back = tempfile::tempdir().unwrap();
    let (ok, text) = migrate_to(&cluster.pg, back.path(), "embedded");
    assert!(ok, "{text}");
    println!("{text}");
    assert!(line(&text, "alerts").contains("the alert state loads from the journal with"), "{text}");
    let (ok, again) = migrate_to(&cluster.pg, back.path(), "embedded");
    assert!(ok && line(&again, "audit").contains(": 0 record(s) copied"), "{again}");
    let verified = std::process::Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["audit", "verify"])
        .arg(back.path().join("audit/akritas.jsonl"))
        .output()
        .unwrap();
    assert!(verified.status.success(), "{verified:?}");
    let mut command = cluster.serve();
    command.env("AKRITAS_DATA_DIR", back.path());
    let embedded = tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap();
    let incidents = cluster.get(&embedded, "/api/v1/incidents").await;
    assert_eq!(incidents["incidents"].as_array().unwrap().len(), 3, "{incidents}");
    let run = cluster.get(&embedded, &format!("/api/v1/runs/{run_id}")).await;
    let answered =
        run["run"]["events"].as_array().unwrap().iter().any(|e| e["type"] == "follow_up" && e["status"] == "succeeded");
    assert!(answered, "the follow-up answered on the database is in the journal: {run}");
    let (status, again) = cluster.post(&embedded, "/api/v1/alertmanager/webhook", AM_TOKEN, delivery("Moved1")).await;
    assert_eq!((status, again["events"][0]["status"].as_str()), (200, Some("duplicate")), "{again}");
    assert_eq!(embedded.terminate(), Some(0));

    let other = tempfile::tempdir().unwrap();
    let mut command = cluster.serve();
    command.env("AKRITAS_DATA_DIR", other.path());
    let server = tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap();
    let (status, _) = cluster.post(&server, "/api/v1/alertmanager/webhook", AM_TOKEN, delivery("Elsewhere")).await;
    assert_eq!(status, 202);
    assert_eq!(server.terminate(), Some(0));
    let (ok, text) = migrate(&cluster.pg, other.path());
    assert!(!ok && text.contains("it holds another chain"), "{text}");
    verify_audit(&cluster.pg);
}

/// A small seeded generator (xorshift64*): the same seed, the same kills.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Kills in the three-replica run (`REPLICA_KILLS` to change it).
const KILLS: u64 = 50;
/// Alerting rules of the real Prometheus: rule `HarnessK` fires once the gauge reaches K.
const RULES: u64 = 30;

/// Chats on a random live replica, each followed up on another, and every fourth time a change
/// preview; returns the Runs whose chat was answered, whether their follow-up was too, and the
/// approvals of the previews answered.
async fn chats(
    http: reqwest::Client,
    urls: Vec<String>,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> (Vec<(String, bool)>, Vec<String>) {
    let mut dice = Dice(seed | 1);
    let (mut answered, mut previews) = (Vec::new(), Vec::new());
    while !stop.load(Ordering::SeqCst) {
        let url = &urls[dice.below(urls.len() as u64) as usize];
        if dice.below(4) == 0 {
            let preview =
                json!({"workspace": "nftables", "request": "Allow orders-v2 through nftables.", "files": [PILLAR]});
            let sent =
                http.post(format!("{url}/api/v1/change/simulations")).bearer_auth(API_KEY).json(&preview).send().await;
            if let Ok(response) = sent
                && response.status() == 200
                && let Ok(body) = response.json::<Value>().await
                && let Some(id) = body["approval"]["id"].as_str()
            {
                previews.push(id.to_string());
            }
            continue;
        }
        let chat = json!({"messages": [{"role": "user", "content": "Is the shop healthy?"}]});
        let sent = http.post(format!("{url}/api/v1/chat")).bearer_auth(API_KEY).json(&chat).send().await;
        let Some(run) = (match sent {
            Ok(response) if response.status() == 200 => response.json::<Value>().await.ok(),
            _ => None,
        })
        .and_then(|answer| answer["run_id"].as_str().map(str::to_string)) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let other = &urls[dice.below(urls.len() as u64) as usize];
        let follow = json!({"message": "And the db?"});
        let followed = http
            .post(format!("{other}/api/v1/runs/{run}/chat"))
            .bearer_auth(API_KEY)
            .json(&follow)
            .send()
            .await
            .is_ok_and(|response| response.status() == 200);
        answered.push((run, followed));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (answered, previews)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_survive_seeded_sigkills_under_prometheus_alerts_and_chats_losing_nothing() {
    let seed: u64 = std::env::var("REPLICA_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261205);
    let kills: u64 = std::env::var("REPLICA_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(KILLS);
    println!("kill harness: seed {seed} (REPLICA_KILL_SEED), {kills} kills");
    let plans = Arc::new(AtomicUsize::new(0));
    // Investigations take a moment, so kills land inside Runs too.
    let cluster = Cluster::start(Arc::new(AtomicU64::new(400)), plans.clone()).await;
    let ports: Vec<u16> = (0..3).map(|_| support::stable_port()).collect();
    let start = |port: u16| {
        let mut command = cluster.serve();
        command.env("AKRITAS_STORAGE_BACKEND", "postgres").env("AKRITAS_ADDRESS", format!("127.0.0.1:{port}"));
        tokio::task::spawn_blocking(move || Server::start(command))
    };
    let mut replicas = Vec::new();
    for port in &ports {
        replicas.push(Some(start(*port).await.unwrap()));
    }
    let webhooks: Vec<String> =
        ports.iter().map(|port| format!("http://127.0.0.1:{port}/api/v1/alertmanager/webhook")).collect();
    let am = support::prom::Alertmanager::start_fanout(
        &webhooks.iter().map(String::as_str).collect::<Vec<_>>(),
        Some(AM_TOKEN),
    )
    .await;
    let stage = support::prom::MetricSwitch::start("harness_stage", 0.0).await;
    let rules: String = (1..=RULES)
        .map(|k| {
            format!("  - alert: Harness{k}\n    expr: harness_stage >= {k}\n    labels: {{severity: warning}}\n    annotations: {{summary: kill harness}}\n")
        })
        .collect();
    let prometheus = support::prom::Prometheus::start(
        &am.url(),
        Some(&stage.target()),
        &format!("groups:\n- name: harness\n  rules:\n{rules}"),
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..2)
        .map(|first| {
            tokio::spawn(alertmanager_like_load(cluster.http.clone(), webhooks.clone(), first, 40, stop.clone()))
        })
        .collect();
    let urls: Vec<String> = ports.iter().map(|port| format!("http://127.0.0.1:{port}")).collect();
    let talk = tokio::spawn(chats(cluster.http.clone(), urls.clone(), stop.clone(), seed));

    let mut dice = Dice(seed);
    let mut killed_at = Vec::new();
    for n in 0..kills {
        if (n as f64) < RULES as f64 {
            stage.set((n + 1) as f64);
        }
        tokio::time::sleep(Duration::from_millis(300 + dice.below(900))).await;
        let slot = dice.below(3) as usize;
        drop(replicas[slot].take());
        killed_at.push(Instant::now());
        replicas[slot] = Some(start(ports[slot]).await.unwrap());
    }
    stage.set(RULES as f64);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let mut acked = Vec::new();
    for task in load {
        acked.extend(task.await.unwrap().0);
    }
    let (answered, previews) = talk.await.unwrap();
    let live = replicas[0].as_ref().unwrap();

    // Every Prometheus alert is one incident; every job is investigated (one Run that
    // succeeded) and notified once, whichever replicas died meanwhile.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (incidents, jobs) = loop {
        let listed = cluster.get(live, "/api/v1/incidents?limit=1000").await;
        let harness: Vec<String> = listed["incidents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["name"].as_str().is_some_and(|name| name.starts_with("Harness")))
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect();
        let mut jobs = std::collections::BTreeMap::new();
        for incident in listed["incidents"].as_array().unwrap() {
            let detail = cluster.get(live, &format!("/api/v1/incidents/{}", incident["id"].as_str().unwrap())).await;
            for job in detail["jobs"].as_array().unwrap() {
                jobs.insert(job["id"].as_str().unwrap().to_string(), job.clone());
            }
        }
        // Delivered, or given up because its sender died mid-send (never sent twice).
        let settled = |d: &Value| d["status"] == "delivered" || d["error"] == "send_interrupted";
        let done = |job: &Value| {
            job["status"] == "succeeded" && job["deliveries"].as_array().is_some_and(|d| d.iter().all(settled))
        };
        if harness.len() as u64 >= RULES && jobs.values().all(done) {
            break (harness, jobs);
        }
        assert!(
            Instant::now() < deadline,
            "not settled: {} of {RULES} Prometheus alerts are incidents; unsettled jobs: {:?}",
            harness.len(),
            jobs.values().filter(|job| !done(job)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let names: std::collections::BTreeSet<&String> = incidents.iter().collect();
    let duplicated_incidents = incidents.len() - names.len();
    // One Run of each job succeeded; the others are the ones killed replicas left, interrupted.
    let (mut twice_investigated, mut taken_over) = (0, 0);
    for job in jobs.values() {
        let mut succeeded = 0;
        for run in job["runs"].as_array().unwrap() {
            let run = cluster.get(live, &format!("/api/v1/runs/{}", run.as_str().unwrap())).await;
            match run["run"]["status"].as_str() {
                Some("succeeded") => succeeded += 1,
                _ => assert_eq!(run["run"]["error_code"], "interrupted", "{run}"),
            }
        }
        twice_investigated += usize::from(succeeded != 1);
        taken_over += usize::from(job["runs"].as_array().unwrap().len() > 1);
    }
    // Every notification reached the receiver once.
    let received: Vec<String> =
        cluster.sink.received().into_iter().filter(|r| r.path == "/hook").map(|r| r.delivery_id).collect();
    let distinct: std::collections::BTreeSet<&String> = received.iter().collect();
    let notified_twice = received.len() - distinct.len();
    let deliveries: Vec<&Value> = jobs.values().flat_map(|job| job["deliveries"].as_array().unwrap()).collect();
    let interrupted = deliveries.iter().filter(|d| d["error"] == "send_interrupted").count();
    let never_notified = deliveries
        .iter()
        .filter(|d| d["status"] == "delivered" && !distinct.contains(&d["delivery_id"].as_str().unwrap().to_string()))
        .count();
    // Every chat answered is a Run; a follow-up answered is in it.
    let mut chats_lost = 0;
    for (run, followed) in &answered {
        let response =
            cluster.http.get(format!("{}/api/v1/runs/{run}", live.url)).bearer_auth(API_KEY).send().await.unwrap();
        if response.status() != 200 {
            chats_lost += 1;
            continue;
        }
        let run: Value = response.json().await.unwrap();
        let follow_up = run["run"]["events"].as_array().unwrap().iter().any(|e| e["type"] == "follow_up");
        chats_lost += usize::from(*followed && !follow_up);
    }
    // Every preview answered with an approval is kept, still waiting for its one use.
    let mut previews_lost = 0;
    for id in &previews {
        let url = format!("{}/api/v1/change/simulations/{id}", live.url);
        let response = cluster.http.get(url).bearer_auth(API_KEY).send().await.unwrap();
        let body: Value = if response.status() == 200 { response.json().await.unwrap() } else { Value::Null };
        previews_lost += usize::from(body["state"]["status"] != "pending");
    }
    let (lost, twice) = lost_and_twice(&cluster.pg, &acked);
    verify_audit(&cluster.pg);
    let records: u64 = cluster.pg.psql("SELECT count(*) FROM akritas_records").parse().unwrap();
    println!(
        "kill harness: {} Prometheus alerts as {} incidents, {} jobs ({taken_over} taken over from killed replicas), \
         {} deliveries acknowledged, {} chats ({} followed up), {} change previews; notifications: {} delivered once, \
         {interrupted} not sent again after their sender died mid-send",
        RULES,
        incidents.len(),
        jobs.len(),
        acked.len(),
        answered.len(),
        answered.iter().filter(|(_, followed)| *followed).count(),
        previews.len(),
        distinct.len()
    );
    println!(
        "kill harness: {kills} kills survived, {records} records checked, {} lost, {} duplicated",
        lost + chats_lost + never_notified + previews_lost,
        twice + duplicated_incidents + twice_investigated + notified_twice
    );
    assert_eq!((lost, twice), (0, 0), "acknowledged deliveries: each stored once");
    assert_eq!(duplicated_incidents, 0, "one incident per Prometheus alert: {incidents:?}");
    assert_eq!(twice_investigated, 0, "each job has one Run that succeeded");
    assert_eq!((never_notified, notified_twice), (0, 0), "each notification reached the receiver once");
    assert_eq!(chats_lost, 0, "every answered chat and follow-up is kept");
    assert_eq!(previews_lost, 0, "every previewed change is kept, pending");
    assert!(!previews.is_empty(), "previews were answered during the kills");
    assert!(plans.load(Ordering::SeqCst) >= jobs.len());
    drop(prometheus);
}
