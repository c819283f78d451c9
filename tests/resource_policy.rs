//! What a resource may start, read or reach is decided by the service configuration,
//! never by the resource (docs/architecture.md, Tenancy): driven through the real
//! `akritas serve` in standalone mode, reading the conditions it derives at
//! `/api/v1/resources`. Resource URLs and HTTP proxies (docs/tools.md, "Where resource
//! URLs may lead"): a proxy named by `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` never carries
//! them (it would resolve the destination out of the egress policy's sight), and the one
//! an operator names in `egress_proxy` is handed only destinations the policy resolved
//! and allowed; stand-in proxies record the request line of every connection.

use akritas_testkit as support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use support::git_server::{GitServer, bare_repo};
use support::{Server, poll, serve_command};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const UPSTREAM_KEY: &str = "sk-upstream-7f3a9c1e5b";
const CLIENT_KEY: &str = "client-key-4d8e2a6c0f";

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

async fn resources(server: &Server) -> Value {
    reqwest::Client::new()
        .get(format!("{}/api/v1/resources", server.url))
        .bearer_auth(CLIENT_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn find<'a>(all: &'a Value, kind: &str, namespace: &str, name: &str) -> &'a Value {
    all["resources"]
        .as_array()
        .and_then(|list| list.iter().find(|r| r["kind"] == kind && r["namespace"] == namespace && r["name"] == name))
        .unwrap_or_else(|| panic!("{kind}/{namespace}/{name} not listed: {all:#}"))
}

fn condition<'a>(resource: &'a Value, type_: &str) -> &'a Value {
    resource["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition: {resource:#}"))
}

/// `(status, reason, message)` of the Ready condition.
fn ready(resource: &Value) -> (String, String, String) {
    let ready = condition(resource, "Ready");
    let text = |field: &str| ready[field].as_str().unwrap_or_default().to_owned();
    (text("status"), text("reason"), text("message"))
}

/// Polls until no object is still connecting, indexing or resolving.
async fn settled(server: &Server) -> Value {
    let pending = ["Connecting", "Indexing", "Resolving", "Checking"];
    let found = poll(Duration::from_secs(40), || async {
        let all = resources(server).await;
        let busy = all["resources"].as_array()?.iter().any(|r| {
            r["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| pending.contains(&c["reason"].as_str().unwrap_or_default())))
        });
        (!busy).then_some(all)
    })
    .await;
    match found {
        Some((all, _)) => all,
        None => panic!("resources did not settle: {:#}\nlog:\n{}", resources(server).await, server.log_text()),
    }
}

fn adapter(namespace: &str, name: &str, tool_namespace: &str, command: &str, args: &[&str]) -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: McpAdapter\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         spec:\n  transport:\n    stdio:\n      command: {command}\n      args: {args}\n  \
         namespace: {tool_namespace}\n  allow: [read]\n---\n",
        args = serde_json::to_string(args).unwrap(),
    )
}

fn alert_source(namespace: &str, name: &str, env: &str) -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         spec: {{provider: alertmanager, auth: {{bearerToken: {{env: {env}}}}}}}\n---\n"
    )
}

fn knowledge_base(namespace: &str, name: &str, path: &Path) -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: KnowledgeBase\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         spec:\n  sources:\n    - directory: {{path: \"{}\", extensions: [md, jsonl]}}\n---\n",
        path.display()
    )
}

const RUNBOOK: &str = "# Disk full\nFree space on the node: remove old images, rotate logs, grow the volume. \
                       Check which directory grows first, then the kubelet's image garbage collection.\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_starts_and_reads_only_what_the_service_configuration_allows() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("resources");
    let data = work.path().join("data");
    let outside = work.path().join("outside");
    for d in [&dir, &data, &outside, &dir.join("runbooks")] {
        std::fs::create_dir_all(d).unwrap();
    }
    write(&dir.join("runbooks"), "disk.md", RUNBOOK);
    write(&outside, "private.md", RUNBOOK);
    // Something to index in the data directory, as the journals would be.
    write(&data, "journal.md", RUNBOOK);
    std::os::unix::fs::symlink(&outside, dir.join("linked")).unwrap();
    let marker = work.path().join("started-by-a-resource");
    let vm = ["mcp", "victoriametrics", "--base-url", "http://127.0.0.1:1"];

    let mut manifests = String::new();
    // A tenant tries to run a shell, and this binary with a command that is not an MCP server.
    let touch = format!("touch {}", marker.display());
    manifests += &adapter("team-b", "shell", "mcp.shell", "/bin/sh", &["-c", &touch]);
    manifests += &adapter("team-b", "writer", "mcp.writer", "akritas", &["serve", "--address", "127.0.0.1:0"]);
    manifests += &adapter("team-b", "prober", "mcp.prober", "akritas", &["mcp", "probe", "http://127.0.0.1:1/mcp"]);
    // The platform's adapter (a shared namespace) wins its tool namespace everywhere; within
    // one namespace the first in key order wins; two tenants may use the same namespace.
    manifests += &adapter("platform", "vm", "mcp.vm", "akritas", &vm);
    manifests += &adapter("team-b", "vm", "mcp.vm", "akritas", &vm);
    manifests += &adapter("team-a", "metrics-1", "mcp.metrics", "akritas", &vm);
    manifests += &adapter("team-a", "metrics-2", "mcp.metrics", "akritas", &vm);
    manifests += &adapter("team-c", "metrics", "mcp.metrics", "akritas", &vm);
    // Secrets: the service's own credentials are never readable, other names only when allowed.
    manifests += &alert_source("team-b", "upstream", "OPENAI_API_KEY");
    manifests += &alert_source("team-b", "client", "AKRITAS_API_KEY");
    manifests += &alert_source("team-b", "config", "AKRITAS_CONFIG");
    manifests += &alert_source("team-b", "home", "HOME");
    manifests += &alert_source("team-b", "allowed", "AKRITAS_TEAM_B_TOKEN");
    // Team A's token, which the default `AKRITAS_*` pattern lets only the home and
    // shared namespaces read.
    manifests += &alert_source("team-b", "team-a-token", "AKRITAS_TEAM_A_TOKEN");
    // Directories: inside the data directory, or out of the roots through a symlink.
    manifests += &knowledge_base("team-b", "journals", &data);
    manifests += &knowledge_base("team-b", "linked", Path::new("linked"));
    manifests += &knowledge_base("team-b", "runbooks", Path::new("runbooks"));
    write(&dir, "tenant.yaml", &manifests);

    let config = work.path().join("config.json");
    std::fs::write(&config, "{\"version\": 1}").unwrap();
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--resources")
        .arg(&dir)
        .env("AKRITAS_DATA_DIR", &data)
        .env("AKRITAS_SHARED_NAMESPACES", "platform")
        .env("OPENAI_API_KEY", UPSTREAM_KEY)
        .env("AKRITAS_API_KEY", CLIENT_KEY)
        .env("AKRITAS_TEAM_B_TOKEN", "team-b-token-0123456789")
        .env("AKRITAS_TEAM_A_TOKEN", "team-a-token-0123456789")
        .env("AKRITAS_RESOURCE_ENV", "AKRITAS_*,team-b/AKRITAS_TEAM_B_*")
        .env("AKRITAS_CONFIG", &config);
    let server = Server::start(command);
    let all = settled(&server).await;

    // Commands.
    for name in ["shell", "writer", "prober"] {
        let (status, reason, message) = ready(find(&all, "McpAdapter", "team-b", name));
        assert_eq!((status.as_str(), reason.as_str()), ("False", "CommandNotAllowed"), "{name}: {message}");
        assert!(message.contains("stdio_commands"), "{name}: the message names the setting: {message}");
    }
    assert!(!marker.exists(), "a refused command was started");
    let children =
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", server.pid(), server.pid())).unwrap_or_default();
    for pid in children.split_whitespace() {
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default().replace('\0', " ");
        assert!(cmdline.contains("mcp victoriametrics"), "only allowed commands run as children: {cmdline}");
    }

    // Tool namespaces.
    for (namespace, name) in [("platform", "vm"), ("team-a", "metrics-1"), ("team-c", "metrics")] {
        let (status, reason, message) = ready(find(&all, "McpAdapter", namespace, name));
        assert_eq!((status.as_str(), reason.as_str()), ("True", "Ready"), "{namespace}/{name}: {message}");
    }
    let (status, reason, message) = ready(find(&all, "McpAdapter", "team-b", "vm"));
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ToolNamespaceTaken"), "{message}");
    assert!(message.contains("McpAdapter/platform/vm"), "{message}");
    let (status, reason, message) = ready(find(&all, "McpAdapter", "team-a", "metrics-2"));
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ToolNamespaceTaken"), "{message}");
    assert!(message.contains("McpAdapter/team-a/metrics-1"), "{message}");

    // Environment variables.
    for name in ["upstream", "client", "config", "home", "team-a-token"] {
        let resource = find(&all, "AlertSource", "team-b", name);
        let (status, reason, message) = ready(resource);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "EnvNotAllowed"), "{name}: {message}");
        assert_eq!(condition(resource, "SecretsResolved")["status"], "False");
    }
    let (_, _, message) = ready(find(&all, "AlertSource", "team-b", "upstream"));
    assert!(message.contains("OPENAI_API_KEY") && message.contains("never"), "{message}");
    let (_, _, message) = ready(find(&all, "AlertSource", "team-b", "home"));
    assert!(message.contains("resource_env"), "{message}");
    assert_eq!(ready(find(&all, "AlertSource", "team-b", "allowed")).0, "True");
    let (_, _, message) = ready(find(&all, "AlertSource", "team-b", "team-a-token"));
    assert!(
        message.contains("only for other namespaces") && message.contains("team-b/AKRITAS_TEAM_A_TOKEN"),
        "{message}"
    );

    // Directories.
    for name in ["journals", "linked"] {
        let resource = find(&all, "KnowledgeBase", "team-b", name);
        let (status, reason, message) = ready(resource);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "PathNotAllowed"), "{name}: {message}");
        assert!(message.contains("knowledge_roots"), "{name}: {message}");
        assert!(resource["status"]["documents"].is_null(), "{name} was indexed: {resource:#}");
    }
    assert_eq!(ready(find(&all, "KnowledgeBase", "team-b", "runbooks")).0, "True");

    let text = format!("{all}\n{}", server.log_text());
    for secret in [UPSTREAM_KEY, CLIENT_KEY] {
        assert!(!text.contains(secret), "a service credential leaked");
    }
}

const HEADER_SECRET: &str = "hdr-secret-93b1c07d";
const ENV_SECRET: &str = "env-secret-5e2f8a14";

/// A stand-in MCP endpoint that refuses every request with a plain-text body echoing the
/// request headers, as a misbehaving server might.
async fn echoing_endpoint() -> String {
    let app = axum::Router::new().fallback(|headers: axum::http::HeaderMap| async move {
        let echoed: Vec<String> =
            headers.iter().map(|(name, value)| format!("{name}={}", value.to_str().unwrap_or_default())).collect();
        (axum::http::StatusCode::BAD_REQUEST, format!("bad request headers: {}", echoed.join(" ")))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A stdio "server" that logs its token to stderr and answers `initialize` with a JSON-RPC
/// error quoting it.
const ECHO_SCRIPT: &str = r#"read -r line
id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
echo "token $TOKEN rejected" >&2
printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"token %s rejected"}}\n' "${id:-0}" "$TOKEN"
sleep 5
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolved_secrets_never_appear_in_adapter_status_or_logs() {
    let endpoint = echoing_endpoint().await;
    let work = tempfile::tempdir().unwrap();
    let manifests = format!(
        "apiVersion: akritas.io/v1alpha1\nkind: McpAdapter\nmetadata: {{name: echo-http, namespace: ops}}\n\
         spec:\n  transport:\n    http:\n      url: \"{endpoint}/mcp\"\n      headers:\n        \
         - {{name: X-Api-Key, valueFrom: {{env: AKRITAS_HEADER_SECRET}}}}\n  allow: [read]\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: McpAdapter\nmetadata: {{name: echo-stdio, namespace: ops}}\n\
         spec:\n  transport:\n    stdio:\n      command: /bin/sh\n      args: {args}\n      env:\n        \
         - {{name: TOKEN, valueFrom: {{env: AKRITAS_ENV_SECRET}}}}\n  allow: [read]\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: McpAdapter\nmetadata: {{name: node-options, namespace: ops}}\n\
         spec:\n  transport:\n    stdio:\n      command: /bin/sh\n      args: {args}\n      env:\n        \
         - {{name: BASH_ENV, value: /tmp/payload.sh}}\n  allow: [read]\n",
        args = serde_json::to_string(&["-c", ECHO_SCRIPT]).unwrap(),
    );
    write(work.path(), "echo.yaml", &manifests);
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--resources")
        .arg(work.path())
        .env("AKRITAS_STDIO_COMMANDS", "akritas,/bin/sh")
        .env("AKRITAS_STDIO_ENV", "ops/TOKEN")
        .env("AKRITAS_RESOURCE_ENV", "ops/AKRITAS_*")
        .env("AKRITAS_HEADER_SECRET", HEADER_SECRET)
        .env("AKRITAS_ENV_SECRET", ENV_SECRET)
        .env("AKRITAS_API_KEY", CLIENT_KEY)
        .env("RUST_LOG", "debug,hyper=info,reqwest=info,h2=info,rustls=info");
    let server = Server::start(command);
    let echoed = poll(Duration::from_secs(40), || async {
        let all = resources(&server).await;
        let messages: Vec<String> =
            ["echo-http", "echo-stdio"].iter().map(|name| ready(find(&all, "McpAdapter", "ops", name)).2).collect();
        messages.iter().all(|m| m.contains("rejected") || m.contains("bad request")).then_some((all, messages))
    })
    .await;
    let Some(((all, messages), _)) = echoed else {
        panic!("the servers' errors did not arrive: {:#}\nlog:\n{}", resources(&server).await, server.log_text());
    };
    for message in &messages {
        assert!(message.contains("[redacted]"), "the echoed value is shown redacted: {message}");
    }
    // An interpreter hook the stdio_env allowlist does not name never reaches a child.
    let (ready_status, reason, message) = ready(find(&all, "McpAdapter", "ops", "node-options"));
    assert_eq!((ready_status.as_str(), reason.as_str()), ("False", "EnvNotAllowed"), "{message}");
    assert!(message.contains("BASH_ENV") && message.contains("stdio_env"), "{message}");
    // The child's stderr went through the log at debug level.
    poll(Duration::from_secs(10), || async { server.log_text().contains("mcp child stderr").then_some(()) })
        .await
        .expect("the child's stderr is logged");
    let text = format!("{all}\n{}", server.log_text());
    for secret in [HEADER_SECRET, ENV_SECRET, CLIENT_KEY] {
        assert!(!text.contains(secret), "{secret} leaked into status or logs:\n{text}");
    }
}

/// Resources that point Akritas at the cloud metadata service and other link-local
/// addresses (a webhook, a Telegram base URL, an MCP server, a git remote) are refused
/// with `EgressNotAllowed` naming `egress_allow`; a cluster-looking address is not.
/// An operator's explicit `egress_allow` entry opens one range again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_urls_never_reach_link_local_or_metadata_addresses() {
    let work = tempfile::tempdir().unwrap();
    let manifests = "\
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {name: metadata-hook, namespace: team-b}
spec: {type: webhook, webhook: {url: \"http://169.254.169.254/latest/meta-data/iam/security-credentials/\"}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {name: v6-metadata, namespace: team-b}
spec: {type: webhook, webhook: {url: \"http://[fd00:ec2::254]/latest/\"}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {name: opened, namespace: team-b}
spec: {type: webhook, webhook: {url: \"http://169.254.10.7:8080/hook\"}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {name: cluster-hook, namespace: team-b}
spec: {type: webhook, webhook: {url: \"http://10.96.0.12:9/hook\"}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {name: tg, namespace: team-b}
spec: {type: telegram, telegram: {botToken: {env: AKRITAS_TEAM_B_TG}, chatId: \"-100\", baseUrl: \"http://[fe80::1]:8081\"}}
---
apiVersion: akritas.io/v1alpha1
kind: McpAdapter
metadata: {name: metadata-mcp, namespace: team-b}
spec: {transport: {http: {url: \"http://169.254.169.254/mcp\"}}, allow: [read]}
---
apiVersion: akritas.io/v1alpha1
kind: Workspace
metadata: {name: metadata-git, namespace: team-b}
spec: {source: {git: {url: \"http://169.254.169.254/infra.git\", ref: main}}}
---
apiVersion: akritas.io/v1alpha1
kind: Workspace
metadata: {name: cleartext-git, namespace: team-b}
spec: {source: {git: {url: \"http://10.96.0.20/infra.git\", ref: main, auth: {username: x, token: {env: AKRITAS_TEAM_B_TG}}}}}
---
apiVersion: akritas.io/v1alpha1
kind: NotificationReceiver
metadata: {name: cleartext-hook, namespace: team-b}
spec: {type: webhook, webhook: {url: \"http://10.96.0.12:9/hook\", bearerToken: {env: AKRITAS_TEAM_B_TG}}}
";
    write(work.path(), "egress.yaml", manifests);
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--resources")
        .arg(work.path())
        .env("AKRITAS_DATA_DIR", work.path().join("data"))
        .env("AKRITAS_API_KEY", CLIENT_KEY)
        .env("AKRITAS_RESOURCE_ENV", "team-b/AKRITAS_TEAM_B_*")
        .env("AKRITAS_TEAM_B_TG", "123456:telegram-token-for-team-b")
        .env("AKRITAS_EGRESS_ALLOW", "169.254.10.0/24");
    let server = Server::start(command);
    let refused = |kind: &'static str, name: &'static str| (kind, name);
    let expected = [
        refused("NotificationReceiver", "metadata-hook"),
        refused("NotificationReceiver", "v6-metadata"),
        refused("NotificationReceiver", "tg"),
        refused("McpAdapter", "metadata-mcp"),
        refused("Workspace", "metadata-git"),
    ];
    let all = poll(Duration::from_secs(40), || async {
        let all = resources(&server).await;
        expected
            .iter()
            .all(|(kind, name)| ready(find(&all, kind, "team-b", name)).1 == "EgressNotAllowed")
            .then_some(all)
    })
    .await
    .map(|(all, _)| all);
    let Some(all) = all else {
        panic!("not every resource was refused: {:#}\nlog:\n{}", resources(&server).await, server.log_text());
    };
    for (kind, name) in expected {
        let (status, _, message) = ready(find(&all, kind, "team-b", name));
        assert_eq!(status, "False", "{kind}/{name}");
        let names_range = message.contains("link-local") || message.contains("metadata");
        assert!(message.contains("egress_allow") && names_range, "{message}");
        assert!(!message.contains("telegram-token-for-team-b"), "{message}");
    }
    // A credential never travels over plain http to a host not named for it.
    for (kind, name) in [("Workspace", "cleartext-git"), ("NotificationReceiver", "cleartext-hook")] {
        let found = poll(Duration::from_secs(20), || async {
            let all = resources(&server).await;
            let (status, reason, message) = ready(find(&all, kind, "team-b", name));
            (reason == "CleartextCredential").then_some((status, message))
        })
        .await;
        let Some(((status, message), _)) = found else {
            panic!("{kind}/{name} was not refused: {:#}", resources(&server).await);
        };
        assert_eq!(status, "False");
        assert!(message.contains("cleartext_credential_hosts") && message.contains("10.96.0."), "{message}");
    }
    for name in ["opened", "cluster-hook"] {
        let check = condition(find(&all, "NotificationReceiver", "team-b", name), "EgressAllowed");
        assert_eq!(check["status"], "True", "{name}: {check}");
    }
}

const DATABASE_PASSWORD: &str = "db-pass-3c9e71f05a";
const OPS_KEY: &str = "ops-key-8b2d4f6a1c";

/// The red team's finding: with `resource_env` at its default (`AKRITAS_*`), a Workspace
/// read `{env: AKRITAS_DATABASE_URL}` as its git token and sent the database URL, password
/// included, to its own git server. The service's own credentials (the database URL, the
/// API keys, the audit key, the upstream key) are never resolved for a resource, whatever
/// `resource_env` says, and their values appear nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_never_reads_the_database_url_or_an_api_key_variable() {
    let database_url = format!("postgres://akritas:{DATABASE_PASSWORD}@db.internal:5432/akritas?sslmode=require");
    let repos = tempfile::tempdir().unwrap();
    bare_repo(repos.path(), "infra", &[("a.txt", "a\n")]);
    // The attacker's git server accepts the database URL as its token.
    let git = GitServer::start(repos.path(), &database_url);
    let work = tempfile::tempdir().unwrap();
    let manifests = format!(
        "apiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {{name: exfiltrate, namespace: default}}\n\
         spec:\n  source:\n    git:\n      url: {}/infra.git\n      ref: main\n      \
         auth: {{username: x, token: {{env: AKRITAS_DATABASE_URL}}}}\n---\n{}{}{}",
        git.url,
        alert_source("default", "database", "AKRITAS_DATABASE_URL"),
        alert_source("default", "ops-key", "AKRITAS_OPS_KEY"),
        alert_source("default", "team", "AKRITAS_TEAM_TOKEN"),
    );
    write(work.path(), "exfiltrate.yaml", &manifests);
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--resources")
        .arg(work.path())
        .args(["--api-key", "default=AKRITAS_API_KEY,ops=AKRITAS_OPS_KEY:read"])
        .env_remove("AKRITAS_RESOURCE_ENV")
        .env("AKRITAS_DATABASE_URL", &database_url)
        .env("AKRITAS_API_KEY", CLIENT_KEY)
        .env("AKRITAS_OPS_KEY", OPS_KEY)
        .env("AKRITAS_TEAM_TOKEN", "team-token-0123456789");
    let server = Server::start(command);
    let all = settled(&server).await;

    for (kind, name, variable) in [
        ("Workspace", "exfiltrate", "AKRITAS_DATABASE_URL"),
        ("AlertSource", "database", "AKRITAS_DATABASE_URL"),
        ("AlertSource", "ops-key", "AKRITAS_OPS_KEY"),
    ] {
        let (status, reason, message) = ready(find(&all, kind, "default", name));
        assert_eq!((status.as_str(), reason.as_str()), ("False", "EnvNotAllowed"), "{kind}/{name}: {message}");
        assert!(
            message.contains(variable) && message.contains("the service's own credential"),
            "{kind}/{name}: the message says why: {message}"
        );
    }
    assert_eq!(ready(find(&all, "AlertSource", "default", "team")).0, "True", "other AKRITAS_* names still resolve");
    assert!(
        git.requests().iter().all(|request| !request.authorization),
        "the git server was sent credentials: {:?}",
        git.requests()
    );
    let health: Value = reqwest::get(format!("{}/health", server.url)).await.unwrap().json().await.unwrap();
    let text = format!("{all}\n{health}\n{}", server.log_text());
    for secret in [database_url.as_str(), DATABASE_PASSWORD, OPS_KEY, CLIENT_KEY] {
        assert!(!text.contains(secret), "{secret} leaked into a status, /health or the log:\n{text}");
    }
}

/// The model server: the operator's own endpoint, which may go through the environment's proxy.
const MODEL_URL: &str = "http://127.0.0.1:9/v1";

/// A stand-in HTTP proxy: records the first line of every connection (`POST
/// http://host/mcp HTTP/1.1`, `CONNECT host:443 HTTP/1.1`) and answers 502.
struct RecordingProxy {
    url: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl RecordingProxy {
    async fn start() -> RecordingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = lines.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut line = Vec::new();
                    let mut byte = [0u8; 1];
                    while !line.ends_with(b"\r\n") && line.len() < 4096 {
                        match stream.read(&mut byte).await {
                            Ok(1) => line.push(byte[0]),
                            _ => break,
                        }
                    }
                    seen.lock().unwrap().push(format!("connection: {}", String::from_utf8_lossy(&line).trim_end()));
                    let answer = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                    let _ = stream.write_all(answer).await;
                });
            }
        });
        RecordingProxy { url, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

/// A stand-in MCP endpoint that counts the requests it receives and refuses each.
async fn counting_endpoint() -> (String, Arc<Mutex<usize>>) {
    let count = Arc::new(Mutex::new(0usize));
    let seen = count.clone();
    let app = axum::Router::new().fallback(move || {
        let seen = seen.clone();
        async move {
            *seen.lock().unwrap() += 1;
            (axum::http::StatusCode::BAD_REQUEST, "not an MCP server")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://localhost:{port}"), count)
}

/// The akritas command with every proxy variable pointing at `proxy`.
fn with_proxy_environment(proxy: &str) -> std::process::Command {
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
        command.env(name, proxy);
    }
    command
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env("AKRITAS_API_KEY", CLIENT_KEY)
        .env("AKRITAS_BASE_URL", MODEL_URL);
    command
}

/// What the proxy carried besides the model server's requests.
fn resource_lines(proxy: &RecordingProxy) -> Vec<String> {
    proxy.lines().into_iter().filter(|line| !line.contains(&format!("{MODEL_URL}/"))).collect()
}

fn manifests(entries: &[(&str, &str, &str)]) -> String {
    entries
        .iter()
        .map(|(kind, name, url)| match *kind {
            "McpAdapter" => format!(
                "apiVersion: akritas.io/v1alpha1\nkind: McpAdapter\nmetadata: {{name: {name}}}\n\
                 spec: {{transport: {{http: {{url: \"{url}\"}}}}, allow: [read]}}\n---\n"
            ),
            "NotificationReceiver" => format!(
                "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {{name: {name}}}\n\
                 spec: {{type: webhook, webhook: {{url: \"{url}\"}}}}\n---\n"
            ),
            _ => format!(
                "apiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {{name: {name}}}\n\
                 spec: {{source: {{git: {{url: \"{url}\", ref: main}}}}}}\n---\n"
            ),
        })
        .collect()
}

/// The red team's finding: with `HTTPS_PROXY` set, reqwest handed resource requests to
/// the proxy, so the connect-time check never saw the destination (and Alibaba's metadata
/// address and the NAT64/6to4 forms of link-local addresses were not refused at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_in_the_environment_never_carries_a_resource_request() {
    let proxy = RecordingProxy::start().await;
    let (endpoint, received) = counting_endpoint().await;
    let repos = tempfile::tempdir().unwrap();
    bare_repo(repos.path(), "infra", &[("a.txt", "a\n")]);
    let git = GitServer::start(repos.path(), "git-token-5d1c8e");
    let work = tempfile::tempdir().unwrap();
    let refused = [
        ("McpAdapter", "alibaba-metadata", "http://100.100.100.200/latest/meta-data/"),
        ("NotificationReceiver", "azure-wireserver", "http://168.63.129.16/machine?comp=goalstate"),
        ("NotificationReceiver", "nat64-metadata", "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/"),
        ("NotificationReceiver", "sixtofour-metadata", "http://[2002:a9fe:a9fe::1]/latest/meta-data/"),
        ("Workspace", "compatible-metadata", "http://[::a9fe:a9fe]/infra.git"),
    ];
    let reached = [
        ("McpAdapter", "direct-mcp", format!("{endpoint}/mcp")),
        ("Workspace", "direct-git", format!("{}/infra.git", git.url)),
    ];
    let reached_entries: Vec<(&str, &str, &str)> = reached.iter().map(|(k, n, u)| (*k, *n, u.as_str())).collect();
    let text = manifests(&refused) + &manifests(&reached_entries);
    std::fs::write(work.path().join("egress.yaml"), text).unwrap();
    let mut command = with_proxy_environment(&proxy.url);
    command.arg("--resources").arg(work.path());
    let server = Server::start(command);

    let all = poll(Duration::from_secs(40), || async {
        let all = resources(&server).await;
        let refused_all =
            refused.iter().all(|(kind, name, _)| ready(find(&all, kind, "default", name)).1 == "EgressNotAllowed");
        let reached_all = *received.lock().unwrap() > 0 && !git.requests().is_empty();
        // The model server is the operator's: it still honours the environment's proxy.
        let model = proxy.lines().iter().any(|line| line.contains(&format!("GET {MODEL_URL}/models")));
        (refused_all && reached_all && model).then_some(all)
    })
    .await
    .map(|(all, _)| all);
    let Some(all) = all else {
        panic!(
            "not every resource was refused or reached directly: {:#}\nproxy saw: {:?}\nlog:\n{}",
            resources(&server).await,
            proxy.lines(),
            server.log_text()
        );
    };
    for (kind, name, url) in refused {
        let (status, _, message) = ready(find(&all, kind, "default", name));
        assert_eq!(status, "False", "{kind}/{name}");
        assert!(message.contains("egress_allow"), "{kind}/{name} ({url}): {message}");
    }
    let (_, _, message) = ready(find(&all, "McpAdapter", "default", "alibaba-metadata"));
    assert!(message.contains("100.100.100.200") && message.contains("metadata"), "{message}");
    let (_, _, message) = ready(find(&all, "NotificationReceiver", "default", "nat64-metadata"));
    assert!(message.contains("NAT64") && message.contains("169.254.169.254"), "{message}");
    let (_, _, message) = ready(find(&all, "NotificationReceiver", "default", "sixtofour-metadata"));
    assert!(message.contains("6to4") && message.contains("169.254.169.254"), "{message}");
    assert_eq!(resource_lines(&proxy), Vec::<String>::new(), "the environment's proxy carried a resource request");
}

/// The proxy an operator names in `egress_proxy` carries resource requests, and only to a
/// destination that was resolved and allowed first: a name that does not resolve here is
/// refused before the proxy sees it, and `HTTP(S)_PROXY` is still ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_proxy_receives_only_destinations_the_policy_resolved_and_allowed() {
    let operator_proxy = RecordingProxy::start().await;
    let environment_proxy = RecordingProxy::start().await;
    let (endpoint, received) = counting_endpoint().await;
    let repos = tempfile::tempdir().unwrap();
    bare_repo(repos.path(), "infra", &[("a.txt", "a\n")]);
    let git = GitServer::start(repos.path(), "git-token-5d1c8e");
    let git_url = format!("{}/infra.git", git.url.replace("127.0.0.1", "localhost"));
    let mcp_url = format!("{endpoint}/mcp");
    let work = tempfile::tempdir().unwrap();
    let text = manifests(&[
        ("McpAdapter", "proxied-mcp", &mcp_url),
        ("Workspace", "proxied-git", &git_url),
        ("McpAdapter", "unresolvable", "http://nowhere.invalid/mcp"),
        ("NotificationReceiver", "metadata", "http://[::ffff:100.100.100.200]/"),
    ]);
    std::fs::write(work.path().join("egress.yaml"), text).unwrap();
    let mut command = with_proxy_environment(&environment_proxy.url);
    command.arg("--resources").arg(work.path()).env("AKRITAS_EGRESS_PROXY", &operator_proxy.url);
    let server = Server::start(command);

    let mcp_line = format!("connection: POST {mcp_url} HTTP/1.1");
    let git_line = format!("connection: GET {git_url}/info/refs?service=git-upload-pack HTTP/1.1");
    let found = poll(Duration::from_secs(40), || async {
        let all = resources(&server).await;
        let lines = operator_proxy.lines();
        let unresolvable = ready(find(&all, "McpAdapter", "default", "unresolvable"));
        let settled = unresolvable.0 == "False" && unresolvable.2.contains("does not resolve");
        (settled && lines.contains(&mcp_line) && lines.contains(&git_line)).then_some((all, unresolvable.2))
    })
    .await;
    let Some(((all, unresolvable), _)) = found else {
        panic!(
            "the operator's proxy did not carry the requests: {:#}\nit saw: {:?}\nlog:\n{}",
            resources(&server).await,
            operator_proxy.lines(),
            server.log_text()
        );
    };
    assert!(unresolvable.contains("nowhere.invalid"), "{unresolvable}");
    let (status, reason, message) = ready(find(&all, "NotificationReceiver", "default", "metadata"));
    assert_eq!((status.as_str(), reason.as_str()), ("False", "EgressNotAllowed"), "{message}");
    assert!(
        operator_proxy.lines().iter().all(|line| !line.contains("nowhere.invalid") && !line.contains("100.100")),
        "the proxy was handed a destination the policy did not allow: {:?}",
        operator_proxy.lines()
    );
    assert_eq!(resource_lines(&environment_proxy), Vec::<String>::new(), "the environment's proxy carried a request");
    assert_eq!(*received.lock().unwrap(), 0, "the request went around the operator's proxy");
    assert!(git.requests().is_empty(), "the git request went around the operator's proxy");
}

fn chain(error: &reqwest::Error) -> String {
    std::iter::successors(Some(error as &dyn std::error::Error), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// The operator's proxy is handed a destination only after the policy resolved it and
/// allowed every address: a name resolving to loopback (operator mode) or a refused
/// literal never reaches it; an allowed one does.
#[tokio::test]
async fn the_operator_proxy_never_receives_a_destination_the_policy_refuses() {
    akritas::install_crypto_provider();
    let proxy = RecordingProxy::start().await;
    let policy = akritas::egress::Egress::new(&["allowed.example".into()], false).with_proxy(Some(&proxy.url));
    let client = akritas::egress::Resolver::with(policy).guard(reqwest::Client::builder()).build().unwrap();
    for (url, expected) in [
        ("http://localhost:9/x", "loopback"),
        ("http://[64:ff9b::a9fe:a9fe]/x", "NAT64"),
        ("http://169.254.169.254/latest/", "link-local"),
        ("http://nowhere.invalid/x", "does not resolve"),
    ] {
        let error = client.get(url).send().await.unwrap_err();
        let chain = chain(&error);
        assert!(chain.contains(expected), "{url}: {chain}");
    }
    assert_eq!(proxy.lines(), Vec::<String>::new(), "the proxy saw a refused destination");
    // A host egress_allow names is not resolved here: the proxy resolves it.
    let answer = client.get("http://allowed.example/hook").send().await.unwrap();
    assert_eq!(answer.status(), 502);
    assert_eq!(proxy.lines(), ["connection: GET http://allowed.example/hook HTTP/1.1"]);
}

/// Without `egress_proxy`, no other proxy is followed (the variables' system proxy, or
/// one set on the builder) and an address literal the policy refuses fails at connect
/// time too, not only when read.
#[tokio::test]
async fn a_guarded_client_never_follows_the_proxy_variables_and_refuses_literals_at_connect() {
    akritas::install_crypto_provider();
    let proxy = RecordingProxy::start().await;
    let environment = reqwest::Proxy::all(&proxy.url).unwrap();
    let client = akritas::egress::Resolver::with(akritas::egress::Egress::new(&[], true))
        .guard(reqwest::Client::builder().proxy(environment));
    let client = client.build().unwrap();
    let error = client.get("http://100.100.100.200/latest/meta-data/").send().await.unwrap_err();
    assert!(chain(&error).contains("Alibaba Cloud's metadata service"), "{}", chain(&error));
    let error = client.get("http://127.0.0.1:9/").send().await.unwrap_err();
    assert!(chain(&error).contains("onnect"), "a direct connection was tried: {}", chain(&error));
    assert_eq!(proxy.lines(), Vec::<String>::new());
}
