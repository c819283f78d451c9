//! Admission of new investigations (every input bounded: an invariant in
//! docs/architecture.md). A valid delivery is always stored and correlated; only its
//! investigations are shed:
//! - a new job starts `pending` when its AlertSource has a token (`alert_source_rate` new
//!   investigations per minute, also the burst), fewer than `alert_pending_jobs` jobs wait
//!   for a worker host-wide and fewer than `alert_pending_jobs_per_namespace` in its
//!   namespace (so one namespace's storm never fills the host's pending room);
//! - otherwise it is `deferred`, naming the limit ([`Limit`]), up to `alert_deferred_jobs`
//!   deferred jobs per source, and is promoted to `pending` later, most severe first, then
//!   oldest, as tokens and room come back;
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
    /// Jobs waiting for a worker (`pending`) in one namespace.
    pub max_pending_per_namespace: usize,
    /// Deferred jobs per AlertSource; past it, new incidents of the source share its storm job.
    pub max_deferred_per_source: usize,
}

impl Default for Limits {
    fn default() -> Self {
        use crate::config::defaults;
        Limits {
            source_rate_per_minute: defaults::ALERT_SOURCE_RATE,
            max_pending_jobs: defaults::ALERT_PENDING_JOBS as usize,
            max_pending_per_namespace: defaults::ALERT_PENDING_JOBS_PER_NAMESPACE as usize,
            max_deferred_per_source: defaults::ALERT_DEFERRED_JOBS as usize,
        }
    }
}

/// How a new investigation job of a source starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Pending: a worker may take it.
    Now,
    /// Deferred by this limit: promoted when the source's rate and the pending caps allow.
    Deferred(Limit),
    /// Coalesced into the source's storm job (past `alert_deferred_jobs`).
    Storm,
}

impl Start {
    /// The setting that kept the job from starting now.
    pub fn setting(self) -> Option<&'static str> {
        match self {
            Start::Now => None,
            Start::Deferred(limit) => Some(limit.setting()),
            Start::Storm => Some("alert_deferred_jobs"),
        }
    }
}

/// The limit that defers a new investigation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The source has no token left (`alert_source_rate`).
    SourceRate,
    /// The host's pending room is full (`alert_pending_jobs`).
    PendingJobs,
    /// The namespace's pending room is full (`alert_pending_jobs_per_namespace`).
    NamespacePendingJobs,
}

impl Limit {
    /// The setting of the limit.
    pub fn setting(self) -> &'static str {
        match self {
            Limit::SourceRate => "alert_source_rate",
            Limit::PendingJobs => "alert_pending_jobs",
            Limit::NamespacePendingJobs => "alert_pending_jobs_per_namespace",
        }
    }
}

/// Jobs waiting for a worker when a new one is decided: host-wide and in its namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// Host-wide.
    pub host: usize,
    /// In the namespace of the new job's source.
    pub namespace: usize,
}

impl Pending {
    /// One more job pending.
    pub fn add(&mut self) {
        self.host += 1;
        self.namespace += 1;
    }
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

    /// The limit that keeps a new job of `source` from starting while `pending` wait, if any;
    /// takes nothing.
    fn limit(&mut self, source: &str, pending: Pending, now: Instant) -> Option<Limit> {
        if pending.host >= self.limits.max_pending_jobs {
            Some(Limit::PendingJobs)
        } else if pending.namespace >= self.limits.max_pending_per_namespace {
            Some(Limit::NamespacePendingJobs)
        } else if self.bucket(source, now).tokens < 1.0 {
            Some(Limit::SourceRate)
        } else {
            None
        }
    }

    /// How a new job of `source` would start while `pending` jobs wait and `deferred` of the
    /// source's are deferred; takes nothing.
    pub fn decide(&mut self, source: &str, pending: Pending, deferred: usize, now: Instant) -> Start {
        match self.limit(source, pending, now) {
            None => Start::Now,
            Some(limit) if deferred < self.limits.max_deferred_per_source => Start::Deferred(limit),
            Some(_) => Start::Storm,
        }
    }

    /// Takes the token of a job of `source` that starts now.
    pub fn take(&mut self, source: &str, now: Instant) {
        let bucket = self.bucket(source, now);
        bucket.tokens -= 1.0;
    }

    /// Whether a job of `source` may start now while `pending` wait; takes its token if so.
    pub fn try_start(&mut self, source: &str, pending: Pending, now: Instant) -> bool {
        if self.limit(source, pending, now).is_some() {
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
        Limits {
            source_rate_per_minute: 60,
            max_pending_jobs: 10_000,
            max_pending_per_namespace: 10_000,
            max_deferred_per_source: 2,
        }
    }

    fn waiting(host: usize, namespace: usize) -> Pending {
        Pending { host, namespace }
    }

    #[test]
    fn a_source_gets_a_minute_of_burst_then_its_rate() {
        let mut admission = Admission::new(limits());
        let start = Instant::now();
        for _ in 0..60 {
            assert!(admission.try_start("ops/am", waiting(1, 1), start));
        }
        assert!(!admission.try_start("ops/am", waiting(1, 1), start), "the burst is spent");
        assert!(admission.try_start("team/am", waiting(1, 1), start), "another source has its own bucket");
        assert!(!admission.try_start("ops/am", waiting(1, 1), start + Duration::from_millis(500)));
        assert!(admission.try_start("ops/am", waiting(1, 1), start + Duration::from_secs(1)), "one token a second");
    }

    #[test]
    fn past_the_tokens_jobs_are_deferred_then_coalesced_into_the_storm() {
        let mut admission = Admission::new(Limits { source_rate_per_minute: 1, ..limits() });
        let now = Instant::now();
        let none = Pending::default();
        assert_eq!(admission.decide("ops/am", none, 0, now), Start::Now);
        admission.take("ops/am", now);
        assert_eq!(admission.decide("ops/am", none, 0, now), Start::Deferred(Limit::SourceRate));
        assert_eq!(admission.decide("ops/am", none, 1, now), Start::Deferred(Limit::SourceRate));
        assert_eq!(admission.decide("ops/am", none, 2, now), Start::Storm, "past alert_deferred_jobs");
        assert_eq!(Start::Storm.setting(), Some("alert_deferred_jobs"));
        assert_eq!(admission.decide("team/am", none, 0, now), Start::Now, "another source is not part of the storm");
    }

    #[test]
    fn the_pending_caps_defer_what_would_pass_them() {
        let limits = Limits { max_pending_jobs: 100, max_pending_per_namespace: 10, ..limits() };
        let mut admission = Admission::new(limits);
        let now = Instant::now();
        assert_eq!(admission.decide("ops/am", waiting(99, 9), 0, now), Start::Now);
        assert_eq!(admission.decide("ops/am", waiting(100, 0), 0, now), Start::Deferred(Limit::PendingJobs));
        let full = admission.decide("ops/am", waiting(50, 10), 0, now);
        assert_eq!(full, Start::Deferred(Limit::NamespacePendingJobs));
        assert_eq!(full.setting(), Some("alert_pending_jobs_per_namespace"));
        assert!(!admission.try_start("ops/am", waiting(100, 0), now));
        assert!(!admission.try_start("ops/am", waiting(50, 10), now));
        assert!(admission.try_start("ops/am", waiting(99, 9), now));
    }
}
