//! The scheduler's time: the system clock in production, a clock tests move by hand.

use std::time::Duration;

use futures_util::future::BoxFuture;
use jiff::Timestamp;

/// Longest the scheduler sleeps on the system clock before it looks at the time again (so a
/// clock that jumps, or a suspended host, is noticed).
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Where the scheduler reads the time and waits for it.
pub trait Clock: Send + Sync {
    /// The current time: the system clock's, or the time a test set on a `ManualClock`.
    fn now(&self) -> Timestamp;
    /// Resolves once the time is `at` or later (or earlier, spuriously: the caller looks again).
    fn sleep_until(&self, at: Timestamp) -> BoxFuture<'_, ()>;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep_until(&self, at: Timestamp) -> BoxFuture<'_, ()> {
        let wait = at.duration_since(Timestamp::now());
        let wait = Duration::try_from(wait).unwrap_or_default().min(MAX_SLEEP);
        Box::pin(tokio::time::sleep(wait))
    }
}

/// A clock that moves only when told (tests and benches).
#[derive(Debug)]
pub struct ManualClock {
    now: tokio::sync::watch::Sender<Timestamp>,
}

impl ManualClock {
    /// A clock standing at `at`.
    pub fn new(at: Timestamp) -> Self {
        ManualClock { now: tokio::sync::watch::Sender::new(at) }
    }

    /// Moves the clock to `at` (never backwards) and wakes whoever waits for it.
    pub fn set(&self, at: Timestamp) {
        self.now.send_if_modified(|now| {
            let later = at > *now;
            if later {
                *now = at;
            }
            later
        });
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let now = *self.now.borrow();
        self.set(now.checked_add(jiff::SignedDuration::try_from(by).unwrap_or_default()).unwrap_or(now));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep_until(&self, at: Timestamp) -> BoxFuture<'_, ()> {
        let mut watch = self.now.subscribe();
        Box::pin(async move {
            let _ = watch.wait_for(|now| *now >= at).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_wakes_sleepers_when_it_reaches_their_time() {
        let start: Timestamp = "2026-12-06T08:00:00Z".parse().unwrap();
        let clock = std::sync::Arc::new(ManualClock::new(start));
        let target = start.checked_add(jiff::SignedDuration::from_secs(60)).unwrap();
        let sleeper = {
            let clock = clock.clone();
            tokio::spawn(async move { clock.sleep_until(target).await })
        };
        clock.advance(Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!sleeper.is_finished(), "30 s is not 60 s");
        clock.advance(Duration::from_secs(30));
        tokio::time::timeout(Duration::from_secs(5), sleeper).await.unwrap().unwrap();
        clock.set(start);
        assert_eq!(clock.now(), target, "never backwards");
    }
}
