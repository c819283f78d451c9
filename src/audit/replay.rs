//! How journal records become Runs: the one `apply` that runs at every start, after
//! every append and in `akritas audit verify`, so the three always agree.

use std::collections::HashMap;

use serde_json::Value;

use super::{AuditEvent, CALL_KIND_EXECUTION, INVESTIGATION_RESULT, RunId, RunRecord, RunStatus, TOOL_CALL};
use crate::investigation::{self, Evidence, InvestigationError, InvestigationResult};
use crate::journal::Record;

/// The Runs as the journal built them.
#[derive(Default)]
pub(super) struct State {
    pub(super) runs: HashMap<RunId, RunRecord>,
    pub(super) order: Vec<RunId>,
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

/// Applies one journal record to the in-memory state; the same code runs at
/// replay and after each append, so both always agree.
pub(super) fn apply(state: &mut State, record: &Record) -> Result<(), RecordError> {
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
            let result = check_result(run, &text).map_err(|error| RecordError::Result { run: id, error })?;
            run.investigation = Some(result);
        }
        other => return Err(RecordError::UnknownKind(other.to_string())),
    }
    Ok(())
}

/// Validates a structured result against the Run it belongs to: every evidence
/// reference must name a successful execution-tool call of the Run by its
/// host-assigned id, and a quoted value must occur in that call's stored output.
pub(super) fn check_result(run: &RunRecord, text: &str) -> Result<InvestigationResult, InvestigationError> {
    investigation::validate(text, &evidence(&run.events))
}

/// The calls of a Run that count as evidence, with their stored output. Tool calls
/// journaled before the host assigned call ids (no `call_kind`) keep the rule they
/// were accepted under: any call id of the Run.
pub(super) fn evidence(events: &[AuditEvent]) -> Evidence {
    events
        .iter()
        .filter(|e| e.kind == TOOL_CALL)
        .filter(|e| match e.metadata.get("call_kind") {
            Some(kind) => kind == CALL_KIND_EXECUTION && e.status.as_deref() == Some("succeeded"),
            None => true,
        })
        .filter_map(|e| {
            let id = e.metadata.get("call_id").and_then(Value::as_str)?;
            let output = e.result.as_ref().and_then(|r| r.get("output")).cloned().unwrap_or(Value::Null);
            Some((id.to_string(), output))
        })
        .collect()
}
