//! Host overhead per structured step (`llm::structured`), in each mode: building the first
//! request (`Asking::start`) and digesting a canned answer (`receive`) until `Done`, with no
//! network. This is what the host adds to every plan, result and proposal whatever the model
//! costs. The step is an investigation plan over 12 tools (`engine::plan::plan_schema`, about
//! 9 KB of schema) with the planner's prompt and a 3 KB request; the answer plans 4 checks.
//! Modes: `tool_call` (the call taken as it is; the caller validates it), `json_schema` and
//! `json_object` (the JSON content checked against the schema and made the submit call), `text`
//! (the object found in prose around a fenced block), and `text` whose first answer holds no
//! object, so that one repair request is built before the second answer is taken.
//!
//! Each protocol is fixed, so nothing is remembered between steps. Prints the time per step
//! (p50, p90, and the share spent in `start`) and the allocations per step, counted by the
//! allocator; asserts nothing about time. Run with `cargo bench --bench structured`
//! (`STRUCTURED_BENCH_STEPS` steps per mode, 2,000 by default).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use akritas::engine::plan::{PLANNER_PROMPT, PlanRoom, plan_schema};
use akritas::llm::structured::{Asking, Mode, Next, Protocol, Step};
use akritas::llm::{ChatResponse, LlmClient, LlmConfig, Message, ToolCall};
use serde_json::{Value, json};

/// The system allocator, counting allocations and the bytes they asked for.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn counters() -> (u64, u64) {
    (ALLOCATIONS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed))
}

const NAME: &str = "local_investigation_submit_plan";
const WARM_UP: usize = 100;

/// 12 execution tools, each with a closed argument schema.
fn tools() -> Vec<(String, Value)> {
    let names = [
        "kubernetes.pod_status",
        "kubernetes.logs",
        "kubernetes.events",
        "kubernetes.rollout_history",
        "kubernetes.node_status",
        "kubernetes.recent_changes",
        "postgres.activity",
        "postgres.locks",
        "mcp.victoriametrics.query",
        "mcp.victoriametrics.series",
        "inventory.host",
        "knowledge.search",
    ];
    names
        .iter()
        .map(|name| {
            let schema = json!({"type": "object", "required": ["namespace", "target"],
                "properties": {"namespace": {"type": "string", "maxLength": 63, "description": "Namespace or site."},
                               "target": {"type": "string", "maxLength": 253, "description": "What to read."}}});
            (name.to_string(), schema)
        })
        .collect()
}

fn step() -> Step {
    let request = json!({
        "request": "Why is the checkout service slow since the last deploy, and is the database the cause?",
        "context": {"service": "checkout", "namespace": "shop", "alert": "HighLatency", "severity": "critical"},
        "available_execution_tools": tools().iter().map(|(name, _)| json!({"name": name,
            "description": format!("Read-only: {name}."), "permission": "read"})).collect::<Vec<_>>(),
        "runbooks": (0..4).map(|n| format!("Runbook {n}: check latency, errors, saturation and recent changes. ").repeat(5)).collect::<Vec<_>>(),
    });
    Step {
        messages: vec![Message::system(PLANNER_PROMPT), Message::user(request.to_string())],
        name: NAME.into(),
        description: "Submit the investigation plan.".into(),
        schema: plan_schema("en", &tools(), PlanRoom::fitting(8, 1024, true)),
        grammar: None,
        max_tokens: 1024,
        temperature: Some(0.0),
    }
}

/// The plan the model submits: 4 checks and a gap.
fn plan() -> Value {
    let check = |tool: &str, target: &str| {
        json!({"step": format!("Read {target}."), "tool": tool, "arguments": {"namespace": "shop", "target": target},
               "reason": "The alert names it."})
    };
    json!({
        "checks": [check("kubernetes.pod_status", "checkout"), check("kubernetes.recent_changes", "checkout"),
                   check("postgres.activity", "db-7"), check("mcp.victoriametrics.query", "http_latency_p99")],
        "gaps": [{"step": "Read the load balancer logs.", "capability": "network.lb.logs", "reason": "Rule out the edge."}],
    })
}

fn reply(content: Option<String>, calls: Vec<ToolCall>) -> ChatResponse {
    let mut message = Message::assistant(content.unwrap_or_default());
    if !calls.is_empty() {
        message = Message::assistant_tool_calls(calls);
    }
    ChatResponse { message, finish_reason: Some("stop".into()), usage: None }
}

/// The answers a step receives in `mode`, in order.
fn answers(mode: Mode, repair: bool) -> Vec<ChatResponse> {
    let plan = plan();
    let prose = format!(
        "Sure. Based on what I was given, this is the plan:\n\n```json\n{}\n```\n\nTell me if anything is missing.",
        serde_json::to_string_pretty(&plan).unwrap()
    );
    match (mode, repair) {
        (Mode::ToolCall, _) => vec![reply(None, vec![ToolCall::function("call_1", NAME, plan.to_string())])],
        (Mode::JsonSchema | Mode::JsonObject, _) => vec![reply(Some(plan.to_string()), Vec::new())],
        (Mode::Text, false) => vec![reply(Some(prose), Vec::new())],
        (Mode::Text, true) => {
            vec![
                reply(Some("I would start with the pods, then the database.".into()), Vec::new()),
                reply(Some(prose), Vec::new()),
            ]
        }
    }
}

struct Measured {
    steps: Vec<Duration>,
    starts: Duration,
    allocations: u64,
    bytes: u64,
    requests: u32,
}

fn measure(llm: &LlmClient, mode: Mode, repair: bool, steps: usize) -> Measured {
    let template = step();
    let answers = answers(mode, repair);
    let mut measured = Measured { steps: Vec::new(), starts: Duration::ZERO, allocations: 0, bytes: 0, requests: 0 };
    for n in 0..WARM_UP + steps {
        // The caller's own values, made before the clock starts.
        let (step, mut canned) = (template.clone(), answers.clone().into_iter());
        let (allocations, bytes) = counters();
        let started = Instant::now();
        let (mut asking, first) = Asking::start(llm, "bench-model", step);
        let start = started.elapsed();
        let mut request = first;
        let answered = loop {
            let answer = canned.next().expect("a canned answer for every request");
            match asking.receive(Ok(answer)) {
                Next::Ask(next) => request = next,
                Next::Done(answered) => break answered,
                Next::Failed(error) => panic!("{mode}: {error}"),
            }
        };
        let took = started.elapsed();
        let (after_allocations, after_bytes) = counters();
        assert_eq!(answered.mode, mode);
        assert_eq!(answered.response.message.tool_calls.len(), 1, "{mode}: the plan is one submit call");
        assert!(canned.next().is_none(), "{mode}: every canned answer was asked for");
        if n >= WARM_UP {
            measured.steps.push(took);
            measured.starts += start;
            measured.allocations += after_allocations - allocations;
            measured.bytes += after_bytes - bytes;
            measured.requests = answered.requests;
        }
        drop((request, answered, asking));
    }
    measured
}

fn main() {
    akritas::install_crypto_provider();
    let steps: usize = std::env::var("STRUCTURED_BENCH_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    let schema_bytes = step().schema.to_string().len();
    println!("structured step: plan over {} tools, schema {schema_bytes} bytes, {steps} steps per mode", tools().len());
    let cases = [
        ("tool_call", Mode::ToolCall, false),
        ("json_schema", Mode::JsonSchema, false),
        ("json_object", Mode::JsonObject, false),
        ("text", Mode::Text, false),
        ("text + repair turn", Mode::Text, true),
    ];
    for (label, mode, repair) in cases {
        let config = LlmConfig { protocol: Protocol::Fixed(mode), ..LlmConfig::new("http://127.0.0.1:9/v1") };
        let llm = LlmClient::new(config, reqwest::Client::new()).expect("a valid config");
        let mut measured = measure(&llm, mode, repair, steps);
        measured.steps.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let total: Duration = measured.steps.iter().sum();
        let n = steps as u64;
        println!(
            "{label:<19} {} request(s): per step p50 {:>7.1} µs, p90 {:>7.1} µs, mean {:>7.1} µs ({:>3.0}% in start); {:>6} allocations, {:>8.1} KiB allocated",
            measured.requests,
            us(measured.steps[steps / 2]),
            us(measured.steps[steps * 9 / 10]),
            us(total) / steps as f64,
            100.0 * measured.starts.as_secs_f64() / total.as_secs_f64(),
            measured.allocations / n,
            measured.bytes as f64 / n as f64 / 1024.0,
        );
    }
}
