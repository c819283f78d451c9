//! Strict replay of a journal file, shared by [`super::Journal::open`] and [`verify`].

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::JournalError;
use super::format::{GENESIS_PREV, LineProblem, ParsedLine, check_line};

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
}

/// Reads `reader` from the start, verifying every complete line; calls `visit` for each verified record.
/// `visit` may reject a record with a reason, which becomes a `Corrupt` error.
pub(crate) fn scan(
    path: &Path,
    reader: impl Read,
    mut visit: impl FnMut(ParsedLine) -> Result<(), LineProblem>,
) -> Result<ScanOutcome, JournalError> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    let mut buf = Vec::new();
    let mut offset: u64 = 0;
    let mut line_no: usize = 0;
    let mut last_seq: u64 = 0;
    let mut last_hash = GENESIS_PREV.to_owned();
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(|e| JournalError::io(path, e))?;
        if n == 0 {
            let report = VerifyReport { records: last_seq, last_seq, last_hash, torn_tail: None };
            return Ok(ScanOutcome { report, valid_len: offset });
        }
        let Some(line) = buf.strip_suffix(b"\n") else {
            // EOF without newline: the torn tail.
            let torn = TornTail { offset, bytes: n as u64 };
            let report = VerifyReport { records: last_seq, last_seq, last_hash, torn_tail: Some(torn) };
            return Ok(ScanOutcome { report, valid_len: offset });
        };
        line_no += 1;
        let corrupt = |problem: LineProblem| JournalError::Corrupt {
            path: path.to_owned(),
            line: line_no,
            offset,
            reason: problem.to_string(),
        };
        let parsed = check_line(line, last_seq + 1, &last_hash).map_err(corrupt)?;
        last_seq = parsed.seq;
        last_hash.clone_from(&parsed.hash);
        visit(parsed).map_err(corrupt)?;
        offset += n as u64;
    }
}

/// Verifies the journal at `path` without modifying it: every complete line must be a well-formed record with
/// continuous seq, correct prev linkage and a correct hash. A torn final line is reported, not an error.
/// Backs `akritas audit verify PATH`.
pub fn verify(path: &Path) -> Result<VerifyReport, JournalError> {
    let file = File::open(path).map_err(|e| JournalError::io(path, e))?;
    Ok(scan(path, file, |_| Ok(()))?.report)
}
