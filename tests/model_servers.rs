//! The host against the model servers it meets in the field: stand-ins that answer
//! as Ollama (with and without the tools capability), llama-server, vLLM and a reasoning model
//! do (testkit `personality`), each rendering the same brain.
//!
//! - The 22-case starter suite passes `--model-protocol auto --min-pass 1.0` under each server,
//!   and the requests show how the host got there: it asks the server what it is before the
//!   first structured step (no completion spent), so under llama-server and for a model Ollama
//!   says has no tools the first structured request is already a `json_schema` one, and that
//!   model is never sent tools (no 400); a model Ollama says has tools is asked for a call first
//!   and falls back once, as Ollama ignores `tool_choice`; under vLLM structured steps are forced tool calls; a reasoning
//!   model's think blocks move it nowhere. `--model-protocol tool_call` still takes
//!   llama-server's call with prose before it.
//! - `--model-protocol json_schema|json_object|text` speak their wire contract, and `text`
//!   repairs an answer without an object with one more turn; OpenAI's strict mode accepts the
//!   schemas `json_schema` sends.
//! - Through `akritas serve`: `/health` shows the protocol the probe at start chose, without a
//!   secret; behind a proxy that hides what the server is, Ollama's "does not support tools" 400
//!   and its prose answer to a forced call fall back, and `/metrics` counts it; think blocks reach
//!   no answer (native, facade stream), no journal file, no Run record and no log line; the
//!   change pipeline (discovery and proposal) and the facade's streamed answer work against a
//!   model without tools.

use akritas_testkit as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use akritas::tools::{ToolName, openai_alias};
use serde_json::{Value, json};
use support::Server;
use support::brain::{Answer, Mode, asked, structured_target};
use support::personality::{Personality, THINK_MARKER};
use support::scripted_llm::ScriptedLlm;
use support::starter_suite;

/// Cases `akritas eval` runs at once (also how many Runs may ask before the host learns).
const CONCURRENCY: usize = 4;
const API_KEY: &str = "persona-admin-key-0123456789";
/// The upstream model server's key (the scripted server takes any).
const UPSTREAM_KEY: &str = "sk-persona-upstream-0123456789";
const AM_TOKEN: &str = "persona-am-token-0123456789";
const ANSWER: &str = "db-7 is saturated by an autovacuum worker; nothing needs restarting.";
const QUESTION: &str = "Why is db-7 slow?";
const PILLAR: &str = "pillar/prod/nftables.sls";
const OLD: &str = "      port: 8443\n  log_dropped: true\n";
const NEW: &str =
    "      port: 8443\n    - name: orders-v2\n      address: 10.20.4.15\n      port: 8443\n  log_dropped: true\n";

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

// ---------------------------------------------------------------------------------------------
// The starter suite through `akritas eval`.

/// The starter suite under `personality` with `--model-protocol protocol`: it must pass
/// `--min-pass 1.0`; returns the server (for its requests).
async fn starter_suite_under(personality: Personality, protocol: &str) -> ScriptedLlm {
    starter_suite_with(personality, protocol, starter_suite::brain(starter_suite::load(&starter_suite::dir()))).await
}

async fn starter_suite_with(
    personality: Personality,
    protocol: &str,
    brain: impl Fn(&Value) -> Answer + Send + Sync + 'static,
) -> ScriptedLlm {
    eval_under(personality, protocol, &starter_suite::dir(), brain).await
}

/// The cases of `cases` under `personality` with `--model-protocol protocol`: they must pass
/// `--min-pass 1.0`; returns the server (for its requests).
async fn eval_under(
    personality: Personality,
    protocol: &str,
    cases: &Path,
    brain: impl Fn(&Value) -> Answer + Send + Sync + 'static,
) -> ScriptedLlm {
    let llm = ScriptedLlm::start_as(personality, brain).await;
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("results.json");
    let instructions = support::root().join("instructions/SYSTEM.md");
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["eval", cases.to_str().unwrap(), "--base-url", &llm.url])
        .args(["--upstream-model", "scripted-model", "--model-protocol", protocol, "--min-pass", "1.0"])
        .args(["--system-instructions", instructions.to_str().unwrap()])
        .args(["--concurrency", &CONCURRENCY.to_string(), "--output", output.to_str().unwrap()])
        .env_remove("AKRITAS_API_KEY")
        .env_remove("AKRITAS_MODEL_PROTOCOL")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let failures: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL ")).collect();
    assert!(
        run.status.success(),
        "{personality:?} --model-protocol {protocol}: the starter suite failed:\n{}\n{stdout}\n{stderr}",
        failures.join("\n")
    );
    assert!(stdout.contains("runs: pass rate 100.0%"), "{personality:?} {protocol}:\n{stdout}");
    llm
}

fn offers_tools(request: &Value) -> bool {
    request["tools"].as_array().is_some_and(|tools| !tools.is_empty())
}

/// The mode of every structured request, in order.
fn modes(requests: &[Value]) -> Vec<Mode> {
    requests.iter().filter_map(asked).map(|(_, mode)| mode).collect()
}

fn count(modes: &[Mode], mode: Mode) -> usize {
    modes.iter().filter(|m| **m == mode).count()
}

/// What a request's messages look like, for assertion messages.
fn roles(request: &Value) -> String {
    let roles: Vec<String> = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let calls = m["tool_calls"].as_array().map_or(0, Vec::len);
            if calls > 0 { format!("{}+{calls} calls", m["role"]) } else { m["role"].to_string() }
        })
        .collect();
    roles.join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_starter_suite_passes_on_ollama_without_tools() {
    let llm = starter_suite_under(Personality::Ollama { tools: false }, "auto").await;
    let requests = llm.requests();
    // Ollama said the model has no tools before anything was asked: no request carried any, so
    // none was refused with a 400.
    let carrying = requests.iter().filter(|r| offers_tools(r)).count();
    assert_eq!(carrying, 0, "{carrying} requests carried tools Ollama says the model does not take");
    // Every structured step, the first included, asked for a JSON schema.
    let modes = modes(&requests);
    assert_eq!(modes.first(), Some(&Mode::JsonSchema), "{modes:?}");
    assert_eq!(count(&modes, Mode::JsonSchema), modes.len(), "{modes:?}");
    assert!(modes.len() >= 2 * 22, "a plan and a result per case: {modes:?}");
    // The answer steps saw the plans and the checks as flattened text, never as tool messages.
    for request in &requests {
        let messages = request["messages"].as_array().unwrap();
        assert!(
            messages.iter().all(|m| m["role"] != "tool" && m.get("tool_calls").is_none_or(Value::is_null)),
            "a request without tools carries tool exchanges: {}",
            roles(request)
        );
    }
    // Cases run concurrently, so any case's answer may come first: take one whose check is a
    // pod status.
    let pod_status = alias("kubernetes.pod_status");
    let flattened = requests.iter().find(|r| {
        let messages = r["messages"].as_array().unwrap();
        let call = messages.iter().any(|m| {
            m["role"] == "assistant"
                && m["content"]
                    .as_str()
                    .is_some_and(|c| c.starts_with(&format!("Called {pod_status} ")) && c.contains(" (call "))
        });
        let result = messages
            .iter()
            .any(|m| m["role"] == "user" && m["content"].as_str().is_some_and(|c| c.starts_with("[output of ")));
        call && result
    });
    let flattened = flattened.expect("an answer request carries the flattened check calls and their results");
    let messages = flattened["messages"].as_array().unwrap();
    let call = messages.iter().find_map(|m| m["content"].as_str().filter(|c| c.starts_with("Called "))).unwrap();
    assert!(call.starts_with(&format!("Called {pod_status} with {{")), "{call}");
    assert!(call.ends_with("(call call-1).") || call.contains("(call call-1).\n"), "{call}");
    let result = messages.iter().find_map(|m| m["content"].as_str().filter(|c| c.starts_with("[output of "))).unwrap();
    assert!(result.starts_with(&format!("[output of {pod_status}, call call-1]\n{{")), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_starter_suite_passes_on_ollama_that_ignores_tool_choice() {
    let llm = starter_suite_under(Personality::Ollama { tools: true }, "auto").await;
    let requests = llm.requests();
    let modes = modes(&requests);
    // The model has tools, but Ollama ignores tool_choice: a forced call could come back as
    // prose, a whole completion spent. Every structured step asks for a JSON schema, which
    // Ollama's grammar holds, from the first.
    assert!(!modes.is_empty() && modes.iter().all(|m| *m == Mode::JsonSchema), "{modes:?}");
    // The model takes tools: the adaptive steps still offer the checks.
    assert!(
        requests.iter().any(|r| structured_target(r).is_none() && offers_tools(r)),
        "the answer steps stopped offering tools although the server supports them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_starter_suite_passes_on_llama_server_with_prose_before_the_call() {
    // Told from its /props, llama-server gets a JSON schema from the first structured step.
    let llm = starter_suite_under(Personality::LlamaServer, "auto").await;
    let auto = modes(&llm.requests());
    assert!(!auto.is_empty() && auto.iter().all(|m| *m == Mode::JsonSchema), "{auto:?}");
    // Asked for a tool call, its prose before the call is no reason to fall back.
    let llm = starter_suite_under(Personality::LlamaServer, "tool_call").await;
    let forced = modes(&llm.requests());
    assert!(forced.iter().all(|m| *m == Mode::ToolCall), "a call with prose before it is still the call: {forced:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_starter_suite_passes_on_vllm() {
    let llm = starter_suite_under(Personality::Vllm, "auto").await;
    let requests = llm.requests();
    let first = requests.iter().find(|r| asked(r).is_some()).expect("a structured request");
    assert_eq!(first["tool_choice"], "required", "the first structured request forces the call: {first}");
    let modes = modes(&requests);
    assert!(modes.iter().all(|m| *m == Mode::ToolCall), "{modes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_starter_suite_passes_on_a_reasoning_model() {
    let llm = starter_suite_under(Personality::Reasoning, "auto").await;
    let modes = modes(&llm.requests());
    assert!(modes.iter().all(|m| *m == Mode::ToolCall), "think blocks beside a call are no reason to fall back");
    // The object after a think block is the answer of a json_object step.
    starter_suite_under(Personality::Reasoning, "json_object").await;
}

/// Whether a check of the plan schema has an argument its tool does not require.
fn has_optional_argument(plan: &Value) -> bool {
    let items = &plan["properties"]["checks"]["items"];
    let checks = items["anyOf"].as_array().cloned().unwrap_or_else(|| vec![items.clone()]);
    checks.iter().any(|check| {
        let arguments = &check["properties"]["arguments"];
        let required = arguments["required"].as_array().cloned().unwrap_or_default();
        arguments["properties"].as_object().is_some_and(|p| p.keys().any(|k| !required.contains(&json!(k))))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_explicit_protocol_speaks_its_wire_contract() {
    for (protocol, mode) in [("json_schema", Mode::JsonSchema), ("json_object", Mode::JsonObject), ("text", Mode::Text)]
    {
        let llm = starter_suite_under(Personality::Vllm, protocol).await;
        let requests = llm.requests();
        let structured: Vec<&Value> = requests.iter().filter(|r| asked(r).is_some()).collect();
        assert!(structured.len() >= 2 * 22, "{protocol}: a plan and a result per case");
        for request in structured {
            let messages = request["messages"].as_array().unwrap();
            assert!(messages.iter().all(|m| m["role"] != "assistant"), "{protocol}: a repair turn for a valid answer");
            let (name, asked_mode) = asked(request).unwrap();
            assert_eq!(asked_mode, mode, "{protocol}: {request}");
            assert!(!offers_tools(request), "{protocol}: a structured request offers tools");
            let format = &request["response_format"];
            match mode {
                Mode::JsonSchema => {
                    assert_eq!(format["type"], "json_schema");
                    // Strict where OpenAI's strict subset allows: every result, and the plans
                    // of cases whose tools have no optional argument.
                    let optional =
                        name.contains("submit_plan") && has_optional_argument(&format["json_schema"]["schema"]);
                    assert_eq!(format["json_schema"]["strict"], !optional, "{format}");
                    assert_eq!(format["json_schema"]["schema"]["type"], "object", "{format}");
                }
                Mode::JsonObject => assert_eq!(format, &json!({"type": "json_object"})),
                Mode::Text | Mode::ToolCall => assert!(format.is_null(), "{protocol}: {format}"),
            }
            if matches!(mode, Mode::JsonObject | Mode::Text) {
                let system = request["messages"][0]["content"].as_str().unwrap();
                let paragraph = system.rsplit("\n\n").next().unwrap();
                assert!(
                    paragraph.contains(&format!("the arguments of `{name}`")) && paragraph.contains("\"properties\""),
                    "{protocol}: the last paragraph of the system message names the tool and its schema: {paragraph}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_accepts_the_strict_schemas_of_json_schema_mode() {
    // OpenAI refuses a strict schema with an object that allows additional properties or
    // leaves a property out of `required`; the stand-in refuses it the same way.
    let llm = starter_suite_under(Personality::OpenAi, "json_schema").await;
    assert!(modes(&llm.requests()).iter().all(|m| *m == Mode::JsonSchema));
    // A tool with an optional argument (as the host's own kubernetes.logs has `container`): the
    // plan schema carries the tool's argument schema.
    let dir = tempfile::tempdir().unwrap();
    let mut case = starter_suite::load(&starter_suite::dir()).remove(3);
    case.tools[0].input_schema["properties"]["container"] = json!({"type": "string"});
    std::fs::write(dir.path().join("optional-argument.json"), serde_json::to_string(&case).unwrap()).unwrap();
    eval_under(Personality::OpenAi, "json_schema", dir.path(), starter_suite::brain(vec![case])).await;
    // The change pipeline's schemas: the search plan and the proposal.
    let trees = tempfile::tempdir().unwrap();
    let root = nftables(trees.path());
    let llm = ScriptedLlm::start_as(Personality::OpenAi, operator()).await;
    let host = serve(&llm, Some(&root), "json_schema");
    previews(&host, &llm).await;
    assert!(modes(&llm.requests()).iter().all(|m| *m == Mode::JsonSchema));
    // A fixed protocol's mode is the setting's.
    let (_, health) = get(&host, "/health").await;
    let protocol = &health["model_protocol"];
    assert_eq!(
        (&protocol["setting"], &protocol["mode"], &protocol["source"]),
        (&json!("json_schema"), &json!("json_schema"), &json!("setting")),
        "{health}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_mode_repairs_an_answer_without_an_object_once() {
    // The first answer to each structured request is prose without an object.
    let starter = starter_suite::brain(starter_suite::load(&starter_suite::dir()));
    let brain = move |request: &Value| {
        let first_attempt = request["messages"].as_array().unwrap().iter().all(|m| m["role"] != "assistant");
        if structured_target(request).is_some() && first_attempt {
            return Answer::Text("I looked at it and I think the database is the problem.".into());
        }
        starter(request)
    };
    let llm = starter_suite_with(Personality::Vllm, "text", brain).await;
    let requests = llm.requests();
    let structured: Vec<&Value> = requests.iter().filter(|r| structured_target(r).is_some()).collect();
    let repairs: Vec<&&Value> = structured
        .iter()
        .filter(|r| r["messages"].as_array().unwrap().iter().any(|m| m["role"] == "assistant"))
        .collect();
    assert_eq!(repairs.len() * 2, structured.len(), "one repair turn per structured step");
    for repair in repairs {
        let messages = repair["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        assert_eq!(last["role"], "user", "the repair turn asks again: {}", roles(repair));
        assert_eq!(messages[messages.len() - 2]["content"], "I looked at it and I think the database is the problem.");
    }
}

// ---------------------------------------------------------------------------------------------
// Through `akritas serve`.

/// A brain for serve: plans `knowledge.list_skills` when offered, answers [`ANSWER`], submits an
/// inconclusive result, plans repository searches and proposes the nftables change.
fn operator() -> impl Fn(&Value) -> Answer + Send + Sync + 'static {
    let (plan, result) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    move |request| {
        let Some(target) = structured_target(request) else {
            return Answer::Text(ANSWER.into());
        };
        let arguments = if target == plan {
            let checks = if request.to_string().contains("knowledge.list_skills") {
                json!([{"step": "See which runbooks exist", "tool": "knowledge.list_skills", "arguments": {},
                        "reason": "a skill may apply"}])
            } else {
                json!([])
            };
            json!({"checks": checks, "gaps": []})
        } else if target == result {
            json!({"finding_status": "inconclusive", "actionability": "requires_human", "confidence": "low",
                   "summary": "The checks did not show the cause.", "hypothesis": "", "impact": "", "evidence": [], "ruled_out": [],
                   "affected_components": [], "recommended_actions": [], "production_writes": 0})
        } else if target == "akritas_plan_repository_search" {
            json!({"queries": ["nftables", "orders", "log_dropped"]})
        } else if target == "akritas_propose_edits" {
            json!({
                "analysis": "orders-v2 is missing from the production pillar, which is the source of truth.",
                "edits": [{"operation": "replace", "path": PILLAR, "old": OLD, "new": NEW}],
                "checks": ["nft -c -f the rendered ruleset on a canary proxy"],
                "risks": ["orders-v2 becomes reachable from the edge proxies"],
                "rollback": "Revert the pillar change and re-apply the nftables state.",
                "clarifications": []
            })
        } else {
            return Answer::Text(format!("nothing scripted for {target}"));
        };
        Answer::Structured { alias: target, arguments }
    }
}

struct Host {
    server: Server,
    data: PathBuf,
    _dir: tempfile::TempDir,
}

/// `akritas serve` on `llm` with `model_protocol: protocol`, the repository's skills (so the Run
/// has knowledge tools), one admin key, an Alertmanager source and, when given, a Workspace on
/// `workspace`. The model is discovered from the server's `/v1/models`.
fn serve(llm: &ScriptedLlm, workspace: Option<&Path>, protocol: &str) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let (data, resources) = (dir.path().join("data"), dir.path().join("resources"));
    std::fs::create_dir_all(&resources).unwrap();
    let mut manifests =
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am, namespace: default}\n\
                         spec: {provider: alertmanager, auth: {bearerToken: {env: PERSONA_AM_TOKEN}}}\n"
            .to_string();
    if let Some(root) = workspace {
        manifests += &format!(
            "---\napiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {{name: nftables, namespace: default}}\n\
             spec: {{source: {{path: \"{}\"}}, writable: false}}\n",
            root.display()
        );
    }
    std::fs::write(resources.join("persona.yaml"), manifests).unwrap();
    let mut command = support::serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .env("AKRITAS_DATA_DIR", &data)
        .env("AKRITAS_BASE_URL", &llm.url)
        .env("AKRITAS_SKILLS_DIR", support::root().join("skills"))
        .env("AKRITAS_RESOURCE_ENV", "default/PERSONA_*")
        .env("AKRITAS_WORKSPACE_ROOTS", workspace.and_then(Path::parent).unwrap_or(dir.path()))
        .env("AKRITAS_ALERT_JOB_BACKOFF", "1s")
        .env("PERSONA_AM_TOKEN", AM_TOKEN)
        .env("PERSONA_KEY", API_KEY)
        .env("OPENAI_API_KEY", UPSTREAM_KEY)
        .env("AKRITAS_MODEL_PROTOCOL", protocol)
        .env_remove("AKRITAS_UPSTREAM_MODEL")
        .args(["--api-key", "ops=PERSONA_KEY:admin", "--resources"])
        .arg(&resources);
    Host { server: Server::start(command), data, _dir: dir }
}

fn client() -> reqwest::Client {
    akritas::install_crypto_provider();
    reqwest::Client::new()
}

async fn get(host: &Host, path: &str) -> (u16, Value) {
    let response = client().get(format!("{}{path}", host.server.url)).bearer_auth(API_KEY).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn post(host: &Host, path: &str, body: Value) -> (u16, Value) {
    let response =
        client().post(format!("{}{path}", host.server.url)).bearer_auth(API_KEY).json(&body).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn chat(host: &Host) -> Value {
    let (status, body) = post(host, "/api/v1/chat", json!({"messages": [{"role": "user", "content": QUESTION}]})).await;
    assert_eq!(status, 200, "{body}\n{}", host.server.log_text());
    body
}

async fn metrics(host: &Host) -> String {
    let response = client().get(format!("{}/metrics", host.server.url)).bearer_auth(API_KEY).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// The sum of every sample of `name` whose labels contain each of `labels`.
fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| line.starts_with(&format!("{name} ")) || line.starts_with(&format!("{name}{{")))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The server-sent events of a streamed facade completion, and the text they carry.
async fn facade_stream(host: &Host) -> (Vec<Value>, String) {
    let response = client()
        .post(format!("{}/v1/chat/completions", host.server.url))
        .bearer_auth(API_KEY)
        .json(&json!({"model": "akritas", "stream": true, "messages": [{"role": "user", "content": QUESTION}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    let events: Vec<Value> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let text = events.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect();
    (events, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_call_answered_in_prose_falls_back_and_is_counted() {
    // Behind a proxy that forwards only /v1, Ollama cannot be told from its answers.
    let llm = ScriptedLlm::start_as(Personality::Ollama { tools: true }, operator()).await;
    llm.set_native_api(false);
    let host = serve(&llm, None, "auto");
    let body = chat(&host).await;
    assert_eq!(body["answer"], ANSWER);
    let requests = llm.requests();
    let plan = alias("local.investigation.submit_plan");
    let structured: Vec<(String, Mode)> = requests.iter().filter_map(asked).collect();
    assert_eq!(structured, [(plan.clone(), Mode::ToolCall), (plan.clone(), Mode::JsonSchema)], "the plan fell back");
    let (_, run) = get(&host, &format!("/api/v1/runs/{}", body["run_id"].as_str().unwrap())).await;
    assert_eq!(run["run"]["status"], "succeeded", "{run}");
    assert_eq!(run["run"]["metadata"]["model_protocol_fallbacks"], json!(["plan: tool_call -> json_schema"]), "{run}");
    assert!(
        run["run"]["events"].as_array().unwrap().iter().any(|e| e["metadata"]["tool"] == "knowledge.list_skills"),
        "the plan reached by the fallback was executed: {run}"
    );
    let text = metrics(&host).await;
    let fallbacks = metric(&text, FALLBACKS, &["from=\"tool_call\"", "to=\"json_schema\""]);
    assert_eq!((fallbacks, metric(&text, FALLBACKS, &[])), (1.0, 1.0), "{text}");

    // The model's mode is remembered: the next Run asks in json_schema at once.
    let before = llm.requests().len();
    assert_eq!(chat(&host).await["answer"], ANSWER);
    let later: Vec<Mode> = llm.requests()[before..].iter().filter_map(asked).map(|(_, m)| m).collect();
    assert_eq!(later, [Mode::JsonSchema]);
    assert_eq!(metric(&metrics(&host).await, FALLBACKS, &[]), 1.0, "no second fallback");
    let (_, health) = get(&host, "/health").await;
    let protocol = &health["model_protocol"];
    assert_eq!(
        (&protocol["server"], &protocol["mode"], &protocol["source"]),
        (&json!("other"), &json!("json_schema"), &json!("fallback")),
        "{health}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_tools_falls_back_and_is_counted() {
    let llm = ScriptedLlm::start_as(Personality::Ollama { tools: false }, operator()).await;
    llm.set_native_api(false);
    let host = serve(&llm, None, "auto");
    let body = chat(&host).await;
    assert_eq!(body["answer"], ANSWER);
    let (_, run) = get(&host, &format!("/api/v1/runs/{}", body["run_id"].as_str().unwrap())).await;
    assert_eq!(run["run"]["metadata"]["model_protocol_fallbacks"], json!(["plan: tool_call -> json_schema"]), "{run}");
    let requests = llm.requests();
    assert_eq!(requests[0]["model"], "scripted-model:latest", "the model Ollama lists is the one asked");
    assert!(offers_tools(&requests[0]) && requests[1..].iter().all(|r| !offers_tools(r)), "tools dropped");
    let text = metrics(&host).await;
    assert_eq!(metric(&text, FALLBACKS, &["from=\"tool_call\"", "to=\"json_schema\""]), 1.0, "{text}");
    let (_, health) = get(&host, "/health").await;
    assert_eq!(health["model_protocol"]["tools_refused"], true, "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_identifies_ollama_at_start_and_asks_json_schema_first_without_tools() {
    let llm = ScriptedLlm::start_as(Personality::Ollama { tools: false }, operator()).await;
    let host = serve(&llm, None, "auto");
    // The probe at start: /health shows what it chose before any Run, and no completion was spent.
    let protocol = wait_for(&host, "/health", |health| {
        let protocol = &health["model_protocol"];
        protocol["mode"].is_string().then(|| protocol.clone())
    })
    .await;
    assert_eq!(
        protocol,
        json!({"setting": "auto", "model": "scripted-model:latest", "server": "ollama", "mode": "json_schema",
               "source": "probe", "tools_refused": true})
    );
    assert!(llm.requests().is_empty(), "the probe asked for a completion");
    let (_, health) = get(&host, "/health").await;
    let text = health.to_string();
    assert!(!text.contains(UPSTREAM_KEY) && !text.contains(API_KEY) && !text.contains(AM_TOKEN), "{text}");

    // The first structured request is already a JSON schema, and no request carries tools.
    let body = chat(&host).await;
    assert_eq!(body["answer"], ANSWER);
    let requests = llm.requests();
    let first = requests.iter().find_map(asked).expect("a structured request");
    assert_eq!(first, (alias("local.investigation.submit_plan"), Mode::JsonSchema));
    assert!(requests.iter().all(|r| !offers_tools(r)), "a request carried the tools Ollama refuses (a 400)");
    let (_, run) = get(&host, &format!("/api/v1/runs/{}", body["run_id"].as_str().unwrap())).await;
    assert_eq!(run["run"]["metadata"]["model_protocol"], "json_schema", "{run}");
    assert!(run["run"]["metadata"].get("model_protocol_fallbacks").is_none(), "{run}");
    assert_eq!(metric(&metrics(&host).await, FALLBACKS, &[]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn think_blocks_reach_no_answer_journal_run_record_or_log() {
    let llm = ScriptedLlm::start_as(Personality::Reasoning, operator()).await;
    let host = serve(&llm, None, "auto");

    // A chat, a streamed facade completion, and an alert investigated to a structured result.
    let body = chat(&host).await;
    assert_eq!(body["answer"], ANSWER, "the think block is not the answer");
    let (_, streamed) = facade_stream(&host).await;
    assert!(streamed.ends_with(ANSWER), "{streamed}");
    assert!(!streamed.contains(THINK_MARKER) && !streamed.contains("<think>"), "{streamed}");
    let alert = json!({
        "receiver": "akritas", "status": "firing", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://alertmanager.invalid", "version": "4", "groupKey": "{}:{alertname=\"DbSlow\"}",
        "truncatedAlerts": 0,
        "alerts": [{"status": "firing", "labels": {"alertname": "DbSlow", "severity": "warning", "instance": "db-7"},
                    "annotations": {"summary": QUESTION}, "startsAt": "2026-01-01T00:00:00Z",
                    "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "", "fingerprint": "00000000000000d7"}],
    });
    let response = client()
        .post(format!("{}/api/v1/alerts/default/am/webhook", host.server.url))
        .bearer_auth(AM_TOKEN)
        .json(&alert)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.text().await.unwrap());
    let incident = wait_for(&host, "/api/v1/incidents", |body| {
        let incident = body["incidents"].as_array()?.iter().find(|i| i["name"] == "DbSlow")?;
        Some(incident["id"].as_str()?.to_owned())
    })
    .await;
    let detail = wait_for(&host, &format!("/api/v1/incidents/{incident}"), |body| {
        let status = body["jobs"][0]["status"].as_str()?;
        (status == "succeeded" || status == "failed").then(|| body.clone())
    })
    .await;
    assert_eq!(detail["jobs"][0]["status"], "succeeded", "{detail}\n{}", host.server.log_text());
    let investigation = detail["jobs"][0]["runs"][0].as_str().unwrap().to_owned();

    for run in [body["run_id"].as_str().unwrap(), investigation.as_str()] {
        let (status, record) = get(&host, &format!("/api/v1/runs/{run}")).await;
        assert_eq!(status, 200);
        assert_eq!(record["run"]["status"], "succeeded", "{record}");
        assert!(!record.to_string().contains(THINK_MARKER), "the Run record holds the think block: {record}");
    }
    let (_, runs) = get(&host, "/api/v1/runs").await;
    assert!(!runs.to_string().contains(THINK_MARKER), "{runs}");
    assert!(!detail.to_string().contains(THINK_MARKER), "{detail}");
    let (_, investigated) = get(&host, &format!("/api/v1/runs/{investigation}")).await;
    assert_eq!(investigated["run"]["investigation"]["finding_status"], "inconclusive", "{investigated}");

    let files = support::files_under(&host.data);
    assert!(files.iter().any(|f| f.extension().is_some_and(|e| e == "jsonl")), "journals exist: {files:?}");
    for file in files {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        assert!(!text.contains(THINK_MARKER), "{} holds the think block", file.display());
    }
    assert!(!host.server.log_text().contains(THINK_MARKER), "the log holds the think block");
    // The marker did reach the host: every answer carried it.
    assert!(llm.requests().len() >= 6);
}

async fn wait_for<T>(host: &Host, path: &str, pick: impl Fn(&Value) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = get(host, path).await;
        if let Some(found) = pick(&body) {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting at {path}: {body}\n{}", host.server.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The change fixture as a git working tree with one commit, under `dir`.
fn nftables(dir: &Path) -> PathBuf {
    let root = dir.join("nftables");
    support::copy_dir(&support::root().join("tests/fixtures/change/nftables"), &root);
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["-c", "user.name=t", "-c", "user.email=t@example.com", "add", "."]);
    git(&root, &["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "initial"]);
    root
}

/// Two previews of the nftables change, each in one proposal attempt: with the file named
/// (the proposal alone), then without (the search plan, then the proposal).
async fn previews(host: &Host, llm: &ScriptedLlm) {
    wait_for(host, "/api/v1/workspaces", |body| {
        body["workspaces"].as_array()?.iter().any(|w| w["name"] == "nftables" && w["ready"] == true).then_some(())
    })
    .await;
    let request = "Allow orders-v2 through nftables in production.";
    for files in [json!([PILLAR]), json!([])] {
        let (status, body) = post(
            host,
            "/api/v1/change/simulations",
            json!({"workspace": "nftables", "request": request, "files": files}),
        )
        .await;
        assert_eq!(status, 200, "files {files}: {body}\n{}", host.server.log_text());
        assert_eq!(body["result"]["changed_files"], json!([PILLAR]), "{body}");
        assert!(body["result"]["diff"].as_str().unwrap().contains("+    - name: orders-v2\n"), "{body}");
        assert_eq!(body["result"]["attempts"], 1, "{body}");
    }
    let targets: Vec<String> = llm.requests().iter().filter_map(structured_target).collect();
    assert!(targets.contains(&"akritas_plan_repository_search".to_string()), "discovery ran: {targets:?}");
}

fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git").current_dir(dir).args(args).output().expect("git runs");
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_tools_proposes_a_change_and_streams_through_the_facade() {
    let trees = tempfile::tempdir().unwrap();
    let root = nftables(trees.path());
    let llm = ScriptedLlm::start_as(Personality::Ollama { tools: false }, operator()).await;
    let host = serve(&llm, Some(&root), "auto");
    previews(&host, &llm).await;
    assert!(llm.requests().iter().all(|r| !offers_tools(r)), "Ollama said the model takes no tools");

    // The facade's streamed answer from the same model.
    let (events, text) = facade_stream(&host).await;
    assert!(text.ends_with(ANSWER), "{text}");
    assert_eq!(events.iter().filter_map(|e| e["choices"][0]["finish_reason"].as_str()).collect::<Vec<_>>(), ["stop"]);
    let requests = llm.requests();
    let streamed: Vec<&Value> = requests.iter().filter(|r| r["stream"] == true).collect();
    assert!(!streamed.is_empty() && streamed.iter().all(|r| !offers_tools(r)), "streamed without tools");
}

/// The counter of structured-step fallbacks on `/metrics`.
const FALLBACKS: &str = "akritas_model_protocol_fallbacks_total";
