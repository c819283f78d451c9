//! The Dockerfile and the shipped configuration examples stay consistent with the
//! code: the build stage gets everything cargo needs to build the binary, every
//! copied path exists, the image runs as non-root on the port the container config
//! listens on, and every example config loads.

use std::path::{Path, PathBuf};
use std::process::Command;

use akritas::config::{ServeFlags, load};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn load_example(name: &str) -> akritas::config::Settings {
    let flags = ServeFlags { config: Some(root().join("config/examples").join(name)), ..ServeFlags::default() };
    let settings = load(&flags, &|_| None).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(settings.deprecated.is_empty(), "{name} uses the sections: {:?}", settings.deprecated);
    settings
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
    let stages = docker::stages(&text);
    let names: Vec<_> = stages.iter().map(|s| s[0].args.as_str()).collect();
    assert_eq!(
        names,
        ["rust:1.95-bookworm AS build", "scratch AS context", "${BINARY_FROM} AS binary", "debian:bookworm-slim"],
        "build, a binary from the context, the one of them BINARY_FROM names, and the runtime stage"
    );
    // The `context` stage's binary is what e2e/image.sh puts in the context it assembles.
    let repository_copies = stages.iter().filter(|s| s[0].args != "scratch AS context").flatten();
    for copy in repository_copies.filter_map(docker::Copy::of).filter(|c| c.from.is_none()) {
        for source in &copy.sources {
            assert!(root().join(source).exists(), "Dockerfile copies missing path {source}");
        }
    }
    let runtime = stages.last().unwrap();
    let arg = |keyword: &str| runtime.iter().rev().find(|i| i.keyword == keyword).map(|i| i.args.as_str());
    let user = arg("USER").expect("USER set");
    assert!(!user.starts_with('0') && !user.starts_with("root"), "image must not run as root");
    assert_eq!(arg("EXPOSE"), Some("8090"));
    assert_eq!(arg("ENV"), Some("AKRITAS_CONFIG=/etc/akritas/server.json"));
    let copies: Vec<String> =
        runtime.iter().filter_map(docker::Copy::of).map(|c| format!("{} {}", c.sources.join(" "), c.dest)).collect();
    assert!(copies.contains(&"config/examples/server.container.json /etc/akritas/server.json".to_string()));
    assert!(copies.contains(&"instructions /usr/share/akritas/instructions".to_string()));
    // Nothing in src spawns the git CLI (workspaces link libgit2), so the image has none.
    let installs_git = runtime.iter().any(|i| i.keyword == "RUN" && i.args.split_whitespace().any(|w| w == "git"));
    assert!(!installs_git, "the runtime image installs git, which no code path runs");
}

/// One health contract: liveness is "the process serves" (`/health`'s status code, which stays
/// 200 while the host is `degraded`), readiness is `/ready`. The image's `HEALTHCHECK` and the
/// chart's livenessProbe read `/health`'s status line, never its `status`; the readinessProbe
/// reads `/ready`; docs/http-api.md says so. tests/image_e2e.rs runs the HEALTHCHECK against a
/// degraded host in the built image.
#[test]
fn the_healthcheck_the_probes_and_the_docs_are_one_contract() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let stages = docker::stages(&dockerfile);
    let healthcheck = stages.last().unwrap().iter().find(|i| i.keyword == "HEALTHCHECK").expect("a HEALTHCHECK");
    assert!(healthcheck.args.contains("GET /health HTTP/1.0"), "{}", healthcheck.args);
    assert!(healthcheck.args.contains("200 "), "the HEALTHCHECK reads the status code: {}", healthcheck.args);
    assert!(!healthcheck.args.contains("status"), "a degraded host must not be unhealthy: {}", healthcheck.args);
    let deployment = std::fs::read_to_string(root().join("charts/akritas/templates/deployment.yaml")).unwrap();
    let probe = |name: &str| {
        let at = deployment.find(&format!("{name}:")).unwrap_or_else(|| panic!("the chart has no {name}"));
        let path = deployment[at..].lines().find_map(|l| l.trim().strip_prefix("path: ")).expect("an httpGet path");
        path.to_string()
    };
    assert_eq!(probe("livenessProbe"), "/health");
    assert_eq!(probe("readinessProbe"), "/ready");
    let docs = std::fs::read_to_string(root().join("docs/http-api.md")).unwrap();
    let row = |route: &str| docs.lines().find(|l| l.starts_with(&format!("| `GET {route}` |"))).unwrap_or_default();
    assert!(row("/health").contains("livenessProbe") && row("/health").contains("HEALTHCHECK"), "{}", row("/health"));
    assert!(row("/ready").contains("readinessProbe") && row("/ready").contains("503"), "{}", row("/ready"));
}

/// The build stage keeps cargo's registry and target directory in BuildKit cache
/// mounts, and the runtime stage takes the binary from a path outside them (a cache
/// mount is not part of the stage's image, so copying from it would fail).
#[test]
fn build_stage_caches_cargo_and_hands_over_the_binary_outside_the_cache() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let stages = docker::stages(&text);
    let (build, runtime) = (&stages[0], stages.last().unwrap());
    assert!(text.contains("\nARG BINARY_FROM=build\n"), "by default the image compiles its binary");
    let (workdir, run) = docker::cargo_build(build).expect("the build stage runs `cargo build`");
    for needed in ["--release", "--locked", "--bin akritas"] {
        assert!(run.args.contains(needed), "the image build runs `cargo build` without {needed}: {}", run.args);
    }
    let mounts = docker::cache_mounts(&run.args);
    assert!(mounts.contains(&PathBuf::from("/usr/local/cargo/registry")), "no registry cache mount: {mounts:?}");
    assert!(mounts.contains(&workdir.join("target")), "no target cache mount: {mounts:?}");
    let binary = runtime
        .iter()
        .filter_map(docker::Copy::of)
        .find(|c| c.from.as_deref() == Some("binary"))
        .expect("the runtime stage copies the binary from the stage BINARY_FROM names (default: build)");
    for source in &binary.sources {
        let path = workdir.join(source);
        assert!(!mounts.iter().any(|m| path.starts_with(m)), "{source} lies in a cache mount, absent from the image");
        assert!(run.args.contains(source.as_str()), "the cargo RUN does not produce {source}: {}", run.args);
    }
}

/// Checks the binary's crate from exactly what the Dockerfile's build stage copies
/// (the context filtered by `.dockerignore`), locked and offline, against the suite's
/// target directory. Catches a build stage that misses a path the manifest needs —
/// declared `[[bench]]` or other target files, workspace members, path dependencies
/// (cargo refuses such a manifest) — or a source file of the binary. The Dockerfile
/// that copied only `Cargo.toml`, `Cargo.lock` and `src` failed here.
///
/// The copy keeps the files' modification times in a fixed directory, so an
/// unchanged tree is not checked again.
#[test]
fn the_image_build_stage_has_everything_cargo_needs() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let stage = &docker::stages(&text)[0];
    let image = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image-build-stage");
    if image.exists() {
        std::fs::remove_dir_all(&image).unwrap();
    }
    let project = docker::assemble(stage, &root(), &docker::Ignore::of_context(&root()), &image);
    let check = cargo_check(&project);
    assert!(check.status.success(), "the binary does not build in the image's build stage:\n{}", stderr(&check));
}

/// The check above fails for a build stage that copies only the manifest, the
/// lock file and `src` (the Dockerfile before the fix): the manifest declares
/// benches and the `testkit` and `tools/sbom` workspace members, which such a stage lacks.
#[test]
fn a_build_stage_without_the_bench_sources_is_refused() {
    let dockerfile = "FROM rust AS build\nWORKDIR /src\nCOPY Cargo.toml Cargo.lock ./\nCOPY src ./src\n\
                      RUN cargo build --release --locked --bin akritas\n";
    let stage = &docker::stages(dockerfile)[0];
    let image = tempfile::tempdir().unwrap();
    let project = docker::assemble(stage, &root(), &docker::Ignore::of_context(&root()), image.path());
    let check = cargo_check(&project);
    assert!(!check.status.success(), "cargo accepted a manifest whose benches and workspace member are missing");
    let error = stderr(&check);
    let missing = ["bench at `benches/", "testkit/Cargo.toml", "tools/sbom/Cargo.toml"];
    assert!(missing.iter().any(|m| error.contains(m)), "{error}");
}

#[test]
fn dockerignore_rules_follow_docker() {
    let ignore = docker::Ignore::parse("# comment\n/target/\n**/*.log\nnotes/*\n!notes/keep.md\n");
    for (path, excluded) in [
        ("target", true),
        ("target/debug/akritas", true),
        ("src/target", false),
        ("a/b/run.log", true),
        ("notes/todo.md", true),
        ("notes/keep.md", false),
        ("notes", false),
        ("src/main.rs", false),
    ] {
        assert_eq!(ignore.excludes(Path::new(path)), excluded, "{path}");
    }
}

/// Prefixes of the variables cargo sets for a test process.
const SET_FOR_TESTS: &[&str] = &[
    "CARGO_PKG_",
    "CARGO_BIN_",
    "CARGO_MANIFEST_",
    "CARGO_CRATE_NAME",
    "CARGO_TARGET_TMPDIR",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_RUSTC_CURRENT_DIR",
    "OUT_DIR",
];

/// `cargo check --locked --offline --bin akritas` in `project` with the suite's
/// target directory, so compiled dependencies are reused. The variables cargo sets
/// for this test process are removed: build scripts that watch one of them (ring
/// watches `CARGO_MANIFEST_DIR`) would otherwise rerun, and the suite rebuild after.
fn cargo_check(project: &Path) -> std::process::Output {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("the target tmp directory has a parent");
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.args(["check", "--locked", "--offline", "--bin", "akritas", "--target-dir"]).arg(target);
    for (name, _) in std::env::vars_os() {
        if SET_FOR_TESTS.iter().any(|prefix| name.to_string_lossy().starts_with(prefix)) {
            command.env_remove(name);
        }
    }
    let output = command.current_dir(project).output().unwrap();
    forget_copy_fingerprints(target, project);
    output
}

/// The copy's package has the same unit hashes as the tree's, so its check leaves the
/// tree's `cargo check`/`clippy` fingerprints pointing at the copy's files: a later local
/// check of the tree would say Fresh however its sources changed. Removes those
/// fingerprints, so the next check of the tree checks it again (dependencies stay).
fn forget_copy_fingerprints(target: &Path, project: &Path) {
    // cargo records a file under the target directory relative to it.
    let copy = project.strip_prefix(target).unwrap_or(project).display().to_string();
    let fingerprints = target.join("debug/.fingerprint");
    for entry in std::fs::read_dir(&fingerprints).into_iter().flatten().flatten() {
        let dir = entry.path();
        let names_the_copy = std::fs::read_dir(&dir).into_iter().flatten().flatten().any(|file| {
            file.file_name().to_string_lossy().starts_with("dep-")
                && std::fs::read(file.path()).is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(&copy))
        });
        if names_the_copy {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The parts of Dockerfile and `.dockerignore` semantics the image checks need.
mod docker {
    use std::path::{Path, PathBuf};

    /// One instruction: upper-case keyword and its arguments, continuation lines joined.
    pub struct Instruction {
        pub keyword: String,
        pub args: String,
    }

    /// The instructions of each stage, `FROM` first. Comments (including parser
    /// directives) are dropped.
    pub fn stages(dockerfile: &str) -> Vec<Vec<Instruction>> {
        let mut lines = Vec::new();
        let mut current = String::new();
        for line in dockerfile.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.strip_suffix('\\') {
                Some(head) => {
                    current.push_str(head);
                    current.push(' ');
                }
                None => {
                    current.push_str(line);
                    lines.push(std::mem::take(&mut current));
                }
            }
        }
        let mut stages: Vec<Vec<Instruction>> = Vec::new();
        for line in lines {
            let (keyword, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
            let instruction = Instruction { keyword: keyword.to_ascii_uppercase(), args: args.trim().to_string() };
            if instruction.keyword == "FROM" {
                stages.push(Vec::new());
            }
            match stages.last_mut() {
                Some(stage) => stage.push(instruction),
                // Only `ARG` may come before the first `FROM` (the stages' global arguments).
                None => assert_eq!(instruction.keyword, "ARG", "a Dockerfile starts with FROM or ARG"),
            }
        }
        stages
    }

    /// A `COPY` (shell form).
    pub struct Copy {
        /// `--from=` stage, if any.
        pub from: Option<String>,
        pub sources: Vec<String>,
        pub dest: String,
    }

    impl Copy {
        pub fn of(instruction: &Instruction) -> Option<Copy> {
            if instruction.keyword != "COPY" {
                return None;
            }
            assert!(!instruction.args.starts_with('['), "COPY in JSON form is not modelled: {}", instruction.args);
            let mut words: Vec<&str> = instruction.args.split_whitespace().collect();
            let flags = words.iter().take_while(|w| w.starts_with("--")).count();
            let from = words.drain(..flags).find_map(|f| f.strip_prefix("--from=")).map(str::to_string);
            let dest = words.pop().expect("COPY has a destination").to_string();
            assert!(!words.is_empty(), "COPY without a source: {}", instruction.args);
            Some(Copy { from, sources: words.into_iter().map(str::to_string).collect(), dest })
        }
    }

    /// The working directory in effect at the stage's `RUN` that invokes `cargo build`,
    /// and that instruction.
    pub fn cargo_build(stage: &[Instruction]) -> Option<(PathBuf, &Instruction)> {
        let mut workdir = PathBuf::from("/");
        for instruction in stage {
            match instruction.keyword.as_str() {
                "WORKDIR" => workdir = workdir.join(&instruction.args),
                "RUN" if instruction.args.contains("cargo build") => return Some((workdir, instruction)),
                _ => {}
            }
        }
        None
    }

    /// Targets of the `--mount=type=cache` options of a `RUN`.
    pub fn cache_mounts(run_args: &str) -> Vec<PathBuf> {
        run_args
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("--mount="))
            .filter(|m| m.split(',').any(|o| o == "type=cache"))
            .filter_map(|m| m.split(',').find_map(|o| o.strip_prefix("target=")))
            .map(PathBuf::from)
            .collect()
    }

    /// `.dockerignore` as Docker applies it: patterns relative to the context root
    /// (leading and trailing `/` dropped), `*` and `?` within a path component, `**`
    /// across components, `!` re-includes, the last matching rule wins, and a rule
    /// matching a directory matches everything below it.
    pub struct Ignore(Vec<(bool, globset::GlobMatcher)>);

    impl Ignore {
        pub fn of_context(context: &Path) -> Ignore {
            Ignore::parse(&std::fs::read_to_string(context.join(".dockerignore")).unwrap_or_default())
        }

        pub fn parse(text: &str) -> Ignore {
            let rules = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|line| {
                    let (include, pattern) = line.strip_prefix('!').map_or((false, line), |p| (true, p.trim()));
                    let pattern = pattern.trim_start_matches("./").trim_matches('/');
                    let glob = globset::GlobBuilder::new(pattern)
                        .literal_separator(true)
                        .build()
                        .unwrap_or_else(|e| panic!(".dockerignore pattern {line:?}: {e}"));
                    (include, glob.compile_matcher())
                })
                .collect();
            Ignore(rules)
        }

        /// Whether `path` (relative to the context root) is left out of the context.
        pub fn excludes(&self, path: &Path) -> bool {
            let mut excluded = false;
            for (include, glob) in &self.0 {
                if path.ancestors().filter(|a| !a.as_os_str().is_empty()).any(|a| glob.is_match(a)) {
                    excluded = !include;
                }
            }
            excluded
        }

        fn has_exceptions(&self) -> bool {
            self.0.iter().any(|(include, _)| *include)
        }
    }

    /// Carries out the stage's `COPY` instructions from `context` into the image
    /// file system rooted at `image`; returns the directory `cargo build` runs in.
    pub fn assemble(stage: &[Instruction], context: &Path, ignore: &Ignore, image: &Path) -> PathBuf {
        let mut workdir = PathBuf::from("/");
        let in_image = |path: &Path| image.join(path.strip_prefix("/").expect("absolute image path"));
        for instruction in stage {
            match instruction.keyword.as_str() {
                "WORKDIR" => workdir = workdir.join(&instruction.args),
                "RUN" if instruction.args.contains("cargo build") => return in_image(&workdir),
                "ADD" => panic!("ADD is not modelled: {}", instruction.args),
                "COPY" => {
                    let copy = Copy::of(instruction).expect("a COPY instruction");
                    assert!(copy.from.is_none(), "the build stage copies from another stage");
                    let dest = in_image(&workdir.join(&copy.dest));
                    let into_dir = copy.dest.ends_with('/') || copy.sources.len() > 1;
                    for source in &copy.sources {
                        let relative = match source.as_str() {
                            "." | "./" => Path::new(""),
                            source => Path::new(source.trim_start_matches("./")),
                        };
                        let from = context.join(relative);
                        let to = match relative.file_name() {
                            Some(name) if into_dir && !from.is_dir() => dest.join(name),
                            _ => dest.clone(),
                        };
                        copy_filtered(context, ignore, relative, &to);
                    }
                }
                _ => {}
            }
        }
        panic!("the build stage never runs `cargo build`")
    }

    /// Copies `relative` (under `context`) to `to` as `COPY` does: a directory's
    /// contents, without what `ignore` excludes; files keep their modification time.
    fn copy_filtered(context: &Path, ignore: &Ignore, relative: &Path, to: &Path) {
        let from = context.join(relative);
        let kind = std::fs::symlink_metadata(&from).unwrap_or_else(|e| panic!("{}: {e}", from.display())).file_type();
        if kind.is_dir() {
            std::fs::create_dir_all(to).unwrap();
            for entry in std::fs::read_dir(&from).unwrap() {
                let name = entry.unwrap().file_name();
                let child = relative.join(&name);
                if !ignore.excludes(&child) || ignore.has_exceptions() {
                    copy_filtered(context, ignore, &child, &to.join(&name));
                }
            }
        } else if !ignore.excludes(relative) {
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            if kind.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&from).unwrap(), to).unwrap();
            } else {
                std::fs::copy(&from, to).unwrap();
                let modified = std::fs::metadata(&from).and_then(|m| m.modified()).unwrap();
                std::fs::File::options().write(true).open(to).and_then(|f| f.set_modified(modified)).unwrap();
            }
        }
    }
}

#[test]
fn serve_help_shows_each_flags_environment_variable_and_default() {
    let output = Command::new(env!("CARGO_BIN_EXE_akritas")).args(["serve", "--help"]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let help = String::from_utf8(output.stdout).unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
    for key in akritas::config::KEYS {
        let env = akritas::config::env_var_name(key);
        assert!(help.contains(&format!("[env: {env}]")), "serve --help does not name {env}:\n{help}");
    }
    let defaults = akritas::config::Settings::default();
    for (flag, env, default) in [
        ("--max-tokens <N>", "AKRITAS_MAX_TOKENS", defaults.max_tokens.to_string()),
        ("--address <ADDR>", "AKRITAS_ADDRESS", defaults.address.to_string()),
        ("--shutdown-timeout <DURATION>", "AKRITAS_SHUTDOWN_TIMEOUT", "30s".to_string()),
        ("--config <PATH>", "AKRITAS_CONFIG", "none".to_string()),
    ] {
        let at = help.find(flag).unwrap_or_else(|| panic!("serve --help lacks {flag}:\n{help}"));
        let entry = format!("[env: {env}] [default: {default}]");
        let shown = help[at..].find(&entry).map(|offset| &help[at..at + offset]);
        assert!(shown.is_some_and(|s| !s.contains(" --")), "{flag} is not followed by {entry}:\n{help}");
    }
}

/// Every setting has its row in docs/configuration.md's table of keys.
#[test]
fn the_configuration_page_documents_every_setting() {
    let page = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    for key in akritas::config::KEYS {
        assert!(page.contains(&format!("| `{key}` |")), "docs/configuration.md's table of keys misses {key}");
    }
}

/// The README's test command is the one `.ci/run` runs.
#[test]
fn readme_and_ci_run_the_same_test_command() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let command = "e2e/install-test-deps.sh && cargo test --locked && cargo test --locked --test e2e";
    assert!(readme.contains(command) && ci.contains(&format!("\n{command}\n")), "README and .ci/run disagree");
    // `set -e` ignores a failure of any command of an `&&` list but the last: a failing
    // `cargo test --locked` would let CI go on and pass. The next line must stop it.
    let after = ci.split(&format!("\n{command}\n")).nth(1).unwrap_or_default();
    let next: Vec<&str> = after.lines().filter(|l| !l.trim_start().starts_with('#')).take(2).collect();
    assert_eq!(
        next,
        ["tests_status=$?", "[ \"$tests_status\" = 0 ] || { echo \"=== tests FAILED (exit $tests_status)\"; exit 1; }"],
        ".ci/run must stop when any command of the test line fails"
    );
}

/// One version everywhere: the chart's `version` and `appVersion` equal the crate version, and
/// `image.tag` is empty (the deployment then pulls the `appVersion` tag) or that same version. A
/// tagged release's chart thus installs the image the release workflow pushed for that tag.
#[test]
fn the_chart_and_its_image_tag_carry_the_crate_version() {
    let version = env!("CARGO_PKG_VERSION");
    let read = |path: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(root().join(path)).unwrap();
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let chart = read("charts/akritas/Chart.yaml");
    for key in ["version", "appVersion"] {
        assert_eq!(
            chart[key].as_str(),
            Some(version),
            "charts/akritas/Chart.yaml has {key}: {}, Cargo.toml has version {version}: set {key} in Chart.yaml to \"{version}\"",
            chart[key]
        );
    }
    let tag = &read("charts/akritas/values.yaml")["image"]["tag"];
    assert!(
        tag.as_str().is_some_and(|tag| tag.is_empty() || tag == version),
        "charts/akritas/values.yaml has image.tag: {tag}, Cargo.toml has version {version}: set image.tag in values.yaml to \"\" (the chart's appVersion) or \"{version}\""
    );
}
