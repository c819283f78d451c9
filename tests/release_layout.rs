//! The release's code layout (e2e/release.sh, docs/release.md "Code layout") links the objects of
//! its first link a second time: `e2e/keep-link.sh`, given to rustc as the linker, keeps them,
//! and linked again unchanged they give the same bytes; with an ordering list, the listed
//! functions come first and in that order. Run on a small crate built the way the release is
//! (`lto = "thin"`, several codegen units, `strip = "debuginfo"`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/keep-link.sh")
}

fn run(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(output.status.success(), "{command:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// The `.text` functions of `binary` whose names contain `marker`, in address order.
fn functions_in_order(binary: &Path, marker: &str) -> Vec<String> {
    let listing = run(Command::new("nm").args(["-n", "--defined-only"]).arg(binary));
    listing
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .filter(|name| name.contains(marker))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_kept_link_links_again_to_the_same_bytes_and_takes_an_order() {
    let rustc = run(Command::new("rustc").arg("--version"));
    let minor: u32 = rustc.split('.').nth(1).and_then(|m| m.parse().ok()).unwrap_or(0);
    if minor < 90 || !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        eprintln!("skipped: the layout needs Rust's own lld (x86_64 Linux, Rust 1.90 and later): {rustc}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("layout");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(
        project.join("Cargo.toml"),
        "[package]\nname = \"layout\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[workspace]\n\n\
         [profile.release]\nlto = \"thin\"\ncodegen-units = 4\nstrip = \"debuginfo\"\n",
    )
    .unwrap();
    let functions: String = ["alpha", "bravo", "charlie", "delta"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            format!("#[inline(never)]\npub fn marker_{name}(x: u64) -> u64 {{ x.wrapping_mul({}) ^ {i} }}\n", i + 3)
        })
        .collect();
    let main = "fn main() {\n    let n = std::env::args().count() as u64;\n    \
                println!(\"{}\", marker_alpha(n) + marker_bravo(n) + marker_charlie(n) + marker_delta(n));\n}\n";
    std::fs::write(project.join("src/main.rs"), format!("{functions}{main}")).unwrap();

    let kept = dir.path().join("kept");
    let target = dir.path().join("target");
    let linker = format!("linker={}", script().display());
    run(Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["rustc", "--quiet", "--release", "--bin", "layout", "--", "-C", &linker])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", &target)
        .env("AKRITAS_KEEP_LINK", &kept));
    let linked = PathBuf::from(run(Command::new(script()).arg("--output").arg(&kept)).trim());
    assert!(linked.starts_with(target.join("release/deps")), "{}", linked.display());
    assert!(std::fs::read_dir(kept.join("objects")).unwrap().count() > 0, "the objects are kept");
    let built = std::fs::read(target.join("release/layout")).unwrap();
    assert_eq!(std::fs::read(&linked).unwrap(), built, "--output names what cargo built");

    // Linked again unchanged: the same bytes, though rustc deleted what it linked from.
    let again = dir.path().join("again");
    run(Command::new(script()).arg("--relink").arg(&kept).arg(&again));
    assert!(std::fs::read(&again).unwrap() == built, "a kept link links again to the same binary");

    // With an ordering list: the listed functions first, in the list's order, the same code.
    let before = functions_in_order(&again, "marker_");
    assert_eq!(before.len(), 4, "{before:?}");
    let wanted: Vec<String> = before.iter().rev().cloned().collect();
    let list = dir.path().join("order.txt");
    std::fs::write(&list, wanted.join("\n") + "\n").unwrap();
    let ordered = dir.path().join("ordered");
    run(Command::new(script())
        .arg("--relink")
        .arg(&kept)
        .arg(&ordered)
        .arg(format!("-Wl,--symbol-ordering-file={}", list.display()))
        .arg("-Wl,--no-warn-symbol-ordering"));
    assert_eq!(functions_in_order(&ordered, "marker_"), wanted);
    let text = |binary: &Path| run(Command::new(binary).args(["a", "b"]));
    assert_eq!(text(&ordered), text(&again), "the same program");

    // A kept link that is not there is said so.
    let missing = Command::new(script()).arg("--output").arg(dir.path().join("none")).output().unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no kept link in"));
}
