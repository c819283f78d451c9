//! The scheduler: on the leader only, it looks at every `RunSchedule` of the Catalog when a
//! tick is due (or the Catalog changes), records each tick decision ([`super::decide`]) in
//! the schedule journal before acting on it, starts the claimed Runs (at most
//! `concurrency` at once, the others wait their turn), compares each result with the one
//! before ([`super::compare`]) and tells the schedule's receivers in its own thread.
//!
//! Restarts and leader changes: a claimed tick whose Run is not running here is resolved
//! from the audit (every scheduled Run carries its tick as `job_id`): a Run that finished
//! completes the tick, one that never started is started once, and one that was interrupted
//! (a stop, a lost leadership) is run again while the tick is within its starting deadline,
//! else ends the tick without a result to compare.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::clock::Clock;
use super::compare;
use super::decide::{Action, Tick, decide, next_tick};
use super::report::{self, Ending, Plan};
use super::store::{Done, Entry, ScheduleStore};
use crate::audit::{Finish, RunRecord, RunStatus};
use crate::catalog::secrets::SecretResolver;
use crate::catalog::status::StatusBoard;
use crate::catalog::{CatalogStore, ObjectKey};
use crate::engine::conversation::{Speaker, Turn};
use crate::engine::request::RunRequest;
use crate::engine::run::Engine;
use crate::notify::RetryPolicy;
use crate::resources::RunSchedule;
use crate::resources::run_schedule::RunScheduleSpec;
use crate::resources::{Kind, Resource};
use crate::tenancy::Tenancy;

mod now;

pub use now::RunNowError;

/// Runs started by schedules, by outcome.
const RUNS: &str = "akritas_schedule_runs_total";
const RUNS_HELP: &str =
    "Runs started by RunSchedules that ended, by outcome (succeeded, failed, replaced, interrupted).";
/// Ticks not run.
const SKIPPED: &str = "akritas_schedule_ticks_skipped_total";
const SKIPPED_HELP: &str = "RunSchedule ticks not run, by reason (ConcurrencyForbid, CostCapReached) and namespace.";
/// Ticks past their deadline.
const MISSED: &str = "akritas_schedule_ticks_missed_total";
const MISSED_HELP: &str =
    "RunSchedule ticks found after their startingDeadlineSeconds (counted, not run), by namespace.";
/// A schedule absent from the Catalog this long is forgotten.
const FORGET_AFTER: SignedDuration = SignedDuration::from_mins(10);
/// Longest wait between two passes.
const IDLE_WAKE: SignedDuration = SignedDuration::from_secs(60);

/// Scheduler settings (`app::narrow::schedules` builds them from the service configuration).
#[derive(Clone, Debug)]
pub struct SchedulerSettings {
    /// Tokens one namespace's scheduled Runs may reserve per UTC day.
    pub daily_tokens: u64,
    /// Scheduled Runs executing at once.
    pub concurrency: usize,
    /// Scheduled Runs of one namespace executing at once.
    pub per_namespace: usize,
    /// External base URL for Run links.
    pub public_url: Option<String>,
    /// Notification attempts and timeout.
    pub delivery: RetryPolicy,
    /// Which receivers' namespaces a schedule's namespace sees.
    pub tenancy: Tenancy,
}

/// What the scheduler works with.
pub struct SchedulerParts {
    /// The schedule journal.
    pub store: ScheduleStore,
    /// The engine the Runs execute on (its audit holds them).
    pub engine: Arc<Engine>,
    /// The Catalog the schedules, receivers and skills come from.
    pub catalog: CatalogStore,
    /// Receivers' secrets.
    pub secrets: Arc<dyn SecretResolver>,
    /// Where each schedule's status and conditions are published.
    pub board: StatusBoard,
    /// The time.
    pub clock: Arc<dyn Clock>,
    /// Token caps, concurrency limits, the Run link base URL, delivery retries and tenancy.
    pub settings: SchedulerSettings,
}

/// A Run executing here: its tick and how to cancel it.
struct Local {
    scheduled: Timestamp,
    cancel: CancellationToken,
}

/// The scheduler.
pub struct Scheduler {
    parts: SchedulerParts,
    client: reqwest::Client,
    local: Mutex<BTreeMap<String, Local>>,
    slots: Arc<Semaphore>,
    /// Per namespace, at most `per_namespace` at once.
    namespace_slots: Mutex<BTreeMap<String, Arc<Semaphore>>>,
    /// First time each forgotten-to-be schedule was found absent.
    absent: Mutex<BTreeMap<String, Timestamp>>,
    wake: Notify,
}

/// `namespace/name`.
pub fn key_text(key: &ObjectKey) -> String {
    format!("{}/{}", key.namespace, key.name)
}

/// The `job_id` of a tick's Run.
pub fn tick_id(key: &str, scheduled: Timestamp) -> String {
    format!("schedule:{key}@{scheduled}")
}

impl Scheduler {
    /// Builds the scheduler; its HTTP client does not follow redirects.
    pub fn new(parts: SchedulerParts) -> Result<Self, reqwest::Error> {
        let client = crate::outbound::resource_client(parts.settings.delivery.timeout)?;
        let slots = Arc::new(Semaphore::new(parts.settings.concurrency.max(1)));
        Ok(Scheduler {
            parts,
            client,
            local: Mutex::new(BTreeMap::new()),
            slots,
            namespace_slots: Mutex::new(BTreeMap::new()),
            absent: Mutex::new(BTreeMap::new()),
            wake: Notify::new(),
        })
    }

    fn local(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Local>> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most tokens one scheduled Run may use: its budget's model calls at the largest
    /// request, plus its output.
    fn run_tokens(&self) -> u64 {
        let limits = &self.parts.engine.settings().limits;
        u64::from(limits.max_model_calls)
            .saturating_mul(limits.max_context_tokens)
            .saturating_add(limits.max_output_tokens)
    }

    /// What a decision about `schedule` knows, now.
    fn tick_of<'a>(&self, key: &'a ObjectKey, schedule: &'a RunSchedule, plan: &'a Plan) -> Tick<'a> {
        let spec = &schedule.spec;
        Tick {
            uid: schedule.metadata.uid.as_deref().unwrap_or_default(),
            namespace: &key.namespace,
            cron: &plan.cron,
            zone: &plan.zone,
            suspend: spec.suspend,
            deadline: spec.starting_deadline(),
            policy: spec.concurrency_policy,
            run_tokens: self.run_tokens(),
            daily_tokens: self.parts.settings.daily_tokens,
            now: self.parts.clock.now(),
        }
    }

    /// Schedules until `cancel`: resolves the ticks a previous process left claimed, then a
    /// pass whenever a tick is due, the Catalog changes or a Run ends. Runs in flight at
    /// `cancel` are dropped; the next start resolves their ticks.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        self.resolve_orphans(&cancel, true).await;
        let mut catalog = self.parts.catalog.subscribe();
        loop {
            let wake = self.pass(&cancel).await;
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.parts.clock.sleep_until(wake) => {}
                changed = catalog.changed() => if changed.is_err() { return },
                () = self.wake.notified() => {}
            }
        }
    }

    /// One look at every schedule; returns when to look again.
    pub async fn pass(self: &Arc<Self>, cancel: &CancellationToken) -> Timestamp {
        let now = self.parts.clock.now();
        let mut wake = now.checked_add(IDLE_WAKE).unwrap_or(now);
        if let Err(error) = self.parts.store.refresh().await {
            tracing::warn!(component = "akritas_schedules", %error, "cannot read the schedule journal; retrying");
            return wake;
        }
        self.resolve_orphans(cancel, false).await;
        let catalog = self.parts.catalog.current();
        let mut present = BTreeSet::new();
        for (key, entry) in catalog.of_kind(Kind::RunSchedule) {
            let Resource::RunSchedule(schedule) = entry.resource.as_ref() else { continue };
            let id = key_text(key);
            present.insert(id.clone());
            let Some(plan) = report::plan(&catalog, key, schedule, &self.parts.settings.tenancy, &self.parts.board)
            else {
                continue;
            };
            if let Err(error) = self.tick(key, &id, schedule, &plan, cancel).await {
                tracing::warn!(component = "akritas_schedules", schedule = %id, %error, "tick not recorded; retrying");
            }
            let now = self.parts.clock.now();
            let next = next_tick(&plan.cron, &plan.zone, schedule.spec.suspend, now);
            if let Some(next) = next {
                wake = wake.min(next);
            }
            let status = report::status(&schedule.spec, self.parts.store.state().schedules.get(&id), next);
            self.parts.board.set_facts(key, status);
        }
        if catalog.version > 0 {
            self.forget_absent(&present).await;
        }
        wake
    }

    async fn tick(
        self: &Arc<Self>,
        key: &ObjectKey,
        id: &str,
        schedule: &RunSchedule,
        plan: &Plan,
        cancel: &CancellationToken,
    ) -> Result<(), crate::journal::durable::StoreError> {
        let tick = self.tick_of(key, schedule, plan);
        // Most passes decide nothing: look without the writer lock first.
        let (entries, _) = {
            let books = self.parts.store.state();
            decide(books.schedules.get(id), &books, &tick)
        };
        if entries.is_empty() {
            return Ok(());
        }
        let (action, entries) = self
            .parts
            .store
            .decide(id, |book, books| {
                let (entries, action) = decide(book, books, &tick);
                (entries.clone(), (action, entries))
            })
            .await?;
        for entry in &entries {
            match entry {
                Entry::Missed { count, .. } => {
                    crate::telemetry::count(MISSED, MISSED_HELP, &[("namespace", &key.namespace)], *count as f64)
                }
                Entry::Skipped { skipped, .. } => {
                    let labels = [("namespace", key.namespace.as_str()), ("reason", skipped.reason.as_str())];
                    crate::telemetry::count(SKIPPED, SKIPPED_HELP, &labels, 1.0);
                    tracing::info!(component = "akritas_schedules", schedule = %id, reason = %skipped.reason, message = %skipped.message, "tick skipped");
                }
                _ => {}
            }
        }
        let scheduled = match action {
            Action::Wait => return Ok(()),
            Action::Start(at) => at,
            Action::Replace(at) => {
                if let Some(running) = self.local().remove(id) {
                    tracing::info!(component = "akritas_schedules", schedule = %id, replaced = %running.scheduled, "the running Run is replaced (concurrencyPolicy: Replace)");
                    running.cancel.cancel();
                }
                at
            }
        };
        self.start(key.clone(), schedule.clone(), scheduled, cancel);
        Ok(())
    }

    /// Starts the Run of a claimed tick.
    fn start(
        self: &Arc<Self>,
        key: ObjectKey,
        schedule: RunSchedule,
        scheduled: Timestamp,
        cancel: &CancellationToken,
    ) {
        let run_cancel = cancel.child_token();
        self.local().insert(key_text(&key), Local { scheduled, cancel: run_cancel.clone() });
        let (me, stop) = (self.clone(), cancel.clone());
        tokio::spawn(async move {
            let ended = me.execute(&key, &schedule, scheduled, &run_cancel, &stop).await;
            let id = key_text(&key);
            match ended {
                // Stopping: the next start resolves the tick.
                _ if stop.is_cancelled() => {}
                Some(ended) => me.complete(&key, &schedule.spec, scheduled, ended).await,
                None => {}
            }
            let mut local = me.local();
            if local.get(&id).is_some_and(|l| l.scheduled == scheduled) {
                local.remove(&id);
            }
            drop(local);
            me.wake.notify_one();
        });
    }

    /// Waits for a slot and runs the tick's Run; `None` when cancelled before it started. A
    /// Run cancelled by the next tick is closed as `replaced`, one cancelled by `stop` (a
    /// shutdown, or leadership lost) as `interrupted`.
    async fn execute(
        &self,
        key: &ObjectKey,
        schedule: &RunSchedule,
        scheduled: Timestamp,
        cancel: &CancellationToken,
        stop: &CancellationToken,
    ) -> Option<Ending> {
        let id = key_text(key);
        let namespace_slots = {
            let mut slots = self.namespace_slots.lock().unwrap_or_else(|p| p.into_inner());
            let per_namespace = self.parts.settings.per_namespace.max(1);
            slots.entry(key.namespace.clone()).or_insert_with(|| Arc::new(Semaphore::new(per_namespace))).clone()
        };
        let slot = tokio::select! {
            slots = async { (namespace_slots.acquire_owned().await, self.slots.clone().acquire_owned().await) } => match slots {
                (Ok(namespace), Ok(host)) => (namespace, host),
                _ => return None,
            },
            () = cancel.cancelled() => return None,
        };
        let request = request(key, schedule, scheduled);
        let outcome = tokio::select! {
            outcome = self.parts.engine.run(request) => outcome,
            () = cancel.cancelled() => {
                drop(slot);
                let (code, outcome, why) = if stop.is_cancelled() {
                    ("interrupted", "Interrupted", "the scheduler stopped (shutdown, or leadership moved)")
                } else {
                    ("replaced", "Replaced", "replaced by the schedule's next tick (concurrencyPolicy: Replace)")
                };
                let run_id = self.close_cancelled(&tick_id(&id, scheduled), code, why).await;
                return Some(Ending::Cancelled { run_id, outcome });
            }
        };
        drop(slot);
        Some(match outcome {
            Ok(outcome) => {
                let run_id = outcome.run_id.map(|id| id.to_string());
                match outcome.investigation {
                    Some(result) => Ending::Result { run_id, result: Box::new(result) },
                    None => Ending::Failed {
                        run_id,
                        code: "structure_failed".into(),
                        error: "the Run finished without a structured result".into(),
                    },
                }
            }
            Err(error) => Ending::Failed {
                run_id: error.run_id().map(|id| id.to_string()),
                code: error.code().to_string(),
                error: error.to_string(),
            },
        })
    }

    /// Closes the Run of a cancelled tick as failed with `code`; its id.
    async fn close_cancelled(&self, tick: &str, code: &str, why: &str) -> Option<String> {
        let audit = self.parts.engine.audit()?;
        let runs = audit.runs_of_jobs(&BTreeSet::from([tick])).await.ok()?;
        let run = runs.into_iter().last()?;
        if run.status == RunStatus::Running {
            let finish = Finish {
                status: RunStatus::Failed,
                error: Some(why.to_string()),
                error_code: Some(code.to_string()),
                metadata: BTreeMap::new(),
            };
            if let Err(error) = audit.finish(&run.id, finish).await {
                tracing::warn!(component = "akritas_schedules", run = %run.id, %error, "the replaced Run was not closed");
            }
        }
        Some(run.id.to_string())
    }

    /// Records how a tick's Run ended, compares its result with the one before and tells the
    /// receivers when the policy says so.
    async fn complete(&self, key: &ObjectKey, spec: &RunScheduleSpec, scheduled: Timestamp, ended: Ending) {
        let id = key_text(key);
        let mut finished = report::result(scheduled, ended);
        crate::telemetry::count(RUNS, RUNS_HELP, &[("outcome", finished.outcome)], 1.0);
        let now = self.parts.clock.now();
        let public_url = self.parts.settings.public_url.clone();
        let recorded = self
            .parts
            .store
            .decide(&id, |book, _| {
                let previous = book.and_then(|b| b.digest.as_ref());
                let notice = finished.digest.clone().and_then(|digest| {
                    finished.result.changes = compare::changes(previous, &digest);
                    let told = compare::notifies(spec.notify, &digest, &finished.result.changes);
                    finished.result.notified = told && !spec.receivers.is_empty();
                    finished.result.notified.then(|| report::notice(&id, &digest, &finished, public_url.as_deref()))
                });
                let done = Done {
                    scheduled,
                    finished: now,
                    digest: finished.digest.clone(),
                    result: finished.result.clone(),
                    history: spec.history(),
                };
                (vec![Entry::Done(Box::new(done))], notice)
            })
            .await;
        match recorded {
            Ok(Some(notice)) => self.notify(key, spec, &notice).await,
            Ok(None) => {}
            Err(error) => {
                tracing::error!(component = "akritas_schedules", schedule = %id, %error, "the end of a scheduled Run was not recorded")
            }
        }
    }

    async fn notify(&self, key: &ObjectKey, spec: &RunScheduleSpec, notice: &crate::notify::ScheduleNotice) {
        let id = key_text(key);
        let catalog = self.parts.catalog.current();
        let threads = self.parts.store.state().schedules.get(&id).map(|b| b.threads.clone()).unwrap_or_default();
        let receivers = report::receivers(&catalog, key, spec, &self.parts.settings.tenancy);
        for (receiver, target) in report::targets(receivers, self.parts.secrets.as_ref()) {
            let root = threads.get(&receiver).map(String::as_str);
            let sent = crate::notify::deliver_threaded(
                &self.client,
                &receiver,
                &target,
                crate::notify::Payload::Checked(notice),
                root,
                &crate::notify::new_delivery_id(),
                self.parts.settings.delivery,
            )
            .await;
            tracing::info!(component = "akritas_schedules", schedule = %id, %receiver, delivered = sent.outcome.delivered, error = sent.outcome.error.as_deref().unwrap_or(""), "scheduled check told");
            if let (None, Some(message)) = (root, sent.message_id) {
                let entry = Entry::Thread { receiver: receiver.clone(), root: message };
                if let Err(error) = self.parts.store.record(&id, entry).await {
                    tracing::warn!(component = "akritas_schedules", schedule = %id, %error, "thread root not recorded");
                }
            }
        }
    }

    /// Resolves claimed ticks whose Run is not executing here: at start every one, later
    /// those claimed longer ago than a Run may take.
    async fn resolve_orphans(self: &Arc<Self>, cancel: &CancellationToken, at_start: bool) {
        let now = self.parts.clock.now();
        let longest = SignedDuration::from_millis(self.parts.engine.settings().limits.max_duration_ms as i64)
            .saturating_add(SignedDuration::from_secs(60));
        // A claim is an orphan when its Run is not running here and it is older than any Run
        // may last (or this process just started), or when it was asked for now: the replica
        // that recorded it leaves starting it to the scheduler.
        let orphans: Vec<(String, Timestamp, bool)> = {
            let local = self.local();
            let books = self.parts.store.state();
            books
                .schedules
                .iter()
                .filter_map(|(id, book)| Some((id.clone(), book.running.clone()?)))
                .filter_map(|(id, running)| {
                    let stale = at_start || now.duration_since(running.claimed) > longest;
                    let requested = running.requested_by.is_some() && !stale;
                    (!local.contains_key(&id) && (stale || requested)).then_some((id, running.scheduled, requested))
                })
                .collect()
        };
        if orphans.is_empty() {
            return;
        }
        let ticks: Vec<String> = orphans.iter().map(|(id, at, _)| tick_id(id, *at)).collect();
        let runs: Vec<RunRecord> = match self.parts.engine.audit() {
            Some(audit) => match audit.runs_of_jobs(&ticks.iter().map(String::as_str).collect()).await {
                Ok(runs) => runs,
                Err(error) => {
                    tracing::warn!(component = "akritas_schedules", %error, "cannot read the Runs of claimed ticks; retrying");
                    return;
                }
            },
            None => Vec::new(),
        };
        let catalog = self.parts.catalog.current();
        for ((id, scheduled, requested), tick) in orphans.into_iter().zip(ticks) {
            let Some((key, schedule)) = report::find(&catalog, &id) else { continue };
            let run = runs.iter().rev().find(|run| run.metadata.get("job_id").and_then(|v| v.as_str()) == Some(&tick));
            let deadline = SignedDuration::try_from(schedule.spec.starting_deadline()).unwrap_or(SignedDuration::MAX);
            let in_time = now.duration_since(scheduled) <= deadline;
            match run {
                Some(run) if run.status == RunStatus::Running && at_start => {}
                // Asked for now, and running on the replica that led when it started.
                Some(run) if run.status == RunStatus::Running && requested => {}
                None if requested => {
                    tracing::info!(component = "akritas_schedules", schedule = %id, %scheduled, "starting the Run asked for now");
                    self.start(key, schedule, scheduled, cancel);
                }
                Some(run) if run.error_code.as_deref() == Some("interrupted") && in_time => {
                    tracing::info!(component = "akritas_schedules", schedule = %id, %scheduled, run = %run.id, "a claimed tick's Run was interrupted; the tick runs again within its deadline");
                    self.start(key, schedule, scheduled, cancel);
                }
                Some(run) => {
                    let ended = ended_of(run);
                    tracing::info!(component = "akritas_schedules", schedule = %id, %scheduled, run = %run.id, "a claimed tick's Run is resolved from the audit");
                    self.complete(&key, &schedule.spec, scheduled, ended).await;
                }
                None if at_start => {
                    tracing::info!(component = "akritas_schedules", schedule = %id, %scheduled, "a claimed tick's Run never started; starting it");
                    self.start(key, schedule, scheduled, cancel);
                }
                None => {
                    let ended = Ending::Cancelled { run_id: None, outcome: "Interrupted" };
                    self.complete(&key, &schedule.spec, scheduled, ended).await;
                }
            }
        }
    }

    /// Forgets schedules absent from the Catalog for [`FORGET_AFTER`].
    async fn forget_absent(&self, present: &BTreeSet<String>) {
        let now = self.parts.clock.now();
        let recorded: Vec<String> = self.parts.store.state().schedules.keys().cloned().collect();
        let gone: Vec<String> = {
            let mut absent = self.absent.lock().unwrap_or_else(|p| p.into_inner());
            absent.retain(|id, _| !present.contains(id));
            recorded
                .into_iter()
                .filter(|id| !present.contains(id))
                .filter(|id| now.duration_since(*absent.entry(id.clone()).or_insert(now)) > FORGET_AFTER)
                .collect()
        };
        for id in gone {
            if self.parts.store.record(&id, Entry::Removed).await.is_ok() {
                self.absent.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            }
        }
    }
}

/// How a Run recorded in the audit ended.
fn ended_of(run: &RunRecord) -> Ending {
    let run_id = Some(run.id.to_string());
    match (&run.status, &run.investigation) {
        (RunStatus::Succeeded, Some(result)) => Ending::Result { run_id, result: Box::new(result.clone()) },
        _ if run.error_code.as_deref() == Some("interrupted") => Ending::Cancelled { run_id, outcome: "Interrupted" },
        (RunStatus::Running, _) => Ending::Cancelled { run_id, outcome: "Interrupted" },
        _ => Ending::Failed {
            run_id,
            code: run.error_code.clone().unwrap_or_else(|| "failed".into()),
            error: run.error.clone().unwrap_or_else(|| "the Run failed".into()),
        },
    }
}

/// The Run request of a tick: a read-only investigation in the schedule's namespace, with
/// the tick in its metadata.
fn request(key: &ObjectKey, schedule: &RunSchedule, scheduled: Timestamp) -> RunRequest {
    let (id, spec) = (key_text(key), &schedule.spec);
    let prompt = format!(
        "Scheduled check {id} for {scheduled}. Check the current state and report what you find; say whether \
         anything needs a person (actionability no_action when all is well).\n\n{}",
        spec.prompt
    );
    let mut metadata = BTreeMap::from([
        ("job_id".to_string(), json!(tick_id(&id, scheduled))),
        ("schedule".to_string(), json!(id)),
        ("scheduled_time".to_string(), json!(scheduled.to_string())),
        ("history_limit".to_string(), json!(spec.history())),
    ]);
    if let Some(uid) = &schedule.metadata.uid {
        metadata.insert("schedule_uid".to_string(), json!(uid));
    }
    RunRequest {
        namespace: key.namespace.clone(),
        source: "schedule".into(),
        actor: format!("schedule:{id}"),
        turns: vec![Turn { role: Speaker::User, content: prompt }],
        context: spec.context.clone(),
        skills: spec.skills.clone(),
        response_language: spec.response_language.clone(),
        metadata,
        investigate: true,
        ..RunRequest::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_request_is_a_read_only_investigation_in_the_schedule_namespace() {
        let key = ObjectKey { kind: Kind::RunSchedule, namespace: "team-a".into(), name: "certs".into() };
        let schedule: RunSchedule = serde_json::from_value(json!({
            "apiVersion": "akritas.io/v1alpha1", "kind": "RunSchedule",
            "metadata": {"name": "certs", "namespace": "team-a", "uid": "u-1"},
            "spec": {"schedule": "0 8 * * *", "prompt": "Which certificates expire?", "skills": ["cert-expiry"],
                     "context": {"technology": "cert-manager"}},
        }))
        .unwrap();
        let at: Timestamp = "2026-12-06T08:00:00Z".parse().unwrap();
        let request = request(&key, &schedule, at);
        assert_eq!(request.metadata["schedule_uid"], "u-1");
        assert_eq!((request.namespace.as_str(), request.source.as_str()), ("team-a", "schedule"));
        assert!(request.investigate);
        assert_eq!(request.skills, ["cert-expiry"]);
        assert_eq!(request.metadata["job_id"], "schedule:team-a/certs@2026-12-06T08:00:00Z");
    }
}
