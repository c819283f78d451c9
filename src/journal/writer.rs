//! The dedicated writer thread: group commit of pending appends with one fsync per batch.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::mpsc;

use tokio::sync::oneshot;

use super::format::encode;
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
    /// Flush everything queued before it, answer, and stop.
    Close(oneshot::Sender<Result<(), JournalError>>),
}

/// Owns the file and the chain head; only ever used from one thread at a time.
pub(crate) struct Writer {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
    pub(crate) next_seq: u64,
    pub(crate) prev: String,
    pub(crate) clock: Clock,
    pub(crate) max_record_bytes: usize,
    /// Set after a failed write or fsync: the on-disk state is unknown.
    pub(crate) poisoned: Option<String>,
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
    fn poison_error(&self, reason: &str) -> JournalError {
        JournalError::Poisoned { path: self.path.clone(), reason: reason.to_owned() }
    }

    /// Writes `entries` in order with a single fsync; returns one result per entry.
    /// Entries over the size limit fail alone; a write/fsync failure fails the whole batch and poisons the writer.
    pub(crate) fn commit(&mut self, entries: Vec<Entry>) -> Vec<Result<Committed, JournalError>> {
        if let Some(reason) = &self.poisoned {
            return entries.iter().map(|_| Err(self.poison_error(reason))).collect();
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
                results
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "journal write failed; refusing further appends");
                self.poisoned = Some(e.to_string());
                results
                    .into_iter()
                    .map(|r| match r {
                        Ok(_) => Err(JournalError::io(&self.path, io::Error::new(e.kind(), e.to_string()))),
                        Err(other) => Err(other),
                    })
                    .collect()
            }
        }
    }

    /// Thread body: block for one command, drain whatever else is pending, commit it all, answer, repeat.
    /// Returns when every sender is gone or a `Close` was handled.
    pub(crate) fn run(mut self, rx: mpsc::Receiver<Command>) {
        while let Ok(first) = rx.recv() {
            let mut entries = Vec::new();
            let mut replies = Vec::new();
            let mut close = None;
            let mut bytes = 0usize;
            let mut next = Some(first);
            while let Some(cmd) = next.take() {
                match cmd {
                    Command::Append(entry, reply) => {
                        bytes += entry.data_json.len();
                        entries.push(entry);
                        replies.push(reply);
                    }
                    Command::Close(reply) => {
                        close = Some(reply);
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
            if let Some(reply) = close {
                let result = match &self.poisoned {
                    Some(reason) => Err(self.poison_error(reason)),
                    None => Ok(()),
                };
                // Release the file (and its lock) before saying it is closed, so the
                // caller may open it again at once.
                drop(self);
                let _ = reply.send(result);
                return;
            }
        }
    }
}
