//! Leader election with a `coordination.k8s.io/v1` Lease. Exactly one replica holds
//! the Lease; it alone opens the journals (which are also locked on disk), runs the
//! alert worker and writes statuses, Runs and Incidents.
//!
//! Fencing, on monotonic clocks only (as client-go does):
//! - a standby judges expiry by when *it* first observed a Lease record (holder,
//!   `renewTime`, `resourceVersion`): the Lease is expired once that observation is
//!   older than `leaseDurationSeconds` on the standby's own clock. `renewTime` is
//!   never compared with a wall clock, so clock skew between replicas is irrelevant;
//! - the holder knows its Lease valid until the *start* of its last successful
//!   renewal plus the duration. Every renewal is bounded by that instant minus a
//!   margin ([`LeaseSettings::deadline`]); when it passes, [`keep`] returns and the
//!   caller stops every writer. A standby's observation of that renewal happens
//!   after the renewal started, so it takes over only after the holder stopped.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// Lease name.
    pub name: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub duration: Duration,
}

impl LeaseSettings {
    /// How often the holder renews (four attempts fit in one duration).
    pub fn renew_period(&self) -> Duration {
        (self.duration / 4).max(Duration::from_millis(50))
    }

    /// When the holder stops writing if a renewal started at `valid_from` is the
    /// last that succeeded: the Lease is valid until `valid_from + duration`; a
    /// quarter of the duration is kept as margin for the stop itself.
    pub fn deadline(&self, valid_from: Instant) -> Instant {
        valid_from + self.duration - self.duration / 4
    }

    fn seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX).max(1)
    }
}

/// What one attempt concluded.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// This replica holds the Lease (acquired or renewed); valid for the duration
    /// from the start of the attempt.
    Leading,
    /// Someone else holds a Lease that is not expired by this replica's observation.
    Following(String),
}

/// The identity of one Lease record: a renewal changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: String,
    renew_time: Option<String>,
    resource_version: Option<String>,
}

/// When this replica first saw the current Lease record, on its monotonic clock.
#[derive(Debug, Default)]
pub struct Observer {
    last: Option<(Record, Instant)>,
}

impl Observer {
    /// Notes `lease` as seen at `now`; whether the record it shows has stayed the
    /// same for at least `duration` of this replica's time.
    pub fn expired(&mut self, lease: &Lease, duration: Duration, now: Instant) -> bool {
        let spec = lease.spec.clone().unwrap_or_default();
        let record = Record {
            holder: spec.holder_identity.unwrap_or_default(),
            renew_time: spec.renew_time.map(|t| t.0.to_string()),
            resource_version: lease.metadata.resource_version.clone(),
        };
        let seen_at = match &self.last {
            Some((last, seen_at)) if *last == record => *seen_at,
            _ => {
                self.last = Some((record, now));
                now
            }
        };
        now.saturating_duration_since(seen_at) >= duration
    }
}

/// One attempt, started at `now`, to acquire or renew. Conflicts (another replica
/// wrote first) are `Following`; API errors are returned.
pub async fn try_acquire(
    api: &Api<Lease>,
    settings: &LeaseSettings,
    observer: &mut Observer,
    now: Instant,
) -> kube::Result<Outcome> {
    let wall = jiff::Timestamp::now();
    let seconds = settings.seconds();
    let existing = match api.get_opt(&settings.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(settings.name.clone()), ..ObjectMeta::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(settings.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(wall)),
                    renew_time: Some(MicroTime(wall)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Outcome::Leading),
                Err(kube::Error::Api(response)) if response.code == 409 => Ok(Outcome::Following(String::new())),
                Err(error) => Err(error),
            };
        }
        Some(lease) => lease,
    };
    let spec = existing.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let valid_for =
        spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok()).map_or(settings.duration, Duration::from_secs);
    if holder != settings.identity && !holder.is_empty() && !observer.expired(&existing, valid_for, now) {
        return Ok(Outcome::Following(holder));
    }
    let mut lease = existing;
    let taking_over = holder != settings.identity;
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if taking_over {
        spec.acquire_time = Some(MicroTime(wall));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(settings.identity.clone());
    spec.lease_duration_seconds = Some(seconds);
    spec.renew_time = Some(MicroTime(wall));
    // `replace` carries the resourceVersion read above: a concurrent writer wins and we follow.
    match api.replace(&settings.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(Outcome::Leading),
        Err(kube::Error::Api(response)) if response.code == 409 => Ok(Outcome::Following(holder)),
        Err(error) => Err(error),
    }
}

/// Waits until this replica holds the Lease; returns the start of the attempt
/// that acquired it (the Lease is valid for its duration from then).
pub async fn acquire(client: &Client, settings: &LeaseSettings) -> Instant {
    let api: Api<Lease> = Api::namespaced(client.clone(), &settings.namespace);
    let retry = settings.renew_period();
    let mut observer = Observer::default();
    let mut last_holder = None;
    loop {
        let start = Instant::now();
        // An attempt that hangs is abandoned; a late success is harmless (the
        // Lease then looks renewed and we simply keep following it).
        let attempt = tokio::time::timeout(settings.duration, try_acquire(&api, settings, &mut observer, start));
        match attempt.await {
            Ok(Ok(Outcome::Leading)) => {
                tracing::info!(lease = %settings.name, identity = %settings.identity, "leading: this replica owns the journals and the writers");
                return start;
            }
            Ok(Ok(Outcome::Following(holder))) => {
                if last_holder.as_ref() != Some(&holder) {
                    tracing::info!(lease = %settings.name, %holder, "standby: another replica leads");
                    last_holder = Some(holder);
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %settings.name, %error, "cannot read or write the Lease; retrying")
            }
            Err(_) => tracing::warn!(lease = %settings.name, "the Lease request did not answer in time; retrying"),
        }
        tokio::time::sleep_until(start + retry).await;
    }
}

/// Why the holder stopped leading.
#[derive(Debug, PartialEq, Eq)]
pub enum Lost {
    /// Another replica holds the Lease.
    TakenOver(String),
    /// No renewal succeeded before the deadline of the last successful one.
    NotRenewed,
}

/// Renews the Lease acquired by an attempt that started at `valid_from`; returns
/// at the latest at the deadline of the last successful renewal (a renewal still
/// in flight then is abandoned). The caller must stop every writer at once.
pub async fn keep(client: Client, settings: LeaseSettings, mut valid_from: Instant) -> Lost {
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let period = settings.renew_period();
    let mut observer = Observer::default();
    let mut next = valid_from + period;
    loop {
        let deadline = settings.deadline(valid_from);
        tokio::time::sleep_until(next.min(deadline)).await;
        let start = Instant::now();
        if start >= deadline {
            tracing::error!(lease = %settings.name, "Lease not renewed in time; giving up leadership");
            return Lost::NotRenewed;
        }
        match tokio::time::timeout_at(deadline, try_acquire(&api, &settings, &mut observer, start)).await {
            Ok(Ok(Outcome::Leading)) => {
                valid_from = start;
                next = start + period;
            }
            Ok(Ok(Outcome::Following(holder))) => {
                tracing::error!(lease = %settings.name, %holder, "leadership lost to another replica");
                return Lost::TakenOver(holder);
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %settings.name, %error, "Lease not renewed; retrying");
                next = start + period / 2;
            }
            Err(_) => {
                tracing::error!(lease = %settings.name, "the Lease renewal did not finish before its deadline; giving up leadership");
                return Lost::NotRenewed;
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::mock::{Expect, api_server, client, status};
    use serde_json::json;

    const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/akritas-system/leases";

    fn settings() -> LeaseSettings {
        LeaseSettings {
            name: "akritas-leader".into(),
            namespace: "akritas-system".into(),
            identity: "pod-a".into(),
            duration: Duration::from_secs(15),
        }
    }

    fn lease_at(holder: &str, renewed: jiff::Timestamp, transitions: i32, version: &str) -> serde_json::Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "akritas-leader", "namespace": "akritas-system", "resourceVersion": version},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed.to_string(),
                        "acquireTime": renewed.to_string(), "leaseTransitions": transitions}})
    }

    fn lease(holder: &str, renewed: jiff::Timestamp, transitions: i32) -> serde_json::Value {
        lease_at(holder, renewed, transitions, "7")
    }

    fn expect(method: &'static str, code: u16, body: serde_json::Value) -> Expect {
        Expect { method, path: PATH.into(), status: code, body }
    }

    fn api(client: kube::Client) -> Api<Lease> {
        Api::namespaced(client, "akritas-system")
    }

    fn hours(n: i64) -> jiff::SignedDuration {
        jiff::SignedDuration::from_hours(n)
    }

    #[tokio::test]
    async fn a_missing_lease_is_created() {
        let now = jiff::Timestamp::now();
        let (client, server) =
            client(vec![expect("GET", 404, status(404, "NotFound")), expect("POST", 201, lease("pod-a", now, 0))]);
        let outcome = try_acquire(&api(client), &settings(), &mut Observer::default(), Instant::now()).await;
        assert_eq!(outcome.unwrap(), Outcome::Leading);
        let seen = server.await.unwrap();
        assert_eq!(seen[1].body["spec"]["holderIdentity"], "pod-a");
    }

    #[tokio::test]
    async fn a_valid_lease_of_another_replica_is_left_alone() {
        let (client, server) = client(vec![expect("GET", 200, lease("pod-b", jiff::Timestamp::now(), 3))]);
        let outcome = try_acquire(&api(client), &settings(), &mut Observer::default(), Instant::now()).await;
        assert_eq!(outcome.unwrap(), Outcome::Following("pod-b".into()));
        assert_eq!(server.await.unwrap().len(), 1, "no write");
    }

    #[tokio::test]
    async fn a_lease_renewed_long_ago_by_wall_clock_but_just_observed_is_not_expired() {
        // The holder's clock may be an hour behind ours: only our observation counts.
        let stale = jiff::Timestamp::now() - hours(1);
        let (client, server) = client(vec![expect("GET", 200, lease("pod-b", stale, 3))]);
        let outcome = try_acquire(&api(client), &settings(), &mut Observer::default(), Instant::now()).await;
        assert_eq!(outcome.unwrap(), Outcome::Following("pod-b".into()));
        assert_eq!(server.await.unwrap().len(), 1, "no takeover on first sight");
    }

    #[tokio::test]
    async fn a_lease_unchanged_for_its_duration_on_our_clock_is_taken_over_with_its_resource_version() {
        // renewTime far in the future (a holder clock ahead of ours) does not keep it alive either.
        let ahead = jiff::Timestamp::now() + hours(1);
        let (client, server) = client(vec![
            expect("GET", 200, lease("pod-b", ahead, 3)),
            expect("GET", 200, lease("pod-b", ahead, 3)),
            expect("GET", 200, lease("pod-b", ahead, 3)),
            expect("PUT", 200, lease("pod-a", jiff::Timestamp::now(), 4)),
        ]);
        let (api, mut observer, start) = (api(client), Observer::default(), Instant::now());
        let at = |d: Duration| start + d;
        for now in [at(Duration::ZERO), at(Duration::from_millis(14_999))] {
            let outcome = try_acquire(&api, &settings(), &mut observer, now).await.unwrap();
            assert_eq!(outcome, Outcome::Following("pod-b".into()), "still valid at {:?}", now - start);
        }
        let outcome = try_acquire(&api, &settings(), &mut observer, at(Duration::from_secs(15))).await.unwrap();
        assert_eq!(outcome, Outcome::Leading);
        let put = &server.await.unwrap()[3].body;
        assert_eq!(put["metadata"]["resourceVersion"], "7", "optimistic concurrency on the read version");
        assert_eq!(
            (put["spec"]["holderIdentity"].as_str(), put["spec"]["leaseTransitions"].as_i64()),
            (Some("pod-a"), Some(4))
        );
    }

    #[test]
    fn a_renewal_restarts_the_observation_whatever_its_renew_time_says() {
        let parse = |value| serde_json::from_value::<Lease>(value).unwrap();
        let start = Instant::now();
        let duration = Duration::from_secs(15);
        let mut observer = Observer::default();
        let old = jiff::Timestamp::now() - hours(2);
        assert!(!observer.expired(&parse(lease_at("pod-b", old, 3, "7")), duration, start));
        // A new resourceVersion with an even older renewTime is still a renewal we just saw.
        let renewed = parse(lease_at("pod-b", old - hours(1), 3, "8"));
        assert!(!observer.expired(&renewed, duration, start + Duration::from_secs(14)));
        assert!(!observer.expired(&renewed, duration, start + Duration::from_secs(28)));
        assert!(observer.expired(&renewed, duration, start + Duration::from_secs(29)));
    }

    #[tokio::test]
    async fn a_conflicting_takeover_follows_and_api_errors_are_returned() {
        let (client, _server) = client(vec![
            expect("GET", 200, lease("", jiff::Timestamp::now(), 3)),
            expect("PUT", 409, status(409, "Conflict")),
            expect("GET", 500, status(500, "InternalError")),
        ]);
        let (api, mut observer) = (api(client), Observer::default());
        let outcome = try_acquire(&api, &settings(), &mut observer, Instant::now()).await;
        assert_eq!(outcome.unwrap(), Outcome::Following(String::new()));
        assert!(
            try_acquire(&api, &settings(), &mut observer, Instant::now()).await.is_err(),
            "a server error is not leadership"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_renewal_ends_leadership_at_the_deadline_of_the_last_successful_renewal() {
        // The first renewal succeeds; every request after it never answers.
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        let (client, _server) = api_server(move |method, _| {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match (n, method) {
                (0, "GET") => Some((200, lease("pod-a", jiff::Timestamp::now(), 0))),
                (1, "PUT") => Some((200, lease("pod-a", jiff::Timestamp::now(), 0))),
                _ => None,
            }
        });
        let settings = settings();
        let acquired = Instant::now();
        let kept = tokio::time::timeout(Duration::from_secs(3600), keep(client, settings.clone(), acquired)).await;
        assert_eq!(kept, Ok(Lost::NotRenewed), "a hung renewal must not keep a leader alive");
        let renewed = acquired + settings.renew_period();
        assert_eq!(Instant::now(), settings.deadline(renewed), "stopped exactly at the deadline");
        assert!(Instant::now() < renewed + settings.duration, "before a standby may take over");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3, "one renewal, then one that hung");
    }

    #[tokio::test(start_paused = true)]
    async fn failed_renewals_are_retried_until_the_deadline_only() {
        let (client, _server) = api_server(|_, _| Some((500, status(500, "InternalError"))));
        let settings = settings();
        let acquired = Instant::now();
        assert_eq!(keep(client, settings.clone(), acquired).await, Lost::NotRenewed);
        assert_eq!(Instant::now(), settings.deadline(acquired));
    }
}
