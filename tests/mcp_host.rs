//! McpHost against the real `@modelcontextprotocol/server-everything` over stdio and streamable HTTP.

use akritas_testkit::everything;

use std::collections::BTreeSet;
use std::time::Duration;

use akritas::mcp::{AdapterConfig, AdapterPhase, AdapterStatus, Backoff, HostOptions, McpHost, Transport};
use akritas::resources::mcp_adapter::Permission;
use akritas::tools::{AllowAll, ErrorCode, ReadOnlyPolicy, ToolCall, ToolResult};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn options() -> HostOptions {
    HostOptions {
        stop_grace: Duration::from_secs(2),
        reconnect_backoff: Backoff { min: Duration::from_millis(200), max: Duration::from_secs(1) },
        connect_timeout: Duration::from_secs(20),
        ..HostOptions::default()
    }
}

fn stdio(key: &str, namespace: &str, allow: &[Permission], env: Vec<(String, String)>) -> AdapterConfig {
    AdapterConfig {
        key: key.into(),
        namespace: namespace.into(),
        transport: Transport::Stdio {
            command: everything::node().to_string_lossy().into_owned(),
            args: vec![everything::entry().to_string_lossy().into_owned(), "stdio".into()],
            env,
            working_dir: None,
        },
        allow: allow.iter().copied().collect(),
        tools: None,
        call_timeout: Duration::from_secs(10),
        fingerprint: "1".into(),
    }
}

const ALL: &[Permission] = &[Permission::Read, Permission::Write, Permission::Dangerous];

fn status_of(host: &McpHost, key: &str) -> Option<AdapterStatus> {
    host.status().into_iter().find(|s| s.key == key)
}

/// Waits until `pred` holds for the adapter's status.
async fn wait_for(host: &McpHost, key: &str, what: &str, pred: impl Fn(&AdapterStatus) -> bool) -> AdapterStatus {
    let mut changes = host.subscribe();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(status) = status_of(host, key).filter(&pred) {
            return status;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(!left.is_zero(), "timed out waiting for {what}: {:#?}", status_of(host, key));
        let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), changes.changed()).await;
    }
}

async fn connected(host: &McpHost, key: &str) -> AdapterStatus {
    wait_for(host, key, "connected with tools", |s| s.connected && !s.tools.is_empty()).await
}

async fn call(host: &McpHost, name: &str, arguments: Value) -> ToolResult {
    let call = ToolCall { id: "call-1".into(), name: name.into(), arguments: arguments.to_string() };
    host.registry().execute(&call, &AllowAll).await
}

fn output(result: &ToolResult) -> &Value {
    result.output.as_ref().unwrap_or_else(|| panic!("expected output, got {result:?}"))
}

fn first_text(result: &ToolResult) -> String {
    output(result)["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

async fn wait_dead(pid: u32) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while pid_alive(pid) {
        assert!(tokio::time::Instant::now() < deadline, "process {pid} is still alive");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_tools_permissions_and_calls() {
    let host = McpHost::new(options());
    let mut allowlisted = stdio("McpAdapter/t/listed", "listed", ALL, vec![]);
    allowlisted.tools = Some(["echo".to_owned()].into());
    host.reconcile(vec![stdio("McpAdapter/t/ev", "ev", &[Permission::Read], vec![]), allowlisted]).await;
    let status = connected(&host, "McpAdapter/t/ev").await;

    // Permissions come from the server's real annotations.
    let find = |name: &str| status.tools.iter().find(|t| t.remote_name == name).unwrap_or_else(|| panic!("{name}"));
    for read in ["echo", "get-sum", "get-env", "get-resource-reference", "trigger-long-running-operation"] {
        assert_eq!(find(read).permission, Permission::Read, "{read}");
        assert!(find(read).authorized, "{read}");
        assert_eq!(find(read).name, format!("ev.{read}"));
    }
    for write in ["toggle-simulated-logging", "gzip-file-as-resource"] {
        let tool = find(write);
        assert_eq!(tool.permission, Permission::Write, "{write}");
        assert!(!tool.authorized);
        assert!(tool.reason.as_deref().unwrap_or_default().contains("write"), "{tool:?}");
    }

    // allow=[read]: only read tools reach the registry.
    let registry = host.registry();
    let authorized: BTreeSet<String> = status.tools.iter().filter(|t| t.authorized).map(|t| t.name.clone()).collect();
    let ev_tools: BTreeSet<String> =
        registry.definitions().iter().map(|s| s.name.to_string()).filter(|n| n.starts_with("ev.")).collect();
    assert_eq!(ev_tools, authorized);
    assert!(registry.definitions().iter().all(|s| s.permission == Permission::Read));
    assert_eq!(registry.filter(&ReadOnlyPolicy).len(), registry.len());

    // An explicit allowlist keeps only the named tools even when every permission is allowed.
    let listed = connected(&host, "McpAdapter/t/listed").await;
    let names: Vec<&str> = listed.tools.iter().filter(|t| t.authorized).map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["listed.echo"]);
    let sum = listed.tools.iter().find(|t| t.remote_name == "get-sum").unwrap();
    assert!(sum.reason.as_deref().unwrap_or_default().contains("allowlist"));
    assert!(host.registry().get("listed.get-sum").is_none());

    // Authorized calls return the real output.
    let echo = call(&host, "ev.echo", serde_json::json!({"message": "hello"})).await;
    assert_eq!(first_text(&echo), "Echo: hello");
    assert_eq!(output(&echo)["isError"], false);
    let sum = call(&host, "ev.get-sum", serde_json::json!({"a": 2, "b": 40})).await;
    assert!(first_text(&sum).contains("is 42"), "{sum:?}");
    let by_alias = host.registry().alias_of("ev.echo").unwrap();
    let echo = call(&host, &by_alias, serde_json::json!({"message": "alias"})).await;
    assert_eq!(first_text(&echo), "Echo: alias");

    // Not authorized → not registered → unknown_tool.
    let denied = call(&host, "ev.toggle-simulated-logging", serde_json::json!({})).await;
    assert_eq!(denied.error.map(|e| e.code), Some(ErrorCode::UnknownTool));

    // Schema violations stop before the remote call.
    let bad = call(&host, "ev.get-sum", serde_json::json!({"a": "two", "b": 1})).await;
    assert_eq!(bad.error.as_ref().map(|e| e.code), Some(ErrorCode::InvalidArguments), "{bad:?}");

    // A result the server marks `isError` is a failed call (never evidence); its text is kept.
    let failed =
        call(&host, "ev.get-resource-reference", serde_json::json!({"resourceType": "Text", "resourceId": 0})).await;
    let error = failed.error.as_ref().unwrap_or_else(|| panic!("an isError result is a failed call: {failed:?}"));
    assert_eq!(error.code, ErrorCode::ToolError);
    assert!(error.message.contains("reported an error") && error.message.contains("resourceId"), "{failed:?}");
    assert!(failed.output.is_none());

    // The adapter's call timeout is a clean tool_error, and the session survives it.
    let mut slow = stdio("McpAdapter/t/slow", "slow", &[Permission::Read], vec![]);
    slow.call_timeout = Duration::from_millis(500);
    host.reconcile(vec![stdio("McpAdapter/t/ev", "ev", &[Permission::Read], vec![]), slow]).await;
    connected(&host, "McpAdapter/t/slow").await;
    assert!(status_of(&host, "McpAdapter/t/listed").is_none(), "removed adapter is gone");
    assert!(host.registry().get("listed.echo").is_none());
    let timed_out =
        call(&host, "slow.trigger-long-running-operation", serde_json::json!({"duration": 5, "steps": 1})).await;
    let error = timed_out.error.unwrap_or_else(|| panic!("expected a timeout"));
    assert_eq!(error.code, ErrorCode::ToolError);
    assert!(error.message.contains("did not answer"), "{}", error.message);
    let echo = call(&host, "slow.echo", serde_json::json!({"message": "still here"})).await;
    assert_eq!(first_text(&echo), "Echo: still here");

    host.shutdown().await;
    assert!(host.status().is_empty());
    assert!(host.registry().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_environment_is_minimal() {
    // SAFETY: test-only; this test is the only one reading or writing this variable.
    unsafe { std::env::set_var("AKRITAS_TEST_HOST_ONLY_SECRET", "host-secret-value") };
    let host = McpHost::new(options());
    let env = vec![("ADAPTER_TOKEN".to_owned(), "adapter-secret-value".to_owned())];
    host.reconcile(vec![stdio("McpAdapter/t/env", "env", ALL, env)]).await;
    connected(&host, "McpAdapter/t/env").await;

    let result = call(&host, "env.get-env", serde_json::json!({})).await;
    let child_env: Value = serde_json::from_str(&first_text(&result)).unwrap();
    let child_env = child_env.as_object().unwrap();
    assert_eq!(child_env.get("ADAPTER_TOKEN").and_then(Value::as_str), Some("adapter-secret-value"));
    assert!(child_env.contains_key("PATH"), "{child_env:?}");
    assert!(!child_env.contains_key("AKRITAS_TEST_HOST_ONLY_SECRET"), "host secret leaked: {child_env:?}");
    assert!(!child_env.contains_key("CARGO_MANIFEST_DIR"), "host variable leaked: {child_env:?}");
    let allowed: BTreeSet<&str> = ["PATH", "HOME", "LANG", "TZ", "TMPDIR", "ADAPTER_TOKEN"].into();
    // Node itself may add nothing but what we passed; allow only our names.
    for name in child_env.keys() {
        assert!(allowed.contains(name.as_str()), "unexpected child variable {name}");
    }

    // A command that cannot start: a clean error naming the command, never the env values.
    let mut broken =
        stdio("McpAdapter/t/broken", "broken", ALL, vec![("ADAPTER_TOKEN".into(), "adapter-secret-value".into())]);
    if let Transport::Stdio { command, .. } = &mut broken.transport {
        *command = "/nonexistent/akritas-mcp-server".into();
    }
    host.reconcile(vec![
        stdio("McpAdapter/t/env", "env", ALL, vec![("ADAPTER_TOKEN".to_owned(), "adapter-secret-value".to_owned())]),
        broken,
    ])
    .await;
    let failed = wait_for(&host, "McpAdapter/t/broken", "a start failure", |s| s.last_error.is_some()).await;
    assert!(!failed.connected && failed.tools.is_empty());
    assert!(failed.last_error.as_deref().unwrap_or_default().contains("cannot start"), "{failed:?}");
    assert!(status_of(&host, "McpAdapter/t/env").is_some_and(|s| s.connected), "unchanged adapter kept");

    // Secrets never show in status or debug output.
    let status = serde_json::to_string(&host.status()).unwrap();
    assert!(!status.contains("adapter-secret-value"));
    assert!(!format!("{host:?}").contains("adapter-secret-value"));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_child_is_reported_and_replaced() {
    let host = McpHost::new(options());
    let key = "McpAdapter/t/kill";
    host.reconcile(vec![stdio(key, "k", &[Permission::Read], vec![])]).await;
    let first = connected(&host, key).await;
    let pid = first.pid.unwrap();
    assert_eq!(host.child_pid(key), Some(pid));
    let snapshot = host.registry();

    // SAFETY: kill(2) on the adapter's child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
    let call_1 = ToolCall { id: "c1".into(), name: "k.echo".into(), arguments: r#"{"message":"x"}"#.into() };
    let during = snapshot.execute(&call_1, &AllowAll).await;
    // The transport failure or the supervisor's "not connected": either way a clean tool error.
    assert_eq!(during.error.as_ref().map(|e| e.code), Some(ErrorCode::ToolError), "{during:?}");
    let down = wait_for(&host, key, "the failure", |s| s.last_error.is_some()).await;
    assert_ne!(down.phase, AdapterPhase::Connected);
    assert!(down.last_error.as_deref().unwrap_or_default().len() < 2048);

    let again = wait_for(&host, key, "a new child", |s| s.connected && s.pid.is_some() && s.pid != Some(pid)).await;
    assert!(again.last_error.is_none());
    assert_eq!(again.phase, AdapterPhase::Connected);
    // The old registry snapshot reaches the new session.
    let after = snapshot.execute(&call_1, &AllowAll).await;
    assert_eq!(first_text(&after), "Echo: x");
    host.shutdown().await;
    wait_dead(again.pid.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_keeps_restarts_and_stops() {
    let host = McpHost::new(options());
    let key = "McpAdapter/t/rec";
    let config = stdio(key, "rec", &[Permission::Read], vec![]);
    host.reconcile(vec![config.clone()]).await;
    let pid = connected(&host, key).await.pid.unwrap();

    // Same fingerprint: the session (and child) stays.
    host.reconcile(vec![config.clone()]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let same = status_of(&host, key).unwrap();
    assert!(same.connected);
    assert_eq!(same.pid, Some(pid));

    // Changed fingerprint: restart with a new child; the old one is gone.
    let mut changed = config.clone();
    changed.fingerprint = "2".into();
    changed.namespace = "rec2".into();
    host.reconcile(vec![changed]).await;
    let restarted = wait_for(&host, key, "restart", |s| s.connected && s.pid.is_some() && s.pid != Some(pid)).await;
    wait_dead(pid).await;
    assert!(restarted.tools.iter().all(|t| t.name.starts_with("rec2.")));
    assert!(host.registry().get("rec.echo").is_none());
    let echo = call(&host, "rec2.echo", serde_json::json!({"message": "new"})).await;
    assert_eq!(first_text(&echo), "Echo: new");

    // Removed: the child stops and its tools leave the registry.
    host.reconcile(vec![]).await;
    assert!(host.status().is_empty());
    assert!(host.registry().is_empty());
    wait_dead(restarted.pid.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_transport() {
    akritas::install_crypto_provider();
    let port = akritas_testkit::free_port();
    let server = everything::HttpServer::start(port).await;
    let host = McpHost::new(options());
    let key = "McpAdapter/t/http";
    let config = AdapterConfig {
        key: key.into(),
        namespace: "web".into(),
        transport: Transport::Http {
            url: server.url(),
            headers: vec![("X-Akritas-Token".into(), "http-secret-value".into())],
        },
        allow: [Permission::Read].into(),
        tools: None,
        call_timeout: Duration::from_secs(10),
        fingerprint: "1".into(),
    };
    host.reconcile(vec![config]).await;
    let status = connected(&host, key).await;
    assert_eq!(status.pid, None);
    let echo = status.tools.iter().find(|t| t.remote_name == "echo").unwrap();
    assert!(echo.authorized && echo.permission == Permission::Read);
    assert!(status.tools.iter().any(|t| t.permission == Permission::Write && !t.authorized));

    let result = call(&host, "web.echo", serde_json::json!({"message": "over http"})).await;
    assert_eq!(first_text(&result), "Echo: over http");
    let sum = call(&host, "web.get-sum", serde_json::json!({"a": 1, "b": 2})).await;
    assert!(first_text(&sum).contains("is 3"), "{sum:?}");

    // The peer goes away: calls fail cleanly and the failure is recorded; it comes back: calls work.
    server.stop().await;
    let failed = call(&host, "web.echo", serde_json::json!({"message": "nobody"})).await;
    assert_eq!(failed.error.as_ref().map(|e| e.code), Some(ErrorCode::ToolError), "{failed:?}");
    let down = wait_for(&host, key, "the failure", |s| !s.connected && s.last_error.is_some()).await;
    let text = serde_json::to_string(&down).unwrap();
    assert!(!text.contains("http-secret-value"), "{text}");

    let server = everything::HttpServer::start(port).await;
    connected(&host, key).await;
    let result = call(&host, "web.echo", serde_json::json!({"message": "back"})).await;
    assert_eq!(first_text(&result), "Echo: back");
    host.shutdown().await;
    server.stop().await;
}

/// Serves `app` on a free loopback port; returns its base URL.
async fn serve_app(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_redirects_are_not_followed_and_headers_never_reach_the_target() {
    use axum::http::{HeaderMap, StatusCode, header::LOCATION};
    use std::sync::{Arc, Mutex};

    let reached: Arc<Mutex<Vec<String>>> = Arc::default();
    let target = {
        let reached = reached.clone();
        serve_app(axum::Router::new().fallback(move |headers: HeaderMap| {
            let reached = reached.clone();
            async move {
                reached.lock().unwrap().push(format!("{headers:?}"));
                StatusCode::NOT_FOUND
            }
        }))
        .await
    };
    let location = format!("{target}/mcp");
    let redirecting = serve_app(axum::Router::new().fallback(move || {
        let location = location.clone();
        async move { (StatusCode::TEMPORARY_REDIRECT, [(LOCATION, location)]) }
    }))
    .await;
    let key = "McpAdapter/t/redirect";
    let config = AdapterConfig {
        key: key.into(),
        namespace: "redirect".into(),
        transport: Transport::Http {
            url: format!("{redirecting}/mcp"),
            headers: vec![("X-Secret-Token".into(), "hdr-token-0123456789".into())],
        },
        allow: [Permission::Read].into(),
        tools: None,
        call_timeout: Duration::from_secs(5),
        fingerprint: "1".into(),
    };
    let host = McpHost::new(options());
    host.reconcile(vec![config]).await;
    let status = wait_for(&host, key, "a failed connection", |s| s.phase == AdapterPhase::Retrying).await;
    let error = status.last_error.unwrap_or_default();
    assert!(error.contains("307") && error.contains("redirects are not followed"), "{error}");
    assert!(reached.lock().unwrap().is_empty(), "the redirect was followed: {:?}", reached.lock().unwrap());
    host.shutdown().await;
}
