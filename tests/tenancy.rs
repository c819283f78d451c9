//! Tenancy (docs/architecture.md, Tenancy): a Run uses only the tools, skills and knowledge of
//! its own namespace and of the shared namespaces; API keys act in their namespace,
//! read only its Runs and do only what their scopes allow.

use akritas_testkit as support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use akritas::audit::AuditLog;
use akritas::catalog::directory::DirectorySource;
use akritas::catalog::secrets::EnvSecrets;
use akritas::catalog::status::StatusBoard;
use akritas::catalog::{CatalogStore, merge};
use akritas::config::ApiKeyRef;
use akritas::engine::run::Engine;
use akritas::resources::mcp_adapter::Permission;
use akritas::tenancy::Tenancy;
use akritas::tools::{Registry, RegistryBuilder, ToolLimits, ToolName, openai_alias};
use akritas::web;
use akritas::web::auth::ApiKeys;
use serde_json::{Value, json};
use support::host;
use support::scripted_llm::{Reply, ScriptedLlm, Step, offers};

fn alias(name: &str) -> String {
    openai_alias(&ToolName::try_from(name).unwrap())
}

fn one_tool(name: &str) -> Registry {
    let mut builder = RegistryBuilder::new(ToolLimits::default());
    host::fixed_tool(&mut builder, name, Permission::Read, json!({"from": name}), Arc::new(AtomicUsize::new(0)));
    builder.build()
}

/// Tools of three namespaces: two tenants and one shared.
fn namespaced_tools() -> BTreeMap<String, Registry> {
    BTreeMap::from([
        ("team-a".to_string(), one_tool("teama.query")),
        ("team-b".to_string(), one_tool("teamb.query")),
        ("platform".to_string(), one_tool("platform.query")),
    ])
}

/// A Catalog (and the board of its load) with a Skill in each tenant namespace
/// that matches `postgres`.
fn catalog_with_skills() -> (CatalogStore, StatusBoard, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let skill = |namespace: &str, marker: &str| {
        format!(
            "apiVersion: akritas.io/v1alpha1\nkind: Skill\nmetadata: {{name: pg-{namespace}, namespace: {namespace}}}\n\
             spec:\n  description: Postgres guidance of {namespace}\n  match: [postgres]\n  content: \"{marker}\"\n"
        )
    };
    std::fs::write(dir.path().join("a.yaml"), skill("team-a", "GUIDANCE-OF-TEAM-A")).unwrap();
    std::fs::write(dir.path().join("b.yaml"), skill("team-b", "GUIDANCE-OF-TEAM-B")).unwrap();
    let schedule = |namespace: &str| {
        format!(
            "apiVersion: akritas.io/v1alpha1\nkind: RunSchedule\nmetadata: {{name: check, namespace: {namespace}}}\n\
             spec: {{schedule: \"@daily\", prompt: p}}\n"
        )
    };
    let schedules: Vec<String> = ["team-a", "team-b", "platform"].into_iter().map(schedule).collect();
    std::fs::write(dir.path().join("schedules.yaml"), schedules.join("---\n")).unwrap();
    let (store, board) = (CatalogStore::new(), StatusBoard::default());
    merge::apply(DirectorySource::new(vec![dir.path().to_path_buf()], None).reload(), &store, &board);
    (store, board, dir)
}

struct Tenants {
    url: String,
    _cancel: tokio_util::sync::DropGuard,
    llm: ScriptedLlm,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

const KEYS: [(&str, &str, &str); 5] = [
    ("a-chat", "KEY_A_CHAT", "tenant-a-chat-key-0001:chat@team-a"),
    ("b-chat", "KEY_B_CHAT", "tenant-b-chat-key-0002:chat@team-b"),
    ("c-read", "KEY_C_READ", "tenant-c-read-key-0003:read@team-c"),
    ("metrics", "KEY_METRICS", "metrics-only-key-00004:metrics"),
    ("admin", "KEY_ADMIN", "cluster-admin-key-0005:admin"),
];

fn secret(name: &str) -> String {
    let (_, _, spec) = KEYS.iter().find(|(n, _, _)| *n == name).unwrap();
    spec.split(':').next().unwrap().to_string()
}

async fn tenants() -> Tenants {
    // Every answer: no plan checks, then a final text; the requests are recorded.
    let llm = ScriptedLlm::start_with(|index, _| {
        if index % 2 == 0 {
            Step::from(Reply::ToolCalls(vec![(
                "p".into(),
                alias("local.investigation.submit_plan"),
                json!({"checks": [], "gaps": []}),
            )]))
        } else {
            Step::from(Reply::Content("done".into()))
        }
    })
    .await;
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::open(&audit_dir.path().join("audit.jsonl")).unwrap());
    let (catalog, board, skills_dir) = catalog_with_skills();
    let empty = RegistryBuilder::new(ToolLimits::default()).build();
    let engine: Engine = host::engine(&llm, host::settings(), empty, catalog.clone(), Some(audit), None)
        .with_tenancy(Tenancy::new(["platform".to_string()]));
    engine.set_namespaced_tools(&namespaced_tools());
    let refs: Vec<ApiKeyRef> = KEYS
        .iter()
        .map(|(name, env, spec)| {
            let (_, rest) = spec.split_once(':').unwrap();
            let text = format!("{name}={env}:{rest}");
            parse_key(&text)
        })
        .collect();
    let lookup = |env: &str| KEYS.iter().find(|(_, e, _)| *e == env).map(|(name, _, _)| secret(name));
    let keys = ApiKeys::from_env(&refs, &lookup).unwrap();
    let mut state =
        host::app_state(Arc::new(engine), catalog, keys, None, Arc::new(EnvSecrets::process()), 1024 * 1024);
    state.board = board;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(web::serve(listener, web::router(state), cancel.clone(), Duration::from_secs(1)));
    Tenants { url, _cancel: cancel.drop_guard(), llm, _dirs: (audit_dir, skills_dir) }
}

/// Parses one `--api-key` entry through the real settings loader.
fn parse_key(text: &str) -> ApiKeyRef {
    let flags = akritas::config::ServeFlags { api_keys: vec![text.to_string()], ..Default::default() };
    akritas::config::load(&flags, &|_| None).unwrap().api_keys.remove(0)
}

impl Tenants {
    async fn call(&self, method: reqwest::Method, path: &str, key: &str, body: Option<Value>) -> (u16, Value) {
        let mut request =
            reqwest::Client::new().request(method, format!("{}{path}", self.url)).bearer_auth(secret(key));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn chat(&self, key: &str, text: &str) -> (u16, Value) {
        let body = json!({"messages": [{"role": "user", "content": text}], "context": {"service": "postgres"}});
        self.call(reqwest::Method::POST, "/api/v1/chat", key, Some(body)).await
    }
}

#[tokio::test]
async fn a_run_gets_only_the_tools_and_skills_its_namespace_sees() {
    let t = tenants().await;
    let (status, body) = t.chat("a-chat", "Why is postgres slow?").await;
    assert_eq!(status, 200, "{body}");
    let requests = t.llm.requests();
    let text = serde_json::to_string(&requests).unwrap();
    assert!(requests.iter().any(|r| offers(r, &alias("teama.query"))), "own tool offered");
    assert!(requests.iter().any(|r| offers(r, &alias("platform.query"))), "shared tool offered");
    assert!(!requests.iter().any(|r| offers(r, &alias("teamb.query"))), "another tenant's tool must not be offered");
    assert!(text.contains("GUIDANCE-OF-TEAM-A"), "own skill selected");
    assert!(!text.contains("GUIDANCE-OF-TEAM-B"), "another tenant's skill must never reach the model");

    // A namespace without tools of its own gets only the shared ones.
    let before = t.llm.requests().len();
    let (status, body) = t.chat("b-chat", "Is postgres healthy?").await;
    assert_eq!(status, 200, "{body}");
    let requests = &t.llm.requests()[before..];
    assert!(requests.iter().any(|r| offers(r, &alias("teamb.query"))));
    assert!(!requests.iter().any(|r| offers(r, &alias("teama.query"))));
    assert!(!serde_json::to_string(requests).unwrap().contains("GUIDANCE-OF-TEAM-A"));

    let (status, tools) = t.call(reqwest::Method::GET, "/api/v1/tools", "c-read", None).await;
    assert_eq!(status, 200, "{tools}");
    let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["platform.query"], "team-c has no tools of its own: only the shared one");
}

#[tokio::test]
async fn keys_read_only_their_namespace_and_do_only_what_their_scopes_allow() {
    let t = tenants().await;
    let (_, a) = t.chat("a-chat", "first").await;
    let (_, b) = t.chat("b-chat", "second").await;
    let run_a = a["run_id"].as_str().unwrap().to_string();
    let run_b = b["run_id"].as_str().unwrap().to_string();

    let (_, listed) = t.call(reqwest::Method::GET, "/api/v1/runs", "a-chat", None).await;
    let ids: Vec<&str> = listed["runs"].as_array().unwrap().iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids, [run_a.as_str()], "team-a lists only its own Run");
    let (_, run) = t.call(reqwest::Method::GET, &format!("/api/v1/runs/{run_a}"), "a-chat", None).await;
    assert_eq!(run["run"]["namespace"], "team-a");
    let (status, _) = t.call(reqwest::Method::GET, &format!("/api/v1/runs/{run_b}"), "a-chat", None).await;
    assert_eq!(status, 404, "another namespace's Run does not exist for this key");
    let follow = Some(json!({"message": "and now?"}));
    let (status, _) = t.call(reqwest::Method::POST, &format!("/api/v1/runs/{run_b}/chat"), "a-chat", follow).await;
    assert_eq!(status, 404, "nor can it be continued");
    let (_, all) = t.call(reqwest::Method::GET, "/api/v1/runs", "admin", None).await;
    assert_eq!(all["runs"].as_array().unwrap().len(), 2, "admin reads every namespace");

    // Resources and schedules: a tenant sees its own and the shared ones, admin all.
    let namespaces = |body: &Value, list: &str| -> Vec<String> {
        let all: std::collections::BTreeSet<String> =
            body[list].as_array().unwrap().iter().map(|r| r["namespace"].as_str().unwrap().to_string()).collect();
        all.into_iter().collect()
    };
    let (_, own) = t.call(reqwest::Method::GET, "/api/v1/resources", "a-chat", None).await;
    assert_eq!(namespaces(&own, "resources"), ["platform", "team-a"], "{own}");
    let (_, every) = t.call(reqwest::Method::GET, "/api/v1/resources", "admin", None).await;
    assert_eq!(namespaces(&every, "resources"), ["platform", "team-a", "team-b"]);
    let (_, own) = t.call(reqwest::Method::GET, "/api/v1/schedules", "b-chat", None).await;
    assert_eq!(namespaces(&own, "schedules"), ["platform", "team-b"], "{own}");
    let (_, every) = t.call(reqwest::Method::GET, "/api/v1/schedules", "admin", None).await;
    assert_eq!(every["schedules"].as_array().unwrap().len(), 3, "{every}");

    // Scopes: read cannot start work, metrics reads nothing else, chat cannot scrape.
    let (status, body) = t.chat("c-read", "hello").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "insufficient_scope");
    assert!(body["error"]["message"].as_str().unwrap().contains("\"chat\""), "{body}");
    let (status, _) = t.call(reqwest::Method::GET, "/api/v1/runs", "metrics", None).await;
    assert_eq!(status, 403);
    let (status, _) = t.chat("metrics", "hello").await;
    assert_eq!(status, 403);
    let response =
        reqwest::Client::new().get(format!("{}/metrics", t.url)).bearer_auth(secret("metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let (status, _) = t.call(reqwest::Method::GET, "/metrics", "a-chat", None).await;
    assert_eq!(status, 403, "a chat key does not scrape metrics");
}
