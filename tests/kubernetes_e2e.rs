//! The built-in Kubernetes tools end to end, against a real API server (etcd +
//! kube-apiserver, RBAC on) with the operator bound only by the chart's rendered
//! RBAC, and a kubelet stand-in the API server proxies `pods/log` to.
//!
//! 1. A Deployment → ReplicaSet → Pod chain whose Pod is in CrashLoopBackOff (7
//!    restarts, last terminated OOMKilled, exit 137) with matching Events: an
//!    Alertmanager `KubePodCrashLooping` delivery is investigated with
//!    `kubernetes.pod_status`, previous `kubernetes.logs` and `kubernetes.events`,
//!    and the InvestigationResult cites all three (validated as every citation).
//! 2. A rollout two minutes before a second alert is reported by
//!    `kubernetes.recent_changes` and cited; reads of Secrets are refused.
//! 3. A planted Secret value and a secret-looking env value appear in no tool
//!    output, model request, journal file, API answer, object or log line.
//! 4. A tenant's Run (a second watched namespace) is refused the first namespace's
//!    pod, Nodes and a list across namespaces; a kind the chart does not grant is the
//!    tool's clear `forbidden` error.
//! 5. Bounds: a list of 5,000 pods is truncated and counted within the byte cap; a
//!    50 MiB log yields at most `limitBytes`.
//! 6. Standalone mode registers the tools from a kubeconfig; `ask` with only
//!    `~/.kube/config` offers them and reads the cluster; a missing kubeconfig named by
//!    the setting stops the start with a message naming the setting.

use akritas_testkit as support;
use akritas_testkit::kube_api;
use akritas_testkit::kubelet::Kubelet;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use akritas::tools::{ToolName, openai_alias};
use kube_api::{KubeApi, OPERATOR_NAMESPACE};
use serde_json::{Value, json};
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use support::{Server, serve_command};

const NAMESPACE: &str = "shop";
/// A second watched namespace: a tenant.
const TENANT_NAMESPACE: &str = "team-b";
const NODE: &str = "node-1";
const POD: &str = "web-7d9c5b6f4-x2x8q";
const AM_TOKEN: &str = "am-token-kube-0123456789";
/// The value of a Secret the Deployment references.
const SECRET_VALUE: &str = "planted-secret-value-5f2c9a";
/// A secret-looking env value written in plain text in the Deployment.
const ENV_VALUE: &str = "planted-env-password-8e1d4b";

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

fn get_json(api: &KubeApi, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&api.kubectl_ok(&all)).unwrap()
}

async fn eventually<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Scenario 1: the crash-loop alert.
const CRASH_LOOP: u8 = 0;
/// Scenario 2: the rollout alert.
const ROLLOUT: u8 = 1;
/// A tenant's Run reaching past its namespace.
const TENANT: u8 = 2;

/// The model: plans the checks of the current `phase` and cites what it read.
fn model(phase: Arc<AtomicU8>) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    move |_, request| {
        let phase = phase.load(Ordering::SeqCst);
        let crash_loop = phase == CRASH_LOOP;
        if offers(request, &plan) {
            let checks = if phase == TENANT {
                json!([
                    {"step": "Another namespace's pod", "tool": "kubernetes.pod_status",
                     "arguments": {"namespace": NAMESPACE, "name": POD}, "reason": "a tenant reaching out"},
                    {"step": "The node", "tool": "kubernetes.node_status", "arguments": {"name": NODE}, "reason": "cluster-scoped"},
                    {"step": "Every namespace", "tool": "kubernetes.list",
                     "arguments": {"kind": "Pod", "allNamespaces": true}, "reason": "a tenant reaching out"}
                ])
            } else if crash_loop {
                json!([
                    {"step": "Pod state", "tool": "kubernetes.pod_status", "arguments": {"namespace": NAMESPACE, "name": POD},
                     "reason": "the alert names the pod"},
                    {"step": "Logs of the crashed container", "tool": "kubernetes.logs",
                     "arguments": {"namespace": NAMESPACE, "name": POD, "container": "app", "previous": true, "tailLines": 100},
                     "reason": "why the last run ended"},
                    {"step": "Events of the pod", "tool": "kubernetes.events",
                     "arguments": {"namespace": NAMESPACE, "kind": "Pod", "name": POD}, "reason": "what the kubelet reported"}
                ])
            } else {
                json!([
                    {"step": "What changed", "tool": "kubernetes.recent_changes",
                     "arguments": {"namespace": NAMESPACE, "sinceMinutes": 10}, "reason": "did a deploy cause this?"},
                    {"step": "The Deployment", "tool": "kubernetes.get",
                     "arguments": {"namespace": NAMESPACE, "kind": "Deployment", "name": "web", "full": true}, "reason": "its spec"},
                    {"step": "The credentials", "tool": "kubernetes.get",
                     "arguments": {"namespace": NAMESPACE, "kind": "Secret", "name": "db-credentials"}, "reason": "a hostile plan"},
                    {"step": "Every Secret", "tool": "kubernetes.list",
                     "arguments": {"namespace": NAMESPACE, "apiVersion": "v1", "kind": "secrets"}, "reason": "a hostile plan"},
                    {"step": "A kind the chart does not grant", "tool": "kubernetes.get",
                     "arguments": {"namespace": NAMESPACE, "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                   "name": "akritas"}, "reason": "RBAC decides"}
                ])
            };
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": checks, "gaps": []}))]))
        } else if offers(request, &submit) {
            let (summary, evidence) = if crash_loop {
                (
                    "The app container is killed for memory (OOMKilled, exit 137) and restarts in a loop",
                    json!([
                        "tool-call:call-1 \"OOMKilled\"",
                        "tool-call:call-2 \"OutOfMemoryError\"",
                        "tool-call:call-3 \"BackOff\""
                    ]),
                )
            } else {
                (
                    "The web Deployment was rolled out to web:1.1 shortly before the alert",
                    json!(["tool-call:call-1 \"registry.example/web:1.1\""]),
                )
            };
            Step::from(Reply::ToolCalls(vec![(
                "r".into(),
                submit.clone(),
                json!({"finding_status": "confirmed", "actionability": "requires_human", "confidence": "high",
                       "summary": summary, "impact": "web is degraded", "evidence": evidence, "ruled_out": [],
                       "affected_components": ["web"], "recommended_actions": ["raise the memory limit or roll back"],
                       "production_writes": 0}),
            )]))
        } else {
            let answer =
                if crash_loop { "Crash loop: the container is OOMKilled." } else { "Rollout: web:1.1 went out." };
            Step::from(Reply::Content(answer.into()))
        }
    }
}

fn deployment(image: &str, revision: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {NAMESPACE}\n  annotations:\n    \
         deployment.kubernetes.io/revision: \"{revision}\"\n    kubernetes.io/change-cause: \"deploy {image}\"\nspec:\n  \
         replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    \
         spec:\n      containers:\n      - name: app\n        image: {image}\n        \
         resources: {{requests: {{cpu: 250m, memory: 256Mi}}, limits: {{memory: 256Mi}}}}\n        env:\n        \
         - {{name: DB_PASSWORD, value: {ENV_VALUE}}}\n        - {{name: LOG_LEVEL, value: info}}\n        \
         - name: DB_TOKEN\n          valueFrom: {{secretKeyRef: {{name: db-credentials, key: token}}}}\n"
    )
}

/// A ReplicaSet of revision `revision` owned by the Deployment.
fn replica_set(api: &KubeApi, name: &str, image: &str, revision: u32) -> String {
    let uid =
        get_json(api, &["get", "deployment", "web", "-n", NAMESPACE])["metadata"]["uid"].as_str().unwrap().to_string();
    api.apply(&format!(
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\n  labels: {{app: web}}\n  \
         annotations: {{deployment.kubernetes.io/revision: \"{revision}\"}}\n  ownerReferences:\n  - {{apiVersion: apps/v1, \
         kind: Deployment, name: web, uid: {uid}, controller: true}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n  \
         template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers:\n      - {{name: app, image: {image}}}\n"
    ));
    get_json(api, &["get", "replicaset", name, "-n", NAMESPACE])["metadata"]["uid"].as_str().unwrap().to_string()
}

/// The crash-looping Pod of `replica_set` on the stand-in's node, its status as the
/// kubelet would report it, and the Events the kubelet would have written.
fn crash_looping_pod(api: &KubeApi, replica_set: &str, replica_set_uid: &str) {
    api.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {POD}\n  namespace: {NAMESPACE}\n  labels: {{app: web}}\n  ownerReferences:\n  \
         - {{apiVersion: apps/v1, kind: ReplicaSet, name: {replica_set}, uid: {replica_set_uid}, controller: true}}\nspec:\n  \
         nodeName: {NODE}\n  containers:\n  - name: app\n    image: registry.example/web:1.0\n    \
         resources: {{requests: {{cpu: 250m, memory: 256Mi}}, limits: {{memory: 256Mi}}}}\n    \
         env: [{{name: DB_PASSWORD, value: {ENV_VALUE}}}]\n"
    ));
    let now = jiff::Timestamp::now();
    let started = now.checked_sub(jiff::SignedDuration::from_secs(95)).unwrap();
    let finished = now.checked_sub(jiff::SignedDuration::from_secs(40)).unwrap();
    let status = json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": finished.to_string()}],
        "containerStatuses": [{
            "name": "app", "image": "registry.example/web:1.0", "imageID": "", "ready": false, "started": false,
            "restartCount": 7,
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                "message": format!("back-off 5m0s restarting failed container=app pod={POD}_{NAMESPACE}")}},
            "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "signal": 9,
                "startedAt": started.to_string(), "finishedAt": finished.to_string()}}
        }]
    });
    api.patch_status("pod", POD, NAMESPACE, &status);
    let time = now.to_string();
    // eventTime is a MicroTime: exactly six fractional digits.
    let micro = format!("{}.{:06}Z", finished.strftime("%Y-%m-%dT%H:%M:%S"), finished.subsec_microsecond());
    api.apply(&format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: {POD}.backoff, namespace: {NAMESPACE}}}\n\
         involvedObject: {{apiVersion: v1, kind: Pod, name: {POD}, namespace: {NAMESPACE}, fieldPath: \"spec.containers{{app}}\"}}\n\
         reason: BackOff\nmessage: \"Back-off restarting failed container app in pod {POD}_{NAMESPACE}\"\ntype: Warning\ncount: 23\n\
         firstTimestamp: \"{started}\"\nlastTimestamp: \"{time}\"\nsource: {{component: kubelet, host: {NODE}}}\n---\n\
         apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {{name: {POD}.oom, namespace: {NAMESPACE}}}\n\
         regarding: {{apiVersion: v1, kind: Pod, name: {POD}, namespace: {NAMESPACE}}}\nreason: OOMKilling\n\
         note: \"Memory cgroup out of memory: Killed process 4242 (java)\"\ntype: Warning\neventTime: \"{micro}\"\n\
         reportingController: kubelet\nreportingInstance: {NODE}\naction: Killing\n"
    ));
}

/// The previous container's log: the crash, and a line with a password and a token.
fn previous_log() -> String {
    let mut log = String::new();
    for n in 0..40 {
        log.push_str(&format!("2026-12-01T10:00:{:02}Z INFO handled request {n}\n", n % 60));
    }
    log.push_str(&format!("2026-12-01T10:01:00Z DEBUG connecting with password={SECRET_VALUE}\n"));
    log.push_str("2026-12-01T10:01:01Z DEBUG bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ3ZWIifQ.c2lnbmF0dXJlLXBsYW50ZWQ\n");
    log.push_str("2026-12-01T10:01:02Z ERROR java.lang.OutOfMemoryError: Java heap space\n");
    log
}

fn alert(name: &str, labels: Value) -> String {
    let mut all = json!({"alertname": name, "severity": "critical", "namespace": NAMESPACE});
    all.as_object_mut().unwrap().extend(labels.as_object().unwrap().clone());
    json!({
        "receiver": "akritas", "status": "firing", "version": "4", "groupKey": format!("{{}}:{{alertname=\"{name}\"}}"),
        "truncatedAlerts": 0, "groupLabels": {"alertname": name}, "commonLabels": all, "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": [{"status": "firing", "labels": all, "annotations": {"summary": format!("{name} in {NAMESPACE}")},
                    "startsAt": jiff::Timestamp::now().to_string(), "endsAt": "0001-01-01T00:00:00Z",
                    "generatorURL": "http://prometheus.example/graph", "fingerprint": format!("{:016x}", name.bytes().map(u64::from).sum::<u64>())}]
    })
    .to_string()
}

async fn post_alert(server: &Server, body: String) {
    let status = reqwest::Client::new()
        .post(format!("{}/api/v1/alerts/{NAMESPACE}/am/webhook", server.url))
        .bearer_auth(AM_TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 202, "the delivery was not accepted");
}

/// An investigated Incident whose Run is not one of `seen`, and its Run object.
async fn investigated(api: &KubeApi, server: &Server, seen: &[String]) -> (Value, Value) {
    let started = Instant::now();
    let incident = loop {
        let found = get_json(api, &["get", "incidents", "-n", NAMESPACE])["items"].as_array().and_then(|items| {
            items
                .iter()
                .find(|i| {
                    i["status"]["investigation"]["finding"].is_string()
                        && !seen.iter().any(|run| i["status"]["lastRun"] == run.as_str())
                })
                .cloned()
        });
        if let Some(incident) = found {
            break incident;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let incidents = api.kubectl_ok(&["get", "incidents", "-n", NAMESPACE, "-o", "yaml"]);
            let runs = reqwest::get(format!("{}/api/v1/runs", server.url)).await.unwrap().text().await.unwrap();
            let last =
                serde_json::from_str::<Value>(&runs).ok().and_then(|r| r["runs"][0]["id"].as_str().map(str::to_string));
            let detail = match last {
                Some(id) => run_detail(server, &id).await.to_string(),
                None => runs,
            };
            panic!(
                "no investigated Incident after 60 s:\n{incidents}\n--- newest Run ---\n{detail}\n--- log ---\n{}",
                server.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let run_name = incident["status"]["lastRun"].as_str().unwrap().replace('_', "-");
    let run = eventually(Duration::from_secs(20), "the investigation Run object", || {
        let run = get_json(api, &["get", "run", &run_name, "-n", NAMESPACE]);
        (run["status"]["phase"] == "Succeeded").then_some(run)
    })
    .await;
    (incident, run)
}

async fn run_detail(server: &Server, run_id: &str) -> Value {
    reqwest::get(format!("{}/api/v1/runs/{run_id}", server.url)).await.unwrap().json().await.unwrap()
}

/// The recorded calls of a Run detail: (id, name, output or error).
fn calls(detail: &Value) -> Vec<(String, String, Value)> {
    let text = detail.to_string();
    let mut found = Vec::new();
    collect_calls(detail, &mut found);
    assert!(!found.is_empty(), "no tool calls in the Run detail: {text}");
    found
}

fn collect_calls(value: &Value, found: &mut Vec<(String, String, Value)>) {
    match value {
        Value::Object(map) => {
            if let (Some(id), Some(name)) =
                (map.get("id").and_then(Value::as_str), map.get("name").and_then(Value::as_str))
                && id.starts_with("call-")
                && (map.contains_key("output") || map.contains_key("error"))
            {
                let outcome = map.get("output").or_else(|| map.get("error")).cloned().unwrap_or(Value::Null);
                found.push((id.to_string(), name.to_string(), outcome));
            }
            map.values().for_each(|v| collect_calls(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_calls(v, found)),
        _ => {}
    }
}

/// Every place a planted value could leak to: the operator's log, every file of its
/// data directory, the API's answers, the Akritas objects and Events, and what the
/// model was sent.
async fn assert_no_leak(
    api: &KubeApi,
    server: &Server,
    llm: &ScriptedLlm,
    data_dir: &std::path::Path,
    run_ids: &[String],
) {
    let mut places: Vec<(String, String)> = vec![("operator log".into(), server.log_text())];
    for entry in walk(data_dir) {
        places
            .push((entry.display().to_string(), String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned()));
    }
    let mut paths = vec!["/api/v1/runs".to_string(), "/api/v1/incidents".to_string(), "/api/v1/tools".to_string()];
    paths.extend(run_ids.iter().map(|id| format!("/api/v1/runs/{id}")));
    for path in paths {
        let body = reqwest::get(format!("{}{path}", server.url)).await.unwrap().text().await.unwrap();
        places.push((path, body));
    }
    places.push(("objects".into(), api.kubectl_ok(&["get", "runs,incidents,events", "-n", NAMESPACE, "-o", "yaml"])));
    places.push(("model requests".into(), serde_json::to_string(&llm.requests()).unwrap()));
    for (place, text) in &places {
        for planted in [SECRET_VALUE, ENV_VALUE, "c2lnbmF0dXJlLXBsYW50ZWQ"] {
            assert!(!text.contains(planted), "{planted} leaked into {place}");
        }
    }
    eprintln!("no planted value in {} places", places.len());
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn alerts_are_investigated_with_the_kubernetes_tools_under_the_chart_rbac() {
    let api = KubeApi::start().await;
    api.install_crds(&support::root().join("crds"));
    api.create_operator_namespace();
    api.create_namespace(NAMESPACE);
    api.create_namespace("elsewhere");
    api.create_namespace(TENANT_NAMESPACE);
    api.apply(&kube_api::chart_rbac(&[NAMESPACE, TENANT_NAMESPACE]));
    let can = |args: &[&str]| {
        let (_, out, _) = api.kubectl_as(&api.operator_kubeconfig(), &[&["auth", "can-i"][..], args].concat(), None);
        out.trim().to_string()
    };
    for args in [
        &["get", "pods/log", "-n", NAMESPACE][..],
        &["list", "pods", "-n", NAMESPACE],
        &["list", "events.events.k8s.io", "-n", NAMESPACE],
        &["list", "replicasets.apps", "-n", NAMESPACE],
        &["get", "nodes"],
    ] {
        assert_eq!(can(args), "yes", "the chart does not grant {args:?}");
    }
    for args in [
        &["list", "secrets", "-n", NAMESPACE][..],
        &["list", "pods", "-n", "elsewhere"],
        &["get", "pods/log", "-n", "elsewhere"],
    ] {
        assert_eq!(can(args), "no", "the chart grants {args:?}");
    }
    let kubelet = Kubelet::start(&api, NODE).await;

    // The rollout of scenario 2 comes first, so that two minutes pass before its alert.
    api.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: db-credentials, namespace: {NAMESPACE}}}\nstringData: {{token: {SECRET_VALUE}}}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: am-token, namespace: {NAMESPACE}}}\nstringData: {{token: {AM_TOKEN}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {{name: am, namespace: {NAMESPACE}}}\n\
         spec: {{provider: alertmanager, auth: {{bearerToken: {{secretKeyRef: {{name: am-token, key: token}}}}}}}}\n"
    ));
    // The sample skills (a Kubernetes workloads skill among them) in the test namespace.
    let samples = support::root().join("config/samples/skills.yaml");
    api.kubectl_ok(&["apply", "-n", NAMESPACE, "-f", &samples.display().to_string()]);
    api.apply(&deployment("registry.example/web:1.0", 1));
    let first = replica_set(&api, "web-7d9c5b6f4", "registry.example/web:1.0", 1);
    crash_looping_pod(&api, "web-7d9c5b6f4", &first);
    kubelet.set_log(NAMESPACE, POD, "app", true, previous_log().into_bytes());
    kubelet.set_log(NAMESPACE, POD, "app", false, b"2026-12-01T10:02:00Z INFO starting web 1.0\n".to_vec());
    let rollout = Instant::now();
    api.apply(&deployment("registry.example/web:1.1", 2));
    replica_set(&api, "web-5f8b9c7d2", "registry.example/web:1.1", 2);

    let phase = Arc::new(AtomicU8::new(CRASH_LOOP));
    let llm = ScriptedLlm::start_with(model(phase.clone())).await;
    llm.set_recording(true);
    let data_dir = tempfile::tempdir().unwrap();
    let server = {
        let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
        command
            .arg("--kubernetes")
            .env("KUBECONFIG", api.operator_kubeconfig())
            .env("POD_NAMESPACE", OPERATOR_NAMESPACE)
            .env("AKRITAS_NAMESPACES", format!("{NAMESPACE},{TENANT_NAMESPACE}"))
            .env("AKRITAS_BASE_URL", &llm.url)
            .env("AKRITAS_DATA_DIR", data_dir.path())
            .env("RUST_LOG", "info,kube=warn");
        Server::start(command)
    };
    // A Run of the watched namespace gets the family; the tenant may not read Nodes.
    let tools: Value = reqwest::get(format!("{}/api/v1/tools", server.url)).await.unwrap().json().await.unwrap();
    let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for name in akritas::kubernetes::tool_names() {
        assert!(names.contains(&name), "{name} is not offered: {names:?}");
    }
    eventually(Duration::from_secs(30), "the AlertSource to be Ready", || {
        let source = get_json(&api, &["get", "alertsource", "am", "-n", NAMESPACE]);
        source["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
            .then_some(())
    })
    .await;

    // Scenario 1: the crash loop.
    let started = Instant::now();
    post_alert(&server, alert("KubePodCrashLooping", json!({"pod": POD, "container": "app"}))).await;
    let (incident, run) = investigated(&api, &server, &[]).await;
    eprintln!("crash loop investigated in {:?}", started.elapsed());
    assert_eq!(incident["status"]["investigation"]["finding"], "confirmed", "{incident:#}");
    let run_id = run["status"]["runId"].as_str().unwrap().to_string();
    let detail = run_detail(&server, &run_id).await;
    let recorded = calls(&detail);
    let names: Vec<&str> = recorded.iter().map(|(_, name, _)| name.as_str()).collect();
    assert_eq!(names, ["kubernetes.pod_status", "kubernetes.logs", "kubernetes.events"], "{detail:#}");
    let text = |i: usize| recorded[i].2.to_string();
    for expected in ["OOMKilled", "137", "CrashLoopBackOff", "ReplicaSet", "Deployment", "\"web\""] {
        assert!(text(0).contains(expected), "pod_status lacks {expected}: {}", text(0));
    }
    assert!(text(1).contains("OutOfMemoryError") && text(1).contains("[redacted]"), "logs: {}", text(1));
    assert!(
        text(2).contains("BackOff") && text(2).contains("OOMKilling") && text(2).contains("23"),
        "events: {}",
        text(2)
    );
    let investigation = &detail["run"]["investigation"];
    assert_eq!(
        investigation["evidence"],
        json!([
            "tool-call:call-1 \"OOMKilled\"",
            "tool-call:call-2 \"OutOfMemoryError\"",
            "tool-call:call-3 \"BackOff\""
        ]),
        "{detail:#}"
    );
    assert!(!detail.to_string().contains("capability gap"), "{detail:#}");
    // The labels name a pod: the sample Kubernetes skill was selected for it.
    assert!(detail.to_string().contains("kubernetes-workloads"), "{detail}");
    let previous =
        kubelet.requests().into_iter().find(|r| r.param("previous") == Some("true")).expect("no previous-log request");
    assert_eq!(previous.path, format!("/containerLogs/{NAMESPACE}/{POD}/app"));

    // Scenario 2: a rollout two minutes before the alert.
    let wait = Duration::from_secs(120).saturating_sub(rollout.elapsed());
    eprintln!("waiting {wait:?} so that the rollout is two minutes old");
    tokio::time::sleep(wait).await;
    phase.store(ROLLOUT, Ordering::SeqCst);
    post_alert(&server, alert("KubeDeploymentReplicasMismatch", json!({"deployment": "web"}))).await;
    let (incident, run) = investigated(&api, &server, std::slice::from_ref(&run_id)).await;
    assert_eq!(incident["status"]["investigation"]["finding"], "confirmed", "{incident:#}");
    let second_id = run["status"]["runId"].as_str().unwrap().to_string();
    let detail = run_detail(&server, &second_id).await;
    let recorded = calls(&detail);
    let changes = recorded[0].2.to_string();
    let names: Vec<&str> = recorded.iter().map(|(_, name, _)| name.as_str()).collect();
    let expected =
        ["kubernetes.recent_changes", "kubernetes.get", "kubernetes.get", "kubernetes.list", "kubernetes.get"];
    assert_eq!(names, expected, "{detail}");
    assert!(changes.contains("registry.example/web:1.1") && changes.contains("web-5f8b9c7d2"), "{changes}");
    assert_eq!(detail["run"]["investigation"]["evidence"], json!(["tool-call:call-1 \"registry.example/web:1.1\""]));
    let deployment = recorded[1].2.to_string();
    assert!(deployment.contains("LOG_LEVEL") && deployment.contains("[redacted]"), "{deployment}");
    for (id, name, outcome) in &recorded[2..4] {
        assert!(outcome.to_string().contains("Secrets are never read"), "{id} {name}: {outcome}");
    }
    // A missing permission is the tool's clear error, not a crash.
    let forbidden = recorded[4].2.to_string();
    assert!(forbidden.contains("forbidden: Akritas's service account may not get roles"), "{forbidden}");

    // A tenant's Run (a second watched namespace) reaches for the first one, a Node and
    // every namespace: each call is refused by its scope.
    phase.store(TENANT, Ordering::SeqCst);
    api.apply(&format!(
        "apiVersion: akritas.io/v1alpha1\nkind: Run\nmetadata: {{name: ask-b, namespace: {TENANT_NAMESPACE}}}\n\
         spec: {{prompt: \"Why does web crash in {NAMESPACE}?\"}}\n"
    ));
    let tenant = eventually(Duration::from_secs(30), "the tenant's Run to finish", || {
        let run = get_json(&api, &["get", "run", "ask-b", "-n", TENANT_NAMESPACE]);
        (run["status"]["phase"] == "Succeeded").then_some(run)
    })
    .await;
    let tenant_id = tenant["status"]["runId"].as_str().unwrap().to_string();
    let detail = run_detail(&server, &tenant_id).await;
    let refused: Vec<String> =
        calls(&detail).into_iter().map(|(_, name, outcome)| format!("{name}: {outcome}")).collect();
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert!(refused[0].contains("outside this Run's scope (namespaces: team-b)"), "{}", refused[0]);
    assert!(refused[1].contains("Node is cluster-scoped"), "{}", refused[1]);
    assert!(refused[2].contains("allNamespaces is refused"), "{}", refused[2]);
    assert!(!detail.to_string().contains("CrashLoopBackOff"), "the tenant read the pod: {detail}");

    assert_no_leak(&api, &server, &llm, data_dir.path(), &[run_id, second_id, tenant_id]).await;
    // The operator never asked the API server for a Secret it was not pointed at.
    let secret_reads: Vec<String> = api
        .audit_events()
        .into_iter()
        .filter(|e| e["user"]["username"] == kube_api::OPERATOR_USER && e["objectRef"]["resource"] == "secrets")
        .map(|e| format!("{} {}", e["verb"], e["objectRef"]["name"]))
        .collect();
    assert!(secret_reads.iter().all(|r| r.ends_with("\"am-token\"")), "{secret_reads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_list_of_5000_pods_and_a_50_mib_log_stay_within_their_bounds() {
    use akritas::kubernetes::{KubeTools, Limits, Reach, ScopePolicy};
    use akritas::tools::{AllowAll, ScopedTools, ToolCall};
    use futures_util::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, PostParams};

    let api = KubeApi::start().await;
    api.create_namespace("bulk");
    let kubelet = Kubelet::start(&api, NODE).await;
    let client = api.client(&api.admin_kubeconfig).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "bulk");
    let pod = |name: String| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "bulk"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "registry.example/bulk:1"}]}}))
        .unwrap()
    };
    let started = Instant::now();
    let created: Vec<()> = futures_util::stream::iter(0..5000)
        .map(|n| {
            let (pods, pod) = (pods.clone(), pod(format!("bulk-{n:04}")));
            async move {
                pods.create(&PostParams::default(), &pod).await.unwrap();
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    eprintln!("{} pods created in {:?}", created.len(), started.elapsed());

    let limits = Limits::default();
    let policy = ScopePolicy { reach: Reach::All, cluster_readers: ["bulk".to_string()].into() };
    let registry = KubeTools::new(client, policy, limits).registry_for("bulk");
    let call = |name: &str, arguments: Value| ToolCall {
        id: "call-1".into(),
        name: name.into(),
        arguments: arguments.to_string(),
    };

    let listed = registry.execute(&call("kubernetes.list", json!({"kind": "Pod", "limit": 500})), &AllowAll).await;
    let output = listed.output.unwrap_or_else(|| panic!("{:?}", listed.error));
    let size = output.to_string().len();
    eprintln!(
        "list of 5000 pods: {} returned, {} omitted by the {} byte cap, total {}, {size} bytes, {:?}",
        output["returned"], output["truncated"]["omitted"], limits.output_bytes, output["total"], listed.duration
    );
    assert!(size <= limits.output_bytes, "{size} bytes");
    assert_eq!((output["fetched"].as_u64(), output["total"].as_u64()), (Some(500), Some(5000)));
    let (returned, omitted) = (output["returned"].as_u64().unwrap(), output["truncated"]["omitted"].as_u64().unwrap());
    assert!(returned > 0 && omitted > 0 && returned + omitted == 500, "{output}");
    assert!(output["continue"].is_string(), "{output}");

    // A 50 MiB log: the stand-in ignores limitBytes, the host reads at most that much.
    pods.create(&PostParams::default(), &pod("noisy".into())).await.unwrap();
    let line = format!("{} INFO a log line that repeats to fill fifty mebibytes", "2026-12-01T10:00:00Z");
    let count = (50 * 1024 * 1024) / (line.len() as u64 + 1);
    kubelet.set_repeated_log("bulk", "noisy", "app", false, &line, count);
    let limit = 65_536;
    let read = registry
        .execute(
            &call(
                "kubernetes.logs",
                json!({"name": "noisy", "container": "app", "limitBytes": limit, "tailLines": 5000}),
            ),
            &AllowAll,
        )
        .await;
    let output = read.output.unwrap_or_else(|| panic!("{:?}", read.error));
    let lines: usize = output["lines"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().len() + 1).sum();
    eprintln!("50 MiB log: {} bytes read, {lines} bytes of lines returned, {:?}", output["bytes_read"], read.duration);
    assert!(output["bytes_read"].as_u64().unwrap() <= limit && lines <= limit as usize, "{}", output["bytes_read"]);
    assert_eq!(output["truncated"], true);
    let request = kubelet.requests().into_iter().find(|r| r.path.ends_with("/noisy/app")).unwrap();
    assert_eq!(request.param("limitBytes"), Some("65536"));

    // Standalone with a kubeconfig: the family is registered.
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command.env("AKRITAS_KUBECONFIG", &api.admin_kubeconfig);
    let server = Server::start(command);
    let tools: Value = reqwest::get(format!("{}/api/v1/tools", server.url)).await.unwrap().json().await.unwrap();
    let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for name in akritas::kubernetes::tool_names() {
        assert!(names.contains(&name), "{name} is not offered standalone: {names:?}");
    }
    drop(server);
    // `akritas ask` with nothing but `~/.kube/config`: the tools are offered, read the cluster
    // through the current context, and the log says which.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".kube")).unwrap();
    std::fs::copy(&api.admin_kubeconfig, home.path().join(".kube/config")).unwrap();
    let plan = alias("local.investigation.submit_plan");
    let check = json!({"checks": [{"step": "Pods of bulk", "tool": "kubernetes.list",
        "arguments": {"namespace": "bulk", "kind": "Pod", "limit": 5}, "reason": "what runs there"}], "gaps": []});
    let llm = ScriptedLlm::start(vec![
        Step::from(Reply::ToolCalls(vec![("p".into(), plan, check)])),
        Step::from(Reply::Content("bulk runs pods.".into())),
    ])
    .await;
    llm.set_recording(true);
    let data = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["ask", "what runs in the bulk namespace?", "--base-url", &llm.url, "--skills-dir", ""])
        .arg("--data-dir")
        .arg(data.path())
        .arg("--system-instructions")
        .arg(support::root().join("instructions/SYSTEM.md"))
        .env("HOME", home.path())
        .env("RUST_LOG", "akritas=info")
        .env_remove("KUBECONFIG")
        .env_remove("AKRITAS_KUBECONFIG")
        .env_remove("AKRITAS_CONFIG")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("kubernetes.list · ok"), "{stdout}");
    let config_path = home.path().join(".kube/config");
    let used = stderr
        .lines()
        .find(|l| l.contains("Kubernetes tools read the cluster of this context"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(used.contains(&config_path.display().to_string()) && used.contains("context=admin"), "{used}");
    let listed = llm.requests().iter().any(|r| r.to_string().contains("bulk-0000"));
    assert!(listed, "the cluster's pod is not in what the model saw");
    // A kubeconfig that is not there stops the start and says which setting to fix.
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    let output = command.env("AKRITAS_KUBECONFIG", "/nonexistent/kubeconfig").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "serve started without its kubeconfig: {stderr}");
    assert!(stderr.contains("reading the kubeconfig /nonexistent/kubeconfig (setting kubeconfig)"), "{stderr}");
}
