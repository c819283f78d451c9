//! What one schedule's tick decision records, given what is recorded about it and the time:
//! a pure function, so the scheduler takes it under the store's writer lock (one decision
//! at a time across replicas) and tests can drive it with any clock.
//!
//! As CronJob: the ticks since the last one decided are counted; only the newest runs, and
//! only if it is found within `startingDeadlineSeconds` of its time; the others are missed
//! (counted, never replayed in a burst). A suspended schedule records when it was
//! suspended and resumed, and its ticks count again from the resumption.

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::store::{Book, Books, Entry};
use crate::cron::Cron;
use crate::resources::run_schedule::{ConcurrencyPolicy, SkippedTick};

/// Most ticks counted in one decision; a longer gap is counted over several passes.
const MAX_TICKS_PER_DECISION: u64 = 100_000;
/// Reason of a tick skipped because the previous Run still runs (`concurrencyPolicy: Forbid`).
pub const CONCURRENCY_FORBID: &str = "ConcurrencyForbid";
/// Reason of a tick skipped because the namespace's daily token budget is spent.
pub const COST_CAP_REACHED: &str = "CostCapReached";

/// What the decision needs to know about the schedule and the host.
#[derive(Debug)]
pub struct Tick<'a> {
    /// The object's uid (empty in standalone mode).
    pub uid: &'a str,
    /// The schedule's namespace.
    pub namespace: &'a str,
    /// The parsed schedule and its time zone.
    pub cron: &'a Cron,
    /// The time zone.
    pub zone: &'a TimeZone,
    /// `spec.suspend`.
    pub suspend: bool,
    /// `startingDeadlineSeconds`.
    pub deadline: Duration,
    /// `concurrencyPolicy`.
    pub policy: ConcurrencyPolicy,
    /// Tokens one Run may use at most (its budget).
    pub run_tokens: u64,
    /// Tokens the namespace's scheduled Runs may reserve per UTC day.
    pub daily_tokens: u64,
    /// The scheduler clock's time of this decision: ticks up to it are due, and entries carry it.
    pub now: Timestamp,
}

/// What to do after the decision is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start no Run: no tick is due, the schedule is suspended, or the tick was missed or skipped.
    Wait,
    /// Start the Run of this tick.
    Start(Timestamp),
    /// Cancel the running Run, then start the Run of this tick.
    Replace(Timestamp),
}

/// Why a Run on request does not start.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotNow {
    /// A Run of the schedule is running (a tick's or an earlier request's).
    #[error("the Run of {scheduled} still runs; ask again when it has ended")]
    Running {
        /// Its tick.
        scheduled: String,
    },
    /// The namespace's daily token budget is spent.
    #[error("{0}")]
    CostCap(String),
}

/// The entries that start a Run of the schedule now, at `tick.now`, asked for by `by`: the
/// rules a tick of the cron follows (never two Runs of one schedule at once, the namespace's
/// daily token budget), whether the schedule is suspended or not, and without moving the
/// cron's ticks.
pub fn decide_now(book: Option<&Book>, books: &Books, tick: &Tick<'_>, by: &str) -> Result<Vec<Entry>, NotNow> {
    let mut entries = Vec::new();
    match book {
        Some(book) if book.uid == tick.uid => {
            if let Some(running) = &book.running {
                return Err(NotNow::Running { scheduled: running.scheduled.to_string() });
            }
        }
        _ => entries.push(Entry::Seen { uid: tick.uid.to_string(), at: tick.now }),
    }
    let reserved = books.reserved_on(tick.namespace, tick.now);
    if reserved.saturating_add(tick.run_tokens) > tick.daily_tokens {
        return Err(NotNow::CostCap(format!(
            "scheduled Runs of namespace {} reserved {reserved} of the {} tokens allowed per day (UTC) and one more \
             may use {}; raise schedule_daily_tokens or wait for the next day",
            tick.namespace, tick.daily_tokens, tick.run_tokens
        )));
    }
    entries.push(Entry::Claimed {
        scheduled: tick.now,
        at: tick.now,
        namespace: tick.namespace.to_string(),
        tokens: tick.run_tokens,
        requested_by: Some(by.to_string()),
    });
    Ok(entries)
}

/// The entries to record and the action.
pub fn decide(book: Option<&Book>, books: &Books, tick: &Tick<'_>) -> (Vec<Entry>, Action) {
    let mut entries = Vec::new();
    let fresh;
    let book = match book {
        Some(book) if book.uid == tick.uid => book,
        _ => {
            entries.push(Entry::Seen { uid: tick.uid.to_string(), at: tick.now });
            fresh = Book { uid: tick.uid.to_string(), since: Some(tick.now), ..Book::default() };
            &fresh
        }
    };
    let mut since = book.since.unwrap_or(tick.now);
    match (tick.suspend, book.suspended) {
        (true, None) => entries.push(Entry::Suspended { at: tick.now }),
        (false, Some(_)) => {
            entries.push(Entry::Resumed { at: tick.now });
            since = tick.now;
        }
        _ => {}
    }
    if tick.suspend {
        return (entries, Action::Wait);
    }
    let base = book.last_tick.map_or(since, |last| last.max(since));
    let (mut latest, mut previous, mut count) = (None, None, 0u64);
    let mut next = tick.cron.next_after(base, tick.zone);
    while let Some(at) = next.filter(|at| *at <= tick.now) {
        (previous, latest) = (latest, Some(at));
        count += 1;
        if count == MAX_TICKS_PER_DECISION {
            entries.push(Entry::Missed { scheduled: at, count });
            return (entries, Action::Wait);
        }
        next = tick.cron.next_after(at, tick.zone);
    }
    let Some(latest) = latest else { return (entries, Action::Wait) };
    let deadline = SignedDuration::try_from(tick.deadline).unwrap_or(SignedDuration::MAX);
    if tick.now.duration_since(latest) > deadline {
        entries.push(Entry::Missed { scheduled: latest, count });
        return (entries, Action::Wait);
    }
    if let Some(previous) = previous {
        entries.push(Entry::Missed { scheduled: previous, count: count - 1 });
    }
    let skip = |reason: &str, message: String| Entry::Skipped {
        scheduled: latest,
        skipped: SkippedTick { scheduled_time: latest.to_string(), reason: reason.to_string(), message },
    };
    let replace = match (&book.running, tick.policy) {
        (None, _) => false,
        (Some(running), ConcurrencyPolicy::Forbid) => {
            let message =
                format!("the Run of the tick at {} still runs and concurrencyPolicy is Forbid", running.scheduled);
            entries.push(skip(CONCURRENCY_FORBID, message));
            return (entries, Action::Wait);
        }
        (Some(_), ConcurrencyPolicy::Replace) => true,
    };
    let reserved = books.reserved_on(tick.namespace, latest);
    if reserved.saturating_add(tick.run_tokens) > tick.daily_tokens {
        let message = format!(
            "scheduled Runs of namespace {} reserved {reserved} of the {} tokens allowed per day (UTC) and one more \
             may use {}; raise schedule_daily_tokens or run the schedules less often",
            tick.namespace, tick.daily_tokens, tick.run_tokens
        );
        entries.push(skip(COST_CAP_REACHED, message));
        return (entries, Action::Wait);
    }
    entries.push(Entry::Claimed {
        scheduled: latest,
        at: tick.now,
        namespace: tick.namespace.to_string(),
        tokens: tick.run_tokens,
        requested_by: None,
    });
    (entries, if replace { Action::Replace(latest) } else { Action::Start(latest) })
}

/// The next tick after `now` (none while suspended).
pub fn next_tick(cron: &Cron, zone: &TimeZone, suspend: bool, now: Timestamp) -> Option<Timestamp> {
    (!suspend).then(|| cron.next_after(now, zone)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Record;
    use crate::journal::durable::Replayed;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// Decides and applies the entries to `books` as the store would.
    fn step(books: &mut Books, tick: &Tick<'_>) -> Action {
        let (entries, action) = decide(books.schedules.get("ops/s"), books, tick);
        apply(books, tick, entries);
        action
    }

    fn apply(books: &mut Books, tick: &Tick<'_>, entries: Vec<Entry>) {
        for (seq, entry) in entries.into_iter().enumerate() {
            let (kind, data) = entry.kind_and_data("ops/s");
            let record = Record {
                seq: seq as u64 + 1,
                time: tick.now.to_string(),
                kind: kind.into(),
                data,
                hash: String::new(),
                location: Default::default(),
            };
            books.apply(&record).unwrap();
        }
    }

    fn tick<'a>(cron: &'a Cron, zone: &'a TimeZone, now: &str) -> Tick<'a> {
        Tick {
            uid: "u",
            namespace: "ops",
            cron,
            zone,
            suspend: false,
            deadline: Duration::from_secs(300),
            policy: ConcurrencyPolicy::Forbid,
            run_tokens: 10,
            daily_tokens: 15,
            now: at(now),
        }
    }

    #[test]
    fn the_newest_tick_runs_within_its_deadline_and_the_others_are_counted() {
        let (cron, zone) = (Cron::parse("*/10 * * * *").unwrap(), TimeZone::UTC);
        let mut books = Books::default();
        assert_eq!(step(&mut books, &tick(&cron, &zone, "2026-12-06T08:05:00Z")), Action::Wait, "first seen");
        let start = step(&mut books, &tick(&cron, &zone, "2026-12-06T08:10:30Z"));
        assert_eq!(start, Action::Start(at("2026-12-06T08:10:00Z")));
        assert_eq!(step(&mut books, &tick(&cron, &zone, "2026-12-06T08:11:00Z")), Action::Wait, "claimed once");
        // Forbid: the 08:20 tick finds the 08:10 Run still running.
        assert_eq!(step(&mut books, &tick(&cron, &zone, "2026-12-06T08:20:01Z")), Action::Wait);
        let book = &books.schedules["ops/s"];
        assert_eq!((book.skipped, book.last_skipped.as_ref().unwrap().reason.as_str()), (1, CONCURRENCY_FORBID));
        books.schedules.get_mut("ops/s").unwrap().running = None;
        // Down from 08:21 to 09:02: 08:30 … 08:50 missed, 09:00 runs (within 5 minutes)…
        let late = step(&mut books, &tick(&cron, &zone, "2026-12-06T09:02:00Z"));
        assert_eq!(late, Action::Wait, "the cost cap (15 tokens, 10 per Run) allows one Run a day");
        let book = &books.schedules["ops/s"];
        assert_eq!(book.missed, 3);
        assert_eq!(book.last_skipped.as_ref().unwrap().reason, COST_CAP_REACHED);
        assert!(book.last_skipped.as_ref().unwrap().message.contains("reserved 10 of the 15"), "{book:?}");
        // … and a tick found after its deadline is missed, not run.
        let mut roomy = tick(&cron, &zone, "2026-12-06T09:16:00Z");
        roomy.daily_tokens = 1000;
        assert_eq!(step(&mut books, &roomy), Action::Wait);
        assert_eq!(books.schedules["ops/s"].missed, 4);
        roomy.now = at("2026-12-06T09:20:00Z");
        assert_eq!(step(&mut books, &roomy), Action::Start(at("2026-12-06T09:20:00Z")));
        roomy.policy = ConcurrencyPolicy::Replace;
        roomy.now = at("2026-12-06T09:30:00Z");
        assert_eq!(step(&mut books, &roomy), Action::Replace(at("2026-12-06T09:30:00Z")));
    }

    #[test]
    fn a_run_on_request_keeps_the_crons_ticks_and_the_rules_of_a_tick() {
        let (cron, zone) = (Cron::parse("0 * * * *").unwrap(), TimeZone::UTC);
        let mut books = Books::default();
        step(&mut books, &tick(&cron, &zone, "2026-12-06T07:30:00Z"));
        // Suspended or not, a person may run it; it is claimed at the time asked, by who asked.
        let mut now = tick(&cron, &zone, "2026-12-06T07:45:00Z");
        now.suspend = true;
        let entries = decide_now(books.schedules.get("ops/s"), &books, &now, "ops").unwrap();
        apply(&mut books, &now, entries);
        let book = &books.schedules["ops/s"];
        let running = book.running.clone().unwrap();
        assert_eq!((running.scheduled, running.requested_by.as_deref()), (at("2026-12-06T07:45:00Z"), Some("ops")));
        assert_eq!(book.last_tick, None, "the cron's ticks still count from the first sighting");
        // Never two Runs of one schedule at once.
        let again =
            decide_now(books.schedules.get("ops/s"), &books, &tick(&cron, &zone, "2026-12-06T07:46:00Z"), "ops");
        assert_eq!(again, Err(NotNow::Running { scheduled: "2026-12-06T07:45:00Z".into() }));
        books.schedules.get_mut("ops/s").unwrap().running = None;
        // The 08:00 tick runs as it would have; the day's budget (15, 10 per Run) is then spent.
        assert_eq!(step(&mut books, &tick(&cron, &zone, "2026-12-06T08:00:05Z")), Action::Wait);
        assert_eq!(books.schedules["ops/s"].last_skipped.as_ref().unwrap().reason, COST_CAP_REACHED);
        books.schedules.get_mut("ops/s").unwrap().running = None;
        let spent =
            decide_now(books.schedules.get("ops/s"), &books, &tick(&cron, &zone, "2026-12-06T08:10:00Z"), "ops");
        assert!(matches!(spent, Err(NotNow::CostCap(message)) if message.contains("reserved 10 of the 15")));
    }

    #[test]
    fn a_suspended_schedule_counts_again_from_its_resumption() {
        let (cron, zone) = (Cron::parse("0 * * * *").unwrap(), TimeZone::UTC);
        let mut books = Books::default();
        step(&mut books, &tick(&cron, &zone, "2026-12-06T07:30:00Z"));
        let mut suspended = tick(&cron, &zone, "2026-12-06T07:40:00Z");
        suspended.suspend = true;
        step(&mut books, &suspended);
        suspended.now = at("2026-12-06T10:00:00Z");
        assert_eq!(step(&mut books, &suspended), Action::Wait);
        assert_eq!(next_tick(&cron, &zone, true, suspended.now), None);
        let resumed = step(&mut books, &tick(&cron, &zone, "2026-12-06T10:30:00Z"));
        assert_eq!(resumed, Action::Wait, "the 08:00 … 10:00 ticks came while suspended");
        assert_eq!(books.schedules["ops/s"].missed, 0);
        let start = step(&mut books, &tick(&cron, &zone, "2026-12-06T11:00:10Z"));
        assert_eq!(start, Action::Start(at("2026-12-06T11:00:00Z")));
    }

    #[test]
    fn a_recreated_object_starts_over() {
        let (cron, zone) = (Cron::parse("0 * * * *").unwrap(), TimeZone::UTC);
        let mut books = Books::default();
        step(&mut books, &tick(&cron, &zone, "2026-12-06T07:30:00Z"));
        step(&mut books, &tick(&cron, &zone, "2026-12-06T08:00:05Z"));
        assert!(books.schedules["ops/s"].running.is_some());
        let mut other = tick(&cron, &zone, "2026-12-06T08:10:00Z");
        other.uid = "u2";
        step(&mut books, &other);
        let book = &books.schedules["ops/s"];
        assert_eq!((book.uid.as_str(), book.running.is_none()), ("u2", true));
    }
}
