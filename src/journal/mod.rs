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

mod error;
mod format;
mod scan;
#[cfg(test)]
mod tests;
mod writer;

use std::fmt;
use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

pub use error::JournalError;
pub use scan::{TornTail, VerifyReport, read, verify};

use format::{TORN_TAIL_KIND, check_app_kind, min_line_len};
use writer::{Command, Committed, Entry, SharedFailure, Writer};

/// Default limit on one serialized record line: 4 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 4 << 20;

/// Time source returning an RFC 3339 timestamp.
pub type Clock = Arc<dyn Fn() -> String + Send + Sync>;

/// Options for [`Journal::open`].
#[derive(Clone)]
pub struct JournalOptions {
    /// Largest allowed record line in bytes, including its trailing newline.
    pub max_record_bytes: usize,
    /// RFC 3339 time source (injectable for tests).
    pub clock: Clock,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self { max_record_bytes: DEFAULT_MAX_RECORD_BYTES, clock: Arc::new(|| jiff::Timestamp::now().to_string()) }
    }
}

impl fmt::Debug for JournalOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JournalOptions").field("max_record_bytes", &self.max_record_bytes).finish_non_exhaustive()
    }
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
    /// Payload.
    pub data: serde_json::Value,
    /// Hex SHA-256 of this record (see the module docs).
    pub hash: String,
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
    max_record_bytes: usize,
    failure: SharedFailure,
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

fn record_from_line(line: format::ParsedLine) -> Result<Record, format::LineProblem> {
    let data = serde_json::from_str(line.data.get()).map_err(format::LineProblem::UnreadableData)?;
    Ok(Record { seq: line.seq, time: line.time, kind: line.kind, data, hash: line.hash })
}

impl Journal {
    /// Opens (creating if missing: directory mode 0700, file mode 0600) and strictly verifies the journal at `path`.
    ///
    /// Any bad complete line fails with [`JournalError::Corrupt`]. A torn final line is truncated (fsynced) and an
    /// internal `journal.torn_tail_truncated` record `{"offset":..,"bytes":..}` is appended. The file is locked
    /// exclusively (`flock`) while the journal is open. Blocking; call from `spawn_blocking` in hot async paths.
    pub fn open(path: &Path, options: JournalOptions) -> Result<(Journal, Replay), JournalError> {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(dir) = parent {
            DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| JournalError::io(dir, e))?;
        }
        let existed = path.try_exists().map_err(|e| JournalError::io(path, e))?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| JournalError::io(path, e))?;
        file.try_lock().map_err(|e| match e {
            TryLockError::WouldBlock => JournalError::io(
                path,
                io::Error::new(io::ErrorKind::WouldBlock, "journal is already open (locked by another handle)"),
            ),
            TryLockError::Error(e) => JournalError::io(path, e),
        })?;
        if !existed {
            // Make the new directory entry durable.
            let dir = parent.unwrap_or(Path::new("."));
            File::open(dir).and_then(|d| d.sync_all()).map_err(|e| JournalError::io(dir, e))?;
        }

        let replay_started = std::time::Instant::now();
        let outcome = scan::scan(path, &file, options.max_record_bytes)?;
        let journal = writer::metric_name(path);
        crate::telemetry::set(
            "akritas_journal_replay_seconds",
            "Time the last opening of the journal took to read and verify it.",
            &[("journal", &journal)],
            replay_started.elapsed().as_secs_f64(),
        );
        crate::telemetry::set(
            "akritas_journal_bytes_at_open",
            "Size of the journal when it was last opened.",
            &[("journal", &journal)],
            outcome.valid_len as f64,
        );
        let mut replay = outcome.replay;

        let failure: SharedFailure = Arc::new(Mutex::new(None));
        let mut writer = Writer {
            file,
            path: path.to_owned(),
            next_seq: outcome.report.last_seq + 1,
            prev: outcome.report.last_hash.clone(),
            clock: options.clock,
            max_record_bytes: options.max_record_bytes,
            len: outcome.valid_len,
            failed: None,
            shared: failure.clone(),
        };

        if let Some(torn) = outcome.report.torn_tail {
            tracing::warn!(
                path = %path.display(),
                offset = torn.offset,
                bytes = torn.bytes,
                "journal ends with a torn record (crash during a write); truncating it"
            );
            writer
                .file
                .set_len(outcome.valid_len)
                .and_then(|()| writer.file.sync_all())
                .map_err(|e| JournalError::io(path, e))?;
            let data = serde_json::json!({ "offset": torn.offset, "bytes": torn.bytes });
            let entry = Entry { kind: TORN_TAIL_KIND.to_owned(), data_json: data.to_string(), limited: false };
            match writer.commit(vec![entry]).pop() {
                Some(Ok(c)) => replay.recovered.push(Record {
                    seq: c.seq,
                    time: c.time,
                    kind: TORN_TAIL_KIND.to_owned(),
                    data,
                    hash: c.hash,
                }),
                Some(Err(e)) => return Err(e),
                None => return Err(JournalError::Closed),
            }
        }

        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("journal-writer".to_owned())
            .spawn(move || writer.run(rx))
            .map_err(|e| JournalError::io(path, e))?;
        let inner = Inner {
            path: path.to_owned(),
            max_record_bytes: options.max_record_bytes,
            failure,
            tx: Some(tx),
            thread: Some(thread),
        };
        Ok((Journal { inner: Arc::new(inner) }, replay))
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
        Record { seq: c.seq, time: c.time, kind: kind.to_owned(), data: data.clone(), hash: c.hash }
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
