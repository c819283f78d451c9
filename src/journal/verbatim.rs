//! A journal written from records kept elsewhere, each line exactly as it was hashed and sealed
//! there (`akritas storage migrate --to embedded`): segments of at most the given size, and the
//! retention anchor when the chain starts after its first record.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use super::format::{GENESIS_PREV, encode_line, record_hash};
use super::segments::{Anchor, Layout};
use super::{JournalError, Location};

/// One record to write, as kept elsewhere.
pub struct Line<'a> {
    /// Its seq.
    pub seq: u64,
    /// Its time.
    pub time: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// The hash of the record before it.
    pub prev: &'a str,
    /// Its data exactly as hashed.
    pub data: &'a str,
    /// Its hash.
    pub hash: &'a str,
    /// Its keyed seal, if any.
    pub mac: Option<&'a str>,
}

/// A journal being written line by line.
pub struct Verbatim {
    layout: Layout,
    segment_bytes: u64,
    segment: u64,
    file: BufWriter<File>,
    offset: u64,
    last: (u64, String),
}

impl Verbatim {
    /// Creates the journal at `path` (none may be there) whose chain follows record `after` (seq
    /// and hash; seq 0 for a chain from its first record): then the anchor says so.
    pub fn create(path: &Path, after: (u64, &str), segment_bytes: u64) -> Result<Verbatim, JournalError> {
        let layout = Layout::new(path);
        let dir = layout.dir().to_owned();
        DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(|e| JournalError::io(&dir, e))?;
        if super::exists(path)? {
            return Err(JournalError::io(
                path,
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "a journal is already there; move it aside"),
            ));
        }
        let (seq, hash) = after;
        if seq > 0 {
            let anchor =
                Anchor { first_seq: seq + 1, prev: hash.to_string(), removed_records: seq, ..Anchor::default() };
            layout.write_anchor(&anchor).map_err(|e| JournalError::io(layout.anchor_path(), e))?;
        }
        let last = (seq, if seq == 0 { GENESIS_PREV.to_string() } else { hash.to_string() });
        let file = open_segment(&layout, seq + 1)?;
        Ok(Verbatim { layout, segment_bytes, segment: seq + 1, file, offset: 0, last })
    }

    /// Writes `line` after the last one (it must follow it and match its hash); where it is.
    pub fn push(&mut self, line: &Line<'_>) -> Result<Location, JournalError> {
        let bad = |reason: &str| JournalError::Corrupt {
            path: self.layout.base().to_owned(),
            line: 0,
            offset: self.offset,
            reason: format!("record {}: {reason}", line.seq),
        };
        if line.seq != self.last.0 + 1 || line.prev != self.last.1 {
            return Err(bad("it does not follow the record before it"));
        }
        if record_hash(line.prev, line.seq, line.time, line.kind, line.data) != line.hash {
            return Err(bad("it does not match its hash"));
        }
        if self.segment_bytes > 0 && self.offset >= self.segment_bytes {
            self.seal()?;
            self.file = open_segment(&self.layout, line.seq)?;
            (self.segment, self.offset) = (line.seq, 0);
        }
        let bytes = encode_line(line.seq, line.time, line.kind, line.prev, line.data, line.hash, line.mac);
        let path = self.layout.segment_path(self.segment);
        self.file.write_all(&bytes).map_err(|e| JournalError::io(&path, e))?;
        let location = Location { segment: self.segment, offset: self.offset, len: bytes.len() as u32 };
        self.offset += bytes.len() as u64;
        self.last = (line.seq, line.hash.to_string());
        Ok(location)
    }

    /// Makes everything written durable; the last record's seq and hash.
    pub fn finish(mut self) -> Result<(u64, String), JournalError> {
        self.seal()?;
        self.layout.sync_dir().map_err(|e| JournalError::io(self.layout.dir(), e))?;
        Ok(self.last)
    }

    fn seal(&mut self) -> Result<(), JournalError> {
        let path = self.layout.segment_path(self.segment);
        self.file.flush().map_err(|e| JournalError::io(&path, e))?;
        self.file.get_ref().sync_all().map_err(|e| JournalError::io(&path, e))
    }
}

fn open_segment(layout: &Layout, id: u64) -> Result<BufWriter<File>, JournalError> {
    let path = layout.segment_path(id);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| JournalError::io(&path, e))?;
    Ok(BufWriter::with_capacity(1 << 16, file))
}
