//! The Helm chart: `helm lint`, `helm template` in both modes with helm built from its
//! Go module, and every rendered object accepted by a real API server
//! (`kubectl apply --dry-run=server`).

use akritas_testkit::kube_api;

use std::process::Command;

fn helm(args: &[&str]) -> String {
    let output =
        Command::new(kube_api::e2e_binary("helm")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap();
    assert!(
        output.status.success(),
        "helm {args:?}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn kinds(rendered: &str) -> Vec<String> {
    rendered.lines().filter_map(|l| l.strip_prefix("kind: ")).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chart_lints_renders_and_is_accepted_by_the_api_server() {
    let lint = helm(&["lint", "charts/akritas", "--strict"]);
    assert!(lint.contains("0 chart(s) failed"), "{lint}");

    let operator = helm(&["template", "akritas", "charts/akritas", "--namespace", "akritas-system"]);
    let mut found = kinds(&operator);
    found.sort();
    assert_eq!(
        found,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "PersistentVolumeClaim",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
    );
    for needle in [
        "args: [\"serve\", \"--kubernetes\"]",
        "readOnlyRootFilesystem: true",
        "drop: [\"ALL\"]",
        "runAsNonRoot: true",
        "path: /health",
        "fieldPath: metadata.namespace",
    ] {
        assert!(operator.contains(needle), "{needle} missing in the operator rendering");
    }
    assert!(!operator.contains("\"get\", \"list\", \"watch\"") && !operator.contains("\"*\""), "no broad verbs");

    let scoped = helm(&[
        "template",
        "akritas",
        "charts/akritas",
        "--namespace",
        "akritas-system",
        "--set",
        "watchNamespace=ops",
        "--set",
        "networkPolicy.enabled=true",
    ]);
    assert!(!scoped.contains("kind: ClusterRole"), "one namespace needs no cluster-wide role");
    assert!(scoped.contains("kind: NetworkPolicy") && scoped.contains("value: \"ops\""));

    let monitored = helm(&["template", "akritas", "charts/akritas", "--set", "serviceMonitor.enabled=true"]);
    assert!(monitored.contains("kind: ServiceMonitor") && monitored.contains("path: /metrics"));

    let standalone = helm(&[
        "template",
        "akritas",
        "charts/akritas",
        "--set",
        "mode=standalone",
        "--set-string",
        "resources.skills\\.yaml=kind: Skill",
    ]);
    assert!(!standalone.contains("Role"), "standalone mode needs no RBAC");
    assert!(standalone.contains("automountServiceAccountToken: false"));
    assert!(standalone.contains("\"--resources\", \"/etc/akritas/resources\""));

    let api = kube_api::KubeApi::start().await;
    api.create_operator_namespace();
    api.create_namespace("ops");
    for rendered in [&operator, &scoped] {
        let (code, out, err) =
            api.kubectl_as(&api.admin_kubeconfig, &["apply", "--dry-run=server", "-f", "-"], Some(rendered));
        assert_eq!(code, 0, "the API server refused the rendered chart:\n{out}{err}");
    }
}
