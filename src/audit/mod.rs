//! The audit log: Runs and their events on top of the journal. It stores what the
//! host did (tool calls with host-recorded arguments and raw results, skills,
//! retrieved context, usage) and never prompts, free-form model output,
//! credentials or approval capabilities. The one piece of model output it keeps is
//! an alert investigation's structured result, validated against the Run's own
//! tool calls when written and again at every replay.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::investigation::{self, InvestigationError, InvestigationResult};
use crate::journal::{Journal, JournalError, JournalOptions, Record};
use crate::text;

/// Journal kind of a structured investigation result.
const INVESTIGATION_RESULT: &str = "investigation_result";
/// Longest string kept in Run fields and metadata values.
pub const MAX_TEXT_CHARS: usize = 512;
/// Most metadata entries kept per Run or event.
pub const MAX_METADATA: usize = 32;
/// Largest `limit` of a Run listing.
pub const MAX_LIST: usize = 1000;

/// A Run id: `run_` and 32 lower-case hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    /// A new random id.
    pub fn generate() -> Self {
        Self(format!("run_{:032x}", rand::random::<u128>()))
    }

    /// Parses an id.
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix("run_")?;
        (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            .then(|| Self(text.to_string()))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Text that is not a Run id.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a Run id")]
pub struct InvalidRunId(String);

impl TryFrom<String> for RunId {
    type Error = InvalidRunId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        RunId::parse(&value).ok_or(InvalidRunId(value))
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.0
    }
}

/// Lifecycle of a Run in the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
        "audit journal {path}: record {seq} is inconsistent: {reason}; run `akritas audit verify {path}` and restore from backup"
    )]
    Inconsistent {
        /// Path.
        path: String,
        /// Record sequence number.
        seq: u64,
        /// Why.
        reason: RecordError,
    },
    /// No such Run.
    #[error("run not found: {0}")]
    UnknownRun(RunId),
    /// The Run is not running.
    #[error("run {0} already finished")]
    AlreadyFinished(RunId),
}

/// Why a journal record cannot be applied to the Runs it follows.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The record does not name a valid Run id.
    #[error("run_id: {0}")]
    RunId(serde_json::Error),
    /// A start record does not hold a Run.
    #[error("run: {0}")]
    Run(serde_json::Error),
    /// A start record holds a Run that already ran.
    #[error("a started Run must be running and have no events")]
    NotFresh,
    /// A second start of the same Run.
    #[error("Run {0} started twice")]
    StartedTwice(RunId),
    /// An event record does not hold an event.
    #[error("event: {0}")]
    Event(serde_json::Error),
    /// An event of a Run the journal never started.
    #[error("event for unknown Run {0}")]
    EventOfUnknownRun(RunId),
    /// An event out of order.
    #[error("event sequence {sequence} of Run {run} does not follow {last}")]
    OutOfSequence {
        /// Run.
        run: RunId,
        /// Sequence number of the event.
        sequence: u32,
        /// Events the Run had.
        last: usize,
    },
    /// A finish of a Run the journal never started.
    #[error("finish of unknown Run {0}")]
    FinishOfUnknownRun(RunId),
    /// A second finish of the same Run.
    #[error("Run {0} finished twice")]
    FinishedTwice(RunId),
    /// A finish record without a valid status.
    #[error("status: {0}")]
    Status(serde_json::Error),
    /// A finish record that leaves the Run running.
    #[error("a finish must be succeeded or failed")]
    FinishStillRunning,
    /// A result of a Run the journal never started.
    #[error("result of unknown Run {0}")]
    ResultOfUnknownRun(RunId),
    /// A second result, or a result after the finish.
    #[error("Run {0} has a result already or is not running")]
    ResultNotAllowed(RunId),
    /// A result the validation rejects.
    #[error("result of Run {run}: {error}")]
    Result {
        /// Run.
        run: RunId,
        /// Why.
        error: InvestigationError,
    },
    /// A record kind this version does not know.
    #[error("unknown record kind {0:?}")]
    UnknownKind(String),
}

struct State {
    runs: HashMap<RunId, RunRecord>,
    order: Vec<RunId>,
}

/// The audit log.
pub struct AuditLog {
    journal: Journal,
    state: RwLock<State>,
}

impl AuditLog {
    /// Opens (or creates) the log and replays it strictly.
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        let (journal, replay) = Journal::open(path, JournalOptions::default())?;
        for record in &replay.recovered {
            tracing::warn!(path = %path.display(), seq = record.seq, kind = %record.kind, data = %record.data, "audit journal recovered after a crash");
        }
        let mut state = State { runs: HashMap::new(), order: Vec::new() };
        for record in &replay.records {
            apply(&mut state, record).map_err(|reason| AuditError::Inconsistent {
                path: path.display().to_string(),
                seq: record.seq,
                reason,
            })?;
        }
        Ok(AuditLog { journal, state: RwLock::new(state) })
    }

    /// The journal path.
    pub fn path(&self) -> &Path {
        self.journal.path()
    }

    /// Opens a Run.
    pub async fn start(&self, new: NewRun) -> Result<RunId, AuditError> {
        let id = RunId::generate();
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
        let record = self.journal.append("run_started", &json!({ "run": run })).await?;
        self.apply_record(&record)?;
        Ok(id)
    }

    /// Appends an event (also to finished Runs: follow-ups).
    pub async fn event(&self, run_id: &RunId, event: NewEvent) -> Result<u32, AuditError> {
        let sequence = {
            let state = self.read();
            let run = state.runs.get(run_id).ok_or_else(|| AuditError::UnknownRun(run_id.clone()))?;
            u32::try_from(run.events.len() + 1).unwrap_or(u32::MAX)
        };
        let data = json!({
            "run_id": run_id,
            "event": {
                "sequence": sequence,
                "type": bound(&event.kind),
                "status": event.status.as_deref().map(bound),
                "metadata": redact(event.metadata),
                "arguments": event.arguments,
                "result": event.result,
            }
        });
        let record = self.journal.append("run_event", &data).await?;
        self.apply_record(&record)?;
        Ok(sequence)
    }

    /// Closes a Run.
    pub async fn finish(&self, run_id: &RunId, finish: Finish) -> Result<(), AuditError> {
        {
            let state = self.read();
            let run = state.runs.get(run_id).ok_or_else(|| AuditError::UnknownRun(run_id.clone()))?;
            if run.status != RunStatus::Running {
                return Err(AuditError::AlreadyFinished(run_id.clone()));
            }
        }
        let data = json!({
            "run_id": run_id,
            "status": finish.status,
            "error": finish.error.as_deref().map(bound),
            "error_code": finish.error_code.as_deref().map(bound),
            "metadata": redact(finish.metadata),
        });
        let record = self.journal.append("run_finished", &data).await?;
        self.apply_record(&record)
    }

    /// Records the structured result of a running Run as its own record. The same
    /// validation runs here and at every replay: each evidence reference must name a
    /// tool call recorded on this Run before the result.
    pub async fn record_investigation(&self, run_id: &RunId, result: &InvestigationResult) -> Result<(), AuditError> {
        {
            let state = self.read();
            let run = state.runs.get(run_id).ok_or_else(|| AuditError::UnknownRun(run_id.clone()))?;
            if run.status != RunStatus::Running {
                return Err(AuditError::AlreadyFinished(run_id.clone()));
            }
        }
        let record = self.journal.append(INVESTIGATION_RESULT, &json!({"run_id": run_id, "result": result})).await?;
        self.apply_record(&record)
    }

    /// Closes every Run still marked running as failed (`interrupted`): called at
    /// start, when no Run of this process exists yet, so each of them belonged to a
    /// process that stopped. Returns the closed Runs.
    pub async fn close_interrupted(&self) -> Result<Vec<RunRecord>, AuditError> {
        let running: Vec<RunId> = {
            let state = self.read();
            state
                .order
                .iter()
                .filter(|id| state.runs.get(*id).is_some_and(|r| r.status == RunStatus::Running))
                .cloned()
                .collect()
        };
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

    /// Runs, newest first, without raw tool payloads.
    pub fn list(&self, limit: usize) -> Vec<RunRecord> {
        self.list_where(limit, |_| true)
    }

    /// The newest `limit` Runs (at most [`MAX_LIST`]) of the namespaces `visible` accepts.
    pub fn list_where(&self, limit: usize, visible: impl Fn(&str) -> bool) -> Vec<RunRecord> {
        let state = self.read();
        state
            .order
            .iter()
            .rev()
            .filter_map(|id| state.runs.get(id))
            .filter(|run| visible(&run.namespace))
            .take(limit.min(MAX_LIST))
            .map(RunRecord::summary)
            .collect()
    }

    /// One Run with its raw tool payloads.
    pub fn get(&self, id: &RunId) -> Option<RunRecord> {
        self.read().runs.get(id).cloned()
    }

    /// Runs by status (`running`, `succeeded`, `failed`).
    pub fn status_counts(&self) -> BTreeMap<&'static str, u64> {
        let state = self.read();
        let mut counts = BTreeMap::from([("running", 0), ("succeeded", 0), ("failed", 0)]);
        for run in state.runs.values() {
            let name = match run.status {
                RunStatus::Running => "running",
                RunStatus::Succeeded => "succeeded",
                RunStatus::Failed => "failed",
            };
            *counts.entry(name).or_default() += 1;
        }
        counts
    }

    /// Number of Runs.
    pub fn len(&self) -> usize {
        self.read().order.len()
    }

    /// Whether there are no Runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn apply_record(&self, record: &Record) -> Result<(), AuditError> {
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        apply(&mut state, record).map_err(|reason| AuditError::Inconsistent {
            path: self.journal.path().display().to_string(),
            seq: record.seq,
            reason,
        })
    }
}

/// Applies one journal record to the in-memory state; the same code runs at
/// replay and after each append, so both always agree.
fn apply(state: &mut State, record: &Record) -> Result<(), RecordError> {
    let run_id = |data: &Value| -> Result<RunId, RecordError> {
        serde_json::from_value(data.get("run_id").cloned().unwrap_or(Value::Null)).map_err(RecordError::RunId)
    };
    match record.kind.as_str() {
        "run_started" => {
            let mut run: RunRecord = serde_json::from_value(record.data.get("run").cloned().unwrap_or(Value::Null))
                .map_err(RecordError::Run)?;
            if run.status != RunStatus::Running || !run.events.is_empty() {
                return Err(RecordError::NotFresh);
            }
            if state.runs.contains_key(&run.id) {
                return Err(RecordError::StartedTwice(run.id));
            }
            run.started_at = record.time.clone();
            state.order.push(run.id.clone());
            state.runs.insert(run.id.clone(), run);
        }
        "run_event" => {
            let id = run_id(&record.data)?;
            let mut event: AuditEvent =
                serde_json::from_value(record.data.get("event").cloned().unwrap_or(Value::Null))
                    .map_err(RecordError::Event)?;
            let Some(run) = state.runs.get_mut(&id) else { return Err(RecordError::EventOfUnknownRun(id)) };
            if event.sequence as usize != run.events.len() + 1 {
                return Err(RecordError::OutOfSequence { run: id, sequence: event.sequence, last: run.events.len() });
            }
            event.time = record.time.clone();
            run.events.push(event);
        }
        "run_finished" => {
            let id = run_id(&record.data)?;
            let Some(run) = state.runs.get_mut(&id) else { return Err(RecordError::FinishOfUnknownRun(id)) };
            if run.status != RunStatus::Running {
                return Err(RecordError::FinishedTwice(id));
            }
            let status: RunStatus = serde_json::from_value(record.data.get("status").cloned().unwrap_or(Value::Null))
                .map_err(RecordError::Status)?;
            if status == RunStatus::Running {
                return Err(RecordError::FinishStillRunning);
            }
            let text = |key: &str| record.data.get(key).and_then(Value::as_str).map(str::to_string);
            run.status = status;
            run.completed_at = Some(record.time.clone());
            run.error = text("error");
            run.error_code = text("error_code");
            if let Some(metadata) = record.data.get("metadata").and_then(Value::as_object) {
                run.metadata.extend(metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        INVESTIGATION_RESULT => {
            let id = run_id(&record.data)?;
            let Some(run) = state.runs.get_mut(&id) else { return Err(RecordError::ResultOfUnknownRun(id)) };
            if run.status != RunStatus::Running || run.investigation.is_some() {
                return Err(RecordError::ResultNotAllowed(id));
            }
            let text = record.data.get("result").map(Value::to_string).unwrap_or_default();
            let calls: BTreeSet<String> = run
                .events
                .iter()
                .filter(|e| e.kind == "tool_call")
                .filter_map(|e| e.metadata.get("call_id").and_then(Value::as_str).map(str::to_string))
                .collect();
            let result =
                investigation::validate(&text, &calls).map_err(|error| RecordError::Result { run: id, error })?;
            run.investigation = Some(result);
        }
        other => return Err(RecordError::UnknownKind(other.to_string())),
    }
    Ok(())
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
