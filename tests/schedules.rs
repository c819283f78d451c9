//! Scheduled checks in process, on a clock the tests move: ticks fire at their instants
//! (time zones and DST included), `onChange` tells receivers only what changed, `Forbid`
//! skips and `Replace` cancels, a restart between the journaled tick and its Run starts
//! that Run once, a leader change does not run a tick twice, and the cost guard skips
//! with a reason and a metric.

use akritas_testkit as support;

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use akritas::audit::{AuditLog, RunRecord, RunStatus};
use akritas::catalog::secrets::EnvSecrets;
use akritas::catalog::status::StatusBoard;
use akritas::journal::JournalOptions;
use akritas::resources::run_schedule::RunScheduleStatus;
use akritas::schedules::store::Entry;
use akritas::schedules::{Clock, ManualClock, ScheduleStore, Scheduler, SchedulerParts};
use jiff::Timestamp;
use serde_json::{Value, json};
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use tokio_util::sync::CancellationToken;

const SLACK_TOKEN: &str = "xoxb-schedules-bot-token";

/// Results the model submits, one per Run (healthy when none is left), and how long its
/// answer takes.
#[derive(Clone, Default)]
struct Model {
    results: Arc<Mutex<VecDeque<Value>>>,
    delay_ms: Arc<AtomicU64>,
    /// Answers served with a delay (a Run in the middle of its answer).
    slow: Arc<AtomicU64>,
}

fn healthy() -> Value {
    json!({"finding_status": "inconclusive", "actionability": "no_action", "confidence": "high",
           "summary": "Nothing needs a person", "evidence": ["tool-call:call-1"], "production_writes": 0})
}

fn finding(status: &str) -> Value {
    json!({"finding_status": status, "actionability": "requires_human", "confidence": "high",
           "summary": "A query has held db-7 for 30 minutes", "evidence": ["tool-call:call-1 \"1820\""],
           "recommended_actions": ["cancel query 4242 after review"], "production_writes": 0})
}

impl Model {
    async fn start(&self) -> ScriptedLlm {
        let alias = |name: &str| akritas::tools::openai_alias(&akritas::tools::ToolName::try_from(name).unwrap());
        let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
        let model = self.clone();
        ScriptedLlm::start_with(move |_, request| {
            if offers(request, &plan) {
                Step::from(Reply::ToolCalls(vec![(
                    "p".into(),
                    plan.clone(),
                    json!({"checks": [{"step": "Read database activity", "tool": "postgres.activity",
                                       "arguments": {"host": "db-7"}, "reason": "the check names db-7"}], "gaps": []}),
                )]))
            } else if offers(request, &submit) {
                let result = model.results.lock().unwrap().pop_front().unwrap_or_else(healthy);
                Step::from(Reply::ToolCalls(vec![("r".into(), submit.clone(), result)]))
            } else {
                let delay = Duration::from_millis(model.delay_ms.load(Ordering::SeqCst));
                if !delay.is_zero() {
                    model.slow.fetch_add(1, Ordering::SeqCst);
                }
                Step::from(Reply::Content("db-7 looked at.".into())).with_delay(delay)
            }
        })
        .await
    }
}

/// A webhook receiver stand-in keeping every body.
#[derive(Clone, Default)]
struct Hook {
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Hook {
    async fn start() -> (Hook, String) {
        let hook = Hook::default();
        let bodies = hook.bodies.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let bodies = bodies.clone();
                async move {
                    bodies.lock().unwrap().push(body);
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (hook, url)
    }

    fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn schedule(name: &str, cron: &str, extra: &str) -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {{name: {name}, namespace: ops}}\n\
         spec:\n  schedule: \"{cron}\"\n  prompt: Is db-7 healthy?\n  receivers: [hook]\n{extra}"
    )
}

struct Rig {
    store: ScheduleStore,
    audit: Arc<AuditLog>,
    clock: Arc<ManualClock>,
    board: StatusBoard,
    parts: Box<dyn Fn(ScheduleStore) -> SchedulerParts + Send + Sync>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    _llm: ScriptedLlm,
}

impl Rig {
    async fn new(model: &Model, hook_url: &str, schedules: &[String], start: &str, daily_tokens: u64) -> Rig {
        let receiver = format!(
            "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: hook, namespace: ops}}\n\
             spec: {{type: webhook, webhook: {{url: \"{hook_url}\"}}}}\n"
        );
        Rig::with_receivers(model, &receiver, schedules, start, daily_tokens).await
    }

    /// A rig whose receivers are the manifests `receivers` (the secret `SLACK_TOKEN` is
    /// [`SLACK_TOKEN`]).
    async fn with_receivers(
        model: &Model,
        receivers: &str,
        schedules: &[String],
        start: &str,
        daily_tokens: u64,
    ) -> Rig {
        let (data, manifests) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(manifests.path().join("receiver.yaml"), receivers).unwrap();
        std::fs::write(manifests.path().join("schedules.yaml"), schedules.join("---\n")).unwrap();
        let catalog = host::catalog_from(manifests.path());
        let llm = model.start().await;
        let (tools, _) = host::standard_tools();
        let audit = Arc::new(AuditLog::open(&data.path().join("audit.jsonl")).unwrap());
        let engine = Arc::new(host::engine(&llm, host::settings(), tools, catalog.clone(), Some(audit.clone()), None));
        let store = ScheduleStore::open(&data.path().join("schedules.jsonl"), JournalOptions::default(), 100).unwrap();
        let clock = Arc::new(ManualClock::new(at(start)));
        let board = StatusBoard::default();
        let (shared_clock, shared_board) = (clock.clone(), board.clone());
        let parts = Box::new(move |store| SchedulerParts {
            store,
            engine: engine.clone(),
            catalog: catalog.clone(),
            secrets: Arc::new(EnvSecrets::with_lookup(|name: &str| {
                (name == "SLACK_TOKEN").then(|| SLACK_TOKEN.into())
            })),
            board: shared_board.clone(),
            clock: shared_clock.clone(),
            settings: support::host::scheduler_settings(daily_tokens, 4, 4),
        });
        Rig { store, audit, clock, board, parts, _dirs: (data, manifests), _llm: llm }
    }

    /// A scheduler (a leader) on this rig's journal, running until the token is cancelled.
    fn lead(&self) -> CancellationToken {
        let cancel = CancellationToken::new();
        let scheduler = Arc::new(Scheduler::new((self.parts)(self.store.clone())).unwrap());
        tokio::spawn(scheduler.run(cancel.clone()));
        cancel
    }

    /// Waits until the scheduler has seen `name` (its ticks count from then).
    async fn seen(&self, name: &str) {
        let key = format!("ops/{name}");
        support::wait_for("the schedule seen", Duration::from_secs(10), || async { self.store.book(&key) }).await;
    }

    /// Moves the clock to `to` and waits until the tick at `tick` of `name` has ended.
    async fn tick(&self, name: &str, to: &str, tick: &str) -> RunScheduleStatus {
        self.clock.set(at(to));
        let key = format!("ops/{name}");
        support::wait_for(&format!("the end of {key}'s tick at {tick}"), Duration::from_secs(30), || async {
            let book = self.store.book(&key)?;
            (book.result.as_ref()?.scheduled_time == at(tick).to_string() && book.running.is_none()).then_some(())
        })
        .await;
        // The status board is published after the store records the tick: wait for the status
        // of this tick, not whatever the board held before.
        let key = akritas::catalog::ObjectKey {
            kind: akritas::resources::Kind::RunSchedule,
            namespace: "ops".into(),
            name: name.into(),
        };
        let scheduled = at(tick).to_string();
        support::wait_for(&format!("the status of {name}'s tick at {tick}"), Duration::from_secs(10), || async {
            let status: RunScheduleStatus = self.board.facts_of(&key)?;
            (status.last_result.as_ref()?.scheduled_time == scheduled).then_some(status)
        })
        .await
    }

    async fn status(&self, name: &str) -> RunScheduleStatus {
        let key = akritas::catalog::ObjectKey {
            kind: akritas::resources::Kind::RunSchedule,
            namespace: "ops".into(),
            name: name.into(),
        };
        support::wait_for("the status", Duration::from_secs(10), || async { self.board.facts_of(&key) }).await
    }

    async fn runs_of(&self, name: &str, tick: &str) -> Vec<RunRecord> {
        let id = format!("schedule:ops/{name}@{}", at(tick));
        self.audit.runs_of_jobs(&BTreeSet::from([id.as_str()])).await.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_change_tells_the_first_finding_and_the_return_to_healthy_only() {
    let model = Model::default();
    model.results.lock().unwrap().extend([healthy(), finding("confirmed"), finding("confirmed"), healthy()]);
    let (hook, url) = Hook::start().await;
    let rig = Rig::new(&model, &url, &[schedule("db", "* * * * *", "")], "2026-12-06T07:59:30Z", u64::MAX).await;
    let _leader = rig.lead();
    rig.seen("db").await;
    rig.clock.set(at("2026-12-06T07:59:59Z"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rig.runs_of("db", "2026-12-06T08:00:00Z").await.is_empty(), "nothing before its instant");
    let mut states = Vec::new();
    for minute in 0..4 {
        let tick = format!("2026-12-06T08:0{minute}:00Z");
        let status = rig.tick("db", &format!("2026-12-06T08:0{minute}:01Z"), &tick).await;
        let result = status.last_result.unwrap();
        states.push((result.finding_status.unwrap(), result.notified));
        assert_eq!(rig.runs_of("db", &tick).await.len(), 1, "one Run per tick");
    }
    assert_eq!(
        states,
        [("healthy".into(), false), ("confirmed".into(), true), ("confirmed".into(), false), ("healthy".into(), true)]
    );
    let bodies = hook.bodies();
    assert_eq!(bodies.len(), 2, "{bodies:#?}");
    assert_eq!(bodies[0]["event"], "schedule.checked");
    assert_eq!(bodies[0]["check"]["changes"], json!(["first finding: confirmed"]));
    assert_eq!(bodies[0]["check"]["evidence"], json!(["1820"]), "the verified value");
    assert_eq!(bodies[1]["check"]["changes"], json!(["back to healthy"]));
    let status = rig.status("db").await;
    assert_eq!(status.next_schedule_time.as_deref(), Some("2026-12-06T08:04:00Z"));
    assert_eq!(status.recent_runs.len(), 4);
    let run = &rig.runs_of("db", "2026-12-06T08:01:00Z").await[0];
    assert_eq!((run.source.as_str(), run.namespace.as_str(), run.status), ("schedule", "ops", RunStatus::Succeeded));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_in_a_dst_gap_fires_once_when_the_clocks_jump() {
    let model = Model::default();
    let (_hook, url) = Hook::start().await;
    let spec = schedule("night", "30 2 * * *", "  timeZone: America/New_York\n  notify: always\n");
    let rig = Rig::new(&model, &url, &[spec], "2026-03-08T06:50:00Z", u64::MAX).await;
    let _leader = rig.lead();
    rig.seen("night").await;
    // 02:30 does not exist on 2026-03-08 in New York: 01:59:59 EST is followed by 03:00 EDT.
    rig.clock.set(at("2026-03-08T06:59:59Z"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rig.store.book("ops/night").unwrap().running.is_none());
    let status = rig.tick("night", "2026-03-08T07:00:00Z", "2026-03-08T07:00:00Z").await;
    assert_eq!(status.next_schedule_time.as_deref(), Some("2026-03-09T06:30:00Z"), "02:30 EDT the next day");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbid_skips_a_tick_while_its_run_runs_and_replace_cancels_it() {
    let model = Model::default();
    let (_hook, url) = Hook::start().await;
    let schedules =
        [schedule("forbid", "* * * * *", ""), schedule("replace", "* * * * *", "  concurrencyPolicy: Replace\n")];
    let rig = Rig::new(&model, &url, &schedules, "2026-12-06T07:59:30Z", u64::MAX).await;
    let _leader = rig.lead();
    rig.seen("forbid").await;
    rig.seen("replace").await;
    model.delay_ms.store(4_000, Ordering::SeqCst);
    rig.clock.set(at("2026-12-06T08:00:01Z"));
    support::wait_for("both 08:00 Runs answering", Duration::from_secs(10), || async {
        (model.slow.load(Ordering::SeqCst) == 2).then_some(())
    })
    .await;
    model.delay_ms.store(0, Ordering::SeqCst);
    let replaced = rig.tick("replace", "2026-12-06T08:01:01Z", "2026-12-06T08:01:00Z").await;
    assert_eq!(replaced.last_result.unwrap().outcome, "Succeeded");
    let first = &rig.runs_of("replace", "2026-12-06T08:00:00Z").await[0];
    assert_eq!((first.status, first.error_code.as_deref()), (RunStatus::Failed, Some("replaced")), "{first:?}");
    let forbid = rig.tick("forbid", "2026-12-06T08:01:01Z", "2026-12-06T08:00:00Z").await;
    assert_eq!(forbid.skipped_ticks, 1);
    assert_eq!(forbid.last_skipped.unwrap().reason, "ConcurrencyForbid");
    assert!(rig.runs_of("forbid", "2026-12-06T08:01:00Z").await.is_empty(), "the 08:01 tick did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_between_the_journaled_tick_and_its_run_starts_that_run_once() {
    let model = Model::default();
    let (_hook, url) = Hook::start().await;
    let rig = Rig::new(&model, &url, &[schedule("db", "0 * * * *", "")], "2026-12-06T08:00:20Z", u64::MAX).await;
    // What a process wrote before it stopped: the schedule seen, the 08:00 tick claimed.
    let key = "ops/db";
    rig.store.record(key, Entry::Seen { uid: String::new(), at: at("2026-12-06T07:30:00Z") }).await.unwrap();
    let claim = Entry::Claimed {
        scheduled: at("2026-12-06T08:00:00Z"),
        at: at("2026-12-06T08:00:00Z"),
        namespace: "ops".into(),
        tokens: 1,
        requested_by: None,
    };
    rig.store.record(key, claim).await.unwrap();
    let first = rig.lead();
    let status = rig.tick("db", "2026-12-06T08:00:30Z", "2026-12-06T08:00:00Z").await;
    assert_eq!(status.last_result.unwrap().outcome, "Succeeded");
    first.cancel();
    // A second restart finds the tick done: no second Run.
    let _second = rig.lead();
    rig.clock.set(at("2026-12-06T08:00:40Z"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rig.runs_of("db", "2026-12-06T08:00:00Z").await.len(), 1);
}

/// Two leaders on one journal see the 08:00 tick; one claims it, its Run is under way when
/// both lose leadership (the Run is closed as interrupted), and a third leader takes over at
/// `takes_over`. Returns the rig and the tick's Runs once the third resolved it.
async fn leader_change(deadline: u32, takes_over: &str) -> (Rig, Vec<RunRecord>) {
    let model = Model::default();
    let (_hook, url) = Hook::start().await;
    let extra = format!("  startingDeadlineSeconds: {deadline}\n");
    let rig = Rig::new(&model, &url, &[schedule("db", "* * * * *", &extra)], "2026-12-06T07:59:30Z", u64::MAX).await;
    // Two replicas on one journal see the tick at the same time: one claims it.
    let (a, b) = (rig.lead(), rig.lead());
    rig.seen("db").await;
    model.delay_ms.store(10_000, Ordering::SeqCst);
    rig.clock.set(at("2026-12-06T08:00:01Z"));
    support::wait_for("the 08:00 Run answering", Duration::from_secs(10), || async {
        (model.slow.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    a.cancel();
    b.cancel();
    support::wait_for("the interrupted Run closed", Duration::from_secs(10), || async {
        let runs = rig.runs_of("db", "2026-12-06T08:00:00Z").await;
        runs.iter().all(|r| r.status != RunStatus::Running).then_some(())
    })
    .await;
    model.delay_ms.store(0, Ordering::SeqCst);
    rig.clock.set(at(takes_over));
    rig.lead();
    support::wait_for("the tick resolved", Duration::from_secs(10), || async {
        rig.store.book("ops/db").filter(|b| b.running.is_none())
    })
    .await;
    let runs = rig.runs_of("db", "2026-12-06T08:00:00Z").await;
    (rig, runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_within_the_deadline_runs_the_interrupted_tick_to_its_end_once() {
    let (rig, runs) = leader_change(300, "2026-12-06T08:00:02Z").await;
    let outcomes: Vec<(RunStatus, Option<&str>)> = runs.iter().map(|r| (r.status, r.error_code.as_deref())).collect();
    assert_eq!(outcomes, [(RunStatus::Failed, Some("interrupted")), (RunStatus::Succeeded, None)], "never two results");
    let status = rig.status("db").await;
    assert_eq!(status.last_result.as_ref().map(|r| r.outcome.as_str()), Some("Succeeded"));
    assert_eq!(status.recent_runs, [runs[1].id.to_string()]);
    let next = rig.tick("db", "2026-12-06T08:01:01Z", "2026-12-06T08:01:00Z").await;
    assert_eq!(next.last_result.unwrap().outcome, "Succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_past_the_deadline_ends_the_tick_interrupted_without_running_it_again() {
    let (rig, runs) = leader_change(1, "2026-12-06T08:00:05Z").await;
    assert_eq!(runs.len(), 1, "not run again past its deadline");
    let interrupted = rig.status("db").await;
    assert_eq!(interrupted.last_result.map(|r| r.outcome).as_deref(), Some("Interrupted"));
    assert_eq!(interrupted.consecutive_failures, 0, "an interruption is not a failure");
    let next = rig.tick("db", "2026-12-06T08:01:00Z", "2026-12-06T08:01:00Z").await;
    assert_eq!(next.last_result.unwrap().outcome, "Succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_guard_skips_a_tick_with_a_reason_and_a_metric() {
    let model = Model::default();
    let (_hook, url) = Hook::start().await;
    // One Run may use 12 × 40,000 + 16,384 tokens: two fit in a day of 1,000,000.
    let rig = Rig::new(&model, &url, &[schedule("cost", "0 * * * *", "")], "2026-12-06T07:59:30Z", 1_000_000).await;
    let _leader = rig.lead();
    rig.seen("cost").await;
    rig.tick("cost", "2026-12-06T08:00:01Z", "2026-12-06T08:00:00Z").await;
    rig.tick("cost", "2026-12-06T09:00:01Z", "2026-12-06T09:00:00Z").await;
    rig.clock.set(at("2026-12-06T10:00:01Z"));
    let skipped = support::wait_for("the 10:00 tick skipped", Duration::from_secs(10), || async {
        let status = rig.status("cost").await;
        status.last_skipped.filter(|s| s.scheduled_time == "2026-12-06T10:00:00Z")
    })
    .await;
    assert_eq!(skipped.reason, "CostCapReached");
    assert!(skipped.message.contains("reserved 992768 of the 1000000 tokens"), "{}", skipped.message);
    assert!(rig.runs_of("cost", "2026-12-06T10:00:00Z").await.is_empty());
    let mut metrics = String::new();
    akritas::telemetry::render(&mut metrics);
    assert!(
        metrics.contains("akritas_schedule_ticks_skipped_total{namespace=\"ops\",reason=\"CostCapReached\"}"),
        "{metrics}"
    );
    // A new day (UTC) has its own budget.
    rig.tick("cost", "2026-12-07T00:00:01Z", "2026-12-07T00:00:00Z").await;
    assert!(rig.clock.now() >= at("2026-12-07T00:00:00Z"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_notice_of_a_schedule_goes_to_its_own_thread() {
    let slack = support::slack::SlackStandIn::start(SLACK_TOKEN, "xapp-1-unused", "unused-signing-secret").await;
    let receiver = format!(
        "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: chat, namespace: ops}}\n\
         spec: {{type: slack, slack: {{botToken: {{env: SLACK_TOKEN}}, channelId: C0SCHED, baseUrl: \"{}\"}}}}\n",
        slack.api_url()
    );
    let model = Model::default();
    model.results.lock().unwrap().extend([finding("suspected"), finding("confirmed"), healthy()]);
    let spec = "apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {name: db, namespace: ops}\n\
                spec: {schedule: \"* * * * *\", prompt: check db-7, receivers: [chat], notify: always}\n"
        .to_string();
    let rig = Rig::with_receivers(&model, &receiver, &[spec], "2026-12-06T07:59:30Z", u64::MAX).await;
    let _leader = rig.lead();
    rig.seen("db").await;
    for minute in 0..3 {
        let tick = format!("2026-12-06T08:0{minute}:00Z");
        rig.tick("db", &format!("2026-12-06T08:0{minute}:01Z"), &tick).await;
    }
    let messages = support::wait_for("three notices", Duration::from_secs(20), || async {
        let messages = slack.messages();
        (messages.len() == 3).then_some(messages)
    })
    .await;
    let root = messages[0]["ts"].as_str().unwrap().to_string();
    assert!(messages[0].get("thread_ts").is_none_or(Value::is_null), "the first notice starts the thread");
    assert_eq!(slack.thread("C0SCHED", &root).len(), 2, "{messages:#?}");
    let text = |i: usize| messages[i]["text"].as_str().unwrap().to_string();
    assert!(text(0).contains("first finding: suspected"), "{}", text(0));
    assert!(text(1).contains("finding status: suspected → confirmed"), "{}", text(1));
    assert!(text(2).contains("back to healthy"), "{}", text(2));
    assert_eq!(rig.store.book("ops/db").unwrap().threads["ops/chat"], root);
}

/// Keys of the `ops` namespace (chat, and read only) and of another tenant.
fn keys() -> akritas::web::auth::ApiKeys {
    let parse = |text: &str| -> akritas::config::ApiKeyRef {
        let flags = akritas::config::ServeFlags { api_keys: vec![text.to_string()], ..Default::default() };
        akritas::config::load(&flags, &|_| None).unwrap().api_keys.remove(0)
    };
    let refs = [parse("ops=K_OPS:chat@ops"), parse("viewer=K_VIEW:read@ops"), parse("other=K_OTHER:chat@team-b")];
    let lookup = |env: &str| Some(format!("{}-schedules-key-0123456789", env.to_lowercase()));
    akritas::web::auth::ApiKeys::from_env(&refs, &lookup).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_follows_the_rules_of_a_tick_and_the_leader_starts_what_another_replica_recorded() {
    let model = Model::default();
    let (_hook, url) = Hook::start().await;
    // Two Runs a day fit in the budget (one may use 496,384 tokens).
    let rig = Rig::new(&model, &url, &[schedule("db", "0 * * * *", "")], "2026-12-06T07:30:00Z", 1_000_000).await;
    let _leader = rig.lead();
    rig.seen("db").await;
    // The replica the request reaches does not lead: it records the claim; the leader starts it.
    let parts = (rig.parts)(rig.store.clone());
    let (engine, catalog) = (parts.engine.clone(), parts.catalog.clone());
    let mut state = host::app_state(engine, catalog, keys(), None, Arc::new(EnvSecrets::process()), 1 << 20);
    state.schedules = Some(Arc::new(Scheduler::new(parts).unwrap()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(akritas::web::serve(listener, akritas::web::router(state), stop.clone(), Duration::from_secs(1)));
    let post = |key: &'static str, path: &'static str| {
        let url = format!("{base}{path}");
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .bearer_auth(format!("{}-schedules-key-0123456789", key.to_lowercase()))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or_default())
        }
    };
    const RUN: &str = "/api/v1/schedules/ops/db/run";

    let (status, body) = post("K_OTHER", RUN).await;
    assert_eq!(status, 404, "another tenant's schedule does not exist for it: {body}");
    let (status, body) = post("K_VIEW", RUN).await;
    assert_eq!(status, 403, "a read key cannot start a Run: {body}");
    // The route takes no arguments: an empty body or `{}`, nothing else.
    let array = reqwest::Client::new()
        .post(format!("{base}{RUN}"))
        .bearer_auth("k_ops-schedules-key-0123456789")
        .header("content-type", "application/json")
        .body("[]")
        .send()
        .await
        .unwrap();
    assert_eq!(array.status().as_u16(), 400, "an array is not the empty object");
    let (status, body) = post("K_OPS", "/api/v1/schedules/ops/nope/run").await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{body}");

    model.delay_ms.store(2_000, Ordering::SeqCst);
    // Two requests at once: exactly one is claimed.
    let (first, second) = tokio::join!(post("K_OPS", RUN), post("K_OPS", RUN));
    let (accepted, refused) = if first.0 == 202 { (first, second) } else { (second, first) };
    assert_eq!((accepted.0, refused.0), (202, 409), "{accepted:?} {refused:?}");
    let body = accepted.1;
    assert_eq!(body["scheduled_time"], "2026-12-06T07:30:00Z", "{body}");
    assert_eq!(body["job_id"], "schedule:ops/db@2026-12-06T07:30:00Z", "{body}");
    // Claimed at once: a second request is refused before the Run even starts.
    let (status, body) = post("K_OPS", RUN).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("schedule_running")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("2026-12-06T07:30:00Z still runs"), "{body}");
    // The leader's next pass (at the latest a minute later) starts it.
    let manual = rig.tick("db", "2026-12-06T07:31:01Z", "2026-12-06T07:30:00Z").await;
    assert_eq!(manual.last_result.unwrap().outcome, "Succeeded");
    let runs = rig.runs_of("db", "2026-12-06T07:30:00Z").await;
    assert_eq!(runs.len(), 1, "one Run for the request");
    model.delay_ms.store(0, Ordering::SeqCst);
    // The cron's ticks did not move: 08:00 runs as it would have.
    let tick = rig.tick("db", "2026-12-06T08:00:01Z", "2026-12-06T08:00:00Z").await;
    assert_eq!(tick.last_result.unwrap().outcome, "Succeeded");
    assert_eq!(tick.missed_ticks, 0);
    // Two Runs reserved 992,768 of the day's 1,000,000 tokens: a third is refused, saying so.
    let (status, body) = post("K_OPS", RUN).await;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("schedule_budget_spent")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("reserved 992768 of the 1000000"), "{body}");
    stop.cancel();
}
