//! The embedded web UI: its static routes (content types, security headers, caching,
//! no key for the page while the API keeps needing one) and, in headless Chromium
//! driven by playwright-core, the whole UI against the real `akritas serve` on a
//! scripted model: chat round trip with the Run panel, the Run detail with its tool
//! result, an alert posted through the real webhook shown as an incident with its
//! timeline, a failing resource marked as failing, a schedule run now with its result and
//! next tick, model text that tries to inject HTML rendered inert, and a change previewed and
//! applied behind a confirmation.
//! Screenshots land in `target/ui-screenshots/`.

use akritas_testkit as support;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use akritas::tools::{ToolName, openai_alias};
use serde_json::{Value, json};
use support::brain::{Mode, asked};
use support::scripted_llm::{Reply, ScriptedLlm, Step};
use support::{Server, serve_command};

const API_KEY: &str = "ui-test-key-0123456789abcdef";
const AM_TOKEN: &str = "ui-test-alertmanager-token-0123";

/// What the model answers: every trick a model (or an alert it quotes) could try.
const HOSTILE_ANSWER: &str = "**db-7** is busy.\n\n<script>window.pwned=1</script>\n\n\
    ![x](javascript:alert(1)) and [click](javascript:alert(1)) and <img src=x onerror=\"window.pwned=2\">\n\n\
    | check | result |\n|---|---:|\n| skills | `listed` |\n\n[runbook](https://example.com/runbook)";

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

/// Plans one `mcp.victoriametrics.query` check, answers with [`HOSTILE_ANSWER`], submits an
/// InvestigationResult citing the check when asked to structure one, and proposes the
/// nftables edit. The first plan comes back as prose, as from a server that ignores
/// `tool_choice`: the host falls back to a JSON schema (the Run facts show it), and the
/// structured answers come as JSON from then on.
fn model() -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    let first_plan = AtomicBool::new(true);
    move |_, request| {
        let Some((target, mode)) = asked(request) else {
            return Step::from(Reply::Content(HOSTILE_ANSWER.into()));
        };
        let (id, arguments) = if target == plan {
            if first_plan.swap(false, Ordering::SeqCst) {
                return Step::from(Reply::Content("I will read the load of db-7 first.".into()));
            }
            let plan = json!({"checks": [{"step": "Read the load of db-7", "tool": "mcp.victoriametrics.query",
                                          "arguments": {"query": "node_load1{instance=\"db-7:9100\"}"},
                                          "reason": "confirm what the alert reports"}],
                              "gaps": [{"step": "Read kernel messages", "capability": "linux.kernel.logs", "reason": "rule out throttling"}]});
            ("p", plan)
        } else if target == submit {
            let result = json!({"finding_status": "confirmed", "actionability": "requires_human", "confidence": "medium",
                                "summary": "db-7 is busy <script>window.pwned=3</script>", "impact": "slow queries",
                                "evidence": ["tool-call:call-1 \"7.25\""], "ruled_out": [], "affected_components": ["db-7"],
                                "recommended_actions": ["review autovacuum"], "production_writes": 0});
            ("r", result)
        } else if target == "akritas_propose_edits" {
            let edit = json!({"operation": "replace", "path": PILLAR, "old": OLD_LINES, "new": NEW_LINES});
            let proposal = json!({"analysis": "orders-v2 is **missing** <script>window.pwned=5</script>", "edits": [edit],
                                  "checks": ["nft -c on a canary"], "risks": ["orders-v2 becomes reachable"],
                                  "rollback": "Revert the pillar change.", "clarifications": []});
            ("call-1", proposal)
        } else {
            return Step::from(Reply::Content(HOSTILE_ANSWER.into()));
        };
        match mode {
            Mode::ToolCall => Step::from(Reply::ToolCalls(vec![(id.into(), target, arguments)])),
            Mode::JsonSchema | Mode::JsonObject | Mode::Text => Step::from(Reply::Content(arguments.to_string())),
        }
    }
}

/// The file the change page edits in the Workspace, and the edit.
const PILLAR: &str = "pillar/prod/nftables.sls";
const OLD_LINES: &str = "      port: 8443\n  log_dropped: true\n";
const NEW_LINES: &str =
    "      port: 8443\n    - name: orders-v2\n      address: 10.20.4.15\n      port: 8443\n  log_dropped: true\n";

/// The change fixture as a git working tree with one commit.
fn workspace(dir: &std::path::Path) -> std::path::PathBuf {
    let root = dir.join("nftables");
    support::copy_dir(&support::root().join("tests/fixtures/change/nftables"), &root);
    for args in
        [&["init", "--quiet", "--initial-branch=main"][..], &["add", "--all"], &["commit", "--quiet", "-m", "initial"]]
    {
        support::git_server::git(args, &root);
    }
    root
}

fn manifests(dir: &std::path::Path, sink: &str, vm: &str, workspace: &std::path::Path) {
    std::fs::write(
        dir.join("ui.yaml"),
        format!(
            r##"apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {{name: am, namespace: default}}
spec: {{provider: alertmanager, auth: {{bearerToken: {{env: UI_AM_TOKEN}}}}}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {{name: hook, namespace: default}}
spec: {{type: webhook, webhook: {{url: "{sink}/hook"}}}}
---
apiVersion: akritas.io/v1alpha1
kind: Skill
metadata: {{name: postgresql, namespace: default}}
spec:
  description: PostgreSQL hosts
  match: [postgres, postgresql]
  content: "# PostgreSQL\nCheck autovacuum first."
---
apiVersion: akritas.io/v1alpha1
kind: McpAdapter
metadata: {{name: victoriametrics, namespace: default}}
spec:
  transport:
    stdio:
      command: akritas
      args: [mcp, victoriametrics, --base-url, "{vm}"]
  namespace: mcp.victoriametrics
  allow: [read]
  callTimeoutSeconds: 20
---
apiVersion: akritas.io/v1alpha1
kind: Workspace
metadata: {{name: nftables, namespace: default}}
spec:
  source:
    path: {workspace}
  writable: true
---
apiVersion: akritas.io/v1alpha1
kind: RunSchedule
metadata: {{name: db-load, namespace: default}}
spec:
  schedule: "0 6 1 1 *"
  prompt: Is the load of db-7 normal?
  context: {{service: postgresql}}
---
apiVersion: akritas.io/v1alpha1
kind: McpAdapter
metadata: {{name: broken-tools, namespace: default}}
spec:
  transport:
    stdio:
      command: /nonexistent/akritas-ui-test-mcp-server
  namespace: mcp.broken
  allow: [read]
"##,
            workspace = workspace.display()
        ),
    )
    .unwrap();
}

fn start(llm: &ScriptedLlm, resources: &std::path::Path, data: &std::path::Path) -> Server {
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .env("AKRITAS_DATA_DIR", data)
        .env("AKRITAS_BASE_URL", &llm.url)
        .env("AKRITAS_API_KEY", API_KEY)
        .env("AKRITAS_RESOURCE_ENV", "UI_*")
        .env("UI_AM_TOKEN", AM_TOKEN)
        .env("AKRITAS_WORKSPACE_ROOTS", data.parent().unwrap())
        .arg("--resources")
        .arg(resources);
    Server::start(command)
}

/// An Alertmanager v4 webhook body with one firing alert.
pub fn alert() -> Value {
    json!({
        "version": "4", "groupKey": "{}:{alertname=\"HighLoad\"}", "status": "firing", "receiver": "akritas",
        "groupLabels": {"alertname": "HighLoad"}, "commonLabels": {"alertname": "HighLoad"},
        "commonAnnotations": {}, "externalURL": "http://alertmanager.example", "truncatedAlerts": 0,
        "alerts": [{
            "status": "firing", "fingerprint": "ui0000000000001",
            "labels": {"alertname": "HighLoad", "severity": "critical", "instance": "db-7:9100"},
            "annotations": {"summary": "Load on db-7 is high <img src=x onerror=\"window.pwned=4\">",
                            "description": "node_load1 above 5 [x](javascript:alert(1))"},
            "startsAt": "2026-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example/graph"
        }]
    })
}

/// Runs `tests/clients/ui.mjs` in Node with playwright-core and Chromium; returns
/// (exit status success, combined output).
pub fn run_browser_script(args: &[&str]) -> (bool, String) {
    let output = Command::new("node")
        .arg(support::root().join("tests/clients/ui.mjs"))
        .args(args)
        .env("NODE_PATH", support::clients::node_modules())
        .env("AKRITAS_TEST_CHROMIUM", support::clients::chromium())
        .output()
        .expect("node runs (install Node.js)");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_drives_chat_runs_incidents_and_resources_and_model_html_stays_inert() {
    let vm = support::vm::VictoriaMetrics::start().await;
    vm.import_prometheus(&format!(
        "node_load1{{instance=\"db-7:9100\",job=\"node\"}} 7.25 {}\n",
        support::vm::now_ms() - 60_000
    ))
    .await;
    vm.wait_for_series("node_load1", 1).await;
    let llm = ScriptedLlm::start_with(model()).await;
    let sink = support::sink::Sink::start(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let (data, resources) = (dir.path().join("data"), dir.path().join("resources"));
    std::fs::create_dir_all(&resources).unwrap();
    let workspace = workspace(dir.path());
    manifests(&resources, &sink.url, &vm.url(), &workspace);
    let server = start(&llm, &resources, &data);
    let workspaces = format!("{}/api/v1/workspaces", server.url);
    support::poll(Duration::from_secs(20), || async {
        let response = reqwest::Client::new().get(&workspaces).bearer_auth(API_KEY).send().await.ok()?;
        let body: Value = response.json().await.ok()?;
        body["workspaces"].as_array()?.iter().all(|w| w["ready"] == true).then_some(())
    })
    .await
    .expect("the Workspace becomes ready");

    let screenshots = support::root().join("target/ui-screenshots");
    std::fs::create_dir_all(&screenshots).unwrap();
    let body = alert().to_string();
    let url = server.url.clone();
    let dir_arg = screenshots.display().to_string();
    let (ok, output) =
        tokio::task::spawn_blocking(move || run_browser_script(&[&url, API_KEY, &dir_arg, AM_TOKEN, &body]))
            .await
            .unwrap();
    assert!(ok, "the browser script failed:\n{output}\n--- server log ---\n{}", server.log_text());
    println!("{output}");
    for name in
        ["chat.png", "run.png", "incident.png", "resources.png", "schedules.png", "change.png", "phone-chat.png"]
    {
        assert!(screenshots.join(name).is_file(), "screenshot {name} missing");
    }
    assert!(sink.received().iter().any(|r| r.path == "/hook"), "the incident's notification was delivered");
    let pillar = std::fs::read_to_string(workspace.join(PILLAR)).unwrap();
    assert!(pillar.contains("orders-v2"), "the change approved in the browser was applied once: {pillar}");
}

async fn get(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn page_and_assets_need_no_key_carry_csp_and_revalidate_while_the_api_needs_a_key() {
    let llm = ScriptedLlm::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(&llm, dir.path(), &dir.path().join("data"));
    let base = &server.url;

    for path in
        ["/", "/chat", "/runs", "/runs/run_x", "/incidents", "/incidents/inc_x", "/resources", "/schedules", "/change"]
    {
        let response = get(&format!("{base}{path}"), &[]).await;
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers().clone();
        assert_eq!(headers["content-type"], "text/html; charset=utf-8", "{path}");
        assert_eq!(headers["content-security-policy"], akritas::web::ui::CSP, "{path}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["referrer-policy"], "no-referrer");
        assert_eq!(headers["cache-control"], "no-cache");
        let html = response.text().await.unwrap();
        assert!(html.contains("<script type=\"module\" src=\"/ui/app.js\"></script>"), "{path}");
        assert!(!html.contains("http://") && !html.contains("https://"), "no external resource in the page");
    }
    for (name, content_type) in [("app.js", "text/javascript; charset=utf-8"), ("app.css", "text/css; charset=utf-8")] {
        let response = get(&format!("{base}/ui/{name}"), &[]).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], content_type);
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
        let etag = response.headers()["etag"].to_str().unwrap().to_string();
        let again = get(&format!("{base}/ui/{name}"), &[("if-none-match", &etag)]).await;
        assert_eq!(again.status(), 304, "{name} revalidates by ETag");
        assert!(again.bytes().await.unwrap().is_empty());
    }
    for path in ["/ui/nope.js", "/ui/../Cargo.toml", "/ui/", "/nope", "/runs/a/b"] {
        let response = get(&format!("{base}{path}"), &[]).await;
        assert_eq!(response.status(), 404, "{path}");
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with("application/json"), "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{path}: {body}");
    }
    // The page is public; the data behind it is not.
    assert_eq!(get(&format!("{base}/api/v1/runs"), &[]).await.status(), 401);
    let auth = format!("Bearer {API_KEY}");
    assert_eq!(get(&format!("{base}/api/v1/runs"), &[("authorization", &auth)]).await.status(), 200);
    let api = get(&format!("{base}/api/v1/runs"), &[("authorization", &auth)]).await;
    assert_eq!(api.headers()["cache-control"], "no-store", "API answers are still never cached");
}
