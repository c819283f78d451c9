//! The real-API-server harness works: the committed CRDs are accepted by kube-apiserver 1.33,
//! a sample Skill round-trips, RBAC is enforced for the operator identity, and service-account
//! tokens issued by the server authenticate.

use akritas_testkit::kube_api;

use std::time::Instant;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
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
