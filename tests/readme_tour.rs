//! The README's first-answer tour, run step for step: the commands are read from the
//! README's `tour` code blocks and run by bash against the real binary, a scripted
//! model and the tour's own receiver (python3). Only the addresses change (free ports instead of
//! 8080, 8090 and 9000), so a tour step that stops working fails here.

use akritas_testkit as support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::Server;
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};

const ANSWER: &str = "Tour answer: db-7 looks healthy from here.";

fn blocks(readme: &str, tag: &str) -> Vec<String> {
    support::doc_blocks(readme, tag)
}

/// A model that plans no check, answers, and submits an inconclusive result.
fn model(_: usize, request: &Value) -> Step {
    let alias = |name: &str| akritas::tools::openai_alias(&akritas::tools::ToolName::try_from(name).unwrap());
    if offers(request, &alias("local.investigation.submit_plan")) {
        let plan = json!({"checks": [], "gaps": []});
        Step::from(Reply::ToolCalls(vec![("p".into(), alias("local.investigation.submit_plan"), plan)]))
    } else if offers(request, &alias("local.investigation.submit_result")) {
        let result = json!({"finding_status": "inconclusive", "actionability": "requires_human", "confidence": "low",
                            "summary": "db-7 load is high; no tool could confirm why", "impact": "", "evidence": [],
                            "ruled_out": [], "affected_components": ["db-7"],
                            "recommended_actions": ["look at db-7's load"], "production_writes": 0});
        Step::from(Reply::ToolCalls(vec![("r".into(), alias("local.investigation.submit_result"), result)]))
    } else {
        Step::from(Reply::Content(ANSWER.into()))
    }
}

/// A process stopped when the test ends, however it ends.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tour's addresses, swapped for this run's.
struct Swap {
    llm: String,
    hook: String,
    host: String,
}

impl Swap {
    fn apply(&self, text: &str) -> String {
        text.replace("http://127.0.0.1:8080/v1", &self.llm)
            .replace("http://127.0.0.1:9000/akritas", &self.hook)
            .replace("127.0.0.1:8090", &self.host)
    }
}

/// The walk-through shell with its own data directory.
fn bash(env: &str, script: &str, dir: &Path, data: &Path) -> Command {
    let mut command = support::walkthrough_shell(Path::new(env!("CARGO_BIN_EXE_akritas")), env, script, dir);
    command.env("AKRITAS_DATA_DIR", data);
    command
}

fn run(mut command: Command) -> String {
    let output = command.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the tour step failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    stdout.into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_tour_reaches_a_first_answer_step_for_step() {
    let root = support::root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let (env, serve, steps) = (blocks(&readme, "tour:env"), blocks(&readme, "tour:serve"), blocks(&readme, "tour"));
    let (alertmanager, verify) = (blocks(&readme, "tour:alertmanager"), blocks(&readme, "tour:verify"));
    let receiver = blocks(&readme, "tour:receiver");
    assert_eq!((env.len(), serve.len(), alertmanager.len(), verify.len(), receiver.len()), (1, 1, 1, 1, 1));
    assert_eq!(steps.len(), 3, "ask, chat, alert");
    assert!(readme.contains("cargo install --path . --locked"), "the install line");

    let llm = ScriptedLlm::start_with(model).await;
    let hook_port = support::free_port();
    let host = format!("127.0.0.1:{}", support::free_port());
    let swap = Swap { llm: llm.url.clone(), hook: format!("http://127.0.0.1:{hook_port}/akritas"), host: host.clone() };
    let env = swap.apply(&env[0]);
    let data = tempfile::tempdir().unwrap();

    // 5. The receiver, in its own directory, as the tour starts it (on this run's port).
    let scratch = tempfile::tempdir().unwrap();
    let listen = receiver[0].replace("9000", &hook_port.to_string());
    let mut receiving = bash(&env, &format!("exec {listen}"), scratch.path(), data.path());
    let _receiver = Stopped(receiving.stdout(Stdio::null()).spawn().unwrap());

    // 2. A first answer from the terminal.
    let asked = run(bash(&env, &swap.apply(&steps[0]), &root, data.path()));
    assert!(asked.contains(ANSWER), "{asked}");

    // 3. The host (it logs that it listens; JSON logs so the harness can read them).
    let mut command = bash(&env, &format!("exec {}", swap.apply(&serve[0])), &root, data.path());
    command.env("AKRITAS_ADDRESS", &host).env("AKRITAS_LOG_FORMAT", "json").env("RUST_LOG", "info");
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    let server = Server::start(command);

    // 4. Chat.
    let chat = run(bash(&env, &swap.apply(&steps[1]), &root, data.path()));
    let chat: Value = serde_json::from_str(&chat).unwrap_or_else(|e| panic!("{e}: {chat}"));
    assert!(chat.to_string().contains(ANSWER), "{chat}");

    // 6. An alert: stored, an incident opened, investigated and delivered, signed.
    let alerted = run(bash(&env, &swap.apply(&steps[2]), &root, data.path()));
    assert!(alerted.contains("\"accepted\"") && alerted.contains("HighLoad"), "{alerted}");
    // The receiver creates headers.json, then writes it: wait for a whole JSON object, not only
    // for the file (it was read empty once, between the two).
    let headers = scratch.path().join("headers.json");
    let (headers, _): (Value, _) = support::poll(Duration::from_secs(30), || {
        let headers = headers.clone();
        async move { serde_json::from_str(&std::fs::read_to_string(&headers).ok()?).ok() }
    })
    .await
    .unwrap_or_else(|| panic!("no delivery reached the receiver; log:\n{}", server.log_text()));
    assert_eq!(headers["x-akritas-event"], "incident.investigated", "{headers}");
    assert_eq!(headers["authorization"], "Bearer change-me-webhook-token", "{headers}");
    let body = std::fs::read(scratch.path().join("body.json")).unwrap();
    let envelope: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(envelope["incident"]["title"], "HighLoad", "{envelope}");

    // 7. The signature recipe verifies the body as received (and refuses another).
    assert_eq!(run(bash(&env, &verify[0], scratch.path(), data.path())).trim(), "verified");
    std::fs::write(scratch.path().join("body.json"), [&body[..], b" "].concat()).unwrap();
    let forged = bash(&env, &verify[0], scratch.path(), data.path()).output().unwrap();
    assert!(!forged.status.success(), "a changed body does not verify");

    // The Alertmanager receiver snippet is a configuration the real amtool accepts.
    let config = scratch.path().join("alertmanager.yml");
    std::fs::write(&config, swap.apply(&alertmanager[0])).unwrap();
    let amtool = Command::new("amtool").arg("check-config").arg(&config).output().expect("amtool is installed");
    assert!(amtool.status.success(), "{}", String::from_utf8_lossy(&amtool.stderr));

    // With the tour's variables set, only the Workspace the table names is left to fix.
    let health: Value = reqwest::get(format!("{}/health", server.url)).await.unwrap().json().await.unwrap();
    let not_ready: Vec<(String, String)> = health["catalog"]["not_ready"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["in_progress"] == false)
        .map(|n| (n["kind"].as_str().unwrap().to_string(), n["reason"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(not_ready, [("Workspace".to_string(), "PathNotFound".to_string())], "{health}");
}
