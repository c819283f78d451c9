//! Operator mode against a real API server (etcd + kube-apiserver built from their
//! Go modules, RBAC on): the operator runs as its service account, bound only by
//! the RBAC the chart renders. Sample resources reach `Ready=True`; invalid objects
//! are refused by the API server or marked `Ready=False`; edits, deletions and Secret
//! rotation take effect; an Alertmanager delivery yields an `Incident` and a `Run`
//! object with the investigation; a user-created `Run` is answered in its status, in
//! its own namespace. Two tenant namespaces (`team-a`, `team-b`) are watched with the
//! chart's Roles; the API server's audit log shows the operator read only the Secrets
//! resources reference (by name, never listed or watched). A leader whose renewal
//! hangs behind a paused TCP proxy stops writing before the standby takes over.

use akritas_testkit as support;
use akritas_testkit::kube_api;

use std::time::{Duration, Instant};

use akritas::tools::{ToolName, openai_alias};
use kube_api::{KubeApi, OPERATOR_NAMESPACE};
use serde_json::{Value, json};
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use support::{Server, serve_command};

const AM_TOKEN_1: &str = "am-token-first-0123456789";
const AM_TOKEN_2: &str = "am-token-second-0123456789";

/// Plans nothing, answers, and submits a result without evidence.
fn model() -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let submit = openai_alias(&ToolName::try_from("local.investigation.submit_result").unwrap());
    move |_, request| {
        if offers(request, &plan) && request["messages"].to_string().contains("APPLY-ATTEMPT") {
            // A user Run asking for a pending change to be applied: the model tries.
            let check = json!({"step": "Apply the pending change", "tool": "change.apply",
                               "arguments": {"id": "0123456789abcdef0123456789abcdef", "confirm": true},
                               "reason": "the user asked"});
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [check], "gaps": []}))]))
        } else if offers(request, &plan) {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else if offers(request, &submit) {
            Step::from(Reply::ToolCalls(vec![(
                "r".into(),
                submit.clone(),
                json!({"finding_status": "inconclusive", "actionability": "requires_human", "confidence": "low",
                       "summary": "No tool could confirm the cause", "impact": "", "evidence": [], "ruled_out": [],
                       "affected_components": ["db-7"], "recommended_actions": ["check db-7"], "production_writes": 0}),
            )]))
        } else {
            Step::from(Reply::Content("Nothing conclusive without tools.".into()))
        }
    }
}

/// Namespaces the main test watches: the samples', `ops` and two tenants.
const WATCHED: [&str; 4] = ["akritas", "ops", "team-a", "team-b"];

fn get_json(api: &KubeApi, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&api.kubectl_ok(&all)).unwrap()
}

fn ready(object: &Value) -> Option<(String, String, i64)> {
    let condition = object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?;
    Some((
        condition["status"].as_str()?.to_string(),
        condition["message"].as_str().unwrap_or_default().to_string(),
        condition["observedGeneration"].as_i64()?,
    ))
}

async fn eventually<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> (T, Duration) {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return (value, started.elapsed());
        }
        assert!(started.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The operator with what the samples need to work: the environment variables
/// their secret references name (the webhook points at `webhook_url`).
fn operator(api: &KubeApi, llm: &ScriptedLlm, webhook_url: &str, data: &std::path::Path) -> Server {
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--kubernetes")
        .env("AKRITAS_DATA_DIR", data)
        // The test's webhook receiver listens on loopback, which operator mode refuses
        // unless the operator allows it.
        .env("AKRITAS_EGRESS_ALLOW", "127.0.0.1")
        // A keyed audit journal, anchored in a ConfigMap of the pod's namespace.
        .env("AKRITAS_AUDIT_KEY_ENV", "AKRITAS_AUDIT_KEY")
        .env("AKRITAS_AUDIT_KEY", "operator-e2e-audit-key-0123456789abcdef")
        .env("KUBECONFIG", api.operator_kubeconfig())
        .env("POD_NAMESPACE", OPERATOR_NAMESPACE)
        .env("AKRITAS_NAMESPACES", WATCHED.join(","))
        .env("AKRITAS_BASE_URL", &llm.url)
        // The sample KnowledgeBase reads the sample runbooks on this host.
        .env("AKRITAS_KNOWLEDGE_ROOTS", support::root().join("config/samples/runbooks"))
        // The samples live in namespace `akritas`, not the pod's: their `{env:}` names are
        // allowed to that namespace explicitly.
        .env("AKRITAS_RESOURCE_ENV", "akritas/AKRITAS_*")
        // The Workspaces' trees are temporary directories.
        .env("AKRITAS_WORKSPACE_ROOTS", std::env::temp_dir())
        .env("AKRITAS_ALERTMANAGER_TOKEN", "sample-token-0123456789")
        .env("AKRITAS_INCIDENT_WEBHOOK_URL", webhook_url)
        .env("AKRITAS_INCIDENT_WEBHOOK_TOKEN", "sample-webhook-token-0123456789")
        .env("AKRITAS_INCIDENT_WEBHOOK_HMAC_SECRET", "sample-webhook-hmac-0123456789")
        .env("RUST_LOG", "info,kube=warn");
    Server::start(command)
}

/// A webhook receiver that accepts every delivery.
async fn webhook_receiver() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/hook", axum::routing::post(|| async { "ok" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A git working tree with one commit (what the sample Workspace points at).
fn git_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let repo = git2::Repository::init(dir.path()).unwrap();
    let signature = git2::Signature::now("e2e", "e2e@example.invalid").unwrap();
    let tree = repo.find_tree(repo.index().unwrap().write_tree().unwrap()).unwrap();
    repo.commit(Some("HEAD"), &signature, &signature, "initial", &tree, &[]).unwrap();
    dir
}

fn child_commands(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let parent = status.lines().find_map(|l| l.strip_prefix("PPid:")).map(str::trim).unwrap_or_default();
        if parent == pid.to_string() {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    found
}

async fn post_alert(url: &str, token: &str) -> u16 {
    post_named_alert(url, token, "KubePodCrashLooping").await
}

/// The fixture's delivery with another alert name (and fingerprint): another incident.
async fn post_named_alert(url: &str, token: &str, name: &str) -> u16 {
    let fixture = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
    let body = if name == "KubePodCrashLooping" {
        fixture.to_string()
    } else {
        fixture.replace("KubePodCrashLooping", name).replace("540006078af5d72d", &format!("{:016x}", name.len() * 7919))
    };
    reqwest::Client::new()
        .post(format!("{url}/api/v1/alerts/ops.am/webhook"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_reconciles_resources_secrets_alerts_and_runs_with_the_chart_rbac() {
    let api = KubeApi::start().await;
    eprintln!("API server ready in {:?}", api.startup);
    api.install_crds(&support::root().join("crds"));
    api.create_operator_namespace();
    for namespace in WATCHED {
        api.create_namespace(namespace);
    }
    api.create_namespace("elsewhere");
    api.apply(&kube_api::chart_rbac(&WATCHED));
    let can = |args: &[&str]| {
        let (_, out, _) = api.kubectl_as(&api.operator_kubeconfig(), &[&["auth", "can-i"][..], args].concat(), None);
        out.trim().to_string()
    };
    assert_eq!(can(&["get", "secrets", "-n", "team-a"]), "yes", "a referenced Secret is read by name");
    for args in [
        &["list", "secrets", "-n", "team-a"][..],
        &["watch", "secrets", "-n", "ops"],
        &["get", "secrets", "-A"],
        &["get", "secrets", "-n", "elsewhere"],
        &["list", "skills.akritas.io", "-n", "elsewhere"],
        &["create", "incidents.akritas.io", "-n", "elsewhere"],
    ] {
        assert_eq!(can(args), "no", "the chart grants {args:?}");
    }
    // Secrets no resource references: the operator must never read them.
    for namespace in WATCHED {
        api.apply(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: unreferenced, namespace: {namespace}}}\nstringData: {{token: decoy-0123456789}}\n"
        ));
    }
    // A tenant's adapter may not start a command the service does not allow.
    api.apply(
        "apiVersion: akritas.io/v1alpha1\nkind: McpAdapter\nmetadata: {name: shell, namespace: team-b}\n\
         spec: {transport: {stdio: {command: /bin/sh, args: [-c, 'sleep 600']}}, namespace: mcp.shell, allow: [read]}\n",
    );

    // Samples and the objects of this test, before the operator starts. Paths are the
    // operator's own: the Workspace points at a git working tree and the KnowledgeBase
    // at the sample runbooks on this host; the ValidatorProfile needs yamllint on PATH
    // (e2e/install-test-deps.sh).
    let samples = support::root().join("config/samples");
    api.kubectl_ok(&["apply", "-n", "akritas", "-f", &samples.display().to_string()]);
    let tree = git_tree();
    let workspace = std::fs::read_to_string(samples.join("workspace.yaml")).unwrap();
    let in_samples_namespace = |yaml: String| yaml.replace("\nmetadata:\n", "\nmetadata:\n  namespace: akritas\n");
    api.apply(&in_samples_namespace(workspace.replace("/srv/workspaces/infra-config", tree.path().to_str().unwrap())));
    let knowledge = std::fs::read_to_string(samples.join("knowledge-base.yaml")).unwrap();
    api.apply(&in_samples_namespace(
        knowledge.replace("path: runbooks", &format!("path: {}", samples.join("runbooks").display())),
    ));
    api.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: am-token, namespace: ops}}\nstringData: {{token: {AM_TOKEN_1}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {{name: am, namespace: ops}}\n\
         spec: {{provider: alertmanager, auth: {{bearerToken: {{secretKeyRef: {{name: am-token, key: token}}}}}}}}\n"
    ));
    let llm = ScriptedLlm::start_with(model()).await;
    let started = Instant::now();
    let data = tempfile::tempdir().unwrap();
    let server = operator(&api, &llm, &webhook_receiver().await, data.path());

    // Every sample resource becomes Ready=True for its current generation (the
    // ValidatorProfile is checked below: validators are not available yet).
    let samples = ["skills", "mcpadapters", "workspaces", "notificationreceivers", "alertsources", "knowledgebases"];
    let sample = |item: &Value| item["metadata"]["namespace"] != "team-b";
    let all_ready = || {
        samples.iter().all(|kind| {
            get_json(&api, &["get", kind, "-A"])["items"].as_array().is_some_and(|items| {
                !items.is_empty()
                    && items.iter().filter(|item| sample(item)).all(|item| {
                        ready(item).is_some_and(|(status, _, generation)| {
                            status == "True" && Some(generation) == item["metadata"]["generation"].as_i64()
                        })
                    })
            })
        })
    };
    let waiting = Instant::now();
    while !all_ready() {
        if waiting.elapsed() > Duration::from_secs(30) {
            let statuses: Vec<String> = samples
                .iter()
                .flat_map(|kind| {
                    get_json(&api, &["get", kind, "-A"])["items"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .map(move |i| format!("{kind}/{}: {:?} {}", i["metadata"]["name"], ready(&i), i["status"]))
                })
                .collect();
            panic!("samples not Ready:\n{}\n--- operator log ---\n{}", statuses.join("\n"), server.log_text());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = waiting.elapsed();
    eprintln!("samples Ready {took:?} after the operator started ({:?} in all)", started.elapsed());
    // Ready stands on the conditions it is derived from, in the same vocabulary as standalone mode.
    let condition = |kind: &str, name: &str, type_: &str| {
        get_json(&api, &["get", kind, name, "-n", "akritas"])["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
            .unwrap_or_else(|| panic!("no {type_} condition on {kind}/{name}"))
    };
    assert_eq!(condition("workspace", "infra-config", "Checked")["reason"], "HeadFound");
    let (found, _) = eventually(Duration::from_secs(15), "the validator's preflight", || {
        let found = condition("validatorprofile", "yamllint", "ProgramFound");
        (found["status"] == "True").then_some(found)
    })
    .await;
    assert_eq!(found["reason"], "ProgramFound");
    let validator = condition("validatorprofile", "yamllint", "Ready");
    assert_eq!((validator["status"].as_str(), validator["reason"].as_str()), (Some("True"), Some("Ready")));
    assert_eq!(condition("notificationreceiver", "incident-automation", "SecretsResolved")["status"], "True");
    assert_eq!(condition("skill", "postgresql", "Ready")["reason"], "Ready");
    let metrics = reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("akritas_status_write_failures_total{kind=\"Skill\"}"), "{metrics}");

    // What the host discovered is in the status: skill content hash, MCP tools and connection.
    let (_, _) = eventually(Duration::from_secs(15), "discovered facts in status", || {
        let skill = get_json(&api, &["get", "skill", "postgresql", "-n", "akritas"]);
        let adapter = get_json(&api, &["get", "mcpadapter", "victoriametrics", "-n", "akritas"]);
        let connected = adapter["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Connected" && c["status"] == "True");
        let tools = adapter["status"]["tools"].as_array().map_or(0, Vec::len);
        (skill["status"]["contentSha256"].as_str()?.len() == 64
            && connected
            && tools == 5
            && adapter["status"]["authorizedTools"] == 5)
            .then_some(())
    })
    .await;

    // A second tenant, with only the right to create resources in team-b, tries what the
    // trust boundaries refuse: a validator that runs a shell, a Workspace on the data
    // directory (every namespace's clones), the sample tenant's token, and receivers
    // aimed at loopback and the cloud metadata service.
    api.apply(&format!(
        "apiVersion: akritas.io/v1alpha1\nkind: ValidatorProfile\nmetadata: {{name: env-dump, namespace: team-b}}\n\
         spec: {{argv: [sh, -c, env]}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {{name: clones, namespace: team-b}}\n\
         spec: {{source: {{path: \"{clones}\"}}, validatorProfiles: [env-dump]}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: borrowed-token, namespace: team-b}}\n\
         spec: {{type: webhook, webhook: {{url: \"https://hooks.example.com/b\", bearerToken: {{env: AKRITAS_INCIDENT_WEBHOOK_TOKEN}}}}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: loopback, namespace: team-b}}\n\
         spec: {{type: webhook, webhook: {{url: \"http://127.0.0.2:8090/api/v1/resources\"}}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: metadata, namespace: team-b}}\n\
         spec: {{type: webhook, webhook: {{url: \"http://169.254.169.254/latest/meta-data/\"}}}}\n",
        clones = data.path().join("audit").display(),
    ));
    let tenant_ready = |kind: &str, name: &str| {
        get_json(&api, &["get", kind, name, "-n", "team-b"])["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
    };
    let refusals = [
        ("validatorprofile", "env-dump", "CommandNotAllowed", "validator_commands"),
        ("workspace", "clones", "PathNotAllowed", "data directory"),
        ("notificationreceiver", "borrowed-token", "EnvNotAllowed", "team-b"),
        ("notificationreceiver", "loopback", "EgressNotAllowed", "loopback"),
        ("notificationreceiver", "metadata", "EgressNotAllowed", "link-local"),
    ];
    let refused_all = || {
        refusals.iter().all(|(kind, name, reason, _)| tenant_ready(kind, name).is_some_and(|c| c["reason"] == *reason))
    };
    let waiting = Instant::now();
    while !refused_all() {
        if waiting.elapsed() > Duration::from_secs(30) {
            let seen: Vec<String> = refusals
                .iter()
                .map(|(kind, name, ..)| format!("{kind}/{name}: {:?}", tenant_ready(kind, name)))
                .collect();
            panic!("the second tenant's objects:\n{}\n--- log ---\n{}", seen.join("\n"), server.log_text());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (kind, name, _, named) in refusals {
        let ready = tenant_ready(kind, name).unwrap();
        assert_eq!(ready["status"], "False", "{kind}/{name}: {ready}");
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{kind}/{name}: {message}");
        assert!(!message.contains("sample-webhook-token"), "{kind}/{name}: {message}");
    }
    assert!(
        child_commands(server.pid()).iter().all(|c| !c.contains("sh -c env")),
        "nothing runs for a refused validator, not even its --version"
    );

    // The audit anchor lives in a ConfigMap of the pod's namespace (the chart's RBAC allows
    // exactly that one), with the sealed head of the journal.
    let (anchor, _) = eventually(Duration::from_secs(15), "the audit anchor ConfigMap", || {
        let (code, out, _) =
            api.kubectl(&["get", "configmap", "akritas-audit-anchor", "-n", OPERATOR_NAMESPACE, "-o", "json"]);
        let cm: Value = (code == 0).then(|| serde_json::from_str(&out).ok()).flatten()?;
        let text = cm["data"]["anchor.json"].as_str()?.to_string();
        serde_json::from_str::<Value>(&text).ok()
    })
    .await;
    assert!(anchor["head"]["hash"].as_str().is_some_and(|h| h.len() == 64), "{anchor}");

    // Invalid objects: refused by the API server (CEL) or reported on the object.
    let (code, _, err) = api.kubectl_as(
        &api.admin_kubeconfig,
        &["apply", "-f", "-"],
        Some(
            "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {name: both, namespace: ops}\n\
             spec: {type: webhook, webhook: {url: \"https://x.example\", urlFrom: {env: HOOK_URL}}}\n",
        ),
    );
    assert_ne!(code, 0);
    assert!(err.contains("set exactly one of url or urlFrom"), "{err}");
    api.apply(
        "apiVersion: akritas.io/v1alpha1\nkind: Skill\nmetadata: {name: dangling, namespace: ops}\n\
         spec: {description: Dangling, contentFrom: {configMapKeyRef: {name: missing, key: SKILL.md}}}\n",
    );
    let (message, _) = eventually(Duration::from_secs(10), "Ready=False on the dangling skill", || {
        ready(&get_json(&api, &["get", "skill", "dangling", "-n", "ops"])).filter(|(s, _, _)| s == "False").map(|r| r.1)
    })
    .await;
    assert!(message.contains("ConfigMap ops/missing"), "{message}");

    // Editing a Skill changes what the host serves within 2 s.
    api.kubectl_ok(&[
        "patch",
        "skill",
        "postgresql",
        "-n",
        "akritas",
        "--type=merge",
        "-p",
        r#"{"spec":{"description":"Edited PostgreSQL guidance"}}"#,
    ]);
    let edited = Instant::now();
    let resources_url = format!("{}/api/v1/resources", server.url);
    let mut served = Duration::MAX;
    while edited.elapsed() < Duration::from_secs(5) {
        let body: Value = reqwest::get(&resources_url).await.unwrap().json().await.unwrap();
        let skill = body["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kind"] == "Skill" && r["name"] == "postgresql")
            .cloned();
        if skill.is_some_and(|s| s["spec"]["description"] == "Edited PostgreSQL guidance") {
            served = edited.elapsed();
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("a Skill edit was served after {served:?}");
    assert!(served < Duration::from_secs(2), "edit served after {served:?}");
    let (_, _) = eventually(Duration::from_secs(10), "observedGeneration 2 on the edited skill", || {
        ready(&get_json(&api, &["get", "skill", "postgresql", "-n", "akritas"])).filter(|r| r.2 == 2).map(|_| ())
    })
    .await;

    // Deleting the McpAdapter stops its child process.
    let pid = server.pid();
    let (_, _) = eventually(Duration::from_secs(20), "the MCP child process", || {
        child_commands(pid).iter().any(|c| c.contains("mcp victoriametrics")).then_some(())
    })
    .await;
    api.kubectl_ok(&["delete", "mcpadapter", "victoriametrics", "-n", "akritas"]);
    let (_, stopped) = eventually(Duration::from_secs(20), "the MCP child process to stop", || {
        (!child_commands(pid).iter().any(|c| c.contains("mcp victoriametrics"))).then_some(())
    })
    .await;
    eprintln!("MCP child stopped {stopped:?} after the delete");

    // The AlertSource authenticates with the Secret; rotating it takes effect.
    assert_eq!(post_alert(&server.url, AM_TOKEN_1).await, 202);
    api.apply(&format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: am-token, namespace: ops}}\nstringData: {{token: {AM_TOKEN_2}}}\n"));
    let mut rotated = false;
    for _ in 0..100 {
        if post_alert(&server.url, AM_TOKEN_1).await == 401 {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(rotated, "the old token stopped working");
    assert_eq!(post_alert(&server.url, AM_TOKEN_2).await, 200, "the new token works (a duplicate delivery)");

    // A reference to a Secret that does not exist is reported, and clears once it exists.
    api.apply(
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: later, namespace: ops}\n\
         spec: {provider: generic, auth: {bearerToken: {secretKeyRef: {name: later-token, key: token}}}}\n",
    );
    let secrets_resolved = |status: &str| {
        let source = get_json(&api, &["get", "alertsource", "later", "-n", "ops"]);
        source["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "SecretsResolved" && c["status"] == status)
            .map(|c| c["message"].as_str().unwrap_or_default().to_string())
    };
    // The first answer may be "being read" (the Secret is fetched by name); then "does not exist".
    let (message, _) = eventually(Duration::from_secs(10), "SecretsResolved=False: does not exist", || {
        secrets_resolved("False").filter(|m| m.contains("does not exist"))
    })
    .await;
    assert!(message.contains("later-token"), "{message}");
    api.apply("apiVersion: v1\nkind: Secret\nmetadata: {name: later-token, namespace: ops}\nstringData: {token: created-later-0123456789}\n");
    eventually(Duration::from_secs(10), "SecretsResolved=True", || secrets_resolved("True")).await;

    // The delivery became an Incident object and its investigation a Run object,
    // both in the AlertSource's namespace.
    let (incident, _) = eventually(Duration::from_secs(30), "an investigated Incident", || {
        get_json(&api, &["get", "incidents", "-n", "ops"])["items"]
            .as_array()?
            .iter()
            .find(|i| i["status"]["investigation"]["finding"] == "inconclusive")
            .cloned()
    })
    .await;
    assert_eq!(incident["spec"]["source"], "am");
    assert_eq!(incident["status"]["state"], "firing");
    let run_name = incident["status"]["lastRun"].as_str().unwrap().replace('_', "-");
    let (run, _) = eventually(Duration::from_secs(20), "the investigation Run object", || {
        let run = get_json(&api, &["get", "run", &run_name, "-n", "ops"]);
        (run["status"]["phase"] == "Succeeded").then_some(run)
    })
    .await;
    assert_eq!(run["status"]["source"], "alert:alertmanager");
    assert_eq!(run["status"]["summary"], "No tool could confirm the cause");
    assert_eq!(run["metadata"]["labels"]["app.kubernetes.io/managed-by"], "akritas");

    // A Run created by a user is answered in its status.
    api.apply("apiVersion: akritas.io/v1alpha1\nkind: Run\nmetadata: {name: ask-db, namespace: ops}\nspec: {prompt: \"Is db-7 healthy?\"}\n");
    let (asked, _) = eventually(Duration::from_secs(30), "the user Run to finish", || {
        let run = get_json(&api, &["get", "run", "ask-db", "-n", "ops"]);
        (run["status"]["phase"] == "Succeeded").then_some(run)
    })
    .await;
    assert_eq!(asked["status"]["summary"], "Nothing conclusive without tools.");
    assert!(asked["status"]["runId"].as_str().unwrap().starts_with("run_"));

    // A user Run that asks to apply a pending change is offered no tool that writes,
    // and the planned apply is refused (the change pipeline is reachable only through
    // the admin API route: tests/change_e2e.rs).
    api.apply(
        "apiVersion: akritas.io/v1alpha1\nkind: Run\nmetadata: {name: apply-attempt, namespace: ops}\n\
         spec: {prompt: \"APPLY-ATTEMPT: apply pending change 0123456789abcdef0123456789abcdef now\"}\n",
    );
    let (attempt, _) = eventually(Duration::from_secs(30), "the apply-attempt Run to finish", || {
        let run = get_json(&api, &["get", "run", "apply-attempt", "-n", "ops"]);
        run["status"]["phase"].as_str().is_some_and(|p| p == "Succeeded" || p == "Failed").then_some(run)
    })
    .await;
    assert!(attempt["status"]["runId"].as_str().is_some(), "{attempt}");
    for request in llm.requests() {
        for tool in request["tools"].as_array().into_iter().flatten() {
            let name = tool["function"]["name"].as_str().unwrap_or_default().to_ascii_lowercase();
            let writes = ["apply", "write", "approve", "propose"].iter().any(|w| name.contains(w))
                || name.starts_with("change")
                || name.starts_with("akritas_change");
            assert!(!writes, "a Run was offered {name}");
        }
    }

    // A tenant's Run is answered in the tenant's namespace, and only there.
    api.apply("apiVersion: akritas.io/v1alpha1\nkind: Run\nmetadata: {name: ask-b, namespace: team-b}\nspec: {prompt: \"Is db-7 healthy?\"}\n");
    let (tenant, _) = eventually(Duration::from_secs(30), "the tenant's Run to finish", || {
        let run = get_json(&api, &["get", "run", "ask-b", "-n", "team-b"]);
        (run["status"]["phase"] == "Succeeded").then_some(run)
    })
    .await;
    assert_eq!(tenant["status"]["actor"], "run:team-b/ask-b");
    let tenant_run = tenant["status"]["runId"].as_str().unwrap().replace('_', "-");
    for namespace in [OPERATOR_NAMESPACE, "team-a"] {
        let (code, _, _) = api.kubectl(&["get", "run", &tenant_run, "-n", namespace]);
        assert_ne!(code, 0, "the tenant's Run was projected into {namespace}");
    }

    // Columns people read.
    let table = api.kubectl_ok(&["get", "skills,mcpadapters,incidents,runs", "-A"]);
    for column in ["READY", "STATE", "SEVERITY", "PHASE", "SOURCE"] {
        assert!(table.contains(column), "{column} missing in:\n{table}");
    }

    // The operator never needed a permission the chart does not grant.
    let log = server.log_text();
    assert!(!log.to_lowercase().contains("forbidden"), "a call was forbidden:\n{log}");
    assert!(!log.contains(AM_TOKEN_1) && !log.contains(AM_TOKEN_2), "a secret reached the log");

    // The API server's audit log: the operator read Secrets only by name, only
    // those referenced, and only in watched namespaces.
    let secret_reads: Vec<(String, String, String)> = api
        .audit_events()
        .iter()
        .filter(|e| e["user"]["username"] == kube_api::OPERATOR_USER && e["objectRef"]["resource"] == "secrets")
        .map(|e| {
            let field = |name: &str| e["objectRef"][name].as_str().unwrap_or_default().to_string();
            (e["verb"].as_str().unwrap_or_default().to_string(), field("namespace"), field("name"))
        })
        .collect();
    assert!(secret_reads.contains(&("get".into(), "ops".into(), "am-token".into())), "{secret_reads:?}");
    for (verb, namespace, name) in &secret_reads {
        assert_eq!(verb, "get", "the operator made a {verb} of Secrets in {namespace:?}: {secret_reads:?}");
        assert!(
            WATCHED.contains(&namespace.as_str()),
            "a Secret read outside the watched namespaces: {secret_reads:?}"
        );
        assert_ne!(name, "unreferenced", "a Secret no resource references was read: {secret_reads:?}");
    }

    // ConfigMaps: only those labelled for Akritas are listed or watched; besides them, only
    // the audit anchor of the pod's namespace is read and written, by name.
    let config_map_reads: Vec<String> = api
        .audit_events()
        .iter()
        .filter(|e| e["user"]["username"] == kube_api::OPERATOR_USER && e["objectRef"]["resource"] == "configmaps")
        .map(|e| format!("{} {}", e["verb"].as_str().unwrap_or_default(), e["requestURI"].as_str().unwrap_or_default()))
        .collect();
    assert!(!config_map_reads.is_empty(), "the sample Skill's ConfigMap is read");
    let anchor_path = format!("/api/v1/namespaces/{OPERATOR_NAMESPACE}/configmaps/akritas-audit-anchor");
    for read in &config_map_reads {
        let own_anchor = read.split_whitespace().nth(1).is_some_and(|uri| uri.split('?').next() == Some(&anchor_path));
        assert!(
            read.contains("labelSelector=akritas.io%2Fcontent") || own_anchor,
            "an unlabelled ConfigMap read: {read}"
        );
    }

    // The tenant's `/bin/sh` adapter is refused by the service's stdio allowlist
    // (src/mcp/from_catalog.rs, policy helper): Ready=False with a reason, never started.
    let (shell, _) = eventually(Duration::from_secs(20), "Ready=False on the /bin/sh adapter", || {
        let adapter = get_json(&api, &["get", "mcpadapter", "shell", "-n", "team-b"]);
        ready(&adapter).filter(|(status, _, _)| status == "False").map(|_| adapter)
    })
    .await;
    let condition = shell["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
    assert!(condition["reason"].as_str().is_some_and(|r| !r.is_empty()), "{shell:#}");
    assert!(
        !child_commands(server.pid()).iter().any(|c| c.starts_with("/bin/sh") || c.starts_with("sleep 600")),
        "the /bin/sh adapter was started: {:?}",
        child_commands(server.pid())
    );

    // Secret scan: no planted value (Secrets, the operator's environment) appears
    // in any Akritas object's status, any Event, the host's API answers or its log.
    let planted = [
        AM_TOKEN_1,
        AM_TOKEN_2,
        "sample-token-0123456789",
        "sample-webhook-token-0123456789",
        "sample-webhook-hmac-0123456789",
        "created-later-0123456789",
        "decoy-0123456789",
    ];
    let kinds = "skills,mcpadapters,workspaces,validatorprofiles,notificationreceivers,alertsources,knowledgebases,runs,incidents";
    let mut places = vec![
        ("Akritas objects", api.kubectl_ok(&["get", kinds, "-A", "-o", "json"])),
        ("Events", api.kubectl_ok(&["get", "events.events.k8s.io", "-A", "-o", "json"])),
        ("log", server.log_text()),
    ];
    for path in ["/api/v1/resources", "/api/v1/runs", "/api/v1/incidents", "/api/v1/tools", "/metrics", "/health"] {
        let body = reqwest::get(format!("{}{path}", server.url)).await.unwrap().text().await.unwrap();
        places.push((path, body));
    }
    assert!(places[0].1.contains("SecretsResolved") && places[1].1.contains("\"items\""), "the scan reads real data");
    for value in planted {
        for (place, text) in &places {
            assert!(!text.contains(value), "a planted secret ({value}) appears in {place}");
        }
    }
}

fn exists_incident(api: &KubeApi, id: &str) -> bool {
    api.kubectl(&["get", "incident", &id.replace('_', "-"), "-n", "ops"]).0 == 0
}

/// An operator replica watching `ops`, with a short Lease.
fn operator_replica(api: &KubeApi, llm: &ScriptedLlm, name: &str) -> std::process::Command {
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--kubernetes")
        .env("KUBECONFIG", api.operator_kubeconfig())
        .env("POD_NAMESPACE", OPERATOR_NAMESPACE)
        .env("POD_NAME", name)
        .env("AKRITAS_NAMESPACES", "ops")
        .env("AKRITAS_LEASE_DURATION", "3s")
        .env("AKRITAS_BASE_URL", &llm.url)
        .env("RUST_LOG", "info,kube=warn");
    command
}

/// An operator replica on a shared data directory.
fn replica(api: &KubeApi, llm: &ScriptedLlm, data: &std::path::Path, name: &str) -> support::Starting {
    let mut command = operator_replica(api, llm, name);
    command.env("AKRITAS_DATA_DIR", data).env("AKRITAS_RECORD_RETENTION", "5s");
    Server::spawn(command)
}

/// The API server with the CRDs, the chart's RBAC for the namespace `ops`, and there the
/// AlertSource `am` whose token is [`AM_TOKEN_1`].
async fn ops_cluster() -> KubeApi {
    let api = KubeApi::start().await;
    api.install_crds(&support::root().join("crds"));
    api.create_operator_namespace();
    api.create_namespace("ops");
    api.apply(&kube_api::chart_rbac(&["ops"]));
    api.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: am-token, namespace: ops}}\nstringData: {{token: {AM_TOKEN_1}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {{name: am, namespace: ops}}\n\
         spec: {{provider: alertmanager, auth: {{bearerToken: {{secretKeyRef: {{name: am-token, key: token}}}}}}}}\n"
    ));
    api
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_replica_leads_and_a_standby_takes_over_without_losing_anything() {
    let api = ops_cluster().await;
    let llm = ScriptedLlm::start_with(model()).await;
    let data = tempfile::tempdir().unwrap();

    let leader = replica(&api, &llm, data.path(), "akritas-a").listening(Duration::from_secs(30));
    let standby = replica(&api, &llm, data.path(), "akritas-b");
    let lease = || get_json(&api, &["get", "lease", "akritas-leader", "-n", OPERATOR_NAMESPACE]);
    assert!(lease()["spec"]["holderIdentity"].as_str().unwrap().starts_with("akritas-a-"));
    // The standby neither serves nor writes while the leader renews.
    let standby = match standby.try_listening(Duration::from_secs(5)) {
        Ok(_) => panic!("the standby started serving while the leader held the Lease"),
        Err(standby) => standby,
    };
    assert!(standby.log_text().contains("standby: another replica leads"), "{}", standby.log_text());
    // It serves reads from its own watches and sends everything else to the leader.
    let standby_url = standby
        .log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["fields"]["message"].as_str().is_some_and(|m| m.starts_with("Akritas standby listening")))
        .map(|line| format!("http://{}", line["fields"]["address"].as_str().unwrap()))
        .expect("the standby listens");
    let health: Value = reqwest::get(format!("{standby_url}/health")).await.unwrap().json().await.unwrap();
    assert_eq!(health["mode"], "operator-standby");
    let waiting = Instant::now();
    loop {
        let body: Value = reqwest::get(format!("{standby_url}/api/v1/resources")).await.unwrap().json().await.unwrap();
        if body["resources"].as_array().unwrap().iter().any(|r| r["kind"] == "AlertSource" && r["name"] == "am") {
            break;
        }
        assert!(waiting.elapsed() < Duration::from_secs(10), "the standby does not serve its Catalog: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(post_alert(&standby_url, AM_TOKEN_1).await, 503, "deliveries go to the leader");

    // The leader accepts a delivery and investigates it.
    assert_eq!(post_alert(&leader.url, AM_TOKEN_1).await, 202);
    let incidents_url = format!("{}/api/v1/incidents", leader.url);
    let incident: Value = reqwest::get(&incidents_url).await.unwrap().json().await.unwrap();
    let incident_id = incident["incidents"][0]["id"].as_str().unwrap().to_string();

    // SIGKILL the leader: the standby takes the Lease within its duration and has everything.
    drop(leader);
    let killed = Instant::now();
    let new_leader = standby.listening(Duration::from_secs(20));
    let handover = killed.elapsed();
    eprintln!("the standby took over {handover:?} after the leader was killed");
    assert!(handover < Duration::from_secs(3) + Duration::from_secs(5), "handover took {handover:?}");
    assert!(lease()["spec"]["holderIdentity"].as_str().unwrap().starts_with("akritas-b-"));
    assert_eq!(lease()["spec"]["leaseTransitions"], 1);
    let detail: Value =
        reqwest::get(format!("{}/api/v1/incidents/{incident_id}", new_leader.url)).await.unwrap().json().await.unwrap();
    assert_eq!(detail["incident"]["id"], json!(incident_id), "the new leader has the delivery the old one accepted");
    assert_eq!(post_alert(&new_leader.url, AM_TOKEN_1).await, 200, "the same alert is a duplicate");
    let (incident, _) = eventually(Duration::from_secs(30), "the Incident object with its investigation", || {
        let incident = get_json(&api, &["get", "incident", &incident_id.replace('_', "-"), "-n", "ops"]);
        incident["status"]["investigation"]["finding"].as_str().map(|_| incident.clone())
    })
    .await;

    // Retention (5 s here): the finished Run object is deleted and not written again.
    // The Run object may be written a pass after the Incident that names it: wait
    // until it is there, then until it is gone. A failed `kubectl get` is neither.
    let run = incident["status"]["lastRun"].as_str().unwrap().replace('_', "-");
    let exists = || match api.kubectl(&["get", "run", &run, "-n", "ops"]) {
        (0, _, _) => Some(true),
        (_, _, err) if err.contains("NotFound") || err.contains("not found") => Some(false),
        _ => None,
    };
    eventually(Duration::from_secs(20), "the finished Run object", || (exists() == Some(true)).then_some(())).await;
    let (_, gone) = eventually(Duration::from_secs(20), "the expired Run object to be deleted", || {
        (exists() == Some(false)).then_some(())
    })
    .await;
    eprintln!("the finished Run object was deleted {gone:?} after the check started");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(exists(), Some(false), "an expired Run is not projected again");
    assert!(exists_incident(&api, &incident_id), "a firing Incident is kept");
    assert!(!new_leader.log_text().to_lowercase().contains("forbidden"), "{}", new_leader.log_text());
}

/// What a replica sent through the [`Proxy`]: when it last sent a byte, when its
/// last connection closed, and how many are open.
#[derive(Debug, Default)]
struct Activity {
    last_sent: Option<jiff::Timestamp>,
    last_closed: Option<jiff::Timestamp>,
    open: usize,
}

/// A TCP proxy in front of the API server that can stop forwarding (both ways, for
/// good): what the client sends afterwards is still read and time-stamped, never
/// delivered. The TLS session is end to end (the proxy sees bytes only).
struct Proxy {
    url: String,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    activity: std::sync::Arc<std::sync::Mutex<Activity>>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let upstream = upstream.trim_start_matches("https://").to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let paused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let activity = std::sync::Arc::new(std::sync::Mutex::new(Activity::default()));
        let (stop, seen) = (paused.clone(), activity.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { continue };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                seen.lock().unwrap().open += 1;
                let (stop_up, seen_up) = (stop.clone(), seen.clone());
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 16 * 1024];
                    loop {
                        match client_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                seen_up.lock().unwrap().last_sent = Some(jiff::Timestamp::now());
                                if !stop_up.load(Ordering::SeqCst)
                                    && server_write.write_all(&buffer[..n]).await.is_err()
                                {
                                    break;
                                }
                            }
                        }
                    }
                    let mut activity = seen_up.lock().unwrap();
                    activity.open = activity.open.saturating_sub(1);
                    activity.last_closed = Some(jiff::Timestamp::now());
                });
                let stop_down = stop.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 16 * 1024];
                    while let Ok(n) = server_read.read(&mut buffer).await {
                        if n == 0
                            || (!stop_down.load(Ordering::SeqCst)
                                && client_write.write_all(&buffer[..n]).await.is_err())
                        {
                            break;
                        }
                    }
                });
            }
        });
        Proxy { url, paused, activity }
    }

    fn pause(&self) {
        self.paused.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_renewal_hangs_stops_writing_before_the_standby_takes_over() {
    let api = KubeApi::start().await;
    api.install_crds(&support::root().join("crds"));
    api.create_operator_namespace();
    api.create_namespace("ops");
    api.apply(&kube_api::chart_rbac(&["ops"]));
    api.apply(
        "apiVersion: akritas.io/v1alpha1\nkind: Skill\nmetadata: {name: pg, namespace: ops}\n\
         spec: {description: PostgreSQL, content: \"# Guide\"}\n",
    );
    let llm = ScriptedLlm::start_with(model()).await;
    let data = tempfile::tempdir().unwrap();

    // The leader reaches the API server only through the proxy; the standby directly.
    let proxy = Proxy::start(&api.url).await;
    let through_proxy = api.dir.path().join("leader.kubeconfig");
    std::fs::write(
        &through_proxy,
        kube_api::kubeconfig_yaml(&proxy.url, &api.ca_pem, "operator", &api.operator_token(), OPERATOR_NAMESPACE),
    )
    .unwrap();
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--kubernetes")
        .env("KUBECONFIG", &through_proxy)
        .env("POD_NAMESPACE", OPERATOR_NAMESPACE)
        .env("POD_NAME", "akritas-a")
        .env("AKRITAS_NAMESPACES", "ops")
        .env("AKRITAS_DATA_DIR", data.path())
        .env("AKRITAS_LEASE_DURATION", "3s")
        .env("AKRITAS_BASE_URL", &llm.url)
        .env("RUST_LOG", "info,kube=warn");
    let mut leader = Server::spawn(command).listening(Duration::from_secs(30));
    let standby = replica(&api, &llm, data.path(), "akritas-b");
    let lease = || get_json(&api, &["get", "lease", "akritas-leader", "-n", OPERATOR_NAMESPACE]);
    assert!(lease()["spec"]["holderIdentity"].as_str().unwrap().starts_with("akritas-a-"));
    eventually(Duration::from_secs(20), "the leader to write the Skill's status", || {
        ready(&get_json(&api, &["get", "skill", "pg", "-n", "ops"])).map(|_| ())
    })
    .await;
    eventually(Duration::from_secs(20), "the standby to follow", || {
        standby.log_text().contains("standby: another replica leads").then_some(())
    })
    .await;

    // Freeze the leader's connections: its next renewal hangs.
    proxy.pause();
    let paused = jiff::Timestamp::now();
    let (taken, _) = eventually(Duration::from_secs(30), "the standby to take the Lease", || {
        let lease = lease();
        lease["spec"]["holderIdentity"].as_str()?.starts_with("akritas-b-").then_some(lease)
    })
    .await;
    // The standby's first write is this takeover; it stamps acquireTime before sending it.
    let takeover: jiff::Timestamp = taken["spec"]["acquireTime"].as_str().unwrap().parse().unwrap();
    let activity = std::mem::take(&mut *proxy.activity.lock().unwrap());
    let log = leader.log_text();
    eprintln!("paused at {paused}, standby took over at {takeover}, leader activity {activity:?}");
    assert!(leader.exited(), "the old leader still runs after the standby took over:\n{log}");
    assert_eq!(activity.open, 0, "the old leader still holds connections to the API server:\n{log}");
    let last_sent = activity.last_sent.unwrap();
    let last_closed = activity.last_closed.unwrap();
    assert!(
        last_sent < takeover && last_closed < takeover,
        "the old leader sent at {last_sent} / closed at {last_closed}, after the standby's first write at {takeover}:\n{log}"
    );
    assert!(log.contains("did not finish before its deadline"), "{log}");
    // The new leader serves and writes.
    let new_leader = standby.listening(Duration::from_secs(20));
    assert!(!new_leader.log_text().to_lowercase().contains("forbidden"), "{}", new_leader.log_text());
}

/// An operator replica on a shared PostgreSQL.
fn shared_replica(api: &KubeApi, llm: &ScriptedLlm, pg: &support::postgres::Postgres, name: &str) -> support::Starting {
    let mut command = operator_replica(api, llm, name);
    command
        .env("AKRITAS_STORAGE_BACKEND", "postgres")
        .env("AKRITAS_DATABASE_URL", pg.url("disable"))
        .env("AKRITAS_JOB_CLAIM_TIMEOUT", "3s")
        // Renewed every 1.5 s: a loaded machine does not move the Lease before the test kills.
        .env("AKRITAS_LEASE_DURATION", "6s");
    Server::spawn(command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_shared_database_every_replica_serves_and_only_the_lease_holder_writes_to_kubernetes() {
    let api = ops_cluster().await;
    let llm = ScriptedLlm::start_with(model()).await;
    let pg = support::postgres::Postgres::start();
    let a = shared_replica(&api, &llm, &pg, "akritas-a").listening(Duration::from_secs(30));
    let b = shared_replica(&api, &llm, &pg, "akritas-b").listening(Duration::from_secs(30));
    let lease = || get_json(&api, &["get", "lease", "akritas-leader", "-n", OPERATOR_NAMESPACE]);
    let (holder, _) = eventually(Duration::from_secs(10), "a replica to take the Lease", || {
        lease()["spec"]["holderIdentity"].as_str().map(str::to_string)
    })
    .await;
    for server in [&a, &b] {
        let health: Value = reqwest::get(format!("{}/health", server.url)).await.unwrap().json().await.unwrap();
        assert_eq!(
            (health["mode"].as_str(), health["storage"]["backend"].as_str()),
            (Some("operator"), Some("postgres"))
        );
    }
    // Both take deliveries: the same alert on the other replica is a duplicate of one incident.
    assert_eq!(post_alert(&a.url, AM_TOKEN_1).await, 202);
    assert_eq!(post_alert(&b.url, AM_TOKEN_1).await, 200, "the same alert on the other replica is a duplicate");
    let incidents: Value = reqwest::get(format!("{}/api/v1/incidents", b.url)).await.unwrap().json().await.unwrap();
    let first = incidents["incidents"][0]["id"].as_str().unwrap().to_string();
    let projected = |id: &str| {
        let (code, out, _) = api.kubectl(&["get", "incident", &id.replace('_', "-"), "-n", "ops", "-o", "json"]);
        let incident: Value = if code == 0 { serde_json::from_str(&out).ok()? } else { return None };
        incident["status"]["investigation"]["finding"].as_str().map(|_| incident.clone())
    };
    eventually(Duration::from_secs(30), "the Incident object with its investigation", || projected(&first)).await;
    // Only the Lease holder writes statuses and objects: the other logs no Kubernetes write.
    let (leader, other) = if holder.starts_with("akritas-a-") { (a, b) } else { (b, a) };
    assert!(leader.log_text().contains("this replica leads"), "{}", leader.log_text());
    assert!(!other.log_text().contains("this replica leads"), "{}", other.log_text());

    // SIGKILL the holder: the other takes the Lease and writes what it accepts from then on.
    drop(leader);
    let killed = Instant::now();
    assert_eq!(post_named_alert(&other.url, AM_TOKEN_1, "KubeNodeNotReady").await, 202, "it served all along");
    let (_, taken) = eventually(Duration::from_secs(30), "the other replica to take the Lease", || {
        lease()["spec"]["holderIdentity"].as_str().filter(|h| *h != holder).map(str::to_string)
    })
    .await;
    eprintln!("the other replica took the Lease {taken:?} after the holder was killed ({:?})", killed.elapsed());
    let incidents: Value = reqwest::get(format!("{}/api/v1/incidents", other.url)).await.unwrap().json().await.unwrap();
    let second = incidents["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["id"].as_str())
        .find(|id| *id != first)
        .unwrap()
        .to_string();
    eventually(Duration::from_secs(30), "the new Incident object, written by the new holder", || projected(&second))
        .await;
    assert!(other.log_text().contains("this replica leads"), "{}", other.log_text());
    assert!(!other.log_text().to_lowercase().contains("forbidden"), "{}", other.log_text());
}
