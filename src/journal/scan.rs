//! Strict, streaming replay of one segment file, shared by opening and verifying a journal.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::format::ParsedLine;
use super::format::{LineProblem, check_line};
use super::{JournalError, Location, Record};

/// One verified line as the scan read it: the record, and what a verbatim copy of the line
/// needs besides.
pub struct Seen {
    /// The record.
    pub record: Record,
    /// The hash of the record it follows.
    pub prev: String,
    /// Its data exactly as hashed.
    pub data: Box<serde_json::value::RawValue>,
    /// Its keyed seal, when it was written with an audit key.
    pub mac: Option<String>,
}

impl Seen {
    fn of(line: ParsedLine, location: Location) -> Result<Seen, LineProblem> {
        let ParsedLine { seq, time, kind, prev, data, hash, mac } = line;
        let value = serde_json::from_str(data.get()).map_err(LineProblem::UnreadableData)?;
        Ok(Seen { record: Record { seq, time, kind, data: value, hash, location }, prev, data, mac })
    }
}

/// A partial final line (no trailing newline), typically left by a crash during a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Byte offset where the torn bytes start (the end of the last complete line).
    pub offset: u64,
    /// Number of torn bytes.
    pub bytes: u64,
}

/// Result of [`super::verify`]: the state of an intact chain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Number of complete, verified records (application and internal) read.
    pub records: u64,
    /// Seq of the last verified record (0 when empty).
    pub last_seq: u64,
    /// Hash of the last verified record (64 zeros when empty).
    pub last_hash: String,
    /// The torn final line, if any; it is not counted in `records`.
    pub torn_tail: Option<TornTail>,
    /// Segment files read.
    pub segments: u64,
    /// Seq of the first record read (the oldest kept when reading from the start).
    pub first_seq: u64,
}

/// What a scan found.
pub(crate) struct ScanOutcome {
    pub(crate) report: VerifyReport,
    /// Length of the file up to and including the last complete line.
    pub(crate) valid_len: u64,
}

/// One line as read by [`read_line`].
enum Line {
    /// End of file.
    End,
    /// A line of at most the limit, in the buffer; `terminated` when it ended in `\n`.
    Read { bytes: u64, terminated: bool },
    /// A line over the limit, skipped without being held; `terminated` as above.
    TooLong { bytes: u64, terminated: bool },
}

/// Reads one line into `buf` if it is at most `max_line` bytes (with its `\n`); a longer
/// line is read through to its end without being kept, so memory stays bounded.
fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>, max_line: usize) -> io::Result<Line> {
    let limit = u64::try_from(max_line).unwrap_or(u64::MAX);
    let n = reader.by_ref().take(limit).read_until(b'\n', buf)? as u64;
    if n == 0 {
        return Ok(Line::End);
    }
    if buf.ends_with(b"\n") {
        return Ok(Line::Read { bytes: n, terminated: true });
    }
    if n < limit {
        return Ok(Line::Read { bytes: n, terminated: false });
    }
    // At the limit without a newline: over-long unless the file ends right here.
    let mut bytes = n;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            buf.clear();
            return Ok(if bytes == limit {
                // Exactly `max_line` bytes with no newline: a torn line within the limit.
                Line::Read { bytes, terminated: false }
            } else {
                Line::TooLong { bytes, terminated: false }
            });
        }
        let (used, found) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (chunk.len(), false),
        };
        reader.consume(used);
        bytes += used as u64;
        if found {
            buf.clear();
            return Ok(Line::TooLong { bytes, terminated: true });
        }
    }
}

/// Where a scan of one segment starts: the byte offset and the chain head before it.
pub(crate) struct Start {
    pub(crate) offset: u64,
    pub(crate) seq: u64,
    pub(crate) hash: String,
}

/// Reads the segment `segment` (at `path`) from `from`, verifying every complete line and
/// handing each verified record to `visit`. A complete line over `max_line` bytes (with its
/// newline; the writer never writes one) is `Corrupt` without being read into memory; an
/// unterminated last line of any length is the torn tail (the caller decides whether a
/// segment may have one).
pub(crate) fn scan<E>(
    path: &Path,
    segment: u64,
    mut file: File,
    from: Start,
    max_line: usize,
    visit: &mut dyn FnMut(Seen) -> Result<(), E>,
) -> Result<ScanOutcome, ScanError<E>> {
    if from.offset > 0 {
        file.seek(SeekFrom::Start(from.offset)).map_err(|e| JournalError::io(path, e))?;
    }
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut buf = Vec::new();
    let mut offset = from.offset;
    let mut line_no: usize = 0;
    let mut records: u64 = 0;
    let mut last_seq = from.seq;
    let mut last_hash = from.hash;
    loop {
        buf.clear();
        let (n, too_long) = match read_line(&mut reader, &mut buf, max_line).map_err(|e| JournalError::io(path, e))? {
            Line::End => {
                let report = VerifyReport { records, last_seq, last_hash, torn_tail: None, ..VerifyReport::default() };
                return Ok(ScanOutcome { report, valid_len: offset });
            }
            Line::Read { bytes, terminated: false } | Line::TooLong { bytes, terminated: false } => {
                // EOF without newline: the torn tail.
                let torn = TornTail { offset, bytes };
                let report =
                    VerifyReport { records, last_seq, last_hash, torn_tail: Some(torn), ..VerifyReport::default() };
                return Ok(ScanOutcome { report, valid_len: offset });
            }
            Line::Read { bytes, terminated: true } => (bytes, false),
            Line::TooLong { bytes, terminated: true } => (bytes, true),
        };
        line_no += 1;
        let corrupt = |problem: LineProblem| JournalError::Corrupt {
            path: path.to_owned(),
            line: line_no,
            offset,
            reason: problem.to_string(),
        };
        if too_long {
            return Err(corrupt(LineProblem::TooLong { bytes: n, limit: max_line }).into());
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let parsed = check_line(line, last_seq + 1, &last_hash).map_err(corrupt)?;
        last_seq = parsed.seq;
        last_hash.clone_from(&parsed.hash);
        let location = Location { segment, offset, len: u32::try_from(n).unwrap_or(u32::MAX) };
        let seen = Seen::of(parsed, location).map_err(corrupt)?;
        records += 1;
        visit(seen).map_err(ScanError::Visit)?;
        offset += n;
    }
}

/// Why a streaming read stopped.
#[derive(Debug)]
pub enum ScanError<E> {
    /// The journal could not be read or does not verify.
    Journal(JournalError),
    /// The visitor refused a record.
    Visit(E),
}

impl<E> From<JournalError> for ScanError<E> {
    fn from(error: JournalError) -> Self {
        ScanError::Journal(error)
    }
}

impl<E: std::fmt::Display> std::fmt::Display for ScanError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Journal(e) => e.fmt(f),
            ScanError::Visit(e) => e.fmt(f),
        }
    }
}

impl ScanError<std::convert::Infallible> {
    /// The journal error (a visitor that cannot fail).
    pub fn into_journal(self) -> JournalError {
        match self {
            ScanError::Journal(e) => e,
            ScanError::Visit(never) => match never {},
        }
    }
}
