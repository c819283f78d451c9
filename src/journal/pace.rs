//! When a store whose appends commit in groups may write a snapshot: the audit and the alert
//! store, whose records are queued by many tasks at once and applied by them in any order.
//!
//! A snapshot must reflect exactly the records up to its checkpoint. So appends are counted
//! from before they are queued until they are applied (or known not written), and a snapshot
//! is taken only when none is in flight, at the highest-seq record applied. Under constant
//! load the appends in flight never all settle by themselves: once a snapshot is due, new
//! appends wait at a barrier (at most a second) until those in flight are applied.
//!
//! [`Pace`] lives under the store's own state lock, so counting and deciding are one step with
//! the apply they describe; the [`Barrier`] is shared outside that lock.

use std::time::Duration;

use super::{Checkpoint, Record};

/// The snapshot bookkeeping of a group-committed store.
#[derive(Debug, Default)]
pub struct Pace {
    /// Appends counted from before they are queued until applied (or known not written).
    in_flight: u64,
    /// Records applied since the last snapshot.
    since_snapshot: u64,
    /// The highest-seq record applied.
    last: Option<Checkpoint>,
    /// A record may be in the journal without being in the state: no more snapshots (the next
    /// start replays from the last good one).
    broken: bool,
    /// A snapshot (and the retention after it) is being written.
    saving: bool,
    /// A snapshot is due and waits for the appends in flight: new appends wait (briefly).
    barrier: bool,
}

impl Pace {
    /// After an open that replayed `replayed` records up to `last`: the tail just replayed is
    /// not in a snapshot yet.
    pub fn opened(last: Option<Checkpoint>, replayed: u64) -> Pace {
        Pace { last, since_snapshot: replayed, ..Pace::default() }
    }

    /// A record read at open (the count of replayed records comes with [`Pace::opened`]).
    pub fn replayed(&mut self, record: &Record) {
        self.last = Some(record.checkpoint());
    }

    /// The highest-seq record the state reflects once nothing is in flight.
    pub fn last(&self) -> Option<&Checkpoint> {
        self.last.as_ref()
    }

    /// An append is about to be queued.
    pub fn queued(&mut self) {
        self.in_flight += 1;
    }

    /// A record another writer stored (a replica on the same database) was applied.
    pub fn followed(&mut self, record: &Record) {
        self.since_snapshot += 1;
        if self.last.as_ref().is_none_or(|last| last.seq < record.seq) {
            self.last = Some(record.checkpoint());
        }
    }

    /// A queued append failed before anything was stored.
    pub fn not_written(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// A queued append may be in the journal but is not in the state: snapshots stop.
    pub fn lost(&mut self) {
        self.not_written();
        self.broken = true;
    }

    /// A queued append was written and applied to the state.
    pub fn applied(&mut self, record: &Record) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.since_snapshot += 1;
        if self.last.as_ref().is_none_or(|last| last.seq < record.seq) {
            self.last = Some(record.checkpoint());
        }
    }

    /// Takes the right to snapshot, when `every` (> 0) records were applied since the last
    /// one, and returns its checkpoint. `settled` says whether the state has nothing pending
    /// of its own (asked only when a snapshot is due). When a snapshot is due but appends are in flight, raises the barrier; when
    /// it is taken, lowers it and wakes the appends held at it.
    pub fn due(&mut self, every: u64, settled: impl FnOnce() -> bool, barrier: &Barrier) -> Option<Checkpoint> {
        if every == 0 || self.since_snapshot < every || self.saving || self.broken {
            return None;
        }
        self.claim(settled, barrier).or_else(|| {
            self.barrier = true;
            None
        })
    }

    /// Takes the right to snapshot now (a clean stop, or an operator's request) when records
    /// were applied since the last one and the state reflects exactly the journal up to one.
    pub fn now(&mut self, settled: impl FnOnce() -> bool, barrier: &Barrier) -> Option<Checkpoint> {
        if self.since_snapshot == 0 || self.saving || self.broken {
            return None;
        }
        self.claim(settled, barrier)
    }

    fn claim(&mut self, settled: impl FnOnce() -> bool, barrier: &Barrier) -> Option<Checkpoint> {
        if self.in_flight > 0 || !settled() {
            return None;
        }
        let checkpoint = self.last.clone()?;
        self.saving = true;
        self.since_snapshot = 0;
        if std::mem::take(&mut self.barrier) {
            barrier.drained.notify_waiters();
        }
        Some(checkpoint)
    }

    /// The snapshot taken by [`Pace::due`] or [`Pace::now`] is written (or failed).
    pub fn saved(&mut self) {
        self.saving = false;
    }

    /// Whether new appends wait at the [`Barrier`].
    pub fn raised(&self) -> bool {
        self.barrier
    }

    /// Whether a snapshot is being written.
    #[cfg(test)]
    fn saving(&self) -> bool {
        self.saving
    }

    /// After the state was rebuilt from the journal: the new bookkeeping, keeping the snapshot
    /// being written (its writer still finishes it).
    pub fn rebuilt(&self, fresh: Pace) -> Pace {
        Pace { saving: self.saving, ..fresh }
    }
}

/// Where appends wait while a due snapshot waits for those in flight.
#[derive(Debug, Default)]
pub struct Barrier {
    drained: tokio::sync::Notify,
}

/// Longest an append waits at the barrier.
const BARRIER_WAIT: Duration = Duration::from_secs(1);

impl Barrier {
    /// Holds a new append back while `raised` (read under the store's lock) says a due
    /// snapshot waits for the appends in flight; at most a second. The wake-up is registered
    /// before `raised` is asked, so one between the two is not missed.
    pub async fn pass(&self, raised: impl FnOnce() -> bool) {
        let notified = self.drained.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if raised() {
            let _ = tokio::time::timeout(BARRIER_WAIT, notified).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Location;

    fn at(seq: u64) -> Record {
        let location = Location { segment: 1, offset: seq * 10, len: 10 };
        let (time, kind, data) = (String::new(), "test.add".to_string(), serde_json::Value::Null);
        Record { seq, time, kind, data, hash: format!("{seq:064x}"), location }
    }

    #[test]
    fn a_snapshot_is_taken_only_with_nothing_in_flight_at_the_highest_record_applied() {
        let barrier = Barrier::default();
        let mut pace = Pace::opened(None, 0);
        for _ in 0..3 {
            pace.queued();
        }
        pace.applied(&at(3));
        pace.applied(&at(1));
        assert_eq!(pace.due(2, || true, &barrier), None, "one append is still in flight");
        assert!(pace.raised(), "new appends wait for it");
        pace.applied(&at(2));
        assert_eq!(pace.due(2, || true, &barrier).map(|c| c.seq), Some(3), "the highest seq, not the last applied");
        assert!(!pace.raised() && pace.saving());
        pace.queued();
        pace.applied(&at(4));
        assert_eq!(pace.now(|| true, &barrier), None, "one snapshot at a time");
        pace.saved();
        assert_eq!(pace.now(|| false, &barrier), None, "the state has something pending of its own");
        assert_eq!(pace.now(|| true, &barrier).map(|c| c.seq), Some(4));
    }

    #[test]
    fn a_lost_append_stops_snapshots_and_a_failed_one_does_not() {
        let barrier = Barrier::default();
        let mut pace = Pace::opened(Some(at(7).checkpoint()), 5);
        pace.queued();
        pace.not_written();
        assert_eq!(pace.due(5, || true, &barrier).map(|c| c.seq), Some(7), "the replayed tail is due");
        pace.saved();
        pace.queued();
        pace.lost();
        pace.queued();
        pace.applied(&at(9));
        assert_eq!(pace.now(|| true, &barrier), None, "seq 8 may be in the journal but not in the state");
        let fresh = pace.rebuilt(Pace::opened(Some(at(9).checkpoint()), 0));
        assert!(!fresh.saving() && fresh.last().is_some_and(|c| c.seq == 9));
    }
}
