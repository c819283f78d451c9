//! Admission of new investigations (every input bounded: an invariant in
//! docs/architecture.md). A valid delivery is always stored and correlated; only its
//! investigations are shed:
//! - a new job starts `pending` when its AlertSource has a token (`alert_source_rate` new
//!   investigations per minute, also the burst) and fewer than `alert_pending_jobs` jobs wait
//!   for a worker host-wide;
//! - otherwise it is `deferred`, up to `alert_deferred_jobs` deferred jobs per source, and is
//!   promoted to `pending` later, most severe first, then oldest, as tokens and room come back;
//! - past that bound, the rest of the storm is coalesced into one storm job per source that
//!   counts the incidents it stands for.
//!
//! Pure: the caller passes the clock. Tokens are not journaled: a restart starts every bucket
//! full.

use std::collections::BTreeMap;
use std::time::Instant;

/// Admission limits, from the service settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// New investigations per AlertSource per minute (also the burst).
    pub source_rate_per_minute: u32,
    /// Jobs waiting for a worker (`pending`), host-wide.
    pub max_pending_jobs: usize,
    /// Deferred jobs per AlertSource; past it, new incidents of the source share its storm job.
    pub max_deferred_per_source: usize,
}

impl Default for Limits {
    fn default() -> Self {
        use crate::config::defaults;
        Limits {
            source_rate_per_minute: defaults::ALERT_SOURCE_RATE,
            max_pending_jobs: defaults::ALERT_PENDING_JOBS as usize,
            max_deferred_per_source: defaults::ALERT_DEFERRED_JOBS as usize,
        }
    }
}

/// How a new investigation job of a source starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Pending: a worker may take it.
    Now,
    /// Deferred: promoted when the source's rate and the pending cap allow.
    Deferred,
    /// Coalesced into the source's storm job.
    Storm,
}

/// Token buckets per source (`namespace/name`).
#[derive(Debug, Default)]
pub struct Admission {
    limits: Limits,
    buckets: BTreeMap<String, Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Admission {
    /// Admission with these limits; every bucket starts full.
    pub fn new(limits: Limits) -> Self {
        Admission { limits, buckets: BTreeMap::new() }
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn bucket(&mut self, source: &str, now: Instant) -> &mut Bucket {
        let capacity = f64::from(self.limits.source_rate_per_minute.max(1));
        let per_second = capacity / 60.0;
        let bucket = self.buckets.entry(source.to_string()).or_insert(Bucket { tokens: capacity, at: now });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * per_second;
        bucket.tokens = (bucket.tokens + refill).min(capacity);
        bucket.at = now;
        bucket
    }

    /// How a new job of `source` would start while `pending` jobs wait host-wide and `deferred`
    /// of the source's are deferred; takes nothing.
    pub fn decide(&mut self, source: &str, pending: usize, deferred: usize, now: Instant) -> Start {
        let room = pending < self.limits.max_pending_jobs;
        if room && self.bucket(source, now).tokens >= 1.0 {
            Start::Now
        } else if deferred < self.limits.max_deferred_per_source {
            Start::Deferred
        } else {
            Start::Storm
        }
    }

    /// Takes the token of a job of `source` that starts now.
    pub fn take(&mut self, source: &str, now: Instant) {
        let bucket = self.bucket(source, now);
        bucket.tokens -= 1.0;
    }

    /// Whether a job of `source` may start now while `pending` wait; takes its token if so.
    pub fn try_start(&mut self, source: &str, pending: usize, now: Instant) -> bool {
        if pending >= self.limits.max_pending_jobs || self.bucket(source, now).tokens < 1.0 {
            return false;
        }
        self.take(source, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn limits() -> Limits {
        Limits { source_rate_per_minute: 60, max_pending_jobs: 10_000, max_deferred_per_source: 2 }
    }

    #[test]
    fn a_source_gets_a_minute_of_burst_then_its_rate() {
        let mut admission = Admission::new(limits());
        let start = Instant::now();
        for _ in 0..60 {
            assert!(admission.try_start("ops/am", 1, start));
        }
        assert!(!admission.try_start("ops/am", 1, start), "the burst is spent");
        assert!(admission.try_start("team/am", 1, start), "another source has its own bucket");
        assert!(!admission.try_start("ops/am", 1, start + Duration::from_millis(500)));
        assert!(admission.try_start("ops/am", 1, start + Duration::from_secs(1)), "one token a second");
    }

    #[test]
    fn past_the_tokens_jobs_are_deferred_then_coalesced_into_the_storm() {
        let mut admission = Admission::new(Limits { source_rate_per_minute: 1, ..limits() });
        let now = Instant::now();
        assert_eq!(admission.decide("ops/am", 0, 0, now), Start::Now);
        admission.take("ops/am", now);
        assert_eq!(admission.decide("ops/am", 0, 0, now), Start::Deferred);
        assert_eq!(admission.decide("ops/am", 0, 1, now), Start::Deferred);
        assert_eq!(admission.decide("ops/am", 0, 2, now), Start::Storm, "past alert_deferred_jobs");
        assert_eq!(admission.decide("team/am", 0, 0, now), Start::Now, "another source is not part of the storm");
    }

    #[test]
    fn the_pending_cap_defers_what_would_pass_it() {
        let mut admission = Admission::new(Limits { max_pending_jobs: 100, ..limits() });
        let now = Instant::now();
        assert_eq!(admission.decide("ops/am", 99, 0, now), Start::Now);
        assert_eq!(admission.decide("ops/am", 100, 0, now), Start::Deferred);
        assert!(!admission.try_start("ops/am", 100, now));
        assert!(admission.try_start("ops/am", 99, now));
    }
}
