//! Admission control of new investigations (every input bounded, ARCHITECTURE.md §5):
//! a token bucket per AlertSource (`alert_source_rate` new investigations per minute)
//! and a cap on waiting jobs (`alert_pending_jobs`). Only deliveries that would create
//! jobs are measured; duplicates, joins and resolutions always pass. A refused delivery
//! is refused whole, before anything is stored, with 503 and `Retry-After`: its retry
//! (Alertmanager retries 5xx answers by itself, never 429) is decided afresh and deduplicated like any other delivery. Pure: the caller
//! passes the clock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Wait advertised when the pending-job cap refuses a delivery.
const PENDING_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Admission limits, from the service settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// New investigations per AlertSource per minute (also the burst).
    pub source_rate_per_minute: u32,
    /// Jobs waiting for a worker, host-wide. One delivery always fits when none waits,
    /// so the bound is the larger of this and one delivery's events.
    pub max_pending_jobs: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { source_rate_per_minute: 60, max_pending_jobs: 1000 }
    }
}

impl Limits {
    /// From the service configuration.
    pub fn from_settings(settings: &crate::config::Settings) -> Self {
        Limits {
            source_rate_per_minute: settings.alert_source_rate.max(1),
            max_pending_jobs: settings.alert_pending_jobs.max(1) as usize,
        }
    }
}

/// Which limit refused a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// The source's rate of new investigations.
    Rate,
    /// The host's cap on waiting jobs.
    PendingJobs,
}

impl Refusal {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Rate => "rate",
            Refusal::PendingJobs => "pending_jobs",
        }
    }
}

/// A delivery refused by admission control (HTTP 503 with `Retry-After`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Throttled {
    /// Which limit.
    pub reason: Refusal,
    /// When a retry may pass.
    pub retry_after: Duration,
    message: String,
}

/// Token buckets per source (`namespace/name`) and the pending-job cap.
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

    /// Admits a delivery of `source` that would create `needed` jobs while `pending` wait,
    /// taking its tokens; or says which limit refuses it and when to retry. A delivery
    /// larger than the burst passes on a full bucket and leaves it in debt, so the average
    /// stays at the rate.
    pub fn admit(&mut self, source: &str, needed: usize, pending: usize, now: Instant) -> Result<(), Throttled> {
        if needed == 0 {
            return Ok(());
        }
        let max = self.limits.max_pending_jobs;
        if pending > 0 && pending.saturating_add(needed) > max {
            return Err(Throttled {
                reason: Refusal::PendingJobs,
                retry_after: PENDING_RETRY_AFTER,
                message: format!(
                    "{pending} investigation jobs are waiting and this delivery would add {needed} (at most {max}, \
                     setting alert-pending-jobs); nothing of it was stored; retry after {} s",
                    PENDING_RETRY_AFTER.as_secs()
                ),
            });
        }
        let rate = self.limits.source_rate_per_minute.max(1);
        let capacity = f64::from(rate);
        let per_second = capacity / 60.0;
        let bucket = self.buckets.entry(source.to_string()).or_insert(Bucket { tokens: capacity, at: now });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * per_second;
        bucket.tokens = (bucket.tokens + refill).min(capacity);
        bucket.at = now;
        let wanted = (needed as f64).min(capacity);
        if bucket.tokens < wanted {
            let seconds = ((wanted - bucket.tokens) / per_second).ceil().max(1.0);
            let retry_after = Duration::from_secs(seconds as u64);
            return Err(Throttled {
                reason: Refusal::Rate,
                retry_after,
                message: format!(
                    "alert source {source} may start at most {rate} investigations per minute (setting \
                     alert-source-rate) and this delivery would start {needed}; nothing of it was stored; retry \
                     after {} s",
                    retry_after.as_secs()
                ),
            });
        }
        bucket.tokens -= needed as f64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_gets_a_minute_of_burst_then_its_rate() {
        let mut admission = Admission::new(Limits { source_rate_per_minute: 60, max_pending_jobs: 10_000 });
        let start = Instant::now();
        for _ in 0..60 {
            admission.admit("ops/am", 1, 1, start).unwrap();
        }
        let refused = admission.admit("ops/am", 1, 1, start).unwrap_err();
        assert_eq!((refused.reason, refused.retry_after), (Refusal::Rate, Duration::from_secs(1)));
        admission.admit("team/am", 1, 1, start).expect("another source has its own bucket");
        admission.admit("ops/am", 0, 1, start).expect("a delivery without new jobs always passes");
        admission.admit("ops/am", 1, 1, start + Duration::from_secs(1)).expect("one token a second");
    }

    #[test]
    fn a_delivery_over_the_burst_passes_on_a_full_bucket_and_leaves_debt() {
        let mut admission = Admission::new(Limits { source_rate_per_minute: 60, max_pending_jobs: 10_000 });
        let start = Instant::now();
        admission.admit("ops/am", 128, 1, start).unwrap();
        let refused = admission.admit("ops/am", 1, 1, start + Duration::from_secs(60)).unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(9), "68 in debt after a minute's 60");
    }

    #[test]
    fn the_pending_cap_refuses_what_would_pass_it() {
        let mut admission = Admission::new(Limits { source_rate_per_minute: 100_000, max_pending_jobs: 100 });
        let now = Instant::now();
        admission.admit("ops/am", 10, 90, now).unwrap();
        let refused = admission.admit("ops/am", 11, 90, now).unwrap_err();
        assert_eq!(refused.reason, Refusal::PendingJobs);
        assert!(refused.to_string().contains("alert-pending-jobs"), "{refused}");
        admission.admit("ops/am", 128, 0, now).expect("one delivery fits when nothing waits");
    }
}
