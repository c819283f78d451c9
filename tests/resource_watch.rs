//! The standalone directory watch, driven through the real `akritas serve`: reading the
//! manifests reloads nothing, a change is one reload, and each resource problem is
//! logged once per change (at start too), not once per reload.

use akritas_testkit as support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{Server, poll, serve_command};

const INVALID_SKILL: &str = "apiVersion: akritas.io/v1alpha1\nkind: Skill\nmetadata: {name: pg, namespace: ops}\n\
                             spec: {description: 42, content: c}\n";
const OTHER_INVALID_SKILL: &str = "apiVersion: akritas.io/v1alpha1\nkind: Skill\n\
                                   metadata: {name: pg, namespace: ops}\nspec: {description: true, content: c}\n";
const VALID_SKILL: &str = "apiVersion: akritas.io/v1alpha1\nkind: Skill\nmetadata: {name: pg, namespace: ops}\n\
                           spec: {description: PostgreSQL, content: c}\n";
/// Valid, but not Ready: its token variable is not set.
const UNRESOLVED_SOURCE: &str = "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\n\
                                 metadata: {name: am, namespace: default}\n\
                                 spec: {provider: alertmanager, auth: {bearerToken: {env: AKRITAS_WATCH_TEST_UNSET}}}\n";

fn lines(server: &Server) -> Vec<Value> {
    server.log.lock().unwrap().iter().filter_map(|line| serde_json::from_str(line).ok()).collect()
}

fn field<'a>(line: &'a Value, name: &str) -> &'a str {
    line["fields"][name].as_str().unwrap_or_default()
}

/// The log lines with this message about the object `kind/name`.
fn about(server: &Server, message: &str, kind: &str, name: &str) -> Vec<Value> {
    lines(server)
        .into_iter()
        .filter(|l| field(l, "message") == message && field(l, "kind") == kind && field(l, "name") == name)
        .collect()
}

fn reloads(server: &Server, trigger: &str) -> usize {
    lines(server)
        .iter()
        .filter(|l| field(l, "message") == "reloading resources" && field(l, "trigger") == trigger)
        .count()
}

/// Waits until `count` lines say `message` about the skill (or panics with the log).
async fn wait_for(server: &Server, message: &str, count: usize) {
    let found = poll(Duration::from_secs(20), || async {
        (about(server, message, "Skill", "pg").len() >= count).then_some(())
    })
    .await;
    assert!(found.is_some(), "no {count}x {message:?}:\n{}", server.log_text());
}

fn read_every_file(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        std::fs::read(entry.unwrap().path()).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_resource_problem_is_logged_once_per_change_and_reads_reload_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let skill = dir.path().join("skill.yaml");
    std::fs::write(&skill, INVALID_SKILL).unwrap();
    std::fs::write(dir.path().join("source.yaml"), UNRESOLVED_SOURCE).unwrap();
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--resources")
        .arg(dir.path())
        .env("RUST_LOG", "info,akritas::catalog::directory=debug")
        .env_remove("AKRITAS_WATCH_TEST_UNSET");
    let server = Server::start(command);

    // Start-up: the invalid skill and the unresolved source, once each.
    wait_for(&server, "resource not ready", 1).await;
    let found = poll(Duration::from_secs(20), || async {
        (!about(&server, "resource not ready", "AlertSource", "am").is_empty()).then_some(())
    })
    .await;
    assert!(found.is_some(), "the not-ready source is not logged at start:\n{}", server.log_text());
    let source = &about(&server, "resource not ready", "AlertSource", "am")[0];
    assert_eq!(field(source, "namespace"), "default");
    assert_eq!(field(source, "reason"), "SecretsUnresolved");
    assert!(field(source, "error").contains("AKRITAS_WATCH_TEST_UNSET"), "{source}");

    // Idle for 10 s, with the manifests read now and then: no reload is triggered by a
    // change, and nothing is logged again (the periodic rescan finds the same problems).
    let changes_before = reloads(&server, "change");
    for _ in 0..20 {
        read_every_file(dir.path());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(reloads(&server, "change"), changes_before, "reads reloaded:\n{}", server.log_text());
    let skill_lines = about(&server, "resource not ready", "Skill", "pg");
    assert_eq!(skill_lines.len(), 1, "{}", server.log_text());
    assert_eq!(field(&skill_lines[0], "reason"), "Invalid");
    assert!(field(&skill_lines[0], "error").contains("spec.description"), "{}", skill_lines[0]);
    assert_eq!(about(&server, "resource not ready", "AlertSource", "am").len(), 1, "{}", server.log_text());

    // A change (written in one go, several file events) is one reload and one new line.
    std::fs::write(&skill, OTHER_INVALID_SKILL).unwrap();
    wait_for(&server, "resource not ready", 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(reloads(&server, "change"), changes_before + 1, "{}", server.log_text());
    let skill_lines = about(&server, "resource not ready", "Skill", "pg");
    assert_eq!(skill_lines.len(), 2, "{}", server.log_text());
    assert!(field(&skill_lines[1], "error").contains("got true"), "{}", skill_lines[1]);

    // Fixed: said once.
    std::fs::write(&skill, VALID_SKILL).unwrap();
    wait_for(&server, "resource ready", 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(about(&server, "resource ready", "Skill", "pg").len(), 1, "{}", server.log_text());
    assert_eq!(about(&server, "resource not ready", "Skill", "pg").len(), 2, "{}", server.log_text());
}
