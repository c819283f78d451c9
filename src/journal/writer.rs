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
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};

use tokio::sync::oneshot;

use super::format::{RETENTION_KIND, WRITE_FAILED_KIND, encode};
use super::segments::{Anchor, Layout, Segment};
use super::{Clock, JournalError, Location, Removed, Retention};

/// Most appends taken into one batch.
const MAX_BATCH_RECORDS: usize = 4096;
/// Stop draining the channel once a batch holds about this many payload bytes.
const MAX_BATCH_BYTES: usize = 16 << 20;

/// Seq, time, hash and place assigned to a committed record.
pub(crate) struct Committed {
    pub(crate) seq: u64,
    pub(crate) time: String,
    pub(crate) hash: String,
    pub(crate) location: Location,
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
    /// Delete the sealed segments the rule allows.
    Retain(Retention, oneshot::Sender<Result<Removed, JournalError>>),
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

/// When the active segment is sealed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rotation {
    /// Once it holds this many bytes (0: never by size).
    pub(crate) bytes: u64,
    /// Once its first record is this old.
    pub(crate) age: Option<std::time::Duration>,
}

/// The segments besides the active one, and the retention anchor.
pub(crate) struct Segments {
    pub(crate) layout: Layout,
    pub(crate) rotation: Rotation,
    /// Sealed segments, oldest first.
    pub(crate) sealed: Vec<Segment>,
    /// Seq of the active segment's first record (its id).
    pub(crate) active: u64,
    /// Commit time of the active segment's first record.
    pub(crate) active_since: Option<jiff::Timestamp>,
    pub(crate) anchor: Option<Anchor>,
}

/// Owns the active file and the chain head; only ever used from one thread at a time.
pub(crate) struct Writer {
    pub(crate) file: File,
    pub(crate) segments: Segments,
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
    /// Seals every record with [`super::format::record_mac`] when set (the audit key).
    pub(crate) mac_key: Option<Arc<[u8]>>,
    /// The last committed record, for readers outside the thread (the audit anchor).
    pub(crate) head: SharedHead,
}

/// The last committed record of a journal: what an anchor outside the journal records.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Head {
    /// Its seq (0 for an empty journal).
    pub seq: u64,
    /// Its hash.
    pub hash: String,
    /// Its keyed seal, when the journal is keyed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// The head shared with readers outside the writer thread.
pub(crate) type SharedHead = Arc<Mutex<Head>>;

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
    /// bytes and refuses further appends until [`Writer::recover`]. Seals the active segment first when it is
    /// full or old enough.
    pub(crate) fn commit(&mut self, entries: Vec<Entry>) -> Vec<Result<Committed, JournalError>> {
        if self.failed.is_none()
            && let Err(e) = self.rotate_if_due()
        {
            tracing::error!(path = %self.path.display(), error = %e, "could not start a new journal segment");
            self.set_failed(Some(Failure { reason: e.to_string(), kind: e.kind(), refused: 0 }));
        }
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
        let mut last_mac = None;
        for entry in entries {
            let time = (self.clock)();
            let enc = encode(seq, &time, &entry.kind, &prev, &entry.data_json, self.mac_key.as_deref());
            if entry.limited && enc.line.len() > self.max_record_bytes {
                results.push(Err(JournalError::RecordTooLarge { size: enc.line.len(), limit: self.max_record_bytes }));
                continue;
            }
            let location = Location {
                segment: self.segments.active,
                offset: self.len + buf.len() as u64,
                len: u32::try_from(enc.line.len()).unwrap_or(u32::MAX),
            };
            if self.segments.active_since.is_none() {
                self.segments.active_since = time.parse().ok();
            }
            buf.extend_from_slice(&enc.line);
            results.push(Ok(Committed { seq, time, hash: enc.hash.clone(), location }));
            prev = enc.hash;
            last_mac = enc.mac;
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
                *self.head.lock().unwrap_or_else(|p| p.into_inner()) =
                    Head { seq: seq - 1, hash: prev.clone(), mac: last_mac };
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
                Some(Command::Retain(rule, reply)) => {
                    let _ = reply.send(self.retain(rule));
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

impl Writer {
    /// Whether the active segment is due to be sealed.
    fn rotation_due(&self) -> bool {
        if self.len == 0 {
            return false;
        }
        let rotation = self.segments.rotation;
        if rotation.bytes > 0 && self.len >= rotation.bytes {
            return true;
        }
        let (Some(age), Some(since)) = (rotation.age, self.segments.active_since) else { return false };
        let now: Option<jiff::Timestamp> = (self.clock)().parse().ok();
        now.is_some_and(|now| now.duration_since(since).unsigned_abs() >= age)
    }

    /// Seals the active segment and starts the next one when it is due. The active file is
    /// complete and fsynced after every commit, so sealing is creating the next file.
    fn rotate_if_due(&mut self) -> io::Result<()> {
        if !self.rotation_due() {
            return Ok(());
        }
        let id = self.next_seq;
        let path = self.segments.layout.segment_path(id);
        let file =
            std::fs::OpenOptions::new().read(true).append(true).create_new(true).mode(0o600).open(&path).or_else(
                |e| {
                    // Created before a crash or a failed attempt, and never written: take it.
                    if e.kind() == io::ErrorKind::AlreadyExists && std::fs::metadata(&path)?.len() == 0 {
                        std::fs::OpenOptions::new().read(true).append(true).open(&path)
                    } else {
                        Err(e)
                    }
                },
            )?;
        if let Err(e) = self.segments.layout.sync_dir() {
            tracing::warn!(path = %path.display(), error = %e, "could not fsync the journal directory after starting a segment");
        }
        let sealed = Segment { id: self.segments.active, bytes: self.len, modified: std::time::SystemTime::now() };
        self.segments.sealed.push(sealed);
        self.file = file;
        self.len = 0;
        self.segments.active = id;
        self.segments.active_since = None;
        tracing::info!(path = %path.display(), first_seq = id, "journal segment sealed; a new one started");
        self.publish_segments();
        Ok(())
    }

    /// Segment count and bytes for `/metrics`.
    pub(crate) fn publish_segments(&self) {
        let journal = metric_name(&self.path);
        let labels = [("journal", journal.as_str())];
        let count = self.segments.sealed.len() + 1;
        let bytes: u64 = self.segments.sealed.iter().map(|s| s.bytes).sum::<u64>() + self.len;
        crate::telemetry::set("akritas_journal_segments", "Segment files of the journal.", &labels, count as f64);
        crate::telemetry::set(
            "akritas_journal_segment_bytes",
            "Bytes in the journal's segments.",
            &labels,
            bytes as f64,
        );
        let removed = self.segments.anchor.clone().unwrap_or_default();
        crate::telemetry::set(
            "akritas_journal_retention_removed_records",
            "Records retention removed from the journal since it was created.",
            &labels,
            removed.removed_records as f64,
        );
        crate::telemetry::set(
            "akritas_journal_retention_removed_bytes",
            "Bytes retention removed from the journal since it was created.",
            &labels,
            removed.removed_bytes as f64,
        );
    }

    /// Deletes the oldest sealed segments the rule allows: each wholly older than the rule's
    /// age and holding no record at or after `keep_from`. Writes the anchor first, then
    /// deletes, then records a `journal.retention` record.
    fn retain(&mut self, rule: Retention) -> Result<Removed, JournalError> {
        if let Some(failure) = &self.failed {
            return Err(self.unwritable(failure));
        }
        let now = std::time::SystemTime::now();
        let mut count = 0;
        for (index, segment) in self.segments.sealed.iter().enumerate() {
            let next = self.segments.sealed.get(index + 1).map_or(self.segments.active, |s| s.id);
            let old = now.duration_since(segment.modified).is_ok_and(|age| age >= rule.max_age);
            if !old || next > rule.keep_from {
                break;
            }
            count += 1;
        }
        if count == 0 {
            return Ok(Removed::default());
        }
        let layout = self.segments.layout.clone();
        let first_kept = self.segments.sealed.get(count).map_or(self.segments.active, |s| s.id);
        let io_error = |path: &std::path::Path, e: io::Error| JournalError::io(path, e);
        let kept_path = layout.segment_path(first_kept);
        let line = super::segments::first_line(&kept_path, usize::MAX >> 1)
            .map_err(|e| io_error(&kept_path, e))?
            .ok_or_else(|| JournalError::Corrupt {
                path: kept_path.clone(),
                line: 1,
                offset: 0,
                reason: "the first segment to keep is empty".into(),
            })?;
        let parsed: super::format::ParsedLine = serde_json::from_slice(&line).map_err(|e| JournalError::Corrupt {
            path: kept_path.clone(),
            line: 1,
            offset: 0,
            reason: format!("not a valid journal record ({e})"),
        })?;
        let removed_segments = &self.segments.sealed[..count];
        let removed = Removed {
            segments: count as u64,
            records: first_kept - removed_segments[0].id,
            bytes: removed_segments.iter().map(|s| s.bytes).sum(),
            first_kept,
        };
        let mut anchor = self.segments.anchor.clone().unwrap_or_default();
        anchor.first_seq = first_kept;
        anchor.prev = parsed.prev;
        anchor.removed_segments += removed.segments;
        anchor.removed_records += removed.records;
        anchor.removed_bytes += removed.bytes;
        layout.write_anchor(&anchor).map_err(|e| io_error(&layout.anchor_path(), e))?;
        for segment in self.segments.sealed.drain(..count) {
            let path = layout.segment_path(segment.id);
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != io::ErrorKind::NotFound
            {
                // The anchor already excludes it: the next open deletes it.
                tracing::warn!(path = %path.display(), error = %e, "could not delete a journal segment retention removed");
            }
        }
        let _ = layout.sync_dir();
        self.segments.anchor = Some(anchor.clone());
        self.publish_segments();
        let journal = metric_name(&self.path);
        for (name, help, value) in [
            ("akritas_journal_retention_segments_total", "Segments retention deleted since start.", removed.segments),
            ("akritas_journal_retention_records_total", "Records retention deleted since start.", removed.records),
            ("akritas_journal_retention_bytes_total", "Bytes retention deleted since start.", removed.bytes),
        ] {
            crate::telemetry::count(name, help, &[("journal", &journal)], value as f64);
        }
        let data = serde_json::json!({
            "removed_segments": removed.segments,
            "removed_records": removed.records,
            "removed_bytes": removed.bytes,
            "first_seq": anchor.first_seq,
        });
        let entry = Entry { kind: RETENTION_KIND.to_owned(), data_json: data.to_string(), limited: false };
        match self.commit(vec![entry]).pop() {
            Some(Ok(_)) | None => {}
            Some(Err(e)) => return Err(e),
        }
        tracing::info!(path = %self.path.display(), segments = removed.segments, records = removed.records, bytes = removed.bytes, first_seq = anchor.first_seq, "journal retention removed old segments");
        Ok(removed)
    }
}
