//! `kubernetes.recent_changes`: what changed in a namespace in a time window, from
//! creation times, `metadata.managedFields` times (who changed which part of the
//! spec or data, and how) and ReplicaSet creation (a Deployment's new revision).
//! Secrets are never read.

use std::fmt::Debug;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::Resource;
use kube::api::ListParams;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::api::{self, Ctx, Failure};
use super::objects::describe;

pub const NAME: &str = "kubernetes.recent_changes";

pub const DESCRIPTION: &str = "What changed in a namespace in the last `sinceMinutes` (default 60): Deployments, \
StatefulSets, DaemonSets, ReplicaSets, ConfigMaps, Services, Jobs, CronJobs and HorizontalPodAutoscalers created, \
whose spec (or ConfigMap data) was changed, with who changed it (the field manager, such as kubectl, helm or argocd) \
and when, the current images of changed workloads, and each new Deployment revision with its images. Use it to \
answer \"did a deploy or config change cause this?\": call it for the alert's namespace with a window that covers \
the time the problem started, then compare the change times with the alert's start. Status-only updates are not \
changes. Secrets are never read.";

/// Items asked for per kind.
const PAGE: u32 = 500;
/// The window when the call names none, and the longest one, in minutes.
const DEFAULT_MINUTES: u64 = 60;
const MAX_MINUTES: u64 = 10080;
/// Most images named in one change.
const MAX_IMAGES: usize = 8;

const REVISION: &str = "deployment.kubernetes.io/revision";

pub fn schema() -> Value {
    api::arguments_schema(
        &[],
        json!({
            "namespace": api::namespace_schema(),
            "sinceMinutes": {"type": "integer", "minimum": 1, "maximum": MAX_MINUTES,
                "description": "The window, in minutes before now; default 60."},
        }),
    )
}

/// One object as read for change detection.
#[derive(Clone, Debug)]
struct Observed {
    kind: &'static str,
    meta: ObjectMeta,
    /// Images of its pod template, for workload kinds.
    images: Vec<String>,
}

/// What kind of change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    Created,
    SpecChanged,
    DataChanged,
    NewRevision,
}

impl What {
    fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::SpecChanged => "spec_changed",
            Self::DataChanged => "data_changed",
            Self::NewRevision => "new_revision",
        }
    }
}

/// One change of one object.
#[derive(Clone, Debug, PartialEq)]
struct Change {
    time: Timestamp,
    kind: &'static str,
    name: String,
    what: What,
    manager: Option<String>,
    operation: Option<String>,
    detail: String,
    images: Vec<String>,
}

impl Change {
    fn to_json(&self) -> Value {
        let mut out = json!({
            "time": self.time.to_string(),
            "kind": self.kind,
            "name": self.name,
            "change": self.what.as_str(),
            "manager": self.manager,
            "operation": self.operation,
            "detail": self.detail,
        });
        if !self.images.is_empty() {
            out["images"] = json!(self.images);
        }
        out
    }
}

/// The fields an entry manages, as a map of `f:name` keys.
fn fields(entry: &ManagedFieldsEntry) -> Option<&Map<String, Value>> {
    entry.fields_v1.as_ref().and_then(|f| f.0.as_object())
}

/// The names under `f:<top>` of an entry (`replicas`, `template`), or `None` when it
/// manages nothing there.
fn touched(entry: &ManagedFieldsEntry, top: &str) -> Option<Vec<String>> {
    let under = fields(entry)?.get(&format!("f:{top}"))?;
    let names = under.as_object().map_or_else(Vec::new, |m| {
        m.keys().filter(|k| *k != ".").map(|k| k.strip_prefix("f:").unwrap_or(k).to_string()).collect()
    });
    Some(names)
}

/// Entries of what was written to the object itself (or its scale), not to its status.
fn written(entry: &ManagedFieldsEntry) -> bool {
    matches!(entry.subresource.as_deref(), None | Some("") | Some("scale"))
}

fn owner(meta: &ObjectMeta) -> Option<(String, String)> {
    let owners = meta.owner_references.as_ref()?;
    let owner = owners.iter().find(|o| o.controller == Some(true)).or_else(|| owners.first())?;
    Some((owner.kind.clone(), owner.name.clone()))
}

/// Most field or key names in one detail.
const MAX_NAMED: usize = 20;

fn names_text(names: &[String]) -> String {
    match names.get(MAX_NAMED..) {
        Some(rest) if !rest.is_empty() => format!("{}, and {} more", names[..MAX_NAMED].join(", "), rest.len()),
        _ => names.join(", "),
    }
}

fn images_text(images: &[String]) -> String {
    if images.is_empty() { "no image".to_string() } else { images.join(", ") }
}

/// The changes of `object` at or after `since`, oldest first.
fn changes_of(object: &Observed, since: Timestamp) -> Vec<Change> {
    let meta = &object.meta;
    let name = meta.name.clone().unwrap_or_default();
    let entries: Vec<&ManagedFieldsEntry> =
        meta.managed_fields.iter().flatten().filter(|e| written(e) && e.time.is_some()).collect();
    let created = meta.creation_timestamp.as_ref().map(|t| t.0);
    let mut changes = Vec::new();
    let workload_images = |what: What| match object.kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "CronJob" => object.images.clone(),
        "ReplicaSet" if what == What::NewRevision => object.images.clone(),
        _ => Vec::new(),
    };

    if let Some(created) = created.filter(|c| *c >= since) {
        // The creator is the earliest writer.
        let creator = entries.iter().min_by_key(|e| e.time.as_ref().map(|t| t.0));
        let revision = meta.annotations.as_ref().and_then(|a| a.get(REVISION));
        let (what, detail) = match (object.kind, owner(meta), revision) {
            ("ReplicaSet", Some((kind, deployment)), Some(revision)) if kind == "Deployment" => (
                What::NewRevision,
                format!(
                    "new revision {revision} of Deployment {deployment} with image(s) {}",
                    images_text(&object.images)
                ),
            ),
            (_, Some((kind, owner)), _) => (What::Created, format!("created by {kind} {owner}")),
            _ => (What::Created, "created".to_string()),
        };
        changes.push(Change {
            time: created,
            kind: object.kind,
            name: name.clone(),
            what,
            manager: creator.and_then(|e| e.manager.clone()),
            operation: creator.and_then(|e| e.operation.clone()),
            detail,
            images: workload_images(what),
        });
    }

    // A ReplicaSet of a Deployment is scaled by the Deployment's controller; its
    // Deployment's change and its creation are what matter.
    let scaled_by_owner = object.kind == "ReplicaSet" && owner(meta).is_some_and(|(kind, _)| kind == "Deployment");
    for entry in entries {
        let Some(time) = entry.time.as_ref().map(|t| t.0) else { continue };
        // An entry no newer than the creation is the creation itself.
        if time < since || created.is_some_and(|c| time <= c) || scaled_by_owner {
            continue;
        }
        let (what, parts) = if object.kind == "ConfigMap" {
            let data: Vec<Vec<String>> = ["data", "binaryData"].iter().filter_map(|top| touched(entry, top)).collect();
            if data.is_empty() {
                continue;
            }
            (What::DataChanged, data.concat())
        } else {
            match touched(entry, "spec") {
                Some(parts) => (What::SpecChanged, parts),
                None => continue,
            }
        };
        let manager = entry.manager.clone().unwrap_or_else(|| "unknown".into());
        let mut detail = match what {
            What::DataChanged => format!("keys managed by {manager}: {}", names_text(&parts)),
            _ => format!("spec fields managed by {manager}: {}", names_text(&parts)),
        };
        if entry.subresource.as_deref() == Some("scale") {
            detail.push_str(" (through the scale subresource)");
        }
        if let Some(generation) = meta.generation.filter(|_| what == What::SpecChanged) {
            detail.push_str(&format!("; generation now {generation}"));
        }
        changes.push(Change {
            time,
            kind: object.kind,
            name: name.clone(),
            what,
            manager: Some(manager),
            operation: entry.operation.clone(),
            detail,
            images: workload_images(what),
        });
    }
    changes
}

/// Every change at or after `since`, newest first.
fn newest_first(objects: &[Observed], since: Timestamp) -> Vec<Change> {
    let mut changes: Vec<Change> = objects.iter().flat_map(|o| changes_of(o, since)).collect();
    changes.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| (a.kind, &a.name).cmp(&(b.kind, &b.name))));
    changes
}

/// What one kind's list gave.
struct Listed {
    kind: &'static str,
    objects: Vec<Observed>,
    more: bool,
}

fn template_images(template: Option<&PodTemplateSpec>) -> Vec<String> {
    template
        .and_then(|t| t.spec.as_ref())
        .map(|spec| spec.containers.iter().filter_map(|c| c.image.clone()).take(MAX_IMAGES).collect())
        .unwrap_or_default()
}

/// The objects of `K`: whole when `images` reads their pod template, else metadata
/// only (so ConfigMap data is never loaded).
async fn list<K>(ctx: &Ctx, namespace: &str, images: Option<fn(&K) -> Vec<String>>) -> Result<Listed, Failure>
where
    K: Resource<Scope = NamespaceResourceScope> + k8s_openapi::Resource + Clone + DeserializeOwned + Debug,
    <K as Resource>::DynamicType: Default,
{
    let (objects, _) = ctx.namespaced::<K>(Some(namespace))?;
    let kind = <K as k8s_openapi::Resource>::KIND;
    let what = describe("list", <K as k8s_openapi::Resource>::URL_PATH_SEGMENT, None, Some(namespace));
    let params = ListParams::default().limit(PAGE);
    let (observed, token) = match images {
        Some(images) => {
            let list = objects.list(&params).await.map_err(|e| Failure::from_kube(e, &what))?;
            let observed =
                list.items.iter().map(|o| Observed { kind, meta: o.meta().clone(), images: images(o) }).collect();
            (observed, list.metadata.continue_)
        }
        None => {
            let list = objects.list_metadata(&params).await.map_err(|e| Failure::from_kube(e, &what))?;
            let observed =
                list.items.into_iter().map(|o| Observed { kind, meta: o.metadata, images: Vec::new() }).collect();
            (observed, list.metadata.continue_)
        }
    };
    Ok(Listed { kind, objects: observed, more: token.is_some_and(|t| !t.is_empty()) })
}

/// The kinds read, by name.
const KINDS: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "ConfigMap",
    "Service",
    "Job",
    "CronJob",
    "HorizontalPodAutoscaler",
];

/// `kubernetes.recent_changes`.
pub async fn recent_changes(ctx: Ctx, args: Value) -> Result<Value, Failure> {
    let minutes = api::number(&args, "sinceMinutes").unwrap_or(DEFAULT_MINUTES).clamp(1, MAX_MINUTES);
    let since = Timestamp::now() - SignedDuration::from_mins(minutes as i64);
    let namespace = ctx.access.namespace(api::text(&args, "namespace"))?;
    let ns = namespace.as_str();
    let c = &ctx;
    let read = tokio::join!(
        list::<Deployment>(c, ns, Some(|d| template_images(d.spec.as_ref().map(|s| &s.template)))),
        list::<StatefulSet>(c, ns, Some(|s| template_images(s.spec.as_ref().map(|s| &s.template)))),
        list::<DaemonSet>(c, ns, Some(|d| template_images(d.spec.as_ref().map(|s| &s.template)))),
        list::<ReplicaSet>(c, ns, Some(|r| template_images(r.spec.as_ref().and_then(|s| s.template.as_ref())))),
        list::<ConfigMap>(c, ns, None),
        list::<Service>(c, ns, None),
        list::<Job>(c, ns, Some(|j| template_images(j.spec.as_ref().map(|s| &s.template)))),
        list::<CronJob>(
            c,
            ns,
            Some(|j| {
                template_images(j.spec.as_ref().and_then(|s| s.job_template.spec.as_ref()).map(|s| &s.template))
            })
        ),
        list::<HorizontalPodAutoscaler>(c, ns, None),
    );
    let results = [read.0, read.1, read.2, read.3, read.4, read.5, read.6, read.7, read.8];

    let mut notes = Vec::new();
    let mut failures = Vec::new();
    let mut examined = Map::new();
    let mut objects = Vec::new();
    for (kind, result) in KINDS.iter().zip(results) {
        match result {
            Ok(listed) => {
                examined.insert(listed.kind.to_string(), json!(listed.objects.len()));
                if listed.more {
                    notes.push(format!("more than {PAGE} {kind}s: only the first {PAGE} were examined"));
                }
                objects.extend(listed.objects);
            }
            Err(failure) => {
                notes.push(format!("{kind}s skipped: {}", failure.message()));
                failures.push(failure.message().to_string());
            }
        }
    }
    if failures.len() == KINDS.len() {
        return Err(Failure::new(format!("no kind could be listed: {}", failures.join("; "))));
    }
    let changes = newest_first(&objects, since);
    let omitted = changes.len().saturating_sub(ctx.limits.max_entries);
    let shown: Vec<Value> = changes.iter().take(ctx.limits.max_entries).map(Change::to_json).collect();
    let mut out = json!({
        "namespace": namespace,
        "since": since.to_string(),
        "window_minutes": minutes,
        "examined": examined,
        "changes": shown,
        "omitted": omitted,
    });
    if changes.is_empty() {
        notes.push(format!(
            "nothing was created or changed in the last {minutes} minutes (a change older than the newest write of \
             the same field manager is not visible; Pods and Secrets are not examined)"
        ));
    }
    if !notes.is_empty() {
        out["notes"] = json!(notes);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn observed(kind: &'static str, meta: Value, images: &[&str]) -> Observed {
        Observed {
            kind,
            meta: serde_json::from_value(meta).unwrap(),
            images: images.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn deployment() -> Observed {
        observed(
            "Deployment",
            json!({
                "name": "web", "generation": 3, "creationTimestamp": "2026-01-01T08:00:00Z",
                "managedFields": [
                    {"manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
                     "time": "2026-01-01T08:00:00Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:replicas": {}, "f:selector": {}}}},
                    {"manager": "deploy-bot", "operation": "Apply", "apiVersion": "apps/v1",
                     "time": "2026-01-01T10:02:00Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {}}}}}},
                    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
                     "time": "2026-01-01T10:03:00Z", "fieldsType": "FieldsV1", "subresource": "status",
                     "fieldsV1": {"f:status": {"f:replicas": {}}}},
                    {"manager": "labeler", "operation": "Update", "apiVersion": "apps/v1",
                     "time": "2026-01-01T10:04:00Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}}
                ]
            }),
            &["shop/web:2.0"],
        )
    }

    #[test]
    fn a_spec_change_in_the_window_names_its_manager_and_images() {
        let changes = changes_of(&deployment(), at("2026-01-01T10:00:00Z"));
        assert_eq!(changes.len(), 1, "{changes:#?}");
        let change = &changes[0];
        assert_eq!(change.what, What::SpecChanged);
        assert_eq!(change.time, at("2026-01-01T10:02:00Z"));
        assert_eq!(change.manager.as_deref(), Some("deploy-bot"));
        assert_eq!(change.operation.as_deref(), Some("Apply"));
        assert_eq!(change.detail, "spec fields managed by deploy-bot: template; generation now 3");
        assert_eq!(change.images, ["shop/web:2.0"]);
    }

    #[test]
    fn the_window_excludes_older_writes_and_status_or_metadata_only_ones() {
        assert!(changes_of(&deployment(), at("2026-01-01T10:02:01Z")).is_empty());
        // A window covering the creation reports it once, not also as the creator's spec write.
        let all = changes_of(&deployment(), at("2026-01-01T07:00:00Z"));
        let whats: Vec<(What, Option<&str>)> = all.iter().map(|c| (c.what, c.manager.as_deref())).collect();
        assert_eq!(whats, [(What::Created, Some("kubectl-create")), (What::SpecChanged, Some("deploy-bot"))]);
    }

    #[test]
    fn a_config_map_data_change_names_the_keys() {
        let config = observed(
            "ConfigMap",
            json!({
                "name": "web-config", "creationTimestamp": "2026-01-01T08:00:00Z",
                "managedFields": [
                    {"manager": "kubectl-edit", "operation": "Update", "time": "2026-01-01T10:05:00Z",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}, "f:LOG_LEVEL": {}}}},
                    {"manager": "annotator", "operation": "Update", "time": "2026-01-01T10:06:00Z",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {}}}}
                ]
            }),
            &[],
        );
        let changes = changes_of(&config, at("2026-01-01T10:00:00Z"));
        assert_eq!(changes.len(), 1, "{changes:#?}");
        assert_eq!(changes[0].what, What::DataChanged);
        assert_eq!(changes[0].detail, "keys managed by kubectl-edit: LOG_LEVEL");
        assert!(changes[0].images.is_empty());
        let many: Vec<String> = (0..25).map(|i| format!("k{i}")).collect();
        assert!(names_text(&many).ends_with("k19, and 5 more"), "{}", names_text(&many));
    }

    #[test]
    fn a_new_replica_set_is_a_new_revision_of_its_deployment() {
        let replica_set = observed(
            "ReplicaSet",
            json!({
                "name": "web-7c9d", "creationTimestamp": "2026-01-01T10:02:01Z",
                "annotations": {"deployment.kubernetes.io/revision": "4"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u",
                    "controller": true}],
                "managedFields": [
                    {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-01-01T10:02:01Z",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                    {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-01-01T10:09:00Z",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}
                ]
            }),
            &["shop/web:2.0", "envoy:1.30"],
        );
        let changes = changes_of(&replica_set, at("2026-01-01T10:00:00Z"));
        assert_eq!(changes.len(), 1, "scaling by the Deployment is not a change: {changes:#?}");
        assert_eq!(changes[0].what, What::NewRevision);
        assert_eq!(changes[0].detail, "new revision 4 of Deployment web with image(s) shop/web:2.0, envoy:1.30");
        assert_eq!(changes[0].manager.as_deref(), Some("kube-controller-manager"));
    }

    #[test]
    fn changes_are_newest_first() {
        let job = observed(
            "Job",
            json!({"name": "backup-1", "creationTimestamp": "2026-01-01T10:30:00Z",
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "backup", "uid": "u"}]}),
            &["backup:1"],
        );
        let changes = newest_first(&[deployment(), job], at("2026-01-01T10:00:00Z"));
        let order: Vec<(&str, &str)> = changes.iter().map(|c| (c.kind, c.detail.as_str())).collect();
        assert_eq!(
            order,
            [
                ("Job", "created by CronJob backup"),
                ("Deployment", "spec fields managed by deploy-bot: template; generation now 3")
            ]
        );
        assert_eq!(changes[0].to_json()["change"], "created");
    }

    #[test]
    fn a_scale_write_counts_and_says_how() {
        let scaled = observed(
            "StatefulSet",
            json!({"name": "db", "creationTimestamp": "2026-01-01T08:00:00Z",
                "managedFields": [{"manager": "kubectl", "operation": "Update", "subresource": "scale",
                    "time": "2026-01-01T10:01:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}}}}]}),
            &[],
        );
        let changes = changes_of(&scaled, at("2026-01-01T10:00:00Z"));
        assert_eq!(changes[0].detail, "spec fields managed by kubectl: replicas (through the scale subresource)");
    }
}
