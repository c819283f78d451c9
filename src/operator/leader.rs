//! Leader election with a `coordination.k8s.io/v1` Lease. Exactly one replica holds
//! the Lease; it alone opens the journals (which are also locked on disk), runs the
//! alert worker and writes statuses, Runs and Incidents. A standby replica waits and
//! takes the Lease over once the holder has not renewed it for its duration. A leader
//! that cannot renew in time stops (its process exits), so two writers never overlap.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

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

/// What one attempt concluded.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// This replica holds the Lease (acquired or renewed).
    Leading,
    /// Someone else holds a valid Lease.
    Following(String),
}

/// One attempt to acquire or renew. Conflicts (another replica wrote first) are
/// `Following`; API errors are returned.
pub async fn try_acquire(api: &Api<Lease>, settings: &LeaseSettings) -> kube::Result<Outcome> {
    let now = jiff::Timestamp::now();
    let seconds = i32::try_from(settings.duration.as_secs()).unwrap_or(i32::MAX).max(1);
    let existing = match api.get_opt(&settings.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(settings.name.clone()), ..ObjectMeta::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(settings.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
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
    let renewed = spec.renew_time.as_ref().map(|t| t.0).unwrap_or(jiff::Timestamp::MIN);
    let valid_for = jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(seconds)));
    let expired = renewed.checked_add(valid_for).map(|end| end < now).unwrap_or(true);
    if holder != settings.identity && !holder.is_empty() && !expired {
        return Ok(Outcome::Following(holder));
    }
    let mut lease = existing;
    let taking_over = holder != settings.identity;
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if taking_over {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(settings.identity.clone());
    spec.lease_duration_seconds = Some(seconds);
    spec.renew_time = Some(MicroTime(now));
    // `replace` carries the resourceVersion read above: a concurrent writer wins and we follow.
    match api.replace(&settings.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(Outcome::Leading),
        Err(kube::Error::Api(response)) if response.code == 409 => Ok(Outcome::Following(holder)),
        Err(error) => Err(error),
    }
}

/// Waits until this replica holds the Lease.
pub async fn acquire(client: &Client, settings: &LeaseSettings) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &settings.namespace);
    let retry = (settings.duration / 4).max(Duration::from_millis(200));
    let mut last_holder = None;
    loop {
        match try_acquire(&api, settings).await {
            Ok(Outcome::Leading) => {
                tracing::info!(lease = %settings.name, identity = %settings.identity, "leading: this replica owns the journals and the writers");
                return;
            }
            Ok(Outcome::Following(holder)) => {
                if last_holder.as_ref() != Some(&holder) {
                    tracing::info!(lease = %settings.name, %holder, "standby: another replica leads");
                    last_holder = Some(holder);
                }
            }
            Err(error) => tracing::warn!(lease = %settings.name, %error, "cannot read or write the Lease; retrying"),
        }
        tokio::time::sleep(retry).await;
    }
}

/// Renews the Lease until it cannot be renewed within its duration; then returns
/// (the caller stops every writer).
pub async fn keep(client: Client, settings: LeaseSettings) {
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let period = (settings.duration / 3).max(Duration::from_millis(200));
    let mut last_renewal = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(period).await;
        match try_acquire(&api, &settings).await {
            Ok(Outcome::Leading) => last_renewal = tokio::time::Instant::now(),
            Ok(Outcome::Following(holder)) => {
                tracing::error!(lease = %settings.name, %holder, "leadership lost to another replica");
                return;
            }
            Err(error) => tracing::warn!(lease = %settings.name, %error, "Lease not renewed; retrying"),
        }
        // Stop before a standby may take over (it waits for the full duration).
        if last_renewal.elapsed() + period >= settings.duration {
            tracing::error!(lease = %settings.name, "Lease not renewed in time; giving up leadership");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::mock::{Expect, client, status};
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

    fn lease(holder: &str, renewed: jiff::Timestamp, transitions: i32) -> serde_json::Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "akritas-leader", "namespace": "akritas-system", "resourceVersion": "7"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed.to_string(),
                        "acquireTime": renewed.to_string(), "leaseTransitions": transitions}})
    }

    fn expect(method: &'static str, code: u16, body: serde_json::Value) -> Expect {
        Expect { method, path: PATH.into(), status: code, body }
    }

    fn api(client: kube::Client) -> Api<Lease> {
        Api::namespaced(client, "akritas-system")
    }

    #[tokio::test]
    async fn a_missing_lease_is_created() {
        let now = jiff::Timestamp::now();
        let (client, server) =
            client(vec![expect("GET", 404, status(404, "NotFound")), expect("POST", 201, lease("pod-a", now, 0))]);
        assert_eq!(try_acquire(&api(client), &settings()).await.unwrap(), Outcome::Leading);
        let seen = server.await.unwrap();
        assert_eq!(seen[1].body["spec"]["holderIdentity"], "pod-a");
    }

    #[tokio::test]
    async fn a_valid_lease_of_another_replica_is_left_alone() {
        let (client, server) = client(vec![expect("GET", 200, lease("pod-b", jiff::Timestamp::now(), 3))]);
        assert_eq!(try_acquire(&api(client), &settings()).await.unwrap(), Outcome::Following("pod-b".into()));
        assert_eq!(server.await.unwrap().len(), 1, "no write");
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_with_its_resource_version() {
        let stale = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
        let (client, server) = client(vec![
            expect("GET", 200, lease("pod-b", stale, 3)),
            expect("PUT", 200, lease("pod-a", jiff::Timestamp::now(), 4)),
        ]);
        assert_eq!(try_acquire(&api(client), &settings()).await.unwrap(), Outcome::Leading);
        let put = &server.await.unwrap()[1].body;
        assert_eq!(put["metadata"]["resourceVersion"], "7", "optimistic concurrency on the read version");
        assert_eq!(
            (put["spec"]["holderIdentity"].as_str(), put["spec"]["leaseTransitions"].as_i64()),
            (Some("pod-a"), Some(4))
        );
    }

    #[tokio::test]
    async fn a_conflicting_takeover_follows_and_api_errors_are_returned() {
        let stale = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
        let (client, _server) = client(vec![
            expect("GET", 200, lease("pod-b", stale, 3)),
            expect("PUT", 409, status(409, "Conflict")),
            expect("GET", 500, status(500, "InternalError")),
        ]);
        let api = api(client);
        assert_eq!(try_acquire(&api, &settings()).await.unwrap(), Outcome::Following("pod-b".into()));
        assert!(try_acquire(&api, &settings()).await.is_err(), "a server error is not leadership");
    }
}
