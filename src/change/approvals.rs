//! The durable store of pending changes: a random, single-use, expiring approval
//! capability per preview.
//!
//! The approval id (16 random bytes as 32 lowercase hex) is handed to the requester once
//! and never written anywhere: the store keys each change by `sha256(id)`. Every state
//! change is an fsynced record of the hash-chained journal (`change.pending`,
//! `change.state`), replayed at open, so a restart keeps pending approvals, and a change
//! taken for apply is durably `applying` before the caller may write it: two racing takes
//! have one winner, and a crash mid-apply never allows a second apply.
//!
//! Bounds: at most `max_pending` changes wait at once (a further preview is refused, none
//! is evicted). Applied, failed, expired and interrupted changes stay visible for seven
//! days (at most [`MAX_SETTLED`] of them, without their file contents: the diff stays);
//! then they are forgotten. Every [`SNAPSHOT_EVERY`] records the state is written as a
//! snapshot and the journal segments before it are deleted; segments are sealed at
//! [`SEGMENT_BYTES`] or after a day, so the disk holds the snapshot and about one segment.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{FileChange, ValidatorResult};
use crate::journal::database::Database;
use crate::journal::durable::{Durable, Replayed, State, StoreError, StoreName};
use crate::journal::{JournalOptions, Record};

/// Record of a new pending change.
const PENDING: &str = "change.pending";
/// Record of a state change.
const STATE: &str = "change.state";
/// Shape and version of the snapshot.
pub const FORMAT: &str = "akritas.change.approvals.v1";
/// The store's name in the database.
pub const STORE: &str = "approvals";
/// Records between two snapshots (and retention passes).
pub const SNAPSHOT_EVERY: u64 = 64;
/// Size at which a journal segment is sealed.
pub const SEGMENT_BYTES: u64 = 8 << 20;
/// Largest record (a change carries its files, diff and preview result).
const MAX_RECORD_BYTES: usize = 16 << 20;
/// How long settled changes stay visible.
const KEEP_SETTLED: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most settled changes kept in memory.
pub const MAX_SETTLED: usize = 128;

/// A previewed change waiting for approval, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingChange {
    /// Namespace of the Workspace.
    pub namespace: String,
    /// Workspace name.
    pub workspace: String,
    /// The snapshot's HEAD commit, when the workspace is a git repository.
    pub commit: Option<String>,
    /// Where the Workspace's changes landed at preview ([`super::types::ResolvedWorkspace::location`]);
    /// absent in approvals stored before it was recorded, which apply refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The preview Run.
    pub run_id: String,
    /// Who asked for the preview.
    pub requester: String,
    /// The host-built unified diff.
    pub diff: String,
    /// Its SHA-256 (hex).
    pub diff_sha256: String,
    /// The changed files (emptied once the change is settled; the diff stays).
    pub changes: Vec<FileChange>,
    /// Validator results on the prepared copy.
    pub validators: Vec<ValidatorResult>,
    /// SHA-256 of the validator results (hex).
    pub validators_sha256: String,
    /// When it was stored (RFC 3339, set by the store).
    pub created_at: String,
    /// When its approval expires (RFC 3339, set by the store).
    pub expires_at: String,
    /// The preview result shown by `GET` (opaque here).
    pub summary: serde_json::Value,
}

/// Where a pending change is in its life.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ChangeState {
    /// Waiting for approval.
    Pending,
    /// Taken for apply (also what a crash during apply leaves).
    Applying,
    /// The edits were written to the Workspace's tree, or pushed as a branch when it publishes.
    Applied {
        /// The apply Run.
        run_id: String,
        /// Who approved it.
        approver: String,
        /// When (RFC 3339).
        at: String,
        /// What was written (changed files, branch), opaque here.
        detail: serde_json::Value,
    },
    /// The apply failed.
    Failed {
        /// The apply Run.
        run_id: String,
        /// Who approved it.
        approver: String,
        /// When (RFC 3339).
        at: String,
        /// What went wrong writing or publishing the change.
        error: String,
    },
    /// Not approved in time.
    Expired,
}

impl ChangeState {
    /// The state as one word (`pending`, `applied`, ...), as `status` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            ChangeState::Pending => "pending",
            ChangeState::Applying => "applying",
            ChangeState::Applied { .. } => "applied",
            ChangeState::Failed { .. } => "failed",
            ChangeState::Expired => "expired",
        }
    }
}

/// Time source of the store.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// How long approvals live and how many may wait.
#[derive(Clone)]
pub struct ApprovalOptions {
    /// Time from preview to expiry.
    pub ttl: Duration,
    /// Most changes waiting at once.
    pub max_pending: usize,
    /// Most changes of one namespace waiting at once (so one tenant cannot fill the store).
    pub max_pending_per_namespace: usize,
    /// Time source (injectable for tests).
    pub clock: Clock,
}

impl Default for ApprovalOptions {
    fn default() -> Self {
        ApprovalOptions {
            ttl: Duration::from_secs(30 * 60),
            max_pending: 64,
            max_pending_per_namespace: 16,
            clock: Arc::new(Timestamp::now),
        }
    }
}

impl fmt::Debug for ApprovalOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalOptions")
            .field("ttl", &self.ttl)
            .field("max_pending", &self.max_pending)
            .field("max_pending_per_namespace", &self.max_pending_per_namespace)
            .finish_non_exhaustive()
    }
}

/// What the approval store could not do.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// Too many changes wait for approval.
    #[error("{limit} changes are already waiting for approval; apply some or let them expire before preparing another")]
    Full {
        /// The limit.
        limit: usize,
    },
    /// Too many changes of one namespace wait for approval.
    #[error(
        "{limit} changes of namespace {namespace} are already waiting for approval; apply some or let them expire before preparing another"
    )]
    NamespaceFull {
        /// The namespace.
        namespace: String,
        /// The limit.
        limit: usize,
    },
    /// The journal failed, or holds what this version cannot read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No change has this id (or it was forgotten).
    #[error("pending change not found")]
    NotFound,
    /// The change is not in a state that allows this.
    #[error("a {from} change cannot become {to}")]
    Transition {
        /// Its state.
        from: &'static str,
        /// The state asked for.
        to: &'static str,
    },
    /// A clock or TTL out of range.
    #[error("the approval expiry is out of range: {0}")]
    Time(String),
}

/// Why a change could not be taken for apply.
#[derive(Debug, thiserror::Error)]
pub enum TakeError {
    /// No change has this id (or the id is malformed).
    #[error("pending change not found or already used")]
    NotFound,
    /// It was not approved in time.
    #[error("pending change expired")]
    Expired,
    /// It was already taken (shown as not found).
    #[error("pending change not found or already used")]
    Used,
    /// The store could not record the take; nothing was taken.
    #[error(transparent)]
    Store(#[from] ApprovalError),
}

/// One change in memory.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Entry {
    change: PendingChange,
    state: ChangeState,
    expires: Timestamp,
    /// When the state last changed.
    changed_at: Timestamp,
}

impl Entry {
    /// The state at `now`: a pending change past its expiry is expired.
    fn effective(&self, now: Timestamp) -> ChangeState {
        if self.state == ChangeState::Pending && now >= self.expires {
            ChangeState::Expired
        } else {
            self.state.clone()
        }
    }

    /// When it stopped being pending, if it did by `now`.
    fn settled_at(&self, now: Timestamp) -> Option<Timestamp> {
        match self.effective(now) {
            ChangeState::Pending => None,
            ChangeState::Expired => Some(self.expires),
            _ => Some(self.changed_at),
        }
    }
}

/// The approval store in errors and logs.
const NAME: StoreName =
    StoreName { journal: "approval journal", lost: "the approvals in it", component: "akritas_change" };

/// What the store holds in memory.
struct Book {
    entries: HashMap<String, Entry>,
    /// Retention before a snapshot runs at this clock's time.
    clock: Clock,
}

impl Replayed for Book {
    const FORMAT: &'static str = FORMAT;
    type Saved = HashMap<String, Entry>;

    fn apply(&mut self, record: &Record) -> Result<(), String> {
        let hash = record.data.get("id_sha256").and_then(|h| h.as_str()).ok_or("no id_sha256")?.to_owned();
        match record.kind.as_str() {
            PENDING => {
                let change: PendingChange =
                    serde_json::from_value(record.data.get("change").cloned().unwrap_or_default())
                        .map_err(|e| format!("bad change: {e}"))?;
                let expires = change.expires_at.parse().map_err(|e| format!("bad expires_at: {e}"))?;
                let created = change.created_at.parse().map_err(|e| format!("bad created_at: {e}"))?;
                let entry = Entry { change, state: ChangeState::Pending, expires, changed_at: created };
                self.entries.insert(hash, entry);
            }
            STATE => {
                let state: ChangeState = serde_json::from_value(record.data.get("state").cloned().unwrap_or_default())
                    .map_err(|e| format!("bad state: {e}"))?;
                let at: Timestamp = record
                    .data
                    .get("at")
                    .and_then(|a| a.as_str())
                    .unwrap_or_default()
                    .parse()
                    .map_err(|e| format!("bad at: {e}"))?;
                match self.entries.get_mut(&hash) {
                    Some(entry) => set_state(entry, state, at),
                    None => tracing::warn!(
                        seq = record.seq,
                        "approval journal: a state for a change no longer kept; ignored"
                    ),
                }
            }
            other => return Err(format!("unknown record kind {other:?}")),
        }
        Ok(())
    }

    fn saved(&mut self) -> Self::Saved {
        self.prune((self.clock)());
        self.entries.clone()
    }
}

impl Book {
    /// Forgets changes settled more than seven days ago and the oldest settled past
    /// [`MAX_SETTLED`]; drops the file contents of settled ones.
    fn prune(&mut self, now: Timestamp) {
        let horizon = now.checked_sub(jiff::SignedDuration::from_secs(KEEP_SETTLED.as_secs() as i64)).unwrap_or(now);
        self.entries.retain(|_, e| e.settled_at(now).is_none_or(|at| at >= horizon));
        let mut settled: Vec<(Timestamp, String)> =
            self.entries.iter().filter_map(|(h, e)| e.settled_at(now).map(|at| (at, h.clone()))).collect();
        settled.sort();
        let excess = settled.len().saturating_sub(MAX_SETTLED);
        for (_, hash) in &settled[..excess] {
            self.entries.remove(hash);
        }
        for (_, hash) in &settled[excess..] {
            if let Some(entry) = self.entries.get_mut(hash)
                && entry.state != ChangeState::Applying
            {
                entry.change.changes = Vec::new();
            }
        }
    }

    fn pending(&self, now: Timestamp) -> usize {
        self.entries.values().filter(|e| e.effective(now) == ChangeState::Pending).count()
    }

    fn pending_in(&self, now: Timestamp, namespace: &str) -> usize {
        self.entries
            .values()
            .filter(|e| e.change.namespace == namespace && e.effective(now) == ChangeState::Pending)
            .count()
    }
}

fn set_state(entry: &mut Entry, state: ChangeState, at: Timestamp) {
    if matches!(state, ChangeState::Applied { .. } | ChangeState::Failed { .. }) {
        entry.change.changes = Vec::new();
    }
    entry.state = state;
    entry.changed_at = at;
}

/// Journal tuning (tests use small segments).
#[derive(Clone, Copy, Debug)]
struct Tuning {
    segment_bytes: u64,
    snapshot_every: u64,
}

const TUNING: Tuning = Tuning { segment_bytes: SEGMENT_BYTES, snapshot_every: SNAPSHOT_EVERY };

struct Inner {
    store: Durable<Book>,
    options: ApprovalOptions,
}

/// The durable store of pending changes. Cheap to clone.
#[derive(Clone)]
pub struct ApprovalStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for ApprovalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalStore").field("place", &self.inner.store.place()).finish_non_exhaustive()
    }
}

/// An approval id: 32 random lowercase hex digits, shown once to whoever previewed the
/// change and presented to apply it. A bearer secret: the store keeps only its hash, and its
/// `Debug` form never shows it.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ApprovalId(String);

impl ApprovalId {
    /// The id in `text`, when it has the shape of one.
    pub fn parse(text: &str) -> Option<Self> {
        valid_id(text).then(|| ApprovalId(text.to_owned()))
    }

    fn generate() -> Self {
        ApprovalId(hex::encode(rand::random::<[u8; 16]>()))
    }

    /// The id itself, for the one answer that shows it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `sha256(id)` as lowercase hex: the key the store keeps instead of the id.
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }
}

impl fmt::Debug for ApprovalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApprovalId(…)")
    }
}

/// Whether `id` has the shape of an approval id: 32 lowercase hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl ApprovalStore {
    /// Opens (creating if missing) the approval journal at `path` and replays it (from its
    /// snapshot when there is one): a restart keeps pending approvals. Blocking.
    pub fn open(path: &Path, options: ApprovalOptions) -> Result<Self, ApprovalError> {
        Self::open_tuned(path, options, TUNING)
    }

    fn open_tuned(path: &Path, options: ApprovalOptions, tuning: Tuning) -> Result<Self, ApprovalError> {
        let clock = options.clock.clone();
        let journal_options = JournalOptions {
            max_record_bytes: MAX_RECORD_BYTES,
            clock: Arc::new(move || clock().to_string()),
            segment_bytes: tuning.segment_bytes,
            segment_age: Some(Duration::from_secs(24 * 3600)),
            mac_key: None,
        };
        let store = Durable::open(
            path,
            journal_options,
            NAME,
            tuning.snapshot_every,
            |entries| Book { entries, clock: options.clock.clone() },
            || Book { entries: HashMap::new(), clock: options.clock.clone() },
        )?;
        {
            let now = (options.clock)();
            let mut book = store.state();
            book.prune(now);
            tracing::info!(component = NAME.component, path = %path.display(), pending = book.pending(now), kept = book.entries.len(), "approval store loaded");
        }
        let inner = Inner { store, options };
        Ok(ApprovalStore { inner: Arc::new(inner) })
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

    /// Opens the approvals of a shared database (store `approvals`): every replica takes and
    /// finishes the same changes, each once. [`ApprovalStore::get_current`] reads what
    /// other replicas recorded first.
    pub async fn open_database(db: &Database, options: ApprovalOptions) -> Result<Self, ApprovalError> {
        let clock = options.clock.clone();
        let stamp = clock.clone();
        let restored = clock.clone();
        let store = Durable::open_database(
            db,
            STORE,
            Arc::new(move || stamp().to_string()),
            NAME,
            TUNING.snapshot_every,
            move |entries| Book { entries, clock: restored.clone() },
            move || Book { entries: HashMap::new(), clock: clock.clone() },
        )
        .await?;
        let inner = Inner { store, options };
        Ok(ApprovalStore { inner: Arc::new(inner) })
    }

    /// [`ApprovalStore::get`] after reading what other replicas committed since the last read
    /// (on a journal file, the same as `get`).
    pub async fn get_current(&self, id: &ApprovalId) -> Result<Option<(PendingChange, ChangeState)>, ApprovalError> {
        drop(self.inner.store.fresh().await?);
        Ok(self.get(id))
    }

    fn book(&self) -> State<'_, Book> {
        self.inner.store.state()
    }

    fn now(&self) -> Timestamp {
        (self.inner.options.clock)()
    }

    /// Stores `change` (setting its creation and expiry times) and returns its approval id,
    /// which is not stored anywhere: only its hash is. Refuses when `max_pending` changes
    /// already wait.
    pub async fn insert(&self, mut change: PendingChange) -> Result<ApprovalId, ApprovalError> {
        let writer = self.inner.store.writer().await?;
        let now = self.now();
        {
            let mut book = self.book();
            book.prune(now);
            if book.pending(now) >= self.inner.options.max_pending {
                return Err(ApprovalError::Full { limit: self.inner.options.max_pending });
            }
            let limit = self.inner.options.max_pending_per_namespace;
            if book.pending_in(now, &change.namespace) >= limit {
                return Err(ApprovalError::NamespaceFull { namespace: change.namespace.clone(), limit });
            }
        }
        let ttl =
            jiff::SignedDuration::try_from(self.inner.options.ttl).map_err(|e| ApprovalError::Time(e.to_string()))?;
        let expires = now.checked_add(ttl).map_err(|e| ApprovalError::Time(e.to_string()))?;
        change.created_at = now.to_string();
        change.expires_at = expires.to_string();
        let id = ApprovalId::generate();
        let hash = id.hash();
        writer.record(PENDING, &json!({ "id_sha256": hash, "change": change })).await?;
        Ok(id)
    }

    /// The change with approval id `id` and its state now (an expired pending change is
    /// [`ChangeState::Expired`]); `None` for an unknown or malformed id.
    pub fn get(&self, id: &ApprovalId) -> Option<(PendingChange, ChangeState)> {
        let now = self.now();
        let book = self.book();
        book.entries.get(&id.hash()).map(|e| (e.change.clone(), e.effective(now)))
    }

    /// Every kept change's state now, keyed by the hash of its approval id ([`ApprovalId::hash`];
    /// the id itself is never stored): what a copy or an upgrade of the journal must keep.
    pub fn states(&self) -> std::collections::BTreeMap<String, &'static str> {
        let now = self.now();
        self.book().entries.iter().map(|(hash, entry)| (hash.clone(), entry.effective(now).name())).collect()
    }

    /// Takes the pending change `id` for apply by `approver`: durably records it as
    /// `applying` before returning it, so it can be taken once only, even across a crash.
    pub async fn take(&self, id: &ApprovalId, approver: &str) -> Result<PendingChange, TakeError> {
        let hash = id.hash();
        let writer = self.inner.store.writer().await.map_err(ApprovalError::from)?;
        let now = self.now();
        let change = {
            let book = self.book();
            let entry = book.entries.get(&hash).ok_or(TakeError::NotFound)?;
            match entry.effective(now) {
                ChangeState::Pending => entry.change.clone(),
                ChangeState::Expired => return Err(TakeError::Expired),
                _ => return Err(TakeError::Used),
            }
        };
        let data =
            json!({ "id_sha256": hash, "state": ChangeState::Applying, "at": now.to_string(), "approver": approver });
        writer.record(STATE, &data).await.map_err(ApprovalError::from)?;
        Ok(change)
    }

    /// Records how the apply of a taken change ended: [`ChangeState::Applied`] or
    /// [`ChangeState::Failed`], durably.
    pub async fn finish(&self, id: &ApprovalId, state: ChangeState) -> Result<(), ApprovalError> {
        if !matches!(state, ChangeState::Applied { .. } | ChangeState::Failed { .. }) {
            return Err(ApprovalError::Transition { from: "applying", to: state.name() });
        }
        let hash = id.hash();
        let writer = self.inner.store.writer().await?;
        let now = self.now();
        {
            let book = self.book();
            let entry = book.entries.get(&hash).ok_or(ApprovalError::NotFound)?;
            if entry.state != ChangeState::Applying {
                return Err(ApprovalError::Transition { from: entry.effective(now).name(), to: state.name() });
            }
        }
        writer.record(STATE, &json!({ "id_sha256": hash, "state": state, "at": now.to_string() })).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;
    use crate::change::Operation;
    use crate::journal;

    /// A clock tests move by hand.
    fn clock() -> (Arc<AtomicI64>, Clock) {
        let now = Arc::new(AtomicI64::new(1_750_000_000));
        let read = now.clone();
        (now, Arc::new(move || Timestamp::from_second(read.load(Ordering::SeqCst)).unwrap()))
    }

    fn options(clock: Clock) -> ApprovalOptions {
        ApprovalOptions { ttl: Duration::from_secs(1800), max_pending: 3, max_pending_per_namespace: 3, clock }
    }

    fn change(workspace: &str) -> PendingChange {
        PendingChange {
            namespace: "default".into(),
            workspace: workspace.into(),
            commit: Some("0123abcd".into()),
            location: Some("path /srv/workspaces/infra".into()),
            run_id: "run_1".into(),
            requester: "alice".into(),
            diff: "diff --git a/x b/x\n".into(),
            diff_sha256: "d".repeat(64),
            changes: vec![FileChange {
                path: "x".into(),
                operation: Operation::Replace,
                before: Some("old\n".into()),
                after: "new\n".into(),
                mode: 0o644,
            }],
            validators: Vec::new(),
            validators_sha256: "v".repeat(64),
            created_at: String::new(),
            expires_at: String::new(),
            summary: json!({"analysis": "a"}),
        }
    }

    fn applied() -> ChangeState {
        ChangeState::Applied {
            run_id: "run_2".into(),
            approver: "bob".into(),
            at: "2025-06-15T00:00:00Z".into(),
            detail: json!({"changed_files": ["x"]}),
        }
    }

    /// Every byte of every file the store wrote.
    fn stored_bytes(dir: &Path) -> Vec<u8> {
        let mut all = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            all.extend(std::fs::read(entry.unwrap().path()).unwrap());
        }
        all
    }

    #[tokio::test]
    async fn a_pending_approval_survives_a_restart_and_is_taken_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("approvals.jsonl");
        let (_, clock) = clock();
        let store = ApprovalStore::open(&path, options(clock.clone())).unwrap();
        let id = store.insert(change("nft")).await.unwrap();
        let (stored, state) = store.get(&id).unwrap();
        assert_eq!(state, ChangeState::Pending);
        assert_eq!(stored.created_at, "2025-06-15T15:06:40Z");
        assert_eq!(stored.expires_at, "2025-06-15T15:36:40Z");
        drop(store);

        let store = ApprovalStore::open(&path, options(clock.clone())).unwrap();
        assert_eq!(store.get(&id).unwrap().1, ChangeState::Pending);
        let taken = store.take(&id, "bob").await.unwrap();
        assert_eq!(taken.workspace, "nft");
        assert_eq!(taken.changes.len(), 1);
        drop(store);

        // A crash between take and finish: still not takeable again.
        let store = ApprovalStore::open(&path, options(clock.clone())).unwrap();
        assert_eq!(store.get(&id).unwrap().1, ChangeState::Applying);
        assert!(matches!(store.take(&id, "bob").await, Err(TakeError::Used)));
        store.finish(&id, applied()).await.unwrap();
        drop(store);

        let store = ApprovalStore::open(&path, options(clock)).unwrap();
        let (kept, state) = store.get(&id).unwrap();
        assert_eq!(state, applied());
        assert!(kept.changes.is_empty(), "a settled change keeps its diff, not its files");
        assert_eq!(kept.diff, "diff --git a/x b/x\n");
    }

    #[tokio::test]
    async fn an_approval_is_single_use() {
        let dir = tempfile::tempdir().unwrap();
        let (_, clock) = clock();
        let store = ApprovalStore::open(&dir.path().join("a.jsonl"), options(clock)).unwrap();
        let id = store.insert(change("nft")).await.unwrap();
        store.take(&id, "bob").await.unwrap();
        let again = store.take(&id, "bob").await.unwrap_err();
        assert!(matches!(again, TakeError::Used));
        assert_eq!(again.to_string(), "pending change not found or already used");
        store.finish(&id, applied()).await.unwrap();
        assert!(matches!(store.take(&id, "bob").await, Err(TakeError::Used)));
        assert!(matches!(store.finish(&id, applied()).await, Err(ApprovalError::Transition { from: "applied", .. })));
    }

    #[tokio::test]
    async fn unknown_and_malformed_ids_are_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let (_, clock) = clock();
        let store = ApprovalStore::open(&dir.path().join("a.jsonl"), options(clock)).unwrap();
        let issued = store.insert(change("nft")).await.unwrap();
        let id = issued.as_str();
        assert_eq!(id.len(), 32);
        assert!(valid_id(id), "{id}");
        assert_eq!(format!("{issued:?}"), "ApprovalId(…)", "Debug never shows the secret");
        for bad in ["", "../etc", &id.to_uppercase(), &id[..31], &format!("{id}0")] {
            assert!(ApprovalId::parse(bad).is_none(), "{bad}");
        }
        let unknown = ApprovalId::parse(&"0".repeat(32)).unwrap();
        assert!(matches!(store.take(&unknown, "bob").await, Err(TakeError::NotFound)));
        assert!(store.get(&unknown).is_none());
    }

    #[tokio::test]
    async fn an_expired_approval_cannot_be_taken() {
        let dir = tempfile::tempdir().unwrap();
        let (now, clock) = clock();
        let store = ApprovalStore::open(&dir.path().join("a.jsonl"), options(clock)).unwrap();
        let id = store.insert(change("nft")).await.unwrap();
        now.fetch_add(1799, Ordering::SeqCst);
        assert_eq!(store.get(&id).unwrap().1, ChangeState::Pending);
        now.fetch_add(1, Ordering::SeqCst);
        assert_eq!(store.get(&id).unwrap().1, ChangeState::Expired);
        let err = store.take(&id, "bob").await.unwrap_err();
        assert!(matches!(err, TakeError::Expired));
        assert_eq!(err.to_string(), "pending change expired");
        // Seven days after expiry it is forgotten.
        now.fetch_add(7 * 24 * 3600 + 1, Ordering::SeqCst);
        store.insert(change("other")).await.unwrap();
        assert!(store.get(&id).is_none());
        assert!(matches!(store.take(&id, "bob").await, Err(TakeError::NotFound)));
    }

    #[tokio::test]
    async fn the_raw_id_is_never_written_only_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let (_, clock) = clock();
        let store = ApprovalStore::open_tuned(&path, options(clock), Tuning { segment_bytes: 1024, snapshot_every: 2 })
            .unwrap();
        let id = store.insert(change("nft")).await.unwrap();
        store.take(&id, "bob").await.unwrap();
        store.finish(&id, applied()).await.unwrap();
        assert!(journal::snapshot::snapshot_path(&path).exists(), "a snapshot was written too");
        let bytes = String::from_utf8_lossy(&stored_bytes(dir.path())).into_owned();
        assert!(!bytes.contains(id.as_str()), "the approval id was written to disk");
        assert!(bytes.contains(&id.hash()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_racing_takes_have_exactly_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        let (_, clock) = clock();
        let store = ApprovalStore::open(&dir.path().join("a.jsonl"), options(clock)).unwrap();
        for _ in 0..5 {
            let id = store.insert(change("nft")).await.unwrap();
            let takes: Vec<_> = (0..2)
                .map(|i| {
                    let (store, id) = (store.clone(), id.clone());
                    tokio::spawn(async move { store.take(&id, &format!("approver{i}")).await })
                })
                .collect();
            let mut won = 0;
            for take in takes {
                match take.await.unwrap() {
                    Ok(_) => won += 1,
                    Err(TakeError::Used) => {}
                    Err(other) => panic!("{other:?}"),
                }
            }
            assert_eq!(won, 1);
            store.finish(&id, applied()).await.unwrap();
        }
    }

    #[tokio::test]
    async fn one_namespace_cannot_fill_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let (_now, clock) = clock();
        let options = ApprovalOptions { max_pending_per_namespace: 2, ..options(clock) };
        let store = ApprovalStore::open(&dir.path().join("a.jsonl"), options).unwrap();
        let tenant = |workspace: &str| PendingChange { namespace: "team-b".into(), ..change(workspace) };
        store.insert(tenant("a")).await.unwrap();
        store.insert(tenant("b")).await.unwrap();
        let err = store.insert(tenant("c")).await.unwrap_err();
        assert!(matches!(&err, ApprovalError::NamespaceFull { namespace, limit: 2 } if namespace == "team-b"), "{err}");
        assert!(err.to_string().contains("namespace team-b"), "{err}");
        // The platform's previews still get approvals.
        store.insert(change("d")).await.unwrap();
    }

    #[tokio::test]
    async fn a_full_store_refuses_instead_of_evicting() {
        let dir = tempfile::tempdir().unwrap();
        let (now, clock) = clock();
        let store = ApprovalStore::open(&dir.path().join("a.jsonl"), options(clock)).unwrap();
        let first = store.insert(change("a")).await.unwrap();
        store.insert(change("b")).await.unwrap();
        store.insert(change("c")).await.unwrap();
        let err = store.insert(change("d")).await.unwrap_err();
        assert!(matches!(err, ApprovalError::Full { limit: 3 }));
        assert!(err.to_string().contains("apply some or let them expire"), "{err}");
        assert_eq!(store.get(&first).unwrap().1, ChangeState::Pending, "nothing was evicted");
        // A taken change no longer counts; nor does an expired one.
        store.take(&first, "bob").await.unwrap();
        store.insert(change("d")).await.unwrap();
        now.fetch_add(1800, Ordering::SeqCst);
        store.insert(change("e")).await.unwrap();
    }

    #[tokio::test]
    async fn compaction_bounds_the_journal_and_a_restart_loads_from_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let (_, clock) = clock();
        let tuning = Tuning { segment_bytes: 4096, snapshot_every: 4 };
        let store = ApprovalStore::open_tuned(&path, options(clock.clone()), tuning).unwrap();
        let mut last = None;
        for _ in 0..60 {
            let id = store.insert(change("nft")).await.unwrap();
            store.take(&id, "bob").await.unwrap();
            store.finish(&id, applied()).await.unwrap();
            last = Some(id);
        }
        let last = last.unwrap();
        let pending = store.insert(change("kept")).await.unwrap();
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(files < 12, "{files} files: old segments were not removed");
        assert!(journal::anchor(&path).unwrap().is_some(), "retention removed the start of the journal");
        drop(store);
        let store = ApprovalStore::open_tuned(&path, options(clock), tuning).unwrap();
        assert_eq!(store.get(&pending).unwrap().1, ChangeState::Pending);
        assert_eq!(store.get(&last).unwrap().1, applied());
        store.take(&pending, "bob").await.unwrap();
    }
}
