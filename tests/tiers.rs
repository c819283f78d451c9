//! The test tiers hold: every file in `tests/` is a module of exactly one tier (with
//! `autotests = false` a file left out would silently never run), and no module of the fast tier
//! reaches a harness or command that starts a third-party program.

use std::collections::BTreeSet;
use std::path::Path;

/// Harnesses in `akritas-testkit` that start a program `e2e/install-test-deps.sh` installs.
const THIRD_PARTY_HARNESSES: [&str; 7] = ["prom", "vm", "kube_api", "kubelet", "everything", "clients", "postgres"];
/// Programs a test may start only in the e2e tier.
const THIRD_PARTY_COMMANDS: [&str; 5] = ["amtool", "node", "mount", "helm", "kubectl"];

fn tests_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests"))
}

fn modules_of(tier: &str) -> BTreeSet<String> {
    let root = std::fs::read_to_string(tests_dir().join(format!("{tier}.rs"))).unwrap();
    root.lines().filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';')).map(str::to_owned).collect()
}

/// Whether `source` names a third-party harness or command, with the first such use.
fn third_party_use(source: &str) -> Option<String> {
    for harness in THIRD_PARTY_HARNESSES {
        for prefix in ["support::", "akritas_testkit::"] {
            let path = format!("{prefix}{harness}");
            if source.contains(&format!("{path}::")) || source.contains(&format!("{path};")) {
                return Some(path);
            }
        }
        for line in source.lines().filter(|line| line.starts_with("use support::{")) {
            if line.split(|c: char| !c.is_alphanumeric() && c != '_').any(|word| word == harness) {
                return Some(line.to_owned());
            }
        }
    }
    THIRD_PARTY_COMMANDS
        .iter()
        .map(|command| format!("Command::new(\"{command}\")"))
        .find(|call| source.contains(call.as_str()))
}

#[test]
fn every_test_file_is_in_exactly_one_tier() {
    let fast = modules_of("fast");
    let e2e = modules_of("e2e");
    let both: Vec<_> = fast.intersection(&e2e).collect();
    assert!(both.is_empty(), "modules in both tiers: {both:?}");
    let files: BTreeSet<String> = std::fs::read_dir(tests_dir())
        .unwrap()
        .filter_map(|entry| entry.unwrap().file_name().into_string().ok()?.strip_suffix(".rs").map(str::to_owned))
        .filter(|name| name != "fast" && name != "e2e")
        .collect();
    let tiered: BTreeSet<String> = fast.union(&e2e).cloned().collect();
    let untiered: Vec<_> = files.difference(&tiered).collect();
    assert!(
        untiered.is_empty(),
        "tests/*.rs files in no tier (add a `mod` line to tests/fast.rs or tests/e2e.rs): {untiered:?}"
    );
    let stale: Vec<_> = tiered.difference(&files).collect();
    assert!(stale.is_empty(), "tier modules without a file: {stale:?}");
}

#[test]
fn the_fast_tier_starts_no_third_party_program() {
    let offenders: Vec<(String, String)> = modules_of("fast")
        .into_iter()
        .filter(|module| module != "tiers")
        .filter_map(|module| {
            let source = std::fs::read_to_string(tests_dir().join(format!("{module}.rs"))).unwrap();
            Some((module, third_party_use(&source)?))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "fast-tier modules that need a third-party program (move them to tests/e2e.rs): {offenders:?}"
    );
}

#[test]
fn the_check_sees_each_kind_of_third_party_use() {
    assert_eq!(
        third_party_use("let am = support::prom::Alertmanager::start(url, None).await;").as_deref(),
        Some("support::prom")
    );
    assert_eq!(third_party_use("use akritas_testkit::kube_api;").as_deref(), Some("akritas_testkit::kube_api"));
    assert!(third_party_use("use support::{Server, everything, serve_command};").is_some());
    assert!(third_party_use("Command::new(\"amtool\").arg(\"check-config\")").is_some());
    assert_eq!(third_party_use("use support::{Server, poll, serve_command};\nCommand::new(\"git\")"), None);
}
