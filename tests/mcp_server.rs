//! Akritas as an MCP server at `/mcp`: the Python `mcp` SDK (a real third-party client)
//! connects with an API key, lists the tools, asks (a Run with source `mcp`), searches
//! runbooks, lists and reads incidents and Runs; a wrong key is refused and a second
//! tenant cannot read the first tenant's Run or Incident (`tests/clients/mcp_ask.py`
//! exits non-zero on any mismatch). The Run and the audited reads are then checked
//! here, and so are the session limit, session ownership and the DNS-rebinding check,
//! over raw HTTP.

use akritas_testkit as support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use akritas::alerts::store::AlertStore;
use akritas::audit::AuditLog;
use akritas::catalog::secrets::EnvSecrets;
use akritas::config::{ApiKeyRef, Scope};
use akritas::engine::retrieval::Retriever;
use akritas::tenancy::Tenancy;
use akritas::tools::{RegistryBuilder, ToolLimits, ToolName, openai_alias};
use akritas::web;
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use support::host::{self, FixedRetriever};
use support::scripted_llm::{Reply, ScriptedLlm, Step};

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const ANSWER: &str = "Checkout is slow because db-7 is saturated.";
const MARKER: &str = "RUNBOOK-CHECKOUT-LATENCY";
const TOKEN_A: &str = "team-a-source-token-0123456789";
/// `(name, env, secret, scope, namespace)`.
const KEYS: [(&str, &str, &str, Scope, &str); 3] = [
    ("a-chat", "MCP_KEY_A", "tenant-a-chat-key-000001", Scope::Chat, "team-a"),
    ("b-chat", "MCP_KEY_B", "tenant-b-chat-key-000002", Scope::Chat, "team-b"),
    ("a-read", "MCP_KEY_C", "tenant-a-read-key-000003", Scope::Read, "team-a"),
];

struct Fixture {
    url: String,
    audit_path: std::path::PathBuf,
    _cancel: tokio_util::sync::DropGuard,
    _llm: ScriptedLlm,
    _dir: tempfile::TempDir,
}

fn keys() -> ApiKeys {
    let refs: Vec<ApiKeyRef> = KEYS
        .iter()
        .map(|(name, env, _, scope, namespace)| ApiKeyRef {
            name: name.to_string(),
            env: env.to_string(),
            scopes: BTreeSet::from([*scope]),
            namespace: Some(namespace.to_string()),
        })
        .collect();
    let lookup = |env: &str| KEYS.iter().find(|k| k.1 == env).map(|k| k.2.to_string());
    ApiKeys::from_env(&refs, &lookup).unwrap()
}

fn secret(name: &str) -> &'static str {
    KEYS.iter().find(|k| k.0 == name).unwrap().2
}

/// The real router with an audit journal, an alert store, an AlertSource in team-a, a
/// runbook retriever and a model that plans nothing and answers [`ANSWER`].
async fn serve(max_sessions: usize) -> Fixture {
    serve_with(max_sessions, max_sessions).await
}

async fn serve_with(max_sessions: usize, per_key: usize) -> Fixture {
    let plan = openai_alias(&ToolName::try_from("local.investigation.submit_plan").unwrap());
    let llm = ScriptedLlm::start_with(move |index, _| {
        if index % 2 == 0 {
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": [], "gaps": []}))]))
        } else {
            Step::from(Reply::Content(ANSWER.into()))
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let source = "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am, namespace: team-a}\n\
                  spec: {provider: alertmanager, auth: {bearerToken: {env: TOKEN_A}}}\n";
    std::fs::write(dir.path().join("source.yaml"), source).unwrap();
    let catalog = host::catalog_from(dir.path());
    let audit_path = dir.path().join("audit.jsonl");
    let audit = Arc::new(AuditLog::open(&audit_path).unwrap());
    let retriever: Arc<dyn Retriever> = Arc::new(FixedRetriever {
        output: json!({"hits": [{"title": "Checkout latency", "excerpt": MARKER}]}),
        documents: vec![("checkout.md".into(), "Checkout latency".into())],
        versions: BTreeMap::new(),
    });
    let tools = RegistryBuilder::new(ToolLimits::default()).build();
    let engine = host::engine(&llm, host::settings(), tools, catalog.clone(), Some(audit), Some(retriever))
        .with_tenancy(Tenancy::default());
    let alerts = Arc::new(AlertStore::open(&dir.path().join("alerts.jsonl")).unwrap());
    let secrets = Arc::new(EnvSecrets::with_lookup(|name: &str| (name == "TOKEN_A").then(|| TOKEN_A.to_string())));
    let mut state = host::app_state(Arc::new(engine), catalog, keys(), Some(alerts), secrets, 1024 * 1024);
    let mut info = (*state.info).clone();
    info.mcp.max_sessions = max_sessions;
    info.mcp.max_sessions_per_key = per_key;
    state.info = Arc::new(info);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(web::serve(listener, web::router(state), cancel.clone(), Duration::from_secs(1)));
    Fixture { url, audit_path, _cancel: cancel.drop_guard(), _llm: llm, _dir: dir }
}

async fn get(url: &str, key: &str) -> (u16, Value) {
    let response = reqwest::Client::new().get(url).bearer_auth(key).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_mcp_client_asks_reads_and_is_kept_to_its_namespace() {
    let f = serve(8).await;
    let fired = reqwest::Client::new()
        .post(format!("{}/api/v1/alerts/team-a/am/webhook", f.url))
        .bearer_auth(TOKEN_A)
        .header("content-type", "application/json")
        .body(FIRING)
        .send()
        .await
        .unwrap();
    assert_eq!(fired.status().as_u16(), 202);
    let fired: Value = fired.json().await.unwrap();
    let incident_id = fired["events"][0]["incident_id"].as_str().unwrap().to_string();

    let script = support::root().join("tests/clients/mcp_ask.py");
    let url = format!("{}/mcp", f.url);
    let args =
        [url.as_str(), secret("a-chat"), secret("b-chat"), secret("a-read"), incident_id.as_str(), ANSWER, MARKER];
    let output =
        tokio::process::Command::new(support::clients::python()).arg(&script).args(args).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "mcp_ask.py failed:\n{stdout}\n{stderr}");
    let printed: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    let run_id = printed["run_id"].as_str().unwrap();

    // The Run `ask` started exists for its tenant, with source `mcp` and the key as actor.
    let (status, run) = get(&format!("{}/api/v1/runs/{run_id}", f.url), secret("a-chat")).await;
    assert_eq!(status, 200, "{run}");
    assert_eq!((run["run"]["source"].as_str(), run["run"]["actor"].as_str()), (Some("mcp"), Some("a-chat")));
    assert_eq!(run["run"]["namespace"], "team-a");
    assert_eq!(get(&format!("{}/api/v1/runs/{run_id}", f.url), secret("b-chat")).await.0, 404);

    // Every read went to the audit journal as a `read` record, with the query hashed.
    let journal = std::fs::read_to_string(&f.audit_path).unwrap();
    let reads: Vec<Value> = journal
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["kind"] == "read")
        .map(|record| record["data"]["read"].clone())
        .collect();
    let of = |actor: &str, tool: &str| {
        reads.iter().filter(|r| r["actor"] == actor && r["tool"] == tool && r["source"] == "mcp").collect::<Vec<_>>()
    };
    assert_eq!(of("a-chat", "get_run").len(), 2, "{reads:?}");
    assert_eq!(of("a-chat", "get_run")[0]["returned"], 1);
    assert_eq!(of("b-chat", "get_run")[0]["returned"], 0, "a refused read is audited too");
    assert_eq!(of("a-chat", "list_incidents").len(), 2);
    assert_eq!(of("a-chat", "get_incident")[0]["target"], incident_id.as_str());
    let search = of("a-chat", "search_runbooks");
    assert_eq!(search.len(), 1);
    assert!(search[0]["target"].as_str().unwrap().starts_with("query sha256:"));
    assert!(!journal.contains("checkout latency"), "the search query itself is never journaled");
    assert_eq!(of("a-read", "get_incident")[0]["namespace"], "team-a");
    // The journal with reads opens again (strict replay) with the Run in it.
    let copy = f.audit_path.with_file_name("copy.jsonl");
    std::fs::copy(&f.audit_path, &copy).unwrap();
    let copy = AuditLog::open(&copy).unwrap();
    assert!(copy.get(&akritas::audit::RunId::parse(run_id).unwrap()).await.unwrap().is_some());
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
}

async fn open_session(url: &str, host: Option<&str>) -> reqwest::Response {
    open_session_as(url, host, "a-chat").await
}

async fn open_session_as(url: &str, host: Option<&str>, key: &str) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(secret(key))
        .header("accept", "application/json, text/event-stream")
        .json(&initialize());
    if let Some(host) = host {
        request = request.header("host", host);
    }
    request.send().await.unwrap()
}

/// A `read` key that opens sessions as fast as it can, in parallel, gets its share and no
/// more: the check and the reservation are one step, and the refusals are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_racing_initializes_never_holds_more_than_its_share_of_sessions() {
    let f = serve_with(8, 3).await;
    let url = format!("{}/mcp", f.url);
    let opens: Vec<_> = (0..12)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { open_session_as(&url, None, "a-read").await })
        })
        .collect();
    let mut statuses = Vec::new();
    for open in opens {
        let response = open.await.unwrap();
        let status = response.status().as_u16();
        if status == 429 {
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "mcp_sessions_per_key", "{body}");
            assert!(body["error"]["message"].as_str().unwrap().contains("mcp_max_sessions_per_key"), "{body}");
        }
        statuses.push(status);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429, 429, 429, 429, 429, 429, 429]);
    // Other keys still find sessions.
    assert_eq!(open_session_as(&url, None, "b-chat").await.status().as_u16(), 200);
    let mut metrics = String::new();
    akritas::telemetry::render(&mut metrics);
    assert!(
        metrics.lines().any(|l| l.starts_with("akritas_refusals_total{")
            && l.contains("pool=\"mcp_sessions\"")
            && l.contains("setting=\"mcp_max_sessions_per_key\"")),
        "{metrics}"
    );
}

#[tokio::test]
async fn sessions_are_bounded_owned_by_their_key_and_foreign_hosts_are_refused() {
    let f = serve(2).await;
    let url = format!("{}/mcp", f.url);
    // DNS rebinding: a Host header naming another site is refused, and opens no session.
    let foreign = open_session(&url, Some("attacker.example.com")).await;
    assert_eq!(foreign.status().as_u16(), 403);
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let response = open_session(&url, None).await;
        assert_eq!(response.status().as_u16(), 200);
        sessions.push(response.headers()["mcp-session-id"].to_str().unwrap().to_string());
    }
    let refused = open_session(&url, None).await;
    assert_eq!(refused.status().as_u16(), 503);
    assert_eq!(refused.headers()["retry-after"], "5");
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("mcp_max_sessions"), "{body}");

    // A session belongs to the key that opened it: another key cannot use or close it.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    for (method, body) in [(reqwest::Method::POST, Some(list)), (reqwest::Method::DELETE, None)] {
        let mut request = reqwest::Client::new()
            .request(method.clone(), &url)
            .bearer_auth(secret("b-chat"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &sessions[1]);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let foreign = request.send().await.unwrap();
        assert_eq!(foreign.status().as_u16(), 404, "{method} with another key's session");
    }
    assert_eq!(open_session(&url, None).await.status().as_u16(), 503, "both sessions are still open");

    // Closing a session makes room for a new one.
    let closed = reqwest::Client::new()
        .delete(&url)
        .bearer_auth(secret("a-chat"))
        .header("mcp-session-id", &sessions[0])
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    assert_eq!(open_session(&url, None).await.status().as_u16(), 200);
}
