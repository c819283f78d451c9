//! End-to-end: `akritas corpus import` and `akritas index build|search|inspect|list` on the sample runbooks.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn runbooks_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/samples/runbooks")
}

fn akritas(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_akritas")).args(args).output().expect("run akritas")
}

fn ok(args: &[&str]) -> String {
    let out = akritas(args);
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Imports the runbooks and builds an index; returns (tempdir, corpus, index).
fn built() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let corpus = tmp.path().join("corpus");
    let index = tmp.path().join("index");
    let out =
        ok(&["corpus", "import", "--input", path(&runbooks_dir()), "--output", path(&corpus), "--source", "runbooks"]);
    assert!(out.starts_with("corpus imported: discovered=3 accepted=3 duplicates=0"), "{out}");
    let out = ok(&["index", "build", "--corpus", path(&corpus), "--output", path(&index)]);
    assert!(out.starts_with("index built: documents=3 chunks=3 content_sha256="), "{out}");
    (tmp, corpus, index)
}

#[test]
fn search_ranks_the_expected_runbook_first() {
    let (_tmp, _corpus, index) = built();
    for (query, expected) in [
        ("CPU busy steal iowait", "high-cpu.md"),
        ("too many connections idle in transaction", "postgres-connections.md"),
        ("disk will fill predict_linear WAL replication slot", "disk-full.md"),
    ] {
        let out = ok(&["index", "search", query, "--index", path(&index), "--top-k", "3", "--json"]);
        let json: serde_json::Value = serde_json::from_str(&out).expect("json");
        let results = json["results"].as_array().expect("results");
        assert_eq!(results[0]["document_id"], expected, "{query}: {out}");
        assert_eq!(results[0]["rank"], 1);
        assert!(results[0]["excerpt"].as_str().is_some_and(|e| !e.is_empty() && e.chars().count() <= 800));
        let text = ok(&["index", "search", query, "--index", path(&index)]);
        assert!(text.starts_with("[1] score="), "{text}");
        assert!(text.lines().next().is_some_and(|l| l.contains(&format!("document=\"{expected}\""))), "{text}");
    }
}

#[test]
fn inspect_and_list() {
    let (_tmp, _corpus, index) = built();
    let out = ok(&["index", "inspect", "--index", path(&index), "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(json["documents"], 3);
    assert_eq!(json["chunk_chars"], 1200);
    assert_eq!(json["sources"]["runbooks"]["documents"], 3);
    assert_eq!(json["manifest_sha256"].as_str().map(str::len), Some(64));
    let text = ok(&["index", "inspect", "--index", path(&index)]);
    assert!(text.contains("documents=3 chunks=3") && text.contains("source \"runbooks\""), "{text}");
    let out = ok(&["index", "list", "--index", path(&index), "--title", "POSTGRES", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(json["matched"], 1);
    assert_eq!(json["documents"][0]["id"], "postgres-connections.md");
    let text = ok(&["index", "list", "--index", path(&index), "--offset", "1", "--limit", "1"]);
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn build_from_raw_input_matches_corpus_content() {
    let (tmp, _corpus, index) = built();
    let direct = tmp.path().join("direct");
    let out = ok(&["index", "build", "--input", path(&runbooks_dir()), "--output", path(&direct)]);
    let sha = |s: &str| s.split("content_sha256=").nth(1).and_then(|r| r.split(' ').next()).map(str::to_owned);
    let inspect = ok(&["index", "inspect", "--index", path(&index)]);
    let from_corpus = inspect.lines().find_map(|l| l.strip_prefix("content_sha256=")).map(str::to_owned);
    assert_eq!(sha(&out), from_corpus);
}

#[test]
fn errors_have_clear_messages_and_exit_codes() {
    let (tmp, corpus, index) = built();
    let idx = path(&index);
    // Usage errors: exit 2.
    for args in [
        vec!["index", "search", "cpu", "--index", idx, "--top-k", "0"],
        vec!["index", "search", "cpu", "--index", idx, "--top-k", "51"],
        vec!["index", "search", "?!", "--index", idx],
        vec!["index", "list", "--index", idx, "--limit", "10001"],
        vec!["index", "build", "--output", idx],
        vec!["index", "build", "--corpus", "x", "--output", "y", "--chunk-chars", "100", "--overlap-chars", "100"],
    ] {
        let out = akritas(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // Runtime errors: exit 1 with a message.
    let missing = tmp.path().join("missing");
    let runbooks = runbooks_dir();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["index", "search", "cpu", "--index", path(&missing)], "run `akritas index build --corpus"),
        (vec!["index", "build", "--corpus", path(&corpus), "--output", idx], "not empty; add --force"),
        (vec!["corpus", "import", "--input", path(&runbooks), "--output", path(&corpus), "--source", "s"], "not empty"),
    ];
    for (args, message) in cases {
        let out = akritas(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains(message), "{args:?}: {stderr}");
    }
    // A tampered corpus is refused.
    let docs = corpus.join("documents.jsonl");
    let text = std::fs::read_to_string(&docs).expect("read corpus").replacen("CPU", "GPU", 1);
    std::fs::write(&docs, text).expect("write corpus");
    let out = akritas(&["index", "build", "--corpus", path(&corpus), "--output", path(&tmp.path().join("i2"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("was altered"));
}

/// A missing index is named once, with the command that builds it.
#[test]
fn searching_a_missing_index_says_how_to_build_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("missing");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    for (dir, why) in [(&missing, "(no such directory)"), (&empty, "(it has no akritas-index.json)")] {
        for command in [
            &["index", "search", "cpu", "--index"][..],
            &["index", "inspect", "--index"],
            &["index", "list", "--index"],
        ] {
            let args: Vec<&str> = command.iter().copied().chain([path(dir)]).collect();
            let out = akritas(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
            assert_eq!(
                stderr,
                format!(
                    "error: no index at {d} {why}; run `akritas index build --corpus <CORPUS_DIR> --output {d}` \
                     (or `--input <DIR>` for a directory of raw files) first\n",
                    d = path(dir)
                )
            );
        }
    }
}

/// `--force` replaces an index; it never empties a directory that is not one.
#[test]
fn build_force_replaces_an_index_but_not_other_directories() {
    let (tmp, _corpus, index) = built();
    let one = tmp.path().join("one");
    std::fs::create_dir(&one).expect("mkdir");
    std::fs::copy(runbooks_dir().join("disk-full.md"), one.join("disk-full.md")).expect("copy");
    let out = ok(&["index", "build", "--input", path(&one), "--output", path(&index), "--force"]);
    assert!(out.starts_with("index built: documents=1 chunks=1 "), "{out}");
    let inspect = ok(&["index", "inspect", "--index", path(&index)]);
    assert!(inspect.contains("documents=1 chunks=1"), "{inspect}");
    let mut beside: Vec<String> = std::fs::read_dir(tmp.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    beside.sort();
    assert_eq!(beside, ["corpus", "index", "one"], "no staging or old index left behind");
    // `one` holds runbooks, not an index: refused, untouched.
    let out = akritas(&["index", "build", "--input", path(&runbooks_dir()), "--output", path(&one), "--force"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("holds no index this tool wrote") && stderr.contains("nothing in it was changed"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&one).expect("ls").count(), 1);
    assert!(one.join("disk-full.md").is_file());
}

#[test]
fn import_report_lists_skipped_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(input.join(".git")).expect("mkdir");
    for name in ["disk-full.md", "high-cpu.md"] {
        std::fs::copy(runbooks_dir().join(name), input.join(name)).expect("copy");
    }
    std::fs::copy(runbooks_dir().join("disk-full.md"), input.join("copy.md")).expect("copy");
    std::fs::write(input.join("tiny.md"), "# Tiny\n").expect("write");
    std::fs::write(input.join("image.png"), [0u8, 1, 2]).expect("write");
    std::fs::write(input.join(".git/HEAD.md"), "x".repeat(200)).expect("write");
    let out = tmp.path().join("out");
    let text = ok(&["corpus", "import", "--input", path(&input), "--output", path(&out), "--source", "s"]);
    assert!(text.contains("accepted=2 duplicates=1"), "{text}");
    assert!(text.contains("skipped \"disk-full.md\": duplicate of copy.md"), "{text}");
    assert!(text.contains("skipped \"tiny.md\": too short (6 chars)"), "{text}");
    assert!(text.contains("skipped \"image.png\": extension not selected"), "{text}");
    assert!(!text.contains("HEAD"), "{text}");
    let out2 = tmp.path().join("out2");
    let json = ok(&["corpus", "import", "--input", path(&input), "--output", path(&out2), "--source", "s", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(json["counts"]["accepted"], 2);
    assert_eq!(json["manifest"]["version"], 1);
    assert_eq!(json["skipped"].as_array().map(Vec::len), Some(3));
    // Output inside the input is refused.
    let inside = input.join("corpus");
    let res = akritas(&["corpus", "import", "--input", path(&input), "--output", path(&inside), "--source", "s"]);
    assert_eq!(res.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&res.stderr).contains("inside the input"));
}
