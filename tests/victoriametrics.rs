//! End-to-end tests of `akritas mcp victoriametrics`, driven as a real MCP client would (rmcp client over
//! stdio and streamable HTTP), against a real VictoriaMetrics (Debian package `victoria-metrics`) and,
//! for failure modes a real server cannot produce on demand, a small recording axum stub.

use akritas_testkit::vm;

use std::{
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    body::Bytes,
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use rmcp::{
    RoleClient, ServiceExt,
    model::{CallToolRequestParams, CallToolResult},
    service::{RunningService, ServiceError},
    transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess},
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use vm::VictoriaMetrics;

type Client = RunningService<RoleClient, ()>;

const BIN: &str = env!("CARGO_BIN_EXE_akritas");
const TOKEN: &str = "s3cret-token-value";

fn command(args: &[&str]) -> tokio::process::Command {
    tokio::process::Command::new(BIN).configure(|cmd| {
        cmd.args(["mcp", "victoriametrics"]).args(args).env_remove("RUST_LOG").kill_on_drop(true);
    })
}

async fn spawn_stdio(args: &[&str], envs: &[(&str, &str)]) -> Client {
    let mut cmd = command(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let transport = TokioChildProcess::new(cmd).expect("spawn akritas");
    tokio::time::timeout(Duration::from_secs(10), ().serve(transport))
        .await
        .expect("initialize in time")
        .expect("MCP initialize over stdio")
}

/// Spawns with stderr captured; returns the client and a task collecting stderr.
async fn spawn_stdio_capture(args: &[&str], envs: &[(&str, &str)]) -> (Client, tokio::task::JoinHandle<String>) {
    let mut cmd = command(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let (transport, stderr) = TokioChildProcess::builder(cmd).stderr(Stdio::piped()).spawn().expect("spawn akritas");
    let mut stderr = stderr.expect("piped stderr");
    let collector = tokio::spawn(async move {
        let mut out = String::new();
        let _ = stderr.read_to_string(&mut out).await;
        out
    });
    let client = tokio::time::timeout(Duration::from_secs(10), ().serve(transport))
        .await
        .expect("initialize in time")
        .expect("MCP initialize over stdio");
    (client, collector)
}

async fn call(client: &Client, tool: &str, args: Value) -> Result<CallToolResult, ServiceError> {
    let Value::Object(map) = args else { panic!("arguments must be an object") };
    tokio::time::timeout(
        Duration::from_secs(20),
        client.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map)),
    )
    .await
    .expect("tool call did not hang")
}

async fn call_ok(client: &Client, tool: &str, args: Value) -> Value {
    let result = call(client, tool, args.clone()).await.unwrap_or_else(|e| panic!("{tool} {args}: {e}"));
    assert_ne!(result.is_error, Some(true), "{tool} {args} failed: {}", text(&result));
    let structured = result.structured_content.clone().expect("structured content");
    assert_eq!(structured["status"], "success");
    let text_json: Value = serde_json::from_str(&text(&result)).expect("text content is JSON");
    assert_eq!(text_json, structured, "text content mirrors structured content");
    structured
}

/// Calls a tool that must fail; returns the error text (tool error result or protocol error).
async fn call_err(client: &Client, tool: &str, args: Value) -> String {
    match call(client, tool, args.clone()).await {
        Ok(result) => {
            assert_eq!(result.is_error, Some(true), "{tool} {args} unexpectedly succeeded: {}", text(&result));
            text(&result)
        }
        Err(ServiceError::McpError(e)) => e.message.to_string(),
        Err(e) => panic!("{tool} {args}: unexpected transport error {e}"),
    }
}

fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

fn sample_data(now_ms: i64) -> String {
    let mut out = String::new();
    for (i, offset) in [180_000i64, 120_000, 60_000].iter().enumerate() {
        let ts = now_ms - offset;
        let i = i as i64;
        out.push_str(&format!(
            "node_cpu_seconds_total{{instance=\"db-7:9100\",mode=\"idle\",cpu=\"0\"}} {} {ts}\n",
            1234 + i * 10
        ));
        out.push_str(&format!(
            "node_cpu_seconds_total{{instance=\"db-7:9100\",mode=\"user\",cpu=\"0\"}} {} {ts}\n",
            56 + i
        ));
        out.push_str(&format!(
            "node_cpu_seconds_total{{instance=\"web-1:9100\",mode=\"idle\",cpu=\"0\"}} {} {ts}\n",
            999 + i
        ));
        out.push_str(&format!("up{{job=\"node\",instance=\"db-7:9100\"}} 1 {ts}\n"));
        out.push_str(&format!("up{{job=\"node\",instance=\"web-1:9100\"}} 0 {ts}\n"));
    }
    out
}

async fn start_vm_with_data() -> (VictoriaMetrics, i64) {
    let vm = VictoriaMetrics::start().await;
    let now = vm::now_ms();
    vm.import_prometheus(&sample_data(now)).await;
    vm.wait_for_series("node_cpu_seconds_total", 3).await;
    vm.wait_for_series("up", 2).await;
    (vm, now)
}

async fn exercise_tools(client: &Client, now_ms: i64) {
    // tools/list: exactly five read-only tools with strict schemas.
    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(names, ["label_values", "labels", "query", "query_range", "series"]);
    for tool in &tools {
        let ann = tool.annotations.as_ref().expect("annotations");
        assert_eq!(ann.read_only_hint, Some(true), "{} readOnlyHint", tool.name);
        assert_eq!(ann.destructive_hint, Some(false), "{} destructiveHint", tool.name);
        assert_eq!(ann.open_world_hint, Some(true), "{} openWorldHint", tool.name);
        assert_eq!(tool.input_schema.get("additionalProperties"), Some(&Value::Bool(false)), "{}", tool.name);
    }

    // query: the latest sample (now-60s) of the db-7 idle series.
    let v = call_ok(client, "query", json!({"query": "node_cpu_seconds_total{instance=\"db-7:9100\",mode=\"idle\"}"}))
        .await;
    assert_eq!(v["data"]["resultType"], "vector");
    let result = v["data"]["result"].as_array().expect("result array");
    assert_eq!(result.len(), 1, "{v}");
    assert_eq!(result[0]["metric"]["instance"], "db-7:9100");
    assert_eq!(result[0]["value"][1], "1254");

    // query with time/step/timeout: at now-150s the sample from now-180s is the latest.
    let at = format!("{}", (now_ms - 150_000) / 1000);
    let v = call_ok(client, "query", json!({"query": "sum(up)", "time": at, "step": "5m", "timeout": "10s"})).await;
    assert_eq!(v["data"]["result"][0]["value"][1], "1");

    // query_range: three points for db-7 idle.
    let start = format!("{}", (now_ms - 200_000) / 1000);
    let end = format!("{}", now_ms / 1000);
    let v = call_ok(
        client,
        "query_range",
        json!({"query": "node_cpu_seconds_total{instance=\"db-7:9100\",mode=\"idle\"}", "start": start, "end": end, "step": "60s"}),
    )
    .await;
    assert_eq!(v["data"]["resultType"], "matrix");
    let values: Vec<String> = v["data"]["result"][0]["values"]
        .as_array()
        .expect("values")
        .iter()
        .map(|p| p[1].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(values.contains(&"1234".to_owned()) && values.contains(&"1254".to_owned()), "{values:?}");

    // series
    let v =
        call_ok(client, "series", json!({"match": ["node_cpu_seconds_total{mode=\"idle\"}"], "start": start})).await;
    let mut instances: Vec<String> = v["data"]
        .as_array()
        .expect("series data")
        .iter()
        .map(|s| s["instance"].as_str().unwrap_or_default().to_owned())
        .collect();
    instances.sort();
    assert_eq!(instances, ["db-7:9100", "web-1:9100"]);
    let v = call_ok(client, "series", json!({"match": ["node_cpu_seconds_total"], "start": start, "limit": 1})).await;
    assert_eq!(v["data"].as_array().map(Vec::len), Some(1), "limit honoured: {v}");

    // labels
    let v = call_ok(client, "labels", json!({"match": ["up"], "start": start})).await;
    let labels: Vec<&str> = v["data"].as_array().expect("labels").iter().filter_map(Value::as_str).collect();
    assert!(labels.contains(&"job") && labels.contains(&"instance") && !labels.contains(&"mode"), "{labels:?}");
    let v = call_ok(client, "labels", json!({})).await;
    let labels: Vec<&str> = v["data"].as_array().expect("labels").iter().filter_map(Value::as_str).collect();
    assert!(labels.contains(&"mode") && labels.contains(&"cpu"), "{labels:?}");

    // label_values
    let v = call_ok(client, "label_values", json!({"label": "__name__", "start": start})).await;
    let names: Vec<&str> = v["data"].as_array().expect("values").iter().filter_map(Value::as_str).collect();
    assert!(names.contains(&"node_cpu_seconds_total") && names.contains(&"up"), "{names:?}");
    let v = call_ok(client, "label_values", json!({"label": "instance", "match": ["up{job=\"node\"}"]})).await;
    assert_eq!(v["data"], json!(["db-7:9100", "web-1:9100"]));
    let v = call_ok(client, "label_values", json!({"label": "mode", "limit": 1000})).await;
    assert_eq!(v["data"], json!(["idle", "user"]));

    // Bounds and bad arguments.
    let e = call_err(client, "series", json!({"match": []})).await;
    assert!(e.contains("match") && e.contains("at least one"), "{e}");
    let e = call_err(client, "series", json!({"match": ["up"], "limit": 1001})).await;
    assert!(e.contains("limit") && e.contains("1000"), "{e}");
    let e = call_err(client, "labels", json!({"limit": -1})).await;
    assert!(e.contains("limit"), "{e}");
    let e = call_err(client, "series", json!({"match": vec!["up"; 11]})).await;
    assert!(e.contains("match") && e.contains("10"), "{e}");
    let e = call_err(client, "series", json!({"match": ["x".repeat(4097)]})).await;
    assert!(e.contains("match[0]") && e.contains("4096"), "{e}");
    let e = call_err(client, "query", json!({"query": "a".repeat(16 * 1024 + 1)})).await;
    assert!(e.contains("query") && e.contains("16384"), "{e}");
    let e = call_err(client, "query", json!({"query": "   "})).await;
    assert!(e.contains("query") && e.contains("blank"), "{e}");
    let e = call_err(client, "query", json!({"query": "up", "time": "1".repeat(65)})).await;
    assert!(e.contains("time") && e.contains("64"), "{e}");
    let e = call_err(client, "query", json!({"query": "up", "bogus": 1})).await;
    assert!(e.contains("bogus"), "unknown argument named: {e}");
    let e = call_err(client, "query", json!({})).await;
    assert!(e.contains("missing required argument `query`"), "{e}");
    let e = call_err(client, "series", json!({"match": ["up"], "limit": "10"})).await;
    assert!(e.contains("`limit` must be an integer between 0 and 1000"), "{e}");
    let e = call_err(client, "series", json!({"match": "up"})).await;
    assert!(e.contains("`match` must be an array of strings"), "{e}");
    let e = call_err(client, "labels", json!({"match": ["up", 3]})).await;
    assert!(e.contains("`match[1]` must be a string"), "{e}");
    let e = call_err(client, "query", json!({"query": 42})).await;
    assert!(e.contains("`query` must be a string"), "{e}");
    // Explicit nulls for optional arguments mean "not given".
    call_ok(client, "labels", json!({"match": null, "start": null, "end": null, "limit": null})).await;
    let e = call_err(client, "query_range", json!({"query": "up", "start": "", "end": "now", "step": "1m"})).await;
    assert!(e.contains("start"), "{e}");
    let e = call_err(client, "label_values", json!({"label": "../../admin"})).await;
    assert!(e.contains("label") && e.contains("a-zA-Z"), "{e}");

    // A VictoriaMetrics-side error is a tool error with errorType and error.
    let e = call_err(client, "query", json!({"query": "sum(up"})).await;
    assert!(e.starts_with("VictoriaMetrics query failed: "), "{e}");
    assert!(e.contains("422") || e.contains("bad_data") || e.contains("cannot parse"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_server_against_real_victoriametrics() {
    let (vm, now) = start_vm_with_data().await;
    let client = spawn_stdio(&["--base-url", &vm.url()], &[]).await;
    let info = client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().map(|i| i.name.as_str()), Some("akritas-victoriametrics"));
    exercise_tools(&client, now).await;
    client.cancel().await.expect("close client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_server_against_real_victoriametrics() {
    akritas::install_crypto_provider();
    let (vm, now) = start_vm_with_data().await;
    // Path prefix `/prometheus` is served by single-node VictoriaMetrics too.
    let base = format!("{}/prometheus", vm.url());
    let mut child = command(&["--base-url", &base, "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn akritas --listen");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let url = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            if let Some(rest) = line.split("listening on ").nth(1) {
                return rest.trim().to_owned();
            }
        }
        panic!("server exited without printing its address");
    })
    .await
    .expect("server printed its address");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");

    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.expect("MCP initialize over HTTP");
    exercise_tools(&client, now).await;
    client.cancel().await.expect("close client");
    let _ = child.kill().await;
}

/// Started by the host for an McpAdapter, the server gets the host's egress policy: a base
/// URL whose name resolves to a refused address (here `localhost`, in operator mode) is
/// refused when the connection is made, not only when the resource is read.
#[tokio::test]
async fn the_hosts_egress_policy_applies_when_the_child_connects() {
    let (vm, _) = start_vm_with_data().await;
    let port = vm.url().rsplit(':').next().unwrap().trim_end_matches('/').to_string();
    let base = format!("http://localhost:{port}");
    let operator = akritas::egress::Egress::new(&[], false).child_env();
    let client = spawn_stdio(&["--base-url", &base], &[(operator.0.as_str(), operator.1.as_str())]).await;
    let e = call_err(&client, "query", json!({"query": "up"})).await;
    assert!(e.contains("loopback") && e.contains("egress_allow"), "{e}");
    client.cancel().await.expect("close client");
    let allowed = akritas::egress::Egress::new(&["127.0.0.0/8".into(), "::1".into()], false).child_env();
    let client = spawn_stdio(&["--base-url", &base], &[(allowed.0.as_str(), allowed.1.as_str())]).await;
    call_ok(&client, "query", json!({"query": "up"})).await;
    client.cancel().await.expect("close client");
}

#[tokio::test]
async fn unreachable_victoriametrics_is_a_fast_clear_tool_error() {
    let port = akritas_testkit::free_port(); // nothing listens here
    let client = spawn_stdio(&["--base-url", &format!("http://127.0.0.1:{port}"), "--timeout", "20s"], &[]).await;
    let started = Instant::now();
    let e = call_err(&client, "query", json!({"query": "up"})).await;
    assert!(started.elapsed() < Duration::from_secs(6), "took {:?}", started.elapsed());
    assert!(e.contains(&format!("127.0.0.1:{port}")) && e.contains("cannot connect"), "{e}");
    client.cancel().await.expect("close client");
}

#[tokio::test]
async fn hanging_victoriametrics_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket); // accept, never answer
        }
    });
    let client = spawn_stdio(&["--base-url", &format!("http://{addr}"), "--timeout", "1s"], &[]).await;
    let started = Instant::now();
    let e = call_err(&client, "labels", json!({})).await;
    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
    assert!(e.contains(&addr.to_string()) && e.contains("did not answer in time"), "{e}");
    client.cancel().await.expect("close client");
    holder.abort();
}

// ---------------------------------------------------------------------------------------------
// Recording stub for request-shape assertions and failure modes.

#[derive(Debug, Clone)]
struct Recorded {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: String,
}

#[derive(Clone, Default)]
struct Stub {
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Stub {
    async fn start() -> (Self, String) {
        let stub = Stub::default();
        let state = stub.clone();
        let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = state.clone();
            async move { state.handle(method, uri, headers, body) }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind stub");
        let addr = listener.local_addr().expect("stub addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (stub, format!("http://{addr}"))
    }

    fn handle(&self, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
        let path = uri.path().to_owned();
        self.requests.lock().expect("lock").push(Recorded {
            method,
            uri,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
        let ok = json!({"status": "success", "data": {"resultType": "vector", "result": []}});
        match path.split('/').nth(1).unwrap_or_default() {
            "ok" | "select" => axum::Json(ok).into_response(),
            "fail500" => (StatusCode::INTERNAL_SERVER_ERROR, "boom: internal storage failure").into_response(),
            "vmerror" => (
                StatusCode::UNPROCESSABLE_ENTITY,
                axum::Json(json!({"status": "error", "errorType": "bad_data", "error": "cannot parse query"})),
            )
                .into_response(),
            "big" => axum::Json(json!({"status": "success", "data": "x".repeat(10_000)})).into_response(),
            "notjson" => "<html>hello</html>".into_response(),
            "redirect" => (StatusCode::FOUND, [("location", "http://example.invalid/")]).into_response(),
            _ => StatusCode::NOT_FOUND.into_response(),
        }
    }

    fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut *self.requests.lock().expect("lock"))
    }
}

#[tokio::test]
async fn request_shape_query_merge_bearer_and_tenant_headers() {
    let (stub, base) = Stub::start().await;
    let base_url = format!("{base}/select/42/prometheus?extra_label=env%3Dprod&extra_filters[]=%7Bteam%3D%22ops%22%7D");
    let client = spawn_stdio(
        &["--base-url", &base_url, "--bearer-token-env", "VM_TOKEN", "--header", "AccountID=VM_ACCOUNT"],
        &[("VM_TOKEN", TOKEN), ("VM_ACCOUNT", "42")],
    )
    .await;

    call_ok(&client, "query", json!({"query": "rate(x[5m])", "time": "now"})).await;
    call_ok(&client, "series", json!({"match": ["up", "node_load1"], "limit": 5})).await;
    call_ok(&client, "label_values", json!({"label": "job", "match": ["up"], "limit": 3})).await;

    let reqs = stub.take();
    assert_eq!(reqs.len(), 3);
    let paths: Vec<&str> = reqs.iter().map(|r| r.uri.path()).collect();
    assert_eq!(
        paths,
        [
            "/select/42/prometheus/api/v1/query",
            "/select/42/prometheus/api/v1/series",
            "/select/42/prometheus/api/v1/label/job/values"
        ]
    );
    for r in &reqs[..2] {
        assert_eq!(r.method, Method::POST);
        // The base URL's own query string is preserved on every request.
        assert_eq!(r.uri.query(), Some("extra_label=env%3Dprod&extra_filters[]=%7Bteam%3D%22ops%22%7D"), "{}", r.uri);
        assert_eq!(r.headers["content-type"], "application/x-www-form-urlencoded");
    }
    // Label values: a GET with the parameters after the base URL's own (Prometheus refuses a POST).
    assert_eq!(reqs[2].method, Method::GET);
    assert_eq!(
        reqs[2].uri.query(),
        Some("extra_label=env%3Dprod&extra_filters[]=%7Bteam%3D%22ops%22%7D&match%5B%5D=up&limit=3"),
        "{}",
        reqs[2].uri
    );
    assert!(reqs[2].body.is_empty() && !reqs[2].headers.contains_key("content-type"));
    for r in &reqs {
        assert_eq!(r.headers["authorization"], format!("Bearer {TOKEN}"));
        assert_eq!(r.headers["accountid"], "42");
        assert_eq!(r.headers["accept"], "application/json");
    }
    let form = |r: &Recorded| -> Vec<(String, String)> {
        url::form_urlencoded::parse(r.body.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
    };
    assert_eq!(form(&reqs[0]), [("query".to_owned(), "rate(x[5m])".to_owned()), ("time".to_owned(), "now".to_owned())]);
    assert_eq!(
        form(&reqs[1]),
        [
            ("match[]".to_owned(), "up".to_owned()),
            ("match[]".to_owned(), "node_load1".to_owned()),
            ("limit".to_owned(), "5".to_owned())
        ]
    );
    client.cancel().await.expect("close client");
}

#[tokio::test]
async fn basic_auth_is_sent() {
    let (stub, base) = Stub::start().await;
    let client = spawn_stdio(
        &[
            "--base-url",
            &format!("{base}/ok"),
            "--basic-auth-user-env",
            "VM_USER",
            "--basic-auth-password-env",
            "VM_PASS",
        ],
        &[("VM_USER", "reader"), ("VM_PASS", "pw")],
    )
    .await;
    call_ok(&client, "labels", json!({})).await;
    let reqs = stub.take();
    assert_eq!(reqs[0].headers["authorization"], "Basic cmVhZGVyOnB3"); // reader:pw
    client.cancel().await.expect("close client");
}

#[tokio::test]
async fn upstream_failures_are_clear_tool_errors_and_debug_logs_are_safe() {
    let (_stub, base) = Stub::start().await;
    let (client, stderr) = spawn_stdio_capture(
        &["--base-url", &format!("{base}/fail500"), "--debug", "--bearer-token-env", "VM_TOKEN"],
        &[("VM_TOKEN", TOKEN)],
    )
    .await;
    let e = call_err(&client, "query", json!({"query": "up"})).await;
    assert!(e.contains("HTTP 500") && e.contains("boom"), "{e}");
    client.cancel().await.expect("close client");
    let log = tokio::time::timeout(Duration::from_secs(5), stderr).await.expect("stderr closed").expect("collector");
    assert!(log.contains("/fail500/api/v1/query"), "path logged: {log}");
    assert!(log.contains("status=500"), "status logged: {log}");
    assert!(log.contains("duration_ms="), "duration logged: {log}");
    assert!(log.contains("boom: internal storage failure"), "error body excerpt logged: {log}");
    assert!(!log.contains(TOKEN), "credentials never logged: {log}");

    // Each failure mode against its own stub route.
    let cases: [(&str, &[&str], &str); 4] = [
        ("vmerror", &[], "VictoriaMetrics query failed: bad_data: cannot parse query"),
        ("big", &["--max-response-bytes", "2048"], "exceeds the limit of 2048 bytes"),
        ("notjson", &[], "invalid JSON"),
        ("redirect", &[], "redirect"),
    ];
    for (route, extra, expected) in cases {
        let base_url = format!("{base}/{route}");
        let mut args = vec!["--base-url", base_url.as_str()];
        args.extend_from_slice(extra);
        let client = spawn_stdio(&args, &[]).await;
        let e = call_err(&client, "query", json!({"query": "up"})).await;
        assert!(e.contains(expected), "{route}: {e}");
        client.cancel().await.expect("close client");
    }
}

#[tokio::test]
async fn startup_flag_errors_are_clear() {
    async fn fails(args: &[&str], envs: &[(&str, &str)], expected: &str) {
        let mut cmd = command(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(Duration::from_secs(10), cmd.stdin(Stdio::null()).output())
            .await
            .expect("exits quickly")
            .expect("run akritas");
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "nothing on stdout: {:?}", String::from_utf8_lossy(&out.stdout));
    }
    fails(&["--bearer-token-env", "AKRITAS_TEST_UNSET_VAR"], &[], "AKRITAS_TEST_UNSET_VAR is not set").await;
    fails(&["--bearer-token-env", "AKRITAS_TEST_EMPTY"], &[("AKRITAS_TEST_EMPTY", "")], "AKRITAS_TEST_EMPTY is empty")
        .await;
    fails(
        &["--bearer-token-env", "A", "--basic-auth-user-env", "B", "--basic-auth-password-env", "C"],
        &[],
        "cannot be used with",
    )
    .await;
    fails(&["--basic-auth-user-env", "B"], &[], "--basic-auth-password-env").await;
    fails(&["--header", "AccountID"], &[], "NAME=ENV_VAR").await;
    fails(&["--header", "AccountID=AKRITAS_TEST_UNSET_VAR"], &[], "AKRITAS_TEST_UNSET_VAR is not set").await;
    fails(&["--base-url", "ftp://x"], &[], "http or https").await;
    fails(&["--base-url", "http://u:p@x"], &[], "credentials").await;
    fails(&["--max-response-bytes", "10"], &[], "--max-response-bytes").await;
    fails(&["--timeout", "0s"], &[], "greater than zero").await;
}

/// What the adapter needs of a Prometheus-compatible server, against the real Prometheus the
/// tier runs (2.42, Debian's): the five tools read `/api/v1/query`, `query_range`, `series`,
/// `labels` and `label/<name>/values` of a Prometheus as of VictoriaMetrics; a Prometheus older
/// than 2.48 ignores `limit` (docs/tools.md says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_reads_a_real_prometheus() {
    use akritas_testkit::prom::{MetricSwitch, Prometheus};
    let gauge = MetricSwitch::start("akritas_adapter_gauge", 42.0).await;
    // No Alertmanager answers there; the adapter needs none.
    let prometheus = Prometheus::start("http://127.0.0.1:9", Some(&gauge.target()), "groups: []\n").await;
    let client = spawn_stdio(&["--base-url", &prometheus.url()], &[]).await;
    let selector = format!("akritas_adapter_gauge{{instance=\"{}\"}}", gauge.target());
    let deadline = Instant::now() + Duration::from_secs(30);
    let sample = loop {
        let v = call_ok(&client, "query", json!({"query": selector, "timeout": "10s"})).await;
        if let Some(sample) = v["data"]["result"].as_array().and_then(|r| r.first()).cloned() {
            break sample;
        }
        assert!(Instant::now() < deadline, "Prometheus never stored a scrape: {v}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!((sample["metric"]["job"].as_str(), sample["value"][1].as_str()), (Some("target"), Some("42")));

    let now = jiff::Timestamp::now().as_second();
    let (start, end) = ((now - 120).to_string(), (now + 1).to_string());
    let v = call_ok(&client, "query_range", json!({"query": selector, "start": start, "end": end, "step": "1s"})).await;
    assert_eq!(v["data"]["resultType"], "matrix", "{v}");
    let values = v["data"]["result"][0]["values"].as_array().expect("values");
    assert!(!values.is_empty() && values.iter().all(|p| p[1] == "42"), "{v}");

    let v = call_ok(&client, "series", json!({"match": [selector], "start": start})).await;
    assert_eq!(v["data"].as_array().map(Vec::len), Some(1), "{v}");
    let v = call_ok(&client, "labels", json!({"match": ["up"]})).await;
    let labels: Vec<&str> = v["data"].as_array().expect("labels").iter().filter_map(Value::as_str).collect();
    assert!(labels.contains(&"job") && labels.contains(&"instance"), "{labels:?}");
    let v = call_ok(&client, "label_values", json!({"label": "__name__"})).await;
    let names: Vec<&str> = v["data"].as_array().expect("names").iter().filter_map(Value::as_str).collect();
    assert!(names.contains(&"akritas_adapter_gauge") && names.contains(&"up"), "{names:?}");
    let v = call_ok(&client, "label_values", json!({"label": "job", "match": ["up"]})).await;
    assert_eq!(v["data"], json!(["target"]));
    // `limit` is a VictoriaMetrics (and Prometheus 2.48+) parameter: this Prometheus ignores it.
    let v = call_ok(&client, "label_values", json!({"label": "__name__", "limit": 1})).await;
    assert!(v["data"].as_array().map(Vec::len).unwrap_or_default() > 1, "Prometheus 2.42 applied limit: {v}");

    // A query Prometheus refuses is a tool error with its errorType and error.
    let e = call_err(&client, "query", json!({"query": "sum(up"})).await;
    assert!(e.starts_with("VictoriaMetrics query failed: bad_data: "), "{e}");
    client.cancel().await.ok();
}
