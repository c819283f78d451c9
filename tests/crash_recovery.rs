//! Crash recovery under mixed load. The real `akritas serve` (standalone, API
//! key on) takes Alertmanager deliveries (new alerts, re-sent duplicates, resolutions),
//! chats and follow-ups while it investigates every new incident with the scripted model
//! and notifies two webhook receivers. It is SIGKILLed at random points — a seeded
//! schedule, some kills during start-up — `AKRITAS_CRASH_KILLS` times (default 20) and
//! restarted on the same data directory each time, with small journal segments and a
//! snapshot every 100 records so that kills also land while segments are sealed and
//! snapshots written. After the last restart the load
//! stops, the host drains its jobs, and every acknowledged (2xx) request is checked
//! through the API and the journals. What "exactly once" means for each:
//!
//! - alert delivery: its `dlv_` id is in exactly one alert-journal record, with the
//!   outcome the client was told; each alert (fingerprint and state) is accepted exactly
//!   once in the whole journal, every acknowledgement of it names that one event, and the
//!   event is readable and listed once in one incident. A delivery whose answer was lost
//!   is re-sent until acknowledged, as Alertmanager does; the re-send is a duplicate
//!   when the first copy was stored.
//! - job: every incident's job ends succeeded once; the audit holds exactly one succeeded
//!   Run with a result for it (attempts a kill interrupted are failed `interrupted` Runs),
//!   and the job lists every Run made for it: no investigation ran twice.
//! - chat Run: the acknowledged `run_id` starts and finishes once in the audit journal,
//!   succeeded; the model was asked once. A chat whose answer was lost may have left a
//!   Run (finished, never running) — counted as in doubt, never more than were sent.
//! - follow-up: each acknowledged one is one succeeded `follow_up` end on its Run; a Run
//!   has no more of them than follow-ups were acknowledged or left in doubt.
//! - notification (HTTP is at-least-once): the job records one delivery per receiver,
//!   with one delivery id, and it ends delivered; the receiver got that id and no other
//!   for that job. The same id arriving twice is a resend after a crash lost the
//!   receiver's answer — a legitimate retry a receiver drops by `X-Akritas-Delivery`,
//!   counted separately, not a duplicate.
//!
//! Both journals verify at the end: `akritas audit verify` on the audit journal, the
//! hash chain and a strict replay of the alert journal. The test prints one line:
//! kills survived, records checked, lost, duplicated. `e2e/crash-recovery.sh N` runs it
//! with N kills.

use akritas_testkit as support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use akritas::tools::{ToolName, openai_alias};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use support::scripted_llm::{Reply, ScriptedLlm, Step, inconclusive_result, offers};
use support::sink::Sink;
use support::{Server, serve_command};

const API_KEY: &str = "crash-api-key-0123456789abcdef";
const AM_TOKEN: &str = "crash-am-token-0123456789abcdef";
/// The NotificationReceivers, each posting to `/<name>` on the sink.
const RECEIVERS: [&str; 2] = ["hook-a", "hook-b"];
/// Kills when `AKRITAS_CRASH_KILLS` is not set.
const DEFAULT_KILLS: usize = 20;
/// How long the final phase may take to settle before the test gives up.
const SETTLE: Duration = Duration::from_secs(120);

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

// ---------------------------------------------------------------------------------
// The scripted model: plans nothing, answers, submits an inconclusive result. It
// counts planning requests per chat/follow-up token and per alert, so a request the
// host executed twice shows.

#[derive(Default)]
struct ModelCounts {
    /// Planning requests per chat or follow-up token.
    by_token: BTreeMap<u64, usize>,
    /// Planning requests per alert number (investigation attempts reaching the model).
    by_alert: BTreeMap<u64, usize>,
}

/// The number after `prefix` in `text` (its last occurrence).
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let at = text.rfind(prefix)? + prefix.len();
    let digits: String = text[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The text of every message of a chat request (prompts are never journaled, so a
/// token is only in the request that carries it).
fn message_text(request: &Value) -> String {
    let messages = request["messages"].as_array().into_iter().flatten();
    messages.filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n")
}

fn model(counts: Arc<Mutex<ModelCounts>>) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    move |_, request| {
        let reply = if offers(request, &plan) {
            let text = message_text(request);
            let mut counts = counts.lock().unwrap();
            if let Some(token) = number_after(&text, "crash-token-") {
                *counts.by_token.entry(token).or_default() += 1;
            } else if let Some(alert) = number_after(&text, "CrashAlert") {
                *counts.by_alert.entry(alert).or_default() += 1;
            }
            Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))])
        } else if offers(request, &submit) {
            Reply::ToolCalls(vec![("r".into(), submit.clone(), inconclusive_result())])
        } else {
            Reply::Content("Nothing conclusive.".into())
        };
        // A little latency, so kills land inside Runs as well as between them.
        Step::from(reply).with_delay(Duration::from_millis(rand::random_range(0..60)))
    }
}

// ---------------------------------------------------------------------------------
// The host under test.

struct Host {
    port: u16,
    data: PathBuf,
    resources: PathBuf,
    llm: String,
}

impl Host {
    fn command(&self) -> std::process::Command {
        let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
        command
            .env("AKRITAS_ADDRESS", format!("127.0.0.1:{}", self.port))
            .env("AKRITAS_DATA_DIR", &self.data)
            .env("AKRITAS_BASE_URL", &self.llm)
            .env("AKRITAS_API_KEY", API_KEY)
            .env("AKRITAS_RESOURCE_ENV", "CRASH_*")
            .env("CRASH_AM_TOKEN", AM_TOKEN)
            .env("AKRITAS_ALERT_WORKERS", "3")
            .env("AKRITAS_ALERT_JOB_BACKOFF", "1s")
            .env("AKRITAS_ALERT_SOURCE_RATE", "100000")
            .env("AKRITAS_ALERT_PENDING_JOBS_PER_NAMESPACE", "1000")
            .env("AKRITAS_MAX_CONCURRENT_RUNS", "8")
            .env("AKRITAS_NOTIFICATION_TIMEOUT", "5s")
            // Small segments and frequent snapshots, so kills land while segments are
            // sealed and snapshots written, and restarts load snapshots plus a tail.
            .env("AKRITAS_JOURNAL_SEGMENT_BYTES", "65536")
            .env("AKRITAS_SNAPSHOT_RECORDS", "100")
            .arg("--resources")
            .arg(&self.resources);
        command
    }

    async fn start(&self) -> Server {
        let command = self.command();
        tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap()
    }

    fn alert_journal(&self) -> PathBuf {
        self.data.join("alerts/alerts.jsonl")
    }

    fn audit_journal(&self) -> PathBuf {
        self.data.join("audit/akritas.jsonl")
    }
}

fn manifests(dir: &Path, sink: &str) {
    let mut text = "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am, namespace: default}\n\
                    spec: {provider: alertmanager, auth: {bearerToken: {env: CRASH_AM_TOKEN}}}\n"
        .to_string();
    for name in RECEIVERS {
        text += &format!(
            "---\napiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: {name}, namespace: \
             default}}\nspec: {{type: webhook, webhook: {{url: \"{sink}/{name}\"}}}}\n"
        );
    }
    std::fs::write(dir.join("crash.yaml"), text).unwrap();
}

// ---------------------------------------------------------------------------------
// The load: what was sent, what was acknowledged.

/// An alert: its number and whether this copy says it resolved.
type Alert = (u64, bool);

/// An acknowledged alert delivery.
struct AckedDelivery {
    delivery_id: String,
    alerts: Vec<Alert>,
    /// The per-event outcomes of the answer, in order.
    outcomes: Vec<Value>,
}

#[derive(Default)]
struct FollowUps {
    acked: Vec<u64>,
    in_doubt: usize,
}

#[derive(Default)]
struct Ledger {
    deliveries: Vec<AckedDelivery>,
    /// Delivery attempts whose answer was lost (each was re-sent until acknowledged).
    deliveries_in_doubt: usize,
    /// Firing alerts acknowledged, and those whose resolution was acknowledged.
    firing: Vec<u64>,
    resolved: BTreeSet<u64>,
    /// (token, run_id) of acknowledged chats.
    chats: Vec<(u64, String)>,
    chats_in_doubt: usize,
    follow_ups: BTreeMap<String, FollowUps>,
    /// Requests answered with a retryable refusal (503 busy), by route.
    refused: BTreeMap<String, usize>,
}

struct Load {
    base: String,
    http: reqwest::Client,
    stop: AtomicBool,
    ledger: Mutex<Ledger>,
    next_alert: AtomicU64,
    next_token: AtomicU64,
}

enum Answer {
    /// 2xx with its body.
    Acked(Value),
    /// A definite answer that is not an acknowledgement.
    Refused(u16, Value),
    /// Never reached the host (connection refused).
    NotSent,
    /// Sent, but the answer was lost (the host died): it may or may not have been done.
    InDoubt,
}

async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) if error.is_connect() => return Answer::NotSent,
        Err(_) => return Answer::InDoubt,
    };
    let status = response.status();
    match response.bytes().await {
        Ok(body) => {
            let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if status.is_success() { Answer::Acked(value) } else { Answer::Refused(status.as_u16(), value) }
        }
        Err(_) => Answer::InDoubt,
    }
}

fn alert_json((n, resolved): Alert) -> Value {
    let starts = jiff::Timestamp::from_second(1_767_225_600 + i64::try_from(n).unwrap()).unwrap();
    let ends = if resolved {
        starts.checked_add(jiff::SignedDuration::from_secs(60)).unwrap().to_string()
    } else {
        "0001-01-01T00:00:00Z".to_string()
    };
    json!({
        "status": if resolved { "resolved" } else { "firing" },
        "labels": {"alertname": format!("CrashAlert{n}"), "severity": "warning", "instance": format!("node-{n}:9100")},
        "annotations": {"summary": format!("crash harness alert {n}")},
        "startsAt": starts.to_string(), "endsAt": ends, "generatorURL": "",
        "fingerprint": format!("{:016x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
    })
}

fn delivery_json(alerts: &[Alert]) -> Value {
    let status = if alerts.iter().all(|(_, resolved)| *resolved) { "resolved" } else { "firing" };
    json!({
        "receiver": "akritas", "status": status, "alerts": alerts.iter().copied().map(alert_json).collect::<Vec<_>>(),
        "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://alertmanager.invalid",
        "version": "4", "groupKey": "{}:{crash=\"harness\"}", "truncatedAlerts": 0,
    })
}

impl Load {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap()
    }

    fn refused(&self, route: &str, status: u16, body: &Value) {
        assert!(status == 503 || status == 429, "{route} answered {status}: {body}");
        *self.ledger().refused.entry(format!("{route} {status}")).or_default() += 1;
    }

    /// Posts one delivery until it is acknowledged, as Alertmanager retries.
    async fn deliver(&self, alerts: Vec<Alert>) {
        let body = delivery_json(&alerts);
        let url = format!("{}/api/v1/alerts/default/am/webhook", self.base);
        loop {
            match send(self.http.post(&url).bearer_auth(AM_TOKEN).json(&body)).await {
                Answer::Acked(answer) => {
                    let outcomes = answer["events"].as_array().cloned().unwrap_or_default();
                    assert_eq!(outcomes.len(), alerts.len(), "one outcome per alert: {answer}");
                    let delivery_id = answer["delivery_id"].as_str().expect("a delivery id").to_string();
                    let mut ledger = self.ledger();
                    for &(n, resolved) in &alerts {
                        if resolved {
                            ledger.resolved.insert(n);
                        } else if !ledger.firing.contains(&n) {
                            ledger.firing.push(n);
                        }
                    }
                    ledger.deliveries.push(AckedDelivery { delivery_id, alerts, outcomes });
                    return;
                }
                Answer::InDoubt => self.ledger().deliveries_in_doubt += 1,
                Answer::NotSent => {}
                Answer::Refused(status, answer) => self.refused("alert delivery", status, &answer),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn alerts(self: Arc<Self>, mut rng: StdRng) {
        while !self.stopped() {
            let alerts = {
                let ledger = self.ledger();
                let open: Vec<u64> = ledger.firing.iter().copied().filter(|n| !ledger.resolved.contains(n)).collect();
                let roll = rng.random_range(0..100);
                if roll < 15 && !ledger.firing.is_empty() {
                    // A re-sent copy of an alert already acknowledged.
                    let n = ledger.firing[rng.random_range(0..ledger.firing.len())];
                    vec![(n, ledger.resolved.contains(&n) && rng.random_bool(0.5))]
                } else if roll < 30 && !open.is_empty() {
                    vec![(open[rng.random_range(0..open.len())], true)]
                } else {
                    let count = rng.random_range(1..=3);
                    (0..count).map(|_| (self.next_alert.fetch_add(1, Ordering::SeqCst), false)).collect()
                }
            };
            self.deliver(alerts).await;
            tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
        }
    }

    async fn chats(self: Arc<Self>, mut rng: StdRng) {
        let url = format!("{}/api/v1/chat", self.base);
        while !self.stopped() {
            let token = self.next_token.fetch_add(1, Ordering::SeqCst);
            let question = format!("Is the shop healthy? crash-token-{token}.");
            let body = json!({"messages": [{"role": "user", "content": question}]});
            match send(self.http.post(&url).bearer_auth(API_KEY).json(&body)).await {
                Answer::Acked(answer) => {
                    let run = answer["run_id"].as_str().expect("an acknowledged chat names its Run").to_string();
                    self.ledger().chats.push((token, run));
                }
                Answer::InDoubt => self.ledger().chats_in_doubt += 1,
                Answer::NotSent => {}
                Answer::Refused(status, answer) => self.refused("chat", status, &answer),
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(50..300))).await;
        }
    }

    /// One task, so a Run never has two follow-ups at once (a second would be a 409).
    async fn follow_ups(self: Arc<Self>, mut rng: StdRng) {
        while !self.stopped() {
            let run = {
                let ledger = self.ledger();
                (!ledger.chats.is_empty()).then(|| ledger.chats[rng.random_range(0..ledger.chats.len())].1.clone())
            };
            if let Some(run) = run {
                let token = self.next_token.fetch_add(1, Ordering::SeqCst);
                let body = json!({"message": format!("And the database? crash-token-{token}.")});
                let url = format!("{}/api/v1/runs/{run}/chat", self.base);
                match send(self.http.post(&url).bearer_auth(API_KEY).json(&body)).await {
                    Answer::Acked(_) => self.ledger().follow_ups.entry(run).or_default().acked.push(token),
                    Answer::InDoubt => self.ledger().follow_ups.entry(run).or_default().in_doubt += 1,
                    Answer::NotSent => {}
                    Answer::Refused(status, answer) => self.refused("follow-up", status, &answer),
                }
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(100..300))).await;
        }
    }
}

/// Jobs a start completed from a Run that had succeeded just before the kill (the
/// `jobs_recovered` log line).
fn completed_at_start(log: &str) -> u64 {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["fields"]["event"] == "jobs_recovered")
        .filter_map(|line| line["fields"]["completed"].as_u64())
        .sum()
}

// ---------------------------------------------------------------------------------
// What the journals hold.

/// Per Run, from the audit journal.
#[derive(Default, Debug)]
struct AuditRun {
    source: String,
    job_id: Option<String>,
    starts: usize,
    finishes: usize,
    status: String,
    results: usize,
    follow_ups_started: usize,
    follow_ups_succeeded: usize,
}

fn audit_runs(path: &Path) -> BTreeMap<String, AuditRun> {
    let (_, replay) = akritas::journal::read(path).unwrap();
    let mut runs: BTreeMap<String, AuditRun> = BTreeMap::new();
    for record in replay.records {
        let data = &record.data;
        let id = data["run_id"].as_str().or(data["run"]["id"].as_str()).unwrap_or_default().to_string();
        let run = runs.entry(id).or_default();
        match record.kind.as_str() {
            "run_started" => {
                run.starts += 1;
                run.source = data["run"]["source"].as_str().unwrap_or_default().to_string();
                run.job_id = data["run"]["metadata"]["job_id"].as_str().map(str::to_string);
                run.status = "running".into();
            }
            "run_finished" => {
                run.finishes += 1;
                run.status = data["status"].as_str().unwrap_or_default().to_string();
            }
            "investigation_result" => run.results += 1,
            "run_event" if data["event"]["type"] == "follow_up" => match data["event"]["status"].as_str() {
                Some("started") => run.follow_ups_started += 1,
                Some("succeeded") => run.follow_ups_succeeded += 1,
                _ => {}
            },
            _ => {}
        }
    }
    runs
}

/// Per alert-journal delivery record: its id and its (alert, outcome) items.
fn journal_deliveries(path: &Path) -> Vec<(String, Vec<(Alert, Value)>)> {
    let (_, replay) = akritas::journal::read(path).unwrap();
    replay
        .records
        .iter()
        .filter(|r| r.kind == "alerts.delivery")
        .map(|r| {
            let items = r.data["items"].as_array().unwrap().iter().map(|item| {
                let n = number_after(item["event"]["name"].as_str().unwrap(), "CrashAlert").unwrap();
                ((n, item["event"]["state"] == "resolved"), item["outcome"].clone())
            });
            (r.data["delivery_id"].as_str().unwrap().to_string(), items.collect())
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// The checks.

#[derive(Default)]
struct Verdict {
    checked: usize,
    lost: Vec<String>,
    duplicated: Vec<String>,
    /// Other broken promises (an unfinished job, a Run left running, a mismatch).
    wrong: Vec<String>,
}

impl Verdict {
    fn once(&mut self, what: String, count: usize) {
        self.checked += 1;
        match count {
            1 => {}
            0 => self.lost.push(what),
            n => self.duplicated.push(format!("{what} ({n} times)")),
        }
    }
}

async fn api_get(http: &reqwest::Client, base: &str, path: &str) -> (u16, Value) {
    let response = http.get(format!("{base}{path}")).bearer_auth(API_KEY).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Waits until every incident's jobs have finished and notified; returns the details.
async fn settled_incidents(http: &reqwest::Client, base: &str, ids: &BTreeSet<String>) -> BTreeMap<String, Value> {
    let started = Instant::now();
    let mut done = BTreeMap::new();
    loop {
        let waiting: Vec<&String> = ids.iter().filter(|id| !done.contains_key(*id)).collect();
        for id in waiting {
            let (status, detail) = api_get(http, base, &format!("/api/v1/incidents/{id}")).await;
            assert_eq!(status, 200, "incident {id}: {detail}");
            let finished = detail["jobs"].as_array().unwrap().iter().all(|job| {
                matches!(job["status"].as_str(), Some("succeeded" | "failed"))
                    && job["deliveries"].as_array().into_iter().flatten().all(|d| d["status"] != "pending")
            });
            if finished {
                done.insert(id.clone(), detail);
            }
        }
        if done.len() == ids.len() {
            return done;
        }
        assert!(started.elapsed() < SETTLE, "{} incidents still have work after {SETTLE:?}", ids.len() - done.len());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Alert deliveries and events: each acknowledged delivery recorded once as told; each
/// alert accepted once; every acknowledgement of an alert names its one event.
async fn check_deliveries(
    verdict: &mut Verdict,
    ledger: &Ledger,
    journal: &[(String, Vec<(Alert, Value)>)],
    incidents: &BTreeMap<String, Value>,
    api: (&reqwest::Client, &str),
) {
    let mut records: BTreeMap<&str, Vec<&Vec<(Alert, Value)>>> = BTreeMap::new();
    let mut accepted: BTreeMap<Alert, Vec<String>> = BTreeMap::new();
    for (id, items) in journal {
        records.entry(id.as_str()).or_default().push(items);
        for (alert, outcome) in items {
            if outcome["status"] == "accepted" {
                accepted.entry(*alert).or_default().push(outcome["event_id"].as_str().unwrap().to_string());
            }
        }
    }
    let mut told: BTreeMap<Alert, BTreeSet<String>> = BTreeMap::new();
    for delivery in &ledger.deliveries {
        let found = records.get(delivery.delivery_id.as_str()).map_or(&[][..], Vec::as_slice);
        verdict.once(format!("alert delivery {}", delivery.delivery_id), found.len());
        if let Some(items) = found.first() {
            let recorded: Vec<&Value> = items.iter().map(|(_, outcome)| outcome).collect();
            if recorded != delivery.outcomes.iter().collect::<Vec<_>>() {
                verdict.wrong.push(format!(
                    "delivery {} recorded {recorded:?}, answered {:?}",
                    delivery.delivery_id, delivery.outcomes
                ));
            }
        }
        for (alert, outcome) in delivery.alerts.iter().zip(&delivery.outcomes) {
            told.entry(*alert).or_default().insert(outcome["event_id"].as_str().unwrap().to_string());
        }
    }
    // Where each event is listed.
    let mut listed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (incident, detail) in incidents {
        for event in detail["events"].as_array().unwrap() {
            listed.entry(event["id"].as_str().unwrap().to_string()).or_default().push(incident.clone());
        }
    }
    let (http, base) = api;
    for (alert, events) in &told {
        let stored = accepted.get(alert).map_or(&[][..], Vec::as_slice);
        verdict.once(format!("alert {alert:?} accepted"), stored.len());
        if events.len() > 1 || stored.first().is_some_and(|id| !events.contains(id)) {
            verdict
                .duplicated
                .push(format!("alert {alert:?}: acknowledged as events {events:?}, stored as {stored:?}"));
        }
        for event in events {
            let (status, body) = api_get(http, base, &format!("/api/v1/alert-events/{event}")).await;
            if status != 200 || body["id"] != json!(event) {
                verdict.lost.push(format!("event {event} of alert {alert:?}: GET answered {status}"));
            }
            verdict.once(format!("event {event} listed in an incident"), listed.get(event).map_or(0, Vec::len));
        }
        if alert.1 {
            let incident = incidents
                .values()
                .find(|d| d["events"].as_array().unwrap().iter().any(|e| events.contains(e["id"].as_str().unwrap())));
            if incident.is_none_or(|d| d["incident"]["state"] != "resolved") {
                verdict
                    .wrong
                    .push(format!("alert {alert:?}: its resolution was acknowledged but its incident is not resolved"));
            }
        }
    }
}

/// Jobs: each listed once, succeeded, with exactly one succeeded Run that holds a result,
/// and every Run of the job linked to it. Notifications: one delivery per receiver,
/// delivered, seen by the receiver under that id and no other.
fn check_jobs(
    verdict: &mut Verdict,
    incidents: &BTreeMap<String, Value>,
    runs: &BTreeMap<String, AuditRun>,
    received: &[support::sink::Received],
) -> (usize, usize) {
    let mut jobs: BTreeMap<String, Value> = BTreeMap::new();
    // (incident, job) -> times the incident lists the job.
    let mut listed: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (incident, detail) in incidents {
        for job in detail["jobs"].as_array().unwrap() {
            let id = job["id"].as_str().unwrap().to_string();
            *listed.entry((incident.clone(), id.clone())).or_default() += 1;
            jobs.insert(id, job.clone());
        }
    }
    let mut runs_of: BTreeMap<&str, Vec<(&String, &AuditRun)>> = BTreeMap::new();
    for (id, run) in runs {
        if let Some(job) = &run.job_id {
            runs_of.entry(job.as_str()).or_default().push((id, run));
        }
    }
    // Receiver side: delivery ids seen per (receiver, incident), and how often each.
    // Resolve notices (`incident.resolved`) are not a job's: each receiver gets at most one
    // per incident (re-sent only under the same delivery id).
    let mut seen: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut notices: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut copies: BTreeMap<String, usize> = BTreeMap::new();
    for r in received {
        let incident = r.body["incident"]["incident_id"].as_str().unwrap_or_default().to_string();
        let key = (r.path.trim_start_matches('/').to_string(), incident);
        let into = if r.body["event"] == "incident.resolved" { &mut notices } else { &mut seen };
        into.entry(key).or_default().insert(r.delivery_id.clone());
        *copies.entry(r.delivery_id.clone()).or_default() += 1;
    }
    for ((receiver, incident), ids) in &notices {
        if ids.len() > 1 {
            verdict
                .duplicated
                .push(format!("{receiver} got {} resolve notices of incident {incident}: {ids:?}", ids.len()));
        }
    }
    let notice_ids: BTreeSet<&String> = notices.values().flatten().collect();
    let mut recorded_ids = BTreeSet::new();
    let mut interrupted = 0;
    for (id, job) in &jobs {
        let incident = job["incident_id"].as_str().unwrap();
        let times = listed.get(&(incident.to_string(), id.clone())).copied().unwrap_or(0);
        verdict.once(format!("job {id} listed by incident {incident}"), times);
        if job["status"] != "succeeded" {
            verdict.wrong.push(format!("job {id} ended {}: {}", job["status"], job["error"]));
        }
        let made = runs_of.get(id.as_str()).map_or(&[][..], Vec::as_slice);
        let succeeded: Vec<&String> =
            made.iter().filter(|(_, r)| r.status == "succeeded" && r.results == 1).map(|(id, _)| *id).collect();
        verdict.once(format!("investigation of job {id}"), succeeded.len());
        interrupted += made.len().saturating_sub(1);
        if succeeded.len() == 1 && job["run_id"] != json!(succeeded[0]) {
            verdict
                .wrong
                .push(format!("job {id} names Run {} but Run {} succeeded for it", job["run_id"], succeeded[0]));
        }
        let linked: BTreeSet<&str> = job["runs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let made_ids: BTreeSet<&str> = made.iter().map(|(id, _)| id.as_str()).collect();
        if linked != made_ids {
            verdict.wrong.push(format!("job {id} lists Runs {linked:?}; the audit has {made_ids:?} for it"));
        }
        let deliveries = job["deliveries"].as_array().cloned().unwrap_or_default();
        for receiver in RECEIVERS {
            let mine: Vec<&Value> =
                deliveries.iter().filter(|d| d["receiver"] == json!(format!("default/{receiver}"))).collect();
            verdict.once(format!("notification of job {id} to {receiver}"), mine.len());
            let Some(delivery) = mine.first() else { continue };
            let delivery_id = delivery["delivery_id"].as_str().unwrap().to_string();
            recorded_ids.insert(delivery_id.clone());
            if delivery["status"] != "delivered" {
                verdict.wrong.push(format!("notification of job {id} to {receiver}: {delivery}"));
            }
            let got = seen.get(&(receiver.to_string(), incident.to_string())).cloned().unwrap_or_default();
            if !got.contains(&delivery_id) {
                verdict.lost.push(format!("notification {delivery_id} of job {id} never reached {receiver}"));
            }
            if got.iter().any(|other| *other != delivery_id) {
                verdict
                    .duplicated
                    .push(format!("job {id}: {receiver} got delivery ids {got:?}, the job has {delivery_id}"));
            }
        }
    }
    for r in received.iter().filter(|r| !recorded_ids.contains(&r.delivery_id) && !notice_ids.contains(&r.delivery_id))
    {
        verdict.duplicated.push(format!("{} got delivery {} that no job records", r.path, r.delivery_id));
    }
    let resent = copies.values().map(|n| n - 1).sum();
    (interrupted, resent)
}

/// Chats and follow-ups against the audit journal and the model's counts.
async fn check_runs(
    verdict: &mut Verdict,
    ledger: &Ledger,
    runs: &BTreeMap<String, AuditRun>,
    model: &ModelCounts,
    api: (&reqwest::Client, &str),
) {
    let (http, base) = api;
    let mut acked = BTreeSet::new();
    for (token, id) in &ledger.chats {
        acked.insert(id.clone());
        let run = runs.get(id);
        verdict.once(format!("chat Run {id} started"), run.map_or(0, |r| r.starts));
        verdict.once(format!("chat Run {id} finished"), run.map_or(0, |r| r.finishes));
        verdict.once(format!("chat {token} executed"), model.by_token.get(token).copied().unwrap_or(0));
        if run.is_some_and(|r| r.status != "succeeded" || r.source != "chat") {
            verdict.wrong.push(format!("chat Run {id}: {:?}", run));
        }
        let (status, body) = api_get(http, base, &format!("/api/v1/runs/{id}")).await;
        if status != 200 || body["run"]["status"] != "succeeded" {
            verdict.lost.push(format!("chat Run {id}: GET answered {status}"));
        }
    }
    let chat_runs = runs.values().filter(|r| r.source == "chat" && r.starts > 0).count();
    let orphans = chat_runs.saturating_sub(acked.len());
    if orphans > ledger.chats_in_doubt {
        verdict
            .duplicated
            .push(format!("{orphans} chat Runs nobody was told of, {} chats in doubt", ledger.chats_in_doubt));
    }
    for (id, run) in runs {
        if run.status == "running" {
            verdict.wrong.push(format!("Run {id} is still running after the host drained"));
        }
    }
    for (id, follow_ups) in &ledger.follow_ups {
        let run = runs.get(id);
        let succeeded = run.map_or(0, |r| r.follow_ups_succeeded);
        let (least, most) = (follow_ups.acked.len(), follow_ups.acked.len() + follow_ups.in_doubt);
        verdict.checked += follow_ups.acked.len();
        if succeeded < least {
            verdict.lost.push(format!("Run {id}: {least} follow-ups acknowledged, {succeeded} recorded"));
        }
        if succeeded > most || run.is_some_and(|r| r.follow_ups_started > most) {
            verdict.duplicated.push(format!("Run {id}: {most} follow-ups sent, {:?} recorded", run));
        }
        for token in &follow_ups.acked {
            verdict.once(format!("follow-up {token} executed"), model.by_token.get(token).copied().unwrap_or(0));
        }
    }
    for (token, count) in &model.by_token {
        if *count > 1 {
            verdict.duplicated.push(format!("the host executed request crash-token-{token} {count} times"));
        }
    }
}

// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_request_survives_sigkill_exactly_once() {
    let kills: usize = std::env::var("AKRITAS_CRASH_KILLS").ok().map_or(DEFAULT_KILLS, |v| v.parse().unwrap());
    let seed: u64 = std::env::var("AKRITAS_CRASH_SEED").ok().map_or_else(rand::random, |v| v.parse().unwrap());
    eprintln!("crash-recovery: seed {seed} (AKRITAS_CRASH_SEED={seed} repeats the schedule), {kills} kills");
    let started = Instant::now();
    akritas::install_crypto_provider();
    let mut rng = StdRng::seed_from_u64(seed);

    let counts = Arc::new(Mutex::new(ModelCounts::default()));
    let llm = ScriptedLlm::start_with(model(counts.clone())).await;
    llm.set_recording(false);
    let sink = Sink::start(Duration::from_millis(80)).await;
    let dir = tempfile::tempdir().unwrap();
    let host = Host {
        port: support::free_port(),
        data: dir.path().join("data"),
        resources: dir.path().join("resources"),
        llm: llm.url.clone(),
    };
    std::fs::create_dir_all(&host.resources).unwrap();
    manifests(&host.resources, &sink.url);

    let load = Arc::new(Load {
        base: format!("http://127.0.0.1:{}", host.port),
        // No pooled connections: a request on a connection the last process held would
        // fail after sending nothing, and look like a request in doubt.
        http: reqwest::Client::builder().pool_max_idle_per_host(0).timeout(Duration::from_secs(30)).build().unwrap(),
        stop: AtomicBool::new(false),
        ledger: Mutex::new(Ledger::default()),
        next_alert: AtomicU64::new(1),
        next_token: AtomicU64::new(1),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..2 {
        tasks.spawn(load.clone().alerts(StdRng::seed_from_u64(seed ^ (1 + task))));
        tasks.spawn(load.clone().chats(StdRng::seed_from_u64(seed ^ (11 + task))));
    }
    tasks.spawn(load.clone().follow_ups(StdRng::seed_from_u64(seed ^ 21)));

    // Kill, restart on the same data directory, repeat.
    let (mut during_start, mut completed) = (0, 0);
    for _ in 0..kills {
        if rng.random_bool(0.15) {
            let starting = Server::spawn(host.command());
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
            completed += completed_at_start(&starting.log_text());
            drop(starting);
            during_start += 1;
        } else {
            let server = host.start().await;
            tokio::time::sleep(Duration::from_millis(rng.random_range(300..2000))).await;
            completed += completed_at_start(&server.log_text());
            drop(server);
        }
    }

    // The last start: the load stops, what was in doubt is re-sent, the jobs drain.
    let server = host.start().await;
    load.stop.store(true, Ordering::SeqCst);
    tokio::time::timeout(SETTLE, async {
        while let Some(done) = tasks.join_next().await {
            if let Err(error) = done {
                std::panic::resume_unwind(error.into_panic());
            }
        }
    })
    .await
    .expect("the load stops once its last requests are acknowledged");
    let ledger = std::mem::take(&mut *load.ledger());
    let incident_ids: BTreeSet<String> = ledger
        .deliveries
        .iter()
        .flat_map(|d| d.outcomes.iter().map(|o| o["incident_id"].as_str().unwrap().to_string()))
        .collect();
    let incidents = settled_incidents(&load.http, &load.base, &incident_ids).await;
    let base = server.url.clone();

    let mut verdict = Verdict::default();
    let runs = audit_runs(&host.audit_journal());
    let journal = journal_deliveries(&host.alert_journal());
    check_deliveries(&mut verdict, &ledger, &journal, &incidents, (&load.http, &base)).await;
    let (interrupted, resent) = check_jobs(&mut verdict, &incidents, &runs, &sink.received());
    let model_counts = std::mem::take(&mut *counts.lock().unwrap());
    check_runs(&mut verdict, &ledger, &runs, &model_counts, (&load.http, &base)).await;

    completed += completed_at_start(&server.log_text());
    // Both journals verify once the host has stopped.
    assert_eq!(server.terminate(), Some(0), "the last process stops cleanly");
    let mut verify = std::process::Command::new(env!("CARGO_BIN_EXE_akritas"));
    verify.args(["audit", "verify"]).arg(host.audit_journal());
    let (code, output) = support::run_to_end(verify);
    assert_eq!(code, 0, "akritas audit verify: {output}");
    let report = akritas::journal::verify(&host.alert_journal()).expect("the alert journal's chain verifies");
    assert!(report.torn_tail.is_none(), "a clean stop leaves no torn record");
    // A copy of the journal's segments and snapshot replays the same.
    let copies = dir.path().join("copy");
    std::fs::create_dir_all(&copies).unwrap();
    let journal_name = host.alert_journal().file_name().unwrap().to_string_lossy().into_owned();
    let mut copied = Vec::new();
    for entry in std::fs::read_dir(host.alert_journal().parent().unwrap()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with(&journal_name) && !name.ends_with(".lock") {
            std::fs::copy(host.alert_journal().with_file_name(&name), copies.join(&name)).unwrap();
            copied.push(name);
        }
    }
    assert!(copied.iter().any(|n| n.ends_with(".snapshot")), "snapshots were written: {copied:?}");
    assert!(copied.iter().filter(|n| n[journal_name.len()..].starts_with(".0")).count() >= 1, "{copied:?}");
    let copy = copies.join(&journal_name);
    let replayed = akritas::alerts::store::AlertStore::open(&copy).expect("the alert journal replays strictly");
    let (jobs, _) = replayed.tallies();
    let total: u64 = jobs.values().sum();
    assert_eq!(total as usize, incidents.values().map(|d| d["jobs"].as_array().unwrap().len()).sum::<usize>());
    assert_eq!((jobs["pending"], jobs["running"]), (0, 0), "the replayed journal has no unfinished job");

    let most_attempts = model_counts.by_alert.values().max().copied().unwrap_or(0);
    eprintln!(
        "crash-recovery: traffic: {} deliveries acknowledged ({} in doubt, re-sent), {} chats ({} in doubt), {} \
         follow-ups ({} in doubt), {} incidents; refused and retried: {:?}; {interrupted} investigation attempts \
         interrupted and resumed (at most {most_attempts} model plans for one alert); {completed} jobs completed \
         at start from a Run that had succeeded before the kill; {resent} notifications re-sent under their \
         delivery id after a lost answer",
        ledger.deliveries.len(),
        ledger.deliveries_in_doubt,
        ledger.chats.len(),
        ledger.chats_in_doubt,
        ledger.follow_ups.values().map(|f| f.acked.len()).sum::<usize>(),
        ledger.follow_ups.values().map(|f| f.in_doubt).sum::<usize>(),
        incidents.len(),
        ledger.refused,
    );
    for problem in verdict
        .lost
        .iter()
        .map(|p| ("lost", p))
        .chain(verdict.duplicated.iter().map(|p| ("duplicated", p)))
        .chain(verdict.wrong.iter().map(|p| ("wrong", p)))
    {
        eprintln!("crash-recovery: {}: {}", problem.0, problem.1);
    }
    // Written to the stderr handle, not through `eprintln!`, so `cargo test` shows the
    // line without `--nocapture` (the harness captures only the print macros).
    let line = format!(
        "crash-recovery: {kills} kills survived ({during_start} during start-up), {} records checked, {} lost, {} \
         duplicated, seed {seed}, {:.0?}\n",
        verdict.checked,
        verdict.lost.len(),
        verdict.duplicated.len(),
        started.elapsed()
    );
    std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes()).unwrap();
    assert!(
        verdict.lost.is_empty() && verdict.duplicated.is_empty() && verdict.wrong.is_empty(),
        "acknowledged work was lost, duplicated or left wrong (above)"
    );
    assert!(!ledger.deliveries.is_empty() && !ledger.chats.is_empty(), "the load reached the host");
}
