//! `akritas validate` over the shipped samples and over deliberately broken manifests.

use akritas_testkit as support;

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{Server, poll, serve_command};

fn validate(dir: &Path) -> (i32, String, String) {
    validate_with(&[dir.as_os_str()])
}

/// `akritas validate ARGS…` without a config file from the environment.
fn validate_with(args: &[&OsStr]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_akritas"))
        .arg("validate")
        .args(args)
        .env_remove("AKRITAS_CONFIG")
        .env_remove("AKRITAS_RESOURCE_ENV")
        .env_remove("AKRITAS_STDIO_COMMANDS")
        .env_remove("AKRITAS_VALIDATOR_COMMANDS")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Offline, the manifests and the configuration only: the samples and the skills serve loads
/// with them (the repository's `skills/`) are valid.
#[test]
fn shipped_samples_are_valid() {
    let (code, stdout, stderr) = validate_with(&[root().join("config/samples").as_os_str(), "--offline".as_ref()]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("ok: 20 resources valid"), "{stderr}");
}

/// With this machine's environment (none of the samples' variables, no /srv/workspaces), validate
/// lists the resources `/health` sends you to it for, with the same reasons, and exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_empty_environment_validate_lists_what_health_lists_and_exits_1() {
    let samples = root().join("config/samples");
    let output = Command::new(env!("CARGO_BIN_EXE_akritas"))
        .arg("validate")
        .arg(&samples)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(root())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let mut listed: Vec<String> = stdout
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once(' ')?;
            let (object, rest) = rest.split_once(": ")?;
            let (kind, _name) = object.split_once('/')?;
            Some(format!("{kind} {}", rest.split(": ").next()?))
        })
        .collect();
    listed.sort();

    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command.arg("--resources").arg(&samples).current_dir(root());
    for (name, _) in std::env::vars()
        .filter(|(name, _)| name.starts_with("AKRITAS_INCIDENT") || name.starts_with("AKRITAS_ALERTMANAGER"))
    {
        command.env_remove(name);
    }
    let server = Server::start(command);
    let (mut health, _) = poll(Duration::from_secs(30), || async {
        let health: Value = reqwest::get(format!("{}/health", server.url)).await.ok()?.json().await.ok()?;
        let not_ready = health["catalog"]["not_ready"].as_array()?;
        if not_ready.iter().any(|n| n["in_progress"] == true) {
            return None;
        }
        let each = |n: &Value| {
            let line = format!("{} {}", n["kind"].as_str().unwrap_or("?"), n["reason"].as_str().unwrap_or("?"));
            vec![line; usize::try_from(n["count"].as_u64().unwrap_or(1)).unwrap_or(1)]
        };
        Some(not_ready.iter().flat_map(each).collect::<Vec<_>>())
    })
    .await
    .unwrap_or_else(|| panic!("health never settled:\n{}", server.log_text()));
    health.sort();
    assert_eq!(listed, health, "validate:\n{stdout}");
    assert!(
        listed.iter().any(|l| l.ends_with("SecretsUnresolved")) && listed.iter().any(|l| l.ends_with("PathNotFound"))
    );
}

#[test]
fn broken_manifests_yield_one_precise_line_each() {
    let dir = root().join("tests/fixtures/broken");
    let (code, stdout, _) = validate(&dir);
    assert_eq!(code, 1);
    let d = dir.display();
    let expected = [
        format!(
            "{d}/bad-name.yaml:0 Skill/Bad_Name: metadata.name: \"Bad_Name\" is not a valid name: use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
        ),
        format!(
            "{d}/both-literal-and-secret.yaml:0 NotificationReceiver/hooks: spec.webhook: set exactly one of url or urlFrom"
        ),
        format!("{d}/missing-required.yaml:0 McpAdapter/prometheus: spec.allow: required field is missing"),
        format!(
            "{d}/unknown-field.yaml:0 AlertSource/am: spec.retries: unknown field; known fields here: auth, provider"
        ),
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn unreadable_documents_and_unknown_kinds_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mixed.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: Skil\nmetadata: {name: x}\nspec: {}\n---\nkind: [unclosed\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ignored}\n",
    )
    .unwrap();
    let (code, stdout, _) = validate(dir.path());
    assert_eq!(code, 1);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].ends_with("mixed.yaml:0 Skil/x: kind: unknown kind \"Skil\"; expected one of: Skill, McpAdapter, Workspace, ValidatorProfile, NotificationReceiver, AlertSource, KnowledgeBase, RunSchedule, Run, Incident"), "{}", lines[0]);
    assert!(lines[1].contains("mixed.yaml:1: invalid YAML"), "{}", lines[1]);
}

#[test]
fn missing_directory_is_an_error() {
    let (code, stdout, _) = validate(&root().join("no-such-dir"));
    assert_eq!(code, 1);
    assert!(stdout.contains("cannot read resource directory"), "{stdout}");
}

const REFUSED: &str = "apiVersion: akritas.io/v1alpha1\nkind: McpAdapter\nmetadata: {name: shell, namespace: default}\n\
                       spec:\n  transport:\n    stdio:\n      command: /bin/sh\n      args: [-c, id]\n  allow: [read]\n\
                       ---\napiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am, namespace: default}\n\
                       spec: {provider: alertmanager, auth: {bearerToken: {env: OTHER_TOKEN}}}\n\
                       ---\napiVersion: akritas.io/v1alpha1\nkind: ValidatorProfile\n\
                       metadata: {name: kubeconform, namespace: default}\nspec: {argv: [kubeconform, -strict]}\n";

/// `file:doc-index Kind/name: Reason: message` of each refused resource, from the
/// conditions serve derives at `/api/v1/resources`.
async fn serve_refusals(server: &Server, expected: usize) -> Vec<String> {
    let found = poll(Duration::from_secs(40), || async {
        let all: Value = reqwest::get(format!("{}/api/v1/resources", server.url)).await.ok()?.json().await.ok()?;
        let lines: Vec<String> = all["resources"]
            .as_array()?
            .iter()
            .filter_map(|r| {
                let ready = r["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?;
                let reason = ready["reason"].as_str()?;
                if ready["status"] != "False" || !reason.ends_with("NotAllowed") {
                    return None;
                }
                let message = ready["message"].as_str()?;
                let (source, kind, name) = (r["source"].as_str()?, r["kind"].as_str()?, r["name"].as_str()?);
                Some(format!("{source} {kind}/{name}: {reason}: {message}"))
            })
            .collect();
        (lines.len() == expected).then_some(lines)
    })
    .await;
    found.map(|(lines, _)| lines).unwrap_or_else(|| panic!("serve did not refuse {expected}:\n{}", server.log_text()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_refuses_what_serve_refuses_under_the_same_config_with_the_same_reasons() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("resources");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("refused.yaml"), REFUSED).unwrap();
    let config = work.path().join("config.json");
    let flat = r#"{"version": 1, "stdio_commands": ["akritas"], "resource_env": ["AKRITAS_*"]}"#;
    std::fs::write(&config, flat).unwrap();
    let (code, _, stderr) = validate_with(&[dir.as_os_str(), "--config".as_ref(), config.as_os_str()]);
    assert_eq!(code, 1, "{stderr}");
    let moved = [("stdio_commands", "mcp"), ("resource_env", "operator")].map(|(key, section)| {
        format!("warning: {}: the top-level key \"{key}\" is deprecated; move it into the section \"{section}\" ({section}.{key})", config.display())
    });
    assert!(moved.iter().all(|line| stderr.lines().any(|l| l == line)), "a flat file is read with warnings: {stderr}");
    assert!(stderr.contains("3 problems; 7 of 10 resources valid; 2 warnings"), "{stderr}");
    let sections =
        r#"{"version": 1, "mcp": {"stdio_commands": ["akritas"]}, "operator": {"resource_env": ["AKRITAS_*"]}}"#;
    std::fs::write(&config, sections).unwrap();

    let (code, stdout, stderr) = validate_with(&[dir.as_os_str(), "--config".as_ref(), config.as_os_str()]);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("3 problems; 7 of 10 resources valid"), "{stderr}");
    assert!(!stderr.contains("warning"), "a config file was given: no chart warnings: {stderr}");
    let mut validated: Vec<&str> = stdout.lines().collect();
    validated.sort();

    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command.arg("--resources").arg(&dir).arg("--config").arg(&config).env_remove("OTHER_TOKEN");
    let server = Server::start(command);
    let mut served = serve_refusals(&server, 3).await;
    served.sort();
    assert_eq!(validated, served, "serve's log:\n{}", server.log_text());
    let d = dir.display();
    assert!(validated[0].starts_with(&format!("{d}/refused.yaml:0 McpAdapter/shell: CommandNotAllowed: command \"/bin/sh\" is not allowed: the stdio_commands setting allows [akritas]")), "{}", validated[0]);
    assert_eq!(
        validated[1],
        format!(
            "{d}/refused.yaml:1 AlertSource/am: EnvNotAllowed: spec.auth.bearerToken: environment variable OTHER_TOKEN is not readable by resources; add it (or a prefix such as AKRITAS_TEAM_*) to the resource_env setting, or use another variable"
        )
    );
    assert!(
        validated[2].starts_with(&format!(
            "{d}/refused.yaml:2 ValidatorProfile/kubeconform: CommandNotAllowed: validator program \"kubeconform\" is not allowed"
        )),
        "{}",
        validated[2]
    );
    // serve logs each of them once, with the same reason and message.
    for line in &validated {
        let logged = server.log_text().lines().filter(|l| l.contains("resource not ready")).any(|l| {
            let l: Value = serde_json::from_str(l).unwrap_or_default();
            line.ends_with(&format!(
                "{}: {}",
                l["fields"]["reason"].as_str().unwrap_or("?"),
                l["fields"]["error"].as_str().unwrap_or("?")
            ))
        });
        assert!(logged, "{line} is not in serve's log:\n{}", server.log_text());
    }
}

#[test]
fn without_a_config_validate_warns_about_what_the_charts_config_refuses() {
    let (code, stdout, stderr) = validate_with(&[root().join("config/samples").as_os_str(), "--offline".as_ref()]);
    assert_eq!(code, 0, "the default policy allows the samples: {stdout}{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert!(!warnings.is_empty(), "{stderr}");
    assert!(
        warnings.iter().any(|w| w.contains("AlertSource/alertmanager-main: EnvNotAllowed:")
            && w.contains("AKRITAS_ALERTMANAGER_TOKEN")
            && w.contains("resource_env")
            && w.contains("charts/akritas/values.yaml")),
        "{stderr}"
    );
    assert!(warnings.iter().all(|w| w.contains("EnvNotAllowed") && w.contains("resource_env")), "{stderr}");
    assert!(stderr.contains(&format!("ok: 20 resources valid; {} warnings", warnings.len())), "{stderr}");
}

#[test]
fn a_schedule_is_checked_for_its_expression_time_zone_receivers_and_skills() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("schedules.yaml"),
        "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {name: chat, namespace: team-b}\n\
         spec: {type: webhook, webhook: {url: \"https://hooks.example/b\"}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {name: seconds, namespace: team-a}\n\
         spec: {schedule: \"0 0 8 * * *\", timeZone: Mars/Base, prompt: p}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {name: foreign, namespace: team-a}\n\
         spec: {schedule: \"@daily\", prompt: p, receivers: [team-b/chat], skills: [missing]}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {name: fine, namespace: team-b}\n\
         spec: {schedule: \"*/15 9-17 * * MON-FRI\", timeZone: Europe/Berlin, prompt: p, receivers: [chat]}\n",
    )
    .unwrap();
    let (code, stdout, stderr) = validate(dir.path());
    assert_eq!(code, 1, "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    let line = |needle: &str| lines.iter().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}: {stdout}"));
    assert!(
        line("RunSchedule/seconds: spec.schedule")
            .contains("expected 5 fields (minute hour day-of-month month day-of-week), found 6"),
        "{stdout}"
    );
    assert!(line("RunSchedule/seconds: spec.timeZone").contains("unknown time zone \"Mars/Base\""), "{stdout}");
    let foreign = line("RunSchedule/foreign: ReferenceNotFound:");
    assert!(foreign.contains("team-b/chat is not a NotificationReceiver this namespace sees"), "{foreign}");
    assert!(foreign.contains("skills: missing is not a Skill this namespace sees"), "{foreign}");
}
