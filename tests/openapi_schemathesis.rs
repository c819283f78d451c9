//! schemathesis (PyPI) against the OpenAPI document a real `akritas serve` answers at
//! `/api/v1/openapi.json`: API keys on, alert ingestion on, a data directory, the
//! sample resources and a scripted model that always answers. Every check runs
//! (`--checks all`) on generated valid and invalid inputs; the test fails on any 5xx
//! and on any answer (status, content type, body) the document does not describe.

use std::process::Command;
use std::time::Instant;

use akritas::tools::{ToolName, openai_alias};
use akritas_testkit as support;
use serde_json::json;
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use support::{Server, serve_command};

/// The admin API key; also the sample AlertSource's Bearer token, so the one
/// `Authorization` header schemathesis sends opens the Alertmanager webhooks too and
/// generated payloads reach the decoder instead of stopping at 401.
const KEY: &str = "schemathesis-key-0123456789";

/// Plans nothing, answers every question, and submits a valid result when an
/// alert investigation asks for one.
fn model() -> impl Fn(usize, &serde_json::Value) -> Step + Send + Sync + 'static {
    let alias = |name: &str| openai_alias(&ToolName::try_from(name).unwrap());
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    move |_, request| {
        if offers(request, &plan) {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else if offers(request, &submit) {
            let result = json!({"finding_status": "inconclusive", "actionability": "requires_human",
                "confidence": "low", "summary": "Nothing was checked.", "impact": "", "evidence": [],
                "ruled_out": [], "affected_components": [], "recommended_actions": [], "production_writes": 0});
            Step::from(Reply::ToolCalls(vec![("r".into(), submit.clone(), result)]))
        } else {
            Step::from(Reply::Content("An answer.".into()))
        }
    }
}

/// A Run, an incident with its event and job: the `{id}` routes then reach real
/// objects (tests/clients/schemathesis.toml reads these variables).
async fn seed(url: &str) -> Vec<(&'static str, String)> {
    let client = reqwest::Client::new();
    let post = |path: &str, body: String| {
        client
            .post(format!("{url}{path}"))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let chat = post("/api/v1/chat", json!({"messages": [{"role": "user", "content": "Is db-7 healthy?"}]}).to_string());
    let chat: serde_json::Value = chat.await.unwrap().json().await.unwrap();
    let run = chat["run_id"].as_str().expect("a chat answer names its Run").to_string();
    let alert = post("/api/v1/alertmanager/webhook", ALERT.to_string()).await.unwrap();
    assert_eq!(alert.status(), 202, "{}", alert.text().await.unwrap());
    let get = |path: String| {
        let request = client.get(format!("{url}{path}")).bearer_auth(KEY);
        async move { request.send().await.unwrap().json::<serde_json::Value>().await.unwrap() }
    };
    let incidents = get("/api/v1/incidents".into()).await;
    let incident = incidents["incidents"][0]["id"].as_str().expect("the alert opened an incident").to_string();
    let detail = get(format!("/api/v1/incidents/{incident}")).await;
    let event = detail["events"][0]["id"].as_str().unwrap().to_string();
    let job = detail["jobs"][0]["id"].as_str().unwrap().to_string();
    vec![
        ("AKRITAS_RUN_ID", run),
        ("AKRITAS_INCIDENT_ID", incident),
        ("AKRITAS_EVENT_ID", event),
        ("AKRITAS_JOB_ID", job),
    ]
}

const ALERT: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let llm = ScriptedLlm::start_with(model()).await;
    let resources = support::copy_samples();
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .env("AKRITAS_BASE_URL", &llm.url)
        .env("AKRITAS_API_KEY", KEY)
        .env("AKRITAS_ALERTMANAGER_TOKEN", KEY)
        .arg("--resources")
        .arg(resources.path());
    let server = Server::start(command);
    let ids = seed(&server.url).await;

    let schemathesis = support::clients::python().with_file_name("schemathesis");
    // schemathesis keeps a cache in its working directory: a temporary one.
    let workdir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = Command::new(&schemathesis)
        .current_dir(workdir.path())
        .arg("--config-file")
        .arg(support::root().join("tests/clients/schemathesis.toml"))
        .arg("run")
        .arg(format!("{}/api/v1/openapi.json", server.url))
        .args(["--header", &format!("Authorization: Bearer {KEY}")])
        .args(["--checks", "all"])
        // Bounded: a fixed seed and example count, one worker (two cores are shared),
        // no stateful phase (it chains links the document does not declare).
        .args(["--phases", "examples,coverage,fuzzing", "--max-examples", "25", "--seed", "17", "--workers", "1"])
        .args(["--max-time", "90", "--request-timeout", "20"])
        .env("NO_COLOR", "1")
        .envs(ids.iter().map(|(name, value)| (*name, value.as_str())))
        .output()
        .expect("run schemathesis (e2e/install-test-deps.sh installs it into target/py)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    println!("schemathesis took {:.1} s", started.elapsed().as_secs_f64());
    let server_errors: Vec<String> =
        server.log_text().lines().filter(|l| l.contains("request failed")).map(str::to_string).collect();
    assert!(
        output.status.success(),
        "schemathesis found problems (exit {:?}); server errors: {server_errors:#?}",
        output.status.code()
    );
    assert!(server_errors.is_empty(), "the server logged 5xx answers: {server_errors:#?}");
}
