//! `kubernetes.get` and `kubernetes.list`: any kind by apiVersion and kind, a
//! compact summary by default and the object (without `managedFields`) on request.
//! Secrets are refused by [`Ctx::resolve`].

use kube::api::ListParams;
use serde_json::{Map, Value, json};

use super::api::{self, Ctx, Failure, json_len, without_managed_fields};

pub const GET: &str = "kubernetes.get";
pub const LIST: &str = "kubernetes.list";

pub const GET_DESCRIPTION: &str = "Read one Kubernetes object by kind and name (apiVersion optional for built-in kinds \
such as Pod, Deployment, ConfigMap, Node). Returns a compact summary (status, conditions, owner, labels); `full: true` \
returns the whole object without managedFields. Secrets are never returned. Secret-looking values are redacted.";

pub const LIST_DESCRIPTION: &str = "List Kubernetes objects of a kind in a namespace (or every namespace the Run may \
read with `allNamespaces`), with label and field selectors, `limit` and `continue` for paging. Returns compact \
summaries, the count returned and how many remain. Secrets are never listed.";

fn kind_properties() -> Map<String, Value> {
    let mut properties = Map::new();
    properties.insert(
        "apiVersion".into(),
        json!({"type": "string", "maxLength": 128, "description": "Such as v1, apps/v1, example.com/v1alpha1."}),
    );
    properties.insert(
        "kind".into(),
        json!({"type": "string", "minLength": 1, "maxLength": 128, "description": "Kind, such as Pod or Deployment."}),
    );
    properties.insert("namespace".into(), api::namespace_schema());
    properties.insert("full".into(), json!({"type": "boolean", "description": "Whole objects instead of summaries."}));
    properties
}

pub fn get_schema() -> Value {
    let mut properties = kind_properties();
    properties.insert("name".into(), api::name_schema("Object name."));
    api::arguments_schema(&["kind", "name"], Value::Object(properties))
}

pub fn list_schema(limits: &api::Limits) -> Value {
    let mut properties = kind_properties();
    properties.insert("allNamespaces".into(), json!({"type": "boolean"}));
    properties.insert("labelSelector".into(), json!({"type": "string", "maxLength": 1024}));
    properties.insert("fieldSelector".into(), json!({"type": "string", "maxLength": 1024}));
    properties.insert("limit".into(), json!({"type": "integer", "minimum": 1, "maximum": limits.list_max}));
    properties.insert("continue".into(), json!({"type": "string", "maxLength": 4096}));
    api::arguments_schema(&["kind"], Value::Object(properties))
}

/// `kubernetes.get`.
pub async fn get(ctx: Ctx, args: Value) -> Result<Value, Failure> {
    let kind = api::text(&args, "kind").unwrap_or_default();
    let name = api::text(&args, "name").unwrap_or_default();
    let resolved = ctx.resolve(api::text(&args, "apiVersion"), kind).await?;
    let (objects, namespace) = ctx.api(&resolved, api::text(&args, "namespace"))?;
    let what = describe("get", &resolved.resource.plural, Some(name), namespace.as_deref());
    let object = objects.get(name).await.map_err(|e| Failure::from_kube(e, &what))?;
    let object = without_managed_fields(serde_json::to_value(&object).unwrap_or(Value::Null));
    if !api::flag(&args, "full") {
        return Ok(summary(&object));
    }
    let size = json_len(&object);
    if size > ctx.limits.output_bytes {
        let mut out = summary(&object);
        out["full_omitted"] = json!(format!(
            "the object is {size} bytes, over the {} byte limit; the summary is returned",
            ctx.limits.output_bytes
        ));
        return Ok(out);
    }
    Ok(object)
}

/// `kubernetes.list`.
pub async fn list(ctx: Ctx, args: Value) -> Result<Value, Failure> {
    let kind = api::text(&args, "kind").unwrap_or_default();
    let resolved = ctx.resolve(api::text(&args, "apiVersion"), kind).await?;
    let all = api::flag(&args, "allNamespaces") && resolved.namespaced;
    let (objects, namespace) = if all {
        if !ctx.access.all_namespaces() {
            return Err(Failure::new(format!(
                "allNamespaces is refused: this Run may read {} only; name a namespace",
                ctx.access.describe()
            )));
        }
        (kube::Api::all_with(ctx.client.clone(), &resolved.resource), None)
    } else {
        ctx.api(&resolved, api::text(&args, "namespace"))?
    };
    let limit =
        api::number(&args, "limit").map_or(ctx.limits.list_default, |n| n.min(u64::from(ctx.limits.list_max)) as u32);
    let mut params = ListParams::default().limit(limit);
    if let Some(labels) = api::text(&args, "labelSelector") {
        params = params.labels(labels);
    }
    if let Some(fields) = api::text(&args, "fieldSelector") {
        params = params.fields(fields);
    }
    if let Some(token) = api::text(&args, "continue") {
        params = params.continue_token(token);
    }
    let what = describe("list", &resolved.resource.plural, None, namespace.as_deref());
    let page = objects.list(&params).await.map_err(|e| Failure::from_kube(e, &what))?;
    let full = api::flag(&args, "full");
    let fetched = page.items.len();
    // Room for the envelope; items stop at the byte cap and the rest are counted.
    let budget = ctx.limits.output_bytes.saturating_sub(1024);
    let mut used = 0usize;
    let mut items = Vec::new();
    for object in &page.items {
        let object = without_managed_fields(serde_json::to_value(object).unwrap_or(Value::Null));
        let item = if full { object } else { summary(&object) };
        let size = json_len(&item) + 1;
        if used + size > budget {
            break;
        }
        used += size;
        items.push(item);
    }
    let omitted = fetched - items.len();
    let remaining = page.metadata.remaining_item_count.and_then(|n| u64::try_from(n).ok());
    let mut out = json!({
        "kind": resolved.resource.kind,
        "apiVersion": resolved.resource.api_version,
        "namespace": namespace.unwrap_or_else(|| if resolved.namespaced { "*".into() } else { String::new() }),
        "returned": items.len(),
        "fetched": fetched,
        "remaining": remaining,
        "total": remaining.map(|r| r + fetched as u64),
        "continue": page.metadata.continue_.filter(|t| !t.is_empty()),
        "items": items,
    });
    if omitted > 0 {
        out["truncated"] = json!({
            "omitted": omitted,
            "reason": format!("the output limit is {} bytes; narrow with labelSelector or fieldSelector, or use a smaller limit", ctx.limits.output_bytes),
        });
    }
    Ok(out)
}

/// `list pods in namespace "shop"`, `get nodes "n1"`.
pub fn describe(verb: &str, plural: &str, name: Option<&str>, namespace: Option<&str>) -> String {
    let mut what = format!("{verb} {plural}");
    if let Some(name) = name {
        what.push_str(&format!(" {name:?}"));
    }
    if let Some(namespace) = namespace {
        what.push_str(&format!(" in namespace {namespace:?}"));
    }
    what
}

/// Most labels a summary carries.
const SUMMARY_LABELS: usize = 12;

/// The compact summary of any object: identity, age, owner, labels and the status
/// fields readers look at first.
pub fn summary(object: &Value) -> Value {
    let metadata = &object["metadata"];
    let mut out = Map::new();
    out.insert("kind".into(), object["kind"].clone());
    out.insert("name".into(), metadata["name"].clone());
    if let Some(namespace) = metadata["namespace"].as_str() {
        out.insert("namespace".into(), json!(namespace));
    }
    out.insert("created".into(), metadata["creationTimestamp"].clone());
    if let Some(generation) = metadata["generation"].as_i64() {
        out.insert("generation".into(), json!(generation));
    }
    if let Some(owners) = metadata["ownerReferences"].as_array() {
        let owners: Vec<String> = owners
            .iter()
            .map(|o| format!("{}/{}", o["kind"].as_str().unwrap_or("?"), o["name"].as_str().unwrap_or("?")))
            .collect();
        out.insert("owners".into(), json!(owners));
    }
    if let Some(labels) = metadata["labels"].as_object() {
        let kept: Map<String, Value> =
            labels.iter().take(SUMMARY_LABELS).map(|(k, v)| (k.clone(), v.clone())).collect();
        out.insert("labels".into(), Value::Object(kept));
    }
    if metadata["deletionTimestamp"].is_string() {
        out.insert("deleting_since".into(), metadata["deletionTimestamp"].clone());
    }
    let status = status_summary(object);
    if !status.is_empty() {
        out.insert("status".into(), Value::Object(status));
    }
    Value::Object(out)
}

fn status_summary(object: &Value) -> Map<String, Value> {
    let status = &object["status"];
    let mut out = Map::new();
    for key in [
        "phase",
        "reason",
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "updatedReplicas",
        "unavailableReplicas",
        "currentNumberScheduled",
        "desiredNumberScheduled",
        "numberReady",
        "numberUnavailable",
        "observedGeneration",
        "active",
        "succeeded",
        "failed",
    ] {
        if !status[key].is_null() {
            out.insert(key.into(), status[key].clone());
        }
    }
    if let Some(conditions) = status["conditions"].as_array() {
        let compact: Vec<String> = conditions
            .iter()
            .map(|c| {
                let mut text = format!("{}={}", c["type"].as_str().unwrap_or("?"), c["status"].as_str().unwrap_or("?"));
                if let Some(reason) = c["reason"].as_str() {
                    text.push_str(&format!(" ({reason})"));
                }
                text
            })
            .collect();
        out.insert("conditions".into(), json!(compact));
    }
    if let Some(containers) = status["containerStatuses"].as_array() {
        let ready = containers.iter().filter(|c| c["ready"] == true).count();
        let restarts: i64 = containers.iter().filter_map(|c| c["restartCount"].as_i64()).sum();
        out.insert("ready".into(), json!(format!("{ready}/{}", containers.len())));
        out.insert("restarts".into(), json!(restarts));
        let waiting: Vec<&str> = containers.iter().filter_map(|c| c["state"]["waiting"]["reason"].as_str()).collect();
        if !waiting.is_empty() {
            out.insert("waiting".into(), json!(waiting));
        }
    }
    if let Some(node) = object["spec"]["nodeName"].as_str() {
        out.insert("node".into(), json!(node));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_summary_has_what_a_reader_needs_first() {
        let pod = json!({
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "creationTimestamp": "2026-11-30T10:00:00Z",
                "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5d9f"}], "labels": {"app": "web"}},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
                "containerStatuses": [{"ready": false, "restartCount": 7, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
        });
        assert_eq!(
            summary(&pod),
            json!({"kind": "Pod", "name": "web-1", "namespace": "shop", "created": "2026-11-30T10:00:00Z",
                "owners": ["ReplicaSet/web-5d9f"], "labels": {"app": "web"},
                "status": {"phase": "Running", "conditions": ["Ready=False (ContainersNotReady)"], "ready": "0/1",
                    "restarts": 7, "waiting": ["CrashLoopBackOff"], "node": "node-1"}})
        );
    }
}
