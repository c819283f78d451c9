//! `akritas serve` as a user runs it: the real binary over HTTP.

use akritas_testkit as support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Server, copy_samples, poll, run_to_end, serve_command};

const KEY: &str = "ops-key-0123456789abcdef";
const CI_KEY: &str = "ci-key-0123456789abcdef";

async fn get_json(client: &reqwest::Client, url: &str, key: Option<&str>) -> (u16, Value) {
    let mut request = client.get(url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `/health` once the host has looked at every resource (none still in progress).
async fn settled_health(client: &reqwest::Client, url: &str) -> Value {
    let (settled, _) = poll(Duration::from_secs(20), || async move {
        let (_, health) = get_json(client, &format!("{url}/health"), None).await;
        let pending = health["catalog"]["not_ready"].as_array()?.iter().any(|n| n["in_progress"] == true);
        (!pending).then_some(health)
    })
    .await
    .expect("every resource is checked");
    settled
}

fn find<'a>(resources: &'a Value, kind: &str, name: &str) -> Option<&'a Value> {
    resources["resources"].as_array()?.iter().find(|r| r["kind"] == kind && r["name"] == name)
}

#[tokio::test]
async fn health_shows_the_sample_catalog() {
    let samples = copy_samples();
    // The sample ValidatorProfile's program (yamllint) is not on this PATH, whatever the
    // machine has: its readiness is the same everywhere (tests/change_e2e.rs runs the real one).
    let bare_path = tempfile::tempdir().unwrap();
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.arg("--resources").arg(samples.path()).env("PATH", bare_path.path());
        c
    });
    let client = reqwest::Client::new();
    let (status, health) = get_json(&client, &format!("{}/health", server.url), None).await;
    assert_eq!(status, 200);
    // Once the host has looked at every resource, those the samples cannot make Ready
    // here (the Workspace's path does not exist, nor the validator's program) make the host degraded,
    // counted by kind and reason; the HTTP status stays 200 for probes.
    let settled = settled_health(&client, &server.url).await;
    assert_eq!(settled["status"], "degraded", "{settled:#}");
    assert_eq!(settled["degraded"][0]["component"], "resources");
    assert_eq!(
        settled["degraded"][0]["reason"],
        "4 of 14 resources are not Ready (AlertSource SecretsUnresolved 1, NotificationReceiver SecretsUnresolved 1, \
         ValidatorProfile ProgramNotFound 1, Workspace PathNotFound 1); their conditions say what to fix: GET /api/v1/resources or `akritas validate`"
    );
    let entry = |kind: &str, reason: &str| json!({"kind": kind, "reason": reason, "in_progress": false, "count": 1});
    assert_eq!(
        settled["catalog"]["not_ready"],
        json!([
            entry("AlertSource", "SecretsUnresolved"),
            entry("NotificationReceiver", "SecretsUnresolved"),
            entry("ValidatorProfile", "ProgramNotFound"),
            entry("Workspace", "PathNotFound")
        ])
    );
    assert_eq!(health["mode"], "standalone");
    assert_eq!(health["authentication"], "disabled");
    assert_eq!(health["catalog"]["version"], 1);
    let counts = &health["catalog"]["counts"];
    assert_eq!(counts["Skill"], 5);
    assert_eq!(counts["RunSchedule"], 3);
    assert_eq!(counts["McpAdapter"], 1);
    assert_eq!(counts["Workspace"], 1);
    assert_eq!(counts["ValidatorProfile"], 1);
    assert_eq!(counts["NotificationReceiver"], 1);
    assert_eq!(counts["AlertSource"], 1);
    assert_eq!(counts["KnowledgeBase"], 1);
    assert_eq!(health["catalog"]["invalid_resources"], 0);

    let (status, schedules) = get_json(&client, &format!("{}/api/v1/schedules", server.url), None).await;
    assert_eq!(status, 200);
    let schedules = schedules["schedules"].as_array().unwrap().clone();
    assert_eq!(schedules.len(), 3, "{schedules:#?}");
    let pvc = schedules.iter().find(|s| s["name"] == "pvc-usage").unwrap();
    assert_eq!(
        (pvc["conditions"][0]["type"].as_str(), pvc["conditions"][0]["status"].as_str()),
        (Some("Ready"), Some("True")),
        "{pvc}"
    );
    assert!(
        pvc["status"]["nextScheduleTime"].as_str().is_some_and(|t| t.ends_with(":00:00Z") || t.ends_with(":30:00Z")),
        "{pvc}"
    );
    assert_eq!(pvc["spec"]["schedule"], "*/30 * * * *");

    let (status, resources) = get_json(&client, &format!("{}/api/v1/resources", server.url), None).await;
    assert_eq!(status, 200);
    let skill = find(&resources, "Skill", "postgresql").expect("postgresql skill listed");
    assert_eq!(skill["namespace"], "default");
    assert_eq!(skill["inForce"], "current");
    assert_eq!(skill["conditions"][0]["type"], "Ready");
    assert_eq!(skill["conditions"][0]["status"], "True");
    assert_eq!(skill["conditions"][0]["reason"], "Ready");
    assert!(skill["source"].as_str().unwrap().ends_with("skills.yaml:0"));
}

fn condition<'a>(resource: &'a Value, type_: &str) -> Option<&'a Value> {
    resource["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// `(status, reason, message)` of a condition.
fn state(resource: &Value, type_: &str) -> (String, String, String) {
    let c = condition(resource, type_).unwrap_or_else(|| panic!("no {type_} condition in {resource:#}"));
    let text = |field: &str| c[field].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

/// Started outside the repository with only `--resources`: the SYSTEM.md and skills built into
/// the binary are in force, `/health` answers, and `/ready` is 200 although resources are not
/// Ready (the host serves; `status` says `degraded`).
#[tokio::test]
async fn serve_started_from_an_empty_directory_uses_the_built_in_instructions_and_skills() {
    let samples = copy_samples();
    let empty = tempfile::tempdir().unwrap();
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.current_dir(empty.path())
            .env_remove("AKRITAS_SYSTEM_INSTRUCTIONS")
            .env_remove("AKRITAS_SKILLS_DIR")
            .arg("--resources")
            .arg(samples.path());
        c
    });
    let client = reqwest::Client::new();
    let (status, health) = get_json(&client, &format!("{}/health", server.url), None).await;
    assert_eq!(status, 200, "{health}");
    let shipped = std::fs::read_to_string(support::root().join("instructions/SYSTEM.md")).unwrap();
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(shipped.trim().as_bytes()));
    assert_eq!(health["system_instructions_sha256"], sha.as_str(), "{health}");
    let (_, resources) = get_json(&client, &format!("{}/api/v1/resources", server.url), None).await;
    for skill in std::fs::read_dir(support::root().join("skills")).unwrap() {
        let name = skill.unwrap().file_name().to_string_lossy().into_owned();
        let found = find(&resources, "Skill", &name).unwrap_or_else(|| panic!("built-in skill {name}: {resources:#}"));
        assert_eq!(condition(found, "Ready").unwrap()["status"], "True", "{found:#}");
    }
    let settled = settled_health(&client, &server.url).await;
    assert_eq!(settled["status"], "degraded", "the samples cannot all be Ready here: {settled:#}");
    let (status, ready) = get_json(&client, &format!("{}/ready", server.url), None).await;
    assert_eq!(status, 200, "resources not Ready leave the host ready: {ready}");
    assert_eq!(ready, json!({"ready": true, "status": "degraded", "not_ready": []}));
    assert!(!empty.path().join("instructions").exists() && !empty.path().join("skills").exists());
}

#[tokio::test]
async fn conditions_say_whether_each_sample_works_and_what_to_fix() {
    let samples = copy_samples();
    let missing = samples.path().join("no-such-tree");
    let workspace = samples.path().join("workspace.yaml");
    let manifest = std::fs::read_to_string(&workspace).unwrap();
    std::fs::write(&workspace, manifest.replace("/srv/workspaces/infra-config", missing.to_str().unwrap())).unwrap();
    // Without yamllint on PATH, as in `health_shows_the_sample_catalog`.
    let bare_path = tempfile::tempdir().unwrap();
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.arg("--resources").arg(samples.path()).env("PATH", bare_path.path());
        c.env("AKRITAS_ALERTMANAGER_TOKEN", "sample-token-0123456789");
        for unset in
            ["AKRITAS_INCIDENT_WEBHOOK_URL", "AKRITAS_INCIDENT_WEBHOOK_TOKEN", "AKRITAS_INCIDENT_WEBHOOK_HMAC_SECRET"]
        {
            c.env_remove(unset);
        }
        c
    });
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/resources", server.url);
    // Live checks (the adapter connecting, the index building) settle shortly after the load.
    let (body, took) = poll(Duration::from_secs(20), || async {
        let (_, body) = get_json(&client, &url, None).await;
        let settled = body["resources"]
            .as_array()?
            .iter()
            .all(|r| r["conditions"].as_array().is_some_and(|c| c.iter().all(|c| c["status"] != "Unknown")));
        settled.then_some(body)
    })
    .await
    .expect("the live checks never settled");
    eprintln!("live checks settled after {took:?}");
    let adapter = find(&body, "McpAdapter", "victoriametrics").unwrap();
    assert_eq!(state(adapter, "Ready").0, "True");
    assert_eq!(state(adapter, "Connected").1, "Connected");
    assert_eq!(adapter["status"]["authorizedTools"], 5);
    assert!(adapter["status"].get("lastError").is_none() && adapter["status"].get("connected").is_none());

    // Secrets set: resolved and Ready; unset: Ready=False with the variable to set.
    let source = find(&body, "AlertSource", "alertmanager-main").unwrap();
    assert_eq!(state(source, "SecretsResolved").0, "True");
    assert_eq!(state(source, "Ready").1, "Ready");
    let receiver = find(&body, "NotificationReceiver", "incident-automation").unwrap();
    let (status, reason, message) = state(receiver, "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "SecretsUnresolved"));
    assert!(message.contains("AKRITAS_INCIDENT_WEBHOOK_URL"), "{message}");
    assert_eq!(state(receiver, "SecretsResolved").1, "SecretsUnresolved");
    assert!(receiver.get("status").is_none_or(|s| s.get("secretsError").is_none()), "{receiver:#}");

    // A workspace path that does not exist.
    let workspace = find(&body, "Workspace", "infra-config").unwrap();
    let (status, reason, message) = state(workspace, "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "PathNotFound"));
    assert!(message.contains("no-such-tree"), "{message}");
    assert_eq!(state(workspace, "Checked").0, "False");

    // Kinds without secrets or a live check are Ready once valid; the index is built.
    let skill = find(&body, "Skill", "postgresql").unwrap();
    assert_eq!(skill["conditions"].as_array().unwrap().len(), 1);
    assert_eq!(state(skill, "Ready").1, "Ready");
    let base = find(&body, "KnowledgeBase", "runbooks").unwrap();
    assert_eq!(state(base, "Indexed").0, "True");
    // A validator whose program is not found is not Ready, and says so.
    let validator = find(&body, "ValidatorProfile", "yamllint").unwrap();
    assert_eq!(state(validator, "ProgramFound").0, "False");
    let ready = state(validator, "Ready");
    assert_eq!((ready.0.as_str(), ready.1.as_str()), ("False", "ProgramNotFound"), "{ready:?}");

    // Health counts invalid manifests; metrics count what does not work.
    let (_, health) = get_json(&client, &format!("{}/health", server.url), None).await;
    assert_eq!(health["catalog"]["invalid_resources"], 0);
    let metrics = reqwest::get(format!("{}/metrics", server.url)).await.unwrap().text().await.unwrap();
    let not_ready = body["resources"].as_array().unwrap().iter().filter(|r| state(r, "Ready").0 != "True").count();
    assert!(not_ready >= 2);
    assert!(metrics.contains(&format!("akritas_resources_not_ready {not_ready}\n")), "{metrics}");
    assert!(metrics.contains("akritas_status_write_failures_total{kind=\"Skill\"} 0"), "{metrics}");
}

#[tokio::test]
async fn api_requires_one_of_the_named_keys() {
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.args(["--api-key", "ops=TEST_OPS_KEY", "--api-key", "ci=TEST_CI_KEY"])
            .env("TEST_OPS_KEY", KEY)
            .env("TEST_CI_KEY", CI_KEY);
        c
    });
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/resources", server.url);
    let (status, body) = get_json(&client, &url, None).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert_eq!(body["error"]["type"], "authentication_error");
    // No key sent and a wrong key sent say different things.
    assert!(body["error"]["message"].as_str().unwrap().starts_with("missing API key"), "{body}");
    let (status, wrong) = get_json(&client, &url, Some("ops-key-0123456789abcdeX")).await;
    assert_eq!((status, wrong["error"]["code"].as_str()), (401, Some("invalid_api_key")), "{wrong}");
    assert!(wrong["error"]["message"].as_str().unwrap().starts_with("invalid API key"), "{wrong}");
    assert_eq!(get_json(&client, &url, Some(KEY)).await.0, 200);
    assert_eq!(get_json(&client, &url, Some(CI_KEY)).await.0, 200);
    // Without a key /health says the status only; with one, everything.
    let (status, anonymous) = get_json(&client, &format!("{}/health", server.url), None).await;
    assert_eq!(status, 200);
    let mut fields: Vec<&String> = anonymous.as_object().unwrap().keys().collect();
    fields.sort_unstable();
    assert_eq!(fields, ["details", "status"], "{anonymous}");
    let (status, health) = get_json(&client, &format!("{}/health", server.url), Some(CI_KEY)).await;
    assert_eq!(status, 200);
    assert_eq!(
        (health["authentication"].as_str(), health["status"].as_str()),
        (Some("api-key"), anonymous["status"].as_str())
    );
    assert!(!server.log_text().contains(KEY), "a key leaked into the log");
}

#[tokio::test]
async fn errors_use_the_json_envelope_and_bodies_are_bounded() {
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.args(["--max-body-bytes", "2048"]);
        c
    });
    let client = reqwest::Client::new();
    let (status, body) = get_json(&client, &format!("{}/nope", server.url), None).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["message"], "no route for GET /nope");
    let response = client.delete(format!("{}/health", server.url)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 405);
    let response = client.post(format!("{}/api/v1/resources", server.url)).body(vec![b'x'; 4096]).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "body_too_large");
}

#[tokio::test]
async fn a_body_that_stops_arriving_gets_408_and_frees_the_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.args(["--body-timeout", "1s"]);
        c
    });
    let address = server.url.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    // 100 bytes announced, 10 sent, then nothing.
    let head = format!(
        "POST /api/v1/chat HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"messages"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server kept the stalled connection open");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"code\":\"body_timeout\""), "{text}");
}

/// Replaces `file` whole, as an editor that saves by rename does: the watcher never sees
/// it truncated or half written (which would be a different, valid Catalog).
fn replace_file(file: &std::path::Path, content: impl AsRef<[u8]>) {
    let staged = file.with_extension("yaml.saving");
    std::fs::write(&staged, content).unwrap();
    std::fs::rename(&staged, file).unwrap();
}

#[tokio::test]
async fn edits_are_reflected_and_broken_edits_keep_the_previous_version() {
    let samples = copy_samples();
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.arg("--resources").arg(samples.path());
        c
    });
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/resources", server.url);
    let file = samples.path().join("alert-source.yaml");
    let original = std::fs::read_to_string(&file).unwrap();

    // A valid edit: visible within 2 s.
    replace_file(&file, original.replace("AKRITAS_ALERTMANAGER_TOKEN", "AKRITAS_AM_TOKEN_V2"));
    let (version, took) = poll(Duration::from_secs(5), || async {
        let (_, body) = get_json(&client, &url, None).await;
        let source = find(&body, "AlertSource", "alertmanager-main")?;
        (source["spec"]["auth"]["bearerToken"]["env"] == "AKRITAS_AM_TOKEN_V2")
            .then(|| body["catalog_version"].as_u64().unwrap())
    })
    .await
    .expect("valid edit never appeared");
    eprintln!("valid edit visible after {took:?}");
    assert!(took < Duration::from_secs(2), "edit took {took:?}");
    assert_eq!(version, 2);

    // A broken edit: reported, the previous good version stays in force.
    replace_file(&file, original.replace("provider: alertmanager", "provider: alertmanager\n  retries: 3"));
    let (source, took) = poll(Duration::from_secs(5), || async {
        let (_, body) = get_json(&client, &url, None).await;
        let source = find(&body, "AlertSource", "alertmanager-main")?.clone();
        (source["inForce"] == "previous").then_some((source, body["catalog_version"].clone()))
    })
    .await
    .expect("broken edit never reported");
    eprintln!("broken edit reported after {took:?}");
    let (source, catalog_version) = source;
    assert_eq!(catalog_version, 2, "a broken edit must not publish a new Catalog");
    assert_eq!(source["conditions"][0]["status"], "False");
    assert_eq!(source["conditions"][0]["reason"], "Invalid");
    assert_eq!(source["errors"][0], "spec.retries: unknown field; known fields here: auth, provider");
    assert_eq!(source["spec"]["auth"]["bearerToken"]["env"], "AKRITAS_AM_TOKEN_V2", "previous spec stays in force");
    let (_, health) = get_json(&client, &format!("{}/health", server.url), None).await;
    assert_eq!(health["catalog"]["invalid_resources"], 1);
    assert_eq!(health["catalog"]["counts"]["AlertSource"], 1);

    // Unparsable YAML: the objects of that file stay too.
    replace_file(&file, "apiVersion: [unclosed\n");
    let (body, _) = poll(Duration::from_secs(5), || async {
        let (_, body) = get_json(&client, &url, None).await;
        (!body["problems"].as_array()?.is_empty()).then_some(body)
    })
    .await
    .expect("parse error never reported");
    assert_eq!(find(&body, "AlertSource", "alertmanager-main").unwrap()["inForce"], "previous");
    assert_eq!(body["catalog_version"], 2);

    // Removing the file removes the object; a new file adds one.
    std::fs::remove_file(&file).unwrap();
    std::fs::write(
        samples.path().join("extra.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: grafana, namespace: akritas}\nspec: {provider: grafana, auth: {allowUnauthenticated: true}}\n",
    )
    .unwrap();
    poll(Duration::from_secs(5), || async {
        let (_, body) = get_json(&client, &url, None).await;
        (find(&body, "AlertSource", "alertmanager-main").is_none() && find(&body, "AlertSource", "grafana").is_some())
            .then_some(())
    })
    .await
    .expect("removal and addition never appeared");
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully() {
    let server = Server::start(serve_command(env!("CARGO_BIN_EXE_akritas")));
    let client = reqwest::Client::new();
    assert_eq!(get_json(&client, &format!("{}/health", server.url), None).await.0, 200);
    let log = server.log.clone();
    assert_eq!(server.terminate(), Some(0));
    let log = log.lock().unwrap().join("\n");
    assert!(log.contains("SIGTERM received"), "{log}");
    assert!(log.contains("Akritas stopped"), "{log}");
}

#[test]
fn startup_problems_name_their_source_and_fix() {
    let mut bad_env = serve_command(env!("CARGO_BIN_EXE_akritas"));
    bad_env.env("AKRITAS_MAX_TOKENS", "lots");
    let (code, stderr) = run_to_end(bad_env);
    assert_eq!(code, 2);
    assert!(stderr.contains("AKRITAS_MAX_TOKENS"), "{stderr}");

    let mut bad_flag = serve_command(env!("CARGO_BIN_EXE_akritas"));
    bad_flag.args(["--request-timeout", "soon"]);
    let (code, stderr) = run_to_end(bad_flag);
    assert_eq!(code, 2);
    assert!(stderr.contains("--request-timeout"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.json");
    std::fs::write(&config, r#"{"version": 1, "max_iterations": 0}"#).unwrap();
    let mut bad_file = serve_command(env!("CARGO_BIN_EXE_akritas"));
    bad_file.arg("--config").arg(&config);
    let (code, stderr) = run_to_end(bad_file);
    assert_eq!(code, 2);
    assert!(stderr.contains(&format!("config file {}: $.max_iterations", config.display())), "{stderr}");

    let empty = dir.path().join("SYSTEM.md");
    std::fs::write(&empty, "\n").unwrap();
    let mut bad_instructions = serve_command(env!("CARGO_BIN_EXE_akritas"));
    bad_instructions.arg("--system-instructions").arg(&empty);
    let (code, stderr) = run_to_end(bad_instructions);
    assert_ne!(code, 0);
    assert!(stderr.contains("the file is empty"), "{stderr}");

    let mut exposed = serve_command(env!("CARGO_BIN_EXE_akritas"));
    exposed.args(["--address", "0.0.0.0:0"]);
    let (code, stderr) = run_to_end(exposed);
    assert_ne!(code, 0);
    assert!(stderr.contains("--allow-unauthenticated"), "{stderr}");
    assert_eq!(stderr.matches("--allow-unauthenticated").count(), 1, "one line per fatal error: {stderr}");
}

/// A model server that cannot be reached is seen at start, not at the first question: one WARN
/// with its URL and the cause, `/health` degraded with both; once it answers, `/health` is ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_model_server_is_named_in_the_log_and_health_until_it_answers() {
    let port = support::free_port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.args(["--base-url", &base]);
        c
    });
    let client = reqwest::Client::new();
    let (down, _) = poll(Duration::from_secs(20), || async {
        let (_, health) = get_json(&client, &format!("{}/health", server.url), None).await;
        (health["model_server"]["reachable"] == false).then_some(health)
    })
    .await
    .unwrap_or_else(|| panic!("never unreachable; log:\n{}", server.log_text()));
    assert_eq!(down["status"], "degraded", "{down}");
    assert_eq!(down["model_server"]["url"], base.as_str(), "{down}");
    let reason = down["degraded"].as_array().unwrap().iter().find(|d| d["component"] == "model_server").unwrap();
    let reason = reason["reason"].as_str().unwrap();
    assert!(reason.contains(&base) && reason.to_lowercase().contains("connection refused"), "{reason}");
    let log = server.log_text();
    let warned: Vec<&str> = log.lines().filter(|l| l.contains("the model server cannot be reached")).collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("\"level\":\"WARN\"") && warned[0].contains(&base), "{}", warned[0]);
    assert!(warned[0].to_lowercase().contains("connection refused"), "{}", warned[0]);

    // The server comes up on that port: the next check sees it, without any question asked.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let models = axum::Router::new()
        .route("/v1/models", axum::routing::get(|| async { axum::Json(json!({"data": [{"id": "m"}]})) }));
    tokio::spawn(async move { axum::serve(listener, models).await.unwrap() });
    // The checks back off from 2 s to a minute: the bound leaves room for one full wait.
    let (up, _) = poll(Duration::from_secs(90), || async {
        let (_, health) = get_json(&client, &format!("{}/health", server.url), None).await;
        (health["model_server"]["reachable"] == true).then_some(health)
    })
    .await
    .unwrap_or_else(|| panic!("never reachable again; log:\n{}", server.log_text()));
    assert!(up["degraded"].as_array().unwrap().iter().all(|d| d["component"] != "model_server"), "{up}");
}

/// The log as an operator reads it off a terminal (`kubectl logs`, a file): no colour codes,
/// no library's debug dump, no empty field, the data directory's files by absolute path.
#[test]
fn the_text_log_off_a_terminal_is_plain_with_absolute_paths_and_no_library_dumps() {
    let samples = copy_samples();
    let cwd = tempfile::tempdir().unwrap();
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .current_dir(cwd.path())
        .env("AKRITAS_LOG_FORMAT", "text")
        .env("AKRITAS_DATA_DIR", "data")
        .env_remove("RUST_LOG")
        .arg("--resources")
        .arg(samples.path());
    let mut child = command.spawn().unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The bundled MCP adapter's connection is where its client library used to dump its peer.
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let seen = |lines: &[String], what: &str| lines.iter().any(|l| l.contains(what));
    while !seen(&lines, "MCP adapter connected") || !seen(&lines, "Akritas listening") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => panic!("not listening with its MCP adapter connected:\n{}", lines.join("\n")),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = lines.join("\n");
    assert!(!log.contains('\u{1b}'), "colour codes off a terminal:\n{log}");
    assert!(!log.contains("rmcp") && !log.contains("peer_info"), "a library's dump at INFO:\n{log}");
    assert!(log.contains("api_keys=none"), "{log}");
    assert!(!log.contains("api_keys= "), "{log}");
    let data = std::fs::canonicalize(cwd.path()).unwrap().join("data");
    let journal = format!("path={}", data.join("audit/akritas.jsonl").display());
    assert!(log.contains(&journal), "{journal} in:\n{log}");
}

#[tokio::test]
async fn directory_skills_load_yield_to_resources_and_reload() {
    let samples = copy_samples();
    let skills = tempfile::tempdir().unwrap();
    for name in ["postgresql", "node-disk-pressure"] {
        std::fs::create_dir_all(skills.path().join(name)).unwrap();
        std::fs::copy(
            support::root().join("skills").join(name).join("SKILL.md"),
            skills.path().join(name).join("SKILL.md"),
        )
        .unwrap();
    }
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.arg("--resources").arg(samples.path()).arg("--skills-dir").arg(skills.path());
        c
    });
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/resources", server.url);
    let (_, body) = get_json(&client, &url, None).await;
    let disk = find(&body, "Skill", "node-disk-pressure").expect("directory skill loaded");
    assert_eq!(disk["namespace"], "default");
    let selectors = disk["spec"]["match"].as_array().unwrap();
    for selector in ["disk", "diskpressure", "filesystem", "node", "kubenodediskpressure"] {
        assert!(selectors.contains(&serde_json::json!(selector)), "{selectors:?}");
    }
    let postgres: Vec<&Value> = body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "Skill" && r["name"] == "postgresql")
        .collect();
    assert_eq!(postgres.len(), 1, "the Skill resource shadows the directory skill of the same name");
    assert_eq!(postgres[0]["namespace"], "default");

    let file = skills.path().join("node-disk-pressure/SKILL.md");
    let original = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, original.replace("description: Filesystems filling up", "description: Disks filling up"))
        .unwrap();
    let (_, took) = poll(Duration::from_secs(5), || async {
        let (_, body) = get_json(&client, &url, None).await;
        let skill = find(&body, "Skill", "node-disk-pressure")?;
        skill["spec"]["description"].as_str()?.starts_with("Disks filling up").then_some(())
    })
    .await
    .expect("skill edit never appeared");
    assert!(took < Duration::from_secs(2), "skill reload took {took:?}");

    std::fs::write(&file, original.replace("name: node-disk-pressure", "name: other")).unwrap();
    let (skill, _) = poll(Duration::from_secs(5), || async {
        let (_, body) = get_json(&client, &url, None).await;
        let skill = find(&body, "Skill", "node-disk-pressure")?.clone();
        (skill["inForce"] == "previous").then_some(skill)
    })
    .await
    .expect("broken skill never reported");
    assert_eq!(skill["errors"][0], "front matter name \"other\" must equal the directory name \"node-disk-pressure\"");
    assert!(skill["spec"]["description"].as_str().unwrap().starts_with("Disks filling up"));
}

/// The quick start's host (loopback, no keys: the caller is anonymous) attacked as a web
/// page the user visits would: a rebinding name in `Host`, a cross-site `POST`, a body
/// without a JSON label (what a form or a simple `fetch` sends), and an anonymous apply.
#[tokio::test]
async fn rebinding_cross_site_posts_unlabelled_bodies_and_anonymous_applies_are_refused() {
    let samples = copy_samples();
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.arg("--resources").arg(samples.path()).env_remove("AKRITAS_API_KEY");
        c
    });
    let client = reqwest::Client::new();
    let port = server.url.rsplit(':').next().unwrap().to_string();
    let url = |path: &str| format!("{}{path}", server.url);
    // DNS rebinding: evil.example resolves to 127.0.0.1; the browser sends its own name.
    let response =
        client.get(url("/api/v1/resources")).header("host", format!("evil.example:{port}")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("allowed_hosts"), "{body}");
    for path in ["/health", "/mcp", "/v1/models", "/"] {
        let status = client.get(url(path)).header("host", "evil.example").send().await.unwrap().status();
        assert_eq!(status.as_u16(), 403, "{path}");
    }
    // Addresses and localhost are this host.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let status = client.get(url("/api/v1/resources")).header("host", host.clone()).send().await.unwrap().status();
        assert_eq!(status.as_u16(), 200, "{host}");
    }
    // CSRF: a page of another origin posts to the API.
    let chat = serde_json::json!({"messages": [{"role": "user", "content": "hi"}]});
    let response =
        client.post(url("/api/v1/chat")).header("origin", "http://evil.example").json(&chat).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "cross_origin", "{body}");
    // A body without `Content-Type: application/json` is not read as JSON.
    let response = client.post(url("/api/v1/chat")).body(chat.to_string()).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 415);
    let response = client
        .post(url("/api/v1/chat"))
        .header("content-type", "text/plain")
        .body(chat.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 415);
    // Anonymous access never applies a change, whatever the approval.
    let response = client
        .post(url("/api/v1/change/simulations/0123456789abcdef0123456789abcdef/apply"))
        .json(&serde_json::json!({"confirm": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("nothing is ever applied"), "{body}");
}

/// A config file written before the file had sections (`tests/fixtures/config/server-flat.json`
/// is `config/examples/server.json` as it was) still starts the host: every setting takes
/// effect, and the log warns once per key, naming the section it moved to.
#[tokio::test]
async fn an_old_flat_config_file_still_starts_the_host_with_a_warning_per_key() {
    let fixture = support::root().join("tests/fixtures/config/server-flat.json");
    let server = Server::start({
        let mut c = serve_command(env!("CARGO_BIN_EXE_akritas"));
        c.current_dir(support::root()).arg("--config").arg(&fixture).env_remove("AKRITAS_SYSTEM_INSTRUCTIONS");
        c
    });
    let health: Value = reqwest::get(format!("{}/health", server.url)).await.unwrap().json().await.unwrap();
    assert!(health["catalog"]["version"].is_number(), "the host serves: {health}");
    let resources: Value =
        reqwest::get(format!("{}/api/v1/resources", server.url)).await.unwrap().json().await.unwrap();
    assert!(resources.to_string().contains("AlertSource"), "resources: [config/samples] took effect: {resources}");
    let log = server.log_text();
    let warnings: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| {
            line["level"] == "WARN" && line["fields"]["message"].as_str().unwrap_or("").contains("is deprecated")
        })
        .collect();
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let flat = file.as_object().unwrap().len() - 1;
    assert_eq!(warnings.len(), flat, "one warning per flat key (all but version): {log}");
    let max_tokens = format!(
        "{}: the top-level key \"max_tokens\" is deprecated; move it into the section \"budget\" (budget.max_tokens)",
        fixture.display()
    );
    assert!(warnings.iter().any(|w| w["fields"]["message"] == max_tokens.as_str()), "{warnings:#?}");
}
