//! `kubernetes.events`, `kubernetes.recent_changes` and `kubernetes.logs` against the
//! real API server, called through the tool registry: Events written through both
//! Events APIs are merged and grouped with their counts, newest first; a Deployment's
//! image change, a ConfigMap's data change and a new ReplicaSet revision made in the
//! window are reported with their field managers while older objects are not; a
//! pod's log is refused with a clear reason when there is none to read (this server
//! has no kubelet: the log stream itself is covered by the unit tests and the
//! kubelet stand-in's end-to-end test).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use akritas::kubernetes::{KubeTools, Limits, Reach, ScopePolicy};
use akritas::tools::{AllowAll, ErrorCode, Registry, ToolCall, ToolResult};
use akritas_testkit::kube_api::KubeApi;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

const NS: &str = "shop";

async fn call(registry: &Registry, name: &str, args: Value) -> ToolResult {
    let call = ToolCall { id: "call-1".into(), name: name.into(), arguments: args.to_string() };
    registry.execute(&call, &AllowAll).await
}

async fn output(registry: &Registry, name: &str, args: Value) -> Value {
    let result = call(registry, name, args.clone()).await;
    assert!(result.error.is_none(), "{name} {args}: {:?}", result.error);
    result.output.unwrap()
}

async fn failure(registry: &Registry, name: &str, args: Value) -> (ErrorCode, String) {
    let result = call(registry, name, args.clone()).await;
    let error = result.error.unwrap_or_else(|| panic!("{name} {args} succeeded: {:?}", result.output));
    (error.code, error.message)
}

/// `minutes` ago, as a core `Time` (seconds).
fn ago(minutes: i64) -> String {
    (Timestamp::now() - SignedDuration::from_mins(minutes)).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: {NS}}}\nspec:\n  replicas: 1\n  \
         selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      \
         containers: [{{name: app, image: \"{image}\"}}]\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn events_recent_changes_and_logs_through_the_registry() {
    let api = KubeApi::start().await;
    api.create_namespace(NS);

    // Objects older than the one-minute window of recent_changes.
    api.apply(&deployment("shop/web:1.0"));
    api.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: web-config, namespace: {NS}}}\ndata: {{LOG_LEVEL: info}}\n"
    ));
    api.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: old-config, namespace: {NS}}}\ndata: {{A: b}}\n"
    ));
    let old_written = Instant::now();

    let client = api.client(&api.admin_kubeconfig).await;
    let policy = ScopePolicy { reach: Reach::All, cluster_readers: BTreeSet::new() };
    let tools = KubeTools::new(client, policy.clone(), Limits::default());
    let registry = tools.registry(policy.access_for(NS)).unwrap();

    // Events: a core Event counted 5 times and an events.k8s.io Event with the same
    // reason for pod web-1, an older Normal event for it, and one of another pod.
    api.apply(&format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: web-1.backoff, namespace: {NS}}}\n\
         involvedObject: {{kind: Pod, name: web-1, namespace: {NS}}}\ntype: Warning\nreason: BackOff\n\
         message: Back-off restarting failed container app\ncount: 5\nfirstTimestamp: \"{}\"\nlastTimestamp: \"{}\"\n\
         source: {{component: kubelet}}\n",
        ago(8),
        ago(1)
    ));
    let now_micro = format!("{}.000000Z", Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S"));
    api.apply(&format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {{name: web-1.backoff2, namespace: {NS}}}\n\
         regarding: {{kind: Pod, name: web-1, namespace: {NS}}}\ntype: Warning\nreason: BackOff\n\
         note: Back-off restarting failed container app (again)\neventTime: \"{now_micro}\"\n\
         reportingController: kubelet\nreportingInstance: node-1\naction: Restart\n"
    ));
    api.apply(&format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: web-1.scheduled, namespace: {NS}}}\n\
         involvedObject: {{kind: Pod, name: web-1, namespace: {NS}}}\ntype: Normal\nreason: Scheduled\n\
         message: Successfully assigned shop/web-1 to node-1\nfirstTimestamp: \"{0}\"\nlastTimestamp: \"{0}\"\n\
         source: {{component: default-scheduler}}\n",
        ago(10)
    ));
    api.apply(&format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: db-0.unhealthy, namespace: {NS}}}\n\
         involvedObject: {{kind: Pod, name: db-0, namespace: {NS}}}\ntype: Warning\nreason: Unhealthy\n\
         message: Readiness probe failed\ncount: 2\nlastTimestamp: \"{}\"\n",
        ago(3)
    ));

    let pod_events = output(&registry, "kubernetes.events", json!({"kind": "pod", "name": "web-1"})).await;
    assert_eq!(pod_events["object"], "Pod/web-1", "{pod_events:#}");
    assert_eq!(pod_events["events_read"], json!({"events.k8s.io/v1": 3, "v1": 3}), "{pod_events:#}");
    assert_eq!(pod_events["events"], 3, "both views of each Event count once: {pod_events:#}");
    let groups = pod_events["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{pod_events:#}");
    assert_eq!(groups[0]["reason"], "BackOff");
    assert_eq!(groups[0]["type"], "Warning");
    assert_eq!(groups[0]["count"], 6, "5 + 1, not doubled by the second API: {pod_events:#}");
    assert_eq!(groups[0]["events"], 2);
    assert_eq!(groups[0]["message"], "Back-off restarting failed container app (again)");
    assert_eq!(groups[0]["source"], "kubelet");
    assert_eq!(groups[1]["reason"], "Scheduled");
    assert_eq!(groups[1]["count"], 1);
    assert!(groups[0]["last_seen"].as_str() > groups[1]["last_seen"].as_str(), "{pod_events:#}");
    assert_eq!(pod_events["omitted"], 0);

    let warnings = output(&registry, "kubernetes.events", json!({"type": "Warning"})).await;
    let reasons: Vec<(&str, &str)> = warnings["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["object"].as_str().unwrap(), g["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(reasons, [("Pod/web-1", "BackOff"), ("Pod/db-0", "Unhealthy")], "{warnings:#}");
    let recent = output(&registry, "kubernetes.events", json!({"name": "web-1", "sinceMinutes": 5})).await;
    assert_eq!(recent["groups"].as_array().unwrap().len(), 1, "the 10-minute-old event is outside: {recent:#}");
    let (code, message) = failure(&registry, "kubernetes.events", json!({"namespace": "kube-system"})).await;
    assert_eq!(code, ErrorCode::ToolError);
    assert!(message.contains("outside this Run's scope"), "{message}");

    // Logs: no kubelet here, so only the refusals before any log is read.
    api.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: pending, namespace: {NS}}}\nspec:\n  containers: [{{name: app, image: busybox}}]\n"
    ));
    api.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: placed, namespace: {NS}}}\nspec:\n  nodeName: node-1\n  \
         containers: [{{name: app, image: busybox}}, {{name: proxy, image: envoy}}]\n"
    ));
    let (code, message) = failure(&registry, "kubernetes.logs", json!({"name": "pending"})).await;
    assert_eq!(code, ErrorCode::ToolError);
    assert!(message.contains("not scheduled to a node"), "{message}");
    let (_, message) = failure(&registry, "kubernetes.logs", json!({"name": "placed", "container": "sidecar"})).await;
    assert_eq!(message, "pod \"placed\" has no container \"sidecar\" (containers: app, proxy)");
    let (_, message) = failure(&registry, "kubernetes.logs", json!({"name": "missing"})).await;
    assert_eq!(message, "not found: get pods \"missing\" in namespace \"shop\"");
    let (_, message) = failure(&registry, "kubernetes.logs", json!({"name": "placed", "regex": "(oops"})).await;
    assert!(message.contains("not a valid regular expression"), "{message}");
    let (code, _) = failure(&registry, "kubernetes.logs", json!({"name": "placed", "limitBytes": 10 << 20})).await;
    assert_eq!(code, ErrorCode::InvalidArguments);

    // Changes inside the window: wait until the first objects are older than a minute.
    let window = Duration::from_secs(62);
    tokio::time::sleep(window.saturating_sub(old_written.elapsed())).await;
    api.kubectl_ok(&[
        "patch",
        "deployment",
        "web",
        "-n",
        NS,
        "--field-manager=deploy-bot",
        "--type=strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"shop/web:2.0"}]}}}}"#,
    ]);
    api.kubectl_ok(&[
        "patch",
        "configmap",
        "web-config",
        "-n",
        NS,
        "--field-manager=config-bot",
        "-p",
        r#"{"data":{"LOG_LEVEL":"debug"}}"#,
    ]);
    let uid = api.kubectl_ok(&["get", "deployment", "web", "-n", NS, "-o", "jsonpath={.metadata.uid}"]);
    api.apply(&format!(
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: web-2\n  namespace: {NS}\n  annotations: \
         {{deployment.kubernetes.io/revision: \"2\"}}\n  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, \
         name: web, uid: \"{uid}\", controller: true}}]\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: web, \
         rev: \"2\"}}}}\n  template:\n    metadata: {{labels: {{app: web, rev: \"2\"}}}}\n    spec:\n      containers: \
         [{{name: app, image: \"shop/web:2.0\"}}]\n"
    ));
    api.apply(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {NS}}}\nspec:\n  selector: {{app: web}}\n  \
         ports: [{{port: 80}}]\n"
    ));

    let changed = output(&registry, "kubernetes.recent_changes", json!({"sinceMinutes": 1})).await;
    assert_eq!(changed["window_minutes"], 1);
    assert_eq!(changed["examined"]["ConfigMap"], 2, "{changed:#}");
    let changes = changed["changes"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str)> = changes
        .iter()
        .map(|c| (c["kind"].as_str().unwrap(), c["name"].as_str().unwrap(), c["change"].as_str().unwrap()))
        .collect();
    assert_eq!(summary.len(), 4, "{changed:#}");
    for expected in [
        ("Deployment", "web", "spec_changed"),
        ("ConfigMap", "web-config", "data_changed"),
        ("ReplicaSet", "web-2", "new_revision"),
        ("Service", "web", "created"),
    ] {
        assert!(summary.contains(&expected), "{expected:?} missing: {changed:#}");
    }
    let times: Vec<&str> = changes.iter().map(|c| c["time"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first: {times:?}");
    let find = |kind: &str| changes.iter().find(|c| c["kind"] == kind).unwrap();
    let deploy = find("Deployment");
    assert_eq!(deploy["manager"], "deploy-bot", "{deploy:#}");
    assert_eq!(deploy["operation"], "Update");
    assert_eq!(deploy["images"], json!(["shop/web:2.0"]));
    assert!(
        deploy["detail"].as_str().unwrap().starts_with("spec fields managed by deploy-bot: template"),
        "{deploy:#}"
    );
    let config = find("ConfigMap");
    assert_eq!(config["manager"], "config-bot");
    assert_eq!(config["detail"], "keys managed by config-bot: LOG_LEVEL");
    assert_eq!(find("ReplicaSet")["detail"], "new revision 2 of Deployment web with image(s) shop/web:2.0");
    assert_eq!(changed["omitted"], 0);

    // A wider window sees the creations too; the data of ConfigMaps is never in the output.
    let wider = output(&registry, "kubernetes.recent_changes", json!({"sinceMinutes": 30})).await;
    let created: BTreeSet<String> = wider["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["change"] == "created")
        .map(|c| format!("{}/{}", c["kind"].as_str().unwrap(), c["name"].as_str().unwrap()))
        .collect();
    let expected: BTreeSet<String> =
        ["Deployment/web", "ConfigMap/web-config", "ConfigMap/old-config", "Service/web"].map(String::from).into();
    assert_eq!(created, expected, "{wider:#}");
    assert!(!wider.to_string().contains("debug"), "ConfigMap values are not read: {wider:#}");
}
