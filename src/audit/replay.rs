//! How journal records become Runs: the one `apply` that runs at every start, after
//! every append and in `akritas audit verify`, so the three always agree.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::reads::{READ, ReadRecord};
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
        /// The Run whose event numbering broke.
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
        /// The Run whose journaled result failed validation at replay.
        run: RunId,
        /// The rule the stored result breaks, checked against the Run's recorded calls.
        error: InvestigationError,
    },
    /// A record of the Run could not be read back to check a result against it.
    #[error("result of Run {run}: its records cannot be read: {reason}")]
    Unreadable {
        /// The Run whose result was being checked.
        run: RunId,
        /// Why a record at one of the Run's stored locations could not be read.
        reason: String,
    },
    /// A read record that does not hold a read.
    #[error("read: {0}")]
    Read(serde_json::Error),
    /// A record kind this version does not know.
    #[error("unknown record kind {0:?}")]
    UnknownKind(String),
}

/// One audit record, parsed.
pub(super) enum Op {
    /// A Run started.
    Started(Box<RunRecord>),
    /// An event of a Run.
    Event(RunId, Box<AuditEvent>),
    /// A Run finished.
    Finished {
        /// The Run the finish record closes.
        id: RunId,
        /// `succeeded` or `failed`; a finish that says `running` is refused.
        status: RunStatus,
    },
    /// The structured result of a Run (its JSON text).
    Result(RunId, String),
    /// A read through the MCP server: part of no Run.
    Read,
}

impl Op {
    /// The Run the record belongs to (none for a read).
    pub(super) fn run_id(&self) -> Option<&RunId> {
        match self {
            Op::Started(run) => Some(&run.id),
            Op::Event(id, _) | Op::Finished { id, .. } | Op::Result(id, _) => Some(id),
            Op::Read => None,
        }
    }
}

/// What the lifecycle checks need to know of the Run a record names.
#[derive(Clone, Copy)]
pub(super) struct Facts {
    pub(super) status: RunStatus,
    pub(super) events: usize,
    pub(super) has_result: bool,
}

/// The Run an audit record belongs to (none for a read), for filing it under that Run: its
/// payload is checked as a replay checks it.
pub fn run_of(record: &Record) -> Result<Option<RunId>, String> {
    Ok(parse(record).map_err(|e| e.to_string())?.run_id().cloned())
}

/// Parses one journal record (the payload checks that need no Run).
pub(super) fn parse(record: &Record) -> Result<Op, RecordError> {
    // Deserialized from the record's value in place: a raw tool result is copied once.
    let field = |key: &str| record.data.get(key).unwrap_or(&Value::Null);
    let run_id = || -> Result<RunId, RecordError> { RunId::deserialize(field("run_id")).map_err(RecordError::RunId) };
    Ok(match record.kind.as_str() {
        "run_started" => {
            let mut run = RunRecord::deserialize(field("run")).map_err(RecordError::Run)?;
            if run.status != RunStatus::Running || !run.events.is_empty() {
                return Err(RecordError::NotFresh);
            }
            run.started_at = record.time.clone();
            Op::Started(Box::new(run))
        }
        "run_event" => {
            let id = run_id()?;
            let mut event = AuditEvent::deserialize(field("event")).map_err(RecordError::Event)?;
            event.time = record.time.clone();
            Op::Event(id, Box::new(event))
        }
        "run_finished" => {
            let id = run_id()?;
            let status = RunStatus::deserialize(field("status")).map_err(RecordError::Status)?;
            Op::Finished { id, status }
        }
        INVESTIGATION_RESULT => {
            let id = run_id()?;
            Op::Result(id, record.data.get("result").map(Value::to_string).unwrap_or_default())
        }
        READ => {
            ReadRecord::deserialize(field("read")).map_err(RecordError::Read)?;
            Op::Read
        }
        other => return Err(RecordError::UnknownKind(other.to_string())),
    })
}

/// The lifecycle rules, given what is known of the Run the record names (`None`: unknown).
/// A result's evidence is checked by the caller, which has the Run's events.
pub(super) fn check(op: &Op, run: Option<Facts>) -> Result<(), RecordError> {
    let Some(id) = op.run_id().cloned() else { return Ok(()) };
    match (op, run) {
        (Op::Started(_), Some(_)) => Err(RecordError::StartedTwice(id)),
        (Op::Started(_), None) => Ok(()),
        (Op::Event(..), None) => Err(RecordError::EventOfUnknownRun(id)),
        (Op::Event(_, event), Some(run)) if event.sequence as usize != run.events + 1 => {
            Err(RecordError::OutOfSequence { run: id, sequence: event.sequence, last: run.events })
        }
        (Op::Event(..), Some(_)) => Ok(()),
        (Op::Finished { .. }, None) => Err(RecordError::FinishOfUnknownRun(id)),
        (Op::Finished { .. }, Some(run)) if run.status != RunStatus::Running => Err(RecordError::FinishedTwice(id)),
        (Op::Finished { status: RunStatus::Running, .. }, Some(_)) => Err(RecordError::FinishStillRunning),
        (Op::Finished { .. }, Some(_)) => Ok(()),
        (Op::Result(..), None) => Err(RecordError::ResultOfUnknownRun(id)),
        (Op::Result(..), Some(run)) if run.status != RunStatus::Running || run.has_result => {
            Err(RecordError::ResultNotAllowed(id))
        }
        (Op::Result(..), Some(_)) => Ok(()),
        (Op::Read, _) => Ok(()),
    }
}

/// What the checks know of a full Run.
pub(super) fn facts(run: &RunRecord) -> Facts {
    Facts { status: run.status, events: run.events.len(), has_result: run.investigation.is_some() }
}

/// Applies one journal record to a state of full Runs (Run detail is rebuilt with it from
/// the Run's records); the index applies the same [`parse`] and [`check`].
pub(super) fn apply(state: &mut State, record: &Record) -> Result<(), RecordError> {
    let op = parse(record)?;
    let Some(run_id) = op.run_id() else { return Ok(()) };
    check(&op, state.runs.get(run_id).map(facts))?;
    match op {
        Op::Read => {}
        Op::Started(run) => {
            state.order.push(run.id.clone());
            state.runs.insert(run.id.clone(), *run);
        }
        Op::Event(id, event) => {
            if let Some(run) = state.runs.get_mut(&id) {
                run.events.push(*event);
            }
        }
        Op::Finished { id, status } => {
            if let Some(run) = state.runs.get_mut(&id) {
                finish(run, status, record);
            }
        }
        Op::Result(id, text) => {
            if let Some(run) = state.runs.get_mut(&id) {
                let result = check_result(run, &text).map_err(|error| RecordError::Result { run: id, error })?;
                run.investigation = Some(result);
            }
        }
    }
    Ok(())
}

fn finish(run: &mut RunRecord, status: RunStatus, record: &Record) {
    let text = |key: &str| record.data.get(key).and_then(Value::as_str).map(str::to_string);
    run.status = status;
    run.completed_at = Some(record.time.clone());
    run.error = text("error");
    run.error_code = text("error_code");
    if let Some(metadata) = record.data.get("metadata").and_then(Value::as_object) {
        run.metadata.extend(metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
}

/// Validates a structured result against the Run it belongs to: every evidence
/// reference must name a successful execution-tool call of the Run by its
/// host-assigned id, and a quoted value must occur in that call's stored output.
pub(super) fn check_result(run: &RunRecord, text: &str) -> Result<InvestigationResult, InvestigationError> {
    investigation::revalidate(text, &evidence(&run.events))
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
