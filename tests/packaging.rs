//! The Dockerfile and the shipped configuration examples stay consistent with the
//! code: every copied path exists, the image runs as non-root on the port the
//! container config listens on, and every example config loads.

use std::path::{Path, PathBuf};

use akritas::config::{ServeFlags, load};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn load_example(name: &str) -> akritas::config::Settings {
    let flags = ServeFlags { config: Some(root().join("config/examples").join(name)), ..ServeFlags::default() };
    load(&flags, &|_| None).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn example_configs_load() {
    let local = load_example("server.json");
    assert!(local.address.ip().is_loopback());
    assert_eq!(local.resources, vec![PathBuf::from("config/samples")]);
    let container = load_example("server.container.json");
    assert_eq!(container.address.port(), 8090);
    assert_eq!(container.system_instructions, Path::new("/usr/share/akritas/instructions/SYSTEM.md"));
}

#[test]
fn dockerfile_is_multi_stage_non_root_and_copies_existing_paths() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert_eq!(lines.iter().filter(|l| l.starts_with("FROM ")).count(), 2, "build and runtime stages");
    for line in lines.iter().filter(|l| l.starts_with("COPY ") && !l.contains("--from=")) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for source in &parts[1..parts.len() - 1] {
            assert!(root().join(source).exists(), "Dockerfile copies missing path {source}");
        }
    }
    let user = lines.iter().find_map(|l| l.strip_prefix("USER ")).expect("USER set");
    assert!(!user.starts_with('0') && !user.starts_with("root"), "image must not run as root");
    assert!(lines.contains(&"EXPOSE 8090"));
    assert!(lines.contains(&"ENV AKRITAS_CONFIG=/etc/akritas/server.json"));
    assert!(lines.iter().any(|l| l.contains("config/examples/server.container.json /etc/akritas/server.json")));
    assert!(lines.iter().any(|l| l.contains("instructions /usr/share/akritas/instructions")));
}

#[test]
fn readme_documents_every_setting() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for key in akritas::config::KEYS {
        assert!(readme.contains(&format!("| `{key}` |")), "README configuration table misses {key}");
    }
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let command = "e2e/install-test-deps.sh && cargo test --locked";
    assert!(readme.contains(command) && ci.contains(&format!("\n{command}\n")), "README and .ci/run disagree");
}
