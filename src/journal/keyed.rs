//! The keyed seals of a journal written with an audit key: every record carries
//! `mac = hmac_sha256(key, hash)`, and its hash chains every earlier record. Whoever can
//! write the volume can still rewrite a record and re-chain the hashes after it, but not
//! forge the seals without the key; and an anchor kept outside the journal (the last
//! seq, hash and seal, written at least every minute) shows a journal truncated behind it.
//! A journal from before keys were used verifies under the unkeyed rule up to its first
//! sealed record; after that, every record must be sealed.

use std::io::{BufRead, BufReader};
use std::path::Path;

use super::format::{ParsedLine, record_mac};
use super::segments::Layout;
use super::{Head, JournalError, VerifyReport};

/// What checking the seals found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SealReport {
    /// The hash chain's report.
    pub chain: VerifyReport,
    /// Records with a valid seal.
    pub sealed: u64,
    /// Records before the first sealed one (written before the key was configured).
    pub unsealed_before: u64,
    /// The seq of the first sealed record.
    pub first_sealed: Option<u64>,
}

/// Why the seals do not hold.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The hash chain itself is broken (see [`super::verify`]).
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A record's seal was not made with this key: the record was rewritten (or the key is wrong).
    #[error(
        "record seq {seq} has a seal this key did not make: the record was rewritten after it was written, or the key is not the one the journal was written with"
    )]
    BadSeal {
        /// The record.
        seq: u64,
    },
    /// A record after the first sealed one has no seal.
    #[error(
        "record seq {seq} has no seal although records are sealed from seq {since}: the journal was rewritten without the key"
    )]
    Unsealed {
        /// The record.
        seq: u64,
        /// The first sealed record.
        since: u64,
    },
    /// No record is sealed although a key was given: written without the key, or every seal
    /// was stripped (after a rewrite, the seals of later records no longer match, so an
    /// attacker must strip them all).
    #[error(
        "no record of the journal is sealed: it was written without the audit key, or its seals were stripped; verify a journal from before the key without --key-env"
    )]
    NoSeals,
    /// The journal ends before the anchor's record.
    #[error("the journal ends at seq {last} but the anchor records seq {anchored}: records were removed from its end")]
    BehindAnchor {
        /// The anchor's seq.
        anchored: u64,
        /// The journal's last seq.
        last: u64,
    },
    /// The record at the anchor's seq is not the anchored one.
    #[error("record seq {seq} is not the one the anchor recorded: the journal was rewritten")]
    AnchorMismatch {
        /// The record.
        seq: u64,
    },
}

/// Verifies the journal at `path` (its hash chain), every record's seal with `key`, and,
/// with `anchor`, that the journal still holds the anchored record unchanged.
pub fn verify_seals(path: &Path, key: &[u8], anchor: Option<&Head>) -> Result<SealReport, SealError> {
    let chain = super::verify(path)?;
    let layout = Layout::new(path);
    let retained_from = layout.read_anchor()?.map_or(1, |a| a.first_seq);
    let mut report = SealReport { chain, ..SealReport::default() };
    for segment in layout.list()?.into_iter().filter(|s| s.id >= retained_from) {
        let segment_path = layout.segment_path(segment.id);
        let file = std::fs::File::open(&segment_path).map_err(|e| JournalError::io(&segment_path, e))?;
        for line in BufReader::new(file).split(b'\n') {
            let line = line.map_err(|e| JournalError::io(&segment_path, e))?;
            // The chain was verified above: a line that does not parse is the torn tail.
            let Ok(parsed) = serde_json::from_slice::<ParsedLine>(&line) else { break };
            check_seal(&parsed, key, &mut report)?;
            if let Some(anchor) = anchor
                && anchor.seq == parsed.seq
                && (anchor.hash != parsed.hash
                    || anchor.mac.as_ref().is_some_and(|mac| Some(mac) != parsed.mac.as_ref()))
            {
                return Err(SealError::AnchorMismatch { seq: parsed.seq });
            }
        }
    }
    if let Some(anchor) = anchor
        && anchor.seq > report.chain.last_seq
    {
        return Err(SealError::BehindAnchor { anchored: anchor.seq, last: report.chain.last_seq });
    }
    if report.first_sealed.is_none() && report.chain.records > 0 {
        return Err(SealError::NoSeals);
    }
    Ok(report)
}

fn check_seal(parsed: &ParsedLine, key: &[u8], report: &mut SealReport) -> Result<(), SealError> {
    match (&parsed.mac, report.first_sealed) {
        (Some(mac), _) => {
            let expected = record_mac(key, &parsed.hash);
            if !constant_time_eq(mac.as_bytes(), expected.as_bytes()) {
                return Err(SealError::BadSeal { seq: parsed.seq });
            }
            report.first_sealed.get_or_insert(parsed.seq);
            report.sealed += 1;
        }
        (None, None) => report.unsealed_before += 1,
        (None, Some(since)) => return Err(SealError::Unsealed { seq: parsed.seq, since }),
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}
