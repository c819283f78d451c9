//! Status writing: every declared object gets the conditions the status board
//! derived for it (`Ready` and the conditions it depends on, each stamped with the
//! generation the scan saw) and the facts the host discovered about it, with
//! server-side apply on the status subresource. Only changes are written. A failed
//! write is counted and the object backs off before its next attempt; a change of
//! `Ready` is also published as a Kubernetes Event.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::api::{FIELD_MANAGER, Generations, dynamic_api};
use super::backoff::Backoff;
use crate::catalog::ObjectKey;
use crate::catalog::readiness::conditions;
use crate::catalog::status::{ResourceReport, StatusBoard};
use crate::resources::API_VERSION;
use crate::resources::common::{Condition, ConditionStatus, find_condition};

/// Status facts are re-checked at least this often (runtime facts change without a reload).
pub const REFRESH: Duration = Duration::from_secs(2);

/// The status subresource of a declared object, as the operator writes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ObjectStatus {
    /// `Ready` and the conditions it is derived from.
    pub conditions: Vec<Condition>,
    /// Discovered facts, limited to what the kind's status schema declares.
    #[serde(flatten)]
    pub facts: Map<String, Value>,
}

impl ObjectStatus {
    /// The status of a reported object with its discovered facts (the typed facts of its
    /// kind, so only fields its CRD declares), for a generation.
    pub fn new(report: &ResourceReport, facts: Map<String, Value>, generation: i64) -> Self {
        let conditions = report
            .conditions
            .iter()
            .map(|condition| Condition { observed_generation: Some(generation), ..condition.clone() })
            .collect();
        ObjectStatus { conditions, facts }
    }

    fn ready(&self) -> Option<&Condition> {
        find_condition(&self.conditions, conditions::READY)
    }
}

/// A server-side apply patch of the status subresource.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusPatch<'a> {
    api_version: &'static str,
    kind: &'static str,
    status: &'a ObjectStatus,
}

/// Writes statuses until cancelled.
pub async fn run(
    client: Client,
    board: StatusBoard,
    mut generations: tokio::sync::watch::Receiver<Generations>,
    cancel: CancellationToken,
) {
    let reporter = Reporter { controller: "akritas".into(), instance: std::env::var("HOSTNAME").ok() };
    let recorder = Recorder::new(client.clone(), reporter);
    let mut writer = Writer::default();
    let mut ticker = tokio::time::interval(REFRESH);
    loop {
        let current = generations.borrow_and_update().clone();
        // A lost Lease cancels: the write in flight is dropped.
        let pass = writer.write_all(&client, &recorder, &board, &current, Instant::now());
        if cancel.run_until_cancelled(pass).await.is_none() {
            return;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = generations.changed() => if changed.is_err() { return; },
            _ = ticker.tick() => {}
        }
    }
}

/// What was last written per object, and which objects are backing off.
#[derive(Default)]
struct Writer {
    written: BTreeMap<ObjectKey, ObjectStatus>,
    backoff: Backoff<ObjectKey>,
}

impl Writer {
    /// One pass over the board: writes every changed status that is not backing off.
    async fn write_all(
        &mut self,
        client: &Client,
        recorder: &Recorder,
        board: &StatusBoard,
        generations: &Generations,
        now: Instant,
    ) {
        let snapshot = board.get();
        self.written.retain(|key, _| generations.contains_key(key));
        self.backoff.retain(|key| generations.contains_key(key));
        for report in &snapshot.resources {
            let key = &report.key;
            let Some(generation) = generations.get(key).copied() else { continue };
            if !self.backoff.due(key, now) {
                continue;
            }
            let status = ObjectStatus::new(report, board.facts(key).unwrap_or_default(), generation);
            let previous = self.written.get(key);
            if previous == Some(&status) {
                continue;
            }
            let ready = |status: &ObjectStatus| status.ready().map(|c| (c.status, c.reason.clone()));
            let transition = previous.and_then(ready) != ready(&status);
            match write(client, key, &status).await {
                Ok(()) => {
                    self.backoff.succeeded(key);
                    if transition {
                        publish_event(recorder, key, &status).await;
                    }
                    self.written.insert(key.clone(), status);
                }
                Err(kube::Error::Api(response)) if response.code == 404 => {
                    tracing::debug!(object = %key, "object deleted before its status was written");
                }
                Err(error) => {
                    board.count_write_failure(key.kind);
                    let wait = self.backoff.failed(key.clone(), now);
                    match outdated_crd(&error) {
                        Some(field) => tracing::error!(
                            object = %key, %error, retry_in_s = wait.as_secs(),
                            "status not written: the installed {} CRD has no {field}, so it is older than this version; \
                             apply this version's CRDs (`akritas crds | kubectl apply --server-side -f -`, or the chart's \
                             crds/, which `helm upgrade` does not update)",
                            key.kind.as_str()
                        ),
                        None => {
                            tracing::warn!(object = %key, %error, retry_in_s = wait.as_secs(), "status not written; retrying later")
                        }
                    }
                }
            }
        }
    }
}

/// The status field the API server refused because the installed CRD does not declare it
/// (server-side apply answers `.status.x: field not declared in schema`): a CRD older than
/// the binary.
fn outdated_crd(error: &kube::Error) -> Option<String> {
    let kube::Error::Api(response) = error else { return None };
    let message = &response.message;
    let end = message.find(": field not declared in schema")?;
    let start = message[..end].rfind(|c: char| c.is_whitespace()).map_or(0, |i| i + 1);
    Some(message[start..end].to_owned())
}

async fn write(client: &Client, key: &ObjectKey, status: &ObjectStatus) -> kube::Result<()> {
    let api = dynamic_api(client, key.kind, Some(&key.namespace));
    let patch = StatusPatch { api_version: API_VERSION, kind: key.kind.as_str(), status };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(&key.name, &params, &Patch::Apply(&patch)).await.map(|_| ())
}

async fn publish_event(recorder: &Recorder, key: &ObjectKey, status: &ObjectStatus) {
    let Some(ready) = status.ready() else { return };
    let reference = ObjectReference {
        api_version: Some(API_VERSION.into()),
        kind: Some(key.kind.as_str().into()),
        name: Some(key.name.clone()),
        namespace: Some(key.namespace.clone()),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: if ready.status == ConditionStatus::True { EventType::Normal } else { EventType::Warning },
        reason: ready.reason.clone(),
        note: Some(ready.message.clone()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &reference).await {
        tracing::warn!(object = %key, %error, "event not published");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::catalog::readiness::{Check, Needs, live_check, reasons};
    use crate::catalog::status::{BoardSnapshot, InForce};
    use crate::operator::mock::{Expect, client, status};
    use crate::resources::Kind;
    use crate::resources::mcp_adapter::{DiscoveredTool, McpAdapterStatus, Permission};
    use crate::resources::skill::SkillStatus;

    const PATH: &str = "/apis/akritas.io/v1alpha1/namespaces/ops/skills/pg/status";
    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ops/events";

    fn key(kind: Kind) -> ObjectKey {
        ObjectKey { kind, namespace: "ops".into(), name: "pg".into() }
    }

    fn report(kind: Kind, needs: Needs) -> ResourceReport {
        ResourceReport {
            key: key(kind),
            source: "kubernetes:ops/pg:0".into(),
            in_force: InForce::Current,
            conditions: Vec::new(),
            spec: None,
            errors: Vec::new(),
            needs,
        }
    }

    fn board(report: ResourceReport) -> (StatusBoard, Generations) {
        let board = StatusBoard::default();
        let generations = Generations::from([(report.key.clone(), 3)]);
        board.set(BoardSnapshot { catalog_version: 1, resources: vec![report], ..BoardSnapshot::default() });
        (board, generations)
    }

    fn patch(code: u16, body: Value) -> Expect {
        Expect { method: "PATCH", path: PATH.into(), status: code, body }
    }

    fn event() -> Expect {
        Expect { method: "POST", path: EVENTS.into(), status: 201, body: json!({}) }
    }

    fn skill() -> Value {
        json!({"apiVersion": "akritas.io/v1alpha1", "kind": "Skill", "metadata": {"name": "pg", "namespace": "ops"},
               "spec": {"description": "d", "content": "c"}})
    }

    fn recorder(client: &Client) -> Recorder {
        Recorder::new(client.clone(), Reporter { controller: "akritas".into(), instance: None })
    }

    #[tokio::test]
    async fn the_status_is_applied_as_the_field_manager_with_the_scanned_generation() {
        let (board, generations) = board(report(Kind::Skill, Needs::default()));
        board.update_facts(&key(Kind::Skill), |status: &mut SkillStatus| status.content_sha256 = Some("ab".into()));
        let (client, server) = client(vec![patch(200, skill()), event()]);
        let mut writer = Writer::default();
        writer.write_all(&client, &recorder(&client), &board, &generations, Instant::now()).await;
        let seen = server.await.unwrap();
        assert!(seen[0].uri.contains("fieldManager=akritas") && seen[0].uri.contains("force=true"), "{}", seen[0].uri);
        let body = &seen[0].body;
        assert_eq!((body["apiVersion"].as_str(), body["kind"].as_str()), (Some(API_VERSION), Some("Skill")));
        assert_eq!(body["status"]["contentSha256"], "ab");
        assert_eq!(body["status"].as_object().unwrap().len(), 2, "the facts and the conditions: {body}");
        let ready = &body["status"]["conditions"][0];
        assert_eq!(
            (ready["type"].as_str(), ready["status"].as_str(), ready["reason"].as_str()),
            (Some("Ready"), Some("True"), Some(reasons::READY))
        );
        assert_eq!(ready["observedGeneration"], 3);
        assert_eq!(seen[1].body["reason"], reasons::READY, "the Ready transition is an Event");
    }

    #[tokio::test]
    async fn failed_writes_back_off_per_object_are_counted_and_success_resets() {
        let (board, generations) = board(report(Kind::Skill, Needs::default()));
        let (client, server) = client(vec![
            patch(409, status(409, "Conflict")),
            patch(500, status(500, "InternalError")),
            patch(200, skill()),
            event(),
        ]);
        let recorder = recorder(&client);
        let mut writer = Writer::default();
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        // t=0 fails (wait 1 s); t=0.5 waits; t=1 fails (wait 2 s); t=2 waits; t=3 succeeds; t=4 has nothing new.
        for now in [at(0), start + Duration::from_millis(500), at(1), at(2), at(3), at(4)] {
            writer.write_all(&client, &recorder, &board, &generations, now).await;
        }
        let seen = server.await.unwrap();
        assert_eq!(seen.len(), 4, "two failures, one success and its Event, nothing else");
        assert!(board.write_failures().contains(&(Kind::Skill, 2)));
        assert!(writer.backoff.due(&key(Kind::Skill), at(4)), "a success forgets the backoff");
        assert_eq!(writer.written.len(), 1);
    }

    #[tokio::test]
    async fn a_deleted_object_is_skipped_and_not_counted() {
        let (board, generations) = board(report(Kind::Skill, Needs::default()));
        let (client, server) = client(vec![patch(404, status(404, "NotFound"))]);
        let mut writer = Writer::default();
        writer.write_all(&client, &recorder(&client), &board, &generations, Instant::now()).await;
        assert!(writer.written.is_empty());
        assert_eq!(server.await.unwrap().len(), 1);
        assert!(board.write_failures().contains(&(Kind::Skill, 0)));
    }

    #[test]
    fn a_status_field_an_older_crd_lacks_is_named() {
        let refused = |message: &str| {
            let status = json!({"status": "Failure", "message": message, "reason": "BadRequest", "code": 400});
            kube::Error::Api(Box::new(serde_json::from_value(status).unwrap()))
        };
        let error = refused(
            "failed to create typed patch object (akritas.io/v1alpha1, Kind=KnowledgeBase): .status.skipped: field not declared in schema",
        );
        assert_eq!(outdated_crd(&error).as_deref(), Some(".status.skipped"));
        assert_eq!(outdated_crd(&refused("the object has been modified")), None);
    }

    #[test]
    fn an_adapter_status_carries_its_tools_and_their_authorization() {
        let (board, _) =
            board(report(Kind::McpAdapter, Needs { check: live_check(Kind::McpAdapter), ..Needs::default() }));
        let tool = DiscoveredTool {
            name: "mcp.vm.query".into(),
            remote_name: "query".into(),
            permission: Permission::Read,
            authorized: true,
            reason: None,
        };
        board.set_facts(
            &key(Kind::McpAdapter),
            McpAdapterStatus { tools: vec![tool], authorized_tools: Some(1), ..Default::default() },
        );
        board.set_check(&key(Kind::McpAdapter), Check::passed(reasons::CONNECTED, "1 tool, 1 authorized"));
        let snapshot = board.get();
        let facts = board.facts(&key(Kind::McpAdapter)).unwrap();
        let status = ObjectStatus::new(&snapshot.resources[0], facts, 2);
        let value = serde_json::to_value(&status).unwrap();
        assert_eq!(value["authorizedTools"], 1);
        assert_eq!(
            value["tools"],
            json!([{"name": "mcp.vm.query", "remoteName": "query", "permission": "read", "authorized": true}])
        );
        let types: Vec<(&str, &str)> = value["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
            .collect();
        assert_eq!(types, [("Ready", "True"), ("Connected", "True")]);
        assert!(status.conditions.iter().all(|c| c.observed_generation == Some(2)));
    }
}
