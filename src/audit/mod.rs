//! The audit log: Runs and their events on top of the journal. It stores what the
//! host did (tool calls with host-recorded arguments and raw results, skills,
//! retrieved context, usage) and never prompts, free-form model output,
//! credentials or approval capabilities. The one piece of model output it keeps is
//! an alert investigation's structured result, validated against the Run's own
//! tool calls when written and again at every replay.

mod database;
mod file;
mod id;
mod index;
mod query;
mod reads;
mod replay;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::investigation::InvestigationResult;
use crate::journal::database::{Database, DatabaseError, Replica};
use crate::journal::{JournalError, Record};
use crate::text;

pub use database::{DatabaseVerified, STORE, verify as verify_database};
pub use file::{AuditStorage, DEFAULT_SNAPSHOT_RECORDS, StartReport, verify};
pub use id::{InvalidRunId, RunId};
pub(crate) use reads::ReadRecord;
use replay::Facts;
pub(crate) use replay::RecordError;
pub use replay::run_of;

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
    /// `run_` and 32 random hex digits, chosen when the Run opens.
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
    /// `running` until the finish record, then `succeeded` or `failed` (see `error_code`).
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
    /// A succeeded Run of `source` in `namespace` by `actor`, with no event (for tests).
    #[cfg(test)]
    pub(crate) fn finished(namespace: &str, source: &str, actor: &str) -> RunRecord {
        RunRecord {
            namespace: namespace.into(),
            id: RunId::generate(),
            source: source.into(),
            actor: actor.into(),
            model: None,
            catalog_version: 1,
            status: RunStatus::Succeeded,
            started_at: String::new(),
            completed_at: None,
            error: None,
            error_code: None,
            metadata: BTreeMap::new(),
            events: Vec::new(),
            investigation: None,
        }
    }

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
    /// What starts the Run (`chat`, `cli`, `alert:<provider>`, `change_preview`, …).
    pub source: String,
    /// Who asked for it: an API key name, `anonymous` or a bot user.
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
    /// `succeeded`, `failed` or `started`, when the event has an outcome.
    pub status: Option<String>,
    /// Small facts such as `tool`, `call_id` and `duration_ms`; the audit redacts and bounds them.
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
        /// The journal file that holds the record.
        path: String,
        /// Record sequence number.
        seq: u64,
        /// Why replay could not apply it (unknown Run, events out of order, a rejected result, …).
        reason: RecordError,
    },
    /// The records of a Run could not be read back from the journal.
    #[error("run {run}: its journal records cannot be read: {reason}")]
    Unreadable {
        /// The Run whose records were asked for.
        run: RunId,
        /// What failed: a read at a stored location, or a record filed under another Run.
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
        /// The Run the result was submitted for.
        run: RunId,
        /// The rule the result breaks against the Run's recorded calls.
        error: crate::investigation::InvestigationError,
    },
    /// Something in this process is already writing to the Run (the Run itself or a follow-up).
    #[error("run {0} is busy: the Run or a follow-up on it is executing; retry when it has finished")]
    RunActive(RunId),
    /// The task writing the record stopped before it could say how the write went (the
    /// runtime is shutting down); the next start replays whatever reached the journal.
    #[error("the audit write was interrupted; the journal is replayed at the next start")]
    Interrupted,
    /// The database failed (unreachable, or a statement refused); nothing of the write was
    /// stored.
    #[error("the audit database: {0}")]
    Database(#[from] DatabaseError),
    /// A record the Run's lifecycle does not allow (a replay would refuse it); nothing was
    /// written.
    #[error("the audit refused a record: {0}")]
    Refused(RecordError),
}

/// What a write of one Run decides from what is known of the Run (and, when asked, the Run
/// itself): its record's kind and data, or why there is none.
type Build = Box<dyn FnOnce(&RunId, Facts, Option<&RunRecord>) -> Result<(&'static str, Value), AuditError> + Send>;

/// Runs something in this process is executing on (the Run itself or a follow-up).
type ActiveSet = Arc<Mutex<HashSet<RunId>>>;

/// One writer lock per Run written by this process, forgotten once nobody holds or waits for it.
#[derive(Clone, Default)]
struct RunLocks(Arc<Mutex<HashMap<RunId, Arc<tokio::sync::Mutex<()>>>>>);

impl RunLocks {
    /// Runs `work` holding the Run's writer lock.
    async fn hold<T>(&self, id: &RunId, work: impl std::future::Future<Output = T>) -> T {
        let writer = lock(&self.0).entry(id.clone()).or_default().clone();
        let done = {
            let _turn = writer.lock().await;
            work.await
        };
        let mut writers = lock(&self.0);
        if Arc::strong_count(&writer) == 2 {
            writers.remove(id);
        }
        done
    }
}

/// The audit log, on the embedded journal ([`file`]) or on the database replicas share
/// ([`database`]): the same records, checks and answers on both.
pub struct AuditLog {
    backend: Backend,
    active: ActiveSet,
    /// Each key's reads of the current minute (`reads`).
    reads: reads::ReadBudget,
}

enum Backend {
    File(file::FileAudit),
    Database(Box<database::DbAudit>),
}

/// The right to execute on a Run: held by the Run while it executes and by a
/// follow-up while it runs, so no two of them interleave their events. Released
/// when dropped.
pub struct ActiveRun {
    active: ActiveSet,
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
        lock(&self.active).remove(&self.id);
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

    /// Opens (or creates) the log on the embedded journal at `path`: reads the snapshot of the
    /// Run index, if one matches the journal, and replays strictly the records after it (all of
    /// them otherwise). Blocking.
    pub fn open_with(path: &Path, storage: AuditStorage) -> Result<AuditLog, AuditError> {
        let active = ActiveSet::default();
        let file = file::FileAudit::open(path, storage, active.clone())?;
        Ok(AuditLog { backend: Backend::File(file), active, reads: reads::ReadBudget::default() })
    }

    /// The log on the database (its schema migrated) that replicas share, written by
    /// `replica`: records are stamped, bounded and sealed as `storage.journal` says, and
    /// `storage.retention` deletes old ones. Starts its writer on the current runtime.
    pub fn open_database(db: &Database, storage: AuditStorage, replica: Replica) -> AuditLog {
        let backend = Backend::Database(Box::new(database::DbAudit::open(db, storage, replica)));
        AuditLog { backend, active: ActiveSet::default(), reads: reads::ReadBudget::default() }
    }

    /// Whether the log is on the database.
    pub fn on_database(&self) -> bool {
        matches!(self.backend, Backend::Database(_))
    }

    /// The embedded journal's last committed record: what the anchor outside the journal
    /// records (`None` on the database, whose head row is its own anchor).
    pub fn head(&self) -> Option<crate::journal::Head> {
        match &self.backend {
            Backend::File(file) => Some(file.shared.journal.head()),
            Backend::Database(_) => None,
        }
    }

    /// The embedded journal's path (`None` on the database).
    pub fn path(&self) -> Option<&Path> {
        match &self.backend {
            Backend::File(file) => Some(file.shared.journal.path()),
            Backend::Database(_) => None,
        }
    }

    /// Why the embedded journal refuses writes now (a write failed: disk full, read-only
    /// volume), if it does. On the database each write says why it failed.
    pub fn write_failure(&self) -> Option<String> {
        match &self.backend {
            Backend::File(file) => file.shared.journal.failure(),
            Backend::Database(_) => None,
        }
    }

    /// Gets the embedded journal writing again after a failed write, if the storage allows.
    /// The state needs no rebuild: a record is applied only after it was stored. Every write
    /// tries this first while the journal refuses, so Runs recover without a restart.
    pub async fn recover(&self) -> Result<(), AuditError> {
        match &self.backend {
            Backend::File(file) => Ok(file.shared.journal.recover().await?),
            Backend::Database(_) => Ok(()),
        }
    }

    /// Opens a Run.
    pub async fn start(&self, new: NewRun) -> Result<RunId, AuditError> {
        let active = self.start_active(new).await?;
        Ok(active.id.clone())
    }

    /// Opens a Run and holds it active until the returned guard is dropped.
    pub async fn start_active(&self, new: NewRun) -> Result<ActiveRun, AuditError> {
        let id = RunId::generate();
        lock(&self.active).insert(id.clone());
        let active = ActiveRun { active: self.active.clone(), id: id.clone() };
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
        match &self.backend {
            Backend::File(file) => file.start(data).await?,
            Backend::Database(db) => db.start(&id, data).await?,
        }
        Ok(active)
    }

    /// Holds the Run active for a follow-up; refused while the Run or another
    /// follow-up on it is executing in this process.
    pub async fn claim(&self, id: &RunId) -> Result<ActiveRun, AuditError> {
        let known = match &self.backend {
            Backend::File(file) => file.contains(id),
            Backend::Database(db) => db.contains(id).await?,
        };
        if !known {
            return Err(AuditError::UnknownRun(id.clone()));
        }
        if !lock(&self.active).insert(id.clone()) {
            return Err(AuditError::RunActive(id.clone()));
        }
        Ok(ActiveRun { active: self.active.clone(), id: id.clone() })
    }

    /// Appends an event (also to finished Runs: follow-ups).
    pub async fn event(&self, run_id: &RunId, event: NewEvent) -> Result<u32, AuditError> {
        let build: Build = Box::new(move |id, run, _| {
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
        });
        let record = self.write(run_id, false, build).await?;
        let sequence = record.data["event"]["sequence"].as_u64().unwrap_or_default();
        Ok(u32::try_from(sequence).unwrap_or(u32::MAX))
    }

    /// Closes a Run.
    pub async fn finish(&self, run_id: &RunId, finish: Finish) -> Result<(), AuditError> {
        let build: Build = Box::new(move |id, run, _| {
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
        });
        self.write(run_id, false, build).await.map(|_| ())
    }

    /// Records the structured result of a running Run as its own record. The same
    /// validation runs here, before the append, and at every replay: each evidence
    /// reference must name a successful execution-tool call recorded on this Run.
    pub async fn record_investigation(&self, run_id: &RunId, result: &InvestigationResult) -> Result<(), AuditError> {
        let result = serde_json::to_value(result).unwrap_or(Value::Null);
        let build: Build = Box::new(move |id, facts, run| {
            if facts.status != RunStatus::Running || facts.has_result {
                return Err(AuditError::AlreadyFinished(id.clone()));
            }
            let run = run.ok_or_else(|| AuditError::UnknownRun(id.clone()))?;
            replay::check_result(run, &result.to_string())
                .map_err(|error| AuditError::ResultRejected { run: id.clone(), error })?;
            Ok((INVESTIGATION_RESULT, json!({"run_id": id, "result": result})))
        });
        self.write(run_id, true, build).await.map(|_| ())
    }

    async fn write(&self, run_id: &RunId, full: bool, build: Build) -> Result<Record, AuditError> {
        match &self.backend {
            Backend::File(file) => file.write(run_id, full, build).await,
            Backend::Database(db) => db.write(run_id, full, build).await,
        }
    }

    /// Closes as failed (`interrupted`) every Run still marked running that no process will
    /// finish: on the embedded journal, called at start when no Run of this process exists
    /// yet, all of them; on the database, those of replicas that stopped heartbeating.
    /// Returns the closed Runs.
    pub async fn close_interrupted(&self) -> Result<Vec<RunRecord>, AuditError> {
        let running = match &self.backend {
            Backend::File(file) => file.running(),
            Backend::Database(db) => db.orphaned().await?,
        };
        let mut closed = Vec::with_capacity(running.len());
        for id in running {
            let finish = Finish {
                status: RunStatus::Failed,
                error: Some("Akritas stopped while this Run was executing".into()),
                error_code: Some("interrupted".into()),
                metadata: BTreeMap::new(),
            };
            match self.finish(&id, finish).await {
                Ok(()) => closed.extend(self.get(&id).await?),
                // Another replica closed it meanwhile.
                Err(AuditError::AlreadyFinished(_)) if self.on_database() => {}
                Err(error) => return Err(error),
            }
        }
        Ok(closed)
    }
}

impl AuditError {
    /// Whether the journal could not be written (disk full, read-only volume): the
    /// record was not stored and a later write may succeed.
    pub fn is_unwritable(&self) -> bool {
        matches!(self, AuditError::Journal(error) if error.is_unwritable())
    }

    /// Whether the database could not be reached: nothing was stored and a later write may
    /// succeed.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, AuditError::Database(DatabaseError::Unreachable(_)))
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
