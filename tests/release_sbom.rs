//! The release's SBOM (`tools/sbom`, run by e2e/release.sh) lists exactly the crates cargo
//! builds into `akritas` for a target, each with the checksum the lockfile pins, and the
//! dependency edges cargo resolves.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use akritas_sbom::{Request, bom, rfc3339};
use serde_json::Value;

fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")
}

fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

fn sbom(target: &str) -> Value {
    let manifest = manifest();
    let request = Request { manifest: &manifest, package: "akritas", target, epoch: 1_765_000_000, cargo: cargo() };
    bom(&request).unwrap_or_else(|e| panic!("{target}: {e}"))
}

/// `name@version` of each crate `cargo tree -e normal` prints with `args`, but the first line
/// (the package asked about).
fn cargo_tree(target: &str, args: &[&str]) -> BTreeSet<String> {
    let mut command = Command::new(cargo());
    command.args(["tree", "--locked", "-e", "normal", "--prefix", "none", "--format", "{p}", "--target", target]);
    command.args(args).arg("--manifest-path").arg(manifest());
    let output = command.output().expect("cargo tree runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some(format!("{}@{}", words.next()?, words.next()?.strip_prefix('v')?))
        })
        .collect()
}

fn key(component: &Value) -> String {
    format!("{}@{}", component["name"].as_str().unwrap(), component["version"].as_str().unwrap())
}

#[test]
fn the_sbom_lists_what_cargo_builds_into_the_binary_for_each_target() {
    let lock = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock")).unwrap();
    for target in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
        let bom = sbom(target);
        assert_eq!(bom["specVersion"], "1.5");
        assert_eq!(bom["metadata"]["timestamp"], "2025-12-06T05:46:40Z");
        assert_eq!(bom["metadata"]["properties"][0]["value"], target);
        let root = &bom["metadata"]["component"];
        assert_eq!((root["name"].as_str(), root["type"].as_str()), (Some("akritas"), Some("application")));
        assert_eq!(root["licenses"][0]["expression"], "Apache-2.0");
        assert!(!root.to_string().contains(env!("CARGO_MANIFEST_DIR")), "no local path: {root}");

        let components = bom["components"].as_array().unwrap();
        let listed: BTreeSet<String> = components.iter().map(key).collect();
        let mut built = cargo_tree(target, &["-p", "akritas"]);
        built.remove("akritas@0.1.0");
        assert_eq!(listed, built, "{target}: the SBOM's crates are cargo tree's");
        for dev_only in ["proptest", "tower-test", "akritas-testkit", "akritas-sbom"] {
            assert!(
                !listed.iter().any(|k| k.starts_with(&format!("{dev_only}@"))),
                "{target}: {dev_only} is not built in"
            );
        }
        assert!(!listed.iter().any(|k| k.starts_with("windows")), "{target}: another platform's crate");

        for component in components {
            let (name, version) = (component["name"].as_str().unwrap(), component["version"].as_str().unwrap());
            assert_eq!(component["purl"], format!("pkg:cargo/{name}@{version}"), "crates.io only");
            let sum = component["hashes"][0]["content"].as_str().unwrap_or_else(|| panic!("{name}: no hash"));
            let pinned = format!(
                "name = \"{name}\"\nversion = \"{version}\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{sum}\""
            );
            assert!(lock.contains(&pinned), "{name}@{version}: not the lockfile's checksum");
            assert!(component["licenses"][0]["expression"].is_string(), "{name}: no license expression");
        }

        // Every edge points at a listed crate; the root's and two crates' match cargo's.
        let refs: BTreeSet<&str> = components.iter().chain([root]).map(|c| c["bom-ref"].as_str().unwrap()).collect();
        let dependencies = bom["dependencies"].as_array().unwrap();
        assert_eq!(dependencies.len(), refs.len());
        assert_eq!(dependencies[0]["ref"], root["bom-ref"]);
        let name_of = |r: &str| r.rsplit_once('#').map_or("akritas@0.1.0".to_owned(), |(_, k)| k.to_owned());
        for dependency in dependencies {
            for on in dependency["dependsOn"].as_array().unwrap() {
                assert!(refs.contains(on.as_str().unwrap()), "{on} is not a component");
            }
        }
        let on = |spec: &str| -> BTreeSet<String> {
            let entry = dependencies.iter().find(|d| name_of(d["ref"].as_str().unwrap()) == spec).unwrap();
            entry["dependsOn"].as_array().unwrap().iter().map(|r| name_of(r.as_str().unwrap())).collect()
        };
        assert_eq!(
            on("akritas@0.1.0"),
            cargo_tree(target, &["-p", "akritas", "--depth", "1"]),
            "{target}: the root's edges"
        );
        // Who depends on a crate, as cargo inverts the tree of `akritas` alone (features unified
        // with no other workspace member: tokio-tungstenite is akritas's, not axum's).
        for name in ["axum", "tokio", "tokio-tungstenite"] {
            let spec = listed.iter().find(|k| k.split('@').next() == Some(name));
            let spec = spec.unwrap_or_else(|| panic!("{target}: no {name}"));
            let parents: BTreeSet<String> = dependencies
                .iter()
                .filter(|d| d["dependsOn"].as_array().unwrap().iter().any(|r| name_of(r.as_str().unwrap()) == *spec))
                .map(|d| name_of(d["ref"].as_str().unwrap()))
                .collect();
            let inverted = cargo_tree(target, &["-p", "akritas", "-i", spec, "--depth", "1"]);
            assert_eq!(parents, inverted, "{target}: what depends on {spec}");
        }
        assert_eq!(bom, sbom(target), "the same tree gives the same SBOM");
    }
}

#[test]
fn timestamps_are_utc_calendar_dates() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
    assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
}
