//! Strict replay of a journal file, shared by [`super::Journal::open`] and [`verify`].

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use super::format::{GENESIS_PREV, INTERNAL_PREFIX, LineProblem, check_line};
use super::{DEFAULT_MAX_RECORD_BYTES, JournalError, Replay, record_from_line};

/// A partial final line (no trailing newline), typically left by a crash during a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Byte offset where the torn bytes start (the end of the last complete line).
    pub offset: u64,
    /// Number of torn bytes.
    pub bytes: u64,
}

/// Result of [`verify`]: the state of an intact chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Number of complete, verified records (application and internal).
    pub records: u64,
    /// Seq of the last verified record (0 when empty).
    pub last_seq: u64,
    /// Hash of the last verified record (64 zeros when empty).
    pub last_hash: String,
    /// The torn final line, if any; it is not counted in `records`.
    pub torn_tail: Option<TornTail>,
}

/// What a scan found.
pub(crate) struct ScanOutcome {
    pub(crate) report: VerifyReport,
    /// Length of the file up to and including the last complete line.
    pub(crate) valid_len: u64,
    /// The verified records.
    pub(crate) replay: Replay,
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

/// Reads `reader` from the start, verifying every complete line and keeping each verified record. A complete
/// line over
/// `max_line` bytes (with its newline; the writer never writes one) is `Corrupt` without being read
/// into memory; an unterminated last line of any length is the torn tail.
pub(crate) fn scan(path: &Path, reader: impl Read, max_line: usize) -> Result<ScanOutcome, JournalError> {
    let mut replay = Replay::default();
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    let mut buf = Vec::new();
    let mut offset: u64 = 0;
    let mut line_no: usize = 0;
    let mut last_seq: u64 = 0;
    let mut last_hash = GENESIS_PREV.to_owned();
    loop {
        buf.clear();
        let (n, too_long) = match read_line(&mut reader, &mut buf, max_line).map_err(|e| JournalError::io(path, e))? {
            Line::End => {
                let report = VerifyReport { records: last_seq, last_seq, last_hash, torn_tail: None };
                return Ok(ScanOutcome { report, valid_len: offset, replay });
            }
            Line::Read { bytes, terminated: false } | Line::TooLong { bytes, terminated: false } => {
                // EOF without newline: the torn tail.
                let torn = TornTail { offset, bytes };
                let report = VerifyReport { records: last_seq, last_seq, last_hash, torn_tail: Some(torn) };
                return Ok(ScanOutcome { report, valid_len: offset, replay });
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
            return Err(corrupt(LineProblem::TooLong { bytes: n, limit: max_line }));
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let parsed = check_line(line, last_seq + 1, &last_hash).map_err(corrupt)?;
        last_seq = parsed.seq;
        last_hash.clone_from(&parsed.hash);
        let record = record_from_line(parsed).map_err(corrupt)?;
        if record.kind.starts_with(INTERNAL_PREFIX) {
            replay.recovered.push(record);
        } else {
            replay.records.push(record);
        }
        offset += n;
    }
}

/// Verifies the journal at `path` without modifying it: every complete line must be a well-formed record of at
/// most [`DEFAULT_MAX_RECORD_BYTES`] with continuous seq, correct prev linkage and a correct hash. A torn final
/// line is reported, not an error.
pub fn verify(path: &Path) -> Result<VerifyReport, JournalError> {
    Ok(read(path)?.0)
}

/// [`verify`], also returning the records (application and internal) for a caller that replays them without
/// opening the journal for writing (`akritas audit verify PATH`).
pub fn read(path: &Path) -> Result<(VerifyReport, Replay), JournalError> {
    let file = File::open(path).map_err(|e| JournalError::io(path, e))?;
    let outcome = scan(path, file, DEFAULT_MAX_RECORD_BYTES)?;
    Ok((outcome.report, outcome.replay))
}
