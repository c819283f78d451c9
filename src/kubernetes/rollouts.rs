//! `kubernetes.rollout_history`: the revisions of a Deployment (its ReplicaSets),
//! StatefulSet or DaemonSet (their ControllerRevisions) with images and
//! change-cause, newest first, and the state of the current rollout worded as
//! `kubectl rollout status` words it.

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::api::{self, Ctx, Failure};
use super::objects;
use super::pods::{fit, time};
use crate::text::{ELLIPSIS, truncate_bytes};

pub const ROLLOUT_HISTORY: &str = "kubernetes.rollout_history";

pub const ROLLOUT_HISTORY_DESCRIPTION: &str = "Did a deploy cause this, and is the rollout done? Use when a \
workload misbehaves after a change, a rollout seems stuck (KubeDeploymentReplicasMismatch, \
KubeDeploymentRolloutStuck, KubeStatefulSetUpdateNotRolledOut, KubeDaemonSetRolloutStuck), or to find which \
image a revision ran. Returns the revisions of a Deployment (from its ReplicaSets), StatefulSet or DaemonSet \
(from its ControllerRevisions), newest first, each with revision number, images, change-cause, creation time and \
(for Deployments) replicas and ready; plus the current rollout: generation vs observedGeneration, \
desired/updated/ready/available/unavailable replicas, conditions (Progressing, Available with reason, message \
and times), the update strategy, and `rollout`: complete, in progress (how many updated) or stalled \
(ProgressDeadlineExceeded).";

const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";
const DEPLOYMENT_REVISION: &str = "deployment.kubernetes.io/revision";
/// Objects listed per page, and most pages read, when looking for revisions.
const PAGE: u32 = 500;
const MAX_PAGES: usize = 4;
/// Most images listed per revision.
const MAX_IMAGES: usize = 20;
const MESSAGE_BYTES: usize = 512;
/// Most conditions listed (workloads have two or three).
const MAX_CONDITIONS: usize = 10;

pub fn schema() -> Value {
    api::arguments_schema(
        &["kind", "name"],
        json!({
            "kind": {"type": "string", "enum": ["Deployment", "StatefulSet", "DaemonSet"]},
            "name": api::name_schema("Name of the Deployment, StatefulSet or DaemonSet."),
            "namespace": api::namespace_schema(),
        }),
    )
}

/// `kubernetes.rollout_history`.
pub async fn rollout_history(ctx: Ctx, args: Value) -> Result<Value, Failure> {
    let name = api::text(&args, "name").unwrap_or_default();
    let namespace = api::text(&args, "namespace");
    let max = ctx.limits.max_entries;
    match api::text(&args, "kind").unwrap_or_default() {
        "Deployment" => {
            let (deployments, ns) = ctx.namespaced::<Deployment>(namespace)?;
            let what = objects::describe("get", "deployments", Some(name), Some(&ns));
            let deployment = deployments.get(name).await.map_err(|e| Failure::from_kube(e, &what))?;
            let (sets, _) = ctx.namespaced::<ReplicaSet>(Some(&ns))?;
            let selector = deployment.spec.as_ref().map(|s| &s.selector);
            let sets = owned(&sets, &deployment.metadata, selector, "replicasets", &ns).await?;
            let mut out = deployment_rollout(&deployment);
            add_revisions(&mut out, replica_set_revisions(&deployment, &sets), max);
            fit(&mut out, "revisions", "revisions_omitted", ctx.limits.output_bytes);
            Ok(out)
        }
        "StatefulSet" => {
            let (sets, ns) = ctx.namespaced::<StatefulSet>(namespace)?;
            let what = objects::describe("get", "statefulsets", Some(name), Some(&ns));
            let set = sets.get(name).await.map_err(|e| Failure::from_kube(e, &what))?;
            let selector = set.spec.as_ref().map(|s| &s.selector);
            let (history, _) = ctx.namespaced::<ControllerRevision>(Some(&ns))?;
            let history = owned(&history, &set.metadata, selector, "controllerrevisions", &ns).await?;
            let status = set.status.clone().unwrap_or_default();
            let mut out = stateful_set_rollout(&set);
            let marks = [(status.update_revision, "update"), (status.current_revision, "current")];
            add_revisions(&mut out, controller_revisions(&history, &marks), max);
            fit(&mut out, "revisions", "revisions_omitted", ctx.limits.output_bytes);
            Ok(out)
        }
        "DaemonSet" => {
            let (sets, ns) = ctx.namespaced::<DaemonSet>(namespace)?;
            let what = objects::describe("get", "daemonsets", Some(name), Some(&ns));
            let set = sets.get(name).await.map_err(|e| Failure::from_kube(e, &what))?;
            let selector = set.spec.as_ref().map(|s| &s.selector);
            let (history, _) = ctx.namespaced::<ControllerRevision>(Some(&ns))?;
            let history = owned(&history, &set.metadata, selector, "controllerrevisions", &ns).await?;
            let mut out = daemon_set_rollout(&set);
            add_revisions(&mut out, controller_revisions(&history, &[]), max);
            fit(&mut out, "revisions", "revisions_omitted", ctx.limits.output_bytes);
            Ok(out)
        }
        other => Err(Failure::new(format!(
            "kind {other:?} has no rollout history; use Deployment, StatefulSet or DaemonSet"
        ))),
    }
}

/// The objects of `api` owned by `owner` (by uid), narrowed by the owner's
/// `matchLabels`; at most [`MAX_PAGES`] pages are read.
async fn owned<K>(
    api: &Api<K>,
    owner: &ObjectMeta,
    selector: Option<&LabelSelector>,
    plural: &str,
    namespace: &str,
) -> Result<Vec<K>, Failure>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    let labels: Vec<String> =
        selector.and_then(|s| s.match_labels.as_ref()).into_iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    if !labels.is_empty() {
        params = params.labels(&labels.join(","));
    }
    let uid = owner.uid.as_deref().unwrap_or_default();
    let what = objects::describe("list", plural, None, Some(namespace));
    let mut found = Vec::new();
    for _ in 0..MAX_PAGES {
        let page = api.list(&params).await.map_err(|e| Failure::from_kube(e, &what))?;
        found.extend(page.items.into_iter().filter(|item| {
            item.meta().owner_references.iter().flatten().any(|r| r.uid == uid && r.controller == Some(true))
        }));
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(found)
}

/// One revision, before sorting and capping.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    pub revision: i64,
    pub created: Option<Time>,
    pub entry: Value,
}

/// Sorts newest first, keeps at most `max` and counts the rest.
fn add_revisions(out: &mut Value, mut revisions: Vec<Revision>, max: usize) {
    revisions.sort_by(|a, b| b.revision.cmp(&a.revision).then_with(|| b.created.cmp(&a.created)));
    let total = revisions.len();
    let kept: Vec<Value> = revisions.into_iter().take(max).map(|r| r.entry).collect();
    if total > kept.len() {
        out["revisions_omitted"] = json!(total - kept.len());
    }
    out["revisions"] = Value::Array(kept);
}

fn change_cause(meta: &ObjectMeta) -> Option<String> {
    meta.annotations.as_ref().and_then(|a| a.get(CHANGE_CAUSE)).map(|c| truncate_bytes(c, MESSAGE_BYTES, ELLIPSIS))
}

fn template_images(template: Option<&PodTemplateSpec>) -> Vec<String> {
    template
        .and_then(|t| t.spec.as_ref())
        .map(|s| s.containers.iter().take(MAX_IMAGES).filter_map(|c| c.image.clone()).collect())
        .unwrap_or_default()
}

/// A Deployment's revisions from its ReplicaSets; the one at the Deployment's
/// revision is marked current.
pub fn replica_set_revisions(deployment: &Deployment, sets: &[ReplicaSet]) -> Vec<Revision> {
    let current = revision_annotation(&deployment.metadata);
    sets.iter()
        .map(|set| {
            let revision = revision_annotation(&set.metadata).unwrap_or(0);
            let status = set.status.clone().unwrap_or_default();
            let mut entry = json!({
                "revision": revision,
                "name": set.metadata.name,
                "created": set.metadata.creation_timestamp.as_ref().map(time),
                "images": template_images(set.spec.as_ref().and_then(|s| s.template.as_ref())),
                "replicas": status.replicas,
                "ready": status.ready_replicas.unwrap_or(0),
            });
            if let Some(cause) = change_cause(&set.metadata) {
                entry["change_cause"] = json!(cause);
            }
            if current == Some(revision) {
                entry["current"] = json!(true);
            }
            Revision { revision, created: set.metadata.creation_timestamp.clone(), entry }
        })
        .collect()
}

fn revision_annotation(meta: &ObjectMeta) -> Option<i64> {
    meta.annotations.as_ref().and_then(|a| a.get(DEPLOYMENT_REVISION)).and_then(|r| r.trim().parse().ok())
}

/// ControllerRevisions as revisions; `marks` names revisions by object name
/// (`update`, `current` for a StatefulSet).
pub fn controller_revisions(history: &[ControllerRevision], marks: &[(Option<String>, &str)]) -> Vec<Revision> {
    history
        .iter()
        .map(|revision| {
            let data = revision.data.as_ref().map(|d| &d.0);
            let images: Vec<Value> = data
                .and_then(|d| d.pointer("/spec/template/spec/containers"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("image").cloned())
                .take(MAX_IMAGES)
                .collect();
            let mut entry = json!({
                "revision": revision.revision,
                "name": revision.metadata.name,
                "created": revision.metadata.creation_timestamp.as_ref().map(time),
                "images": images,
            });
            if let Some(cause) = change_cause(&revision.metadata) {
                entry["change_cause"] = json!(cause);
            }
            for (name, mark) in marks {
                if name.is_some() && *name == revision.metadata.name {
                    entry[*mark] = json!(true);
                }
            }
            Revision { revision: revision.revision, created: revision.metadata.creation_timestamp.clone(), entry }
        })
        .collect()
}

/// `{type, status, reason, message, lastUpdateTime, lastTransitionTime}` of any
/// workload condition.
fn conditions_json<C: serde::Serialize>(conditions: Option<&Vec<C>>) -> Value {
    let list = conditions.into_iter().flatten().take(MAX_CONDITIONS).filter_map(|c| serde_json::to_value(c).ok()).map(
        |mut c| {
            if let Some(text) = c.get("message").and_then(Value::as_str) {
                c["message"] = json!(truncate_bytes(text, MESSAGE_BYTES, ELLIPSIS));
            }
            c
        },
    );
    Value::Array(list.collect())
}

/// The header every kind shares.
fn header(kind: &str, meta: &ObjectMeta, observed: Option<i64>, strategy: Value) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("kind".into(), json!(kind));
    out.insert("name".into(), json!(meta.name));
    out.insert("namespace".into(), json!(meta.namespace));
    out.insert("generation".into(), json!(meta.generation));
    out.insert("observedGeneration".into(), json!(observed));
    out.insert("strategy".into(), strategy);
    out
}

/// `waiting for the controller to observe generation 5 (observed 4)` when the
/// status is older than the spec.
fn unobserved(meta: &ObjectMeta, observed: Option<i64>) -> Option<String> {
    let generation = meta.generation.unwrap_or(0);
    let observed = observed.unwrap_or(0);
    (generation > observed || observed == 0).then(|| {
        format!("in progress: waiting for the controller to observe generation {generation} (observed {observed})")
    })
}

/// A Deployment's rollout, as `kubectl rollout status` judges it.
pub fn deployment_rollout(deployment: &Deployment) -> Value {
    let spec = deployment.spec.clone().unwrap_or_default();
    let status = deployment.status.clone().unwrap_or_default();
    let desired = spec.replicas.unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let current = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let progressing = status.conditions.iter().flatten().find(|c| c.type_ == "Progressing");
    let rollout = if let Some(waiting) = unobserved(&deployment.metadata, status.observed_generation) {
        waiting
    } else if let Some(c) = progressing.filter(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded")) {
        format!("stalled: ProgressDeadlineExceeded ({})", c.message.as_deref().map(str::trim).unwrap_or_default())
    } else if updated < desired {
        format!("in progress: {updated} of {desired} updated")
    } else if current > updated {
        format!("in progress: {} old replicas pending termination", current - updated)
    } else if available < updated {
        format!("in progress: {available} of {updated} updated replicas available")
    } else {
        "complete".to_string()
    };
    let rollout = if spec.paused == Some(true) { format!("paused; {rollout}") } else { rollout };
    let strategy = serde_json::to_value(&spec.strategy).unwrap_or(Value::Null);
    let mut out = header("Deployment", &deployment.metadata, status.observed_generation, strategy);
    out.insert("current_revision".into(), json!(revision_annotation(&deployment.metadata)));
    out.insert("rollout".into(), json!(truncate_bytes(&rollout, MESSAGE_BYTES, ELLIPSIS)));
    out.insert(
        "replicas".into(),
        json!({"desired": desired, "current": current, "updated": updated, "ready": status.ready_replicas.unwrap_or(0),
            "available": available, "unavailable": status.unavailable_replicas.unwrap_or(0)}),
    );
    out.insert("conditions".into(), conditions_json(status.conditions.as_ref()));
    Value::Object(out)
}

/// A StatefulSet's rollout, as `kubectl rollout status` judges it.
pub fn stateful_set_rollout(set: &StatefulSet) -> Value {
    let spec = set.spec.clone().unwrap_or_default();
    let status = set.status.clone().unwrap_or_default();
    let desired = spec.replicas.unwrap_or(1);
    let ready = status.ready_replicas.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let partition = strategy.rolling_update.as_ref().and_then(|r| r.partition).unwrap_or(0);
    let rollout = if strategy.type_.as_deref() == Some("OnDelete") {
        format!("OnDelete strategy: pods are replaced only when deleted; {updated} of {desired} updated")
    } else if let Some(waiting) = unobserved(&set.metadata, status.observed_generation) {
        waiting
    } else if ready < desired {
        format!("in progress: {ready} of {desired} ready")
    } else if partition > 0 {
        let target = (desired - partition).max(0);
        if updated < target {
            format!("in progress: {updated} of {target} updated (partition {partition})")
        } else {
            format!("complete: partitioned rollout, {updated} updated (partition {partition})")
        }
    } else if status.update_revision.is_some() && status.update_revision != status.current_revision {
        format!("in progress: {updated} of {desired} updated")
    } else {
        "complete".to_string()
    };
    let mut out = header("StatefulSet", &set.metadata, status.observed_generation, json!(strategy));
    out.insert("rollout".into(), json!(rollout));
    out.insert(
        "replicas".into(),
        json!({"desired": desired, "current": status.replicas, "updated": updated, "ready": ready,
            "available": status.available_replicas.unwrap_or(0)}),
    );
    out.insert("currentRevision".into(), json!(status.current_revision));
    out.insert("updateRevision".into(), json!(status.update_revision));
    out.insert("conditions".into(), conditions_json(status.conditions.as_ref()));
    Value::Object(out)
}

/// A DaemonSet's rollout, as `kubectl rollout status` judges it.
pub fn daemon_set_rollout(set: &DaemonSet) -> Value {
    let spec = set.spec.clone().unwrap_or_default();
    let status = set.status.clone().unwrap_or_default();
    let desired = status.desired_number_scheduled;
    let updated = status.updated_number_scheduled.unwrap_or(0);
    let available = status.number_available.unwrap_or(0);
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let rollout = if strategy.type_.as_deref() == Some("OnDelete") {
        format!("OnDelete strategy: pods are replaced only when deleted; {updated} of {desired} updated")
    } else if let Some(waiting) = unobserved(&set.metadata, status.observed_generation) {
        waiting
    } else if updated < desired {
        format!("in progress: {updated} of {desired} updated")
    } else if available < desired {
        format!("in progress: {available} of {desired} updated pods available")
    } else {
        "complete".to_string()
    };
    let mut out = header("DaemonSet", &set.metadata, status.observed_generation, json!(strategy));
    out.insert("rollout".into(), json!(rollout));
    out.insert(
        "replicas".into(),
        json!({"desired": desired, "current": status.current_number_scheduled, "updated": updated,
            "ready": status.number_ready, "available": available,
            "unavailable": status.number_unavailable.unwrap_or(0), "misscheduled": status.number_misscheduled}),
    );
    out.insert("conditions".into(), conditions_json(status.conditions.as_ref()));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(status: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "d-1", "generation": 3,
                "annotations": {"deployment.kubernetes.io/revision": "2"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "template": {"spec": {"containers": [{"name": "app", "image": "web:2"}]}}},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn a_deployment_rollout_is_worded_like_kubectl_rollout_status() {
        let done = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3});
        assert_eq!(deployment_rollout(&deployment(done))["rollout"], "complete");
        let rolling = json!({"observedGeneration": 3, "replicas": 4, "updatedReplicas": 1, "availableReplicas": 3});
        assert_eq!(deployment_rollout(&deployment(rolling))["rollout"], "in progress: 1 of 3 updated");
        let old = json!({"observedGeneration": 3, "replicas": 4, "updatedReplicas": 3, "availableReplicas": 3});
        assert_eq!(deployment_rollout(&deployment(old))["rollout"], "in progress: 1 old replicas pending termination");
        let unobserved = json!({"observedGeneration": 2});
        assert_eq!(
            deployment_rollout(&deployment(unobserved))["rollout"],
            "in progress: waiting for the controller to observe generation 3 (observed 2)"
        );
        let stalled = json!({"observedGeneration": 3, "replicas": 4, "updatedReplicas": 1, "conditions": [
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet \"web-2\" has timed out progressing.", "lastUpdateTime": "2026-11-30T10:00:00Z"},
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]});
        let out = deployment_rollout(&deployment(stalled));
        assert_eq!(
            out["rollout"],
            "stalled: ProgressDeadlineExceeded (ReplicaSet \"web-2\" has timed out progressing.)"
        );
        assert_eq!(out["conditions"][0]["lastUpdateTime"], "2026-11-30T10:00:00Z");
        assert_eq!(out["conditions"][1]["reason"], "MinimumReplicasAvailable");
        assert_eq!(out["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(out["replicas"]["updated"], 1);
        assert_eq!(out["current_revision"], 2);
    }

    fn replica_set(name: &str, revision: &str, image: &str, cause: Option<&str>, created: &str) -> ReplicaSet {
        let mut annotations = json!({"deployment.kubernetes.io/revision": revision});
        if let Some(cause) = cause {
            annotations[CHANGE_CAUSE] = json!(cause);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created, "annotations": annotations},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}},
            "status": {"replicas": 1, "readyReplicas": 0}
        }))
        .unwrap()
    }

    #[test]
    fn deployment_revisions_are_newest_first_with_images_and_change_cause() {
        let sets = [
            replica_set("web-1", "1", "web:1", None, "2026-11-30T09:00:00Z"),
            replica_set("web-10", "10", "web:10", Some("kubectl set image web:10"), "2026-11-30T11:00:00Z"),
            replica_set("web-2", "2", "web:2", Some("bump"), "2026-11-30T10:00:00Z"),
        ];
        let deployment = deployment(json!({}));
        let mut out = json!({});
        add_revisions(&mut out, replica_set_revisions(&deployment, &sets), 2);
        assert_eq!(
            out["revisions"],
            json!([
                {"revision": 10, "name": "web-10", "created": "2026-11-30T11:00:00Z", "images": ["web:10"],
                    "replicas": 1, "ready": 0, "change_cause": "kubectl set image web:10"},
                {"revision": 2, "name": "web-2", "created": "2026-11-30T10:00:00Z", "images": ["web:2"],
                    "replicas": 1, "ready": 0, "change_cause": "bump", "current": true},
            ])
        );
        assert_eq!(out["revisions_omitted"], 1);
    }

    #[test]
    fn controller_revisions_carry_images_and_marks() {
        let revision = |name: &str, number: i64, image: &str| -> ControllerRevision {
            serde_json::from_value(json!({
                "metadata": {"name": name, "annotations": {CHANGE_CAUSE: format!("to {image}")}},
                "revision": number,
                "data": {"spec": {"template": {"spec": {"containers": [{"name": "db", "image": image}]}, "$patch": "replace"}}}
            }))
            .unwrap()
        };
        let history = [revision("db-a", 1, "pg:15"), revision("db-b", 2, "pg:16")];
        let marks = [(Some("db-b".to_string()), "update"), (Some("db-a".to_string()), "current")];
        let mut out = json!({});
        add_revisions(&mut out, controller_revisions(&history, &marks), 50);
        assert_eq!(out["revisions"][0]["images"], json!(["pg:16"]));
        assert_eq!(out["revisions"][0]["update"], true);
        assert_eq!(out["revisions"][0]["change_cause"], "to pg:16");
        assert_eq!(out["revisions"][1]["current"], true);
        assert!(out.get("revisions_omitted").is_none());
    }

    #[test]
    fn stateful_and_daemon_set_rollouts_say_how_far_they_got() {
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "db", "generation": 2},
            "spec": {"replicas": 3, "selector": {}, "serviceName": "db", "template": {},
                "updateStrategy": {"type": "RollingUpdate"}},
            "status": {"observedGeneration": 2, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 1,
                "currentRevision": "db-a", "updateRevision": "db-b"}
        }))
        .unwrap();
        assert_eq!(stateful_set_rollout(&set)["rollout"], "in progress: 1 of 3 updated");
        let daemons: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "agent", "generation": 4},
            "spec": {"selector": {}, "template": {}},
            "status": {"observedGeneration": 4, "desiredNumberScheduled": 5, "currentNumberScheduled": 5,
                "numberMisscheduled": 0, "numberReady": 5, "updatedNumberScheduled": 5, "numberAvailable": 4}
        }))
        .unwrap();
        assert_eq!(daemon_set_rollout(&daemons)["rollout"], "in progress: 4 of 5 updated pods available");
    }
}
