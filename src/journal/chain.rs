//! Reading a journal's chain across its segments: from the oldest kept record (anchored at
//! the retention anchor, or at the genesis) or from a checkpoint a snapshot recorded.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use std::io;
use std::path::Path;

use super::format::{GENESIS_PREV, INTERNAL_PREFIX, ParsedLine, check_canonical, record_hash};
use super::scan::{ScanError, Seen, Start, TornTail, VerifyReport, scan};
use super::segments::{Anchor, Layout, Segment};
use super::{
    Checkpoint, DEFAULT_MAX_RECORD_BYTES, JournalError, Location, Record, Replay, record_from_line, visit_app,
};

/// What reading the chain found.
pub(crate) struct Chain {
    /// Over everything read.
    pub(crate) report: VerifyReport,
    /// The segments of the chain, oldest first (the last is the active one).
    pub(crate) segments: Vec<Segment>,
    /// Segments older than the anchor: left by a retention that stopped before deleting them.
    pub(crate) leftovers: Vec<Segment>,
    /// Length of the last segment up to its last complete line.
    pub(crate) active_len: u64,
    /// The retention anchor.
    pub(crate) anchor: Option<Anchor>,
}

fn corrupt(layout: &Layout, path: Option<&std::path::Path>, reason: String) -> JournalError {
    JournalError::Corrupt { path: path.unwrap_or(layout.base()).to_owned(), line: 0, offset: 0, reason }
}

/// Reads and checks the one line at `location` on its own: a complete record whose hash
/// matches its content (its place in the chain is not checked).
pub(crate) fn line_at(layout: &Layout, location: Location) -> Result<ParsedLine, JournalError> {
    let path = layout.segment_path(location.segment);
    let mut file = File::open(&path).map_err(|e| JournalError::io(&path, e))?;
    file.seek(SeekFrom::Start(location.offset)).map_err(|e| JournalError::io(&path, e))?;
    let mut buf = vec![0; location.len as usize];
    file.read_exact(&mut buf).map_err(|e| JournalError::io(&path, e))?;
    let bad = |reason: String| JournalError::Corrupt { path: path.clone(), line: 0, offset: location.offset, reason };
    let Some(line) = buf.strip_suffix(b"\n") else {
        return Err(bad("no complete record at this location".into()));
    };
    let parsed: ParsedLine =
        serde_json::from_slice(line).map_err(|e| bad(format!("not a valid journal record ({e})")))?;
    let computed = record_hash(&parsed.prev, parsed.seq, &parsed.time, &parsed.kind, parsed.data.get());
    if computed != parsed.hash {
        return Err(bad(format!("hash mismatch at seq {}", parsed.seq)));
    }
    check_canonical(line, &parsed).map_err(|problem| bad(problem.to_string()))?;
    Ok(parsed)
}

/// Reads the chain from `from` (or from the oldest kept record), verifying every record and
/// handing each to `visit`. Only the last segment may end with a torn line.
pub(crate) fn read_chain<E>(
    layout: &Layout,
    from: Option<&Checkpoint>,
    max_line: usize,
    visit: &mut dyn FnMut(Seen) -> Result<(), E>,
) -> Result<Chain, ScanError<E>> {
    let anchor = layout.read_anchor()?;
    let (leftovers, segments): (Vec<Segment>, Vec<Segment>) =
        layout.list()?.into_iter().partition(|s| anchor.as_ref().is_some_and(|a| s.id < a.first_seq));
    let mut chain =
        Chain { report: VerifyReport::default(), segments, leftovers, active_len: 0, anchor: anchor.clone() };
    chain.report.last_hash = GENESIS_PREV.to_owned();
    let Some(first) = chain.segments.first() else {
        if let Some(anchor) = &anchor {
            return Err(corrupt(
                layout,
                None,
                format!("the retention anchor keeps records from seq {} but no segment file is left", anchor.first_seq),
            )
            .into());
        }
        return Ok(chain);
    };
    let expected_first = anchor.as_ref().map_or(1, |a| a.first_seq);
    if first.id != expected_first {
        let path = layout.segment_path(first.id);
        return Err(corrupt(
            layout,
            Some(&path),
            format!("the oldest segment starts at seq {} but the chain starts at seq {expected_first}", first.id),
        )
        .into());
    }
    // A snapshot at the anchor (its record deleted, as a database compacts): the state stands for
    // every record before the oldest kept one.
    let at_anchor = |checkpoint: &Checkpoint| {
        anchor.as_ref().is_some_and(|a| checkpoint.seq + 1 == a.first_seq && checkpoint.hash == a.prev)
    };
    let (start, mut head) = match from {
        Some(checkpoint) if at_anchor(checkpoint) => {
            (0, Start { offset: 0, seq: checkpoint.seq, hash: checkpoint.hash.clone() })
        }
        Some(checkpoint) => {
            let index = chain.segments.iter().position(|s| s.id == checkpoint.location.segment).ok_or_else(|| {
                JournalError::CheckpointMismatch {
                    path: layout.base().to_owned(),
                    seq: checkpoint.seq,
                    reason: "its segment is not in the journal".into(),
                }
            })?;
            let mismatch = |reason: String| JournalError::CheckpointMismatch {
                path: layout.base().to_owned(),
                seq: checkpoint.seq,
                reason,
            };
            let line = line_at(layout, checkpoint.location).map_err(|e| mismatch(e.to_string()))?;
            if line.seq != checkpoint.seq || line.hash != checkpoint.hash {
                return Err(mismatch(format!("the record there is seq {} with another hash", line.seq)).into());
            }
            let offset = checkpoint.location.offset + u64::from(checkpoint.location.len);
            (index, Start { offset, seq: checkpoint.seq, hash: checkpoint.hash.clone() })
        }
        None => {
            let prev = anchor.as_ref().map_or_else(|| GENESIS_PREV.to_owned(), |a| a.prev.clone());
            (0, Start { offset: 0, seq: expected_first - 1, hash: prev })
        }
    };
    chain.report.first_seq = head.seq + 1;
    let last = chain.segments.len() - 1;
    for index in start..=last {
        let segment = chain.segments[index].clone();
        let path = layout.segment_path(segment.id);
        if head.offset == 0 && segment.id != head.seq + 1 {
            return Err(corrupt(
                layout,
                Some(&path),
                format!("the segment starts at seq {} but the one before ends at seq {}", segment.id, head.seq),
            )
            .into());
        }
        let file = File::open(&path).map_err(|e| JournalError::io(&path, e))?;
        let outcome = scan(&path, segment.id, file, head, max_line, visit)?;
        let report = outcome.report;
        chain.report.records += report.records;
        chain.report.segments += 1;
        if let Some(torn) = report.torn_tail {
            if index != last {
                return Err(corrupt(
                    layout,
                    Some(&path),
                    format!(
                        "a sealed segment ends with a partial record at byte offset {} ({} bytes)",
                        torn.offset, torn.bytes
                    ),
                )
                .into());
            }
            chain.report.torn_tail = Some(TornTail { offset: torn.offset, bytes: torn.bytes });
        }
        chain.active_len = outcome.valid_len;
        head = Start { offset: 0, seq: report.last_seq, hash: report.last_hash };
    }
    chain.report.last_seq = head.seq;
    chain.report.last_hash = head.hash;
    Ok(chain)
}

pub(super) fn read_at(layout: &Layout, location: Location) -> Result<Record, JournalError> {
    let line = line_at(layout, location)?;
    let path = layout.segment_path(location.segment);
    record_from_line(line, location).map_err(|problem| JournalError::Corrupt {
        path,
        line: 0,
        offset: location.offset,
        reason: problem.to_string(),
    })
}

/// The retention anchor of the journal at `path`: `Some` once retention removed records, so the journal no
/// longer starts at seq 1 and its state can only be rebuilt from a snapshot taken after the anchor.
pub fn anchor(path: &Path) -> Result<Option<Anchor>, JournalError> {
    Layout::new(path).read_anchor()
}

/// Reads the record at `location` of the journal configured at `path`, without opening it for writing.
pub fn read_record(path: &Path, location: Location) -> Result<Record, JournalError> {
    read_at(&Layout::new(path), location)
}

/// Reads the journal at `path` without modifying it, from `from` (or from the oldest kept record, anchored at the
/// retention anchor), verifying the chain across segments and handing each application record to `visit`; internal
/// records are counted, not handed over. A missing journal is [`JournalError::Io`] (`NotFound`).
pub fn scan_from<E>(
    path: &Path,
    from: Option<&Checkpoint>,
    visit: &mut dyn FnMut(Record) -> Result<(), E>,
) -> Result<VerifyReport, ScanError<E>> {
    let layout = Layout::new(path);
    if layout.list()?.is_empty() && layout.read_anchor()?.is_none() {
        return Err(JournalError::io(path, io::Error::new(io::ErrorKind::NotFound, "no such journal")).into());
    }
    let mut internal = Vec::new();
    let mut app = visit_app(&mut internal, visit);
    Ok(read_chain(&layout, from, DEFAULT_MAX_RECORD_BYTES, &mut app)?.report)
}

/// Verifies the journal at `path` without modifying it: every segment from the oldest kept (anchored at the
/// retention anchor), every complete line a well-formed record of at most [`DEFAULT_MAX_RECORD_BYTES`] with
/// continuous seq, correct prev linkage and a correct hash, across segments. A torn final line of the active
/// segment is reported, not an error.
pub fn verify(path: &Path) -> Result<VerifyReport, JournalError> {
    scan_from(path, None, &mut |_| Ok::<(), std::convert::Infallible>(())).map_err(ScanError::into_journal)
}

/// Reads the journal at `path` without modifying it, from its oldest kept record, verifying the
/// chain as [`scan_from`] does and handing every record, internal ones too, with what a
/// verbatim copy of its line needs. Returns the report and the retention anchor the kept chain
/// follows. Reads one record at a time (`akritas storage migrate`).
pub fn copy_out<E>(
    path: &Path,
    visit: &mut dyn FnMut(Seen) -> Result<(), E>,
) -> Result<(VerifyReport, Option<Anchor>), ScanError<E>> {
    let layout = Layout::new(path);
    if layout.list()?.is_empty() && layout.read_anchor()?.is_none() {
        return Err(JournalError::io(path, io::Error::new(io::ErrorKind::NotFound, "no such journal")).into());
    }
    let chain = read_chain(&layout, None, DEFAULT_MAX_RECORD_BYTES, visit)?;
    Ok((chain.report, chain.anchor))
}

/// [`verify`], also returning every record (application and internal); holds them all in memory.
pub fn read(path: &Path) -> Result<(VerifyReport, Replay), JournalError> {
    let layout = Layout::new(path);
    if layout.list()?.is_empty() && layout.read_anchor()?.is_none() {
        return Err(JournalError::io(path, io::Error::new(io::ErrorKind::NotFound, "no such journal")));
    }
    let mut replay = Replay::default();
    let mut keep = |Seen { record, .. }| -> Result<(), std::convert::Infallible> {
        if record.kind.starts_with(INTERNAL_PREFIX) {
            replay.recovered.push(record);
        } else {
            replay.records.push(record);
        }
        Ok(())
    };
    let chain = read_chain(&layout, None, DEFAULT_MAX_RECORD_BYTES, &mut keep).map_err(ScanError::into_journal)?;
    Ok((chain.report, replay))
}
