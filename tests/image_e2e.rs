//! The image as the chart runs it. `e2e/image.sh` builds it from the Dockerfile, unchanged, with
//! podman and no registry (the binary: `AKRITAS_IMAGE_BINARY`, the release build CI makes with
//! `e2e/release.sh`, else this build's). It is started the way the chart's pod spec starts it:
//! the chart's uid and gid, read-only root filesystem, every capability dropped,
//! `no-new-privileges`, the runtime's default seccomp profile, `/tmp` and the data directory as
//! writable mounts, the resources read-only at `/etc/akritas/resources`, the chart's standalone
//! arguments, on a bridge network reached through its published port. Through that port:
//! `/health` and `/ready` answer, the sample resources are Ready or not Ready for the reasons the
//! image explains, a chat and an Alertmanager alert go through a scripted model on the host, and
//! a change preview runs a validator in the sandbox inside the container. The image's own
//! `HEALTHCHECK` passes while the host is `degraded`. SIGTERM stops it within the chart's
//! `terminationGracePeriodSeconds` with exit code 0, and a new container on the same data
//! directory still has the incident and the Runs.

use akritas_testkit as support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::attack::{Container, give, podman};
use support::scripted_llm::{Reply, ScriptedLlm, Step, inconclusive_result, offers};

const KEY: &str = "image-e2e-key-0123456789abcdef";
const ALERTMANAGER_TOKEN: &str = "image-e2e-alertmanager-0123456789";
const TAG: &str = "localhost/akritas:image-e2e";

/// A value of the chart's deployment template (`key: value`).
fn chart_value(key: &str) -> String {
    let template = std::fs::read_to_string(support::root().join("charts/akritas/templates/deployment.yaml")).unwrap();
    let line = template.lines().find_map(|l| l.trim().strip_prefix(&format!("{key}: "))).unwrap_or_else(|| {
        panic!("the chart's deployment has no {key}");
    });
    line.trim().to_string()
}

fn build_image() {
    let binary = std::env::var("AKRITAS_IMAGE_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_akritas").to_string());
    let output = Command::new(support::root().join("e2e/image.sh")).args([binary.as_str(), TAG]).output().unwrap();
    assert!(
        output.status.success(),
        "e2e/image.sh failed (podman, buildah and debootstrap: e2e/install-test-deps.sh):\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&output.stderr).trim());
}

/// The model: an empty plan and an inconclusive result for an investigation, a proposal that
/// creates `check.sh` for a change, an answer for a chat.
fn model() -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let alias = |name: &str| akritas::tools::openai_alias(&akritas::tools::ToolName::try_from(name).unwrap());
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    move |_, request| {
        let call =
            |name: &str, arguments: Value| Step::from(Reply::ToolCalls(vec![("c".into(), name.into(), arguments)]));
        if offers(request, &plan) {
            call(&plan, json!({"checks": [], "gaps": []}))
        } else if offers(request, &submit) {
            call(&submit, inconclusive_result())
        } else if offers(request, "akritas_propose_edits") {
            let script = "echo \"uid $(id -u)\"; test -f app.yaml && echo checked\n";
            call(
                "akritas_propose_edits",
                json!({"analysis": "Add the check.", "checks": ["the validator passes"], "risks": ["none"],
                       "rollback": "Delete check.sh.", "clarifications": [],
                       "edits": [{"operation": "create", "path": "check.sh", "old": "", "new": script}]}),
            )
        } else {
            Step::from(Reply::Content("db-7 answers its health checks.".into()))
        }
    }
}

fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// The sample resources plus a Workspace `app` (mounted at /srv/workspaces/app) whose
/// ValidatorProfile runs `sh check.sh`.
fn resources(dir: &Path) {
    support::copy_dir(&support::root().join("config/samples"), dir);
    std::fs::write(
        dir.join("image-e2e.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: ValidatorProfile\nmetadata: {name: check, namespace: default}\n\
         spec: {argv: [sh, check.sh], files: [\"**\"], timeoutSeconds: 30}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {name: app, namespace: default}\n\
         spec: {source: {path: /srv/workspaces/app}, validatorProfiles: [check]}\n",
    )
    .unwrap();
}

struct Pod {
    container: Container,
    name: String,
    url: String,
}

/// `podman run -d` of the image as the chart's pod runs it; waits for `/health`.
async fn start(root: &Path, llm_port: u16) -> Pod {
    let uid = chart_value("runAsUser");
    let gid = chart_value("runAsGroup");
    let name = format!("akritas-image-{:016x}", rand::random::<u64>());
    let port = support::free_port();
    let mount = |host: &str, inside: &str, mode: &str| format!("{}:{inside}:{mode}", root.join(host).display());
    let mut run = podman();
    run.args(["run", "-d", "--pull=never", "--name", &name, "-p", &format!("127.0.0.1:{port}:8090")]);
    run.args([
        "--user",
        &format!("{uid}:{gid}"),
        "--read-only",
        "--cap-drop=ALL",
        "--security-opt",
        "no-new-privileges",
    ]);
    run.args(["--tmpfs", "/tmp", "-v", &mount("data", "/var/lib/akritas", "rw")]);
    run.args(["-v", &mount("resources", "/etc/akritas/resources", "ro")]);
    run.args(["-v", &mount("workspaces/app", "/srv/workspaces/app", "ro")]);
    for (key, value) in [
        ("AKRITAS_API_KEY", KEY),
        ("AKRITAS_BASE_URL", &format!("http://host.containers.internal:{llm_port}/v1")),
        // The samples' yamllint (which the image does not ship) and the test's sh.
        ("AKRITAS_VALIDATOR_COMMANDS", "yamllint,sh"),
        ("AKRITAS_WORKSPACE_ROOTS", "/srv/workspaces"),
        ("AKRITAS_ALERTMANAGER_TOKEN", ALERTMANAGER_TOKEN),
        ("AKRITAS_INCIDENT_WEBHOOK_URL", "http://127.0.0.1:9/akritas"),
        ("AKRITAS_INCIDENT_WEBHOOK_TOKEN", "image-e2e-webhook-token"),
        ("AKRITAS_INCIDENT_WEBHOOK_HMAC_SECRET", "image-e2e-signing-secret"),
    ] {
        run.args(["-e", &format!("{key}={value}")]);
    }
    // The chart's standalone arguments.
    run.args([TAG, "serve", "--resources", "/etc/akritas/resources"]);
    let output = run.output().unwrap();
    assert!(output.status.success(), "podman run: {}", String::from_utf8_lossy(&output.stderr));
    let pod = Pod { container: Container::named(&name), name, url: format!("http://127.0.0.1:{port}") };
    let up = support::poll(Duration::from_secs(60), || {
        let url = format!("{}/health", pod.url);
        async move { support::attack::client().get(url).send().await.ok().filter(|r| r.status() == 200).map(|_| ()) }
    })
    .await;
    assert!(up.is_some(), "/health never answered through the published port:\n{}", pod.logs());
    pod
}

impl Pod {
    fn logs(&self) -> String {
        let output = podman().args(["logs", &self.name]).output().unwrap();
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = support::attack::client().get(format!("{}{path}", self.url)).bearer_auth(KEY).send().await;
        let response = response.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, bearer: &str, body: &Value) -> (u16, Value) {
        let client = support::attack::client();
        let response = client.post(format!("{}{path}", self.url)).bearer_auth(bearer).json(body).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_serves_investigates_validates_and_stops_as_the_chart_runs_it() {
    tokio::task::spawn_blocking(build_image).await.unwrap();
    let llm = ScriptedLlm::start_for_containers(model()).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for sub in ["data", "resources", "workspaces/app"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    resources(&root.join("resources"));
    let workspace = root.join("workspaces/app");
    std::fs::write(workspace.join("app.yaml"), "replicas: 1\n").unwrap();
    git(&workspace, &["init", "-q", "-b", "main"]);
    git(&workspace, &["add", "."]);
    git(&workspace, &["commit", "-qm", "initial"]);
    // What the chart's fsGroup does for its volumes (a repository its reader does not own is
    // refused, as git refuses it).
    let group: u32 = chart_value("fsGroup").parse().unwrap();
    give(&root.join("data"), group);
    give(&workspace, group);
    let pod = start(root, llm.port()).await;

    // Every resource checked: the samples the image cannot make Ready, for the reasons it gives.
    let (health, _) = support::poll(Duration::from_secs(60), || {
        let pod = &pod;
        async move {
            let (_, health) = pod.get("/health").await;
            let pending = health["catalog"]["not_ready"].as_array()?.iter().any(|n| n["in_progress"] == true);
            (!pending).then_some(health)
        }
    })
    .await
    .unwrap_or_else(|| panic!("the resources were never all checked:\n{}", pod.logs()));
    let not_ready: Vec<String> = health["catalog"]["not_ready"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| format!("{} {} {}", n["kind"].as_str().unwrap(), n["reason"].as_str().unwrap(), n["count"]))
        .collect();
    assert_eq!(
        not_ready,
        ["ValidatorProfile ProgramNotFound 1", "Workspace PathNotFound 1"],
        "the image ships no yamllint, and the samples' Workspace path is not mounted: {health:#}"
    );
    assert_eq!(health["status"], "degraded");
    let sandbox = health["validator_sandbox"].as_str().unwrap().to_string();
    assert!(sandbox.contains("seccomp filter"), "{sandbox}");
    let (status, ready) = pod.get("/ready").await;
    assert_eq!((status, &ready["ready"]), (200, &json!(true)), "{ready}");
    // The image's own HEALTHCHECK: a degraded host is healthy (it serves).
    let check = podman().args(["healthcheck", "run", &pod.name]).output().unwrap();
    assert!(
        check.status.success(),
        "HEALTHCHECK failed on a degraded host: {}",
        String::from_utf8_lossy(&check.stdout)
    );

    // A chat through the container's port.
    let (status, chat) =
        pod.post("/api/v1/chat", KEY, &json!({"messages": [{"role": "user", "content": "Is db-7 healthy?"}]})).await;
    assert_eq!(status, 200, "{chat}");
    assert!(chat["answer"].as_str().unwrap_or_default().contains("db-7 answers its health checks"), "{chat}");

    // An Alertmanager alert, investigated to the end.
    let alert: Value = serde_json::from_str(
        &std::fs::read_to_string(support::root().join("tests/fixtures/alertmanager/alertmanager-webhook.json"))
            .unwrap(),
    )
    .unwrap();
    let (status, delivery) = pod.post("/api/v1/alerts/alertmanager-main/webhook", ALERTMANAGER_TOKEN, &alert).await;
    assert_eq!(status, 202, "{delivery}");
    let (job, _) = support::poll(Duration::from_secs(120), || {
        let pod = &pod;
        async move {
            let (_, incidents) = pod.get("/api/v1/incidents").await;
            let id = incidents["incidents"].as_array()?.first()?["id"].as_str()?.to_string();
            let (_, incident) = pod.get(&format!("/api/v1/incidents/{id}")).await;
            let job = incident["jobs"].as_array()?.first()?.clone();
            matches!(job["status"].as_str(), Some("succeeded" | "failed")).then_some(job)
        }
    })
    .await
    .unwrap_or_else(|| panic!("the investigation never finished:\n{}", pod.logs()));
    assert_eq!(job["status"], "succeeded", "{job:#}");

    // A change preview: the validator runs in the sandbox inside the container.
    let preview = json!({"workspace": "app", "request": "Add the check.", "files": ["app.yaml"]});
    let (status, body) = pod.post("/api/v1/change/simulations", KEY, &preview).await;
    assert_eq!(status, 200, "{body:#}");
    let validator = &body["result"]["validators"][0];
    let output = validator["output"].as_str().unwrap_or_default();
    assert!(output.contains("checked"), "{validator:#}");
    // In a user namespace of its own the validator is uid 0 there (the chart's uid outside, with
    // no capability in the container); with Landlock only, it runs as the chart's uid itself.
    let uid = if sandbox.starts_with("namespaces of its own") { "0".to_string() } else { chart_value("runAsUser") };
    assert!(output.starts_with(&format!("uid {uid}\n")), "{sandbox}: {output}");

    // SIGTERM: a clean stop within the chart's grace period.
    let grace = chart_value("terminationGracePeriodSeconds");
    let stop = podman().args(["stop", "-t", &grace, &pod.name]).output().unwrap();
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    let code = podman().args(["inspect", "--format", "{{.State.ExitCode}}", &pod.name]).output().unwrap();
    let logs = pod.logs();
    assert_eq!(
        String::from_utf8_lossy(&code.stdout).trim(),
        "0",
        "not a clean stop on SIGTERM (137: killed after {grace} s):\n{logs}"
    );
    assert!(logs.contains("Akritas stopped"), "{logs}");
    drop(pod.container);

    // Nothing lost: a new container on the same data directory has the incident and both Runs.
    let again = start(root, llm.port()).await;
    let (_, incidents) = again.get("/api/v1/incidents").await;
    assert_eq!(incidents["incidents"].as_array().map(Vec::len), Some(1), "{incidents:#}");
    let (_, runs) = again.get("/api/v1/runs").await;
    let sources: Vec<&str> = runs["runs"].as_array().unwrap().iter().filter_map(|r| r["source"].as_str()).collect();
    assert!(sources.len() >= 2, "the chat's and the investigation's Runs: {runs:#}");
}
