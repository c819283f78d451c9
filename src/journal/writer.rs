//! The dedicated writer thread: group commit of pending appends with one fsync per batch,
//! and recovery from a failed write (disk full, read-only filesystem, I/O error).
//!
//! A failed write or fsync truncates the file back to the end of the last committed record,
//! so it stays a valid journal, and the chain head stays where it was: no failed record is
//! ever chained. From then on every append is refused, without touching the file, until the
//! owner asks to [`Command::Recover`] (it may first have to put its own state back in step with
//! the journal). Recovery truncates again and writes a `journal.write_failed` record; only once
//! that write and its fsync succeed are appends accepted again.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};

use tokio::sync::oneshot;

use super::format::{WRITE_FAILED_KIND, encode};
use super::{Clock, JournalError};

/// Most appends taken into one batch.
const MAX_BATCH_RECORDS: usize = 4096;
/// Stop draining the channel once a batch holds about this many payload bytes.
const MAX_BATCH_BYTES: usize = 16 << 20;

/// Seq, time and hash assigned to a committed record.
pub(crate) struct Committed {
    pub(crate) seq: u64,
    pub(crate) time: String,
    pub(crate) hash: String,
}

/// One record to write.
pub(crate) struct Entry {
    pub(crate) kind: String,
    pub(crate) data_json: String,
    /// Whether `max_record_bytes` applies (not for internal records).
    pub(crate) limited: bool,
}

pub(crate) type AppendReply = oneshot::Sender<Result<Committed, JournalError>>;

/// Messages to the writer thread.
pub(crate) enum Command {
    Append(Entry, AppendReply),
    /// Repair the file after a failed write and accept appends again (a no-op when nothing failed).
    Recover(oneshot::Sender<Result<(), JournalError>>),
    /// Flush everything queued before it, answer, and stop.
    Close(oneshot::Sender<Result<(), JournalError>>),
}

/// Why the writer refuses appends.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// The failed operation's error text (no path).
    pub(crate) reason: String,
    pub(crate) kind: io::ErrorKind,
    /// Records refused since (including the failed batch).
    pub(crate) refused: u64,
}

/// The writer's failure as others see it ([`super::Journal::failure`]).
pub(crate) type SharedFailure = Arc<Mutex<Option<Failure>>>;

/// Owns the file and the chain head; only ever used from one thread at a time.
pub(crate) struct Writer {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
    pub(crate) next_seq: u64,
    pub(crate) prev: String,
    pub(crate) clock: Clock,
    pub(crate) max_record_bytes: usize,
    /// Length of the file up to the end of the last committed record.
    pub(crate) len: u64,
    /// Set after a failed write or fsync, until a recovery writes again.
    pub(crate) failed: Option<Failure>,
    /// A copy of `failed` for readers outside the thread.
    pub(crate) shared: SharedFailure,
}

/// The journal's name in metrics: its file stem (`audit`, `alerts`).
pub(crate) fn metric_name(path: &std::path::Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// One write + fsync of a batch, for `/metrics`.
fn record_write(path: &std::path::Path, bytes: usize, took: std::time::Duration, ok: bool) {
    let journal = metric_name(path);
    crate::telemetry::observe(
        "akritas_journal_fsync_seconds",
        "Time of one journal batch write and fsync, by journal.",
        &[("journal", &journal)],
        took,
    );
    let outcome = if ok { "ok" } else { "failed" };
    crate::telemetry::count(
        "akritas_journal_writes_total",
        "Journal batch writes by journal and outcome.",
        &[("journal", &journal), ("outcome", outcome)],
        1.0,
    );
    if ok {
        crate::telemetry::count(
            "akritas_journal_appended_bytes_total",
            "Bytes appended to the journal since start.",
            &[("journal", &journal)],
            bytes as f64,
        );
    }
}

impl Writer {
    fn unwritable(&self, failure: &Failure) -> JournalError {
        JournalError::Unwritable { path: self.path.clone(), reason: failure.reason.clone(), kind: failure.kind }
    }

    fn set_failed(&mut self, failed: Option<Failure>) {
        *self.shared.lock().unwrap_or_else(|p| p.into_inner()) = failed.clone();
        self.failed = failed;
    }

    /// Cuts the file back to the end of the last committed record and makes that durable.
    fn truncate(&mut self) -> io::Result<()> {
        self.file.set_len(self.len)?;
        self.file.sync_all()
    }

    /// Writes `entries` in order with a single fsync; returns one result per entry.
    /// Entries over the size limit fail alone; a write/fsync failure fails the whole batch, truncates the partial
    /// bytes and refuses further appends until [`Writer::recover`].
    pub(crate) fn commit(&mut self, entries: Vec<Entry>) -> Vec<Result<Committed, JournalError>> {
        if let Some(mut failure) = self.failed.take() {
            failure.refused += entries.len() as u64;
            let results = entries.iter().map(|_| Err(self.unwritable(&failure))).collect();
            self.set_failed(Some(failure));
            return results;
        }
        let mut buf = Vec::new();
        let mut results = Vec::with_capacity(entries.len());
        let mut seq = self.next_seq;
        let mut prev = self.prev.clone();
        for entry in entries {
            let time = (self.clock)();
            let enc = encode(seq, &time, &entry.kind, &prev, &entry.data_json);
            if entry.limited && enc.line.len() > self.max_record_bytes {
                results.push(Err(JournalError::RecordTooLarge { size: enc.line.len(), limit: self.max_record_bytes }));
                continue;
            }
            buf.extend_from_slice(&enc.line);
            results.push(Ok(Committed { seq, time, hash: enc.hash.clone() }));
            prev = enc.hash;
            seq += 1;
        }
        if buf.is_empty() {
            return results;
        }
        let started = std::time::Instant::now();
        let written = self.file.write_all(&buf).and_then(|()| self.file.sync_data());
        record_write(&self.path, buf.len(), started.elapsed(), written.is_ok());
        match written {
            Ok(()) => {
                self.next_seq = seq;
                self.prev = prev;
                self.len += buf.len() as u64;
                results
            }
            Err(e) => {
                let written = results.iter().filter(|r| r.is_ok()).count() as u64;
                let failure = Failure { reason: e.to_string(), kind: e.kind(), refused: written };
                match self.truncate() {
                    Ok(()) => tracing::error!(path = %self.path.display(), error = %e, records = written,
                        "journal write failed; nothing of the batch is kept and appends are refused until a write succeeds again"),
                    Err(cut) => tracing::error!(path = %self.path.display(), error = %e, truncate_error = %cut,
                        "journal write failed and its partial bytes could not be cut off yet; recovery cuts them first"),
                }
                let results = results
                    .into_iter()
                    .map(|r| match r {
                        Ok(_) => Err(self.unwritable(&failure)),
                        Err(other) => Err(other),
                    })
                    .collect();
                self.set_failed(Some(failure));
                results
            }
        }
    }

    /// After a failed write: truncates to the last committed record and writes a `journal.write_failed`
    /// record `{"offset":..,"error":..,"refused":..}`; appends are accepted again once that is fsynced.
    /// Does nothing when no write failed.
    pub(crate) fn recover(&mut self) -> Result<(), JournalError> {
        let Some(mut failure) = self.failed.take() else { return Ok(()) };
        if let Err(e) = self.truncate() {
            failure.reason = e.to_string();
            failure.kind = e.kind();
            let error = self.unwritable(&failure);
            self.set_failed(Some(failure));
            return Err(error);
        }
        let data = serde_json::json!({ "offset": self.len, "error": failure.reason, "refused": failure.refused });
        let entry = Entry { kind: WRITE_FAILED_KIND.to_owned(), data_json: data.to_string(), limited: false };
        match self.commit(vec![entry]).pop() {
            Some(Ok(_)) => {
                tracing::info!(path = %self.path.display(), refused = failure.refused, "journal writes again after a failed write");
                self.set_failed(None);
                Ok(())
            }
            Some(Err(error)) => {
                // `commit` recorded the new failure; keep the count of what was refused before.
                if let Some(mut now) = self.failed.take() {
                    now.refused += failure.refused;
                    self.set_failed(Some(now));
                }
                Err(error)
            }
            None => Err(JournalError::Closed),
        }
    }

    /// Thread body: block for one command, drain whatever else is pending, commit it all, answer, repeat.
    /// Returns when every sender is gone or a `Close` was handled.
    pub(crate) fn run(mut self, rx: mpsc::Receiver<Command>) {
        while let Ok(first) = rx.recv() {
            let mut entries = Vec::new();
            let mut replies = Vec::new();
            let mut control = None;
            let mut bytes = 0usize;
            let mut next = Some(first);
            while let Some(cmd) = next.take() {
                match cmd {
                    Command::Append(entry, reply) => {
                        bytes += entry.data_json.len();
                        entries.push(entry);
                        replies.push(reply);
                    }
                    other => {
                        control = Some(other);
                        break;
                    }
                }
                if entries.len() >= MAX_BATCH_RECORDS || bytes >= MAX_BATCH_BYTES {
                    break;
                }
                next = rx.try_recv().ok();
            }
            if !entries.is_empty() {
                for (reply, result) in replies.into_iter().zip(self.commit(entries)) {
                    // The caller may have given up waiting (cancelled future); the record is written regardless.
                    let _ = reply.send(result);
                }
            }
            match control {
                Some(Command::Recover(reply)) => {
                    let _ = reply.send(self.recover());
                }
                Some(Command::Close(reply)) => {
                    let result = match &self.failed {
                        Some(failure) => Err(self.unwritable(failure)),
                        None => Ok(()),
                    };
                    // Release the file (and its lock) before saying it is closed, so the
                    // caller may open it again at once.
                    drop(self);
                    let _ = reply.send(result);
                    return;
                }
                Some(Command::Append(..)) | None => {}
            }
        }
    }
}
