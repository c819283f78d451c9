//! `akritas validate` over the shipped samples and over deliberately broken manifests.

use std::path::Path;
use std::process::Command;

fn validate(dir: &Path) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_akritas")).arg("validate").arg(dir).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn shipped_samples_are_valid() {
    let (code, stdout, stderr) = validate(&root().join("config/samples"));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("ok: 8 resources valid"), "{stderr}");
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
    assert!(lines[0].ends_with("mixed.yaml:0 Skil/x: kind: unknown kind \"Skil\"; expected one of: Skill, McpAdapter, Workspace, ValidatorProfile, NotificationReceiver, AlertSource, KnowledgeBase, Run, Incident"), "{}", lines[0]);
    assert!(lines[1].contains("mixed.yaml:1: invalid YAML"), "{}", lines[1]);
}

#[test]
fn missing_directory_is_an_error() {
    let (code, stdout, _) = validate(&root().join("no-such-dir"));
    assert_eq!(code, 1);
    assert!(stdout.contains("cannot read resource directory"), "{stdout}");
}
