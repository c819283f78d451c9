//! The journal record of a batch (the alerts one webhook request carried; the journal and
//! the API keep its `delivery_id`/`dlv_` names for compatibility, while "delivery" in the
//! code means an outbound notification), and how a big batch is kept: whole, in as many
//! records as its events need (each under the journal's line limit), up to a per-batch
//! bound on events and bytes past which the rest is counted as truncated, never refused.
//! Pure: sizes are computed from the values.

use serde::{Deserialize, Serialize};

use crate::alerts::intake::event::Event;
use crate::alerts::intake::signature::Signed;
use crate::alerts::intake::window::DedupLimits;
use crate::alerts::store::job::ItemOutcome;

/// Delivery record version: 2 adds the source namespace and job sharing; 3 the bounded
/// dedup window (`dedup`: the limits the delivery was decided under).
pub(crate) const RECORD_VERSION: u32 = 3;
/// Upper bound of the ids and outcome a batch record adds per event.
const RECORD_OVERHEAD_PER_EVENT: usize = 384;
/// Room left in each record for the journal envelope and the record's own fields.
const RECORD_ENVELOPE: usize = 16 << 10;
/// Most events one batch stores; more are accepted and counted as truncated by the host.
pub const MAX_BATCH_EVENTS: usize = 10_000;
/// Most bytes (events with their outcome, as journaled) one batch stores; the events past
/// it are accepted and counted as truncated by the host.
pub const MAX_BATCH_BYTES: usize = 32 << 20;

/// One batch, or one part of a batch that needs several records.
#[derive(Serialize, Deserialize)]
pub(crate) struct BatchRecord {
    /// Absent (1) in journals written before namespaces.
    #[serde(default = "first_version")]
    pub(crate) version: u32,
    pub(crate) delivery_id: String,
    /// Name of the AlertSource.
    pub(crate) source: String,
    /// Its namespace (empty in version 1).
    #[serde(default)]
    pub(crate) namespace: String,
    /// RFC 3339 time the host received it.
    #[serde(default)]
    pub(crate) received_at: String,
    /// Which part of the batch this record is, when it needed several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) part: Option<Part>,
    /// What the batch did not carry or the host did not keep (first part only).
    #[serde(default, skip_serializing_if = "Truncation::is_none")]
    pub(crate) truncated: Truncation,
    /// The dedup window's limits when the batch was decided (version 3; first part only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dedup: Option<DedupLimits>,
    /// The signature that covered the batch's timestamp, so that a replay of it is refused
    /// (first part only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) signed: Option<Signed>,
    pub(crate) items: Vec<BatchItem>,
}

impl BatchRecord {
    /// Whether this is the batch's first (or only) record.
    pub(crate) fn is_first_part(&self) -> bool {
        self.part.is_none_or(|p| p.index <= 1)
    }
}

/// `index` (from 1) of `of` records of one batch.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) index: u32,
    pub(crate) of: u32,
}

/// Alerts of a batch that are not stored, and why.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Truncation {
    /// Alerts the provider left out of the payload (Alertmanager's `truncatedAlerts`).
    #[serde(default)]
    pub by_provider: u64,
    /// Events this host accepted but did not store, over [`MAX_BATCH_EVENTS`] or [`MAX_BATCH_BYTES`].
    #[serde(default)]
    pub by_host: u64,
}

impl Truncation {
    /// Whether nothing was left out.
    pub fn is_none(&self) -> bool {
        self.by_provider == 0 && self.by_host == 0
    }
}

#[derive(Serialize, Deserialize)]
pub(crate) struct BatchItem {
    pub(crate) outcome: ItemOutcome,
    pub(crate) event: Event,
}

fn first_version() -> u32 {
    1
}

/// Keeps the longest prefix of `events` within [`MAX_BATCH_EVENTS`] and
/// [`MAX_BATCH_BYTES`]; returns how many were dropped.
pub(crate) fn keep_storable(events: &mut Vec<Event>) -> u64 {
    let mut bytes = 0usize;
    let mut keep = 0usize;
    for event in events.iter().take(MAX_BATCH_EVENTS) {
        bytes = bytes.saturating_add(event_size(event));
        if bytes > MAX_BATCH_BYTES {
            break;
        }
        keep += 1;
    }
    let dropped = events.len() - keep;
    events.truncate(keep);
    dropped as u64
}

/// Journaled size of one event with its outcome, at most.
fn event_size(event: &Event) -> usize {
    serde_json::to_string(event).map(|t| t.len()).unwrap_or(usize::MAX / 2).saturating_add(RECORD_OVERHEAD_PER_EVENT)
}

/// Splits `record` into parts whose data each fit a journal line of `max_record_bytes`,
/// items in order; one record (without `part`) when it fits whole. One event always fits:
/// its fields are bounded far below the line limit.
pub(crate) fn split(mut record: BatchRecord, max_record_bytes: usize) -> Vec<BatchRecord> {
    let budget = max_record_bytes.saturating_sub(RECORD_ENVELOPE);
    let sizes: Vec<usize> =
        record.items.iter().map(|i| serde_json::to_string(i).map(|t| t.len() + 1).unwrap_or(budget)).collect();
    if sizes.iter().sum::<usize>() <= budget {
        return vec![record];
    }
    let mut groups: Vec<Vec<BatchItem>> = vec![Vec::new()];
    let mut used = 0usize;
    for (item, size) in record.items.drain(..).zip(sizes) {
        let current = groups.last_mut().filter(|g| g.is_empty() || used + size <= budget);
        match current {
            Some(group) => group.push(item),
            None => {
                used = 0;
                groups.push(vec![item]);
            }
        }
        used += size;
    }
    let of = u32::try_from(groups.len()).unwrap_or(u32::MAX);
    let mut signed = record.signed.take();
    groups
        .into_iter()
        .enumerate()
        .map(|(i, items)| BatchRecord {
            version: record.version,
            delivery_id: record.delivery_id.clone(),
            source: record.source.clone(),
            namespace: record.namespace.clone(),
            received_at: record.received_at.clone(),
            part: Some(Part { index: u32::try_from(i + 1).unwrap_or(u32::MAX), of }),
            truncated: if i == 0 { record.truncated } else { Truncation::default() },
            dedup: if i == 0 { record.dedup } else { None },
            signed: signed.take(),
            items,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::adapters::{DecodeContext, adapter};

    const FIRING: &str = include_str!("../../../tests/fixtures/alertmanager/alertmanager-webhook.json");

    fn events(n: usize) -> Vec<Event> {
        let mut body: serde_json::Value = serde_json::from_str(FIRING).unwrap();
        let alert = body["alerts"][0].clone();
        body["alerts"] = (0..n)
            .map(|i| {
                let mut a = alert.clone();
                a["fingerprint"] = format!("{i:016x}").into();
                a["labels"]["pod"] = format!("cart-{i}").into();
                a
            })
            .collect();
        let ctx = DecodeContext { source_type: "alertmanager", source_name: "am", observed_at: jiff::Timestamp::now() };
        adapter("alertmanager").unwrap().decode(body.to_string().as_bytes(), &ctx).unwrap()
    }

    fn record(events: Vec<Event>) -> BatchRecord {
        let items = events
            .into_iter()
            .enumerate()
            .map(|(i, event)| BatchItem {
                outcome: ItemOutcome {
                    status: "accepted".into(),
                    event_id: format!("evt_{i:032x}").into(),
                    incident_id: format!("inc_{i:032x}").into(),
                    job_id: Some(format!("job_{i:032x}").into()),
                    shared_job: None,
                    deferred: false,
                    deferred_by: None,
                    storm: false,
                },
                event,
            })
            .collect();
        BatchRecord {
            version: RECORD_VERSION,
            delivery_id: "dlv_1".into(),
            source: "am".into(),
            namespace: "ops".into(),
            received_at: "2026-01-01T00:00:00Z".into(),
            part: None,
            truncated: Truncation { by_provider: 3, by_host: 0 },
            dedup: None,
            signed: None,
            items,
        }
    }

    #[test]
    fn a_batch_that_fits_stays_one_record() {
        let parts = split(record(events(10)), 4 << 20);
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].part, None);
    }

    #[test]
    fn a_big_batch_splits_in_order_into_records_under_the_limit() {
        let limit = 256 << 10;
        let parts = split(record(events(1_000)), limit);
        assert!(parts.len() > 1, "{} parts", parts.len());
        let ids: Vec<String> =
            parts.iter().flat_map(|p| p.items.iter().map(|i| i.outcome.event_id.to_string())).collect();
        assert_eq!(ids, (0..1_000).map(|i| format!("evt_{i:032x}")).collect::<Vec<_>>(), "every event, in order");
        for (i, part) in parts.iter().enumerate() {
            assert_eq!(part.part, Some(Part { index: i as u32 + 1, of: parts.len() as u32 }));
            assert!(serde_json::to_string(part).unwrap().len() <= limit - RECORD_ENVELOPE / 2);
            assert_eq!(part.truncated.by_provider, if i == 0 { 3 } else { 0 }, "the truncation is told once");
        }
    }

    #[test]
    fn past_the_per_batch_bound_events_are_counted_not_refused() {
        let mut many = vec![events(1).remove(0); MAX_BATCH_EVENTS + 5];
        assert_eq!(keep_storable(&mut many), 5);
        assert_eq!(many.len(), MAX_BATCH_EVENTS);
        let mut few = events(3);
        assert_eq!(keep_storable(&mut few), 0);
        let mut event = events(1).remove(0);
        event.description = Some("d".repeat(8192));
        let mut big = vec![event; 5_000];
        let dropped = keep_storable(&mut big);
        assert!(dropped > 0 && big.len() as u64 + dropped == 5_000, "the byte bound applies too: {dropped}");
    }
}
