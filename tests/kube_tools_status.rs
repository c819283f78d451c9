//! `kubernetes.pod_status`, `kubernetes.node_status` and `kubernetes.rollout_history`
//! against the real API server: objects made by the test (no controller-manager
//! runs, so the Deployment → ReplicaSet → Pod chain and every status are written by
//! hand), read through the tool registry as a Run would, and refused for a tenant.

use std::collections::BTreeSet;

use akritas::kubernetes::{Access, KubeTools, Limits, Reach, ScopePolicy};
use akritas::tools::{AllowAll, Registry, ToolCall, ToolResult};
use akritas_testkit::kube_api::KubeApi;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const NS: &str = "shop";

async fn create<K>(api: &Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    api.create(&PostParams::default(), &object).await.expect("create")
}

async fn patch_status<K>(api: &Api<K>, name: &str, status: Value)
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
        .await
        .unwrap_or_else(|e| panic!("patch the status of {name}: {e}"));
}

fn owner(kind: &str, name: &str, uid: &str) -> Value {
    json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}])
}

async fn call(registry: &Registry, name: &str, arguments: Value) -> ToolResult {
    let call = ToolCall { id: "call-1".into(), name: name.into(), arguments: arguments.to_string() };
    registry.execute(&call, &AllowAll).await
}

async fn output(registry: &Registry, name: &str, arguments: Value) -> Value {
    let result = call(registry, name, arguments).await;
    assert!(result.is_ok(), "{name} failed: {}", result.to_json_string());
    result.output.expect("output")
}

async fn refusal(registry: &Registry, name: &str, arguments: Value) -> String {
    let result = call(registry, name, arguments).await;
    assert!(!result.is_ok(), "{name} was not refused: {}", result.to_json_string());
    result.error.expect("error").message
}

/// Namespace `shop`: Deployment `web` at revision 2 of 3 replicas, one updated; its
/// ReplicaSets `web-1` (shop/web:1) and `web-2` (shop/web:2, with a change-cause);
/// a look-alike ReplicaSet it does not own; Pod `web-2-abcde` crash-looping after an
/// OOM kill; Pod `orphan` whose ReplicaSet is gone. Node `node-1` under disk
/// pressure with that Pod, a running Pod of namespace `batch` and a finished one.
async fn seed(api: &KubeApi, client: &kube::Client) {
    for namespace in [NS, "batch"] {
        api.create_namespace(namespace);
        // No controller-manager makes the default service account Pods are admitted with.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        create(&accounts, json!({"metadata": {"name": "default"}})).await;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    create(
        &nodes,
        json!({"metadata": {"name": "node-1"},
            "spec": {"taints": [{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}]}}),
    )
    .await;
    patch_status(
        &nodes,
        "node-1",
        json!({
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-11-30T10:00:00Z", "lastTransitionTime": "2026-11-30T09:00:00Z"},
                {"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure",
                    "message": "kubelet has disk pressure", "lastHeartbeatTime": "2026-11-30T10:00:00Z",
                    "lastTransitionTime": "2026-11-30T09:55:00Z"},
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                    "lastHeartbeatTime": "2026-11-30T10:00:00Z", "lastTransitionTime": "2026-11-30T09:00:00Z"}
            ],
            "capacity": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "20Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "20Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "v1.33.0", "machineID": "m", "systemUUID": "s", "bootID": "b",
                "kernelVersion": "6.1", "osImage": "Debian GNU/Linux 12", "containerRuntimeVersion": "containerd://2.0.0",
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
        }),
    )
    .await;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let template = |image: &str| json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": image}]}});
    let deployment = create(
        &deployments,
        json!({"metadata": {"name": "web", "annotations": {"deployment.kubernetes.io/revision": "2"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template("shop/web:2")}}),
    )
    .await;
    patch_status(
        &deployments,
        "web",
        json!({"observedGeneration": deployment.metadata.generation, "replicas": 3, "updatedReplicas": 1,
            "readyReplicas": 2, "availableReplicas": 2, "unavailableReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                "message": "ReplicaSet \"web-2\" is progressing.", "lastUpdateTime": "2026-11-30T10:20:00Z",
                "lastTransitionTime": "2026-11-30T10:19:00Z"}]}),
    )
    .await;
    let deployment_uid = deployment.metadata.uid.expect("uid");

    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    let replica_set = |name: &str, revision: &str, image: &str, owners: Value, cause: Option<&str>| {
        let mut annotations = json!({"deployment.kubernetes.io/revision": revision});
        if let Some(cause) = cause {
            annotations["kubernetes.io/change-cause"] = json!(cause);
        }
        json!({"metadata": {"name": name, "labels": {"app": "web"}, "annotations": annotations, "ownerReferences": owners},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template(image)}})
    };
    create(&sets, replica_set("web-1", "1", "shop/web:1", owner("Deployment", "web", &deployment_uid), None)).await;
    let cause = "kubectl set image deployment/web app=shop/web:2";
    let current = create(
        &sets,
        replica_set("web-2", "2", "shop/web:2", owner("Deployment", "web", &deployment_uid), Some(cause)),
    )
    .await;
    create(&sets, replica_set("web-copy", "9", "shop/web:copy", json!([]), None)).await;
    patch_status(&sets, "web-2", json!({"replicas": 1, "readyReplicas": 0})).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let set_uid = current.metadata.uid.expect("uid");
    create(
        &pods,
        json!({"metadata": {"name": "web-2-abcde", "labels": {"app": "web"}, "ownerReferences": owner("ReplicaSet", "web-2", &set_uid)},
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "shop/web:2",
                "env": [{"name": "DB_PASSWORD", "value": "planted-env-value-7f3a"}],
                "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}}]}}),
    )
    .await;
    patch_status(
        &pods,
        "web-2-abcde",
        json!({"phase": "Running", "qosClass": "Burstable", "startTime": "2026-11-30T10:00:00Z",
            "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                "message": "containers with unready status: [app]", "lastTransitionTime": "2026-11-30T10:01:00Z"}],
            "containerStatuses": [{"name": "app", "image": "shop/web:2", "imageID": "", "ready": false, "started": false,
                "restartCount": 7,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container=app"}},
                "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                    "startedAt": "2026-11-30T10:20:00Z", "finishedAt": "2026-11-30T10:20:30Z"}}}]}),
    )
    .await;
    create(
        &pods,
        json!({"metadata": {"name": "orphan", "ownerReferences": owner("ReplicaSet", "gone", "0000-gone")},
            "spec": {"containers": [{"name": "app", "image": "shop/web:1"}]}}),
    )
    .await;

    let batch: Api<Pod> = Api::namespaced(client.clone(), "batch");
    let bound = |name: &str, cpu: &str| {
        json!({"metadata": {"name": name}, "spec": {"nodeName": "node-1", "containers": [{"name": "job", "image": "batch:1",
            "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]}})
    };
    create(&batch, bound("running", "500m")).await;
    create(&batch, bound("finished", "1")).await;
    patch_status(&batch, "finished", json!({"phase": "Succeeded"})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_node_and_rollout_status_read_from_a_real_api_server_and_stay_in_scope() {
    let api = KubeApi::start().await;
    let client = api.client(&api.admin_kubeconfig).await;
    seed(&api, &client).await;

    let policy = ScopePolicy { reach: Reach::All, cluster_readers: BTreeSet::from(["akritas-system".to_string()]) };
    let tools = KubeTools::new(client, policy.clone(), Limits::default());
    let reader = tools.registry(policy.access_for("akritas-system")).expect("registry");

    // The crash-looping Pod, its last termination and its owners.
    let pod = output(&reader, "kubernetes.pod_status", json!({"name": "web-2-abcde", "namespace": NS})).await;
    let app = &pod["containers"][0];
    assert_eq!(app["restartCount"], 7, "{pod:#}");
    assert_eq!(app["state"]["waiting"]["reason"], "CrashLoopBackOff", "{pod:#}");
    assert_eq!(app["lastState"]["terminated"]["reason"], "OOMKilled", "{pod:#}");
    assert_eq!(app["lastState"]["terminated"]["exitCode"], 137, "{pod:#}");
    assert_eq!(app["resources"]["requests"], json!({"cpu": "250m", "memory": "128Mi"}), "{pod:#}");
    assert_eq!(pod["node"], "node-1");
    assert_eq!(
        pod["summary"],
        "Running on node node-1; container app: CrashLoopBackOff, 7 restarts, last terminated OOMKilled (exit 137) \
         at 2026-11-30T10:20:30Z, not ready"
    );
    assert_eq!(pod["owner_chain"], "Pod/web-2-abcde → ReplicaSet/web-2 → Deployment/web", "{pod:#}");
    assert_eq!(pod["owners"][0]["kind"], "ReplicaSet");
    assert_eq!(pod["owners"][1]["kind"], "Deployment");
    assert_eq!(pod["owners"][1]["status"]["updatedReplicas"], 1, "{pod:#}");
    assert!(!pod.to_string().contains("planted-env-value-7f3a"), "{pod:#}");

    // An owner that cannot be read is reported, not fatal.
    let orphan = output(&reader, "kubernetes.pod_status", json!({"name": "orphan", "namespace": NS})).await;
    assert_eq!(orphan["owner_chain"], "Pod/orphan → ReplicaSet/gone (unreadable)", "{orphan:#}");
    assert_eq!(orphan["owners"][0]["error"], "not found: get replicasets \"gone\" in namespace \"shop\"", "{orphan:#}");

    let missing = refusal(&reader, "kubernetes.pod_status", json!({"name": "nope", "namespace": NS})).await;
    assert_eq!(missing, "not found: get pods \"nope\" in namespace \"shop\"");

    // Revisions newest first, only the Deployment's own, and the rollout in progress.
    let history =
        output(&reader, "kubernetes.rollout_history", json!({"kind": "Deployment", "name": "web", "namespace": NS}))
            .await;
    let revisions = history["revisions"].as_array().expect("revisions");
    assert_eq!(revisions.len(), 2, "{history:#}");
    assert_eq!(revisions[0]["revision"], 2);
    assert_eq!(revisions[0]["images"], json!(["shop/web:2"]));
    assert_eq!(revisions[0]["change_cause"], "kubectl set image deployment/web app=shop/web:2");
    assert_eq!(revisions[0]["current"], true);
    assert_eq!(revisions[1]["revision"], 1);
    assert_eq!(revisions[1]["images"], json!(["shop/web:1"]));
    assert_eq!(history["rollout"], "in progress: 1 of 3 updated", "{history:#}");
    assert_eq!(history["conditions"][0]["reason"], "ReplicaSetUpdated");
    assert_eq!(history["replicas"]["unavailable"], 1);

    // The node under disk pressure and what the Pods on it request (the finished Pod not counted).
    let node = output(&reader, "kubernetes.node_status", json!({"name": "node-1"})).await;
    assert_eq!(node["pressure"], json!(["DiskPressure"]), "{node:#}");
    assert_eq!(node["ready"], "True");
    assert_eq!(node["taints"][0]["key"], "node.kubernetes.io/disk-pressure");
    assert_eq!(node["kubeletVersion"], "v1.33.0");
    assert_eq!(node["allocatable"]["cpu"], "2");
    assert_eq!(node["requested"]["cpu"], "750m", "{node:#}");
    assert_eq!(node["requested"]["memory"], "640Mi", "{node:#}");
    assert_eq!(node["percent_of_allocatable"]["cpu"], 37.5, "{node:#}");
    assert_eq!(node["pods"]["count"], 2, "{node:#}");

    // A tenant Run reads neither another namespace's Pods nor any Node.
    let tenant_access = Access::new("other-ns", Reach::Only(BTreeSet::from(["other-ns".to_string()])), false);
    let tenant = tools.registry(tenant_access).expect("registry");
    let refused = refusal(&tenant, "kubernetes.pod_status", json!({"name": "web-2-abcde", "namespace": NS})).await;
    assert!(refused.contains("namespace \"shop\" is outside this Run's scope (namespaces: other-ns)"), "{refused}");
    let refused =
        refusal(&tenant, "kubernetes.rollout_history", json!({"kind": "Deployment", "name": "web", "namespace": NS}))
            .await;
    assert!(refused.contains("outside this Run's scope"), "{refused}");
    let refused = refusal(&tenant, "kubernetes.node_status", json!({"name": "node-1"})).await;
    assert!(refused.contains("Node is cluster-scoped and this Run may not read cluster-scoped objects"), "{refused}");
}
