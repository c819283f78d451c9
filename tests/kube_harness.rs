//! The real-API-server harness works: the committed CRDs are accepted by kube-apiserver 1.33,
//! a sample Skill round-trips, RBAC is enforced for the operator identity, and service-account
//! tokens issued by the server authenticate; `pods/log` reaches the kubelet stand-in through the
//! API server's own proxy, for the operator too once bound by the chart's Kubernetes-tools RBAC.

use akritas_testkit::{kube_api, kubelet::Kubelet};

use std::time::Instant;

use futures_util::AsyncBufReadExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, LogParams};
use kube_api::{KubeApi, OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT, OPERATOR_USER};

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test(flavor = "multi_thread")]
async fn real_api_server_accepts_crds_and_enforces_rbac() {
    let api = KubeApi::start().await;
    eprintln!("kube-apiserver start-to-ready: {:?} ({})", api.startup, api.url);

    // Every generated CRD is accepted (structural schema, CEL rules compiled and costed by the
    // real server) and becomes Established.
    let started = Instant::now();
    api.install_crds(&root().join("crds"));
    eprintln!("CRDs applied and Established: {:?}", started.elapsed());
    let crds = api.kubectl_ok(&["get", "crd", "-o", "name"]);
    let expected = std::fs::read_dir(root().join("crds")).unwrap().count();
    assert_eq!(crds.lines().filter(|l| l.ends_with(".akritas.io")).count(), expected, "{crds}");

    api.create_operator_namespace();
    api.create_namespace("akritas");

    // A sample Skill (and its ConfigMap) as admin, read back.
    let started = Instant::now();
    api.kubectl_ok(&["apply", "-n", "akritas", "-f", &root().join("config/samples/skills.yaml").display().to_string()]);
    let skill: serde_json::Value =
        serde_json::from_str(&api.kubectl_ok(&["get", "skill", "postgresql", "-n", "akritas", "-o", "json"])).unwrap();
    assert_eq!(skill["spec"]["match"], serde_json::json!(["postgres", "postgresql"]), "{skill:#}");
    assert!(skill["spec"]["content"].as_str().unwrap().contains("PostgreSQL investigation"), "{skill:#}");
    let names = api.kubectl_ok(&["get", "skills.akritas.io", "-n", "akritas", "-o", "name"]);
    assert_eq!(names.lines().count(), 2, "{names}");
    eprintln!("sample Skills applied and read back: {:?}", started.elapsed());

    // Every sample validates against the served schemas; a malformed Skill is rejected.
    api.kubectl_ok(&[
        "apply",
        "-n",
        "akritas",
        "--dry-run=server",
        "-f",
        &root().join("config/samples").display().to_string(),
    ]);
    let (code, out, err) = api.kubectl_as(
        &api.admin_kubeconfig,
        &["apply", "--dry-run=server", "-f", "-"],
        Some("apiVersion: akritas.io/v1alpha1\nkind: Skill\nmetadata: {name: bad, namespace: akritas}\nspec: {match: 7}\n"),
    );
    assert_ne!(code, 0, "a malformed Skill was accepted: {out}");
    assert!(err.contains("spec.match"), "{err}");

    // Without RBAC objects, the operator identity may not list skills.
    let operator = api.operator_kubeconfig();
    let (code, out, err) =
        api.kubectl_as(&operator, &["auth", "can-i", "list", "skills.akritas.io", "-n", "akritas"], None);
    assert_eq!((code, out.trim()), (1, "no"), "{out}{err}");
    let (code, out, err) = api.kubectl_as(&operator, &["get", "skills.akritas.io", "-n", "akritas"], None);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("Forbidden") && err.contains(OPERATOR_USER), "{err}");
    let (code, out, err) = api.kubectl_as(&operator, &["auth", "whoami", "-o", "json"], None);
    assert_eq!(code, 0, "{err}");
    let who: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], OPERATOR_USER, "{who:#}");
    // The admin may.
    assert_eq!(api.kubectl(&["auth", "can-i", "list", "skills.akritas.io", "-n", "akritas"]).1.trim(), "yes");

    // A real service-account token, signed with the generated key, authenticates as the same user.
    let token = api.service_account_token(OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT);
    let sa_kubeconfig = api.kubeconfig_with_token("sa-token", &token, OPERATOR_NAMESPACE);
    let (code, out, err) = api.kubectl_as(&sa_kubeconfig, &["auth", "whoami", "-o", "json"], None);
    assert_eq!(code, 0, "{err}");
    let who: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], OPERATOR_USER, "{who:#}");

    // kube-rs talks to it over verified TLS: admin lists namespaces, the operator is forbidden.
    let admin = api.client(&api.admin_kubeconfig).await;
    let namespaces = Api::<Namespace>::all(admin).list(&ListParams::default()).await.unwrap();
    assert!(namespaces.items.iter().any(|n| n.metadata.name.as_deref() == Some(OPERATOR_NAMESPACE)));
    let operator_client = api.client(&operator).await;
    match Api::<Namespace>::all(operator_client).list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("operator listed namespaces without RBAC: {other:?}"),
    }
}

/// A pod bound to `node` with containers `containers` (created as admin; no scheduler runs).
fn pod_yaml(namespace: &str, name: &str, node: &str, containers: &[&str]) -> String {
    let containers: String =
        containers.iter().map(|c| format!("  - name: {c}\n    image: registry.example/{c}:1.0\n")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  nodeName: {node}\n  containers:\n{containers}"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_logs_are_proxied_to_the_kubelet_stand_in() {
    let api = KubeApi::start().await;
    let kubelet = Kubelet::start(&api, "node-a").await;

    // The Node looks like a kubelet registered it.
    let node: serde_json::Value =
        serde_json::from_str(&api.kubectl_ok(&["get", "node", "node-a", "-o", "json"])).unwrap();
    let conditions = node["status"]["conditions"].as_array().unwrap();
    let ready = conditions.iter().find(|c| c["type"] == "Ready").unwrap();
    assert_eq!(ready["status"], "True", "{node:#}");
    assert_eq!(node["status"]["allocatable"]["pods"], "110", "{node:#}");
    assert_eq!(node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"], kubelet.address.port(), "{node:#}");
    kubelet.set_condition("DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure");
    let pressure = api.kubectl_ok(&[
        "get",
        "node",
        "node-a",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"DiskPressure\")].status}",
    ]);
    assert_eq!(pressure, "True");
    let ready =
        api.kubectl_ok(&["get", "node", "node-a", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"]);
    assert_eq!(ready, "True", "setting one condition kept the others");

    api.create_namespace("shop");
    api.apply(&pod_yaml("shop", "web-0", "node-a", &["app", "sidecar", "idle", "worker"]));
    kubelet.set_log("shop", "web-0", "app", false, "starting\nlistening on :8080\nready\n");
    kubelet.set_log("shop", "web-0", "app", true, "starting\nfatal error: runtime: out of memory\n");
    kubelet.set_log("shop", "web-0", "sidecar", false, "proxy up\n");
    kubelet.set_log("shop", "web-0", "worker", true, "killed\n");

    let logs = |args: &[&str]| {
        let mut all = vec!["logs", "-n", "shop", "web-0"];
        all.extend_from_slice(args);
        api.kubectl(&all)
    };
    assert_eq!(logs(&["-c", "app"]).1, "starting\nlistening on :8080\nready\n");
    assert_eq!(logs(&["-c", "app", "--previous"]).1, "starting\nfatal error: runtime: out of memory\n");
    assert_eq!(logs(&["-c", "app", "--tail=2"]).1, "listening on :8080\nready\n");
    // The stand-in ignores limitBytes (a client's own cap is what tests measure), but the
    // parameter reaches the node.
    assert_eq!(logs(&["-c", "app", "--limit-bytes=5"]).1, "starting\nlistening on :8080\nready\n");

    // A container waiting to restart: the kubelet serves its last terminated instance.
    assert_eq!(logs(&["-c", "worker"]).1, "killed\n");

    // The kubelet's errors, as the API server relays them.
    let (code, out, err) = logs(&["-c", "sidecar", "--previous"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains(r#"previous terminated container "sidecar" in pod "web-0" not found"#), "{err}");
    let (code, out, err) = logs(&["-c", "idle"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("NotFound"), "{err}");
    // A container the Pod does not have is refused by the API server; it never reaches the node.
    let (code, _, err) = logs(&["-c", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("container nope is not valid"), "{err}");

    let requests = kubelet.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/containerLogs/shop/web-0/app",
            "/containerLogs/shop/web-0/app",
            "/containerLogs/shop/web-0/app",
            "/containerLogs/shop/web-0/app",
            "/containerLogs/shop/web-0/worker",
            "/containerLogs/shop/web-0/sidecar",
            "/containerLogs/shop/web-0/idle",
        ]
    );
    assert_eq!(requests[1].param("previous"), Some("true"), "{requests:?}");
    assert_eq!(requests[2].param("tailLines"), Some("2"), "{requests:?}");
    assert_eq!(requests[3].param("limitBytes"), Some("5"), "{requests:?}");
    assert_eq!(requests[0].param("previous"), None, "{requests:?}");

    // The operator, bound by the chart's rendered RBAC (watching `shop`), reads the logs and the
    // Nodes; not Secrets, not another namespace's logs.
    api.create_operator_namespace();
    api.create_namespace("elsewhere");
    api.apply(&pod_yaml("elsewhere", "other-0", "node-a", &["app"]));
    api.apply(&kube_api::chart_rbac(&["shop"]));
    let operator = api.operator_kubeconfig();
    let as_operator = |args: &[&str]| api.kubectl_as(&operator, args, None);
    let (code, out, err) = as_operator(&["logs", "-n", "shop", "web-0", "-c", "app", "--previous"]);
    assert_eq!((code, out.as_str()), (0, "starting\nfatal error: runtime: out of memory\n"), "{err}");
    let (code, out, err) = as_operator(&["get", "nodes", "-o", "name"]);
    assert_eq!((code, out.trim()), (0, "node/node-a"), "{err}");
    for forbidden in [
        &["logs", "-n", "elsewhere", "other-0"][..],
        &["get", "secrets", "-n", "shop"],
        &["get", "pods", "-n", "elsewhere"],
    ] {
        let (code, out, err) = as_operator(forbidden);
        assert_ne!(code, 0, "{forbidden:?}: {out}");
        assert!(err.contains("Forbidden"), "{forbidden:?}: {err}");
    }
    let before = kubelet.requests().len();

    // 50 MiB streams through the API server without the stand-in holding it in memory.
    api.apply(&pod_yaml("shop", "chatty-0", "node-a", &["app"]));
    let line = format!("{:099}\n", 7);
    let lines = 50 * 1024 * 1024 / line.len() as u64;
    kubelet.set_repeated_log("shop", "chatty-0", "app", false, line.trim_end(), lines);
    let pods = Api::<Pod>::namespaced(api.client(&api.admin_kubeconfig).await, "shop");
    let started = Instant::now();
    let mut stream = Box::pin(pods.log_stream("chatty-0", &LogParams::default()).await.unwrap());
    let mut bytes = 0_u64;
    let mut last = Vec::new();
    loop {
        let chunk = stream.fill_buf().await.unwrap();
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        bytes += n as u64;
        last = chunk[n.saturating_sub(line.len())..].to_vec();
        stream.consume_unpin(n);
    }
    let elapsed = started.elapsed();
    assert_eq!(kubelet.requests().len(), before + 1, "one request for the whole stream");
    assert_eq!(bytes, lines * line.len() as u64);
    assert!(last.ends_with(b"7\n"), "{:?}", String::from_utf8_lossy(&last));
    eprintln!(
        "pods/log through kube-apiserver: {} MiB in {elapsed:?} ({:.0} MiB/s)",
        bytes / (1024 * 1024),
        bytes as f64 / (1024.0 * 1024.0) / elapsed.as_secs_f64()
    );
}
