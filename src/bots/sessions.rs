//! Durable bot state: conversation sessions, the dedup window of provider event ids and the
//! events accepted but not yet answered, all on a hash-chained journal so a restart neither
//! answers twice nor forgets a conversation.
//!
//! Records: `bots.accepted` (an event's id and message: remembered for dedup and pending
//! until answered), `bots.turn` (a question and the answer that was delivered: appended to
//! the session, the event answered), `bots.reset` (the session forgotten, the event
//! answered) and `bots.done` (the event answered without changing a session). Every state
//! change is an fsynced record, applied to memory in journal order; replay applies the same
//! records with the record's own time, so it rebuilds the same state.
//!
//! Bounds: a session keeps at most `history_messages` messages and `history_bytes` bytes
//! (the oldest question/answer pair goes first), is forgotten after `ttl` without a turn,
//! and at most `max_sessions` exist (the least recently updated is evicted). The last
//! `dedup_ids` event ids are remembered (first in, first out). Every `snapshot_every`
//! records the state is written as a snapshot and the journal segments before it are
//! deleted, so the disk holds the snapshot and about one segment.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::ingress::{Inbound, Provider};
use crate::journal::database::Database;
use crate::journal::durable::{Durable, Replayed, State, StoreError, StoreName};
use crate::journal::{JournalOptions, Record};

const ACCEPTED: &str = "bots.accepted";
const TURN: &str = "bots.turn";
const RESET: &str = "bots.reset";
const DONE: &str = "bots.done";
/// Shape and version of the snapshot.
pub const FORMAT: &str = "akritas.bots.sessions.v1";
/// The store's name in the database.
pub const STORE: &str = "bot_sessions";

/// Which conversation a message belongs to: provider, receiver, conversation and thread, so
/// Telegram topics and Mattermost threads are separate sessions.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionKey {
    /// Telegram or Mattermost.
    pub provider: Provider,
    /// `namespace/name` of the receiver.
    pub receiver: String,
    /// Chat or channel id.
    pub conversation: String,
    /// Topic or thread root, if any.
    pub thread: Option<String>,
}

impl SessionKey {
    /// The session `inbound` belongs to.
    pub fn of(inbound: &Inbound) -> Self {
        SessionKey {
            provider: inbound.provider,
            receiver: inbound.receiver.clone(),
            conversation: inbound.conversation_id.clone(),
            thread: inbound.thread_id.clone(),
        }
    }
}

/// One question and the answer that was delivered for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// What the person asked.
    pub user: String,
    /// What Akritas answered.
    pub assistant: String,
}

impl Turn {
    fn bytes(&self) -> usize {
        self.user.len() + self.assistant.len()
    }
}

/// Time source of the store.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Bounds of the store and its journal tuning.
#[derive(Clone)]
pub struct SessionOptions {
    /// Most messages (a turn is two) a session keeps.
    pub history_messages: usize,
    /// Most bytes of text a session keeps.
    pub history_bytes: usize,
    /// A session without a turn for this long is forgotten.
    pub ttl: Duration,
    /// Most sessions kept.
    pub max_sessions: usize,
    /// Most event ids remembered for dedup.
    pub dedup_ids: usize,
    /// Records between two snapshots (and retention passes).
    pub snapshot_every: u64,
    /// Size at which a journal segment is sealed.
    pub segment_bytes: u64,
    /// Time source (injectable for tests).
    pub clock: Clock,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            history_messages: 20,
            history_bytes: 64 * 1024,
            ttl: Duration::from_secs(24 * 3600),
            max_sessions: 256,
            dedup_ids: 4096,
            snapshot_every: 64,
            segment_bytes: 4 << 20,
            clock: Arc::new(Timestamp::now),
        }
    }
}

impl fmt::Debug for SessionOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionOptions")
            .field("history_messages", &self.history_messages)
            .field("history_bytes", &self.history_bytes)
            .field("ttl", &self.ttl)
            .field("max_sessions", &self.max_sessions)
            .field("dedup_ids", &self.dedup_ids)
            .finish_non_exhaustive()
    }
}

/// What the session store could not do.
pub type SessionError = StoreError;

/// The session store in errors and logs.
const NAME: StoreName = StoreName {
    journal: "bot session journal",
    lost: "bot conversations and dedup ids in it",
    component: "akritas_bots",
};

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Session {
    turns: VecDeque<Turn>,
    updated: Timestamp,
}

/// The snapshot's content.
#[derive(Default, Serialize, Deserialize)]
struct Saved {
    sessions: Vec<(SessionKey, Session)>,
    dedup: Vec<String>,
    pending: Vec<(u64, Inbound)>,
}

/// The bounds replay applies.
#[derive(Clone, Copy)]
struct Limits {
    messages: usize,
    bytes: usize,
    ttl: SignedDuration,
    sessions: usize,
    dedup: usize,
}

impl Limits {
    fn of(options: &SessionOptions) -> Self {
        Limits {
            messages: options.history_messages.max(2),
            bytes: options.history_bytes,
            ttl: SignedDuration::try_from(options.ttl).unwrap_or(SignedDuration::MAX),
            sessions: options.max_sessions.max(1),
            dedup: options.dedup_ids.max(1),
        }
    }
}

/// State in memory and the journal record it reflects.
struct Book {
    limits: Limits,
    sessions: HashMap<SessionKey, Session>,
    dedup: VecDeque<String>,
    seen: HashSet<String>,
    /// Accepted, unanswered events by the seq of their `bots.accepted` record.
    pending: BTreeMap<u64, Inbound>,
    pending_ids: HashMap<String, u64>,
}

fn field<'r>(record: &'r Record, name: &str) -> Result<&'r serde_json::Value, String> {
    record.data.get(name).ok_or_else(|| format!("no {name}"))
}

fn parse<T: serde::de::DeserializeOwned>(record: &Record, name: &str) -> Result<T, String> {
    serde_json::from_value(field(record, name)?.clone()).map_err(|e| format!("bad {name}: {e}"))
}

impl Book {
    fn new(limits: Limits, saved: Saved) -> Self {
        let mut book = Book {
            limits,
            sessions: saved.sessions.into_iter().collect(),
            dedup: VecDeque::new(),
            seen: HashSet::new(),
            pending: BTreeMap::new(),
            pending_ids: HashMap::new(),
        };
        for id in saved.dedup {
            book.remember(id);
        }
        for (seq, inbound) in saved.pending {
            book.pending_ids.insert(inbound.event_id.clone(), seq);
            book.pending.insert(seq, inbound);
        }
        book
    }

    fn remember(&mut self, id: String) {
        if self.seen.insert(id.clone()) {
            self.dedup.push_back(id);
        }
        while self.dedup.len() > self.limits.dedup {
            if let Some(old) = self.dedup.pop_front() {
                self.seen.remove(&old);
            }
        }
    }

    fn answered(&mut self, event_id: &str) {
        if let Some(seq) = self.pending_ids.remove(event_id) {
            self.pending.remove(&seq);
        }
    }

    /// Forgets sessions without a turn for longer than the TTL.
    fn prune(&mut self, now: Timestamp) {
        let ttl = self.limits.ttl;
        self.sessions.retain(|_, s| now.duration_since(s.updated) <= ttl);
    }

    fn add_turn(&mut self, key: SessionKey, turn: Turn, at: Timestamp) {
        if !self.sessions.contains_key(&key) {
            while self.sessions.len() >= self.limits.sessions.max(1) {
                let oldest = self.sessions.iter().min_by(|a, b| (a.1.updated, a.0).cmp(&(b.1.updated, b.0)));
                let Some(oldest) = oldest.map(|(k, _)| k.clone()) else { break };
                self.sessions.remove(&oldest);
            }
        }
        let session = self.sessions.entry(key).or_insert_with(|| Session { turns: VecDeque::new(), updated: at });
        session.turns.push_back(turn);
        session.updated = at;
        let limits = self.limits;
        let over = |turns: &VecDeque<Turn>| {
            turns.len() * 2 > limits.messages || turns.iter().map(Turn::bytes).sum::<usize>() > limits.bytes
        };
        while !session.turns.is_empty() && over(&session.turns) {
            session.turns.pop_front();
        }
    }
}

impl Replayed for Book {
    const FORMAT: &'static str = FORMAT;
    type Saved = Saved;

    fn apply(&mut self, record: &Record) -> Result<(), String> {
        let at: Timestamp = record.time.parse().map_err(|e| format!("bad time: {e}"))?;
        match record.kind.as_str() {
            ACCEPTED => {
                let inbound: Inbound = parse(record, "inbound")?;
                let id = inbound.event_id.clone();
                if !self.seen.contains(&id) && !self.pending_ids.contains_key(&id) {
                    self.pending_ids.insert(id.clone(), record.seq);
                    self.pending.insert(record.seq, inbound);
                    self.remember(id);
                }
            }
            TURN => {
                let key: SessionKey = parse(record, "key")?;
                let turn = Turn { user: parse(record, "user")?, assistant: parse(record, "assistant")? };
                self.answered(&parse::<String>(record, "event_id")?);
                self.add_turn(key, turn, at);
            }
            RESET => {
                let key: SessionKey = parse(record, "key")?;
                self.answered(&parse::<String>(record, "event_id")?);
                self.sessions.remove(&key);
            }
            DONE => self.answered(&parse::<String>(record, "event_id")?),
            other => return Err(format!("unknown record kind {other:?}")),
        }
        self.prune(at);
        Ok(())
    }

    fn saved(&mut self) -> Saved {
        Saved {
            sessions: self.sessions.iter().map(|(k, s)| (k.clone(), s.clone())).collect(),
            dedup: self.dedup.iter().cloned().collect(),
            pending: self.pending.iter().map(|(seq, i)| (*seq, i.clone())).collect(),
        }
    }
}

struct Inner {
    store: Durable<Book>,
    options: SessionOptions,
}

/// The durable store of bot sessions and dedup ids. Cheap to clone.
#[derive(Clone)]
pub struct SessionStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionStore").field("place", &self.inner.store.place()).finish_non_exhaustive()
    }
}

impl SessionStore {
    /// Opens (creating if missing) the journal at `path` and replays it from its snapshot when
    /// there is one. Blocking.
    pub fn open(path: &Path, options: SessionOptions) -> Result<Self, SessionError> {
        let limits = Limits::of(&options);
        let clock = options.clock.clone();
        let journal_options = JournalOptions {
            clock: Arc::new(move || clock().to_string()),
            segment_bytes: options.segment_bytes,
            segment_age: Some(Duration::from_secs(24 * 3600)),
            ..JournalOptions::default()
        };
        let store = Durable::open(
            path,
            journal_options,
            NAME,
            options.snapshot_every,
            |saved| Book::new(limits, saved),
            || Book::new(limits, Saved::default()),
        )?;
        {
            let mut book = store.state();
            book.prune((options.clock)());
            tracing::info!(component = NAME.component, path = %path.display(), sessions = book.sessions.len(), pending = book.pending.len(), "bot session store loaded");
        }
        let inner = Inner { store, options };
        Ok(SessionStore { inner: Arc::new(inner) })
    }

    /// Writes this store's state as the snapshot of a journal holding a copy of its records
    /// (`akritas storage migrate --to embedded`): see [`crate::journal::durable::Durable::snapshot_to`].
    pub fn snapshot_to(
        &self,
        journal: &Path,
        locate: impl FnOnce(u64) -> Option<crate::journal::Location>,
    ) -> std::io::Result<Option<u64>> {
        self.inner.store.snapshot_to(journal, locate)
    }

    /// Opens the sessions of a shared database (store `bot_sessions`): every replica sees the
    /// same sessions and dedup window. [`SessionStore::refresh`] reads what other replicas
    /// recorded before a read.
    pub async fn open_database(db: &Database, options: SessionOptions) -> Result<Self, SessionError> {
        let limits = Limits::of(&options);
        let clock = options.clock.clone();
        let store = Durable::open_database(
            db,
            STORE,
            Arc::new(move || clock().to_string()),
            NAME,
            options.snapshot_every,
            move |saved| Book::new(limits, saved),
            move || Book::new(limits, Saved::default()),
        )
        .await?;
        let inner = Inner { store, options };
        Ok(SessionStore { inner: Arc::new(inner) })
    }

    /// Reads the records other replicas committed since the last read (nothing to do on a
    /// journal file).
    pub async fn refresh(&self) -> Result<(), SessionError> {
        self.inner.store.fresh().await?;
        Ok(())
    }

    fn book(&self) -> State<'_, Book> {
        self.inner.store.state()
    }

    fn now(&self) -> Timestamp {
        (self.inner.options.clock)()
    }

    /// Most messages a session keeps (shown by `/status`).
    pub fn history_limit(&self) -> usize {
        self.book().limits.messages
    }

    /// Whether `event_id` was already accepted (within the dedup window).
    pub fn is_duplicate(&self, event_id: &str) -> bool {
        let book = self.book();
        book.seen.contains(event_id) || book.pending_ids.contains_key(event_id)
    }

    /// Durably accepts `inbound`: its id joins the dedup window and it is pending until
    /// answered. Returns `false` (writing nothing) for an id already accepted.
    pub async fn accept(&self, inbound: &Inbound) -> Result<bool, SessionError> {
        let writer = self.inner.store.writer().await?;
        if self.is_duplicate(&inbound.event_id) {
            return Ok(false);
        }
        writer.record(ACCEPTED, &json!({ "event_id": inbound.event_id, "inbound": inbound })).await?;
        Ok(true)
    }

    /// Accepted events not yet answered, oldest first (replayed after a restart).
    pub fn pending(&self) -> Vec<Inbound> {
        self.book().pending.values().cloned().collect()
    }

    /// The retained history of a session, oldest first (empty for an unknown or expired one).
    pub fn history(&self, key: &SessionKey) -> Vec<Turn> {
        let now = self.now();
        let mut book = self.book();
        book.prune(now);
        book.sessions.get(key).map(|s| s.turns.iter().cloned().collect()).unwrap_or_default()
    }

    /// How many messages a session retains (two per turn).
    pub fn retained_messages(&self, key: &SessionKey) -> usize {
        self.history(key).len() * 2
    }

    /// Records a delivered answer: the turn joins the session and `event_id` is answered. A
    /// turn larger than the session's byte bound could not be retained, so only the answer is
    /// recorded.
    pub async fn record_turn(
        &self,
        key: &SessionKey,
        event_id: &str,
        user: &str,
        assistant: &str,
    ) -> Result<(), SessionError> {
        let writer = self.inner.store.writer().await?;
        if user.len() + assistant.len() > self.book().limits.bytes {
            return writer.record(DONE, &json!({ "event_id": event_id })).await;
        }
        let data = json!({ "key": key, "event_id": event_id, "user": user, "assistant": assistant });
        writer.record(TURN, &data).await
    }

    /// Forgets a session (`/new`); `event_id` is answered.
    pub async fn reset(&self, key: &SessionKey, event_id: &str) -> Result<(), SessionError> {
        let writer = self.inner.store.writer().await?;
        writer.record(RESET, &json!({ "key": key, "event_id": event_id })).await
    }

    /// Records that `event_id` was answered without changing a session.
    pub async fn done(&self, event_id: &str) -> Result<(), SessionError> {
        let writer = self.inner.store.writer().await?;
        writer.record(DONE, &json!({ "event_id": event_id })).await
    }

    /// Forgets sessions past their TTL (also done on every access).
    pub fn prune_expired(&self) {
        let now = self.now();
        self.book().prune(now);
    }
}
