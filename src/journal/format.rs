//! On-disk line format: kind rules, hashing, encoding and decoding of one record line.

use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::JournalError;

/// `prev` of the first record: 64 zeros.
pub(crate) const GENESIS_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Prefix reserved for records the journal writes itself.
pub(crate) const INTERNAL_PREFIX: &str = "journal.";
/// Kind of the record written after a torn final line was truncated.
pub(crate) const TORN_TAIL_KIND: &str = "journal.torn_tail_truncated";
/// Kind of the record written after retention deleted segments.
pub(crate) const RETENTION_KIND: &str = "journal.retention";
/// Kind of the record written when appends resume after a failed write.
pub(crate) const WRITE_FAILED_KIND: &str = "journal.write_failed";

/// Whether `kind` matches `^[a-z][a-z0-9_.]{0,63}$`.
pub(crate) fn is_valid_kind(kind: &str) -> bool {
    match kind.as_bytes().split_first() {
        Some((first, rest)) => {
            rest.len() <= 63
                && first.is_ascii_lowercase()
                && rest.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'.')
        }
        None => false,
    }
}

/// Validates a kind supplied by an application (not an internal `journal.*` kind).
pub(crate) fn check_app_kind(kind: &str) -> Result<(), JournalError> {
    if is_valid_kind(kind) && !kind.starts_with(INTERNAL_PREFIX) {
        Ok(())
    } else {
        Err(JournalError::InvalidKind(kind.to_owned()))
    }
}

/// `sha256(prev + "\n" + seq + "\n" + time + "\n" + kind + "\n" + data_json)` as lowercase hex.
pub(crate) fn record_hash(prev: &str, seq: u64, time: &str, kind: &str, data_json: &str) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(b"\n");
    h.update(seq.to_string().as_bytes());
    h.update(b"\n");
    h.update(time.as_bytes());
    h.update(b"\n");
    h.update(kind.as_bytes());
    h.update(b"\n");
    h.update(data_json.as_bytes());
    hex::encode(h.finalize())
}

/// The record's keyed seal: `hmac_sha256(key, hash)` as lowercase hex. The hash already
/// chains every earlier record, so whoever rewrites and re-chains the journal must also
/// forge a seal for every later record, which needs the key.
pub(crate) fn record_mac(key: &[u8], hash: &str) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(hash.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

const KEY_SEQ: &str = "{\"seq\":";
const KEY_TIME: &str = ",\"time\":";
const KEY_KIND: &str = ",\"kind\":";
const KEY_PREV: &str = ",\"prev\":\"";
const KEY_DATA: &str = "\",\"data\":";
const KEY_HASH: &str = ",\"hash\":\"";
const KEY_MAC: &str = "\",\"mac\":\"";
const TAIL: &str = "\"}\n";
const HEX_LEN: usize = 64;
const FIXED_LEN: usize = KEY_SEQ.len()
    + KEY_TIME.len()
    + KEY_KIND.len()
    + KEY_PREV.len()
    + HEX_LEN
    + KEY_DATA.len()
    + KEY_HASH.len()
    + HEX_LEN
    + TAIL.len();

/// A lower bound on the encoded line length (including `\n`) for `kind` and `data_json`,
/// usable before seq and time are known.
pub(crate) fn min_line_len(kind: &str, data_json: &str) -> usize {
    // Shortest seq is one digit; shortest time is `""`; kinds never need escaping.
    FIXED_LEN + 1 + 2 + kind.len() + 2 + data_json.len()
}

/// One encoded line (with trailing `\n`) and its hash.
pub(crate) struct Encoded {
    pub(crate) line: Vec<u8>,
    pub(crate) hash: String,
    pub(crate) mac: Option<String>,
}

/// Encodes one record line with fields in the order `seq, time, kind, prev, data, hash`,
/// and `mac` last when the journal is keyed.
pub(crate) fn encode(seq: u64, time: &str, kind: &str, prev: &str, data_json: &str, key: Option<&[u8]>) -> Encoded {
    let hash = record_hash(prev, seq, time, kind, data_json);
    let mac = key.map(|key| record_mac(key, &hash));
    Encoded { line: encode_line(seq, time, kind, prev, data_json, &hash, mac.as_deref()), hash, mac }
}

/// The line (with its `\n`) of a record whose hash is known.
pub(crate) fn encode_line(
    seq: u64,
    time: &str,
    kind: &str,
    prev: &str,
    data_json: &str,
    hash: &str,
    mac: Option<&str>,
) -> Vec<u8> {
    let seq_s = seq.to_string();
    let time_j = json_string(time);
    let kind_j = json_string(kind);
    let mut line = String::with_capacity(FIXED_LEN + seq_s.len() + time_j.len() + kind_j.len() + data_json.len());
    line.push_str(KEY_SEQ);
    line.push_str(&seq_s);
    line.push_str(KEY_TIME);
    line.push_str(&time_j);
    line.push_str(KEY_KIND);
    line.push_str(&kind_j);
    line.push_str(KEY_PREV);
    line.push_str(prev);
    line.push_str(KEY_DATA);
    line.push_str(data_json);
    line.push_str(KEY_HASH);
    line.push_str(hash);
    if let Some(mac) = mac {
        line.push_str(KEY_MAC);
        line.push_str(mac);
    }
    line.push_str(TAIL);
    line.into_bytes()
}

/// A record line as read back; `data` keeps the exact bytes that were written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ParsedLine {
    pub(crate) seq: u64,
    pub(crate) time: String,
    pub(crate) kind: String,
    pub(crate) prev: String,
    pub(crate) data: Box<RawValue>,
    pub(crate) hash: String,
    /// The keyed seal ([`record_mac`]) of a record written with an audit key.
    #[serde(default)]
    pub(crate) mac: Option<String>,
}

/// What is wrong with one complete line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LineProblem {
    /// Not a record at all.
    #[error("not a valid journal record ({0})")]
    NotARecord(serde_json::Error),
    /// A record kind outside the allowed alphabet.
    #[error("invalid record kind {0:?}")]
    InvalidKind(String),
    /// A missing or repeated record.
    #[error("sequence break: expected seq {expected}, found seq {found}")]
    SequenceBreak { expected: u64, found: u64 },
    /// `prev` does not name the previous record's hash.
    #[error("chain break at seq {seq}: prev is {prev:?} but the previous record's hash is {expected}")]
    ChainBreak { seq: u64, prev: String, expected: String },
    /// The record was altered.
    #[error("hash mismatch at seq {seq}: recorded {recorded:?}, computed {computed}")]
    HashMismatch { seq: u64, recorded: String, computed: String },
    /// The line is a valid record but not in the writer's exact encoding.
    #[error("record {seq} is not in the journal's exact encoding (spacing, field order or escapes changed)")]
    NotCanonical { seq: u64 },
    /// The line is longer than any record the writer writes.
    #[error("the line is {bytes} bytes, longer than the limit of {limit} bytes on one record")]
    TooLong { bytes: u64, limit: usize },
    /// The record's data is not JSON the reader can hold.
    #[error("unreadable data ({0})")]
    UnreadableData(serde_json::Error),
}

/// Parses and checks one complete line (without its `\n`) against the expected seq and prev hash.
pub(crate) fn check_line(line: &[u8], expected_seq: u64, expected_prev: &str) -> Result<ParsedLine, LineProblem> {
    let parsed: ParsedLine = serde_json::from_slice(line).map_err(LineProblem::NotARecord)?;
    if !is_valid_kind(&parsed.kind) {
        return Err(LineProblem::InvalidKind(parsed.kind));
    }
    if parsed.seq != expected_seq {
        return Err(LineProblem::SequenceBreak { expected: expected_seq, found: parsed.seq });
    }
    if parsed.prev != expected_prev {
        return Err(LineProblem::ChainBreak { seq: parsed.seq, prev: parsed.prev, expected: expected_prev.to_owned() });
    }
    let computed = record_hash(&parsed.prev, parsed.seq, &parsed.time, &parsed.kind, parsed.data.get());
    if parsed.hash != computed {
        return Err(LineProblem::HashMismatch { seq: parsed.seq, recorded: parsed.hash, computed });
    }
    check_canonical(line, &parsed)?;
    Ok(parsed)
}

/// The line must be exactly as the writer encodes it: a change outside the hashed fields
/// (spacing, field order, escapes) would still move every later record, and records are
/// read back by their byte offset.
pub(crate) fn check_canonical(line: &[u8], parsed: &ParsedLine) -> Result<(), LineProblem> {
    let canonical = encode_line(
        parsed.seq,
        &parsed.time,
        &parsed.kind,
        &parsed.prev,
        parsed.data.get(),
        &parsed.hash,
        parsed.mac.as_deref(),
    );
    if canonical.strip_suffix(b"\n") == Some(line) {
        Ok(())
    } else {
        Err(LineProblem::NotCanonical { seq: parsed.seq })
    }
}
