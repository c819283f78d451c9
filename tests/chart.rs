//! The Helm chart: `helm lint`, `helm template` in both modes and with the common
//! chart values overridden, with helm built from its Go module; the values schema
//! rejects unknown keys; every rendered object is accepted by a real API server
//! (`kubectl apply --dry-run=server`), and `helm install --dry-run=server` prints
//! the notes. The Kubernetes tools' RBAC (`kubernetesTools.enabled`) grants exactly what the
//! tools read, in the watched namespaces' Roles, plus Nodes in a ClusterRole of its own.

use akritas_testkit::kube_api;

use std::process::{Command, Output};

use serde_json::{Value, json};

fn run_helm(args: &[&str]) -> Output {
    Command::new(kube_api::e2e_binary("helm")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

fn helm(args: &[&str]) -> String {
    let output = run_helm(args);
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

/// The rendered objects.
fn objects(rendered: &str) -> Vec<Value> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(rendered).unwrap_or_else(|e| panic!("{e}:\n{rendered}"));
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

/// The rendered object of `kind` named `name`.
fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {objects:#?}"))
}

/// The value of environment variable `name` of the pod's container.
fn container_env<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array().expect("container env");
    &env.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no {name} in {env:#?}"))["value"]
}

/// The entry of environment variable `name` of the pod's container, if any.
fn container_env_opt<'a>(deployment: &'a Value, name: &str) -> Option<&'a Value> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array()?.iter().find(|e| e["name"] == name)
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
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ],
        "by default only the release namespace, and nothing cluster-wide but the Nodes the Kubernetes tools read"
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
    let rendered = objects(&operator);
    for object in &rendered {
        let labels = &object["metadata"]["labels"];
        for (label, value) in [
            ("helm.sh/chart", "akritas-0.1.0"),
            ("app.kubernetes.io/name", "akritas"),
            ("app.kubernetes.io/instance", "akritas"),
            ("app.kubernetes.io/version", "0.1.0"),
            ("app.kubernetes.io/managed-by", "Helm"),
        ] {
            assert_eq!(labels[label], value, "{label} on {} {}", object["kind"], object["metadata"]["name"]);
        }
    }
    let deployment = object(&rendered, "Deployment", "akritas");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "akritas");
    assert_eq!(pod["containers"][0]["resources"]["requests"], json!({"cpu": "50m", "memory": "64Mi"}));
    assert_eq!(container_env(deployment, "RUST_LOG"), "info");
    assert_eq!(container_env(deployment, "AKRITAS_NAMESPACES"), "akritas-system");
    check_least_privilege(&rendered, &["akritas-system"], true);

    let scoped = helm(&[
        "template",
        "akritas",
        "charts/akritas",
        "--namespace",
        "akritas-system",
        "--set",
        "watchNamespaces={team-a,team-b}",
        "--set",
        "networkPolicy.enabled=true",
    ]);
    assert!(scoped.contains("kind: NetworkPolicy"));
    let scoped_objects = objects(&scoped);
    assert_eq!(container_env(object(&scoped_objects, "Deployment", "akritas"), "AKRITAS_NAMESPACES"), "team-a,team-b");
    check_least_privilege(&scoped_objects, &["team-a", "team-b"], true);
    let records = object(&scoped_objects, "Role", "akritas-records");
    assert!(
        tool_rules().iter().all(|rule| !has_rule(records, rule)),
        "the unwatched release namespace gets no tool rules: {records:#}"
    );

    // Kubernetes tools off: none of their rules, nothing cluster-wide, the server is told.
    let without_tools = helm(&[
        "template",
        "akritas",
        "charts/akritas",
        "--namespace",
        "akritas-system",
        "--set",
        "watchNamespaces={team-a,team-b}",
        "--set",
        "kubernetesTools.enabled=false",
    ]);
    assert!(!without_tools.contains("kind: ClusterRole"), "listed namespaces need no cluster-wide role");
    for needle in ["pods/log", "nodes", "\"pods\"", "replicasets", "\"get\", \"list\""] {
        assert!(!without_tools.contains(needle), "{needle} rendered with kubernetesTools.enabled=false");
    }
    let without_tools_objects = objects(&without_tools);
    check_least_privilege(&without_tools_objects, &["team-a", "team-b"], false);
    let args =
        &object(&without_tools_objects, "Deployment", "akritas")["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args, &json!(["serve", "--kubernetes", "--kubernetes-tools=false"]));

    let everywhere = helm(&["template", "akritas", "charts/akritas", "--set", "watchAllNamespaces=true"]);
    let everywhere = objects(&everywhere);
    let cluster = object(&everywhere, "ClusterRole", "akritas");
    assert!(
        !cluster["rules"].as_array().unwrap().iter().any(|r| r["resources"].to_string().contains("secrets")),
        "nothing cluster-wide on Secrets"
    );
    for rule in tool_rules() {
        assert!(has_rule(cluster, &rule), "watchAllNamespaces: {rule} missing in the ClusterRole {cluster:#}");
    }
    assert_eq!(object(&everywhere, "ClusterRole", "akritas-nodes")["rules"], json!([nodes_rule()]));
    let everywhere_without_tools = helm(&[
        "template",
        "akritas",
        "charts/akritas",
        "--set",
        "watchAllNamespaces=true",
        "--set",
        "kubernetesTools.enabled=false",
    ]);
    let everywhere_without_tools = objects(&everywhere_without_tools);
    let cluster = object(&everywhere_without_tools, "ClusterRole", "akritas");
    assert!(tool_rules().iter().all(|rule| !has_rule(cluster, rule)), "{cluster:#}");
    assert!(
        !everywhere_without_tools.iter().any(|o| o["metadata"]["name"] == "akritas-nodes"),
        "no Node access without the Kubernetes tools"
    );
    let secrets = object(&everywhere, "Role", "akritas-secrets");
    assert_eq!(secrets["metadata"]["namespace"], "default", "Secrets are read in the release namespace only");
    assert_eq!(secrets["rules"], json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]));
    assert!(
        container_env_opt(object(&everywhere, "Deployment", "akritas"), "AKRITAS_NAMESPACES").is_none(),
        "no namespaces configured = every namespace"
    );

    let monitored = helm(&["template", "akritas", "charts/akritas", "--set", "serviceMonitor.enabled=true"]);
    assert!(monitored.contains("kind: ServiceMonitor") && monitored.contains("path: /metrics"));
    let monitored = objects(&monitored);
    let endpoint = &object(&monitored, "ServiceMonitor", "akritas")["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["authorization"]["credentials"],
        json!({"name": "akritas-metrics-key", "key": "api-key"}),
        "the scraper has its own key"
    );
    let deployment = object(&monitored, "Deployment", "akritas");
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(
        args,
        &json!([
            "serve",
            "--kubernetes",
            "--api-key",
            "default=AKRITAS_API_KEY",
            "--api-key",
            "metrics=AKRITAS_METRICS_KEY:metrics"
        ])
    );
    let metrics_key = container_env_opt(deployment, "AKRITAS_METRICS_KEY").expect("the metrics key in the pod");
    assert_eq!(metrics_key["valueFrom"]["secretKeyRef"]["name"], "akritas-metrics-key");

    let standalone = helm(&[
        "template",
        "akritas",
        "charts/akritas",
        "--set",
        "mode=standalone",
        "--set-string",
        "manifests.skills\\.yaml=kind: Skill",
    ]);
    assert!(!standalone.contains("Role"), "standalone mode needs no RBAC");
    assert!(standalone.contains("automountServiceAccountToken: false"));
    assert!(standalone.contains("\"--resources\", \"/etc/akritas/resources\""));
    assert!(!standalone.contains("--kubernetes-tools=false"));
    let standalone_without_tools = helm(&[
        "template",
        "akritas",
        "charts/akritas",
        "--set",
        "mode=standalone",
        "--set",
        "kubernetesTools.enabled=false",
    ]);
    assert!(
        standalone_without_tools
            .contains(r#"args: ["serve", "--resources", "/etc/akritas/resources", "--kubernetes-tools=false"]"#),
        "{standalone_without_tools}"
    );
    let manifests = object(&objects(&standalone), "ConfigMap", "akritas-manifests").clone();
    assert_eq!(manifests["data"]["skills.yaml"], "kind: Skill\n");

    let existing = helm(&[
        "template",
        "akritas",
        "charts/akritas",
        "--set",
        "serviceAccount.create=false",
        "--set",
        "serviceAccount.name=existing",
    ]);
    assert!(!kinds(&existing).contains(&"ServiceAccount".to_string()), "serviceAccount.create=false creates none");
    let existing = objects(&existing);
    assert_eq!(
        object(&existing, "Deployment", "akritas")["spec"]["template"]["spec"]["serviceAccountName"],
        "existing"
    );
    assert_eq!(object(&existing, "RoleBinding", "akritas")["subjects"][0]["name"], "existing");

    let values = tempfile::tempdir().unwrap();
    let customized_values = values.path().join("values.yaml");
    std::fs::write(&customized_values, CUSTOMIZED).unwrap();
    let customized_values = customized_values.to_str().unwrap();
    let customized =
        helm(&["template", "ops", "charts/akritas", "--namespace", "akritas-system", "--values", customized_values]);
    check_customized(&objects(&customized));

    let database = helm(&[
        "template",
        "akritas",
        "charts/akritas",
        "--namespace",
        "akritas-system",
        "--set",
        "storage.type=postgres",
        "--set",
        "storage.postgres.existingSecret=akritas-db-app",
        "--set",
        "replicaCount=3",
    ]);
    check_database_mode(&objects(&database));

    let api = kube_api::KubeApi::start().await;
    api.create_operator_namespace();
    api.create_namespace("ops");
    for namespace in ["team-a", "team-b"] {
        api.create_namespace(namespace);
    }
    for rendered in [&operator, &scoped, &without_tools, &customized, &database] {
        let (code, out, err) =
            api.kubectl_as(&api.admin_kubeconfig, &["apply", "--dry-run=server", "-f", "-"], Some(rendered));
        assert_eq!(code, 0, "the API server refused the rendered chart:\n{out}{err}");
    }
    let kubeconfig = api.admin_kubeconfig.to_str().unwrap();
    let flags = ["--namespace", "akritas-system", "--dry-run=server", "--kubeconfig", kubeconfig];
    check_notes(&helm(&[&["install", "ops", "charts/akritas"][..], &flags].concat()));
}

/// `storage.type: postgres` with three replicas: the connection string from its Secret,
/// RollingUpdate, a PodDisruptionBudget, anti-affinity by default, and no PVC.
fn check_database_mode(rendered: &[Value]) {
    let kinds: Vec<&str> = rendered.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert!(!kinds.contains(&"PersistentVolumeClaim"), "no PVC on the database: {kinds:?}");
    let budget = object(rendered, "PodDisruptionBudget", "akritas");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    let deployment = object(rendered, "Deployment", "akritas");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(container_env(deployment, "AKRITAS_STORAGE_BACKEND"), "postgres");
    let url = container_env_opt(deployment, "AKRITAS_DATABASE_URL").expect("the connection string is passed");
    assert_eq!(url["valueFrom"]["secretKeyRef"], json!({"name": "akritas-db-app", "key": "uri"}));
    let pod = &deployment["spec"]["template"]["spec"];
    let anti = &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["podAffinityTerm"]["topologyKey"], "kubernetes.io/hostname", "{pod:#}");
    let data = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "data").unwrap();
    assert_eq!(data["emptyDir"], json!({}), "clones and indexes only: {data}");
}

/// The namespaced rules of the Kubernetes tools, exactly as the chart renders them.
fn tool_rules() -> Vec<Value> {
    let get_list = |group: &str, resources: &[&str]| json!({"apiGroups": [group], "resources": resources, "verbs": ["get", "list"]});
    vec![
        get_list(
            "",
            &[
                "pods",
                "events",
                "configmaps",
                "services",
                "endpoints",
                "persistentvolumeclaims",
                "replicationcontrollers",
            ],
        ),
        json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}),
        get_list("events.k8s.io", &["events"]),
        get_list("apps", &["deployments", "replicasets", "statefulsets", "daemonsets", "controllerrevisions"]),
        get_list("batch", &["jobs", "cronjobs"]),
        get_list("autoscaling", &["horizontalpodautoscalers"]),
        get_list("policy", &["poddisruptionbudgets"]),
        get_list("networking.k8s.io", &["ingresses", "networkpolicies"]),
    ]
}

/// The Kubernetes tools' one cluster-scoped rule.
fn nodes_rule() -> Value {
    json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]})
}

fn has_rule(role: &Value, rule: &Value) -> bool {
    role["rules"].as_array().is_some_and(|rules| rules.contains(rule))
}

/// No rule anywhere lists or watches Secrets or grants wildcards; each watched
/// namespace has a Role with `get` on Secrets; Incidents are written only in
/// watched namespaces and the release namespace; nothing is cluster-wide but, with
/// the Kubernetes `tools`, get/list of Nodes in a ClusterRole of its own, and their
/// namespaced rules are in the watched namespaces' Roles.
fn check_least_privilege(rendered: &[Value], watched: &[&str], tools: bool) {
    let roles: Vec<&Value> = rendered.iter().filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole").collect();
    let cluster: Vec<&&Value> = roles.iter().filter(|r| r["kind"] == "ClusterRole").collect();
    if tools {
        assert_eq!(cluster.len(), 1, "only the Nodes are cluster-wide: {cluster:#?}");
        assert_eq!(cluster[0]["metadata"]["name"], "akritas-nodes");
        assert_eq!(cluster[0]["rules"], json!([nodes_rule()]));
        let binding = object(rendered, "ClusterRoleBinding", "akritas-nodes");
        assert_eq!(binding["roleRef"]["name"], "akritas-nodes");
        assert_eq!(binding["subjects"][0]["name"], "akritas");
    } else {
        assert!(cluster.is_empty(), "nothing cluster-wide: {cluster:#?}");
    }
    for role in &roles {
        for rule in role["rules"].as_array().unwrap() {
            let verbs: Vec<&str> = rule["verbs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            let resources: Vec<&str> = rule["resources"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            assert!(!verbs.contains(&"*") && !resources.contains(&"*"), "wildcard in {role}");
            if resources.contains(&"secrets") {
                assert_eq!(
                    rule,
                    &json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
                    "Secrets are only read by name, in a rule of their own"
                );
            }
            if resources.contains(&"incidents") {
                let namespace = role["metadata"]["namespace"].as_str().unwrap();
                assert!(
                    namespace == "akritas-system" || watched.contains(&namespace),
                    "Incidents are written only where the operator works: {role}"
                );
            }
        }
    }
    for namespace in watched {
        let role = roles
            .iter()
            .find(|r| r["metadata"]["namespace"] == *namespace && r["metadata"]["name"] == "akritas")
            .unwrap_or_else(|| panic!("no Role in the watched namespace {namespace}"));
        assert!(role["rules"].as_array().unwrap().iter().any(|r| r["resources"] == json!(["secrets"])));
        for rule in tool_rules() {
            assert_eq!(has_rule(role, &rule), tools, "{rule} in the Role of {namespace} (tools: {tools})");
        }
    }
    for role in
        roles.iter().filter(|r| r["kind"] == "Role" && !watched.contains(&r["metadata"]["namespace"].as_str().unwrap()))
    {
        assert!(
            tool_rules().iter().all(|rule| !has_rule(role, rule)),
            "tool rules outside the watched namespaces: {role:#}"
        );
    }
}

/// Every common chart value set.
const CUSTOMIZED: &str = r#"nameOverride: assistant
fullnameOverride: ops-assistant
imagePullSecrets:
  - name: registry-credentials
serviceAccount:
  create: true
  name: ops-bot
  annotations:
    example.com/role: akritas-reader
podAnnotations:
  example.com/scrape: "false"
podLabels:
  team: platform
nodeSelector:
  kubernetes.io/os: linux
tolerations:
  - key: dedicated
    operator: Equal
    value: akritas
    effect: NoSchedule
affinity:
  nodeAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 1
        preference:
          matchExpressions:
            - key: kubernetes.io/arch
              operator: In
              values: ["amd64", "arm64"]
logLevel: info,akritas=debug
resources:
  requests:
    cpu: 100m
  limits:
    memory: 512Mi
"#;

/// Checks the rendering of [`CUSTOMIZED`].
fn check_customized(rendered: &[Value]) {
    for object in rendered {
        let name = object["metadata"]["name"].as_str().unwrap();
        if object["kind"] != "ServiceAccount" {
            assert!(name.starts_with("ops-assistant"), "fullnameOverride not applied to {} {name}", object["kind"]);
        }
        assert_eq!(object["metadata"]["labels"]["app.kubernetes.io/name"], "assistant", "nameOverride on {name}");
    }
    let account = object(rendered, "ServiceAccount", "ops-bot");
    assert_eq!(account["metadata"]["annotations"]["example.com/role"], "akritas-reader");
    let binding = object(rendered, "RoleBinding", "ops-assistant");
    assert_eq!(binding["subjects"][0]["name"], "ops-bot");
    let deployment = object(rendered, "Deployment", "ops-assistant");
    let template = &deployment["spec"]["template"];
    assert_eq!(template["metadata"]["labels"]["team"], "platform");
    assert_eq!(template["metadata"]["labels"]["app.kubernetes.io/name"], "assistant");
    assert_eq!(deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "assistant");
    assert_eq!(template["metadata"]["annotations"]["example.com/scrape"], "false");
    assert!(template["metadata"]["annotations"]["checksum/config"].is_string());
    let pod = &template["spec"];
    assert_eq!(pod["serviceAccountName"], "ops-bot");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "registry-credentials"}]));
    assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    assert!(pod["affinity"]["nodeAffinity"].is_object());
    // Helm merges maps: the default memory request stays.
    let resources = json!({"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}});
    assert_eq!(pod["containers"][0]["resources"], resources);
    assert_eq!(container_env(deployment, "RUST_LOG"), "info,akritas=debug");
}

#[test]
fn the_values_schema_rejects_unknown_keys() {
    for (set, key) in [
        ("podResources.limits.memory=1Gi", "podResources"),
        ("loglevel=debug", "loglevel"),
        ("image.tagg=1.0", "tagg"),
        ("serviceAccount.annotation.a=b", "annotation"),
        ("watchNamespace=ops", "watchNamespace"),
        ("kubernetesTools.enable=false", "enable"),
    ] {
        let output = run_helm(&["template", "akritas", "charts/akritas", "--set", set]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "helm accepted --set {set}");
        assert!(stderr.contains("values don't meet the specifications of the schema"), "{stderr}");
        assert!(stderr.contains(key), "the error does not name {key}: {stderr}");
    }
    let output = run_helm(&["template", "akritas", "charts/akritas", "--set", "mode=standlone"]);
    assert!(!output.status.success(), "helm accepted a misspelt mode");
    // The embedded journals are on one volume: one replica only.
    let output = run_helm(&["template", "akritas", "charts/akritas", "--set", "replicaCount=3"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("replicaCount"), "{stderr}");
    // The database mode needs the Secret with the connection string.
    let output = run_helm(&["template", "akritas", "charts/akritas", "--set", "storage.type=postgres"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("existingSecret"), "{stderr}");
}

/// The install notes: how to reach the API, the API key, the alert webhook paths.
fn check_notes(install: &str) {
    let notes = &install[install.find("NOTES:").expect("helm prints the notes")..];
    for needle in [
        "http://ops-akritas.akritas-system.svc:8090",
        "kubectl --namespace akritas-system port-forward service/ops-akritas 8090:8090",
        "Secret akritas-api-key (key api-key)",
        "POST /api/v1/alerts/<source>/webhook",
        "POST /api/v1/alertmanager/webhook",
        "Answers come from the model server http://llm.default.svc:8080/v1 (llm.baseUrl).",
        "/health says \"degraded\" and counts the\nresources that are not Ready",
        "config.operator.resource_env is empty: a resource's {env: NAME} secret reference is\nrefused (EnvNotAllowed).",
    ] {
        assert!(notes.contains(needle), "{needle} missing in the notes:\n{notes}");
    }
}

/// The settings of the rendered ConfigMap's `config.json`, as the host reads them.
fn rendered_settings(args: &[&str]) -> akritas::config::Settings {
    let rendered = helm(&[&["template", "ops", "charts/akritas", "--namespace", "akritas-system"][..], args].concat());
    let objects = objects(&rendered);
    let text = object(&objects, "ConfigMap", "ops-akritas-config")["data"]["config.json"].as_str().unwrap().to_owned();
    akritas::config::from_file_text(std::path::Path::new("config.json"), &text)
        .unwrap_or_else(|e| panic!("the rendered config does not load: {e}\n{text}"))
}

/// The chart writes the config file in sections; values written before the sections (a
/// top-level `config.allowed_hosts`) still render a file the host reads, with a warning
/// per key and without the chart's own `server.allowed_hosts` colliding with the old key.
#[test]
fn the_rendered_config_is_in_sections_and_older_flat_values_still_load() {
    let settings = rendered_settings(&[]);
    assert!(settings.deprecated.is_empty(), "{:?}", settings.deprecated);
    assert!(settings.resource_env.is_empty());
    assert_eq!(
        settings.allowed_hosts,
        ["ops-akritas", "ops-akritas.akritas-system.svc", "ops-akritas.akritas-system.svc.cluster.local"]
    );
    let ours = rendered_settings(&["--set", "config.server.allowed_hosts={akritas.example.com}"]);
    assert_eq!(ours.allowed_hosts, ["akritas.example.com"]);

    let older =
        rendered_settings(&["--set", "config.allowed_hosts={akritas.example.com}", "--set", "config.max_tokens=300"]);
    assert_eq!((older.allowed_hosts.as_slice(), older.max_tokens), (&["akritas.example.com".to_string()][..], 300));
    let moved: Vec<&str> = older.deprecated.iter().filter_map(|d| d.split('(').nth(1)).collect();
    assert_eq!(moved, ["server.allowed_hosts)", "budget.max_tokens)"], "{:?}", older.deprecated);
}
