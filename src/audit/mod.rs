//! The audit log: Runs and their events on top of the journal. It stores what the
//! host did (tool calls with host-recorded arguments and raw results, skills,
//! retrieved context, usage) and never prompts, free-form model output,
//! credentials or approval capabilities. The one piece of model output it keeps is
//! an alert investigation's structured result, validated against the Run's own
//! tool calls when written and again at every replay.

mod id;
mod index;
mod query;
mod reads;
mod replay;
mod storage;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::investigation::InvestigationResult;
use crate::journal::{Journal, JournalError, Record};
use crate::text;

pub use id::{InvalidRunId, RunId};
pub(crate) use reads::ReadRecord;
use replay::Facts;
pub(crate) use replay::RecordError;
pub use storage::{AuditStorage, DEFAULT_SNAPSHOT_RECORDS, StartReport, verify};
use storage::{InFlight, Live};

/// Journal kind of a structured investigation result.
const INVESTIGATION_RESULT: &str = "investigation_result";
/// Event type of a tool call.
pub const TOOL_CALL: &str = "tool_call";
/// `call_kind` of a tool call through the Run's execution catalog (not the plan
/// submission, the automatic retrieval or a knowledge tool): the only calls that
/// count as evidence.
pub const CALL_KIND_EXECUTION: &str = "execution";
/// Longest string kept in Run fields and metadata values.
pub const MAX_TEXT_CHARS: usize = 512;
/// Most metadata entries kept per Run or event.
pub const MAX_METADATA: usize = 32;
/// Largest `limit` of a Run listing.
pub const MAX_LIST: usize = 1000;

/// Lifecycle of a Run in the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Still executing.
    Running,
    /// Finished with an answer.
    Succeeded,
    /// Finished without one.
    Failed,
}

/// One thing that happened in a Run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditEvent {
    /// 1-based position within the Run.
    pub sequence: u32,
    /// RFC 3339 time (the journal record's time).
    #[serde(default)]
    pub time: String,
    /// `tool_call`, `skill_selected`, `context_retrieved`, `follow_up`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// `succeeded`, `failed`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Small facts (redacted, bounded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, Value>,
    /// Host-recorded tool arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Raw tool result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// A Run as the journal knows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunRecord {
    /// Id.
    pub id: RunId,
    /// Namespace the Run belongs to (Runs journaled before tenancy: `default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// What started it (`chat`, `cli`, `alert:<provider>`, …).
    pub source: String,
    /// Who (API key name, `anonymous`, bot user).
    pub actor: String,
    /// Upstream model id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Catalog version the Run pinned.
    pub catalog_version: u64,
    /// Status.
    pub status: RunStatus,
    /// RFC 3339 start (the journal record's time).
    #[serde(default)]
    pub started_at: String,
    /// RFC 3339 end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Stable failure code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Usage and facts (redacted, bounded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, Value>,
    /// Events in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<AuditEvent>,
    /// The validated structured result of an alert investigation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation: Option<InvestigationResult>,
}

impl RunRecord {
    /// The Run without raw tool arguments and results (for listings).
    pub fn summary(&self) -> RunRecord {
        let mut run = self.clone();
        for event in &mut run.events {
            event.arguments = None;
            event.result = None;
        }
        run
    }
}

/// What opens a Run.
#[derive(Clone, Debug)]
pub struct NewRun {
    /// Namespace the Run belongs to.
    pub namespace: String,
    /// Source.
    pub source: String,
    /// Actor.
    pub actor: String,
    /// Model id.
    pub model: Option<String>,
    /// Catalog version.
    pub catalog_version: u64,
    /// Facts known at the start (redacted, bounded).
    pub metadata: BTreeMap<String, Value>,
}

fn default_namespace() -> String {
    crate::tenancy::DEFAULT_NAMESPACE.to_string()
}

/// An event to append.
#[derive(Clone, Debug, Default)]
pub struct NewEvent {
    /// Event type.
    pub kind: String,
    /// Status.
    pub status: Option<String>,
    /// Metadata.
    pub metadata: BTreeMap<String, Value>,
    /// Tool arguments.
    pub arguments: Option<Value>,
    /// Tool result.
    pub result: Option<Value>,
}

/// How a Run ended.
#[derive(Clone, Debug)]
pub struct Finish {
    /// Succeeded or failed.
    pub status: RunStatus,
    /// Error text.
    pub error: Option<String>,
    /// Error code.
    pub error_code: Option<String>,
    /// Usage and facts.
    pub metadata: BTreeMap<String, Value>,
}

/// Audit failures.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The journal holds a record the audit cannot apply.
    #[error(
        "audit journal {path}: record {seq} is inconsistent: {reason}; restore the journal from backup (`akritas audit verify` checks a copy)"
    )]
    Inconsistent {
        /// Path.
        path: String,
        /// Record sequence number.
        seq: u64,
        /// Why.
        reason: RecordError,
    },
    /// The records of a Run could not be read back from the journal.
    #[error("run {run}: its journal records cannot be read: {reason}")]
    Unreadable {
        /// Run.
        run: RunId,
        /// Why.
        reason: String,
    },
    /// No such Run.
    #[error("run not found: {0}")]
    UnknownRun(RunId),
    /// The Run is not running.
    #[error("run {0} already finished")]
    AlreadyFinished(RunId),
    /// A structured result the Run's own calls do not support; nothing was written.
    #[error("result of Run {run} rejected: {error}")]
    ResultRejected {
        /// Run.
        run: RunId,
        /// Why.
        error: crate::investigation::InvestigationError,
    },
    /// Something in this process is already writing to the Run (the Run itself or a follow-up).
    #[error("run {0} is busy: the Run or a follow-up on it is executing; retry when it has finished")]
    RunActive(RunId),
    /// The task writing the record stopped before it could say how the write went (the
    /// runtime is shutting down); the next start replays whatever reached the journal.
    #[error("the audit write was interrupted; the journal is replayed at the next start")]
    Interrupted,
}

/// The audit log. Records of one Run are written one at a time, each under the
/// Run's writer lock held from choosing its sequence to applying it after the
/// fsync, and in a task of its own, so a caller that goes away mid-write cannot
/// leave the journal and the state apart.
pub struct AuditLog {
    shared: Arc<Shared>,
}

struct Shared {
    journal: Journal,
    storage: AuditStorage,
    /// The Run index (not the Runs' history: detail is read from the journal).
    state: RwLock<Live>,
    /// What the start read.
    started: StartReport,
    /// The snapshot being written in the background, if any.
    snapshot_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// One writer lock per Run written by this process.
    writers: Mutex<HashMap<RunId, Arc<tokio::sync::Mutex<()>>>>,
    /// Runs something in this process is executing on (the Run itself or a follow-up).
    active: Mutex<HashSet<RunId>>,
    /// Where appends wait while a due snapshot waits for those in flight.
    barrier: crate::journal::pace::Barrier,
    /// Each key's reads of the current minute (`reads`).
    reads: reads::ReadBudget,
}

/// The right to execute on a Run: held by the Run while it executes and by a
/// follow-up while it runs, so no two of them interleave their events. Released
/// when dropped.
pub struct ActiveRun {
    shared: Arc<Shared>,
    id: RunId,
}

impl ActiveRun {
    /// The Run.
    pub fn id(&self) -> &RunId {
        &self.id
    }
}

impl Drop for ActiveRun {
    fn drop(&mut self) {
        lock(&self.shared.active).remove(&self.id);
    }
}

impl fmt::Debug for ActiveRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ActiveRun").field(&self.id).finish()
    }
}

impl AuditLog {
    /// Opens (or creates) the log with the default storage settings and replays it strictly.
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        AuditLog::open_with(path, AuditStorage::default())
    }

    /// Opens (or creates) the log: reads the snapshot of the Run index, if one matches the
    /// journal, and replays strictly the records after it (all of them otherwise).
    /// Blocking.
    pub fn open_with(path: &Path, storage: AuditStorage) -> Result<AuditLog, AuditError> {
        let (journal, live, started) = storage::open(path, &storage)?;
        let shared = Shared {
            journal,
            storage,
            state: RwLock::new(live),
            started,
            snapshot_task: Mutex::new(None),
            writers: Mutex::new(HashMap::new()),
            active: Mutex::new(HashSet::new()),
            barrier: crate::journal::pace::Barrier::default(),
            reads: reads::ReadBudget::default(),
        };
        Ok(AuditLog { shared: Arc::new(shared) })
    }

    /// The journal's last committed record: what the anchor outside the journal records.
    pub fn head(&self) -> crate::journal::Head {
        self.shared.journal.head()
    }

    /// The journal path.
    pub fn path(&self) -> &Path {
        self.shared.journal.path()
    }

    /// Why the audit journal refuses writes now (a write failed: disk full, read-only
    /// volume), if it does.
    pub fn write_failure(&self) -> Option<String> {
        self.shared.journal.failure()
    }

    /// Gets the journal writing again after a failed write, if the storage allows. The
    /// state needs no rebuild: a record is applied only after it was stored. Every write
    /// tries this first while the journal refuses, so Runs recover without a restart.
    pub async fn recover(&self) -> Result<(), AuditError> {
        Ok(self.shared.journal.recover().await?)
    }

    /// Opens a Run.
    pub async fn start(&self, new: NewRun) -> Result<RunId, AuditError> {
        let active = self.start_active(new).await?;
        Ok(active.id.clone())
    }

    /// Opens a Run and holds it active until the returned guard is dropped.
    pub async fn start_active(&self, new: NewRun) -> Result<ActiveRun, AuditError> {
        let id = RunId::generate();
        lock(&self.shared.active).insert(id.clone());
        let active = ActiveRun { shared: self.shared.clone(), id: id.clone() };
        let run = RunRecord {
            id: id.clone(),
            namespace: bound(&new.namespace),
            source: bound(&new.source),
            actor: bound(&new.actor),
            model: new.model.as_deref().map(bound),
            catalog_version: new.catalog_version,
            status: RunStatus::Running,
            started_at: String::new(),
            completed_at: None,
            error: None,
            error_code: None,
            metadata: redact(new.metadata),
            events: Vec::new(),
            investigation: None,
        };
        let data = json!({ "run": run });
        // Nothing else knows the id yet, so no writer lock is needed; the task keeps
        // the journal and the state together if the caller goes away.
        let shared = self.shared.clone();
        tokio::spawn(async move {
            shared.pass_barrier().await;
            let pending = shared.begin();
            let record = shared.append("run_started", &data, pending).await?;
            shared.apply_record(&record.0, record.1, None)
        })
        .await
        .map_err(|_| AuditError::Interrupted)??;
        Ok(active)
    }

    /// Holds the Run active for a follow-up; refused while the Run or another
    /// follow-up on it is executing.
    pub fn claim(&self, id: &RunId) -> Result<ActiveRun, AuditError> {
        if !self.shared.read().index.contains(id) {
            return Err(AuditError::UnknownRun(id.clone()));
        }
        if !lock(&self.shared.active).insert(id.clone()) {
            return Err(AuditError::RunActive(id.clone()));
        }
        Ok(ActiveRun { shared: self.shared.clone(), id: id.clone() })
    }

    /// Appends an event (also to finished Runs: follow-ups).
    pub async fn event(&self, run_id: &RunId, event: NewEvent) -> Result<u32, AuditError> {
        let record = self
            .write(run_id, false, move |id, run, _| {
                let sequence = u32::try_from(run.events + 1).unwrap_or(u32::MAX);
                let data = json!({
                    "run_id": id,
                    "event": {
                        "sequence": sequence,
                        "type": bound(&event.kind),
                        "status": event.status.as_deref().map(bound),
                        "metadata": redact(event.metadata),
                        "arguments": event.arguments,
                        "result": event.result,
                    }
                });
                Ok(("run_event", data))
            })
            .await?;
        let sequence = record.data["event"]["sequence"].as_u64().unwrap_or_default();
        Ok(u32::try_from(sequence).unwrap_or(u32::MAX))
    }

    /// Closes a Run.
    pub async fn finish(&self, run_id: &RunId, finish: Finish) -> Result<(), AuditError> {
        self.write(run_id, false, move |id, run, _| {
            if run.status != RunStatus::Running {
                return Err(AuditError::AlreadyFinished(id.clone()));
            }
            let data = json!({
                "run_id": id,
                "status": finish.status,
                "error": finish.error.as_deref().map(bound),
                "error_code": finish.error_code.as_deref().map(bound),
                "metadata": redact(finish.metadata),
            });
            Ok(("run_finished", data))
        })
        .await
        .map(|_| ())
    }

    /// Records the structured result of a running Run as its own record. The same
    /// validation runs here, before the append, and at every replay: each evidence
    /// reference must name a successful execution-tool call recorded on this Run.
    pub async fn record_investigation(&self, run_id: &RunId, result: &InvestigationResult) -> Result<(), AuditError> {
        let result = serde_json::to_value(result).unwrap_or(Value::Null);
        self.write(run_id, true, move |id, facts, run| {
            if facts.status != RunStatus::Running || facts.has_result {
                return Err(AuditError::AlreadyFinished(id.clone()));
            }
            let run = run.ok_or_else(|| AuditError::UnknownRun(id.clone()))?;
            replay::check_result(run, &result.to_string())
                .map_err(|error| AuditError::ResultRejected { run: id.clone(), error })?;
            Ok((INVESTIGATION_RESULT, json!({"run_id": id, "result": result})))
        })
        .await
        .map(|_| ())
    }

    /// Writes one record of a Run: `build` sees what the index knows of the Run under its
    /// writer lock (and, with `full`, the Run rebuilt from its records, read off the async
    /// threads) and returns the record (or why there is none).
    async fn write(
        &self,
        run_id: &RunId,
        full: bool,
        build: impl FnOnce(&RunId, Facts, Option<&RunRecord>) -> Result<(&'static str, Value), AuditError> + Send + 'static,
    ) -> Result<Record, AuditError> {
        let shared = self.shared.clone();
        let id = run_id.clone();
        tokio::spawn(async move {
            let writer = lock(&shared.writers).entry(id.clone()).or_default().clone();
            let written = async {
                let _turn = writer.lock().await;
                let facts = shared.read().index.facts(&id).ok_or_else(|| AuditError::UnknownRun(id.clone()))?;
                let run = if full {
                    Some(shared.load(&id).await?.ok_or_else(|| AuditError::UnknownRun(id.clone()))?)
                } else {
                    None
                };
                let (kind, data) = build(&id, facts, run.as_ref())?;
                shared.pass_barrier().await;
                let pending = shared.begin();
                let (record, pending) = shared.append(kind, &data, pending).await?;
                shared.apply_record(&record, pending, run.as_ref())?;
                Ok(record)
            }
            .await;
            // Forget the writer lock once nobody else holds or waits for it.
            let mut writers = lock(&shared.writers);
            if Arc::strong_count(&writer) == 2 {
                writers.remove(&id);
            }
            written
        })
        .await
        .map_err(|_| AuditError::Interrupted)?
    }

    /// Closes every Run still marked running as failed (`interrupted`): called at
    /// start, when no Run of this process exists yet, so each of them belonged to a
    /// process that stopped. Returns the closed Runs.
    pub async fn close_interrupted(&self) -> Result<Vec<RunRecord>, AuditError> {
        let running = self.shared.read().index.running();
        let mut closed = Vec::with_capacity(running.len());
        for id in running {
            let finish = Finish {
                status: RunStatus::Failed,
                error: Some("Akritas stopped while this Run was executing".into()),
                error_code: Some("interrupted".into()),
                metadata: BTreeMap::new(),
            };
            self.finish(&id, finish).await?;
            closed.extend(self.get(&id));
        }
        Ok(closed)
    }
}

impl Shared {
    /// Appends one record counted in flight, first getting the journal writing again if a
    /// write failed.
    async fn append(&self, kind: &str, data: &Value, pending: InFlight) -> Result<(Record, InFlight), JournalError> {
        let appended = async {
            if self.journal.failure().is_some() {
                self.journal.recover().await?;
            }
            self.journal.append(kind, data).await
        }
        .await;
        match appended {
            Ok(record) => Ok((record, pending)),
            Err(error) => {
                if storage::not_stored(&error) {
                    pending.not_written();
                }
                Err(error)
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Live> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The Run rebuilt from its records (read off the async threads); `None` when it is not
    /// indexed.
    async fn load(&self, id: &RunId) -> Result<Option<RunRecord>, AuditError> {
        let Some(locations) = self.read().index.locations(id) else { return Ok(None) };
        let journal = self.journal.clone();
        let id = id.clone();
        tokio::task::spawn_blocking(move || {
            index::load_run(&locations, &|at| journal.read_at(at))
                .map(Some)
                .map_err(|reason| AuditError::Unreadable { run: id, reason })
        })
        .await
        .map_err(|_| AuditError::Interrupted)?
    }
}

impl AuditError {
    /// Whether the journal could not be written (disk full, read-only volume): the
    /// record was not stored and a later write may succeed.
    pub fn is_unwritable(&self) -> bool {
        matches!(self, AuditError::Journal(error) if error.is_unwritable())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn bound(value: &str) -> String {
    text::prefix_chars(value, MAX_TEXT_CHARS).to_string()
}

/// Whether a metadata key may hold a credential. Counters such as `output_tokens`
/// are kept; `token`, `bearer_token`, `api_key`, `password`, `secret` are dropped.
pub fn is_sensitive_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["authorization", "api_key", "apikey", "password", "passwd", "secret", "credential", "cookie"]
        .iter()
        .any(|word| key.contains(word))
        || key == "token"
        || key.ends_with("_token")
        || key.ends_with("-token")
}

fn redact(metadata: BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    metadata
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .filter(|(k, _)| !is_sensitive_key(k))
        .take(MAX_METADATA)
        .map(|(k, v)| match v {
            Value::String(s) => (k, Value::String(bound(&s))),
            other => (k, other),
        })
        .collect()
}
