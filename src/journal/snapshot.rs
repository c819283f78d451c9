//! Snapshots of state derived from a journal: one file per journal, `P.snapshot`, holding the
//! state and the [`Checkpoint`] of the last record it reflects, so a start replays only the
//! records after it ([`super::Journal::open_from`]).
//!
//! A snapshot is written to a temporary file, fsynced, renamed over the previous one and the
//! directory fsynced: a crash leaves the old snapshot or the new one, never a mix. It carries
//! the SHA-256 of its checkpoint and state, so a changed byte is found. A snapshot that cannot
//! be read (another version's, damaged) is ignored with a warning and the journal is replayed
//! from the start: the journal, not the snapshot, is the record of truth.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::Checkpoint;
use super::segments::Layout;

/// The snapshot file of the journal configured at `journal`.
pub fn snapshot_path(journal: &Path) -> PathBuf {
    let layout = Layout::new(journal);
    let name = journal.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    layout.dir().join(format!("{name}.snapshot"))
}

#[derive(serde::Deserialize)]
struct In {
    format: String,
    checkpoint: Checkpoint,
    state: Box<RawValue>,
    sha256: String,
}

/// Writes everything into `inner` and into the hash.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `sha256(checkpoint JSON + "\n" + state JSON)` starts here.
fn hasher(checkpoint: &Checkpoint) -> Sha256 {
    let mut hash = Sha256::new();
    hash.update(serde_json::to_vec(checkpoint).unwrap_or_default());
    hash.update(b"\n");
    hash
}

/// Writes `state` as the snapshot of `journal` at `checkpoint`, atomically and durably; `format`
/// names the state's shape and version (a reader of another format ignores the file).
pub fn write<T: Serialize>(journal: &Path, format: &str, checkpoint: &Checkpoint, state: &T) -> io::Result<u64> {
    begin(journal, format, checkpoint, state)?.commit()
}

/// A snapshot written to its temporary file and not yet durable or in place.
pub struct Pending {
    journal: PathBuf,
    tmp: PathBuf,
    file: File,
    started: std::time::Instant,
}

/// Serializes `state` into the snapshot's temporary file (no fsync): the part that needs the
/// state, so a caller can hold its lock only for this and [`Pending::commit`] afterwards.
pub fn begin<T: Serialize>(journal: &Path, format: &str, checkpoint: &Checkpoint, state: &T) -> io::Result<Pending> {
    let started = std::time::Instant::now();
    let tmp = snapshot_path(journal).with_extension("snapshot.tmp");
    let file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    write!(
        out,
        "{{\"format\":{},\"checkpoint\":{},\"state\":",
        serde_json::Value::from(format),
        serde_json::to_string(checkpoint).map_err(io::Error::other)?
    )?;
    let mut hashing = Hashing { inner: &mut out, hash: hasher(checkpoint) };
    serde_json::to_writer(&mut hashing, state).map_err(io::Error::other)?;
    let sha256 = hex::encode(hashing.hash.finalize());
    write!(out, ",\"sha256\":\"{sha256}\"}}")?;
    out.flush()?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    Ok(Pending { journal: journal.to_owned(), tmp, file, started })
}

impl Pending {
    /// Makes the snapshot durable and puts it in place of the previous one; returns its size.
    pub fn commit(self) -> io::Result<u64> {
        self.file.sync_all()?;
        let bytes = self.file.metadata()?.len();
        fs::rename(&self.tmp, snapshot_path(&self.journal))?;
        File::open(Layout::new(&self.journal).dir())?.sync_all()?;
        let name = metric_name(&self.journal);
        let labels = [("journal", name.as_str())];
        crate::telemetry::stamp("akritas_snapshot_age_seconds", "Seconds since the journal's last snapshot.", &labels);
        crate::telemetry::set("akritas_snapshot_bytes", "Size of the journal's last snapshot.", &labels, bytes as f64);
        crate::telemetry::observe(
            "akritas_snapshot_write_seconds",
            "Time to write one snapshot of a journal's derived state.",
            &labels,
            self.started.elapsed(),
        );
        Ok(bytes)
    }
}

/// Reads the snapshot of `journal` if there is one of `format`; `None` (with a warning for an
/// unreadable one) otherwise.
pub fn read<T: DeserializeOwned>(journal: &Path, format: &str) -> Option<(Checkpoint, T)> {
    let path = snapshot_path(journal);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the snapshot; replaying the journal from the start");
            return None;
        }
    };
    let parsed = serde_json::from_reader::<_, In>(BufReader::with_capacity(1 << 20, file)).and_then(|snapshot| {
        let mut hash = hasher(&snapshot.checkpoint);
        hash.update(snapshot.state.get().as_bytes());
        if hex::encode(hash.finalize()) != snapshot.sha256 {
            return Err(serde::de::Error::custom("its SHA-256 does not match its content"));
        }
        if snapshot.format != format {
            return Ok((snapshot.format, snapshot.checkpoint, None));
        }
        let state = serde_json::from_str::<T>(snapshot.state.get())?;
        Ok((snapshot.format, snapshot.checkpoint, Some(state)))
    });
    match parsed {
        Ok((_, checkpoint, Some(state))) => {
            let name = metric_name(journal);
            crate::telemetry::stamp(
                "akritas_snapshot_age_seconds",
                "Seconds since the journal's last snapshot.",
                &[("journal", name.as_str())],
            );
            Some((checkpoint, state))
        }
        Ok((found, _, None)) => {
            tracing::warn!(path = %path.display(), %found, expected = %format, "the snapshot has another format; replaying the journal from the start");
            None
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the snapshot is unreadable; replaying the journal from the start");
            None
        }
    }
}

/// Deletes the snapshot of `journal` (it no longer matches the journal).
pub fn discard(journal: &Path) {
    let path = snapshot_path(journal);
    if let Err(e) = fs::remove_file(&path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "could not delete a stale snapshot");
    }
}

fn metric_name(journal: &Path) -> String {
    super::writer::metric_name(journal)
}

/// Why [`open_restored`] or [`restore`] could not rebuild a state; `E` is why a record
/// could not be applied.
#[derive(Debug)]
pub enum RestoreError<E = String> {
    /// The journal failed.
    Journal(super::JournalError),
    /// Record `seq` could not be applied (`reason`).
    Replay {
        /// Its sequence number.
        seq: u64,
        /// What applying the record reported (the caller's error type `E`).
        reason: E,
    },
    /// Retention removed the start of the journal and no usable snapshot is left.
    NoSnapshot {
        /// The first record still on disk.
        first_seq: u64,
    },
}

impl<E> From<super::ScanError<(u64, E)>> for RestoreError<E> {
    fn from(error: super::ScanError<(u64, E)>) -> Self {
        match error {
            super::ScanError::Journal(e) => RestoreError::Journal(e),
            super::ScanError::Visit((seq, reason)) => RestoreError::Replay { seq, reason },
        }
    }
}

/// How [`restore`] rebuilt a state.
#[derive(Clone, Copy, Debug, Default)]
pub struct Restored {
    /// Records applied after the snapshot (or from the start).
    pub replayed: u64,
    /// The seq of the snapshot's checkpoint it started from, if it did.
    pub snapshot: Option<u64>,
}

impl Restored {
    /// Whether it started from a snapshot.
    pub fn from_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }
}

/// Which snapshot [`restore`] reads, and what it does without a matching one.
#[derive(Clone, Copy, Debug)]
pub struct Restore<'a> {
    /// Shape and version of the snapshot (a snapshot of another format is not read).
    pub format: &'a str,
    /// Whether to start from the snapshot while the journal still starts at its first record
    /// (a check replays every record instead).
    pub use_snapshot: bool,
    /// Whether the state can start at the journal's first kept record: after retention
    /// removed the journal's start, with no matching snapshot, every kept record is replayed
    /// instead of failing with [`RestoreError::NoSnapshot`].
    pub from_kept: bool,
}

/// A visitor of records that fails with the record's seq and why.
pub type Visit<'v, E> = dyn FnMut(super::Record) -> Result<(), (u64, E)> + 'v;

/// Reads a journal from a checkpoint (or its start) into a visitor: opening it for writing
/// ([`super::Journal::open_from`]) or only reading it ([`super::scan_from`]).
pub type Reader<'r, T, E> =
    dyn FnMut(Option<&Checkpoint>, &mut Visit<'_, E>) -> Result<T, super::ScanError<(u64, E)>> + 'r;

/// Rebuilds the state of the journal at `path`: from its snapshot (`restore`; only when
/// `use_snapshot`, or when retention removed the journal's start) plus the records after it
/// when the snapshot matches the journal, else from nothing (`empty`) and every record; each
/// record goes through `apply`, and `read` reads the journal. A snapshot that does not match
/// is discarded (and the journal replayed) while the journal still starts at its first
/// record, or when the state can start at a later one (`from_kept`); otherwise, after
/// retention, it is an error. Blocking.
pub fn restore<S: DeserializeOwned, B, T, E>(
    path: &Path,
    how: Restore<'_>,
    restore: impl FnOnce(S, Checkpoint) -> B,
    empty: impl FnOnce() -> B,
    apply: impl Fn(&mut B, &super::Record) -> Result<(), E>,
    read: &mut Reader<'_, T, E>,
) -> Result<(T, B, Restored), RestoreError<E>> {
    use super::{JournalError, ScanError};
    let anchored = super::anchor(path).map_err(RestoreError::Journal)?.map(|a| a.first_seq);
    let snapshot = if how.use_snapshot || anchored.is_some() { self::read::<S>(path, how.format) } else { None };
    if let Some((checkpoint, saved)) = snapshot {
        let mut state = restore(saved, checkpoint.clone());
        let mut replayed = 0;
        let outcome = read(Some(&checkpoint), &mut |record| {
            replayed += 1;
            apply(&mut state, &record).map_err(|reason| (record.seq, reason))
        });
        match outcome {
            Ok(opened) => return Ok((opened, state, Restored { replayed, snapshot: Some(checkpoint.seq) })),
            Err(ScanError::Journal(JournalError::CheckpointMismatch { reason, .. }))
                if anchored.is_none() || how.from_kept =>
            {
                tracing::warn!(path = %path.display(), %reason, "the snapshot does not match its journal; replaying the journal from the start");
                discard(path);
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(first_seq) = anchored.filter(|_| !how.from_kept) {
        return Err(RestoreError::NoSnapshot { first_seq });
    }
    let mut state = empty();
    let mut replayed = 0;
    let opened = read(None, &mut |record| {
        replayed += 1;
        apply(&mut state, &record).map_err(|reason| (record.seq, reason))
    })?;
    Ok((opened, state, Restored { replayed, snapshot: None }))
}

/// Opens the journal at `path` for writing and rebuilds its state with [`restore`], from the
/// snapshot when there is one. Blocking.
pub fn open_restored<S: DeserializeOwned, B>(
    path: &Path,
    format: &str,
    options: super::JournalOptions,
    restore: impl FnOnce(S, Checkpoint) -> B,
    empty: impl FnOnce() -> B,
    apply: impl Fn(&mut B, &super::Record) -> Result<(), String>,
) -> Result<(super::Journal, B), RestoreError> {
    let mut open = |from: Option<&Checkpoint>, visit: &mut Visit<'_, String>| {
        super::Journal::open_from(path, options.clone(), from, visit)
    };
    let how = Restore { format, use_snapshot: true, from_kept: false };
    let (opened, state, _) = self::restore(path, how, restore, empty, apply, &mut open)?;
    Ok((opened.0, state))
}

/// Compacts a journal whose whole state is `state` at `checkpoint`: writes the snapshot
/// off the async path, then deletes the segments before the checkpoint's (that segment
/// stays: an open checks the checkpoint's record). The journal stays the record of
/// truth, so a failure only delays compaction; the error says which step failed.
pub async fn compact<T: Serialize + Send + 'static>(
    journal: &super::Journal,
    format: &'static str,
    checkpoint: Checkpoint,
    state: T,
) -> Result<(), String> {
    let (path, at) = (journal.path().to_path_buf(), checkpoint.clone());
    match tokio::task::spawn_blocking(move || write(&path, format, &at, &state)).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => return Err(format!("could not write the snapshot: {error}")),
        Err(error) => return Err(format!("the snapshot task stopped: {error}")),
    }
    let rule = super::Retention { max_age: std::time::Duration::ZERO, keep_from: checkpoint.location.segment };
    journal.retain(rule).await.map(drop).map_err(|error| format!("retention failed: {error}"))
}
