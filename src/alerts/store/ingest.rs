//! How a delivery is decided and recorded in the embedded journal (the database's way is in
//! [`super::database`]): deduplicated and correlated on the live state, admission deciding how
//! each new job starts, the record queued under the state's lock so the journal order is the
//! order of decisions.

use std::sync::Arc;
use std::time::Instant;

use jiff::Timestamp;

use crate::alerts::intake::admission::{Pending, Start};
use crate::alerts::intake::correlate::{Decision, IdKind};
use crate::alerts::intake::event::Event;
use crate::alerts::intake::signature::Signed;
use crate::alerts::store::record::{BatchItem, BatchRecord, RECORD_VERSION, Truncation, split};
use crate::alerts::store::state::{DELIVERY, State, apply_batch};
use crate::alerts::store::{AlertStore, AlertStoreError, ItemOutcome, new_id};
use crate::journal::{DEFAULT_MAX_RECORD_BYTES, Journal};

/// The pool named by `akritas_refusals_total` for investigations deferred or coalesced by admission.
const REFUSAL_POOL: &str = "alert_investigations";

/// What a delivery's record is made of besides its events.
pub(super) struct Made {
    pub(super) namespace: String,
    pub(super) source: String,
    pub(super) delivery_id: String,
    pub(super) received_at: Timestamp,
    pub(super) truncated: Truncation,
    /// The signature that covered the delivery's timestamp, if its source signs one.
    pub(super) signed: Option<Signed>,
}

impl AlertStore {
    /// Records a delivery in the embedded journal: decided and queued under the state's lock (so
    /// the journal order is the order of decisions), then awaited.
    pub(super) async fn ingest_file(
        &self,
        journal: &Journal,
        made: Made,
        events: Vec<Event>,
    ) -> Result<Vec<ItemOutcome>, AlertStoreError> {
        let (pending, outcomes, generation) = {
            let mut state = self.lock();
            if let Some(reason) = &state.unavailable {
                return Err(Self::unavailable(reason));
            }
            refuse_replay(&state, &made)?;
            let record = self.decide(&mut state, &made, events);
            let generation = state.generation;
            let mut pending = Vec::new();
            let mut outcomes = Vec::new();
            for part in split(record, DEFAULT_MAX_RECORD_BYTES) {
                let data = serde_json::to_value(&part).unwrap_or_default();
                match journal.enqueue(DELIVERY, &data) {
                    Ok(queued) => {
                        let part = Arc::new(part);
                        state.pace.queued();
                        apply_batch(&mut state, &part, None);
                        outcomes.extend(part.items.iter().map(|i| i.outcome.clone()));
                        pending.push((queued, part));
                    }
                    Err(error) => {
                        drop(state);
                        return Err(self.fail(generation, error));
                    }
                }
            }
            (pending, outcomes, generation)
        };
        for (queued, part) in pending {
            match queued.committed().await {
                Ok(record) => self.settled(generation, &record, |state| state.settle_batch(&part, record.location)),
                Err(error) => return Err(self.fail(generation, error)),
            }
        }
        Ok(outcomes)
    }

    /// Deduplicates and correlates a delivery's events on the live state and returns its record
    /// (before any split). Never refused for load: admission decides only how each new job
    /// starts, seeing the jobs this delivery created before it.
    pub(super) fn decide(&self, state: &mut State, made: &Made, events: Vec<Event>) -> BatchRecord {
        let source_key = format!("{}/{}", made.namespace, made.source);
        // The window moves with the delivery's receive time, which the record keeps.
        state.correlator.advance(made.received_at.as_second(), Some(self.storage.dedup));
        // Decided on the live correlator (a copy per delivery would cost O(incidents)); if a
        // record cannot be stored the store becomes unavailable and is rebuilt from what is
        // stored before it decides again, so an unrecorded decision never persists.
        let now = Instant::now();
        let mut waiting = Pending { host: state.queue.pending(), namespace: state.queue.pending_in(&made.namespace) };
        let mut deferred = state.deferred_of(&source_key);
        let mut storm = state.storm_of.get(&source_key).cloned();
        let mut items = Vec::with_capacity(events.len());
        for event in events {
            let start = state.admission.decide(&source_key, waiting, deferred, now);
            let hint = storm.as_deref().filter(|_| start == Start::Storm);
            let outcome = state.correlator.ingest(&event, true, hint, |kind| {
                new_id(match kind {
                    IdKind::Event => "evt",
                    IdKind::Incident => "inc",
                    IdKind::Job => "job",
                })
            });
            let shares_storm = outcome.shared_job.is_some() && outcome.shared_job.as_deref() == hint;
            let (deferred_job, storm_job) = match (&outcome.job_id, start) {
                (None, _) => (false, shares_storm),
                (Some(_), Start::Now) => {
                    state.admission.take(&source_key, now);
                    waiting.add();
                    (false, false)
                }
                (Some(_), Start::Deferred(_)) => {
                    deferred += 1;
                    (true, false)
                }
                (Some(job), Start::Storm) => {
                    deferred += 1;
                    storm = Some(job.clone());
                    (true, true)
                }
            };
            // A new investigation that waits: refused a start by a fair-share limit, counted.
            let deferred_by = start.setting().filter(|_| outcome.job_id.is_some());
            if let Some(setting) = deferred_by {
                crate::slots::count_refusal(REFUSAL_POOL, setting, &made.namespace);
            }
            let status = if matches!(outcome.decision, Decision::Duplicate { .. }) { "duplicate" } else { "accepted" };
            let item = ItemOutcome {
                status: status.into(),
                event_id: outcome.event_id,
                incident_id: outcome.incident_id,
                job_id: outcome.job_id,
                shared_job: outcome.shared_job,
                deferred: deferred_job,
                deferred_by: deferred_by.map(str::to_string),
                storm: storm_job,
            };
            items.push(BatchItem { outcome: item, event });
        }
        BatchRecord {
            version: RECORD_VERSION,
            delivery_id: made.delivery_id.clone(),
            source: made.source.clone(),
            namespace: made.namespace.clone(),
            received_at: made.received_at.to_string(),
            part: None,
            truncated: made.truncated,
            dedup: Some(self.storage.dedup),
            signed: made.signed.clone(),
            items,
        }
    }
}

/// Refuses a delivery whose signature the store accepted already (within the window: older
/// ones are refused by their timestamp before they reach the store).
pub(super) fn refuse_replay(state: &State, made: &Made) -> Result<(), AlertStoreError> {
    match &made.signed {
        Some(signed) if state.signatures.replayed(signed) => Err(AlertStoreError::Replayed),
        _ => Ok(()),
    }
}
