//! One `akritas ask` against a zero-latency scripted model, the way `benches/ask.rs` times it
//! and `symbol-order` profiles it: the same question, the same two configurations, started in
//! the repository.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::scripted_llm::{Reply, ScriptedLlm, Step};

/// What is asked.
pub const QUESTION: &str = "Why is db-7 slow?";

/// The configurations measured: the name printed and the extra arguments. Alone reads the
/// repository's SYSTEM.md and six skills; with the samples, a KnowledgeBase is indexed before
/// the Run and an McpAdapter is declared.
pub const CONFIGURATIONS: [(&str, &[&str]); 2] =
    [("alone", &[]), ("with the sample resources", &["--resources", "config/samples"])];

/// The scripted model: an empty investigation plan when the host forces a tool call, then an
/// answer; unbounded and not recording.
pub async fn model() -> ScriptedLlm {
    let plan = akritas::tools::openai_alias(
        &akritas::tools::ToolName::try_from("local.investigation.submit_plan").expect("a valid tool name"),
    );
    let llm = ScriptedLlm::start_with(move |_, body| {
        if body["tool_choice"] == "required" {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else {
            Step::from(Reply::Content("The host is saturated by an autovacuum worker.".into()))
        }
    })
    .await;
    llm.set_recording(false);
    llm
}

/// `binary ask QUESTION` against the model at `url` with `extra` arguments and the data
/// directory `data`, run by `launcher` (empty: directly; `["valgrind", …]` to profile), in the
/// repository, output discarded.
pub fn command(launcher: &[&str], binary: &Path, url: &str, data: &Path, extra: &[&str]) -> Command {
    let root = crate::root();
    let mut command = match launcher.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(binary);
            command
        }
        None => Command::new(binary),
    };
    command
        .args(["ask", QUESTION, "--base-url", url])
        .args(extra)
        .arg("--data-dir")
        .arg(data)
        .arg("--system-instructions")
        .arg(root.join("instructions/SYSTEM.md"))
        .current_dir(&root)
        .env_remove("AKRITAS_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}
