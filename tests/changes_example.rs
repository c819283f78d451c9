//! The worked example of docs/changes.md, run block for block: its `changes:*` code blocks
//! run by bash against the real binary, a scripted model and yamllint, from an empty
//! directory. Only the addresses change (free ports instead of 8080 and 8090). The same
//! Workspace served without a key shows what an anonymous caller gets: a preview whose
//! hint says applying needs an admin key, and a 403 on apply.

use akritas_testkit as support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::Server;
use support::scripted_llm::{Reply, ScriptedLlm, Step};

/// The model: one proposal, replicas 2 → 3 in `values.yaml`.
fn propose(_: usize, _: &Value) -> Step {
    let edit = json!({
        "analysis": "values.yaml sets the replica count of web.",
        "edits": [{"operation": "replace", "path": "values.yaml", "old": "replicas: 2", "new": "replicas: 3"}],
        "checks": ["kubectl rollout status deploy/web after the sync"],
        "risks": ["one more pod's worth of requests on the nodes"],
        "rollback": "Set replicas back to 2.",
        "clarifications": []
    });
    Step::from(Reply::ToolCalls(vec![("call-1".into(), "akritas_propose_edits".into(), edit)]))
}

/// The walk-through shell, the CLI pointed at `url`.
fn bash(env: &str, script: &str, dir: &Path, url: &str) -> Command {
    let mut command = support::walkthrough_shell(Path::new(env!("CARGO_BIN_EXE_akritas")), env, script, dir);
    command.env("AKRITAS_URL", url);
    command
}

fn output(mut command: Command) -> Output {
    command.output().unwrap()
}

fn succeeded(output: Output) -> String {
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the step failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    stdout.into_owned()
}

/// Starts `serve` as `script` says, listening on `address`, and waits until the Workspace is ready.
async fn serve(env: &str, script: &str, dir: &Path, address: &str, key: Option<&str>) -> Server {
    let url = format!("http://{address}");
    let mut command = bash(env, &format!("exec {script}"), dir, &url);
    command.env("AKRITAS_ADDRESS", address).env("AKRITAS_LOG_FORMAT", "json").env("RUST_LOG", "info");
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    let server = tokio::task::spawn_blocking(move || Server::start(command)).await.unwrap();
    let client = reqwest::Client::new();
    let ready = support::poll(Duration::from_secs(20), || {
        let mut request = client.get(format!("{url}/api/v1/workspaces"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move {
            let body: Value = request.send().await.ok()?.json().await.ok()?;
            body["workspaces"].as_array().filter(|w| w.len() == 1 && w[0]["ready"] == true).map(|_| ())
        }
    })
    .await;
    assert!(ready.is_some(), "the Workspace never became ready; log:\n{}", server.log_text());
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_change_example_previews_validates_and_applies_once() {
    akritas::install_crypto_provider();
    let doc = std::fs::read_to_string(support::root().join("docs/changes.md")).unwrap();
    let block = |tag: &str| {
        let found = support::doc_blocks(&doc, tag);
        assert_eq!(found.len(), 1, "one `sh {tag}` block in docs/changes.md");
        found.into_iter().next().unwrap()
    };
    let (setup, env, serve_line, steps) =
        (block("changes:setup"), block("changes:env"), block("changes:serve"), block("changes"));
    let llm = ScriptedLlm::start_with(propose).await;
    let env = env.replace("http://127.0.0.1:8080/v1", &llm.url);
    let key = env
        .lines()
        .find_map(|l| l.strip_prefix("export AKRITAS_API_KEY="))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the env block sets AKRITAS_API_KEY")
        .to_owned();
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("repos/web/values.yaml");

    // 1. From an empty directory.
    succeeded(output(bash(&env, &setup, dir.path(), "")));
    assert_eq!(std::fs::read_to_string(&values).unwrap(), "---\nreplicas: 2\nimage: shop/web:1.4\n");

    // Without a key (the README's anonymous host): a preview, a hint that says what applying
    // needs, and apply refused.
    let anonymous: String = env.lines().filter(|l| !l.contains("AKRITAS_API_KEY")).collect::<Vec<_>>().join("\n");
    let address = format!("127.0.0.1:{}", support::free_port());
    let host =
        serve(&anonymous, &serve_line.replace("--data-dir data", "--data-dir anonymous"), dir.path(), &address, None)
            .await;
    let url = format!("http://{address}");
    let previewed = tokio::task::block_in_place(|| {
        succeeded(output(bash(
            &anonymous,
            "akritas change simulate --workspace web --file values.yaml --request 'Scale web to 3 replicas'",
            dir.path(),
            &url,
        )))
    });
    let id = previewed.lines().find_map(|l| l.strip_prefix("Approval id: ")).unwrap_or_else(|| panic!("{previewed}"));
    let id = id.split(' ').next().unwrap().to_owned();
    assert!(
        previewed.contains("Applying needs an API key with the admin scope, and none was sent")
            && previewed.contains("AKRITAS_API_KEY")
            && previewed.contains("docs/changes.md"),
        "{previewed}"
    );
    let refused = tokio::task::block_in_place(|| {
        output(bash(&anonymous, &format!("akritas change apply {id} --yes"), dir.path(), &url))
    });
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("403"), "{stderr}");
    assert!(std::fs::read_to_string(&values).unwrap().contains("replicas: 2"));
    drop(host);

    // 2–4. With the key, as written.
    let address = format!("127.0.0.1:{}", support::free_port());
    let url = format!("http://{address}");
    let host = serve(&env, &serve_line, dir.path(), &address, Some(&key)).await;
    let out = tokio::task::block_in_place(|| succeeded(output(bash(&env, &steps, dir.path(), &url))));
    assert!(out.contains("## Host-generated diff") && out.contains("`yamllint`: **passed**"), "{out}");
    assert!(!out.contains("Applying needs an API key"), "a key was sent: {out}");
    assert!(out.contains("applied 1 file(s) (Run "), "{out}");
    assert!(out.contains("-replicas: 2\n+replicas: 3"), "git diff: {out}");
    assert_eq!(std::fs::read_to_string(&values).unwrap(), "---\nreplicas: 3\nimage: shop/web:1.4\n");
    // As the text says: a second apply answers 404.
    let again = tokio::task::block_in_place(|| {
        output(bash(
            &env,
            r#"akritas change apply "$(sed -n 's/^Approval id: \([^ ]*\).*/\1/p' preview.md)" --yes"#,
            dir.path(),
            &url,
        ))
    });
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && stderr.contains("404"), "{stderr}");
    assert!(doc.contains("answers 404: an approval is used once"));
    drop(host);
}
