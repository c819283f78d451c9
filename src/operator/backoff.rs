//! Per-object retry schedule for failed writes (controller-rs `error_policy`
//! style): after a failure the object waits before its next attempt, twice as long
//! after each further failure up to a bound; a success forgets the object.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// Wait after the first failure.
pub const BASE: Duration = Duration::from_secs(1);
/// Longest wait between attempts.
pub const MAX: Duration = Duration::from_secs(300);

/// Failures per object and when each may be attempted again.
#[derive(Debug)]
pub struct Backoff<K> {
    failing: BTreeMap<K, (u32, Instant)>,
}

impl<K: Ord> Default for Backoff<K> {
    fn default() -> Self {
        Self { failing: BTreeMap::new() }
    }
}

impl<K: Ord> Backoff<K> {
    /// Whether the object may be attempted at `now`.
    pub fn due(&self, key: &K, now: Instant) -> bool {
        self.failing.get(key).is_none_or(|(_, next)| *next <= now)
    }

    /// Records a failure at `now`; returns the wait before the next attempt.
    pub fn failed(&mut self, key: K, now: Instant) -> Duration {
        let failures = self.failing.get(&key).map_or(1, |(n, _)| n.saturating_add(1));
        let wait = delay(failures);
        self.failing.insert(key, (failures, now + wait));
        wait
    }

    /// Records a success: the object is no longer delayed.
    pub fn succeeded(&mut self, key: &K) {
        self.failing.remove(key);
    }

    /// Forgets objects for which `keep` is false.
    pub fn retain(&mut self, keep: impl Fn(&K) -> bool) {
        self.failing.retain(|key, _| keep(key));
    }
}

/// `BASE · 2^(failures-1)`, at most `MAX`.
fn delay(failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
    BASE.saturating_mul(factor).min(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_bound_and_reset_on_success() {
        let now = Instant::now();
        let mut backoff = Backoff::default();
        let waits: Vec<u64> = (0..12).map(|_| backoff.failed("a", now).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert!(!backoff.due(&"a", now + Duration::from_secs(299)));
        assert!(backoff.due(&"a", now + MAX));
        assert!(backoff.due(&"b", now), "other objects are not delayed");
        backoff.succeeded(&"a");
        assert!(backoff.due(&"a", now));
        assert_eq!(backoff.failed("a", now), BASE, "a success starts over");
        for _ in 0..100 {
            backoff.failed("a", now);
        }
        assert_eq!(backoff.failed("a", now), MAX, "no overflow after many failures");
    }
}
