//! The durable record of every RunSchedule's ticks, on a hash-chained journal (or the shared
//! database): which tick was claimed, missed or skipped, how its Run ended, what it found
//! (the digest the next Run is compared with), the schedule's notification threads and the
//! token budget each namespace reserved per day. A tick is claimed by one fsynced record
//! before its Run starts, so a restart or a new leader neither runs it twice nor skips it.
//!
//! Records: `schedule.seen` (a schedule first seen: its ticks count from then),
//! `schedule.suspended` / `schedule.resumed`, `schedule.claimed` (a tick's Run is to start),
//! `schedule.skipped` (a tick not run, and why), `schedule.missed` (ticks past their
//! deadline), `schedule.done` (a claimed tick's Run ended), `schedule.thread` (a receiver's
//! thread root) and `schedule.removed` (a schedule that no longer exists is forgotten).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::sync::Arc;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::journal::database::Database;
use crate::journal::durable::{Durable, Replayed, State, StoreError, StoreName};
use crate::journal::{Clock, JournalOptions, Record};
use crate::resources::run_schedule::{ScheduleResult, SkippedTick};

const SEEN: &str = "schedule.seen";
const SUSPENDED: &str = "schedule.suspended";
const RESUMED: &str = "schedule.resumed";
const CLAIMED: &str = "schedule.claimed";
const SKIPPED: &str = "schedule.skipped";
const MISSED: &str = "schedule.missed";
const DONE: &str = "schedule.done";
const THREAD: &str = "schedule.thread";
const REMOVED: &str = "schedule.removed";
/// Shape and version of the snapshot.
pub const FORMAT: &str = "akritas.schedules.v1";
/// The store's name in the database.
pub const STORE: &str = "schedules";
/// Days of token reservations kept (today and yesterday, in UTC).
const RESERVATION_DAYS: usize = 2;

const NAME: StoreName =
    StoreName { journal: "schedule journal", lost: "the ticks and results in it", component: "akritas_schedules" };

/// What a finished Run found, as the next Run is compared with it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// The Run failed (no result).
    pub failed: bool,
    /// The result is something a person should act on.
    pub finding: bool,
    /// The finding status (`confirmed`, …); empty for a failed Run.
    pub finding_status: String,
    /// The actionability; empty for a failed Run.
    pub actionability: String,
    /// Verified evidence values (the quotes the host found in tool output).
    pub evidence: BTreeSet<String>,
}

/// How a claimed tick's Run ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Done {
    /// The tick.
    pub scheduled: Timestamp,
    /// When it ended.
    pub finished: Timestamp,
    /// What it found (`None`: it did not end with a result the next Run is compared with,
    /// for example it was replaced or interrupted).
    pub digest: Option<Digest>,
    /// The status shown for it.
    pub result: ScheduleResult,
    /// Runs kept in `recentRuns`.
    pub history: usize,
}

/// A claimed tick whose Run has not ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claimed {
    /// The tick.
    pub scheduled: Timestamp,
    /// When it was claimed.
    pub claimed: Timestamp,
    /// Who asked for it to run now (`POST /api/v1/schedules/{ns}/{name}/run`); `None` for a
    /// tick of the schedule's cron.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

/// Everything recorded about one schedule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Book {
    /// The object's uid when it was first seen (a re-created object starts over).
    pub uid: String,
    /// Ticks count from here: first seen, or resumed.
    pub since: Option<Timestamp>,
    /// Suspended since.
    pub suspended: Option<Timestamp>,
    /// The newest tick decided (claimed, skipped or missed).
    pub last_tick: Option<Timestamp>,
    /// The newest claimed tick.
    pub last_claimed: Option<Timestamp>,
    /// The claimed tick whose Run has not ended.
    pub running: Option<Claimed>,
    /// The newest Run's digest that is compared with the next one.
    pub digest: Option<Digest>,
    /// The newest finished Run's status.
    pub result: Option<ScheduleResult>,
    /// When the newest succeeded Run ended.
    pub last_success: Option<Timestamp>,
    /// Failed Runs in a row.
    pub failures: u32,
    /// Ticks past their deadline.
    pub missed: u64,
    /// Ticks skipped for a reason.
    pub skipped: u64,
    /// The newest skipped tick.
    pub last_skipped: Option<SkippedTick>,
    /// Run ids, newest first.
    pub recent: VecDeque<String>,
    /// Thread root per receiver (`namespace/name`).
    pub threads: BTreeMap<String, String>,
}

/// The state of every schedule, by `namespace/name`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Books {
    /// Per schedule.
    pub schedules: BTreeMap<String, Book>,
    /// Tokens reserved by claimed ticks, per namespace and UTC day (`YYYY-MM-DD`).
    pub reserved: BTreeMap<String, BTreeMap<String, u64>>,
}

fn parse<T: serde::de::DeserializeOwned>(record: &Record, field: &str) -> Result<T, String> {
    serde_json::from_value(record.data.get(field).cloned().unwrap_or(Value::Null))
        .map_err(|e| format!("{} record: field {field}: {e}", record.kind))
}

/// The UTC day of an instant.
pub fn day(at: Timestamp) -> String {
    at.strftime("%Y-%m-%d").to_string()
}

impl Books {
    fn book(&mut self, record: &Record) -> Result<&mut Book, String> {
        let key: String = parse(record, "key")?;
        Ok(self.schedules.entry(key).or_default())
    }

    fn reserve(&mut self, namespace: String, at: Timestamp, tokens: u64) {
        let days = self.reserved.entry(namespace).or_default();
        *days.entry(day(at)).or_default() += tokens;
        while days.len() > RESERVATION_DAYS {
            days.pop_first();
        }
    }

    /// Tokens `namespace` reserved on the UTC day of `at`.
    pub fn reserved_on(&self, namespace: &str, at: Timestamp) -> u64 {
        self.reserved.get(namespace).and_then(|days| days.get(&day(at))).copied().unwrap_or(0)
    }
}

impl Replayed for Books {
    const FORMAT: &'static str = FORMAT;
    type Saved = Books;

    fn apply(&mut self, record: &Record) -> Result<(), String> {
        match record.kind.as_str() {
            SEEN => {
                let (uid, at) = (parse(record, "uid")?, parse(record, "at")?);
                *self.book(record)? = Book { uid, since: Some(at), ..Book::default() };
            }
            SUSPENDED => self.book(record)?.suspended = Some(parse(record, "at")?),
            RESUMED => {
                let at = parse(record, "at")?;
                let book = self.book(record)?;
                book.suspended = None;
                book.since = Some(at);
            }
            CLAIMED => {
                let (scheduled, tokens, namespace) =
                    (parse(record, "scheduled")?, parse(record, "tokens")?, parse(record, "namespace")?);
                let claimed = parse(record, "at")?;
                // Absent in records written before a schedule could be run on request.
                let requested_by: Option<String> = parse(record, "requested_by")?;
                let book = self.book(record)?;
                // A Run on request is no tick of the cron: the ticks still count from the last one.
                if requested_by.is_none() {
                    book.last_tick = Some(scheduled);
                }
                book.last_claimed = Some(scheduled);
                book.running = Some(Claimed { scheduled, claimed, requested_by });
                self.reserve(namespace, scheduled, tokens);
            }
            SKIPPED => {
                let skipped: SkippedTick = parse(record, "skipped")?;
                let scheduled = parse(record, "scheduled")?;
                let book = self.book(record)?;
                book.last_tick = Some(scheduled);
                book.skipped += 1;
                book.last_skipped = Some(skipped);
            }
            MISSED => {
                let (scheduled, count) = (parse(record, "scheduled")?, parse::<u64>(record, "count")?);
                let book = self.book(record)?;
                book.last_tick = Some(scheduled);
                book.missed += count;
            }
            DONE => {
                let done: Done = parse(record, "done")?;
                self.book(record)?.finish(done);
            }
            THREAD => {
                let (receiver, root) = (parse(record, "receiver")?, parse(record, "root")?);
                self.book(record)?.threads.insert(receiver, root);
            }
            REMOVED => {
                let key: String = parse(record, "key")?;
                self.schedules.remove(&key);
            }
            other => return Err(format!("unknown record kind {other:?}")),
        }
        Ok(())
    }

    fn saved(&mut self) -> Books {
        Books { schedules: self.schedules.clone(), reserved: self.reserved.clone() }
    }
}

impl Book {
    fn finish(&mut self, done: Done) {
        if self.running.as_ref().is_some_and(|r| r.scheduled == done.scheduled) {
            self.running = None;
        }
        if let Some(digest) = &done.digest {
            if digest.failed {
                self.failures += 1;
            } else {
                self.failures = 0;
                self.last_success = Some(done.finished);
            }
            self.digest = Some(digest.clone());
        }
        if let Some(id) = &done.result.run_id {
            self.recent.push_front(id.clone());
        }
        self.recent.truncate(done.history.max(1));
        self.result = Some(done.result);
    }
}

/// The schedule journal. Cheap to clone.
#[derive(Clone)]
pub struct ScheduleStore {
    store: Arc<Durable<Books>>,
}

impl std::fmt::Debug for ScheduleStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduleStore").field("place", &self.store.place()).finish_non_exhaustive()
    }
}

/// A decision about one schedule, recorded by [`ScheduleStore::record`].
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// First seen (its ticks count from `at`), with the object's uid.
    Seen { uid: String, at: Timestamp },
    /// Suspended at `at`.
    Suspended { at: Timestamp },
    /// Resumed at `at`: its ticks count from then.
    Resumed { at: Timestamp },
    /// The tick `scheduled` runs, reserving `tokens` of `namespace`'s day; `requested_by`
    /// names who asked for a Run now (none: a tick of the cron).
    Claimed { scheduled: Timestamp, at: Timestamp, namespace: String, tokens: u64, requested_by: Option<String> },
    /// The tick `scheduled` does not run.
    Skipped { scheduled: Timestamp, skipped: SkippedTick },
    /// `count` ticks up to `scheduled` passed their deadline.
    Missed { scheduled: Timestamp, count: u64 },
    /// A claimed tick's Run ended.
    Done(Box<Done>),
    /// The thread root of `receiver`.
    Thread { receiver: String, root: String },
    /// The schedule no longer exists.
    Removed,
}

impl Entry {
    pub(super) fn kind_and_data(&self, key: &str) -> (&'static str, Value) {
        match self {
            Entry::Seen { uid, at } => (SEEN, json!({"key": key, "uid": uid, "at": at})),
            Entry::Suspended { at } => (SUSPENDED, json!({"key": key, "at": at})),
            Entry::Resumed { at } => (RESUMED, json!({"key": key, "at": at})),
            Entry::Claimed { scheduled, at, namespace, tokens, requested_by } => {
                let mut data =
                    json!({"key": key, "scheduled": scheduled, "at": at, "namespace": namespace, "tokens": tokens});
                if let Some(by) = requested_by {
                    data["requested_by"] = json!(by);
                }
                (CLAIMED, data)
            }
            Entry::Skipped { scheduled, skipped } => {
                (SKIPPED, json!({"key": key, "scheduled": scheduled, "skipped": skipped}))
            }
            Entry::Missed { scheduled, count } => (MISSED, json!({"key": key, "scheduled": scheduled, "count": count})),
            Entry::Done(done) => (DONE, json!({"key": key, "done": done})),
            Entry::Thread { receiver, root } => (THREAD, json!({"key": key, "receiver": receiver, "root": root})),
            Entry::Removed => (REMOVED, json!({"key": key})),
        }
    }
}

impl ScheduleStore {
    /// Opens (creating if missing) the journal at `path`. Blocking.
    pub fn open(path: &Path, options: JournalOptions, snapshot_every: u64) -> Result<Self, StoreError> {
        let store = Durable::open(path, options, NAME, snapshot_every, |saved| saved, Books::default)?;
        Ok(ScheduleStore { store: Arc::new(store) })
    }

    /// Opens the store `schedules` of a shared database.
    pub async fn open_database(db: &Database, clock: Clock, snapshot_every: u64) -> Result<Self, StoreError> {
        let store =
            Durable::open_database(db, STORE, clock, NAME, snapshot_every, |saved| saved, Books::default).await?;
        Ok(ScheduleStore { store: Arc::new(store) })
    }

    /// Writes this store's state as the snapshot of a journal holding a copy of its records
    /// (`akritas storage migrate --to embedded`): see [`Durable::snapshot_to`].
    pub fn snapshot_to(
        &self,
        journal: &Path,
        locate: impl FnOnce(u64) -> Option<crate::journal::Location>,
    ) -> std::io::Result<Option<u64>> {
        self.store.snapshot_to(journal, locate)
    }

    /// The state, locked briefly (never across an `await`).
    pub fn state(&self) -> State<'_, Books> {
        self.store.state()
    }

    /// What is recorded about one schedule.
    pub fn book(&self, key: &str) -> Option<Book> {
        self.state().schedules.get(key).cloned()
    }

    /// Records `entries` about the schedule `key` if `decide` (called under the writer lock,
    /// with every record other replicas committed) still wants them: it sees the schedule's
    /// book (`None`: nothing recorded yet) and the namespaces' reservations. Returns what
    /// `decide` returned.
    pub async fn decide<T>(
        &self,
        key: &str,
        decide: impl FnOnce(Option<&Book>, &Books) -> (Vec<Entry>, T),
    ) -> Result<T, StoreError> {
        let writer = self.store.writer().await?;
        let (entries, answer) = {
            let books = self.state();
            decide(books.schedules.get(key), &books)
        };
        for entry in entries {
            let (kind, data) = entry.kind_and_data(key);
            writer.record(kind, &data).await?;
        }
        Ok(answer)
    }

    /// Records `entry` about the schedule `key`.
    pub async fn record(&self, key: &str, entry: Entry) -> Result<(), StoreError> {
        self.decide(key, |_, _| (vec![entry], ())).await
    }

    /// Reads what other replicas recorded (nothing to do on a journal file).
    pub async fn refresh(&self) -> Result<(), StoreError> {
        self.store.fresh().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn done(scheduled: &str, run: &str, digest: Option<Digest>) -> Entry {
        Entry::Done(Box::new(Done {
            scheduled: at(scheduled),
            finished: at(scheduled),
            digest,
            result: ScheduleResult { run_id: Some(run.into()), outcome: "Succeeded".into(), ..Default::default() },
            history: 2,
        }))
    }

    #[tokio::test]
    async fn a_reopened_journal_has_every_decision() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("schedules.jsonl");
        let store = ScheduleStore::open(&path, JournalOptions::default(), 3).unwrap();
        let key = "ops/certs";
        store.record(key, Entry::Seen { uid: "u1".into(), at: at("2026-12-06T00:00:00Z") }).await.unwrap();
        let claim = |s: &str| Entry::Claimed {
            scheduled: at(s),
            at: at(s),
            namespace: "ops".into(),
            tokens: 100,
            requested_by: None,
        };
        store.record(key, claim("2026-12-06T01:00:00Z")).await.unwrap();
        let failed = Digest { failed: true, ..Digest::default() };
        store.record(key, done("2026-12-06T01:00:00Z", "run_1", Some(failed))).await.unwrap();
        for (hour, run) in [("02", "run_2"), ("03", "run_3")] {
            store.record(key, claim(&format!("2026-12-06T{hour}:00:00Z"))).await.unwrap();
            store.record(key, done(&format!("2026-12-06T{hour}:00:00Z"), run, Some(Digest::default()))).await.unwrap();
        }
        store.record(key, claim("2026-12-06T04:00:00Z")).await.unwrap();
        store.record(key, Entry::Thread { receiver: "ops/chat".into(), root: "42".into() }).await.unwrap();
        drop(store);
        let store = ScheduleStore::open(&path, JournalOptions::default(), 3).unwrap();
        let book = store.book(key).unwrap();
        assert_eq!(book.running.as_ref().map(|r| r.scheduled), Some(at("2026-12-06T04:00:00Z")));
        assert_eq!(book.failures, 0, "a success ends the failures in a row");
        assert_eq!(book.recent, ["run_3", "run_2"], "history keeps the newest");
        assert_eq!(book.threads["ops/chat"], "42");
        assert_eq!(store.state().reserved_on("ops", at("2026-12-06T23:00:00Z")), 400);
        assert_eq!(store.state().reserved_on("ops", at("2026-12-07T00:00:00Z")), 0, "a new day starts at 0");
        store.record(key, Entry::Removed).await.unwrap();
        assert!(store.book(key).is_none());
    }
}
