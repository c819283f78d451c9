//! Every printing command with its standard output closed before it writes (the reader went
//! away, as `akritas crds | head -1` does): it ends by SIGPIPE, as `git log | head` does, with
//! nothing on stderr; never a panic and a backtrace. Reading the first byte and closing would
//! race the command's writes (a short output fits in the pipe); a pipe closed before the command
//! starts makes every write fail.

use akritas_testkit as support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use tokio::io::AsyncBufReadExt;

fn akritas() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_akritas"));
    command.current_dir(support::root()).env_remove("AKRITAS_CONFIG").env_remove("AKRITAS_API_KEY");
    command
}

/// Runs `command` with a standard output nobody reads; asserts that it ended by SIGPIPE (clap's
/// help and version ignore the error and exit 0) and said nothing about it.
fn closed(mut command: Command, name: &str, by_signal: bool) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = command.stdout(Stdio::from(writer)).stderr(Stdio::piped()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    for said in ["panicked", "Broken pipe", "backtrace", "standard output"] {
        assert!(!stderr.contains(said), "{name}: {stderr}");
    }
    if by_signal {
        assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{name}: {:?}\n{stderr}", output.status);
    } else {
        assert!(output.status.success(), "{name}: {:?}\n{stderr}", output.status);
    }
}

fn with(args: &[&str]) -> Command {
    let mut command = akritas();
    command.args(args);
    command
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_offline_commands_end_quietly_when_nobody_reads_their_output() {
    for args in [&["--help"][..], &["--version"], &["serve", "--help"], &["validate", "--help"]] {
        closed(with(args), &args.join(" "), false);
    }
    closed(with(&["crds"]), "crds", true);
    closed(with(&["openapi"]), "openapi", true);
    closed(with(&["validate", "tests/fixtures/broken"]), "validate", true);

    let tmp = tempfile::tempdir().unwrap();
    let (corpus, index) = (tmp.path().join("corpus"), tmp.path().join("index"));
    let runbooks = support::root().join("config/samples/runbooks");
    closed(
        with(&["corpus", "import", "--input", path(&runbooks), "--output", path(&corpus), "--source", "runbooks"]),
        "corpus import",
        true,
    );
    closed(with(&["index", "build", "--corpus", path(&corpus), "--output", path(&index)]), "index build", true);
    for args in [
        &["index", "search", "disk full", "--index", path(&index)][..],
        &["index", "search", "disk full", "--index", path(&index), "--json"],
        &["index", "inspect", "--index", path(&index)],
        &["index", "list", "--index", path(&index)],
    ] {
        closed(with(args), &args.join(" "), true);
    }

    let journal = support::root().join("tests/fixtures/data-f6d8654/alerts-investigated/audit/akritas.jsonl");
    closed(with(&["audit", "verify", path(&journal)]), "audit verify", true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_that_reach_a_model_or_a_host_end_quietly_when_nobody_reads_their_output() {
    let llm = support::one_question::model().await;
    let data = tempfile::tempdir().unwrap();
    let root = support::root();
    let instructions = root.join("instructions/SYSTEM.md");
    for json in [false, true] {
        let mut ask =
            support::one_question::command(&[], Path::new(env!("CARGO_BIN_EXE_akritas")), &llm.url, data.path(), &[]);
        if json {
            ask.arg("--json");
        }
        closed(ask, &format!("ask (json {json})"), true);
    }

    let case = root.join("evals/starter/01-crashloop-oom-cart.yaml");
    let model =
        ["--base-url", &llm.url, "--upstream-model", "scripted-model", "--system-instructions", path(&instructions)];
    closed(with(&[&["run", "replay", path(&case)][..], &model].concat()), "run replay", true);
    let cases = tempfile::tempdir().unwrap();
    std::fs::copy(&case, cases.path().join("case.yaml")).unwrap();
    closed(with(&[&["eval", path(cases.path())][..], &model].concat()), "eval", true);

    let mut serve = support::serve_command(env!("CARGO_BIN_EXE_akritas"));
    serve.args(["--base-url", &llm.url, "--resources", path(&root.join("config/samples"))]);
    let host = support::Server::start(serve);
    closed(with(&["change", "workspaces", "--json", "--url", &host.url]), "change workspaces", true);

    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["mcp", "victoriametrics", "--listen", "127.0.0.1:0", "--base-url", "http://127.0.0.1:1"])
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next_line().await.unwrap().expect("the server prints its address");
        if let Some(url) = line.split("listening on ").nth(1) {
            break url.trim().to_string();
        }
    };
    closed(with(&["mcp", "probe", &url]), "mcp probe", true);
}
