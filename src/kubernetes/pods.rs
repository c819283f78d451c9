//! `kubernetes.pod_status`: a Pod's phase, conditions and each container's state,
//! restarts and last termination, its resources, and the chain of controllers
//! that own it (Pod → ReplicaSet → Deployment, Pod → Job → CronJob, ...), with a
//! one-line summary a model can quote.

use k8s_openapi::api::core::v1::{Container, ContainerState, ContainerStatus, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use serde_json::{Map, Value, json};

use super::api::{self, Ctx, Failure};
use super::objects;
use crate::text::{ELLIPSIS, truncate_bytes};

pub const POD_STATUS: &str = "kubernetes.pod_status";

pub const POD_STATUS_DESCRIPTION: &str = "Why is this Pod not healthy? Use first for a crash-looping, pending, \
restarting, OOM-killed or not-ready Pod (alerts such as KubePodCrashLooping, KubePodNotReady, \
KubeContainerWaiting). Returns the phase, conditions, node, QoS class, and for every container (init containers \
marked) its image, ready/started, restart count, current state (running since, waiting reason and message, \
terminated reason/exit code/signal), last termination (reason such as OOMKilled or Error, exit code, signal, \
started and finished at), resource requests and limits, and the owner chain up to the top controller \
(ReplicaSet → Deployment, StatefulSet, DaemonSet, Job → CronJob). `summary` is a quotable one-line diagnosis. \
Env values are not returned. Follow up with kubernetes.logs (previous: true for the crashed run) and \
kubernetes.events.";

/// Most owner levels followed above the Pod.
const MAX_OWNER_DEPTH: usize = 4;
/// Most bytes of one message (condition, waiting or termination) in the output.
const MESSAGE_BYTES: usize = 512;
/// Most env variable names listed per container (their values never are).
const MAX_ENV_NAMES: usize = 30;
/// Most bytes of the summary.
const SUMMARY_BYTES: usize = 1024;

pub fn schema() -> Value {
    api::arguments_schema(
        &["name"],
        json!({
            "name": api::name_schema("Pod name."),
            "namespace": api::namespace_schema(),
        }),
    )
}

/// `kubernetes.pod_status`.
pub async fn pod_status(ctx: Ctx, args: Value) -> Result<Value, Failure> {
    let name = api::text(&args, "name").unwrap_or_default();
    let (pods, namespace) = ctx.namespaced::<Pod>(api::text(&args, "namespace"))?;
    let what = objects::describe("get", "pods", Some(name), Some(&namespace));
    let pod = pods.get(name).await.map_err(|e| Failure::from_kube(e, &what))?;
    let mut out = report(&pod, ctx.limits.max_entries);
    let links = owner_chain(&ctx, &namespace, pod.metadata.owner_references.as_deref().unwrap_or_default()).await;
    out["owner_chain"] = json!(chain_text(name, &links));
    out["owners"] = Value::Array(links.into_iter().map(|link| link.to_json()).collect());
    fit(&mut out, "containers", "containers_omitted", ctx.limits.output_bytes);
    Ok(out)
}

/// Drops entries from the end of the list at `key` until the output is within
/// `limit` bytes, adding what was dropped to the count at `omitted`.
pub fn fit(out: &mut Value, key: &str, omitted: &str, limit: usize) {
    let mut dropped = 0u64;
    while api::json_len(out) > limit {
        match out.get_mut(key).and_then(Value::as_array_mut) {
            Some(list) if !list.is_empty() => {
                list.pop();
                dropped += 1;
            }
            _ => break,
        }
    }
    if dropped > 0 {
        let before = out.get(omitted).and_then(Value::as_u64).unwrap_or(0);
        out[omitted] = json!(before + dropped);
    }
}

/// One owner above the Pod: read, or why it could not be.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub kind: String,
    pub name: String,
    pub api_version: String,
    /// The owner's compact status, when it was read.
    pub status: Option<Value>,
    /// Why the owner could not be read.
    pub error: Option<String>,
}

impl Link {
    fn to_json(&self) -> Value {
        let mut out = json!({"kind": self.kind, "name": self.name, "apiVersion": self.api_version});
        if let Some(status) = &self.status {
            out["status"] = status.clone();
        }
        if let Some(error) = &self.error {
            out["error"] = json!(error);
        }
        out
    }
}

/// The controlling owner among `references` (the one with `controller: true`).
fn controller(references: &[OwnerReference]) -> Option<&OwnerReference> {
    references.iter().find(|r| r.controller == Some(true))
}

/// Follows controlling owners from the Pod up, at most [`MAX_OWNER_DEPTH`] levels; an
/// owner that cannot be read ends the chain with its error.
async fn owner_chain(ctx: &Ctx, namespace: &str, references: &[OwnerReference]) -> Vec<Link> {
    let mut links = Vec::new();
    let mut next = controller(references).cloned();
    while let Some(reference) = next.take() {
        if links.len() == MAX_OWNER_DEPTH {
            break;
        }
        let mut link = Link {
            kind: reference.kind.clone(),
            name: reference.name.clone(),
            api_version: reference.api_version.clone(),
            status: None,
            error: None,
        };
        match read_owner(ctx, namespace, &reference).await {
            Ok(object) => {
                let value = serde_json::to_value(&object).unwrap_or(Value::Null);
                link.status = objects::summary(&value).get("status").cloned();
                next = controller(object.metadata.owner_references.as_deref().unwrap_or_default()).cloned();
            }
            Err(failure) => link.error = Some(failure.message().to_string()),
        }
        links.push(link);
    }
    links
}

async fn read_owner(
    ctx: &Ctx,
    namespace: &str,
    reference: &OwnerReference,
) -> Result<kube::api::DynamicObject, Failure> {
    let resolved = ctx.resolve(Some(&reference.api_version), &reference.kind).await?;
    let (objects, namespace) = ctx.api(&resolved, Some(namespace))?;
    let what = objects::describe("get", &resolved.resource.plural, Some(&reference.name), namespace.as_deref());
    let object = objects.get(&reference.name).await.map_err(|e| Failure::from_kube(e, &what))?;
    if object.metadata.uid.as_deref() != Some(reference.uid.as_str()) {
        return Err(Failure::new(format!(
            "{what}: the object of that name has another uid than the owner reference (the owner was deleted and \
             recreated)"
        )));
    }
    Ok(object)
}

/// `Pod/web-1 → ReplicaSet/web-5d9f → Deployment/web`; an unreadable owner is
/// marked `(unreadable)`.
pub fn chain_text(pod: &str, links: &[Link]) -> String {
    let mut text = format!("Pod/{pod}");
    for link in links {
        text.push_str(&format!(" → {}/{}", link.kind, link.name));
        if link.error.is_some() {
            text.push_str(" (unreadable)");
        }
    }
    text
}

/// A Kubernetes time as the API writes it.
pub fn time(t: &Time) -> String {
    t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn message(text: &str) -> String {
    truncate_bytes(text.trim(), MESSAGE_BYTES, ELLIPSIS)
}

/// Everything of the Pod but its owners: phase, conditions, containers and summary.
pub fn report(pod: &Pod, max_entries: usize) -> Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let mut out = Map::new();
    out.insert("name".into(), json!(pod.metadata.name));
    out.insert("namespace".into(), json!(pod.metadata.namespace));
    out.insert("phase".into(), json!(status.phase));
    if let Some(reason) = &status.reason {
        out.insert("reason".into(), json!(reason));
    }
    if let Some(text) = &status.message {
        out.insert("message".into(), json!(message(text)));
    }
    if let Some(deleting) = &pod.metadata.deletion_timestamp {
        out.insert("deleting_since".into(), json!(time(deleting)));
    }
    out.insert("node".into(), json!(spec.node_name));
    out.insert("startTime".into(), json!(status.start_time.as_ref().map(time)));
    out.insert("qosClass".into(), json!(status.qos_class));
    let conditions: Vec<Value> = status
        .conditions
        .iter()
        .flatten()
        .take(max_entries)
        .map(|c| {
            let mut condition = json!({"type": c.type_, "status": c.status});
            if let Some(reason) = &c.reason {
                condition["reason"] = json!(reason);
            }
            if let Some(text) = &c.message {
                condition["message"] = json!(message(text));
            }
            if let Some(at) = &c.last_transition_time {
                condition["lastTransitionTime"] = json!(time(at));
            }
            condition
        })
        .collect();
    out.insert("conditions".into(), json!(conditions));

    let init_statuses = status.init_container_statuses.unwrap_or_default();
    let statuses = status.container_statuses.unwrap_or_default();
    let find = |list: &[ContainerStatus], name: &str| list.iter().find(|s| s.name == name).cloned();
    let mut all: Vec<(Container, Option<ContainerStatus>, bool)> = Vec::new();
    for container in spec.init_containers.unwrap_or_default() {
        let found = find(&init_statuses, &container.name);
        all.push((container, found, true));
    }
    for container in spec.containers {
        let found = find(&statuses, &container.name);
        all.push((container, found, false));
    }
    let total = all.len();
    let mut lines = Vec::new();
    let mut containers = Vec::new();
    for (container, found, init) in all.iter().take(max_entries) {
        containers.push(container_json(container, found.as_ref(), *init));
        if let Some(line) = container_line(&container.name, found.as_ref(), *init) {
            lines.push(line);
        }
    }
    out.insert("containers".into(), json!(containers));
    if total > containers.len() {
        out.insert("containers_omitted".into(), json!(total - containers.len()));
    }
    out.insert("summary".into(), json!(summary(pod, &lines)));
    Value::Object(out)
}

/// `Running on node n1; container app: CrashLoopBackOff, 7 restarts, ...`.
fn summary(pod: &Pod, lines: &[String]) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let mut text = status.phase.unwrap_or_else(|| "phase unknown".into());
    if let Some(reason) = &status.reason {
        text.push_str(&format!(" ({reason})"));
    }
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        Some(node) => text.push_str(&format!(" on node {node}")),
        None => {
            let unscheduled =
                status.conditions.iter().flatten().find(|c| c.type_ == "PodScheduled" && c.status == "False");
            match unscheduled {
                Some(c) => text.push_str(&format!(
                    ", not scheduled: {} {}",
                    c.reason.as_deref().unwrap_or_default(),
                    c.message.as_deref().map(message).unwrap_or_default()
                )),
                None => text.push_str(", no node yet"),
            }
        }
    }
    for line in lines {
        text.push_str("; ");
        text.push_str(line);
    }
    truncate_bytes(&text, SUMMARY_BYTES, ELLIPSIS)
}

/// `container app: CrashLoopBackOff, 7 restarts, last terminated OOMKilled (exit 137) at T, not ready`;
/// `None` for an init container that completed.
fn container_line(name: &str, status: Option<&ContainerStatus>, init: bool) -> Option<String> {
    let label = if init { "init container" } else { "container" };
    let Some(status) = status else {
        return Some(format!("{label} {name}: no status yet"));
    };
    let state = status.state.clone().unwrap_or_default();
    let mut parts = Vec::new();
    if let Some(waiting) = &state.waiting {
        parts.push(waiting.reason.clone().unwrap_or_else(|| "waiting".into()));
    } else if let Some(running) = &state.running {
        parts.push(match &running.started_at {
            Some(at) => format!("running since {}", time(at)),
            None => "running".into(),
        });
    } else if let Some(terminated) = &state.terminated {
        if init && terminated.exit_code == 0 && status.restart_count == 0 {
            return None;
        }
        parts.push(format!("terminated {}", termination(terminated)));
    }
    match status.restart_count {
        0 => {}
        1 => parts.push("1 restart".into()),
        n => parts.push(format!("{n} restarts")),
    }
    if let Some(last) = status.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
        parts.push(format!("last terminated {}", termination(last)));
    }
    if !init && !status.ready {
        parts.push("not ready".into());
    }
    Some(format!("{label} {name}: {}", parts.join(", ")))
}

/// `OOMKilled (exit 137) at T`, `Error (exit 1, signal 9) at T`.
fn termination(t: &k8s_openapi::api::core::v1::ContainerStateTerminated) -> String {
    let mut text = format!("{} (exit {}", t.reason.as_deref().unwrap_or("without reason"), t.exit_code);
    if let Some(signal) = t.signal {
        text.push_str(&format!(", signal {signal}"));
    }
    text.push(')');
    if let Some(at) = &t.finished_at {
        text.push_str(&format!(" at {}", time(at)));
    }
    text
}

fn container_json(container: &Container, status: Option<&ContainerStatus>, init: bool) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(container.name));
    if init {
        out.insert("init".into(), json!(true));
        if container.restart_policy.as_deref() == Some("Always") {
            out.insert("sidecar".into(), json!(true));
        }
    }
    let image = status.map(|s| s.image.clone()).filter(|i| !i.is_empty()).or_else(|| container.image.clone());
    out.insert("image".into(), json!(image));
    if let Some(status) = status {
        out.insert("ready".into(), json!(status.ready));
        out.insert("started".into(), json!(status.started));
        out.insert("restartCount".into(), json!(status.restart_count));
        out.insert("state".into(), state_json(status.state.as_ref()));
        if let Some(last) = status.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
            out.insert("lastState".into(), json!({"terminated": terminated_json(last)}));
        }
    } else {
        out.insert("state".into(), json!("no status reported yet"));
    }
    out.insert("resources".into(), resources_json(container.resources.as_ref()));
    let env: Vec<&str> = container.env.iter().flatten().map(|e| e.name.as_str()).take(MAX_ENV_NAMES).collect();
    if !env.is_empty() {
        out.insert("envNames".into(), json!(env));
    }
    Value::Object(out)
}

fn state_json(state: Option<&ContainerState>) -> Value {
    let Some(state) = state else {
        return Value::Null;
    };
    if let Some(waiting) = &state.waiting {
        let mut out = json!({"reason": waiting.reason});
        if let Some(text) = &waiting.message {
            out["message"] = json!(message(text));
        }
        return json!({"waiting": out});
    }
    if let Some(running) = &state.running {
        return json!({"running": {"since": running.started_at.as_ref().map(time)}});
    }
    if let Some(terminated) = &state.terminated {
        return json!({"terminated": terminated_json(terminated)});
    }
    Value::Null
}

fn terminated_json(t: &k8s_openapi::api::core::v1::ContainerStateTerminated) -> Value {
    let mut out = json!({
        "reason": t.reason,
        "exitCode": t.exit_code,
        "startedAt": t.started_at.as_ref().map(time),
        "finishedAt": t.finished_at.as_ref().map(time),
    });
    if let Some(signal) = t.signal {
        out["signal"] = json!(signal);
    }
    if let Some(text) = t.message.as_deref().filter(|m| !m.trim().is_empty()) {
        out["message"] = json!(message(text));
    }
    out
}

fn resources_json(resources: Option<&ResourceRequirements>) -> Value {
    let quantities = |map: Option<
        &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >|
     -> Value {
        map.map(|m| m.iter().map(|(k, v)| (k.clone(), json!(v.0))).collect::<Map<String, Value>>())
            .map_or(json!({}), Value::Object)
    };
    json!({
        "requests": quantities(resources.and_then(|r| r.requests.as_ref())),
        "limits": quantities(resources.and_then(|r| r.limits.as_ref())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crashing_pod() -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop"},
            "spec": {
                "nodeName": "node-1",
                "initContainers": [{"name": "migrate", "image": "shop/migrate:1"}],
                "containers": [{
                    "name": "app", "image": "shop/web:2",
                    "env": [{"name": "DB_PASSWORD", "value": "hunter2"}],
                    "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
                }]
            },
            "status": {
                "phase": "Running", "qosClass": "Burstable", "startTime": "2026-11-30T10:00:00Z",
                "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                    "message": "containers with unready status: [app]", "lastTransitionTime": "2026-11-30T10:01:00Z"}],
                "initContainerStatuses": [{"name": "migrate", "image": "shop/migrate:1", "imageID": "", "ready": true,
                    "restartCount": 0, "state": {"terminated": {"reason": "Completed", "exitCode": 0,
                    "finishedAt": "2026-11-30T10:00:05Z"}}}],
                "containerStatuses": [{
                    "name": "app", "image": "shop/web:2", "imageID": "", "ready": false, "started": false,
                    "restartCount": 7,
                    "state": {"waiting": {"reason": "CrashLoopBackOff",
                        "message": "back-off 5m0s restarting failed container=app"}},
                    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                        "startedAt": "2026-11-30T10:20:00Z", "finishedAt": "2026-11-30T10:20:30Z"}}
                }]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_crash_looping_container_is_summarized_with_its_last_termination() {
        let out = report(&crashing_pod(), 50);
        assert_eq!(
            out["summary"],
            "Running on node node-1; container app: CrashLoopBackOff, 7 restarts, last terminated OOMKilled \
             (exit 137) at 2026-11-30T10:20:30Z, not ready"
        );
        let app = &out["containers"][1];
        assert_eq!(app["name"], "app");
        assert_eq!(app["restartCount"], 7);
        assert_eq!(app["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(
            app["lastState"]["terminated"],
            json!({"reason": "OOMKilled", "exitCode": 137, "startedAt": "2026-11-30T10:20:00Z",
                "finishedAt": "2026-11-30T10:20:30Z"})
        );
        assert_eq!(
            app["resources"],
            json!({"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}})
        );
        assert_eq!(app["envNames"], json!(["DB_PASSWORD"]));
        assert!(!out.to_string().contains("hunter2"), "{out}");
        assert_eq!(out["containers"][0]["init"], true);
        assert_eq!(out["containers"][0]["state"]["terminated"]["reason"], "Completed");
        assert_eq!(out["conditions"][0]["lastTransitionTime"], "2026-11-30T10:01:00Z");
        assert_eq!(out["qosClass"], "Burstable");
    }

    #[test]
    fn an_unscheduled_pod_says_why() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "big"},
            "spec": {"containers": [{"name": "app", "image": "big:1"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient memory."}]}
        }))
        .unwrap();
        let out = report(&pod, 50);
        assert_eq!(
            out["summary"],
            "Pending, not scheduled: Unschedulable 0/3 nodes are available: 3 Insufficient memory.; container app: \
             no status yet"
        );
    }

    #[test]
    fn containers_beyond_the_limit_are_counted() {
        let out = report(&crashing_pod(), 1);
        assert_eq!(out["containers"].as_array().unwrap().len(), 1);
        assert_eq!(out["containers_omitted"], 1);
    }

    #[test]
    fn the_owner_chain_reads_from_pod_to_top_controller() {
        let link = |kind: &str, name: &str, error: Option<&str>| Link {
            kind: kind.into(),
            name: name.into(),
            api_version: "apps/v1".into(),
            status: None,
            error: error.map(str::to_string),
        };
        let links = [link("ReplicaSet", "web-5d9f", None), link("Deployment", "web", None)];
        assert_eq!(chain_text("web-1", &links), "Pod/web-1 → ReplicaSet/web-5d9f → Deployment/web");
        let broken = [link("ReplicaSet", "web-5d9f", Some("forbidden"))];
        assert_eq!(chain_text("web-1", &broken), "Pod/web-1 → ReplicaSet/web-5d9f (unreadable)");
        assert_eq!(links[0].to_json(), json!({"kind": "ReplicaSet", "name": "web-5d9f", "apiVersion": "apps/v1"}));
        assert_eq!(broken[0].to_json()["error"], "forbidden");
    }

    #[test]
    fn only_the_controlling_owner_is_followed() {
        let reference = |name: &str, controller: Option<bool>| OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: name.into(),
            uid: name.into(),
            controller,
            block_owner_deletion: None,
        };
        let references = [reference("a", None), reference("b", Some(true))];
        assert_eq!(controller(&references).map(|r| r.name.as_str()), Some("b"));
        assert!(controller(&references[..1]).is_none());
    }

    #[test]
    fn an_output_over_the_byte_limit_loses_list_entries_and_counts_them() {
        let mut out =
            json!({"containers": [{"name": "a".repeat(100)}, {"name": "b".repeat(100)}], "containers_omitted": 1});
        fit(&mut out, "containers", "containers_omitted", 200);
        assert_eq!(out["containers"].as_array().unwrap().len(), 1);
        assert_eq!(out["containers_omitted"], 2);
        let mut small = json!({"containers": []});
        fit(&mut small, "containers", "containers_omitted", 1);
        assert!(small.get("containers_omitted").is_none());
    }
}
