//! Append-only, hash-chained, fsynced JSONL journal shared by the audit log and the alert journal.
//!
//! Each line is one JSON object, fields in this order:
//! `{"seq":N,"time":"RFC3339","kind":"<kind>","prev":"<hex>","data":<payload>,"hash":"<hex>"}` where
//! `hash = sha256(prev + "\n" + seq + "\n" + time + "\n" + kind + "\n" + <raw data JSON bytes>)` and `prev` is the
//! previous record's hash (64 zeros for seq 1).
//!
//! * [`Journal::append`] returns only after the record is written and `fsync`ed. A dedicated writer thread
//!   group-commits every pending append with one fsync, and assigns seq and hash in commit order.
//! * [`Journal::open`] verifies the whole file; any bad complete line is [`JournalError::Corrupt`], and so is a
//!   line over `max_record_bytes` (the writer's own bound), found without holding it in memory. A torn final
//!   line (no trailing newline, from a crash mid-write) is truncated and recorded as an internal
//!   `journal.torn_tail_truncated` record.
//! * A failed write or fsync (disk full, read-only filesystem) fails its batch with
//!   [`JournalError::Unwritable`], cuts the file back to the last committed record (the failed records are
//!   never chained) and refuses appends until [`Journal::recover`] writes an internal `journal.write_failed`
//!   record; no restart is needed.
//! * [`verify`] checks a file without modifying it (`akritas audit verify PATH`).

mod chain;
pub mod database;
pub(crate) mod durable;
mod error;
mod format;
mod keyed;
pub(crate) mod pace;
mod scan;
mod segments;
pub mod snapshot;
#[cfg(test)]
mod tests;
mod verbatim;
mod writer;

use std::fmt;
use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

pub use chain::{anchor, copy_out, read, read_record, scan_from, verify};
pub use error::JournalError;
pub use keyed::{SealError, SealReport, verify_seals};
pub use scan::{ScanError, Seen, TornTail, VerifyReport};
pub use segments::Anchor;
pub use verbatim::{Line, Verbatim};
pub use writer::Head;

use format::{INTERNAL_PREFIX, TORN_TAIL_KIND, check_app_kind, min_line_len};
use segments::Layout;
use writer::{Command, Committed, Entry, Rotation, Segments, SharedFailure, Writer};

/// Default limit on one serialized record line: 4 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 4 << 20;

/// Time source returning an RFC 3339 timestamp.
pub type Clock = Arc<dyn Fn() -> String + Send + Sync>;

/// Default size at which the active segment is sealed: 64 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
/// Default age at which the active segment is sealed: one day.
pub const DEFAULT_SEGMENT_AGE: Duration = Duration::from_secs(24 * 3600);

/// Options for [`Journal::open`].
#[derive(Clone)]
pub struct JournalOptions {
    /// Largest allowed record line in bytes, including its trailing newline.
    pub max_record_bytes: usize,
    /// RFC 3339 time source (injectable for tests).
    pub clock: Clock,
    /// The active segment is sealed once it holds this many bytes (0: never by size).
    pub segment_bytes: u64,
    /// The active segment is sealed once its first record is this old (`None`: never by age).
    pub segment_age: Option<Duration>,
    /// Every record written gets a keyed seal (`"mac"`, HMAC-SHA256 of its hash) when set.
    pub mac_key: Option<Arc<[u8]>>,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            clock: Arc::new(|| jiff::Timestamp::now().to_string()),
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            segment_age: Some(DEFAULT_SEGMENT_AGE),
            mac_key: None,
        }
    }
}

impl fmt::Debug for JournalOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JournalOptions")
            .field("max_record_bytes", &self.max_record_bytes)
            .field("segment_bytes", &self.segment_bytes)
            .field("segment_age", &self.segment_age)
            .field("keyed", &self.mac_key.is_some())
            .finish_non_exhaustive()
    }
}

/// Where a record is stored: its segment (the seq of the segment's first record), the byte
/// offset of its line in that segment and the line's length with its newline. A record of the
/// database backend is its own segment ([`database::located`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Location {
    /// Segment id.
    pub segment: u64,
    /// Byte offset of the line.
    pub offset: u64,
    /// Length of the line, newline included.
    pub len: u32,
}

/// A record of the chain a snapshot reflects: replay resumes after it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Its seq.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
    /// Where it is.
    pub location: Location,
}

/// Which sealed segments retention may delete.
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// Only segments whose last record is at least this old.
    pub max_age: Duration,
    /// Only segments holding no record at or after this seq (what a snapshot, an open
    /// incident or a pending job still needs).
    pub keep_from: u64,
}

/// What one retention pass deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Removed {
    /// Segment files.
    pub segments: u64,
    /// Records in them.
    pub records: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Seq of the first record kept (0 when nothing was removed).
    pub first_kept: u64,
}

/// What [`Journal::open_from`] read besides the records it handed over.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Opened {
    /// Internal `journal.*` records read, including any written during this open.
    pub recovered: Vec<Record>,
    /// The chain as verified.
    pub report: VerifyReport,
}

/// One committed record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Position in the chain, starting at 1.
    pub seq: u64,
    /// RFC 3339 commit time.
    pub time: String,
    /// Record kind, e.g. `audit.tool_call`.
    pub kind: String,
    /// The JSON payload as appended; its raw bytes are part of `hash`.
    pub data: serde_json::Value,
    /// Hex SHA-256 of this record (see the module docs).
    pub hash: String,
    /// Where it is stored.
    pub location: Location,
}

impl Record {
    /// The checkpoint of a state that reflects this record and every one before it.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint { seq: self.seq, hash: self.hash.clone(), location: self.location }
    }
}

/// Records read (and written) by [`Journal::open`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replay {
    /// Application records, in order.
    pub records: Vec<Record>,
    /// Internal `journal.*` records, in order, including any written during this open.
    pub recovered: Vec<Record>,
}

/// Handle to an open journal. Cheap to clone; the writer thread stops when the last clone is dropped or on
/// [`Journal::close`].
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    layout: Layout,
    /// Held (`flock`) while open.
    _lock: File,
    max_record_bytes: usize,
    failure: SharedFailure,
    head: writer::SharedHead,
    tx: Option<mpsc::Sender<Command>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping the sender ends the writer loop once it has drained the queue.
        self.tx = None;
        if let Some(handle) = self.thread.take() {
            let _ = handle.join();
        }
    }
}

impl fmt::Debug for Journal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Journal").field("path", &self.inner.path).finish_non_exhaustive()
    }
}

fn record_from_line(line: format::ParsedLine, location: Location) -> Result<Record, format::LineProblem> {
    let data = serde_json::from_str(line.data.get()).map_err(format::LineProblem::UnreadableData)?;
    Ok(Record { seq: line.seq, time: line.time, kind: line.kind, data, hash: line.hash, location })
}

/// Whether `kind` is one the journal writes itself (`journal.*`: a torn tail truncated, a
/// retention, a failed write): part of the chain, part of no store's state.
pub fn is_internal(kind: &str) -> bool {
    kind.starts_with(INTERNAL_PREFIX)
}

/// Whether a journal is at `path` (a segment, or the anchor retention left).
pub fn exists(path: &Path) -> Result<bool, JournalError> {
    let layout = Layout::new(path);
    Ok(!layout.list()?.is_empty() || layout.read_anchor()?.is_some())
}

/// Takes the lock of the journal at `path` (whose directory exists) without opening it, so no
/// process writes it while the lock file is held: [`JournalError::Locked`] when one does.
pub fn hold(path: &Path) -> Result<File, JournalError> {
    take_lock(&Layout::new(path))
}

/// Takes the journal's lock file, refusing a second opener. A lock still held for a moment
/// is waited for (up to a second): a child process forked by another thread holds a copy of
/// the descriptor until it executes its program.
fn take_lock(layout: &Layout) -> Result<File, JournalError> {
    let path = layout.lock_path();
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| JournalError::io(&path, e))?;
    let mut attempts = 0;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(TryLockError::WouldBlock) if attempts < 20 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(TryLockError::WouldBlock) => return Err(JournalError::Locked { path: layout.base().to_path_buf() }),
            Err(TryLockError::Error(e)) => return Err(JournalError::io(&path, e)),
        }
    }
}

/// Splits internal records from application ones for a visitor of application records.
fn visit_app<'a, E>(
    recovered: &'a mut Vec<Record>,
    visit: &'a mut dyn FnMut(Record) -> Result<(), E>,
) -> impl FnMut(scan::Seen) -> Result<(), E> + 'a {
    move |scan::Seen { record, .. }| {
        if record.kind.starts_with(INTERNAL_PREFIX) {
            recovered.push(record);
            Ok(())
        } else {
            visit(record)
        }
    }
}

impl Journal {
    /// Opens (creating if missing: directory mode 0700, file mode 0600) and strictly verifies the journal at `path`,
    /// returning every record. Holds all of them in memory: for small journals and tests; the stores use
    /// [`Journal::open_from`].
    pub fn open(path: &Path, options: JournalOptions) -> Result<(Journal, Replay), JournalError> {
        let mut records = Vec::new();
        let mut keep = |record: Record| -> Result<(), std::convert::Infallible> {
            records.push(record);
            Ok(())
        };
        let (journal, opened) = Journal::open_from(path, options, None, &mut keep).map_err(ScanError::into_journal)?;
        Ok((journal, Replay { records, recovered: opened.recovered }))
    }

    /// Opens (creating if missing) the journal at `path` and hands every application record after `from` (all of
    /// them without a checkpoint) to `visit`, in order, verifying the chain as it goes; memory stays bounded by one
    /// record. A checkpoint the journal does not hold (its record is gone or differs) is
    /// [`JournalError::CheckpointMismatch`]: the caller then opens without one.
    ///
    /// Any bad complete line fails with [`JournalError::Corrupt`]. A torn final line of the active segment is
    /// truncated (fsynced) and an internal `journal.torn_tail_truncated` record `{"offset":..,"bytes":..}` is
    /// appended. Segments older than the retention anchor (left by an interrupted retention) are deleted.
    /// `P.lock` is locked exclusively (`flock`) while the journal is open. Blocking.
    pub fn open_from<E>(
        path: &Path,
        options: JournalOptions,
        from: Option<&Checkpoint>,
        visit: &mut dyn FnMut(Record) -> Result<(), E>,
    ) -> Result<(Journal, Opened), ScanError<E>> {
        let layout = Layout::new(path);
        let dir = layout.dir().to_owned();
        DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(|e| JournalError::io(&dir, e))?;
        let lock = take_lock(&layout)?;

        let replay_started = std::time::Instant::now();
        let mut recovered = Vec::new();
        let chain = {
            let mut app = visit_app(&mut recovered, visit);
            chain::read_chain(&layout, from, options.max_record_bytes, &mut app)?
        };
        let journal = writer::metric_name(path);
        crate::telemetry::set(
            "akritas_journal_replay_seconds",
            "Time the last opening of the journal took to read and verify what it replayed.",
            &[("journal", &journal)],
            replay_started.elapsed().as_secs_f64(),
        );
        crate::telemetry::set(
            "akritas_journal_replayed_records",
            "Records the last opening of the journal replayed (the tail after the snapshot, or all).",
            &[("journal", &journal)],
            chain.report.records as f64,
        );
        for leftover in &chain.leftovers {
            let old = layout.segment_path(leftover.id);
            tracing::info!(path = %old.display(), "deleting a journal segment an interrupted retention left");
            std::fs::remove_file(&old).map_err(|e| JournalError::io(&old, e))?;
        }

        let mut sealed = chain.segments;
        let active = sealed.pop();
        let active_id = active.as_ref().map_or(1, |s| s.id);
        let active_path = layout.segment_path(active_id);
        let existed = active.is_some();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&active_path)
            .map_err(|e| JournalError::io(&active_path, e))?;
        if !existed {
            // Make the new directory entry durable.
            layout.sync_dir().map_err(|e| JournalError::io(&dir, e))?;
        }
        let active_since = segments::first_line(&active_path, options.max_record_bytes)
            .ok()
            .flatten()
            .and_then(|line| serde_json::from_slice::<format::ParsedLine>(&line).ok())
            .and_then(|line| line.time.parse().ok());

        let failure: SharedFailure = Arc::new(Mutex::new(None));
        let head: writer::SharedHead =
            Arc::new(Mutex::new(Head { seq: chain.report.last_seq, hash: chain.report.last_hash.clone(), mac: None }));
        let mut writer = Writer {
            file,
            segments: Segments {
                layout: layout.clone(),
                rotation: Rotation { bytes: options.segment_bytes, age: options.segment_age },
                sealed,
                active: active_id,
                active_since,
                anchor: chain.anchor,
            },
            path: path.to_owned(),
            next_seq: chain.report.last_seq + 1,
            prev: chain.report.last_hash.clone(),
            clock: options.clock,
            max_record_bytes: options.max_record_bytes,
            len: chain.active_len,
            failed: None,
            shared: failure.clone(),
            mac_key: options.mac_key.clone(),
            head: head.clone(),
        };
        writer.publish_segments();

        if let Some(torn) = chain.report.torn_tail {
            tracing::warn!(
                path = %active_path.display(),
                offset = torn.offset,
                bytes = torn.bytes,
                "journal ends with a torn record (crash during a write); truncating it"
            );
            writer
                .file
                .set_len(chain.active_len)
                .and_then(|()| writer.file.sync_all())
                .map_err(|e| JournalError::io(&active_path, e))?;
            let data = serde_json::json!({ "offset": torn.offset, "bytes": torn.bytes });
            let entry = Entry { kind: TORN_TAIL_KIND.to_owned(), data_json: data.to_string(), limited: false };
            match writer.commit(vec![entry]).pop() {
                Some(Ok(c)) => recovered.push(Record {
                    seq: c.seq,
                    time: c.time,
                    kind: TORN_TAIL_KIND.to_owned(),
                    data,
                    hash: c.hash,
                    location: c.location,
                }),
                Some(Err(e)) => return Err(e.into()),
                None => return Err(JournalError::Closed.into()),
            }
        }

        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("journal-writer".to_owned())
            .spawn(move || writer.run(rx))
            .map_err(|e| JournalError::io(path, e))?;
        let inner = Inner {
            path: path.to_owned(),
            layout,
            _lock: lock,
            max_record_bytes: options.max_record_bytes,
            failure,
            head,
            tx: Some(tx),
            thread: Some(thread),
        };
        Ok((Journal { inner: Arc::new(inner) }, Opened { recovered, report: chain.report }))
    }

    /// Reads the one record at `location` (checking that its hash matches its content). Fails with
    /// [`JournalError::Io`] of kind `NotFound` when retention deleted its segment.
    pub fn read_at(&self, location: Location) -> Result<Record, JournalError> {
        chain::read_at(&self.inner.layout, location)
    }

    /// Deletes the sealed segments `rule` allows (never the active one); see [`Retention`].
    pub async fn retain(&self, rule: Retention) -> Result<Removed, JournalError> {
        let (reply, rx) = oneshot::channel();
        let tx = self.inner.tx.as_ref().ok_or(JournalError::Closed)?;
        tx.send(Command::Retain(rule, reply)).map_err(|_| JournalError::Closed)?;
        rx.await.map_err(|_| JournalError::Closed)?
    }

    /// The last committed record (seq, hash and seal), for an anchor kept outside the journal.
    pub fn head(&self) -> Head {
        self.inner.head.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The journal file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Validates and queues an append; returns the receiver for its outcome and the serialized data.
    fn submit(
        &self,
        kind: &str,
        data: &serde_json::Value,
    ) -> Result<oneshot::Receiver<Result<Committed, JournalError>>, JournalError> {
        check_app_kind(kind)?;
        let data_json = data.to_string();
        let min = min_line_len(kind, &data_json);
        if min > self.inner.max_record_bytes {
            return Err(JournalError::RecordTooLarge { size: min, limit: self.inner.max_record_bytes });
        }
        let (reply, rx) = oneshot::channel();
        let entry = Entry { kind: kind.to_owned(), data_json, limited: true };
        let tx = self.inner.tx.as_ref().ok_or(JournalError::Closed)?;
        tx.send(Command::Append(entry, reply)).map_err(|_| JournalError::Closed)?;
        Ok(rx)
    }

    pub(crate) fn finish(kind: &str, data: &serde_json::Value, c: Committed) -> Record {
        Record {
            seq: c.seq,
            time: c.time,
            kind: kind.to_owned(),
            data: data.clone(),
            hash: c.hash,
            location: c.location,
        }
    }

    /// Appends one application record; returns once it is written and fsynced.
    ///
    /// `kind` must match `^[a-z][a-z0-9_.]{0,63}$` and not start with `journal.`. If the future is dropped after
    /// the record was queued, the record is still written.
    pub async fn append(&self, kind: &str, data: &serde_json::Value) -> Result<Record, JournalError> {
        let rx = self.submit(kind, data)?;
        let committed = rx.await.map_err(|_| JournalError::Closed)??;
        Ok(Self::finish(kind, data, committed))
    }

    /// Queues an append now (its place in the journal is fixed by this call) and
    /// returns a handle that resolves once the record is fsynced. Lets a caller
    /// keep its own state in journal order while many commits share one fsync.
    pub fn enqueue(&self, kind: &str, data: &serde_json::Value) -> Result<PendingAppend, JournalError> {
        let rx = self.submit(kind, data)?;
        Ok(PendingAppend { rx, kind: kind.to_owned(), data: data.clone() })
    }

    /// Same as [`Journal::append`] for non-async callers.
    ///
    /// Blocks the current thread. Must not be called from a thread that is running a tokio runtime (it panics
    /// there); from async code use [`Journal::append`] or `tokio::task::spawn_blocking`.
    pub fn append_blocking(&self, kind: &str, data: &serde_json::Value) -> Result<Record, JournalError> {
        let rx = self.submit(kind, data)?;
        let committed = rx.blocking_recv().map_err(|_| JournalError::Closed)??;
        Ok(Self::finish(kind, data, committed))
    }

    /// Why appends are refused now (a write failed and no recovery has written since), if they are.
    pub fn failure(&self) -> Option<String> {
        let failure = self.inner.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.as_ref().map(|f| {
            JournalError::Unwritable { path: self.inner.path.clone(), reason: f.reason.clone(), kind: f.kind }
                .to_string()
        })
    }

    /// After a failed write: cuts the file back to the last committed record, writes an internal
    /// `journal.write_failed` record and, once that is fsynced, accepts appends again. Everything queued
    /// before this call has its answer first. Does nothing (and writes nothing) when no write failed; fails
    /// with [`JournalError::Unwritable`] while the storage still refuses.
    pub async fn recover(&self) -> Result<(), JournalError> {
        let (reply, rx) = oneshot::channel();
        let tx = self.inner.tx.as_ref().ok_or(JournalError::Closed)?;
        tx.send(Command::Recover(reply)).map_err(|_| JournalError::Closed)?;
        rx.await.map_err(|_| JournalError::Closed)?
    }

    /// Flushes all pending appends and stops the writer thread. Other clones then get [`JournalError::Closed`].
    /// Fails with [`JournalError::Unwritable`] if a write failed and no recovery has written since.
    pub async fn close(self) -> Result<(), JournalError> {
        let (reply, rx) = oneshot::channel();
        let tx = self.inner.tx.as_ref().ok_or(JournalError::Closed)?;
        tx.send(Command::Close(reply)).map_err(|_| JournalError::Closed)?;
        rx.await.map_err(|_| JournalError::Closed)?
    }
}

/// An append queued by [`Journal::enqueue`].
pub struct PendingAppend {
    rx: oneshot::Receiver<Result<Committed, JournalError>>,
    kind: String,
    data: serde_json::Value,
}

impl PendingAppend {
    /// Waits until the record is written and fsynced.
    pub async fn committed(self) -> Result<Record, JournalError> {
        let committed = self.rx.await.map_err(|_| JournalError::Closed)??;
        Ok(Journal::finish(&self.kind, &self.data, committed))
    }
}
