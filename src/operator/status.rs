//! Status writing: every declared object gets its `Ready` condition (reason,
//! message, observedGeneration) and the facts the host discovered about it, with
//! server-side apply on the status subresource. Only changes are written; the
//! transition time moves only when the condition's status changes. A transition
//! is also published as a Kubernetes Event.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::source::{Generations, dynamic_api};
use crate::catalog::ObjectKey;
use crate::catalog::status::StatusBoard;
use crate::resources::API_VERSION;

/// Field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "akritas";
/// Status facts are re-checked at least this often (runtime facts change without a reload).
pub const REFRESH: Duration = Duration::from_secs(2);

/// Writes statuses until cancelled.
pub async fn run(
    client: Client,
    board: StatusBoard,
    mut generations: tokio::sync::watch::Receiver<Generations>,
    cancel: CancellationToken,
) {
    let reporter = Reporter { controller: "akritas".into(), instance: std::env::var("HOSTNAME").ok() };
    let recorder = Recorder::new(client.clone(), reporter);
    let mut written: BTreeMap<ObjectKey, Value> = BTreeMap::new();
    let mut ticker = tokio::time::interval(REFRESH);
    loop {
        let current = generations.borrow_and_update().clone();
        write_all(&client, &recorder, &board, &current, &mut written).await;
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = generations.changed() => if changed.is_err() { return; },
            _ = ticker.tick() => {}
        }
    }
}

async fn write_all(
    client: &Client,
    recorder: &Recorder,
    board: &StatusBoard,
    generations: &Generations,
    written: &mut BTreeMap<ObjectKey, Value>,
) {
    let snapshot = board.get();
    written.retain(|key, _| generations.contains_key(key));
    for report in &snapshot.resources {
        let Some(generation) = generations.get(&report.key).copied() else { continue };
        let previous = written.get(&report.key);
        let mut conditions = serde_json::to_value(&report.conditions).unwrap_or(json!([]));
        for condition in conditions.as_array_mut().into_iter().flatten() {
            condition["observedGeneration"] = json!(generation);
            // Keep the transition time while the condition's status stays the same.
            if let Some(before) = previous.and_then(|p| same_condition(p, condition))
                && before["status"] == condition["status"]
            {
                condition["lastTransitionTime"] = before["lastTransitionTime"].clone();
            }
        }
        let runtime = board.runtime(&report.key).filter(Value::is_object).unwrap_or_else(|| json!({}));
        let extras = runtime_condition(report.key.kind, &runtime, generation)
            .into_iter()
            .chain(secrets_condition(&runtime, generation));
        for mut extra in extras {
            if let Some(before) = previous.and_then(|p| same_condition(p, &extra))
                && before["status"] == extra["status"]
            {
                extra["lastTransitionTime"] = before["lastTransitionTime"].clone();
            }
            conditions.as_array_mut().into_iter().for_each(|c| c.push(extra.clone()));
        }
        let schema = &report.key.kind.schema()["properties"]["status"];
        let mut status = prune(&runtime, schema);
        status["conditions"] = conditions;
        if previous == Some(&status) {
            continue;
        }
        let transition = ready_of(previous) != ready_of(Some(&status));
        let api = dynamic_api(client, report.key.kind, Some(&report.key.namespace));
        let patch = json!({"apiVersion": API_VERSION, "kind": report.key.kind.as_str(), "status": status});
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api.patch_status(&report.key.name, &params, &Patch::Apply(&patch)).await {
            Ok(_) => {
                if transition {
                    publish_event(recorder, &report.key, &status).await;
                }
                written.insert(report.key.clone(), status);
            }
            Err(kube::Error::Api(response)) if response.code == 404 => {
                tracing::debug!(object = %report.key, "object deleted before its status was written");
            }
            Err(error) => {
                tracing::warn!(object = %report.key, %error, "status not written; retrying");
            }
        }
    }
}

/// Keeps only what the status schema declares (server-side apply refuses
/// undeclared fields), recursively through objects and arrays.
pub fn prune(value: &Value, schema: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let properties = schema["properties"].as_object();
            let kept = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .filter_map(|(k, v)| properties.and_then(|p| p.get(k)).map(|s| (k.clone(), prune(v, s))))
                .collect();
            Value::Object(kept)
        }
        Value::Array(items) => Value::Array(items.iter().map(|i| prune(i, &schema["items"])).collect()),
        other => other.clone(),
    }
}

/// The state of a live component as a second condition: `Connected` for an MCP
/// adapter, `Indexed` for a knowledge base.
fn runtime_condition(kind: crate::resources::Kind, runtime: &Value, generation: i64) -> Option<Value> {
    use crate::resources::Kind;
    let error = runtime["lastError"].as_str().filter(|e| !e.is_empty());
    let (kind_name, ok, reason, message) = match kind {
        Kind::McpAdapter => {
            let connected = runtime["connected"].as_bool()?;
            let phase = runtime["phase"].as_str().unwrap_or(if connected { "Connected" } else { "Disconnected" });
            (
                "Connected",
                connected,
                phase.to_string(),
                error.map(str::to_string).unwrap_or_else(|| format!("adapter is {}", phase.to_lowercase())),
            )
        }
        Kind::ValidatorProfile => match error {
            Some(error) => ("ProgramFound", false, "NotFound".to_string(), error.to_string()),
            None if runtime.get("resolvedProgram").is_some() => (
                "ProgramFound",
                true,
                "Found".to_string(),
                runtime["resolvedProgram"].as_str().unwrap_or_default().to_string(),
            ),
            None => return None,
        },
        Kind::Workspace => match error {
            Some(error) => ("Checked", false, "NotARepository".to_string(), error.to_string()),
            None if runtime.get("headCommit").is_some() => (
                "Checked",
                true,
                "HeadFound".to_string(),
                format!("HEAD at {}", runtime["headCommit"].as_str().unwrap_or_default()),
            ),
            None => return None,
        },
        Kind::KnowledgeBase => match error {
            Some(error) => ("Indexed", false, "IndexFailed".to_string(), error.to_string()),
            None if runtime.get("documents").is_some() => (
                "Indexed",
                true,
                "Indexed".to_string(),
                format!("{} documents, {} chunks", runtime["documents"], runtime["chunks"]),
            ),
            None => return None,
        },
        _ => return None,
    };
    Some(json!({
        "type": kind_name,
        "status": if ok { "True" } else { "False" },
        "reason": reason,
        "message": message.chars().take(1024).collect::<String>(),
        "lastTransitionTime": crate::resources::common::now_rfc3339(),
        "observedGeneration": generation,
    }))
}

/// `SecretsResolved`: whether every secret reference of the object resolves now.
fn secrets_condition(runtime: &Value, generation: i64) -> Option<Value> {
    let error = runtime.get("secretsError")?.as_str()?;
    Some(json!({
        "type": "SecretsResolved",
        "status": if error.is_empty() { "True" } else { "False" },
        "reason": if error.is_empty() { "Resolved" } else { "Unresolved" },
        "message": if error.is_empty() { "every secret reference resolves" } else { error },
        "lastTransitionTime": crate::resources::common::now_rfc3339(),
        "observedGeneration": generation,
    }))
}

fn same_condition<'a>(status: &'a Value, condition: &Value) -> Option<&'a Value> {
    status["conditions"].as_array()?.iter().find(|c| c["type"] == condition["type"])
}

fn ready_of(status: Option<&Value>) -> Option<(String, String)> {
    let ready = status?["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?;
    Some((ready["status"].as_str()?.to_string(), ready["reason"].as_str()?.to_string()))
}

async fn publish_event(recorder: &Recorder, key: &ObjectKey, status: &Value) {
    let Some(ready) = status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready")) else {
        return;
    };
    let ok = ready["status"] == "True";
    let reference = ObjectReference {
        api_version: Some(API_VERSION.into()),
        kind: Some(key.kind.as_str().into()),
        name: Some(key.name.clone()),
        namespace: Some(key.namespace.clone()),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: if ok { EventType::Normal } else { EventType::Warning },
        reason: ready["reason"].as_str().unwrap_or("Reconciled").to_string(),
        note: ready["message"].as_str().map(|m| m.chars().take(1024).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &reference).await {
        tracing::warn!(object = %key, %error, "event not published");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::status::{BoardSnapshot, InForce, ResourceReport};
    use crate::operator::mock::{Expect, client, status};
    use crate::resources::Kind;
    use crate::resources::common::Condition;

    const PATH: &str = "/apis/akritas.io/v1alpha1/namespaces/ops/skills/pg/status";

    fn board() -> (StatusBoard, Generations) {
        let key = ObjectKey { kind: Kind::Skill, namespace: "ops".into(), name: "pg".into() };
        let board = StatusBoard::default();
        board.set(BoardSnapshot {
            catalog_version: 1,
            loaded_at: String::new(),
            resources: vec![ResourceReport {
                key: key.clone(),
                source: "kubernetes:ops/pg:0".into(),
                in_force: InForce::Current,
                conditions: vec![Condition::ready(true, "Loaded", "loaded", None)],
                spec: None,
                errors: Vec::new(),
            }],
            problems: Vec::new(),
        });
        (board, Generations::from([(key, 3)]))
    }

    fn patch(code: u16, body: Value) -> Expect {
        Expect { method: "PATCH", path: PATH.into(), status: code, body }
    }

    fn skill() -> Value {
        json!({"apiVersion": "akritas.io/v1alpha1", "kind": "Skill", "metadata": {"name": "pg", "namespace": "ops"},
               "spec": {"description": "d", "content": "c"}})
    }

    #[tokio::test]
    async fn conflicts_and_server_errors_are_retried_and_success_is_written_once() {
        let (board, generations) = board();
        let event = Expect {
            method: "POST",
            path: "/apis/events.k8s.io/v1/namespaces/ops/events".into(),
            status: 201,
            body: json!({}),
        };
        let (client, server) = client(vec![
            patch(409, status(409, "Conflict")),
            patch(500, status(500, "InternalError")),
            patch(200, skill()),
            event,
        ]);
        let recorder = Recorder::new(client.clone(), Reporter { controller: "akritas".into(), instance: None });
        let mut written = BTreeMap::new();
        for _ in 0..4 {
            write_all(&client, &recorder, &board, &generations, &mut written).await;
        }
        let bodies = server.await.unwrap();
        assert_eq!(bodies.len(), 4, "two failures retried, one success, one Event, then nothing");
        let condition = &bodies[2]["status"]["conditions"][0];
        assert_eq!((condition["type"].as_str(), condition["observedGeneration"].as_i64()), (Some("Ready"), Some(3)));
        assert_eq!(written.len(), 1);
    }

    #[tokio::test]
    async fn a_deleted_object_is_skipped() {
        let (board, generations) = board();
        let (client, server) = client(vec![patch(404, status(404, "NotFound"))]);
        let recorder = Recorder::new(client.clone(), Reporter { controller: "akritas".into(), instance: None });
        let mut written = BTreeMap::new();
        write_all(&client, &recorder, &board, &generations, &mut written).await;
        assert!(written.is_empty());
        assert_eq!(server.await.unwrap().len(), 1);
    }

    #[test]
    fn runtime_facts_keep_to_the_status_schema() {
        let runtime = json!({"connected": true, "phase": "Connected", "lastError": null, "authorizedTools": 1,
                             "tools": [{"name": "mcp.vm.query", "remoteName": "query", "permission": "read", "authorized": true}]});
        let pruned = prune(&runtime, &Kind::McpAdapter.schema()["properties"]["status"]);
        assert_eq!(
            pruned,
            json!({"authorizedTools": 1, "tools": [{"name": "mcp.vm.query", "permission": "read", "authorized": true}]})
        );
        let condition = runtime_condition(Kind::McpAdapter, &runtime, 2).unwrap();
        assert_eq!((condition["type"].as_str(), condition["status"].as_str()), (Some("Connected"), Some("True")));
    }
}
