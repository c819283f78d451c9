//! The job queue, fair between namespaces: the jobs a worker may take (pending, or finished
//! with notifications to send), by the time they are due, one queue per namespace. A worker
//! takes due jobs round-robin: first from the namespace whose last start is oldest (a
//! namespace that never started one comes first), within a namespace oldest due first. So
//! one namespace's alert storm never delays another namespace's first investigation, and
//! the namespaces with waiting work share the workers in turn.
//!
//! Starts are counted from the job records (each replica on the database applies the same
//! ones), so every replica takes turns alike; the count is not kept in snapshots, and after a
//! restart every namespace starts level. Pure: no clock, no I/O.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jiff::Timestamp;

use crate::alerts::intake::id::Id;

/// The queue.
#[derive(Debug, Default)]
pub(crate) struct JobQueue {
    /// Per namespace: jobs by the time they are due.
    waiting: BTreeMap<String, BTreeSet<(Timestamp, Id)>>,
    /// Jobs pending (waiting for a worker) per namespace; absent when none.
    pending: HashMap<String, usize>,
    /// Jobs pending host-wide.
    pending_total: usize,
    /// Per namespace: the number of the last job started there (see `starts`).
    last_start: HashMap<String, u64>,
    /// Jobs started so far (numbers the starts).
    starts: u64,
}

impl JobQueue {
    /// Queues job `id` of `namespace` to be due at `due`.
    pub(crate) fn insert(&mut self, namespace: &str, due: Timestamp, id: Id) {
        self.waiting.entry(namespace.to_string()).or_default().insert((due, id));
    }

    /// Takes job `id` of `namespace`, due at `due`, out of the queue.
    pub(crate) fn remove(&mut self, namespace: &str, due: Timestamp, id: &Id) {
        if let Some(queue) = self.waiting.get_mut(namespace) {
            queue.remove(&(due, id.clone()));
            if queue.is_empty() {
                self.waiting.remove(namespace);
            }
        }
    }

    /// One more (`true`) or one less pending job in `namespace`.
    pub(crate) fn count_pending(&mut self, namespace: &str, more: bool) {
        if more {
            *self.pending.entry(namespace.to_string()).or_default() += 1;
            self.pending_total += 1;
            return;
        }
        if let Some(count) = self.pending.get_mut(namespace) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.pending.remove(namespace);
            }
            self.pending_total = self.pending_total.saturating_sub(1);
        }
    }

    /// A job of `namespace` started: the namespace's turn comes last again.
    pub(crate) fn started(&mut self, namespace: &str) {
        self.starts += 1;
        self.last_start.insert(namespace.to_string(), self.starts);
    }

    /// Jobs pending host-wide.
    pub(crate) fn pending(&self) -> usize {
        self.pending_total
    }

    /// Jobs pending in `namespace`.
    pub(crate) fn pending_in(&self, namespace: &str) -> usize {
        self.pending.get(namespace).copied().unwrap_or_default()
    }

    /// Up to `max` jobs due at `now`, skipping those `busy` says are in flight, in the order a
    /// worker should take them: round-robin across namespaces, least recently started
    /// first; and when the next job not due yet will be.
    pub(crate) fn due(&self, now: Timestamp, busy: impl Fn(&Id) -> bool, max: usize) -> (Vec<Id>, Option<Timestamp>) {
        let mut next: Option<Timestamp> = None;
        // Per namespace with due work: its turn (when it last started), and its due jobs.
        let mut turns: Vec<(Option<u64>, Timestamp, &str, Vec<&Id>)> = Vec::new();
        for (namespace, queue) in &self.waiting {
            let mut due = Vec::new();
            let mut first: Option<Timestamp> = None;
            for (at, id) in queue {
                if *at > now {
                    next = Some(next.map_or(*at, |n| n.min(*at)));
                    break;
                }
                if due.len() >= max {
                    break;
                }
                if !busy(id) {
                    first.get_or_insert(*at);
                    due.push(id);
                }
            }
            if let Some(first) = first {
                due.reverse();
                turns.push((self.last_start.get(namespace).copied(), first, namespace, due));
            }
        }
        let mut taken = Vec::new();
        let mut round = self.starts;
        while taken.len() < max {
            // Never started first, then the oldest start, then the oldest due job.
            let Some(turn) = turns.iter_mut().filter(|t| !t.3.is_empty()).min_by_key(|t| (t.0, t.1, t.2)) else {
                break;
            };
            if let Some(id) = turn.3.pop() {
                taken.push(id.clone());
            }
            round += 1;
            turn.0 = Some(round);
        }
        (taken, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn storm() -> JobQueue {
        let mut queue = JobQueue::default();
        for n in 0..30 {
            queue.insert("team-a", at(n), Id::new(&format!("job_a{n:02}")));
        }
        queue.insert("team-b", at(100), Id::new("job_b00"));
        queue
    }

    fn texts(ids: &[Id]) -> Vec<String> {
        ids.iter().map(Id::text).collect()
    }

    #[test]
    fn another_namespaces_first_job_comes_before_the_rest_of_a_storm() {
        let mut queue = storm();
        let (first, _) = queue.due(at(200), |_| false, 1);
        assert_eq!(texts(&first), ["job_a00"], "oldest first while no namespace has started");
        queue.remove("team-a", at(0), &first[0]);
        queue.started("team-a");
        let (next, _) = queue.due(at(200), |_| false, 3);
        assert_eq!(texts(&next), ["job_b00", "job_a01", "job_a02"]);
    }

    #[test]
    fn namespaces_take_turns_and_busy_or_future_jobs_wait() {
        let mut queue = storm();
        queue.insert("team-c", at(150), Id::new("job_c00"));
        queue.insert("team-c", at(160), Id::new("job_c01"));
        queue.started("team-b");
        let busy = |id: &Id| id.text() == "job_a00";
        let (taken, next) = queue.due(at(155), busy, 4);
        assert_eq!(texts(&taken), ["job_a01", "job_c00", "job_b00", "job_a02"]);
        assert_eq!(next, Some(at(160)), "the next job not due yet");
    }

    #[test]
    fn pending_jobs_are_counted_per_namespace() {
        let mut queue = JobQueue::default();
        queue.count_pending("team-a", true);
        queue.count_pending("team-a", true);
        queue.count_pending("team-b", true);
        queue.count_pending("team-a", false);
        queue.count_pending("team-c", false);
        assert_eq!((queue.pending(), queue.pending_in("team-a"), queue.pending_in("team-c")), (2, 1, 0));
    }
}
