//! Host ids kept compact in memory: the host's own `xxx_<32 hex digits>` (events, incidents,
//! jobs) in 24 bytes without an allocation, anything else (ids from older journals) as text.
//! Written and read as the same text, so journals, snapshots and the API see no difference.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An id in 24 bytes. Host ids order as their text does.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// `xxx_<32 hex digits>`.
    Host {
        /// `evt`, `inc`, `job`, …
        prefix: [u8; 3],
        /// The 32 hex digits.
        value: [u8; 16],
    },
    /// Any other id.
    Text(Box<str>),
}

impl Id {
    /// The compact form of an id.
    pub fn new(id: &str) -> Id {
        let host = id.as_bytes().get(..4).filter(|p| p[3] == b'_' && p[..3].iter().all(u8::is_ascii_lowercase));
        let mut value = [0u8; 16];
        match (host, id.get(4..)) {
            (Some(prefix), Some(hex))
                if hex.len() == 32
                    && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                    && hex::decode_to_slice(hex, &mut value).is_ok() =>
            {
                Id::Host { prefix: [prefix[0], prefix[1], prefix[2]], value }
            }
            _ => Id::Text(id.into()),
        }
    }

    /// The id as text.
    pub fn text(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Host { prefix, value } => {
                write!(f, "{}_", String::from_utf8_lossy(prefix))?;
                value.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
            Id::Text(text) => f.write_str(text),
        }
    }
}

impl PartialEq<str> for Id {
    fn eq(&self, other: &str) -> bool {
        *self == Id::new(other)
    }
}

impl PartialEq<String> for Id {
    fn eq(&self, other: &String) -> bool {
        *self == *other.as_str()
    }
}

impl Serialize for Id {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        Ok(Id::new(&std::borrow::Cow::<str>::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ids_are_kept_compact_and_read_back_exactly() {
        assert_eq!(std::mem::size_of::<Id>(), 24);
        for id in ["evt_0123456789abcdef0123456789abcdef", "inc_1", "evt_0123456789ABCDEF0123456789abcdef", "x", ""] {
            assert_eq!(Id::new(id).text(), id);
            assert_eq!(serde_json::from_str::<Id>(&serde_json::to_string(&Id::new(id)).unwrap()).unwrap(), Id::new(id));
        }
        assert!(matches!(Id::new("inc_0123456789abcdef0123456789abcdef"), Id::Host { .. }));
        assert!(matches!(Id::new("evt_0123456789ABCDEF0123456789abcdef"), Id::Text(_)), "upper case stays text");
    }

    #[test]
    fn host_ids_order_as_their_text() {
        let mut ids = [
            "job_f0000000000000000000000000000000",
            "job_0a000000000000000000000000000000",
            "evt_ff000000000000000000000000000000",
        ];
        let mut compact: Vec<Id> = ids.iter().map(|i| Id::new(i)).collect();
        ids.sort();
        compact.sort();
        assert_eq!(compact.iter().map(Id::text).collect::<Vec<_>>(), ids);
    }
}

/// A key of an in-memory index (a correlation index key, an alert's member key) as the first
/// 16 bytes of its SHA-256: the same size whatever the provider's key. Written as 32 hex
/// digits; read from those, or from the full text older snapshots kept (digested then), or
/// from a member key's 64 hex digits (their first half is the same digest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub(crate) [u8; 16]);

impl Key {
    /// The key of a text.
    pub(crate) fn of(text: &str) -> Key {
        use sha2::Digest;
        let full = sha2::Sha256::digest(text.as_bytes());
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        Key(out)
    }

    /// The key of a hex SHA-256 digest (its first half), or of the text when it is not one.
    pub(crate) fn of_digest(text: &str) -> Key {
        let mut out = [0u8; 16];
        let hex = text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        match hex && hex::decode_to_slice(&text[..32], &mut out).is_ok() {
            true => Key(out),
            false => Key::of(text),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        let mut out = [0u8; 16];
        if text.len() == 32 && hex::decode_to_slice(text.as_bytes(), &mut out).is_ok() {
            return Ok(Key(out));
        }
        Ok(Key::of_digest(&text))
    }
}
