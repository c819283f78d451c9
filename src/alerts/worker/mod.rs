//! The investigation worker: a bounded pool claims
//! pending jobs oldest first, runs the engine with the alert prompt and the forced
//! structuring call, then notifies every NotificationReceiver. A failed attempt is
//! retried with exponential backoff up to the configured attempts, then the job is
//! `failed` with a sanitised reason, and every receiver is told once that the alert
//! was not investigated (what failed, why, the Run); a rejected result (invented
//! evidence, claimed production writes) fails the job at once. Every state change is journaled before
//! the next step, so a restart resumes interrupted jobs and unsent notifications
//! without running an investigation twice after it succeeded. When a state change
//! cannot be recorded (the alert journal cannot be written), the worker pauses with a bounded
//! exponential backoff instead of retrying at once, and `/health` says why.
//!
//! Tenancy: the investigation Run carries the AlertSource's namespace, and the
//! result goes only to NotificationReceivers that namespace sees (its own and the
//! shared namespaces).

pub mod delivery;
pub(in crate::alerts) mod outbox;
pub mod request;
pub mod source_status;

use crate::ids::JobId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::alerts::store::{AlertStore, AlertStoreError, Delivery, Failure, Job, JobStatus, Step};
use crate::alerts::worker::delivery::{key_text, pending_delivery};
use crate::alerts::worker::request::{investigation_request, namespace_of};
use crate::audit::{AuditError, RunRecord, RunStatus};
use crate::catalog::CatalogStore;
use crate::catalog::secrets::SecretResolver;
use crate::catalog::status::StatusBoard;
use crate::engine::request::RunError;
use crate::engine::run::Engine;
use crate::journal::database::Replica;
use crate::notify::RetryPolicy;
use crate::resources::{Kind, Resource};
use crate::tenancy::Tenancy;
use crate::text;

/// Longest stored error text, in characters.
pub const MAX_ERROR_CHARS: usize = 512;
/// Largest factor applied to the base backoff.
const MAX_BACKOFF_FACTOR: u32 = 16;
/// Wake-up interval when nothing is due.
const IDLE_WAKE: Duration = Duration::from_secs(30);
/// Claims of investigation jobs by this replica on the database, by outcome.
const CLAIMS: &str = "akritas_job_claims_total";
const CLAIMS_HELP: &str = "Investigation jobs this replica started (claimed) or found started by another replica first (taken), on the database.";
/// Wake-up interval while jobs are deferred, and on the database (to follow the other replicas).
const DEFERRED_WAKE: Duration = Duration::from_secs(1);
/// First pause after a job state could not be recorded; doubled per failure in a row.
const STORE_RETRY_BASE: Duration = Duration::from_secs(1);
/// Longest pause after failures to record a job state.
const STORE_RETRY_MAX: Duration = Duration::from_secs(60);

/// Worker settings (`app::narrow::worker` builds them from the service configuration).
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// Investigations at once.
    pub concurrency: usize,
    /// Attempts before a job fails.
    pub max_attempts: u32,
    /// Wait before the first retry; doubled per attempt up to 16×.
    pub backoff: Duration,
    /// External base URL for Run links.
    pub public_url: Option<String>,
    /// Notification attempts and timeout.
    pub delivery: RetryPolicy,
    /// Which receivers' namespaces an incident's namespace sees.
    pub tenancy: Tenancy,
}

/// Why the worker could not start, or could not record the state of a job.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The HTTP client for notifications could not be built.
    #[error(transparent)]
    Client(#[from] reqwest::Error),
    /// The alert journal failed.
    #[error(transparent)]
    Store(#[from] AlertStoreError),
    /// The audit journal failed.
    #[error(transparent)]
    Audit(#[from] AuditError),
}

/// The worker.
pub struct Worker {
    pub(super) store: Arc<AlertStore>,
    engine: Arc<Engine>,
    pub(super) catalog: CatalogStore,
    pub(super) secrets: Arc<dyn SecretResolver>,
    pub(super) board: StatusBoard,
    pub(super) client: reqwest::Client,
    pub(super) settings: WorkerSettings,
    active: Mutex<BTreeSet<JobId>>,
    /// Jobs in a row whose state could not be recorded.
    store_failures: AtomicU32,
    /// The time routing (quiet windows) looks at.
    pub(super) clock: Clock,
    /// Whether resolve notices are being sent.
    notices_busy: Arc<std::sync::atomic::AtomicBool>,
    /// On the database: this replica, which claims the jobs it starts and takes over those of
    /// replicas that stopped heartbeating.
    replica: Option<Replica>,
}

/// A source of the current time; tests inject a fixed one.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

impl Worker {
    /// Builds the worker; `client` must not follow redirects.
    pub fn new(
        store: Arc<AlertStore>,
        engine: Arc<Engine>,
        catalog: CatalogStore,
        secrets: Arc<dyn SecretResolver>,
        board: StatusBoard,
        settings: WorkerSettings,
    ) -> Result<Self, WorkerError> {
        let client = crate::outbound::resource_client(settings.delivery.timeout)?;
        Ok(Worker {
            store,
            engine,
            catalog,
            secrets,
            board,
            client,
            settings,
            active: Mutex::new(BTreeSet::new()),
            store_failures: AtomicU32::new(0),
            clock: Arc::new(Timestamp::now),
            notices_busy: Arc::default(),
            replica: None,
        })
    }

    /// The same worker as one replica of several sharing the database.
    pub fn with_replica(mut self, replica: Replica) -> Self {
        self.replica = Some(replica);
        self
    }

    /// The same worker whose routing (quiet windows) reads the time from `clock`.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Claims and runs jobs until `cancel`; jobs in flight at shutdown are resumed
    /// by the next start. Call [`Worker::recover`] first.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.settings.concurrency));
        let mut tasks = tokio::task::JoinSet::new();
        let mut takeover_due = tokio::time::Instant::now();
        loop {
            // On the database: the jobs of replicas that stopped heartbeating, twice a lease.
            if let Some(replica) = &self.replica
                && tokio::time::Instant::now() >= takeover_due
            {
                takeover_due = tokio::time::Instant::now() + replica.lease() / 2;
                if let Err(error) = self.take_over().await {
                    tracing::warn!(component = "akritas_alert_worker", %error, "could not take over the jobs of stopped replicas");
                }
            }
            if let Some(pause) = store_pause(self.store_failures.load(Ordering::SeqCst)) {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            // On the database: what other replicas recorded (new jobs, steps they took).
            if let Err(error) = self.store.follow().await {
                tracing::warn!(component = "akritas_alerts", %error, "could not follow the alert store in the database");
            }
            if let Err(error) = self.store.promote_deferred().await {
                tracing::warn!(component = "akritas_alerts", %error, "deferred investigations could not be promoted");
            }
            let now = Timestamp::now();
            let busy = self.active_jobs().clone();
            let (jobs, next) = self.store.due_jobs(now, &busy, slots.available_permits());
            // Deferred jobs are promoted as tokens come back: looked at every second.
            let idle = if self.store.deferred_jobs() > 0 || self.replica.is_some() { DEFERRED_WAKE } else { IDLE_WAKE };
            let next_due =
                next.and_then(|t| Duration::try_from(now.duration_until(t)).ok()).map_or(idle, |wait| wait.min(idle));
            for job in jobs {
                let Ok(permit) = slots.clone().try_acquire_owned() else { break };
                self.active_jobs().insert(job.id.clone());
                let worker = self.clone();
                tasks.spawn(async move {
                    let id = job.id.clone();
                    worker.process(job).await;
                    worker.active_jobs().remove(&id);
                    drop(permit);
                    worker.store.wake();
                });
            }
            if !self.store.due_notices(1).is_empty() && !self.notices_busy.swap(true, Ordering::SeqCst) {
                let worker = self.clone();
                tasks.spawn(async move {
                    let result = worker.send_notices().await;
                    worker.notices_busy.store(false, Ordering::SeqCst);
                    worker.settle(result);
                });
            }
            while tasks.try_join_next().is_some() {}
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.store.work_available() => {}
                _ = tokio::time::sleep(next_due) => {}
            }
        }
        tasks.abort_all();
    }

    fn active_jobs(&self) -> std::sync::MutexGuard<'_, BTreeSet<JobId>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// At start, before any Run of this process begins: Runs left running by a
    /// stopped process are closed as interrupted, and every Run made for a job that
    /// was running is attached to it. A job whose Run succeeded with a result before
    /// the process stopped (the job's own success not yet recorded) keeps that result
    /// and goes on to its notifications: it is never investigated again. The other
    /// running jobs return to pending.
    pub async fn recover(&self) -> Result<(), WorkerError> {
        self.take_over().await
    }

    /// The jobs left running by a process that stopped: on the embedded journal (at start)
    /// every running job; on the database those claimed by a replica whose heartbeat is older
    /// than `job_claim_timeout` (this replica's own are running here). Runs of the stopped
    /// process are closed as interrupted and every Run made for such a job is attached to it;
    /// a job whose Run succeeded keeps that result and goes on to its notifications (it is
    /// never investigated again); the others return to pending, the takeover recorded.
    async fn take_over(&self) -> Result<(), WorkerError> {
        let live = match &self.replica {
            Some(replica) => Some(replica.live().await.map_err(AlertStoreError::Database)?),
            None => None,
        };
        let orphaned = |job: &Job| match &live {
            None => true,
            Some(live) => !job.claimed_by.as_ref().is_some_and(|by| live.contains(by)),
        };
        let running: Vec<Job> = self
            .store
            .unfinished_jobs()
            .into_iter()
            .filter(|job| job.status == JobStatus::Running && orphaned(job))
            .collect();
        let mut runs_of: BTreeMap<String, Vec<RunRecord>> = BTreeMap::new();
        if let Some(audit) = self.engine.audit() {
            audit.close_interrupted().await?;
            if running.is_empty() {
                return Ok(());
            }
            let ids: BTreeSet<&str> = running.iter().map(|job| job.id.as_str()).collect();
            for run in audit.runs_of_jobs(&ids).await? {
                runs_of.entry(job_of(&run).unwrap_or_default().to_string()).or_default().push(run);
            }
        }
        let (mut recovered, mut completed) = (0, 0);
        for mut job in running {
            let mut succeeded = None;
            for run in runs_of.remove(job.id.as_str()).unwrap_or_default() {
                let id = run.id.to_string();
                job.attach_runs([id.clone()]);
                if let (RunStatus::Succeeded, Some(result)) = (run.status, run.investigation) {
                    succeeded = Some((id, result));
                }
            }
            let step = match (succeeded, &self.replica) {
                (Some((run, result)), _) => {
                    let namespace = match self.store.incident(&job.incident_id).await? {
                        Some((incident, _, _)) => namespace_of(&job, &incident),
                        None => job.namespace.clone(),
                    };
                    Step::Succeed {
                        run: Some(run),
                        result: Box::new(result),
                        notifications: self.pending_deliveries(&namespace),
                    }
                }
                (None, None) => Step::Interrupt,
                (None, Some(replica)) => Step::TakeOver {
                    from: job.claimed_by.clone().unwrap_or_else(|| "(unknown)".to_string()),
                    by: replica.id().to_string(),
                },
            };
            let succeeds = matches!(step, Step::Succeed { .. });
            match self.store.step(&mut job, step).await {
                Ok(()) => {}
                // Another replica took it over first.
                Err(AlertStoreError::Taken { .. }) => continue,
                Err(error) => return Err(error.into()),
            }
            if self.replica.is_some() {
                crate::telemetry::count(
                    "akritas_job_takeovers_total",
                    "Investigation jobs of a stopped replica taken over by this one.",
                    &[],
                    1.0,
                );
                tracing::warn!(component = "akritas_alert_worker", event = "job_taken_over", job = %job.id, from = ?job.claimed_by, "took over a job of a replica that stopped heartbeating");
            }
            if succeeds {
                completed += 1;
            } else {
                recovered += 1;
            }
        }
        if recovered + completed > 0 {
            tracing::info!(
                component = "akritas_alert_worker",
                event = "jobs_recovered",
                jobs = recovered,
                completed,
                "interrupted alert jobs returned to pending; jobs whose Run had succeeded keep its result"
            );
        }
        Ok(())
    }

    async fn process(&self, job: Job) {
        let result = match job.status {
            JobStatus::Succeeded | JobStatus::Failed => self.notify_claimed(job).await,
            _ => self.attempt(job).await,
        };
        // Another replica on the same database took the job first: it is theirs.
        if let Err(WorkerError::Store(AlertStoreError::Taken { job, status })) = &result {
            tracing::info!(component = "akritas_alert_worker", job = %job, ?status, "another replica took this job first");
            crate::telemetry::count(CLAIMS, CLAIMS_HELP, &[("outcome", "taken")], 1.0);
            return self.settle(Ok(()));
        }
        self.settle(result);
    }

    /// Notes whether a state change could be recorded (the worker pauses while it cannot).
    fn settle(&self, result: Result<(), WorkerError>) {
        match result {
            Ok(()) => {
                if self.store_failures.swap(0, Ordering::SeqCst) > 0 {
                    self.store.report_worker_problem(None);
                }
            }
            Err(error) => {
                let failures = self.store_failures.fetch_add(1, Ordering::SeqCst).saturating_add(1);
                let pause = store_pause(failures).unwrap_or_default();
                tracing::error!(component = "akritas_alert_worker", event = "complete_failed", %error, failures, pause = ?pause, "alert job state not recorded; the worker pauses");
                self.store.report_worker_problem(Some(format!(
                    "the investigation worker cannot record job states ({error}); it retries in {} s",
                    pause.as_secs()
                )));
            }
        }
    }

    /// Sends a finished job's notifications. On the database only the replica that ran the job
    /// sends them while it heartbeats; when it stopped, this one claims them first (once).
    async fn notify_claimed(&self, mut job: Job) -> Result<(), WorkerError> {
        if let Some(replica) = &self.replica
            && job.claimed_by.as_deref() != Some(replica.id())
        {
            let live = replica.live().await.map_err(AlertStoreError::Database)?;
            if job.claimed_by.as_ref().is_some_and(|by| live.contains(by)) {
                return Ok(());
            }
            self.store.step_as(&mut job, Step::Claim, Some(replica.id())).await?;
        }
        self.notify(job).await
    }

    /// One attempt: pending → running, then one step to where it ends (succeeded, pending
    /// for a retry, or failed), each journaled once; then the notifications.
    async fn attempt(&self, mut job: Job) -> Result<(), WorkerError> {
        let me = self.replica.as_ref().map(Replica::id);
        self.store.step_as(&mut job, Step::Start, me).await?;
        if me.is_some() {
            crate::telemetry::count(CLAIMS, CLAIMS_HELP, &[("outcome", "claimed")], 1.0);
        }
        let event = self.store.event(&job.event_id).await?;
        let incident = self.store.incident(&job.incident_id).await?.map(|(i, _, _)| i);
        let context = event.zip(incident);
        let Some((event, incident)) = context else {
            let failure = Failure {
                run: None,
                code: "alert_context_missing".into(),
                error: "the alert event or incident of this job is missing".into(),
            };
            return Ok(self.store.step(&mut job, Step::Fail { failure, notifications: Vec::new() }).await?);
        };
        let request = investigation_request(&job, &event, &incident);
        let (failure, retry) = match self.engine.run(request).await {
            Ok(outcome) => {
                let run = outcome.run_id.map(|id| id.to_string());
                match outcome.investigation {
                    Some(result) => {
                        let notifications = self.pending_deliveries(&namespace_of(&job, &incident));
                        let result = Box::new(result);
                        self.store.step(&mut job, Step::Succeed { run, result, notifications }).await?;
                        tracing::info!(component = "akritas_alert_worker", event = "investigation_succeeded", job_id = %job.id, incident_id = %job.incident_id, run_id = job.run_id.as_deref().unwrap_or(""), "alert investigated");
                        return self.notify(job).await;
                    }
                    None => {
                        let error = "the Run finished without a structured result".into();
                        (Failure { run, code: "structure_failed".into(), error }, false)
                    }
                }
            }
            Err(error) => {
                let failure = Failure {
                    run: error.run_id().map(|id| id.to_string()),
                    code: error.code().to_string(),
                    error: sanitize_error(&error.to_string(), &self.known_secrets()),
                };
                (failure, retryable(&error))
            }
        };
        if retry && job.attempts < self.settings.max_attempts {
            let wait = backoff(self.settings.backoff, job.attempts);
            let not_before = Timestamp::now().saturating_add(wait).unwrap_or(Timestamp::MAX);
            tracing::warn!(component = "akritas_alert_worker", event = "investigation_failed", job_id = %job.id, attempts = job.attempts, retry_in = ?wait, error_code = %failure.code, "alert investigation failed; retrying");
            return Ok(self.store.step(&mut job, Step::Retry { failure, not_before }).await?);
        }
        tracing::warn!(component = "akritas_alert_worker", event = "investigation_failed", job_id = %job.id, attempts = job.attempts, error_code = %failure.code, error = %failure.error, "alert investigation failed; the job gives up and its receivers are told");
        // The people on call learn once that this alert was not investigated.
        let notifications = self.pending_deliveries(&namespace_of(&job, &incident));
        self.store.step(&mut job, Step::Fail { failure, notifications }).await?;
        self.notify(job).await
    }

    /// A pending delivery to each receiver in the Catalog now that `namespace` sees.
    fn pending_deliveries(&self, namespace: &str) -> Vec<Delivery> {
        let catalog = self.catalog.current();
        catalog
            .of_kind(Kind::NotificationReceiver)
            .filter(|(key, _)| self.settings.tenancy.sees(namespace, &key.namespace))
            .filter_map(|(key, entry)| match entry.resource.as_ref() {
                Resource::NotificationReceiver(r) => Some(pending_delivery(&key_text(key), r.spec.type_)),
                _ => None,
            })
            .collect()
    }

    /// Secret values this host can resolve, for redaction of stored errors.
    fn known_secrets(&self) -> Vec<String> {
        let catalog = self.catalog.current();
        let mut values = Vec::new();
        for (key, entry) in &catalog.entries {
            let references: Vec<&crate::resources::common::SecretRef> = match entry.resource.as_ref() {
                Resource::NotificationReceiver(r) => {
                    let spec = &r.spec;
                    let mut refs = Vec::new();
                    if let Some(w) = &spec.webhook {
                        refs.extend(w.url_from.iter().chain(&w.bearer_token).chain(&w.hmac_secret));
                    }
                    if let Some(t) = &spec.telegram {
                        refs.push(&t.bot_token);
                    }
                    if let Some(m) = &spec.mattermost {
                        refs.push(&m.bot_token);
                    }
                    refs
                }
                Resource::AlertSource(s) => {
                    let auth = &s.spec.auth;
                    auth.bearer_token
                        .iter()
                        .chain(&auth.hmac_secret)
                        .chain(auth.secret_header.iter().map(|h| &h.value))
                        .collect()
                }
                _ => Vec::new(),
            };
            for reference in references {
                if let Ok(value) = self.secrets.resolve(&key.namespace, reference) {
                    values.push(value.expose().to_string());
                }
            }
        }
        values
    }
}

/// The job a Run investigated (its `job_id` metadata).
fn job_of(run: &RunRecord) -> Option<&str> {
    run.metadata.get("job_id").and_then(Value::as_str)
}

/// Failures worth another attempt: the model server, a busy host, a protocol slip
/// of the model. Budget exhaustion, a rejected result and audit failures are not.
fn retryable(error: &RunError) -> bool {
    matches!(error, RunError::Upstream { .. } | RunError::Busy(_) | RunError::Model { .. })
}

/// The pause after `failures` job states in a row could not be recorded:
/// 1 s doubled per failure, at most 60 s; none without failures.
fn store_pause(failures: u32) -> Option<Duration> {
    let doubled = STORE_RETRY_BASE.saturating_mul(1u32 << failures.checked_sub(1)?.min(16));
    Some(doubled.min(STORE_RETRY_MAX))
}

/// `base × 2^(attempt-1)`, at most 16 × base.
pub fn backoff(base: Duration, attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(4);
    base.saturating_mul(factor.min(MAX_BACKOFF_FACTOR))
}

/// Error text safe to store: known secret values and credential-looking
/// fragments replaced, whitespace collapsed, bounded.
pub fn sanitize_error(raw: &str, secrets: &[String]) -> String {
    text::truncate_chars(&text::one_line(&crate::redact::redact_with(raw, secrets)), MAX_ERROR_CHARS, "…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_sixteen_times() {
        let base = Duration::from_secs(2);
        let waits: Vec<u64> = (1..=7).map(|a| backoff(base, a).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 32, 32]);
    }

    #[test]
    fn store_failures_pause_the_worker_exponentially_and_boundedly() {
        let pauses: Vec<Option<u64>> =
            [0, 1, 2, 3, 6, 7, 40].into_iter().map(|n| store_pause(n).map(|d| d.as_secs())).collect();
        assert_eq!(pauses, [None, Some(1), Some(2), Some(4), Some(32), Some(60), Some(60)]);
    }

    #[test]
    fn errors_are_sanitised() {
        let text = "model server answered HTTP 401: bad key sk-live-12345 (Authorization: Bearer abc.def) \
                    token=zzz&x=1 and\n\n  password: hunter2";
        let clean = sanitize_error(text, &["sk-live-12345".to_string()]);
        for secret in ["sk-live-12345", "abc.def", "zzz", "hunter2"] {
            assert!(!clean.contains(secret), "{clean}");
        }
        assert!(clean.starts_with("model server answered HTTP 401: bad key [redacted]"), "{clean}");
        assert_eq!(sanitize_error(&"x ".repeat(1000), &[]).chars().count(), MAX_ERROR_CHARS);
    }
}
