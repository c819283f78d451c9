//! Runs and Incidents as custom resources: a bounded projection of the audit and
//! alert journals (which stay the source of truth), written with server-side apply;
//! old ones are garbage-collected after the retention. A Run object is written in
//! the namespace of the Run's record when that namespace is watched, otherwise in
//! the host's own namespace ([`ProjectionSettings::run_namespace`]); an Incident
//! likewise in its AlertSource's namespace ([`ProjectionSettings::incident_namespace`]). User-created
//! `Run` requests are served by [`super::requests`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::api::{FIELD_MANAGER, dynamic_api};
use super::backoff::Backoff;
use crate::alerts::store::{AlertStore, DeliveryStatus, Job};
use crate::audit::{AuditLog, RunRecord, RunStatus};
use crate::catalog::status::StatusBoard;
use crate::investigation::InvestigationResult;
use crate::resources::{API_VERSION, Kind};

/// Label on every object the host writes.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGER: &str = "akritas";
/// Metadata key linking an audit Run to the user's `Run` object that requested it.
pub(super) const REQUESTED_BY: &str = "run_resource";
/// How often the journals are projected.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(2);
/// Longest text kept in a status field.
const MAX_STATUS_TEXT: usize = 1024;
/// Newest deliveries kept on an Incident.
const MAX_DELIVERIES: usize = 16;
/// Most Runs and Incidents projected per pass.
const MAX_PROJECTED: usize = 1000;

/// Projection settings.
#[derive(Clone, Debug)]
pub struct ProjectionSettings {
    /// The host's own namespace: Runs of unwatched namespaces and Incidents go here.
    pub namespace: String,
    /// The watched namespaces; empty = every namespace.
    pub watched: Vec<String>,
    /// Finished Runs and resolved Incidents older than this are deleted.
    pub retention: Duration,
}

impl ProjectionSettings {
    /// Where the Run object of a Run recorded in `namespace` is written: there if
    /// it is watched (its tenants see their own Runs), else the host's namespace
    /// (the operator has no rights elsewhere).
    pub fn run_namespace<'a>(&'a self, namespace: &'a str) -> &'a str {
        if self.watched.is_empty() || self.watched.iter().any(|ns| ns == namespace) {
            namespace
        } else {
            &self.namespace
        }
    }

    /// Where an Incident object is written: in its AlertSource's namespace when
    /// that is watched, else the host's (same rule as [`Self::run_namespace`]).
    pub fn incident_namespace<'a>(&'a self, incident: &'a crate::alerts::IncidentState) -> &'a str {
        self.run_namespace(&incident.namespace)
    }

    /// Namespaces the projection may have written into (for garbage collection);
    /// `None` = every namespace.
    fn written_namespaces(&self) -> Option<Vec<String>> {
        if self.watched.is_empty() {
            return None;
        }
        let mut all: BTreeSet<String> = self.watched.iter().cloned().collect();
        all.insert(self.namespace.clone());
        Some(all.into_iter().collect())
    }
}

/// Writes the projection until cancelled; failed writes are counted on `board`.
pub async fn run(
    client: Client,
    audit: Arc<AuditLog>,
    alerts: Arc<AlertStore>,
    board: StatusBoard,
    settings: ProjectionSettings,
    cancel: CancellationToken,
) {
    let mut written = Written::default();
    loop {
        let pass = async {
            written.start_pass();
            let cutoff = cutoff(settings.retention);
            let writer = Writer { client: &client, settings: &settings, board: &board, now: Instant::now() };
            sync_runs(&writer, &audit, &cutoff, &mut written).await;
            sync_incidents(&writer, &alerts, &cutoff, &mut written).await;
            written.end_pass();
            collect_garbage(&client, &settings, &mut written).await;
        };
        // A lost Lease cancels: the write in flight is dropped with the pass.
        if cancel.run_until_cancelled(pass).await.is_none() {
            return;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(SYNC_INTERVAL) => {}
        }
    }
}

/// An object the projection writes: kind, namespace, name.
type Key = (Kind, String, String);

/// What was last written per object and the pass that last projected it; which
/// objects are backing off after a failed write.
#[derive(Default)]
struct Written {
    pass: u64,
    objects: BTreeMap<Key, (Value, u64)>,
    projected: BTreeSet<Key>,
    backoff: Backoff<Key>,
}

impl Written {
    fn start_pass(&mut self) {
        self.pass += 1;
        self.projected.clear();
    }

    /// Forgets objects this pass no longer projects (bounded memory over a long uptime).
    fn end_pass(&mut self) {
        let pass = self.pass;
        self.objects.retain(|_, (_, seen)| *seen == pass);
        let projected = &self.projected;
        self.backoff.retain(|key| projected.contains(key));
    }
}

/// One pass: where the projection writes, where failures are counted, and when.
struct Writer<'a> {
    client: &'a Client,
    settings: &'a ProjectionSettings,
    board: &'a StatusBoard,
    now: Instant,
}

/// The oldest end time still kept.
fn cutoff(retention: Duration) -> String {
    let retention = jiff::SignedDuration::try_from(retention).unwrap_or(jiff::SignedDuration::MAX);
    jiff::Timestamp::now().checked_sub(retention).unwrap_or(jiff::Timestamp::MIN).to_string()
}

/// Whether an RFC 3339 end time is before the cutoff.
fn expired(ended: Option<&str>, cutoff: &str) -> bool {
    match (ended.and_then(|t| t.parse::<jiff::Timestamp>().ok()), cutoff.parse::<jiff::Timestamp>()) {
        (Some(ended), Ok(cutoff)) => ended < cutoff,
        _ => false,
    }
}

/// `run_<hex>` → `run-<hex>` (object names are DNS subdomains).
pub fn object_name(id: &str) -> String {
    id.replace('_', "-")
}

pub(super) fn bounded(text: &str) -> String {
    crate::text::prefix_chars(text, MAX_STATUS_TEXT).to_string()
}

/// Label on the Run objects of a RunSchedule's Runs: the schedule's name.
pub const SCHEDULE_LABEL: &str = "akritas.io/schedule";

async fn apply(client: &Client, namespace: &str, kind: Kind, name: &str, object: &Value) -> kube::Result<()> {
    let api = dynamic_api(client, kind, Some(namespace));
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut metadata = json!({"name": name, "labels": {MANAGED_BY: MANAGER}});
    if let Some(labels) = object["metadata"]["labels"].as_object() {
        for (key, value) in labels {
            metadata["labels"][key] = value.clone();
        }
    }
    if let Some(owners) = object["metadata"].get("ownerReferences") {
        metadata["ownerReferences"] = owners.clone();
    }
    let (spec, status) = (&object["spec"], &object["status"]);
    let object = json!({"apiVersion": API_VERSION, "kind": kind.as_str(), "metadata": metadata, "spec": spec});
    api.patch(name, &params, &Patch::Apply(&object)).await?;
    let status = json!({"apiVersion": API_VERSION, "kind": kind.as_str(), "status": status});
    api.patch_status(name, &params, &Patch::Apply(&status)).await?;
    Ok(())
}

/// Writes `desired` (`spec`, `status` and optionally `metadata` labels and owner references)
/// when it differs from what was last written.
async fn write_if_changed(
    writer: &Writer<'_>,
    written: &mut Written,
    kind: Kind,
    (namespace, name): (&str, String),
    desired: Value,
) {
    let key = (kind, namespace.to_string(), name);
    let pass = written.pass;
    written.projected.insert(key.clone());
    if let Some((last, seen)) = written.objects.get_mut(&key)
        && *last == desired
    {
        *seen = pass;
        return;
    }
    if !written.backoff.due(&key, writer.now) {
        return;
    }
    match apply(writer.client, &key.1, kind, &key.2, &desired).await {
        Ok(()) => {
            written.backoff.succeeded(&key);
            written.objects.insert(key, (desired, pass));
        }
        Err(error) => {
            writer.board.count_write_failure(kind);
            let wait = written.backoff.failed(key.clone(), writer.now);
            tracing::warn!(kind = kind.as_str(), namespace = %key.1, name = %key.2, %error, retry_in_s = wait.as_secs(), "projection not written; retrying later");
        }
    }
}

/// The status of a Run CR from its audit record.
pub fn run_status(run: &RunRecord) -> Value {
    let calls: Vec<&crate::audit::AuditEvent> = run.events.iter().filter(|e| e.kind == "tool_call").collect();
    let tools: BTreeSet<&str> = calls.iter().filter_map(|e| e.metadata.get("tool").and_then(Value::as_str)).collect();
    let skills: Vec<&str> = run
        .metadata
        .get("skills")
        .and_then(Value::as_str)
        .map(|s| s.split(',').filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let budget: BTreeMap<&str, u64> = run
        .metadata
        .iter()
        .filter(|(k, _)| {
            k.ends_with("_calls") || k.ends_with("_bytes") || k.ends_with("_tokens") || *k == "duration_ms"
        })
        .filter_map(|(k, v)| v.as_u64().map(|v| (k.as_str(), v)))
        .collect();
    let phase = match run.status {
        RunStatus::Running => "Running",
        RunStatus::Succeeded => "Succeeded",
        RunStatus::Failed => "Failed",
    };
    let mut status = json!({
        "runId": run.id.as_str(),
        "phase": phase,
        "source": bounded(&run.source),
        "actor": bounded(&run.actor),
        "catalogVersion": run.catalog_version,
        "startedAt": run.started_at,
        "toolCalls": calls.len(),
        "toolsUsed": tools,
        "skills": skills,
        "budget": budget,
        "evidenceCount": run.investigation.as_ref().map(|i| i.evidence.len()).unwrap_or(0),
        "evidenceVerified": verified(run.investigation.as_ref()),
        "conditions": [],
    });
    if let Some(finished) = &run.completed_at {
        status["finishedAt"] = json!(finished);
    }
    if let Some(result) = &run.investigation {
        status["summary"] = json!(bounded(&result.summary));
    }
    if let Some(error) = &run.error {
        status["error"] = json!(bounded(error));
    }
    status
}

/// Evidence items of a result with a verified quote.
fn verified(result: Option<&InvestigationResult>) -> u32 {
    result.and_then(|r| r.evidence_coverage).map_or(0, |c| c.verified)
}

fn run_prompt(run: &RunRecord) -> String {
    let fact = |key: &str| run.metadata.get(key).and_then(Value::as_str);
    match (fact("alert"), fact("incident_id"), fact("schedule"), fact("scheduled_time")) {
        (Some(alert), Some(incident), _, _) => format!("Investigate alert {alert} (incident {incident})"),
        (_, _, Some(schedule), Some(at)) => format!("Scheduled check {schedule} for {at}"),
        _ => format!("{} request by {} (the prompt is not recorded)", run.source, run.actor),
    }
}

/// The labels and owner of a scheduled Run's object: its RunSchedule (with its uid, so
/// deleting the schedule deletes its Runs), when the object is written in its namespace.
fn run_metadata(run: &RunRecord, namespace: &str) -> Option<Value> {
    let schedule = run.metadata.get("schedule").and_then(Value::as_str)?;
    let (schedule_namespace, name) = schedule.split_once('/')?;
    let mut metadata = json!({"labels": {SCHEDULE_LABEL: name}});
    if let Some(uid) = run.metadata.get("schedule_uid").and_then(Value::as_str)
        && schedule_namespace == namespace
    {
        metadata["ownerReferences"] =
            json!([{"apiVersion": API_VERSION, "kind": "RunSchedule", "name": name, "uid": uid}]);
    }
    Some(metadata)
}

/// Whether a scheduled Run is beyond its schedule's `historyLimit` (counted newest first).
fn beyond_history(run: &RunRecord, kept: &mut BTreeMap<String, u64>) -> bool {
    let Some(schedule) = run.metadata.get("schedule").and_then(Value::as_str) else { return false };
    let limit = run.metadata.get("history_limit").and_then(Value::as_u64).unwrap_or(u64::MAX);
    let count = kept.entry(schedule.to_string()).or_default();
    *count += 1;
    *count > limit
}

async fn sync_runs(writer: &Writer<'_>, audit: &AuditLog, cutoff: &str, written: &mut Written) {
    let runs = match audit.list(MAX_PROJECTED).await {
        Ok(runs) => runs,
        Err(error) => {
            tracing::warn!(%error, "cannot read the Runs to project; retried at the next pass");
            return;
        }
    };
    let mut kept = BTreeMap::new();
    for summary in runs {
        if summary.metadata.contains_key(REQUESTED_BY)
            || expired(summary.completed_at.as_deref(), cutoff)
            || beyond_history(&summary, &mut kept)
        {
            continue;
        }
        let namespace = writer.settings.run_namespace(&summary.namespace);
        let mut desired = json!({"spec": {"prompt": run_prompt(&summary)}, "status": run_status(&summary)});
        if let Some(metadata) = run_metadata(&summary, namespace) {
            desired["metadata"] = metadata;
        }
        let name = object_name(summary.id.as_str());
        write_if_changed(writer, written, Kind::Run, (namespace, name), desired).await;
    }
}

/// The status of an Incident object: state, counts, times, the newest investigation
/// (with its evidence coverage) and deliveries.
pub fn incident_status(incident: &crate::alerts::IncidentState, jobs: &[Job]) -> Value {
    let state = match incident.state {
        crate::alerts::IncidentStatus::Firing => "firing",
        crate::alerts::IncidentStatus::Resolved => "resolved",
    };
    let mut status = json!({
        "state": state,
        "severity": incident.severity.as_str(),
        "eventCount": incident.event_ids.len(),
        "openedAt": incident.opened_at.to_string(),
        "updatedAt": incident.updated_at.to_string(),
        "conditions": [],
    });
    if let Some(resolved) = incident.resolved_at {
        status["resolvedAt"] = json!(resolved.to_string());
    }
    if let Some(job) = jobs.last() {
        let job_status = serde_json::to_value(job.status).unwrap_or(Value::Null);
        status["job"] = json!({"status": job_status});
        if let Some(count) = job.storm_incidents {
            status["job"]["stormIncidents"] = json!(count);
        }
        if let Some(run) = &job.run_id {
            status["lastRun"] = json!(run);
        }
        if let Some(result) = &job.result {
            let value = serde_json::to_value(result).unwrap_or(Value::Null);
            status["investigation"] = json!({
                "finding": value["finding_status"], "confidence": value["confidence"],
                "actionability": value["actionability"], "summary": bounded(&result.summary),
                "evidenceCount": result.evidence.len(), "evidenceVerified": verified(Some(result)),
            });
        }
        let deliveries: Vec<Value> = job
            .deliveries
            .iter()
            .filter(|d| !matches!(d.status, DeliveryStatus::Pending | DeliveryStatus::Sending))
            .map(|d| {
                let outcome = match d.status {
                    DeliveryStatus::Delivered => "delivered",
                    DeliveryStatus::Filtered => "filtered",
                    _ => "failed",
                };
                let mut delivery = json!({"receiver": d.receiver, "outcome": outcome, "at": job.updated_at});
                if let Some(detail) = d.detail.as_deref().filter(|_| outcome == "failed") {
                    delivery["detail"] = json!(detail);
                }
                delivery
            })
            .collect();
        let skip = deliveries.len().saturating_sub(MAX_DELIVERIES);
        status["deliveries"] = json!(deliveries[skip..]);
    }
    status
}

async fn sync_incidents(writer: &Writer<'_>, alerts: &AlertStore, cutoff: &str, written: &mut Written) {
    let incidents = match alerts.incidents(MAX_PROJECTED).await {
        Ok(incidents) => incidents,
        Err(error) => {
            tracing::warn!(%error, "cannot read the incidents to project; retried at the next pass");
            return;
        }
    };
    for incident in incidents {
        if expired(incident.resolved_at.map(|t| t.to_string()).as_deref(), cutoff) {
            continue;
        }
        let jobs = alerts.incident(&incident.id).await.ok().flatten().map(|(_, _, jobs)| jobs).unwrap_or_default();
        let namespace = writer.settings.incident_namespace(&incident);
        // The AlertSource by name in its own namespace, qualified anywhere else.
        let source = if namespace == incident.namespace {
            incident.source.clone()
        } else {
            format!("{}/{}", incident.namespace, incident.source)
        };
        let spec = json!({
            "source": source,
            "correlationKey": bounded(&incident.correlation_key),
            "entity": bounded(&format!("{}:{}", incident.entity.kind, incident.entity.id)),
        });
        let desired = json!({"spec": spec, "status": incident_status(&incident, &jobs)});
        write_if_changed(writer, written, Kind::Incident, (namespace, object_name(&incident.id)), desired).await;
    }
}

/// Deletes host-written Runs that finished, and Incidents that resolved, longer
/// ago than the retention.
async fn collect_garbage(client: &Client, settings: &ProjectionSettings, written: &mut Written) {
    let cutoff = cutoff(settings.retention);
    let scopes: Vec<Option<String>> = match settings.written_namespaces() {
        None => vec![None],
        Some(namespaces) => namespaces.into_iter().map(Some).collect(),
    };
    for (kind, field) in [(Kind::Run, "finishedAt"), (Kind::Incident, "resolvedAt")] {
        for scope in &scopes {
            let api = dynamic_api(client, kind, scope.as_deref());
            let list = match api.list(&ListParams::default().labels(&format!("{MANAGED_BY}={MANAGER}"))).await {
                Ok(list) => list,
                Err(error) => {
                    tracing::debug!(kind = kind.as_str(), %error, "cannot list for garbage collection");
                    continue;
                }
            };
            for object in list.items {
                let (Some(namespace), Some(name)) = (object.metadata.namespace.clone(), object.metadata.name.clone())
                else {
                    continue;
                };
                // A scheduled Run past its schedule's historyLimit is no longer projected.
                let past_history = kind == Kind::Run
                    && object.metadata.labels.as_ref().is_some_and(|labels| labels.contains_key(SCHEDULE_LABEL))
                    && !written.projected.contains(&(kind, namespace.clone(), name.clone()));
                if !expired(object.data["status"][field].as_str(), &cutoff) && !past_history {
                    continue;
                }
                let api = dynamic_api(client, kind, Some(&namespace));
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {
                        tracing::info!(kind = kind.as_str(), %namespace, %name, "expired record deleted");
                        written.objects.remove(&(kind, namespace, name));
                    }
                    Err(error) => tracing::debug!(kind = kind.as_str(), %name, %error, "expired record not deleted"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::operator::mock::{Expect, client, status};

    const RUNS: &str = "/apis/akritas.io/v1alpha1/namespaces/akritas-system/runs";
    const INCIDENTS: &str = "/apis/akritas.io/v1alpha1/namespaces/akritas-system/incidents";

    fn settings() -> ProjectionSettings {
        ProjectionSettings {
            namespace: "akritas-system".into(),
            watched: vec!["akritas-system".into()],
            retention: Duration::from_secs(3600),
        }
    }

    fn expect(method: &'static str, path: &str, code: u16, body: Value) -> Expect {
        Expect { method, path: path.into(), status: code, body }
    }

    fn run_object(name: &str, finished: Option<&str>) -> Value {
        let mut object = json!({"apiVersion": API_VERSION, "kind": "Run",
                                "metadata": {"name": name, "namespace": "akritas-system", "labels": {MANAGED_BY: MANAGER}},
                                "spec": {"prompt": "p"}, "status": {"phase": "Succeeded"}});
        if let Some(finished) = finished {
            object["status"]["finishedAt"] = json!(finished);
        }
        object
    }

    fn list(kind: &str, items: Vec<Value>) -> Value {
        json!({"apiVersion": API_VERSION, "kind": format!("{kind}List"), "metadata": {"resourceVersion": "1"}, "items": items})
    }

    fn scheduled(schedule: &str, uid: Option<&str>, history: u64) -> RunRecord {
        let mut metadata = BTreeMap::from([
            ("schedule".to_string(), json!(schedule)),
            ("scheduled_time".to_string(), json!("2026-12-06T08:00:00Z")),
            ("history_limit".to_string(), json!(history)),
        ]);
        if let Some(uid) = uid {
            metadata.insert("schedule_uid".to_string(), json!(uid));
        }
        RunRecord { metadata, ..RunRecord::finished("team-a", "schedule", &format!("schedule:{schedule}")) }
    }

    #[test]
    fn a_scheduled_run_is_owned_by_its_schedule_and_kept_within_its_history() {
        let run = scheduled("team-a/certs", Some("u-1"), 2);
        let metadata = run_metadata(&run, "team-a").unwrap();
        assert_eq!(metadata["labels"][SCHEDULE_LABEL], "certs");
        assert_eq!(
            metadata["ownerReferences"],
            json!([{"apiVersion": API_VERSION, "kind": "RunSchedule", "name": "certs", "uid": "u-1"}])
        );
        assert!(
            run_metadata(&run, "akritas-system").unwrap().get("ownerReferences").is_none(),
            "owners are namespaced"
        );
        assert!(run_metadata(&scheduled("team-a/x", None, 2), "team-a").unwrap().get("ownerReferences").is_none());
        assert_eq!(run_prompt(&run), "Scheduled check team-a/certs for 2026-12-06T08:00:00Z");
        // Newest first: the first two of a schedule are kept, the third is not; others count apart.
        let mut kept = BTreeMap::new();
        let other = scheduled("team-a/pvc", None, 1);
        let beyond: Vec<bool> =
            [&run, &run, &other, &run, &other].iter().map(|r| beyond_history(r, &mut kept)).collect();
        assert_eq!(beyond, [false, false, false, true, true]);
    }

    #[tokio::test]
    async fn a_run_is_applied_server_side_then_its_status_and_only_once() {
        let name = "run-0123";
        let object = format!("{RUNS}/{name}");
        let (client, server) = client(vec![
            expect("PATCH", &object, 200, run_object(name, None)),
            expect("PATCH", &format!("{object}/status"), 200, run_object(name, None)),
        ]);
        let (settings, board) = (settings(), StatusBoard::default());
        let writer = Writer { client: &client, settings: &settings, board: &board, now: Instant::now() };
        let mut written = Written::default();
        for _ in 0..2 {
            written.start_pass();
            let desired = json!({"spec": {"prompt": "p"}, "status": {"runId": "run_0123", "phase": "Running"}});
            write_if_changed(&writer, &mut written, Kind::Run, ("akritas-system", name.into()), desired).await;
            written.end_pass();
        }
        let seen = server.await.unwrap();
        assert_eq!(seen.len(), 2, "the unchanged second pass writes nothing");
        for request in &seen {
            assert!(
                request.uri.contains("fieldManager=akritas") && request.uri.contains("force=true"),
                "{}",
                request.uri
            );
        }
        assert!(seen[0].uri.starts_with(&format!("{object}?")), "{}", seen[0].uri);
        assert_eq!(seen[0].body["metadata"], json!({"name": name, "labels": {MANAGED_BY: MANAGER}}));
        assert_eq!(seen[0].body["spec"], json!({"prompt": "p"}));
        assert!(seen[0].body.get("status").is_none(), "the status goes to its subresource");
        assert!(seen[1].uri.starts_with(&format!("{object}/status?")), "{}", seen[1].uri);
        assert_eq!(
            (seen[1].body["kind"].as_str(), seen[1].body["status"]["phase"].as_str()),
            (Some("Run"), Some("Running"))
        );
    }

    #[tokio::test]
    async fn conflicts_and_server_errors_back_off_and_are_counted() {
        let object = format!("{RUNS}/run-1");
        let (client, server) = client(vec![
            expect("PATCH", &object, 409, status(409, "Conflict")),
            expect("PATCH", &object, 500, status(500, "InternalError")),
            expect("PATCH", &object, 200, run_object("run-1", None)),
            expect("PATCH", &format!("{object}/status"), 200, run_object("run-1", None)),
        ]);
        let (settings, board) = (settings(), StatusBoard::default());
        let start = Instant::now();
        let mut written = Written::default();
        // t=0 fails (wait 1 s), t=0.5 waits, t=1 fails (wait 2 s), t=2 waits, t=3 succeeds.
        for millis in [0, 500, 1000, 2000, 3000] {
            let writer = Writer {
                client: &client,
                settings: &settings,
                board: &board,
                now: start + Duration::from_millis(millis),
            };
            written.start_pass();
            write_if_changed(
                &writer,
                &mut written,
                Kind::Run,
                ("akritas-system", "run-1".into()),
                json!({"spec": {}, "status": {"phase": "Running"}}),
            )
            .await;
            written.end_pass();
        }
        assert_eq!(server.await.unwrap().len(), 4);
        assert!(board.write_failures().contains(&(Kind::Run, 2)));
        assert!(written.objects.contains_key(&(Kind::Run, "akritas-system".to_string(), "run-1".to_string())));
        assert!(
            written.backoff.due(&(Kind::Run, "akritas-system".to_string(), "run-1".to_string()), start),
            "a success forgets the backoff"
        );
    }

    #[tokio::test]
    async fn finished_records_older_than_the_retention_are_deleted() {
        let old = "2020-01-01T00:00:00Z";
        let recent = jiff::Timestamp::now().to_string();
        let (client, server) = client(vec![
            expect(
                "GET",
                RUNS,
                200,
                list(
                    "Run",
                    vec![
                        run_object("run-old", Some(old)),
                        run_object("run-new", Some(&recent)),
                        run_object("run-open", None),
                    ],
                ),
            ),
            expect("DELETE", &format!("{RUNS}/run-old"), 200, run_object("run-old", Some(old))),
            expect("GET", INCIDENTS, 200, list("Incident", Vec::new())),
        ]);
        let mut written = Written::default();
        written.objects.insert((Kind::Run, "akritas-system".into(), "run-old".into()), (json!({}), 0));
        collect_garbage(&client, &settings(), &mut written).await;
        let seen = server.await.unwrap();
        assert!(seen[0].uri.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dakritas"), "{}", seen[0].uri);
        assert_eq!(seen.len(), 3, "only the expired Run is deleted");
        assert!(written.objects.is_empty());
    }
}

#[cfg(test)]
mod namespace_tests {
    use super::*;

    fn settings(watched: &[&str]) -> ProjectionSettings {
        ProjectionSettings {
            namespace: "akritas-system".into(),
            watched: watched.iter().map(|s| s.to_string()).collect(),
            retention: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_run_object_is_written_in_its_runs_namespace_when_watched_else_the_hosts() {
        let two = settings(&["team-a", "team-b"]);
        assert_eq!(two.run_namespace("team-b"), "team-b");
        assert_eq!(two.run_namespace("team-c"), "akritas-system", "never where the operator has no rights");
        assert_eq!(settings(&[]).run_namespace("team-c"), "team-c", "every namespace is watched");
        assert_eq!(two.written_namespaces(), Some(vec!["akritas-system".into(), "team-a".into(), "team-b".into()]));
        assert_eq!(settings(&[]).written_namespaces(), None);
    }
}
