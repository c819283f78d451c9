use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::resources::mcp_adapter::Permission;

fn name(s: &str) -> ToolName {
    s.parse().unwrap()
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": { "namespace": { "type": "string" }, "limit": { "type": "integer", "minimum": 1 } },
        "required": ["namespace"],
        "additionalProperties": false
    })
}

fn spec(n: &str, permission: Permission) -> ToolSpec {
    ToolSpec::new(name(n), format!("{n} tool"), permission, schema())
}

/// Handler returning a fixed result, counting its calls.
fn fixed(result: Result<&str, &str>, counter: &Arc<AtomicUsize>) -> Arc<dyn ToolHandler> {
    let result = result.map(str::to_owned).map_err(str::to_owned);
    let counter = Arc::clone(counter);
    Arc::new(move |_args: Value| -> ToolFuture {
        counter.fetch_add(1, Ordering::SeqCst);
        let result = result.clone();
        Box::pin(async move { result })
    })
}

/// Handler echoing its arguments.
fn echo(counter: &Arc<AtomicUsize>) -> Arc<dyn ToolHandler> {
    let counter = Arc::clone(counter);
    Arc::new(move |args: Value| -> ToolFuture {
        counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(args.to_string()) })
    })
}

fn registry(tools: Vec<(ToolSpec, Arc<dyn ToolHandler>)>) -> Registry {
    let mut b = RegistryBuilder::new(ToolLimits::default());
    for (s, h) in tools {
        b.register(s, h).unwrap();
    }
    b.build()
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() }
}

const GOOD_ARGS: &str = r#"{"namespace":"default"}"#;

fn code(r: &ToolResult) -> Option<ErrorCode> {
    r.error.as_ref().map(|e| e.code)
}

// ---- names ----

#[test]
fn tool_name_parsing() {
    for ok in ["a", "k8s.get_pods", "A-b_c.d", "0", &"x".repeat(128)] {
        assert_eq!(ok.parse::<ToolName>().unwrap().as_str(), ok);
    }
    for bad in ["", ".a", "_a", "-a", "a b", "a/b", "é", "a:b", &"x".repeat(129)] {
        assert!(matches!(bad.parse::<ToolName>(), Err(RegistryError::InvalidName { .. })), "{bad:?}");
    }
    assert_eq!(serde_json::to_string(&name("x.y")).unwrap(), r#""x.y""#);
    assert_eq!(serde_json::from_str::<ToolName>(r#""x.y""#).unwrap(), name("x.y"));
    assert!(serde_json::from_str::<ToolName>(r#""x y""#).is_err());
    assert_eq!(serde_json::to_string(&Permission::Dangerous).unwrap(), r#""dangerous""#);
}

// ---- execute: one test per error code, handler never runs for codes 1-4 ----

#[tokio::test]
async fn invalid_call() {
    let n = Arc::new(AtomicUsize::new(0));
    let r = registry(vec![(spec("x.y", Permission::Read), echo(&n))]);
    let too_big = format!(r#"{{"namespace":"{}"}}"#, "a".repeat(64 * 1024));
    let cases = [
        call("", "x.y", GOOD_ARGS),
        call("c 1", "x.y", GOOD_ARGS),
        call("c/1", "x.y", GOOD_ARGS),
        call(&"c".repeat(129), "x.y", GOOD_ARGS),
        call("c1", "", GOOD_ARGS),
        call("c1", "x.y", "not json"),
        call("c1", "x.y", "[1]"),
        call("c1", "x.y", "\"s\""),
        call("c1", "x.y", "null"),
        call("c1", "x.y", &too_big),
    ];
    for c in &cases {
        let res = r.execute(c, &AllowAll).await;
        assert_eq!(code(&res), Some(ErrorCode::InvalidCall), "{:?}", &c.arguments[..c.arguments.len().min(40)]);
    }
    assert_eq!(n.load(Ordering::SeqCst), 0);
    // Boundaries that are fine.
    let res = r.execute(&call(&"c".repeat(128), "x.y", GOOD_ARGS), &AllowAll).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn empty_arguments_count_as_empty_object() {
    let n = Arc::new(AtomicUsize::new(0));
    let s = ToolSpec::new(name("noargs"), "d", Permission::Read, json!({"type": "object"}));
    let r = registry(vec![(s, echo(&n))]);
    let res = r.execute(&call("c1", "noargs", ""), &AllowAll).await;
    assert_eq!(res.output, Some(json!({})));
    // With a required property, "" is {} and fails the schema rather than the call shape.
    let r = registry(vec![(spec("x.y", Permission::Read), echo(&n))]);
    let res = r.execute(&call("c1", "x.y", ""), &AllowAll).await;
    assert_eq!(code(&res), Some(ErrorCode::InvalidArguments));
}

#[tokio::test]
async fn unknown_tool() {
    let n = Arc::new(AtomicUsize::new(0));
    let r = registry(vec![(spec("x.y", Permission::Read), echo(&n))]);
    for unknown in ["x.z", "X.Y", "akritas_x_y", "akritas_x_y_00000000"] {
        let res = r.execute(&call("c1", unknown, GOOD_ARGS), &AllowAll).await;
        assert_eq!(code(&res), Some(ErrorCode::UnknownTool));
        assert_eq!(res.name, unknown);
    }
    // Invalid call wins over unknown tool.
    let res = r.execute(&call("c1", "nope", "[]"), &AllowAll).await;
    assert_eq!(code(&res), Some(ErrorCode::InvalidCall));
    assert_eq!(n.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn permission_denied() {
    let n = Arc::new(AtomicUsize::new(0));
    let r = registry(vec![(spec("k8s.delete_pod", Permission::Write), echo(&n))]);
    let res = r.execute(&call("c1", "k8s.delete_pod", GOOD_ARGS), &ReadOnlyPolicy).await;
    assert_eq!(code(&res), Some(ErrorCode::PermissionDenied));
    assert!(res.error.as_ref().unwrap().message.contains("not authorized for this Run"));
    assert_eq!(res.name, "k8s.delete_pod");
    let res = r.execute(&call("c1", "k8s.delete_pod", GOOD_ARGS), &DenyAll).await;
    assert_eq!(code(&res), Some(ErrorCode::PermissionDenied));
    // Policy is checked before the schema.
    let res = r.execute(&call("c1", "k8s.delete_pod", r#"{"bad":1}"#), &ReadOnlyPolicy).await;
    assert_eq!(code(&res), Some(ErrorCode::PermissionDenied));
    assert_eq!(n.load(Ordering::SeqCst), 0);
    // The same call is allowed by a policy that allows it.
    let res = r.execute(&call("c1", "k8s.delete_pod", GOOD_ARGS), &PermissionPolicy([Permission::Write].into())).await;
    assert!(res.is_ok());
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn invalid_arguments() {
    let n = Arc::new(AtomicUsize::new(0));
    let r = registry(vec![(spec("x.y", Permission::Read), echo(&n))]);
    let res = r.execute(&call("c1", "x.y", r#"{"namespace":"d","limit":"ten"}"#), &AllowAll).await;
    assert_eq!(code(&res), Some(ErrorCode::InvalidArguments));
    let msg = &res.error.as_ref().unwrap().message;
    assert!(msg.contains("/limit"), "{msg}");
    for args in [r#"{}"#, r#"{"namespace":1}"#, r#"{"namespace":"d","extra":true}"#, r#"{"namespace":"d","limit":0}"#] {
        let res = r.execute(&call("c1", "x.y", args), &AllowAll).await;
        assert_eq!(code(&res), Some(ErrorCode::InvalidArguments), "{args}");
    }
    // Many violations with huge values: the message stays bounded.
    let wide = json!({"type": "object", "additionalProperties": {"type": "integer"}});
    let r2 = registry(vec![(ToolSpec::new(name("w"), "d", Permission::Read, wide), echo(&n))]);
    let args: serde_json::Map<String, Value> = (0..50).map(|i| (format!("k{i}"), json!("v".repeat(500)))).collect();
    let res = r2.execute(&call("c1", "w", &Value::Object(args).to_string()), &AllowAll).await;
    assert_eq!(code(&res), Some(ErrorCode::InvalidArguments));
    assert!(res.error.as_ref().unwrap().message.len() <= 1024);
    assert_eq!(n.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn tool_error_is_bounded() {
    let n = Arc::new(AtomicUsize::new(0));
    let long = "e".repeat(10_000);
    let r = registry(vec![
        (spec("fails", Permission::Read), fixed(Err("pods is forbidden"), &n)),
        (spec("fails.long", Permission::Read), fixed(Err(&long), &n)),
    ]);
    let res = r.execute(&call("c1", "fails", GOOD_ARGS), &AllowAll).await;
    assert_eq!(res.error, Some(ToolError { code: ErrorCode::ToolError, message: "pods is forbidden".into() }));
    let res = r.execute(&call("c1", "fails.long", GOOD_ARGS), &AllowAll).await;
    assert_eq!(code(&res), Some(ErrorCode::ToolError));
    assert!(res.error.as_ref().unwrap().message.len() <= 4096);
    assert_eq!(n.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn panicking_handler_is_a_tool_error() {
    let h: Arc<dyn ToolHandler> = Arc::new(|_args: Value| -> ToolFuture { Box::pin(async { panic!("boom") }) });
    let r = registry(vec![(spec("p", Permission::Read), h)]);
    let res = r.execute(&call("c1", "p", GOOD_ARGS), &AllowAll).await;
    assert_eq!(code(&res), Some(ErrorCode::ToolError));
}

#[tokio::test]
async fn timeout() {
    let finished = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&finished);
    let h: Arc<dyn ToolHandler> = Arc::new(move |_args: Value| -> ToolFuture {
        let f = Arc::clone(&f);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            f.fetch_add(1, Ordering::SeqCst);
            Ok("{}".to_owned())
        })
    });
    let s = spec("slow", Permission::Read).with_timeout(Duration::from_millis(50));
    let r = registry(vec![(s, h)]);
    let start = Instant::now();
    let res = r.execute(&call("c1", "slow", GOOD_ARGS), &AllowAll).await;
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(code(&res), Some(ErrorCode::Timeout));
    assert!(res.error.as_ref().unwrap().message.contains("50ms"));
    assert!(res.duration >= Duration::from_millis(50));
    assert_eq!(finished.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn result_limits() {
    let n = Arc::new(AtomicUsize::new(0));
    let big = format!("\"{}\"", "a".repeat(300 * 1024));
    let exact = format!("\"{}\"", "a".repeat(256 * 1024 - 2));
    let r = registry(vec![
        (spec("big", Permission::Read), fixed(Ok(&big), &n)),
        (spec("exact", Permission::Read), fixed(Ok(&exact), &n)),
        (spec("empty", Permission::Read), fixed(Ok(""), &n)),
        (spec("blank", Permission::Read), fixed(Ok("  \n"), &n)),
        (spec("notjson", Permission::Read), fixed(Ok("not json"), &n)),
        (spec("good", Permission::Read), fixed(Ok(r#"{"pods":[]}"#), &n)),
    ]);
    let run = |t: &'static str| {
        let r = r.clone();
        async move { r.execute(&call("c1", t, GOOD_ARGS), &AllowAll).await }
    };
    assert_eq!(code(&run("big").await), Some(ErrorCode::ResultTooLarge));
    assert!(run("exact").await.is_ok());
    assert_eq!(code(&run("empty").await), Some(ErrorCode::InvalidResult));
    assert_eq!(code(&run("blank").await), Some(ErrorCode::InvalidResult));
    assert_eq!(code(&run("notjson").await), Some(ErrorCode::InvalidResult));
    let good = run("good").await;
    assert_eq!(good.output, Some(json!({"pods": []})));
    assert_eq!(good.status(), "ok");
}

// ---- aliases ----

#[test]
fn alias_contract() {
    assert_eq!(
        openai_alias(&name("local.investigation.submit_plan")),
        "akritas_local_investigation_submit_plan_175a114e"
    );
}

#[test]
fn aliases_are_distinct_bounded_and_round_trip() {
    let pattern = regex::Regex::new("^[A-Za-z0-9_-]{1,64}$").unwrap();
    let long = "x".repeat(128);
    let mut names: Vec<String> =
        vec![long.clone(), format!("{}y", &long[..127]), "a.b".into(), "a_b".into(), "a-b".into()];
    names.extend((0..300).map(|i| format!("mcp.server{}.some_really_long_tool_name_that_goes_on.{i}", i % 7)));
    let mut b = RegistryBuilder::new(ToolLimits::default());
    let n = Arc::new(AtomicUsize::new(0));
    for s in &names {
        b.register(ToolSpec::new(name(s), "d", Permission::Read, json!({"type": "object"})), echo(&n)).unwrap();
    }
    let r = b.build();
    let mut seen = BTreeSet::new();
    for s in &names {
        let alias = r.alias(&name(s));
        assert!(pattern.is_match(&alias), "{alias}");
        assert!(alias.len() <= 64);
        assert!(seen.insert(alias.clone()), "duplicate alias {alias}");
        assert_eq!(r.resolve_alias(&alias), Some(&name(s)));
    }
    assert_eq!(r.resolve_alias("a.b"), None);
}

#[tokio::test]
async fn call_by_alias_reports_host_name() {
    let n = Arc::new(AtomicUsize::new(0));
    let r = registry(vec![(spec("local.investigation.submit_plan", Permission::Read), echo(&n))]);
    let res =
        r.execute(&call("call_1", "akritas_local_investigation_submit_plan_175a114e", GOOD_ARGS), &AllowAll).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(res.name, "local.investigation.submit_plan");
    assert_eq!(res.output, Some(json!({"namespace": "default"})));
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

#[test]
fn openai_definitions_shape() {
    let n = Arc::new(AtomicUsize::new(0));
    let r = registry(vec![(spec("b.tool", Permission::Read), echo(&n)), (spec("a.tool", Permission::Write), echo(&n))]);
    let defs = r.openai_definitions();
    assert_eq!(defs.len(), 2);
    assert_eq!(
        defs[0],
        json!({"type": "function", "function": {
            "name": r.alias(&name("a.tool")),
            "description": "a.tool tool (Akritas tool: a.tool)",
            "parameters": schema(),
        }})
    );
    assert_eq!(defs[1]["function"]["name"], r.alias(&name("b.tool")));
}

// ---- registry building and derivation ----

#[test]
fn definitions_sorted() {
    let n = Arc::new(AtomicUsize::new(0));
    let r = registry(vec![
        (spec("zeta", Permission::Read), echo(&n)),
        (spec("Alpha", Permission::Read), echo(&n)),
        (spec("mid.x", Permission::Read), echo(&n)),
        (spec("alpha", Permission::Read), echo(&n)),
    ]);
    let names: Vec<&str> = r.definitions().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Alpha", "alpha", "mid.x", "zeta"]);
    assert_eq!(r.len(), 4);
    assert!(!r.is_empty());
    assert_eq!(r.get("mid.x").map(|s| s.permission), Some(Permission::Read));
    assert!(r.get("nope").is_none());
}

#[test]
fn registration_errors() {
    let n = Arc::new(AtomicUsize::new(0));
    let mut b = RegistryBuilder::new(ToolLimits::default());
    b.register(spec("x.y", Permission::Read), echo(&n)).unwrap();
    assert!(matches!(b.register(spec("x.y", Permission::Write), echo(&n)), Err(RegistryError::Duplicate { .. })));

    let with = |f: &dyn Fn(&mut ToolSpec)| {
        let mut s = spec("t", Permission::Read);
        f(&mut s);
        RegistryBuilder::new(ToolLimits::default()).register(s, echo(&n))
    };
    assert!(matches!(with(&|s| s.description = "  ".into()), Err(RegistryError::EmptyDescription { .. })));
    assert!(matches!(with(&|s| s.description = "é".repeat(1025)), Err(RegistryError::DescriptionTooLong { .. })));
    assert!(with(&|s| s.description = "é".repeat(1024)).is_ok());
    assert!(matches!(with(&|s| s.timeout = Duration::ZERO), Err(RegistryError::ZeroTimeout { .. })));
    for bad in [json!(true), json!([]), json!({}), json!({"type": "string"})] {
        assert!(matches!(with(&|s| s.input_schema = bad.clone()), Err(RegistryError::SchemaNotObject { .. })), "{bad}");
    }
    let err = with(&|s| s.input_schema = json!({"type": "object", "properties": {"a": {"type": "nonsense"}}}));
    let Err(RegistryError::InvalidSchema { reason, .. }) = err else { panic!("{err:?}") };
    assert!(!reason.is_empty());
    assert!(matches!(
        with(&|s| s.input_schema = json!({"type": "object", "properties": {"a": {"pattern": "("}}})),
        Err(RegistryError::InvalidSchema { .. })
    ));
    // Remote references are never fetched: they fail at registration.
    assert!(matches!(
        with(&|s| s.input_schema = json!({"type": "object", "$ref": "https://example.invalid/schema.json"})),
        Err(RegistryError::InvalidSchema { .. })
    ));
}

#[test]
fn filter_without_merge() {
    let n = Arc::new(AtomicUsize::new(0));
    let r = registry(vec![
        (spec("k8s.get", Permission::Read), echo(&n)),
        (spec("k8s.apply", Permission::Write), echo(&n)),
        (spec("k8s.drain", Permission::Dangerous), echo(&n)),
    ]);
    let ro = r.filter(&ReadOnlyPolicy);
    assert_eq!(ro.definitions().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["k8s.get"]);
    assert!(ro.resolve_alias(&r.alias(&name("k8s.apply"))).is_none());
    assert!(r.filter(&DenyAll).is_empty());
    let named = r.filter(&NamedPolicy([name("k8s.drain")].into()));
    assert_eq!(named.len(), 1);
    assert!(named.get("k8s.drain").is_some());
    let w = r.filter(&PermissionPolicy([Permission::Write, Permission::Dangerous].into()));
    assert_eq!(w.len(), 2);

    let rest = r.without(&["k8s.get", "absent"]);
    assert_eq!(rest.len(), 2);
    assert!(rest.get("k8s.get").is_none());

    let merged = ro.merge(&rest).unwrap();
    assert_eq!(merged.len(), 3);
    assert!(merged.resolve_alias(&r.alias(&name("k8s.apply"))).is_some());
    assert!(matches!(r.merge(&ro), Err(RegistryError::Duplicate { .. })));
    // Derived registries leave the original untouched.
    assert_eq!(r.len(), 3);
}

#[tokio::test]
async fn filtered_registry_shares_handlers() {
    let n = Arc::new(AtomicUsize::new(0));
    let r = registry(vec![(spec("k8s.get", Permission::Read), echo(&n))]).filter(&ReadOnlyPolicy);
    assert!(r.execute(&call("c1", "k8s.get", GOOD_ARGS), &ReadOnlyPolicy).await.is_ok());
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

// ---- result shape ----

#[test]
fn tool_result_json_shape() {
    let mut ok = ToolResult::ok("c1", "x.y", json!({"a": 1}));
    ok.duration = Duration::from_millis(5);
    assert_eq!(ok.to_json_string(), r#"{"id":"c1","name":"x.y","output":{"a":1}}"#);
    assert!(ok.is_ok());
    assert_eq!(ok.status(), "ok");

    let err = ToolResult::err("c2", "x.y", ErrorCode::Timeout, "too slow");
    let v: Value = serde_json::from_str(&err.to_json_string()).unwrap();
    assert_eq!(v, json!({"id": "c2", "name": "x.y", "error": {"code": "timeout", "message": "too slow"}}));
    assert!(!err.is_ok());
    assert_eq!(err.status(), "timeout");
}

#[test]
fn error_code_names() {
    let all = [
        ErrorCode::InvalidCall,
        ErrorCode::UnknownTool,
        ErrorCode::PermissionDenied,
        ErrorCode::InvalidArguments,
        ErrorCode::Timeout,
        ErrorCode::ToolError,
        ErrorCode::ResultTooLarge,
        ErrorCode::InvalidResult,
    ];
    for c in all {
        assert_eq!(serde_json::to_value(c).unwrap(), json!(c.as_str()));
    }
    assert_eq!(ErrorCode::ResultTooLarge.as_str(), "result_too_large");
}

#[test]
fn registry_is_send_sync() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Registry>();
}
