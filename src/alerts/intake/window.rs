//! The deduplication window: the first delivery of each deduplication key, remembered for
//! a bounded time and up to a bounded count (the oldest are forgotten first).
//!
//! Keys are kept as 128-bit digests of the dedup index key (`namespace/name \0 key`), so an
//! entry costs the same whatever the provider's key length. Expiry is a function of the
//! state and the delivery's recorded receive time only, and the limits in force are written
//! in each delivery record, so replay forgets exactly what the live store forgot.

use crate::ids::{EventId, IncidentId};
use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::alerts::intake::id::Id;

/// The first delivery of a deduplication key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstSeen {
    pub event_id: EventId,
    pub incident_id: IncidentId,
}

/// How long and how many deduplication keys are remembered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupLimits {
    /// Seconds a key is remembered after its first delivery.
    pub window_secs: u64,
    /// Most keys remembered.
    pub max_keys: u64,
}

impl Default for DedupLimits {
    fn default() -> Self {
        DedupLimits { window_secs: 86_400, max_keys: 100_000 }
    }
}

/// Digest of a dedup index key.
pub(crate) type KeyDigest = [u8; 16];

pub(crate) fn digest(dedup_index_key: &str) -> KeyDigest {
    let full = Sha256::digest(dedup_index_key.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    event: Id,
    incident: Id,
    /// Insertion number, to tell a key's current entry from an expired one of the same key.
    n: u64,
}

/// First deliveries by key, oldest first.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct DedupWindow {
    #[serde(with = "entries")]
    keys: HashMap<KeyDigest, Entry>,
    /// `(first seen, unix seconds; insertion number; key)` in insertion order.
    order: VecDeque<(i64, u64, KeyDigest)>,
    next: u64,
}

impl DedupWindow {
    pub(crate) fn get(&self, key: &str) -> Option<FirstSeen> {
        self.keys
            .get(&digest(key))
            .map(|e| FirstSeen { event_id: e.event.text().into(), incident_id: e.incident.text().into() })
    }

    /// Remembers the first delivery of `key` at `at` (unix seconds); an existing entry stays.
    pub(crate) fn insert(&mut self, key: &str, first: FirstSeen, at: i64) {
        let key = digest(key);
        if self.keys.contains_key(&key) {
            return;
        }
        let n = self.next;
        self.next += 1;
        self.keys.insert(key, Entry { event: Id::new(&first.event_id), incident: Id::new(&first.incident_id), n });
        self.order.push_back((at, n, key));
    }

    /// Forgets the keys first seen `window_secs` or more before `now`, and the oldest past `max_keys`.
    /// Returns how many were forgotten.
    pub(crate) fn expire(&mut self, now: i64, limits: DedupLimits) -> usize {
        let window = i64::try_from(limits.window_secs).unwrap_or(i64::MAX);
        let max = usize::try_from(limits.max_keys).unwrap_or(usize::MAX);
        let mut forgotten = 0;
        while let Some(&(at, n, key)) = self.order.front() {
            if now.saturating_sub(at) < window && self.keys.len() <= max {
                break;
            }
            self.order.pop_front();
            if self.keys.get(&key).is_some_and(|e| e.n == n) {
                self.keys.remove(&key);
                forgotten += 1;
            }
        }
        forgotten
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
}

/// The key map as a list (JSON object keys must be strings).
mod entries {
    use std::collections::HashMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Entry;
    use super::KeyDigest;

    pub(super) fn serialize<S: Serializer>(map: &HashMap<KeyDigest, Entry>, s: S) -> Result<S::Ok, S::Error> {
        let mut list: Vec<(String, &Entry)> = map.iter().map(|(k, v)| (hex::encode(k), v)).collect();
        list.sort_by_key(|(_, e)| e.n);
        list.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HashMap<KeyDigest, Entry>, D::Error> {
        let list: Vec<(String, Entry)> = Vec::deserialize(d)?;
        list.into_iter()
            .map(|(k, v)| {
                let mut key = [0u8; 16];
                hex::decode_to_slice(&k, &mut key).map_err(serde::de::Error::custom)?;
                Ok((key, v))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(n: u32) -> FirstSeen {
        FirstSeen { event_id: format!("evt_{n}").into(), incident_id: format!("inc_{n}").into() }
    }

    #[test]
    fn keys_are_forgotten_after_the_window_and_past_the_count_oldest_first() {
        let mut w = DedupWindow::default();
        let limits = DedupLimits { window_secs: 100, max_keys: 3 };
        for i in 0..3 {
            w.insert(&format!("k{i}"), first(i), 1000 + i64::from(i));
        }
        assert_eq!(w.expire(1050, limits), 0);
        w.insert("k3", first(3), 1060);
        assert_eq!(w.expire(1060, limits), 1, "over the count: the oldest goes");
        assert_eq!(w.get("k0"), None);
        assert_eq!(w.get("k1"), Some(first(1)));
        assert_eq!(w.expire(1101, limits), 1, "k1 is 100 s old");
        assert_eq!((w.get("k1"), w.len()), (None, 2));
        // A forgotten key seen again is new, and its old queue entry does not remove the new one.
        w.insert("k0", first(9), 1102);
        w.insert("k0", first(10), 1103);
        assert_eq!(w.get("k0"), Some(first(9)), "the first delivery stays");
        assert_eq!(w.expire(1159, limits), 1, "k2 (at 1002) is gone");
        assert_eq!(w.get("k0"), Some(first(9)));
    }

    #[test]
    fn the_window_survives_a_snapshot() {
        let mut w = DedupWindow::default();
        for i in 0..5 {
            w.insert(&format!("k{i}"), first(i), i64::from(i));
        }
        let text = serde_json::to_string(&w).unwrap();
        let mut back: DedupWindow = serde_json::from_str(&text).unwrap();
        assert_eq!(back.get("k3"), Some(first(3)));
        assert_eq!(back.expire(2, DedupLimits { window_secs: 2, max_keys: 100 }), 1);
        assert_eq!(back.get("k0"), None);
    }
}
