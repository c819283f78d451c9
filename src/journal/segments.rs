//! Where a journal's records live on disk: its segments, its lock and its retention anchor.
//!
//! A journal configured at `P` (for example `data/audit.jsonl`) is a sequence of segment
//! files, each named after the seq of its first record: the first segment is `P` itself
//! (first seq 1, so a journal written before segments is simply its first segment), every
//! later one is `P.<first seq, 20 digits>`. The last segment is the active one; the others
//! are sealed and never written again. The chain runs across segments: the first record of
//! a segment names the last record of the one before as its `prev`.
//!
//! Retention deletes the oldest sealed segments. Before it does, it writes `P.anchor`
//! (write to a temporary file, fsync, rename, fsync the directory): the seq and `prev` of
//! the first record kept, and what retention removed so far. The chain is then verified
//! from that record on, anchored at the recorded hash. `P.lock` is held (`flock`) while
//! the journal is open.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::JournalError;

/// Digits of the seq in a sealed segment's file name.
const SEQ_DIGITS: usize = 20;

/// The files of one journal.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    base: PathBuf,
}

/// What retention removed, and where the kept chain starts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// Seq of the first record kept.
    pub first_seq: u64,
    /// Hash of the record before it (the last one removed): the kept chain's `prev`.
    pub prev: String,
    /// Segments removed since the journal was created.
    pub removed_segments: u64,
    /// Records removed since the journal was created.
    pub removed_records: u64,
    /// Bytes removed since the journal was created.
    pub removed_bytes: u64,
}

/// One segment file as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Seq of its first record (its name).
    pub(crate) id: u64,
    /// Size in bytes.
    pub(crate) bytes: u64,
    /// Last modification: when its last record was written.
    pub(crate) modified: std::time::SystemTime,
}

impl Layout {
    pub(crate) fn new(base: &Path) -> Layout {
        Layout { base: base.to_owned() }
    }

    /// The configured path (the first segment).
    pub(crate) fn base(&self) -> &Path {
        &self.base
    }

    /// The directory holding the segments.
    pub(crate) fn dir(&self) -> &Path {
        self.base.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
    }

    fn file_name(&self) -> String {
        self.base.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// The file of the segment whose first record has seq `id`.
    pub(crate) fn segment_path(&self, id: u64) -> PathBuf {
        if id <= 1 { self.base.clone() } else { self.dir().join(format!("{}.{id:0SEQ_DIGITS$}", self.file_name())) }
    }

    pub(crate) fn anchor_path(&self) -> PathBuf {
        self.dir().join(format!("{}.anchor", self.file_name()))
    }

    pub(crate) fn lock_path(&self) -> PathBuf {
        self.dir().join(format!("{}.lock", self.file_name()))
    }

    /// The segments present, oldest first.
    pub(crate) fn list(&self) -> Result<Vec<Segment>, JournalError> {
        let prefix = format!("{}.", self.file_name());
        let mut segments = Vec::new();
        let entries = match fs::read_dir(self.dir()) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(segments),
            Err(e) => return Err(JournalError::io(self.dir(), e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| JournalError::io(self.dir(), e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let id = if name == self.file_name() {
                1
            } else {
                match name.strip_prefix(&prefix) {
                    Some(digits) if digits.len() == SEQ_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()) => {
                        match digits.parse::<u64>() {
                            Ok(id) if id > 1 => id,
                            _ => continue,
                        }
                    }
                    _ => continue,
                }
            };
            let meta = entry.metadata().map_err(|e| JournalError::io(entry.path(), e))?;
            if !meta.is_file() {
                continue;
            }
            let modified = meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH);
            segments.push(Segment { id, bytes: meta.len(), modified });
        }
        segments.sort_by_key(|s| s.id);
        Ok(segments)
    }

    /// The retention anchor, if retention ever removed a segment.
    pub(crate) fn read_anchor(&self) -> Result<Option<Anchor>, JournalError> {
        let path = self.anchor_path();
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| JournalError::Corrupt {
                path: path.clone(),
                line: 1,
                offset: 0,
                reason: format!("not a retention anchor ({e})"),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(JournalError::io(&path, e)),
        }
    }

    /// Replaces the anchor atomically and durably.
    pub(crate) fn write_anchor(&self, anchor: &Anchor) -> io::Result<()> {
        let path = self.anchor_path();
        let tmp = self.dir().join(format!("{}.anchor.tmp", self.file_name()));
        let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        file.write_all(serde_json::to_string(anchor).unwrap_or_default().as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        self.sync_dir()
    }

    /// Makes changes to the directory's entries durable.
    pub(crate) fn sync_dir(&self) -> io::Result<()> {
        File::open(self.dir())?.sync_all()
    }
}

/// The first line of a segment (without its newline), or `None` when it is empty.
pub(crate) fn first_line(path: &Path, max_line: usize) -> io::Result<Option<Vec<u8>>> {
    let file = File::open(path)?;
    let mut reader = BufReader::new(file);
    let mut buf = Vec::new();
    io::Read::take(&mut reader, max_line as u64).read_until(b'\n', &mut buf)?;
    if buf.ends_with(b"\n") {
        buf.pop();
        Ok(Some(buf))
    } else {
        Ok(None)
    }
}
