//! Fair shares of a pool of slots (Runs, change previews): every holder takes one slot
//! of the pool; a holder of the shared class also takes one of the slots left after the
//! reserved ones, and one of its key's (namespace's) own cap. So alert investigations
//! always find the reserved slots free, and one namespace never holds more than its cap.
//! A refusal says which limit was reached and is counted in `/metrics`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Counts a request refused because a fair-share limit was full, for `/metrics`.
pub fn count_refusal(pool: &str, setting: &str, namespace: &str) {
    crate::telemetry::count(
        "akritas_refusals_total",
        "Requests refused because a fair-share limit was full, by pool, setting and namespace.",
        &[("pool", pool), ("setting", setting), ("namespace", namespace)],
        1.0,
    );
}

/// Per-key semaphores kept while idle before the map is pruned.
const IDLE_KEYS_KEPT: usize = 64;

/// Who asks for a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// May use every slot, the reserved ones included, without a per-key cap.
    Reserved,
    /// May use the unreserved slots, at most the per-key cap of them at once.
    Shared,
}

/// The limits of a pool.
#[derive(Clone, Debug)]
pub struct Limits {
    /// What the pool is, for messages and metrics (`runs`, `previews`).
    pub pool: &'static str,
    /// Slots in all, and the setting that sets them.
    pub total: (usize, &'static str),
    /// Slots only [`Class::Reserved`] may take, and their setting (at most `total - 1`).
    pub reserved: (usize, &'static str),
    /// Slots one key of [`Class::Shared`] may hold at once, and their setting.
    pub per_key: (usize, &'static str),
}

/// Why no slot was given: the limit that stayed full for the whole wait.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}; retry later (waited {waited:?})")]
pub struct Refused {
    /// The setting whose limit was reached.
    pub setting: &'static str,
    /// The slots that limit allows.
    pub slots: usize,
    /// How long the request waited.
    pub waited: Duration,
    message: String,
}

/// A held slot; dropping it frees it.
#[derive(Debug)]
pub struct Slot {
    _permits: Vec<OwnedSemaphorePermit>,
}

/// A pool of slots with a reserved part and a per-key cap.
#[derive(Debug)]
pub struct FairSlots {
    limits: Limits,
    total: Arc<Semaphore>,
    shared: Arc<Semaphore>,
    keys: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl FairSlots {
    /// A pool; the reserved part is cut to leave the shared class at least one slot.
    pub fn new(mut limits: Limits) -> Self {
        limits.total.0 = limits.total.0.max(1);
        limits.reserved.0 = limits.reserved.0.min(limits.total.0 - 1);
        limits.per_key.0 = limits.per_key.0.max(1);
        let total = Arc::new(Semaphore::new(limits.total.0));
        let shared = Arc::new(Semaphore::new(limits.total.0 - limits.reserved.0));
        Self { limits, total, shared, keys: Mutex::new(HashMap::new()) }
    }

    /// The limits in force (the reserved part as cut by [`FairSlots::new`]).
    #[cfg(test)]
    fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Waits up to `wait` for a slot for `key` of `class`.
    pub async fn acquire(&self, key: &str, class: Class, wait: Duration) -> Result<Slot, Refused> {
        /// Which limit a step takes a slot of; its message is built only on a refusal.
        enum Step {
            Key,
            Unreserved,
            Pool,
        }
        let steps: &[Step] = match class {
            Class::Reserved => &[Step::Pool],
            Class::Shared => &[Step::Key, Step::Unreserved, Step::Pool],
        };
        let (pool, unreserved) = (self.limits.pool, self.limits.total.0 - self.limits.reserved.0);
        let deadline = tokio::time::Instant::now() + wait;
        let mut permits = Vec::with_capacity(steps.len());
        for step in steps {
            let semaphore = match step {
                Step::Key => self.key_semaphore(key),
                Step::Unreserved => self.shared.clone(),
                Step::Pool => self.total.clone(),
            };
            let permit = match semaphore.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => tokio::time::timeout_at(deadline, semaphore.acquire_owned()).await.ok().and_then(Result::ok),
            };
            if let Some(permit) = permit {
                permits.push(permit);
                continue;
            }
            let (setting, slots, message) = match step {
                Step::Key => {
                    let (slots, setting) = self.limits.per_key;
                    (setting, slots, format!("namespace {key} already holds {slots} {pool} slots"))
                }
                Step::Unreserved => (
                    self.limits.reserved.1,
                    unreserved,
                    format!("all {unreserved} {pool} slots not reserved for alert investigations are busy"),
                ),
                Step::Pool => {
                    let (slots, setting) = self.limits.total;
                    (setting, slots, format!("all {slots} {pool} slots are busy"))
                }
            };
            count_refusal(pool, setting, key);
            return Err(Refused { setting, slots, waited: wait, message: format!("{message} ({setting})") });
        }
        Ok(Slot { _permits: permits })
    }

    /// The semaphore of `key`, created on first use; idle ones are dropped past a bound.
    fn key_semaphore(&self, key: &str) -> Arc<Semaphore> {
        let mut keys = self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(semaphore) = keys.get(key) {
            return semaphore.clone();
        }
        if keys.len() >= IDLE_KEYS_KEPT {
            // Held or awaited semaphores have other owners (a permit, a waiter's clone).
            keys.retain(|_, s| Arc::strong_count(s) > 1);
        }
        let semaphore = Arc::new(Semaphore::new(self.limits.per_key.0));
        keys.insert(key.to_string(), semaphore.clone());
        semaphore
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(total: usize, reserved: usize, per_key: usize) -> FairSlots {
        FairSlots::new(Limits {
            pool: "runs",
            total: (total, "max_concurrent_runs"),
            reserved: (reserved, "alert_reserved_runs"),
            per_key: (per_key, "max_runs_per_namespace"),
        })
    }

    const NOW: Duration = Duration::ZERO;

    #[tokio::test]
    async fn a_namespace_never_takes_more_than_its_cap_nor_the_reserved_slots() {
        let slots = pool(4, 1, 2);
        let a1 = slots.acquire("team-a", Class::Shared, NOW).await.unwrap();
        let _a2 = slots.acquire("team-a", Class::Shared, NOW).await.unwrap();
        let refused = slots.acquire("team-a", Class::Shared, NOW).await.unwrap_err();
        assert_eq!((refused.setting, refused.slots), ("max_runs_per_namespace", 2));
        assert!(refused.to_string().contains("namespace team-a"), "{refused}");
        let _b1 = slots.acquire("team-b", Class::Shared, NOW).await.unwrap();
        let refused = slots.acquire("team-b", Class::Shared, NOW).await.unwrap_err();
        assert_eq!(refused.setting, "alert_reserved_runs", "the last slot is kept for alerts");
        let alert = slots.acquire("team-b", Class::Reserved, NOW).await.unwrap();
        let refused = slots.acquire("ops", Class::Reserved, NOW).await.unwrap_err();
        assert_eq!((refused.setting, refused.slots), ("max_concurrent_runs", 4));
        drop(alert);
        drop(a1);
        let _b2 = slots.acquire("team-b", Class::Shared, Duration::from_millis(50)).await.unwrap();
    }

    #[tokio::test]
    async fn a_waiter_gets_the_slot_freed_during_its_wait() {
        let slots = Arc::new(pool(1, 0, 1));
        let held = slots.acquire("a", Class::Shared, NOW).await.unwrap();
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire("b", Class::Shared, Duration::from_secs(10)).await.is_ok() })
        };
        tokio::task::yield_now().await;
        drop(held);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn the_reservation_always_leaves_the_shared_class_a_slot_and_idle_keys_are_pruned() {
        let slots = pool(1, 5, 1);
        assert_eq!(slots.limits().reserved.0, 0);
        let one = slots.acquire("a", Class::Shared, NOW).await.unwrap();
        drop(one);
        for n in 0..(IDLE_KEYS_KEPT * 3) {
            drop(slots.acquire(&format!("ns-{n}"), Class::Shared, NOW).await.unwrap());
        }
        assert!(slots.keys.lock().unwrap().len() <= IDLE_KEYS_KEPT + 1);
    }

    #[tokio::test]
    async fn racing_holders_of_one_namespace_never_exceed_its_cap() {
        let slots = Arc::new(pool(16, 2, 3));
        let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..40 {
            let (slots, held, peak) = (slots.clone(), held.clone(), peak.clone());
            tasks.push(tokio::spawn(async move {
                let Ok(_slot) = slots.acquire("team-a", Class::Shared, Duration::from_secs(10)).await else {
                    return;
                };
                let now = held.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                peak.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                tokio::task::yield_now().await;
                held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
        assert!((1..=3).contains(&peak), "{peak} Runs of one namespace at once");
    }
}
