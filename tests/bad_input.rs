//! The bad-input corpus: hundreds of malformed, oversized, mistyped, unauthenticated and
//! forged HTTP requests written byte by byte over real TCP to the real router
//! (`web::router` served by `web::serve`, on a real engine, audit journal, alert store and a
//! Catalog loaded from manifests). Each case names the exact status and the error `code` of
//! the JSON envelope `{"error": {"message", "type", "code"}}` it must get; after every case
//! the test reads the state back (Runs, Run detail, incidents with their events and jobs,
//! per-source counters, both journals' sizes, the `/metrics` text and the model's request
//! count) and asserts that nothing changed, except the one counter a rejected alert delivery
//! is meant to raise (`rejected` of its AlertSource).
//!
//! Requests the HTTP parser refuses before any router code runs (a bare CR in a header, a
//! `Content-Length` that is not a number, headers over hyper's limits) are answered by hyper
//! itself with a status line and no body: those cases expect [`Expect::Refused`]. A body cut
//! short by a client that then half-closes still gets its envelope.
//!
//! `X-Akritas-Signature` signs the body only (no timestamp), so a replayed signature is
//! refused with any other body or source, and an exact replay of an accepted delivery is a
//! deduplicated 200 that opens nothing (checked after the corpus).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use akritas::alerts::store::AlertStore;
use akritas::audit::{AuditLog, RunId};
use akritas::catalog::secrets::EnvSecrets;
use akritas::config::{ApiKeyRef, Scope};
use akritas::web::auth::ApiKeys;
use akritas::web::{self, AppState};
use akritas_testkit::host;
use akritas_testkit::raw_http::{Outcome, RawRequest, Then, exchange};
use akritas_testkit::scripted_llm::ScriptedLlm;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

/// Small, so oversized bodies stay cheap; large enough for every bound checked after it.
const MAX_BODY: usize = 32 * 1024;

const ADMIN_KEY: &str = "admin-key-0123456789abcdef";
const METRICS_KEY: &str = "metrics-key-0123456789abcd";
const READ_KEY: &str = "read-key-0123456789abcdefg";
const CHAT_KEY: &str = "chat-key-0123456789abcdefg";
const TEAM_KEY: &str = "team-key-0123456789abcdefg";
const WRONG_KEY: &str = "wrong-key-0123456789abcdef";
const AM_TOKEN: &str = "am-header-token-0123456789";
const BEARER_TOKEN: &str = "bearer-token-0123456789ab";
const GRAFANA_TOKEN: &str = "grafana-token-0123456789a";
const PINGDOM_TOKEN: &str = "pingdom-token-0123456789a";
const HMAC_SECRET: &str = "hmac-secret-0123456789abc";
const KUMA_SECRET: &str = "kuma-secret-0123456789abc";
/// Every secret value; none may appear in an answer.
const SECRETS: [&str; 11] = [
    ADMIN_KEY,
    METRICS_KEY,
    READ_KEY,
    CHAT_KEY,
    TEAM_KEY,
    AM_TOKEN,
    BEARER_TOKEN,
    GRAFANA_TOKEN,
    PINGDOM_TOKEN,
    HMAC_SECRET,
    KUMA_SECRET,
];

const AM_HEADER: &str = "x-akritas-source-token";
const PINGDOM_HEADER: &str = "x-pingdom-token";

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const GENERIC: &str = include_str!("fixtures/generic/generic-batch.json");
const GRAFANA: &str = include_str!("fixtures/grafana/grafana-webhook-firing.json");
const KUMA: &str = include_str!("fixtures/uptime_kuma/uptime-kuma-down.json");
const PINGDOM: &str = include_str!("fixtures/pingdom/pingdom-down.json");

/// One AlertSource per provider and per authentication kind (secret header, Bearer, HMAC,
/// several at once, explicit opt-out), and one name in two namespaces other than `ops`.
const SOURCES: &str = concat!(
    include_str!("fixtures/sources/auth-kinds.yaml"),
    "---
apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {name: both, namespace: ops}
spec: {provider: generic, auth: {bearerToken: {env: BEARER_TOKEN}, hmacSecret: {env: HOOK_HMAC}}}
---
apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {name: open, namespace: ops}
spec: {provider: generic, auth: {allowUnauthenticated: true}}
---
apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {name: grafana, namespace: ops}
spec: {provider: grafana, auth: {bearerToken: {env: GRAFANA_TOKEN}}}
---
apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {name: kuma, namespace: ops}
spec: {provider: uptime-kuma, auth: {hmacSecret: {env: KUMA_HMAC}}}
---
apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {name: pingdom, namespace: ops}
spec: {provider: pingdom, auth: {secretHeader: {name: X-Pingdom-Token, value: {env: PINGDOM_TOKEN}}}}
---
apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {name: dup, namespace: team-a}
spec: {provider: generic, auth: {allowUnauthenticated: true}}
---
apiVersion: akritas.io/v1alpha1
kind: AlertSource
metadata: {name: dup, namespace: team-b}
spec: {provider: generic, auth: {allowUnauthenticated: true}}
"
);

/// What a case must get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The router's answer: this status and this `code` in the JSON envelope.
    Error(u16, &'static str),
    /// hyper refuses the bytes before the router runs: this status, no body.
    Refused(u16),
}

/// One bad request.
struct Case {
    category: &'static str,
    name: String,
    request: RawRequest,
    then: Then,
    expect: Expect,
    /// The AlertSource (`namespace/name`) whose rejected-deliveries counter this case raises
    /// by one (a delivery refused by the source's authentication or its decoder).
    rejects: Option<&'static str>,
}

/// The cases of one category.
struct Cases {
    category: &'static str,
    list: Vec<Case>,
}

impl Cases {
    fn new(category: &'static str) -> Cases {
        Cases { category, list: Vec::new() }
    }

    fn add(&mut self, name: impl Into<String>, request: RawRequest, expect: Expect) {
        self.push(name, request, expect, None, Then::Wait);
    }

    /// A case that an AlertSource counts as a rejected delivery.
    fn rejected(&mut self, name: impl Into<String>, source: &'static str, request: RawRequest, expect: Expect) {
        self.push(name, request, expect, Some(source), Then::Wait);
    }

    /// A case whose client half-closes after writing.
    fn half_closed(&mut self, name: impl Into<String>, request: RawRequest, expect: Expect) {
        self.push(name, request, expect, None, Then::HalfClose);
    }

    fn push(
        &mut self,
        name: impl Into<String>,
        request: RawRequest,
        expect: Expect,
        rejects: Option<&'static str>,
        then: Then,
    ) {
        let case = Case { category: self.category, name: name.into(), request, then, expect, rejects };
        self.list.push(case);
    }
}

const INVALID_JSON: Expect = Expect::Error(400, "invalid_json");
const INVALID_REQUEST: Expect = Expect::Error(400, "invalid_request");
const INVALID_PAYLOAD: Expect = Expect::Error(400, "invalid_payload");
const NO_KEY: Expect = Expect::Error(401, "invalid_api_key");
const SOURCE_REFUSED: Expect = Expect::Error(401, "unauthorized");
const WRONG_SCOPE: Expect = Expect::Error(403, "insufficient_scope");
const NOT_FOUND: Expect = Expect::Error(404, "not_found");
const METHOD: Expect = Expect::Error(405, "method_not_allowed");
const TOO_LARGE: Expect = Expect::Error(413, "body_too_large");
const MEDIA_TYPE: Expect = Expect::Error(415, "unsupported_media_type");

fn get(path: &str) -> RawRequest {
    RawRequest::new("GET", path)
}

/// A JSON POST as a client writes it, with its true `Content-Length`.
fn post(path: &str, body: impl AsRef<[u8]>) -> RawRequest {
    RawRequest::new("POST", path).header("content-type", "application/json").body(body)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A user message: the smallest chat body the engine accepts.
fn chat(extra: &str) -> String {
    format!(r#"{{"messages": [{{"role": "user", "content": "is db-7 fine?"}}]{extra}}}"#)
}

/// `depth` nested arrays around `inner`.
fn nested(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Ids of objects seeded into the host.
struct Ids {
    run: String,
    incident: String,
    event: String,
    job: String,
}

/// The host under test, served over TCP.
struct Host {
    addr: SocketAddr,
    state: AppState,
    audit: Arc<AuditLog>,
    alerts: Arc<AlertStore>,
    llm: ScriptedLlm,
    ids: Ids,
    /// The seeded signed delivery and its signature (replayed by the cases).
    signed: (String, String),
    journals: [std::path::PathBuf; 2],
    cancel: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn key(name: &str, env: &str, scopes: &[Scope], namespace: Option<&str>) -> ApiKeyRef {
    ApiKeyRef {
        name: name.into(),
        env: env.into(),
        scopes: scopes.iter().copied().collect(),
        namespace: namespace.map(str::to_string),
    }
}

async fn start() -> Host {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("resources");
    std::fs::create_dir(&manifests).unwrap();
    std::fs::write(manifests.join("sources.yaml"), SOURCES).unwrap();
    let catalog = host::catalog_from(&manifests);
    assert_eq!(catalog.current().counts().get("AlertSource"), Some(&10), "every test source loads");

    let audit_path = dir.path().join("audit.jsonl");
    let alerts_path = dir.path().join("alerts.jsonl");
    let audit = Arc::new(AuditLog::open(&audit_path).unwrap());
    let run = host::finished_run(&audit, "admin").await;

    // No step is scripted: a bad request that reached the model would fail and show up as a
    // model request and a Run.
    let llm = ScriptedLlm::start(vec![]).await;
    let (tools, _) = host::standard_tools();
    let engine = host::engine(&llm, host::settings(), tools, catalog.clone(), Some(audit.clone()), None);
    let alerts = Arc::new(AlertStore::open(&alerts_path).unwrap());
    let secrets = EnvSecrets::with_lookup(|name: &str| {
        let value = match name {
            "AM_TOKEN" => AM_TOKEN,
            "BEARER_TOKEN" => BEARER_TOKEN,
            "GRAFANA_TOKEN" => GRAFANA_TOKEN,
            "PINGDOM_TOKEN" => PINGDOM_TOKEN,
            "HOOK_HMAC" => HMAC_SECRET,
            "KUMA_HMAC" => KUMA_SECRET,
            _ => return None,
        };
        Some(value.to_string())
    });
    let refs = [
        key("admin", "ADMIN_KEY", &[Scope::Admin], None),
        key("prom", "METRICS_KEY", &[Scope::Metrics], None),
        key("reader", "READ_KEY", &[Scope::Read], None),
        key("chatter", "CHAT_KEY", &[Scope::Chat], None),
        key("team", "TEAM_KEY", &[Scope::Chat], Some("team-a")),
    ];
    let keys = ApiKeys::from_env(&refs, &|name: &str| {
        let value = match name {
            "ADMIN_KEY" => ADMIN_KEY,
            "METRICS_KEY" => METRICS_KEY,
            "READ_KEY" => READ_KEY,
            "CHAT_KEY" => CHAT_KEY,
            "TEAM_KEY" => TEAM_KEY,
            _ => return None,
        };
        Some(value.to_string())
    })
    .unwrap();
    let mut state = host::app_state(Arc::new(engine), catalog, keys, Some(alerts.clone()), Arc::new(secrets), MAX_BODY);
    // The test sources are in `ops`: the one-segment webhook URLs name them.
    state.info = Arc::new(web::HostInfo { webhook_namespace: "ops".into(), ..(*state.info).clone() });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(web::serve(listener, web::router(state.clone()), cancel.clone(), Duration::from_secs(1)));

    // Seed an incident (with its event and job) and one signed delivery.
    let seeded = answer(addr, post("/api/v1/alerts/ops/am/webhook", FIRING).header(AM_HEADER, AM_TOKEN)).await;
    assert_eq!(seeded.0, 202, "{}", seeded.1);
    let event = &seeded.1["events"][0];
    let text = |value: &Value| value.as_str().unwrap().to_string();
    let ids = Ids {
        run: run.as_str().to_string(),
        incident: text(&event["incident_id"]),
        event: text(&event["event_id"]),
        job: text(&event["job_id"]),
    };
    let signed_body = GENERIC.replace("db-1", "db-signed");
    let signature = sign(HMAC_SECRET, signed_body.as_bytes());
    let request = post("/api/v1/alerts/ops/signed/webhook", &signed_body).header("x-akritas-signature", &signature);
    let seeded = answer(addr, request).await;
    assert_eq!(seeded.0, 202, "{}", seeded.1);

    Host {
        addr,
        state,
        audit,
        alerts,
        llm,
        ids,
        signed: (signed_body, signature),
        journals: [audit_path, alerts_path],
        cancel,
        _dir: dir,
    }
}

/// Status and JSON body of a well-formed request.
async fn answer(addr: SocketAddr, request: RawRequest) -> (u16, Value) {
    match exchange(addr, &request.bytes(), Then::Wait, Duration::from_secs(10)).await {
        Outcome::Answered(response) => (response.status, serde_json::from_slice(&response.body).unwrap_or(Value::Null)),
        other => panic!("no answer: {other:?}"),
    }
}

/// Everything a bad request could have changed, read back from the host.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    runs: Value,
    run: Value,
    incidents: Vec<Value>,
    tallies: String,
    /// Per source: accepted, duplicate, refused by rate, refused by pending jobs.
    counters: BTreeMap<String, [u64; 4]>,
    rejected: BTreeMap<String, u64>,
    journal_bytes: [u64; 2],
    /// `/metrics` lines, without the rejected-deliveries series (in `rejected` above) and
    /// without series at zero (a source's first rejection makes its zero series appear).
    metrics: Vec<String>,
    model_requests: usize,
}

impl Host {
    async fn snapshot(&self) -> Snapshot {
        let incidents = akritas_testkit::jobs::incident_details(&self.alerts, 1000).await;
        let all = self.alerts.all_counters();
        let run = match RunId::parse(&self.ids.run) {
            Some(id) => self.audit.get(&id).await.unwrap(),
            None => None,
        };
        Snapshot {
            runs: serde_json::to_value(self.audit.list(1000).await.unwrap()).unwrap(),
            run: serde_json::to_value(run).unwrap(),
            incidents,
            tallies: format!("{:?}", self.alerts.tallies()),
            // A source's first rejection creates its (zero) counters; zero is no change.
            counters: all
                .iter()
                .map(|(k, c)| (k.clone(), [c.accepted, c.duplicate, c.deferred, c.coalesced]))
                .filter(|(_, c)| c.iter().any(|n| *n > 0))
                .collect(),
            rejected: all.iter().map(|(k, c)| (k.clone(), c.rejected)).collect(),
            journal_bytes: self.journals.clone().map(|path| std::fs::metadata(path).unwrap().len()),
            metrics: web::metrics::render(&self.state)
                .await
                .lines()
                .filter(|line| !line.contains("outcome=\"rejected\"") && !line.ends_with("} 0"))
                .map(str::to_string)
                .collect(),
            model_requests: self.llm.model_requests(),
        }
    }

    /// Runs one case; returns what was wrong with its answer or the state after it.
    async fn check(&self, case: &Case) -> Vec<String> {
        let before = self.snapshot().await;
        let outcome = exchange(self.addr, &case.request.bytes(), case.then, Duration::from_secs(5)).await;
        let mut problems = judge(case.expect, &outcome);
        let mut expected = before;
        if let Some(source) = case.rejects {
            *expected.rejected.entry(source.to_string()).or_default() += 1;
        }
        // A handler may still be finishing after a closed connection; give it a moment.
        let mut after = self.snapshot().await;
        for _ in 0..20 {
            if after == expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            after = self.snapshot().await;
        }
        problems.extend(differences(&expected, &after));
        problems
    }
}

/// What is wrong with `outcome` given `expect`.
fn judge(expect: Expect, outcome: &Outcome) -> Vec<String> {
    let mut problems = Vec::new();
    if let Outcome::Answered(response) = outcome {
        if !response.after.is_empty() {
            problems.push(format!("a second answer on the connection: {}", String::from_utf8_lossy(&response.after)));
        }
        let text = response.text();
        for secret in SECRETS {
            if text.contains(secret) {
                problems.push(format!("the answer contains a secret: {text}"));
            }
        }
    }
    match (expect, outcome) {
        (Expect::Error(status, code), Outcome::Answered(response)) => {
            let body: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
            let error = &body["error"];
            let kind = match status {
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                _ => "invalid_request_error",
            };
            let envelope_ok = response.header("content-type") == Some("application/json")
                && error["message"].as_str().is_some_and(|m| !m.is_empty())
                && error["type"] == kind
                && error["code"] == code;
            if response.status != status || !envelope_ok {
                problems.push(format!(
                    "expected {status} {code}, got {} {:?}: {}",
                    response.status,
                    response.header("content-type"),
                    response.text()
                ));
            }
        }
        (Expect::Refused(status), Outcome::Answered(response)) => {
            if response.status != status || !response.body.is_empty() {
                problems.push(format!("expected hyper's bare {status}, got {}: {}", response.status, response.text()));
            }
        }
        (expect, outcome) => problems.push(format!("expected {expect:?}, got {outcome:?}")),
    }
    problems
}

fn differences(expected: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut problems = Vec::new();
    let mut compare = |what: &str, a: String, b: String| {
        if a != b {
            problems.push(format!("state changed: {what}: before {a} after {b}"));
        }
    };
    compare("runs", expected.runs.to_string(), after.runs.to_string());
    compare("seeded run", expected.run.to_string(), after.run.to_string());
    compare("incidents", format!("{:?}", expected.incidents), format!("{:?}", after.incidents));
    compare("jobs and incidents by state", expected.tallies.clone(), after.tallies.clone());
    compare("source counters", format!("{:?}", expected.counters), format!("{:?}", after.counters));
    compare("rejected deliveries", format!("{:?}", expected.rejected), format!("{:?}", after.rejected));
    compare(
        "journal bytes (audit, alerts)",
        format!("{:?}", expected.journal_bytes),
        format!("{:?}", after.journal_bytes),
    );
    compare("metrics", expected.metrics.join("\n"), after.metrics.join("\n"));
    compare("model requests", expected.model_requests.to_string(), after.model_requests.to_string());
    problems
}

/// Every route behind an API key: method, concrete path and a body its handler accepts.
fn protected_routes(ids: &Ids) -> Vec<(&'static str, String, Option<String>)> {
    let Ids { run, incident, event, job } = ids;
    vec![
        ("GET", "/api/v1/resources".into(), None),
        ("POST", "/api/v1/chat".into(), Some(chat(""))),
        ("GET", "/api/v1/runs".into(), None),
        ("GET", format!("/api/v1/runs/{run}"), None),
        ("POST", format!("/api/v1/runs/{run}/chat"), Some(r#"{"message": "and now?"}"#.into())),
        ("GET", "/api/v1/tools".into(), None),
        ("GET", "/api/v1/incidents".into(), None),
        ("GET", format!("/api/v1/incidents/{incident}"), None),
        ("GET", format!("/api/v1/alert-events/{event}"), None),
        ("GET", format!("/api/v1/investigation-jobs/{job}"), None),
        ("GET", "/metrics".into(), None),
    ]
}

fn route_request(method: &str, path: &str, body: &Option<String>) -> RawRequest {
    match body {
        Some(body) => RawRequest::new(method, path).header("content-type", "application/json").body(body),
        None => RawRequest::new(method, path),
    }
}

/// Missing, wrong and malformed API keys on every protected route.
fn api_keys(ids: &Ids) -> Cases {
    let mut cases = Cases::new("api keys");
    for (method, path, body) in protected_routes(ids) {
        let what = |case: &str| format!("{method} {path}: {case}");
        let request = || route_request(method, &path, &body);
        cases.add(what("no Authorization"), request(), NO_KEY);
        cases.add(what("wrong key"), request().header("authorization", bearer(WRONG_KEY)), NO_KEY);
        cases.add(what("key without Bearer"), request().header("authorization", ADMIN_KEY), NO_KEY);
        cases.add(what("key as Basic"), request().header("authorization", format!("Basic {ADMIN_KEY}")), NO_KEY);
        cases.add(what("empty Bearer"), request().header("authorization", "Bearer "), NO_KEY);
        cases.add(
            what("key with a suffix"),
            request().header("authorization", bearer(&format!("{ADMIN_KEY}x"))),
            NO_KEY,
        );
        let mut latin1 = b"Bearer ".to_vec();
        latin1.extend_from_slice(ADMIN_KEY.as_bytes());
        latin1.push(0xE9);
        cases.add(what("non-UTF-8 key"), request().header("authorization", latin1), NO_KEY);
        cases.add(what("an alert source's token"), request().header("authorization", bearer(BEARER_TOKEN)), NO_KEY);
    }
    cases
}

/// Keys whose scope or namespace does not cover the route.
fn scopes(ids: &Ids) -> Cases {
    let mut cases = Cases::new("scopes");
    for (method, path, body) in protected_routes(ids) {
        let request = || route_request(method, &path, &body);
        if path == "/metrics" {
            for (name, key) in [("read", READ_KEY), ("chat", CHAT_KEY), ("chat@team-a", TEAM_KEY)] {
                let request = request().header("authorization", bearer(key));
                cases.add(format!("{method} {path}: {name} key"), request, WRONG_SCOPE);
            }
            continue;
        }
        cases.add(
            format!("{method} {path}: metrics key"),
            request().header("authorization", bearer(METRICS_KEY)),
            WRONG_SCOPE,
        );
        if method == "POST" {
            cases.add(
                format!("{method} {path}: read key"),
                request().header("authorization", bearer(READ_KEY)),
                WRONG_SCOPE,
            );
        }
    }
    let run = &ids.run;
    let team = |request: RawRequest| request.header("authorization", bearer(TEAM_KEY));
    cases.add("another namespace's Run", team(get(&format!("/api/v1/runs/{run}"))), NOT_FOUND);
    let follow = post(&format!("/api/v1/runs/{run}/chat"), r#"{"message": "and now?"}"#);
    cases.add("a follow-up on another namespace's Run", team(follow), NOT_FOUND);
    cases
}

/// The three routes that reach the AlertSource `ops/{name}`.
fn webhook_paths(name: &str) -> [String; 3] {
    [
        format!("/api/v1/alerts/ops/{name}/webhook"),
        format!("/api/v1/alerts/{name}/webhook"),
        format!("/api/v1/alerts/ops.{name}/webhook"),
    ]
}

/// Each AlertSource authentication kind refusing missing, wrong, forged and replayed
/// credentials; API keys never stand in for them.
fn source_auth(signed: &(String, String)) -> Cases {
    let mut cases = Cases::new("alert source auth");
    let alias = "/api/v1/alertmanager/webhook";

    // Shared secret in a header (the Alertmanager source), on every route that reaches it.
    for path in webhook_paths("am").iter().map(String::as_str).chain([alias]) {
        let what = |case: &str| format!("am {path}: {case}");
        let body = || post(path, FIRING);
        cases.rejected(what("no secret header"), "ops/am", body(), SOURCE_REFUSED);
        cases.rejected(
            what("wrong secret"),
            "ops/am",
            body().header(AM_HEADER, "wrong-header-token-0123"),
            SOURCE_REFUSED,
        );
        cases.rejected(
            what("admin API key as Bearer"),
            "ops/am",
            body().header("authorization", bearer(ADMIN_KEY)),
            SOURCE_REFUSED,
        );
    }
    let am = "/api/v1/alerts/ops/am/webhook";
    cases.rejected(
        "am: the secret as Bearer",
        "ops/am",
        post(am, FIRING).header("authorization", bearer(AM_TOKEN)),
        SOURCE_REFUSED,
    );
    cases.rejected(
        "am: the secret in another header",
        "ops/am",
        post(am, FIRING).header("x-source-token", AM_TOKEN),
        SOURCE_REFUSED,
    );
    cases.rejected("am: empty secret", "ops/am", post(am, FIRING).header(AM_HEADER, ""), SOURCE_REFUSED);
    cases.rejected(
        "am: secret with a suffix",
        "ops/am",
        post(am, FIRING).header(AM_HEADER, format!("{AM_TOKEN}x")),
        SOURCE_REFUSED,
    );
    cases.rejected(
        "am: secret prefix only",
        "ops/am",
        post(am, FIRING).header(AM_HEADER, &AM_TOKEN[..10]),
        SOURCE_REFUSED,
    );
    let mut latin1 = AM_TOKEN.as_bytes().to_vec();
    latin1.push(0xFF);
    cases.rejected("am: non-UTF-8 secret", "ops/am", post(am, FIRING).header(AM_HEADER, latin1), SOURCE_REFUSED);

    // Bearer token.
    for path in webhook_paths("bearer") {
        cases.rejected(format!("bearer {path}: no token"), "ops/bearer", post(&path, GENERIC), SOURCE_REFUSED);
    }
    let path = "/api/v1/alerts/ops/bearer/webhook";
    for (case, value) in [
        ("wrong token", bearer("wrong-token-0123456789ab")),
        ("token without Bearer", BEARER_TOKEN.to_string()),
        ("token as Basic", format!("Basic {BEARER_TOKEN}")),
        ("empty Bearer", "Bearer ".to_string()),
        ("token with a suffix", bearer(&format!("{BEARER_TOKEN}=="))),
        ("another source's token", bearer(GRAFANA_TOKEN)),
        ("admin API key", bearer(ADMIN_KEY)),
    ] {
        let request = post(path, GENERIC).header("authorization", value);
        cases.rejected(format!("bearer: {case}"), "ops/bearer", request, SOURCE_REFUSED);
    }
    let grafana = "/api/v1/alerts/ops/grafana/webhook";
    cases.rejected("grafana: no token", "ops/grafana", post(grafana, GRAFANA), SOURCE_REFUSED);
    let other = post(grafana, GRAFANA).header("authorization", bearer(BEARER_TOKEN));
    cases.rejected("grafana: another source's token", "ops/grafana", other, SOURCE_REFUSED);

    // HMAC over the exact body: forged (wrong secret, wrong algorithm, mangled) and replayed
    // (a signature the host accepted before, sent with another body or to another source).
    let (seen_body, seen_signature) = signed;
    let fresh = GENERIC.replace("db-1", "db-fresh");
    for path in webhook_paths("signed") {
        cases.rejected(format!("signed {path}: no signature"), "ops/signed", post(&path, &fresh), SOURCE_REFUSED);
    }
    let path = "/api/v1/alerts/ops/signed/webhook";
    let good = sign(HMAC_SECRET, fresh.as_bytes());
    let hex = good.trim_start_matches("sha256=");
    for (case, signature) in [
        ("replayed signature of an earlier delivery", seen_signature.clone()),
        ("forged with another secret", sign("guessed-secret-0123456789", fresh.as_bytes())),
        ("forged with the other source's secret", sign(KUMA_SECRET, fresh.as_bytes())),
        ("signature of the body with a trailing newline", sign(HMAC_SECRET, format!("{fresh}\n").as_bytes())),
        ("hex without sha256=", hex.to_string()),
        ("sha1= prefix", format!("sha1={hex}")),
        ("truncated hex", good[..good.len() - 2].to_string()),
        (
            "hex with a flipped digit",
            format!("{}{}", &good[..good.len() - 1], if good.ends_with('0') { '1' } else { '0' }),
        ),
        ("not hex", "sha256=zzzz".to_string()),
        ("empty", String::new()),
        ("signature as Bearer", String::new()),
    ] {
        let mut request = post(path, &fresh);
        request = if case == "signature as Bearer" {
            request.header("authorization", bearer(&good))
        } else {
            request.header("x-akritas-signature", signature)
        };
        cases.rejected(format!("signed: {case}"), "ops/signed", request, SOURCE_REFUSED);
    }
    let tampered = seen_body.replace("critical", "info");
    let request = post(path, &tampered).header("x-akritas-signature", seen_signature);
    cases.rejected("signed: replayed signature over a tampered body", "ops/signed", request, SOURCE_REFUSED);
    let kuma = "/api/v1/alerts/ops/kuma/webhook";
    cases.rejected("kuma: no signature", "ops/kuma", post(kuma, KUMA), SOURCE_REFUSED);
    let replayed = post(kuma, seen_body).header("x-akritas-signature", seen_signature);
    cases.rejected("kuma: a signature replayed from another source", "ops/kuma", replayed, SOURCE_REFUSED);

    // Several mechanisms: every one must pass.
    let both = "/api/v1/alerts/ops/both/webhook";
    let signature = sign(HMAC_SECRET, fresh.as_bytes());
    let only_bearer = post(both, &fresh).header("authorization", bearer(BEARER_TOKEN));
    cases.rejected("both: Bearer without signature", "ops/both", only_bearer, SOURCE_REFUSED);
    let only_signature = post(both, &fresh).header("x-akritas-signature", &signature);
    cases.rejected("both: signature without Bearer", "ops/both", only_signature, SOURCE_REFUSED);
    let wrong_bearer =
        post(both, &fresh).header("authorization", bearer(GRAFANA_TOKEN)).header("x-akritas-signature", &signature);
    cases.rejected("both: signature with a wrong Bearer", "ops/both", wrong_bearer, SOURCE_REFUSED);

    let pingdom = "/api/v1/alerts/ops/pingdom/webhook";
    cases.rejected("pingdom: no secret header", "ops/pingdom", post(pingdom, PINGDOM), SOURCE_REFUSED);
    let wrong = post(pingdom, PINGDOM).header(PINGDOM_HEADER, AM_TOKEN);
    cases.rejected("pingdom: another source's secret", "ops/pingdom", wrong, SOURCE_REFUSED);
    cases
}

/// Routes naming no AlertSource (a plain name is one of the webhook namespace, `ops` here).
fn source_routing() -> Cases {
    let mut cases = Cases::new("alert source routing");
    let am = |path: &str| post(path, FIRING).header(AM_HEADER, AM_TOKEN);
    cases.add("unknown source", am("/api/v1/alerts/nope/webhook"), NOT_FOUND);
    cases.add("unknown namespaced source", am("/api/v1/alerts/ops/nope/webhook"), NOT_FOUND);
    cases.add("source in another namespace", am("/api/v1/alerts/team-a/am/webhook"), NOT_FOUND);
    cases.add("dotted name in another namespace", am("/api/v1/alerts/team-a.am/webhook"), NOT_FOUND);
    cases.add("namespace only", am("/api/v1/alerts/ops./webhook"), NOT_FOUND);
    cases.add("percent-encoded slash", am("/api/v1/alerts/ops%2Fam/webhook"), NOT_FOUND);
    cases.add("a name only other namespaces use", post("/api/v1/alerts/dup/webhook", GENERIC), NOT_FOUND);
    cases
}

/// A POST route with the credentials that let a request reach its handler, what a blank or
/// garbage body gets there, and the source that counts it.
struct PostRoute {
    name: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    garbage: Expect,
    rejects: Option<&'static str>,
}

fn post_routes(ids: &Ids) -> Vec<PostRoute> {
    let admin = vec![("authorization", bearer(ADMIN_KEY))];
    let am = vec![(AM_HEADER, AM_TOKEN.to_string())];
    let route = |name, path: String, headers: &Vec<(&'static str, String)>, garbage, rejects| PostRoute {
        name,
        path,
        headers: headers.clone(),
        garbage,
        rejects,
    };
    vec![
        route("chat", "/api/v1/chat".into(), &admin, INVALID_JSON, None),
        route("follow-up", format!("/api/v1/runs/{}/chat", ids.run), &admin, INVALID_JSON, None),
        route("namespaced webhook", "/api/v1/alerts/ops/am/webhook".into(), &am, INVALID_PAYLOAD, Some("ops/am")),
        route(
            "webhook",
            "/api/v1/alerts/bearer/webhook".into(),
            &vec![("authorization", bearer(BEARER_TOKEN))],
            INVALID_PAYLOAD,
            Some("ops/bearer"),
        ),
        route("alertmanager alias", "/api/v1/alertmanager/webhook".into(), &am, INVALID_PAYLOAD, Some("ops/am")),
    ]
}

impl PostRoute {
    /// The request line and credentials, no body yet.
    fn start(&self) -> RawRequest {
        let mut request = RawRequest::new("POST", &self.path).header("content-type", "application/json");
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
    }
}

/// Oversized, chunked, truncated and mis-framed bodies on every POST route.
fn framing(ids: &Ids) -> Cases {
    let mut cases = Cases::new("body framing");
    let over = vec![b' '; MAX_BODY + 1];
    let garbage = b"this is not json";
    for route in post_routes(ids) {
        let what = |case: &str| format!("{}: {case}", route.name);
        cases.add(what("declared length over the limit"), route.start().body(&over), TOO_LARGE);
        let declared = route.start().header("content-length", (MAX_BODY + 1).to_string()).raw_body(b"{");
        cases.add(what("declared length over the limit, body not sent"), declared, TOO_LARGE);
        cases.add(what("chunked without length, over the limit"), route.start().chunked(&over, 4096), TOO_LARGE);
        cases.add(what("one-byte chunks over the limit"), route.start().chunked(&over, 1), TOO_LARGE);
        match route.rejects {
            Some(source) => {
                cases.rejected(
                    what("chunked garbage within the limit"),
                    source,
                    route.start().chunked(garbage, 5),
                    route.garbage,
                );
                cases.rejected(what("empty body"), source, route.start().body(b""), route.garbage);
                cases.rejected(what("no body and no length"), source, route.start(), route.garbage);
            }
            None => {
                cases.add(what("chunked garbage within the limit"), route.start().chunked(garbage, 5), route.garbage);
                cases.add(what("empty body"), route.start().body(b""), route.garbage);
                cases.add(what("no body and no length"), route.start(), route.garbage);
            }
        }
        let short = route.start().header("content-length", "200").raw_body(&br#"{"messages": ["#[..]);
        cases.half_closed(what("body shorter than its length"), short, INVALID_REQUEST);
        let unterminated = route.start().header("transfer-encoding", "chunked").raw_body(b"5\r\n{\"mes\r\n");
        cases.half_closed(what("chunked body without its last chunk"), unterminated, INVALID_REQUEST);
        let bad_size = route.start().header("transfer-encoding", "chunked").raw_body(b"zz\r\n{}\r\n0\r\n\r\n");
        cases.add(what("chunk size not hex"), bad_size, INVALID_REQUEST);
        let huge_size =
            route.start().header("transfer-encoding", "chunked").raw_body(b"fffffffffffffffffff\r\n{}\r\n0\r\n\r\n");
        cases.add(what("chunk size overflowing u64"), huge_size, INVALID_REQUEST);
        let long_chunk = route.start().header("transfer-encoding", "chunked").raw_body(b"2\r\n{}}}}\r\n0\r\n\r\n");
        cases.add(what("chunk longer than its size"), long_chunk, INVALID_REQUEST);
        cases.add(
            what("length not a number"),
            route.start().header("content-length", "ten").raw_body(b"{}"),
            Expect::Refused(400),
        );
        cases.add(
            what("negative length"),
            route.start().header("content-length", "-2").raw_body(b"{}"),
            Expect::Refused(400),
        );
        let overflow = route.start().header("content-length", "184467440737095516160").raw_body(b"{}");
        cases.add(what("length overflowing u64"), overflow, Expect::Refused(400));
        let twice = route.start().header("content-length", "2").header("content-length", "3").raw_body(b"{} ");
        cases.add(what("two different lengths"), twice, Expect::Refused(400));
        // RFC 9112 §6.3: Transfer-Encoding wins over Content-Length; hyper reads the chunks.
        let both = route.start().header("content-length", "4").chunked(garbage, 4);
        match route.rejects {
            Some(source) => cases.rejected(what("length and chunked together"), source, both, route.garbage),
            None => cases.add(what("length and chunked together"), both, route.garbage),
        }
        let gzip = route.start().header("transfer-encoding", "gzip").raw_body(b"{}");
        cases.add(what("transfer coding other than chunked"), gzip, Expect::Refused(400));
    }
    cases
}

/// Header injection and malformed request heads: bare CR or LF, NUL, folding, huge and
/// numerous headers, broken request lines, and a request smuggled behind another.
fn heads() -> Cases {
    let mut cases = Cases::new("request head");
    let runs = || get("/api/v1/runs").header("authorization", bearer(ADMIN_KEY));
    let hook = || post("/api/v1/alerts/ops/open/webhook", GENERIC.replace("db-1", "db-smuggled"));
    let refused = Expect::Refused(400);
    for (name, request) in [("GET runs", runs()), ("POST webhook", hook())] {
        let what = |case: &str| format!("{name}: {case}");
        let request = || request.clone();
        cases.add(what("bare CR inside a header value"), request().header("x-note", b"a\rb"), refused);
        cases.add(what("NUL inside a header value"), request().header("x-note", b"a\0b"), refused);
        cases.add(what("bare LF splitting a header value"), request().raw_line(b"x-note: a\nb"), refused);
        cases.add(what("space inside a header name"), request().raw_line(b"x note: a"), refused);
        cases.add(what("header line without a colon"), request().raw_line(b"x-note"), refused);
        cases.add(what("obsolete line folding"), request().raw_line(b"x-note: a\r\n  folded"), refused);
        cases.add(what("a 1 MiB header"), request().header("x-note", vec![b'a'; 1 << 20]), Expect::Refused(431));
        let mut many = request();
        for i in 0..150 {
            many = many.header(&format!("x-note-{i}"), "a");
        }
        cases.add(what("150 headers"), many, Expect::Refused(431));
    }
    cases.add("garbage request line", RawRequest::from_bytes(b"HELLO\r\n\r\n"), refused);
    cases.add(
        "space inside the target",
        RawRequest::from_bytes(b"GET /api/v1 runs HTTP/1.1\r\nhost: x\r\n\r\n"),
        refused,
    );
    cases.add("unknown HTTP version", RawRequest::from_bytes(b"GET /health HTTP/3.7\r\nhost: x\r\n\r\n"), refused);
    cases.add(
        "control byte in the target",
        RawRequest::from_bytes(b"GET /api/v1/runs\x01 HTTP/1.1\r\nhost: x\r\n\r\n"),
        refused,
    );
    cases.add("a 100 KiB target", get(&format!("/api/v1/runs/{}", "a".repeat(100 * 1024))), Expect::Refused(414));
    // A second request written after `Connection: close` must never be read.
    let first = post("/api/v1/alerts/ops/open/webhook", "").bytes();
    let mut smuggled = first.clone();
    smuggled.extend_from_slice(&hook().bytes());
    cases.rejected(
        "a delivery smuggled behind a closing request",
        "ops/open",
        RawRequest::from_bytes(&smuggled),
        INVALID_PAYLOAD,
    );
    // CL.TE on a kept-alive connection: a front end reading the length sees one request;
    // hyper reads the (empty) chunked body and must close the connection after answering
    // (RFC 9112 §6.3) instead of reading the rest as a second request.
    let smuggle_body = [b"0\r\n\r\n".as_slice(), &hook().bytes()].concat();
    let cl_te = RawRequest::keep_alive("POST", "/api/v1/alerts/ops/open/webhook")
        .header("content-length", smuggle_body.len().to_string())
        .header("transfer-encoding", "chunked")
        .raw_body(smuggle_body);
    cases.rejected("a delivery smuggled with length and chunked", "ops/open", cl_te, INVALID_PAYLOAD);
    cases
}

/// `POST /api/v1/chat` bodies: broken JSON, wrong types, huge numbers, deep nesting,
/// invalid UTF-8 and values out of their bounds. None reaches the model.
fn chat_bodies() -> Cases {
    let mut cases = Cases::new("chat body");
    let user = r#"{"role": "user", "content": "hi"}"#;
    let assistant = r#"{"role": "assistant", "content": "hello"}"#;
    let many_turns = vec![user; 65].join(",");
    let big_context: Vec<String> = (0..33).map(|i| format!(r#""k{i}": "v""#)).collect();
    let invalid_json: Vec<(&str, Vec<u8>)> = vec![
        ("truncated JSON", br#"{"messages": [{"role": "user""#.to_vec()),
        ("null", b"null".to_vec()),
        ("an array", b"[]".to_vec()),
        ("a string", br#""hello""#.to_vec()),
        ("a number", b"42".to_vec()),
        ("no messages", b"{}".to_vec()),
        ("messages a string", br#"{"messages": "hi"}"#.to_vec()),
        ("messages an object", format!(r#"{{"messages": {user}}}"#).into_bytes()),
        ("messages null", br#"{"messages": null}"#.to_vec()),
        ("a message without content", br#"{"messages": [{"role": "user"}]}"#.to_vec()),
        ("a message without role", br#"{"messages": [{"content": "hi"}]}"#.to_vec()),
        ("an unknown role", br#"{"messages": [{"role": "root", "content": "hi"}]}"#.to_vec()),
        ("a role of the wrong case", br#"{"messages": [{"role": "User", "content": "hi"}]}"#.to_vec()),
        ("a numeric role", br#"{"messages": [{"role": 1, "content": "hi"}]}"#.to_vec()),
        ("numeric content", br#"{"messages": [{"role": "user", "content": 42}]}"#.to_vec()),
        ("null content", br#"{"messages": [{"role": "user", "content": null}]}"#.to_vec()),
        (
            "content parts instead of text",
            br#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}"#.to_vec(),
        ),
        ("an unknown message field", br#"{"messages": [{"role": "user", "content": "hi", "name": "x"}]}"#.to_vec()),
        ("an unknown field", chat(r#", "colour": "blue""#).into_bytes()),
        ("an OpenAI field", chat(r#", "stream": true"#).into_bytes()),
        ("max_tokens a string", chat(r#", "max_tokens": "100""#).into_bytes()),
        ("max_tokens negative", chat(r#", "max_tokens": -1"#).into_bytes()),
        ("max_tokens fractional", chat(r#", "max_tokens": 1.5"#).into_bytes()),
        ("max_tokens over u32", chat(r#", "max_tokens": 4294967296"#).into_bytes()),
        ("max_tokens with 30 digits", chat(r#", "max_tokens": 123456789012345678901234567890"#).into_bytes()),
        ("max_tokens 1e400", chat(r#", "max_tokens": 1e400"#).into_bytes()),
        ("temperature a string", chat(r#", "temperature": "hot""#).into_bytes()),
        ("temperature 1e400", chat(r#", "temperature": 1e400"#).into_bytes()),
        ("temperature NaN", chat(r#", "temperature": NaN"#).into_bytes()),
        ("temperature Infinity", chat(r#", "temperature": Infinity"#).into_bytes()),
        ("debug a string", chat(r#", "debug": "yes""#).into_bytes()),
        ("response_language a number", chat(r#", "response_language": 5"#).into_bytes()),
        ("context an array", chat(r#", "context": ["service"]"#).into_bytes()),
        ("a numeric context value", chat(r#", "context": {"service": 5}"#).into_bytes()),
        ("a nested context value", chat(r#", "context": {"service": {"name": "pg"}}"#).into_bytes()),
        ("context nested 10,000 deep", chat(&format!(r#", "context": {{"a": {}}}"#, nested(10_000, ""))).into_bytes()),
        ("messages nested 200 deep", format!(r#"{{"messages": {}}}"#, nested(200, user)).into_bytes()),
        (
            "invalid UTF-8 in content",
            [br#"{"messages": [{"role": "user", "content": "caf"#.as_slice(), b"\xE9\"}]}"].concat(),
        ),
        (
            "an overlong UTF-8 encoding",
            [br#"{"messages": [{"role": "user", "content": ""#.as_slice(), b"\xC0\xAF\"}]}"].concat(),
        ),
        ("a lone surrogate escape", br#"{"messages": [{"role": "user", "content": "\ud800"}]}"#.to_vec()),
        (
            "a raw control character in a string",
            b"{\"messages\": [{\"role\": \"user\", \"content\": \"a\x01b\"}]}".to_vec(),
        ),
        ("trailing data", [chat("").as_bytes(), b" {}"].concat()),
        ("two documents", [chat("").as_bytes(), b"\n", chat("").as_bytes()].concat()),
        ("a byte order mark", [b"\xEF\xBB\xBF".as_slice(), chat("").as_bytes()].concat()),
        ("a UTF-16 body", chat("").encode_utf16().flat_map(u16::to_le_bytes).collect()),
        ("messages twice", format!(r#"{{"messages": [{user}], "messages": [{user}]}}"#).into_bytes()),
        ("single quotes", b"{'messages': []}".to_vec()),
        ("a comment", [b"// hi\n".as_slice(), chat("").as_bytes()].concat()),
        ("a trailing comma", format!(r#"{{"messages": [{user},]}}"#).into_bytes()),
    ];
    for (name, body) in invalid_json {
        cases.add(name, post("/api/v1/chat", body).header("authorization", bearer(ADMIN_KEY)), INVALID_JSON);
    }
    let invalid_request: Vec<(&str, String)> = vec![
        ("no messages in the list", r#"{"messages": []}"#.into()),
        ("only a system message", r#"{"messages": [{"role": "system", "content": "be brief"}]}"#.into()),
        ("an assistant message first", format!(r#"{{"messages": [{assistant}, {user}]}}"#)),
        ("an assistant message last", format!(r#"{{"messages": [{user}, {assistant}]}}"#)),
        ("two user messages in a row", format!(r#"{{"messages": [{user}, {user}]}}"#)),
        ("a system message later", format!(r#"{{"messages": [{user}, {{"role": "system", "content": "x"}}]}}"#)),
        ("blank content", r#"{"messages": [{"role": "user", "content": " \n\t "}]}"#.into()),
        ("65 messages", format!(r#"{{"messages": [{many_turns}]}}"#)),
        ("max_tokens over the limit", chat(r#", "max_tokens": 4097"#)),
        ("max_tokens u32::MAX", chat(r#", "max_tokens": 4294967295"#)),
        ("temperature negative", chat(r#", "temperature": -0.1"#)),
        ("temperature over 2", chat(r#", "temperature": 2.5"#)),
        ("temperature 1e308", chat(r#", "temperature": 1e308"#)),
        ("an invalid language tag", chat(r#", "response_language": "not a language!""#)),
        ("an empty language tag", chat(r#", "response_language": """#)),
        ("33 context entries", chat(&format!(r#", "context": {{{}}}"#, big_context.join(",")))),
        ("a 65-byte context key", chat(&format!(r#", "context": {{"{}": "v"}}"#, "k".repeat(65)))),
        ("a 4097-byte context value", chat(&format!(r#", "context": {{"k": "{}"}}"#, "v".repeat(4097)))),
    ];
    for (name, body) in invalid_request {
        cases.add(name, post("/api/v1/chat", body).header("authorization", bearer(ADMIN_KEY)), INVALID_REQUEST);
    }
    cases
}

/// `POST /api/v1/runs/{id}/chat` bodies.
fn follow_up_bodies(ids: &Ids) -> Cases {
    let mut cases = Cases::new("follow-up body");
    let path = format!("/api/v1/runs/{}/chat", ids.run);
    let invalid_json: Vec<(&str, Vec<u8>)> = vec![
        ("truncated JSON", br#"{"message": "#.to_vec()),
        ("null", b"null".to_vec()),
        ("a bare string", br#""and now?""#.to_vec()),
        ("no message", b"{}".to_vec()),
        ("message null", br#"{"message": null}"#.to_vec()),
        ("message a number", br#"{"message": 7}"#.to_vec()),
        ("message a list", br#"{"message": ["and", "now"]}"#.to_vec()),
        ("the chat shape", br#"{"messages": [{"role": "user", "content": "x"}]}"#.to_vec()),
        ("context (chat only)", br#"{"message": "x", "context": {"a": "b"}}"#.to_vec()),
        ("max_tokens over u32", br#"{"message": "x", "max_tokens": 99999999999}"#.to_vec()),
        ("temperature 1e999", br#"{"message": "x", "temperature": 1e999}"#.to_vec()),
        ("invalid UTF-8", [br#"{"message": ""#.as_slice(), b"\xFF\xFE\"}"].concat()),
        ("nested 5,000 deep", format!(r#"{{"message": "x", "debug": {}}}"#, nested(5_000, "")).into_bytes()),
        ("trailing data", br#"{"message": "x"} x"#.to_vec()),
    ];
    for (name, body) in invalid_json {
        cases.add(name, post(&path, body).header("authorization", bearer(ADMIN_KEY)), INVALID_JSON);
    }
    let invalid_request: Vec<(&str, String)> = vec![
        ("an empty message", r#"{"message": ""}"#.into()),
        ("a blank message", r#"{"message": "   \n "}"#.into()),
        ("a 16,385-character message", format!(r#"{{"message": "{}"}}"#, "q".repeat(16_385))),
        ("max_tokens over the limit", r#"{"message": "x", "max_tokens": 5000}"#.into()),
        ("temperature 3", r#"{"message": "x", "temperature": 3}"#.into()),
        ("an invalid language tag", r#"{"message": "x", "response_language": "??"}"#.into()),
    ];
    for (name, body) in invalid_request {
        cases.add(name, post(&path, body).header("authorization", bearer(ADMIN_KEY)), INVALID_REQUEST);
    }
    let body = r#"{"message": "and now?"}"#;
    let admin = |request: RawRequest| request.header("authorization", bearer(ADMIN_KEY));
    cases.add("an unknown Run", admin(post(&format!("/api/v1/runs/run_{}/chat", "0".repeat(32)), body)), NOT_FOUND);
    cases.add("a malformed Run id", admin(post("/api/v1/runs/not-a-run/chat", body)), NOT_FOUND);
    cases
}

/// A provider's name, its source (`namespace/name`), webhook path and credentials.
type SourceRoute = (&'static str, &'static str, &'static str, Vec<(&'static str, String)>);

/// Authenticated deliveries whose payload the provider's adapter refuses: each is a 400
/// `invalid_payload`, counted as rejected by its source, and stores nothing.
fn alert_payloads() -> Cases {
    let mut cases = Cases::new("alert payload");
    let am_alert = r#"{"status": "firing", "labels": {"alertname": "X"}, "startsAt": "2026-11-29T22:41:16Z"}"#;
    let am = |alerts: &str| format!(r#"{{"version": "4", "status": "firing", "receiver": "r", "alerts": [{alerts}]}}"#);
    let generic_alert = |fields: &str| {
        format!(
            r#"{{"schema_version": 1, "alerts": [{{"state": "firing", "name": "X", "entity": {{"kind": "host", "id": "h"}}{fields}}}]}}"#
        )
    };
    let common: Vec<(&str, Vec<u8>)> = vec![
        ("truncated JSON", b"{\"alerts\": [".to_vec()),
        ("null", b"null".to_vec()),
        ("an array", b"[]".to_vec()),
        ("a number", b"12".to_vec()),
        ("invalid UTF-8", b"{\"alerts\": \"\xC3\x28\"}".to_vec()),
        ("nested 10,000 deep", format!(r#"{{"alerts": {}}}"#, nested(10_000, "")).into_bytes()),
        ("form-encoded", b"alerts=1&status=firing".to_vec()),
    ];
    let sources: [SourceRoute; 5] = [
        ("am", "ops/am", "/api/v1/alerts/ops/am/webhook", vec![(AM_HEADER, AM_TOKEN.to_string())]),
        ("generic", "ops/open", "/api/v1/alerts/ops/open/webhook", vec![]),
        (
            "grafana",
            "ops/grafana",
            "/api/v1/alerts/ops/grafana/webhook",
            vec![("authorization", bearer(GRAFANA_TOKEN))],
        ),
        ("kuma", "ops/kuma", "/api/v1/alerts/ops/kuma/webhook", vec![]),
        (
            "pingdom",
            "ops/pingdom",
            "/api/v1/alerts/ops/pingdom/webhook",
            vec![(PINGDOM_HEADER, PINGDOM_TOKEN.to_string())],
        ),
    ];
    let specific: [Vec<(&str, String)>; 5] = [
        vec![
            ("no alerts", am("")),
            ("alerts a string", r#"{"version": "4", "status": "firing", "alerts": "x"}"#.into()),
            ("version 3", am(am_alert).replace(r#""version": "4""#, r#""version": "3""#)),
            (
                "labels a list",
                am(r#"{"status": "firing", "labels": ["alertname"], "startsAt": "2026-11-29T22:41:16Z"}"#),
            ),
            (
                "a numeric status",
                am(r#"{"status": 5, "labels": {"alertname": "X"}, "startsAt": "2026-11-29T22:41:16Z"}"#),
            ),
            (
                "an unknown status",
                am(r#"{"status": "exploded", "labels": {"alertname": "X"}, "startsAt": "2026-11-29T22:41:16Z"}"#),
            ),
            (
                "startsAt not a time",
                am(r#"{"status": "firing", "labels": {"alertname": "X"}, "startsAt": "yesterday"}"#),
            ),
            ("startsAt 1e400", am(r#"{"status": "firing", "labels": {"alertname": "X"}, "startsAt": 1e400}"#)),
            (
                "a numeric label value",
                am(r#"{"status": "firing", "labels": {"alertname": 7}, "startsAt": "2026-11-29T22:41:16Z"}"#),
            ),
        ],
        vec![
            ("schema_version 2", generic_alert("").replace(r#""schema_version": 1"#, r#""schema_version": 2"#)),
            ("schema_version 1e400", generic_alert("").replace(r#""schema_version": 1"#, r#""schema_version": 1e400"#)),
            ("no alerts", r#"{"schema_version": 1, "alerts": []}"#.into()),
            ("alerts missing", r#"{"schema_version": 1}"#.into()),
            ("an unknown state", generic_alert("").replace("firing", "maybe")),
            ("no name", generic_alert("").replace(r#""name": "X", "#, "")),
            ("started_at not a time", generic_alert(r#", "started_at": "noon""#)),
            ("a numeric label value", generic_alert(r#", "labels": {"team": 5}"#)),
            ("a 2^70 number as a label value", generic_alert(r#", "labels": {"team": 1180591620717411303424}"#)),
        ],
        vec![
            ("no alerts", r#"{"status": "firing", "alerts": []}"#.into()),
            ("alerts an object", r#"{"status": "firing", "alerts": {"a": 1}}"#.into()),
            ("an empty object", "{}".into()),
        ],
        vec![
            ("an empty object", "{}".into()),
            ("heartbeat a string", r#"{"heartbeat": "down", "monitor": {"id": 1, "name": "m"}}"#.into()),
            ("heartbeat status a string", KUMA.replace(r#""status": 0"#, r#""status": "down""#)),
        ],
        vec![
            ("an empty object", "{}".into()),
            ("check_id a list", PINGDOM.replace("12345", "[1]")),
            ("an unknown state", PINGDOM.replace(r#""current_state": "DOWN""#, r#""current_state": "SIDEWAYS""#)),
        ],
    ];
    for ((name, source, path, headers), specific) in sources.into_iter().zip(specific) {
        let bodies = common.iter().cloned().chain(specific.into_iter().map(|(n, b)| (n, b.into_bytes())));
        for (case, body) in bodies {
            let mut request = post(path, &body);
            if name == "kuma" {
                request = request.header("x-akritas-signature", sign(KUMA_SECRET, &body));
            }
            for (header, value) in &headers {
                request = request.header(header, value);
            }
            cases.rejected(format!("{name}: {case}"), source, request, INVALID_PAYLOAD);
        }
    }
    cases
}

/// Query strings, path parameters and methods of the read routes.
fn queries_and_paths(ids: &Ids) -> Cases {
    let mut cases = Cases::new("query and path");
    let admin = |path: &str| get(path).header("authorization", bearer(ADMIN_KEY));
    for route in ["/api/v1/runs", "/api/v1/incidents"] {
        for limit in
            ["0", "1001", "-1", "many", "1.5", "1e3", "", "%FF", "18446744073709551616", "%201", "1&limit=2", "0x10"]
        {
            cases.add(format!("{route}?limit={limit}"), admin(&format!("{route}?limit={limit}")), INVALID_REQUEST);
        }
    }
    let zero_run = format!("run_{}", "0".repeat(32));
    for (name, path) in [
        ("unknown Run", format!("/api/v1/runs/{zero_run}")),
        ("Run id without prefix", format!("/api/v1/runs/{}", &ids.run[4..])),
        ("Run id in upper case", format!("/api/v1/runs/{}", ids.run.to_uppercase())),
        ("Run id with a NUL", format!("/api/v1/runs/{}%00", ids.run)),
        ("Run id of 4 KiB", format!("/api/v1/runs/run_{}", "a".repeat(4096))),
        ("an incident id as Run id", format!("/api/v1/runs/{}", ids.incident)),
        ("unknown incident", "/api/v1/incidents/inc_00000000000000000000000000000000".into()),
        ("a Run id as incident", format!("/api/v1/incidents/{}", ids.run)),
        ("unknown alert event", "/api/v1/alert-events/evt_00000000000000000000000000000000".into()),
        ("a job id as alert event", format!("/api/v1/alert-events/{}", ids.job)),
        ("unknown job", "/api/v1/investigation-jobs/job_00000000000000000000000000000000".into()),
        ("an event id as job", format!("/api/v1/investigation-jobs/{}", ids.event)),
    ] {
        cases.add(name, admin(&path), NOT_FOUND);
    }
    for path in [
        "/api/v1/runs/%FF",
        "/api/v1/incidents/%C0%AF",
        "/api/v1/alert-events/%E9",
        "/api/v1/investigation-jobs/%FF%FE",
    ] {
        cases.add(format!("invalid UTF-8 in {path}"), admin(path), INVALID_REQUEST);
    }
    let admin_as = |method: &str, path: &str| RawRequest::new(method, path).header("authorization", bearer(ADMIN_KEY));
    for (method, path) in [
        ("GET", "/api/v1/chat"),
        ("PUT", "/api/v1/chat"),
        ("DELETE", "/api/v1/runs"),
        ("PATCH", "/metrics"),
        ("GET", "/api/v1/alerts/ops/am/webhook"),
        ("GET", "/api/v1/alertmanager/webhook"),
        ("DELETE", "/health"),
        ("GET", "/v1/chat/completions"),
    ] {
        cases.add(format!("{method} {path}"), admin_as(method, path), METHOD);
    }
    for path in ["/api/v1/runs/x/y", "/api/v2/runs", "/api/v1/alerts/ops/am/webhook/x", "/v1/chat/x"] {
        cases.add(format!("GET {path}"), admin(path), NOT_FOUND);
    }
    cases
}

/// Bodies labelled with a content type that is not JSON.
fn content_types(ids: &Ids) -> Cases {
    let mut cases = Cases::new("content type");
    let follow_up = format!("/api/v1/runs/{}/chat", ids.run);
    for (path, body) in [("/api/v1/chat", chat("")), (follow_up.as_str(), r#"{"message": "and now?"}"#.to_string())] {
        for content_type in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/xml",
            "application/jsonl",
            "text/html; charset=utf-8",
        ] {
            let request = RawRequest::new("POST", path)
                .header("authorization", bearer(ADMIN_KEY))
                .header("content-type", content_type)
                .body(&body);
            cases.add(format!("{path} as {content_type}"), request, MEDIA_TYPE);
        }
    }
    // Webhooks judge the body, not its label (a sender's content type never loses a delivery
    // that decodes); a label that matches a body that is not the provider's JSON is a 400.
    let form = RawRequest::new("POST", "/api/v1/alerts/ops/open/webhook")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("state=firing&name=X");
    cases.rejected("webhook: a form", "ops/open", form, INVALID_PAYLOAD);
    let xml = RawRequest::new("POST", "/api/v1/alerts/ops/open/webhook")
        .header("content-type", "application/xml")
        .body("<alerts><alert state='firing'/></alerts>");
    cases.rejected("webhook: XML", "ops/open", xml, INVALID_PAYLOAD);
    cases
}

/// In its own process: the `/metrics` text it compares holds process-wide series (journal
/// segments, model calls) that the other tests of the tier binary move.
#[test]
fn every_bad_request_gets_its_precise_error_and_changes_nothing() {
    if akritas_testkit::in_own_process(module_path!(), "every_bad_request_gets_its_precise_error_and_changes_nothing") {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(every_bad_request());
    }
}

async fn every_bad_request() {
    let host = start().await;
    let groups = [
        api_keys(&host.ids),
        scopes(&host.ids),
        source_auth(&host.signed),
        source_routing(),
        framing(&host.ids),
        heads(),
        chat_bodies(),
        follow_up_bodies(&host.ids),
        alert_payloads(),
        queries_and_paths(&host.ids),
        content_types(&host.ids),
    ];
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let mut total = 0;
    for group in &groups {
        for case in &group.list {
            for problem in host.check(case).await {
                failures.push(format!("[{}] {}: {problem}", case.category, case.name));
            }
        }
        println!("{:>4} cases: {}", group.list.len(), group.category);
        total += group.list.len();
    }
    println!("{total:>4} cases in {:.1} s", started.elapsed().as_secs_f64());
    assert!(total >= 200, "the corpus has {total} cases");
    assert!(failures.is_empty(), "{} of {total} cases failed:\n{}", failures.len(), failures.join("\n"));

    // The host still serves: an exact replay of a signed delivery (the signature carries no
    // timestamp) is recognised as a duplicate and opens nothing; a new delivery is stored.
    let before = host.snapshot().await;
    let (body, signature) = &host.signed;
    let replay = post("/api/v1/alerts/ops/signed/webhook", body).header("x-akritas-signature", signature);
    let (status, replayed) = answer(host.addr, replay).await;
    assert_eq!(status, 200, "{replayed}");
    assert!(replayed["events"].as_array().unwrap().iter().all(|e| e["status"] == "duplicate"), "{replayed}");
    let after = host.snapshot().await;
    assert_eq!((after.incidents, after.tallies), (before.incidents.clone(), before.tallies));
    let fresh = post("/api/v1/alerts/ops/open/webhook", GENERIC.replace("db-1", "db-after"));
    let (status, stored) = answer(host.addr, fresh).await;
    assert_eq!(status, 202, "{stored}");
    assert_eq!(host.snapshot().await.incidents.len(), before.incidents.len() + 1);
}
