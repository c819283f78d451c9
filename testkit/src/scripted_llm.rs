//! A scripted OpenAI-compatible server for tests and benches.
//!
//! `POST /v1/chat/completions` answers from a script (or a responder closure), as JSON or, when the
//! request has `"stream": true`, as SSE chunks ending in `data: [DONE]`. `GET /v1/models` lists
//! `scripted-model` (configurable). Runs on its own tokio task on 127.0.0.1:0; stops when dropped.
//!
//! [`ScriptedLlm::start_as`] puts a [`Personality`] in front of a [`brain`](crate::brain): the
//! server then answers as Ollama, llama-server, vLLM, OpenAI or a reasoning model would, its
//! `/v1/models` entries and its context endpoints (`POST /api/show`, `GET /props`) included.
//! `GET /props` answers what [`ScriptedLlm::set_props`] set, when set (else the personality's, else 404).
//! [`ScriptedLlm::hold`] keeps every chat answer back (the request is recorded first) until
//! [`ScriptedLlm::release`], so a test can keep a Run inside its model call while it acts.
//! [`ScriptedLlm::set_native_api`] turns `POST /api/show` and `GET /props` off, as a proxy that
//! forwards only `/v1` does.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::brain::Answer;
use crate::personality::Personality;

pub use crate::wire::{Call, Reply};

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Step {
    pub reply: Reply,
    /// `(prompt_tokens, completion_tokens)`; `None` omits `usage`.
    pub usage: Option<(u64, u64)>,
    /// Wait this long before answering.
    pub delay: Option<Duration>,
}

impl From<Reply> for Step {
    fn from(reply: Reply) -> Self {
        Step { reply, usage: Some((10, 5)), delay: None }
    }
}

impl Step {
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    pub fn with_usage(mut self, usage: Option<(u64, u64)>) -> Self {
        self.usage = usage;
        self
    }
}

type Responder = dyn Fn(usize, &Value) -> Step + Send + Sync;

/// Whether a chat request offers the tool with this OpenAI alias.
pub fn offers(request: &Value, alias: &str) -> bool {
    request["tools"].as_array().into_iter().flatten().any(|t| t["function"]["name"].as_str() == Some(alias))
}

/// A structured result that claims nothing: inconclusive, no evidence.
pub fn inconclusive_result() -> Value {
    json!({"finding_status": "inconclusive", "actionability": "requires_human", "confidence": "low",
           "summary": "not enough data", "impact": "unknown", "evidence": [], "ruled_out": [],
           "affected_components": [], "recommended_actions": [], "production_writes": 0})
}

/// A model that plans one `postgres.activity` check of db-7, answers `answer`,
/// then submits `result` when the structuring call asks for an InvestigationResult.
pub fn investigator(result: Value, answer: &str) -> impl Fn(usize, &Value) -> Step + Send + Sync + 'static {
    let alias = |name: &str| akritas::tools::openai_alias(&akritas::tools::ToolName::try_from(name).unwrap());
    let (plan, submit, answer) =
        (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"), answer.to_string());
    move |_, request| {
        if offers(request, &plan) {
            Step::from(Reply::ToolCalls(vec![(
                "p".into(),
                plan.clone(),
                json!({"checks": [{"step": "Read database activity", "tool": "postgres.activity",
                                   "arguments": {"host": "db-7"}, "reason": "the alert names db-7"}], "gaps": []}),
            )]))
        } else if offers(request, &submit) {
            Step::from(Reply::ToolCalls(vec![("r".into(), submit.clone(), result.clone())]))
        } else {
            Step::from(Reply::Content(answer.clone()))
        }
    }
}

struct Shared {
    responder: Box<Responder>,
    /// Every chat request: (body, Authorization header).
    chats: Mutex<Vec<(Value, Option<String>)>>,
    chat_count: AtomicUsize,
    recording: AtomicBool,
    models: Mutex<Vec<String>>,
    model_requests: AtomicUsize,
    /// The server being imitated (`None`: a plain OpenAI-compatible script).
    personality: Option<Personality>,
    props: Mutex<Option<Value>>,
    /// Whether the server's own endpoints (`/api/show`, `/props`) answer.
    native: AtomicBool,
    /// While `true`, chat answers wait.
    held: tokio::sync::watch::Sender<bool>,
}

/// A running scripted server; `url` is `http://127.0.0.1:PORT/v1`.
pub struct ScriptedLlm {
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedLlm {
    /// Answers chat requests with `steps` in order; once exhausted, HTTP 500
    /// `{"error":{"message":"script exhausted after N requests"}}`.
    pub async fn start(steps: Vec<Step>) -> ScriptedLlm {
        let total = steps.len();
        let steps = Mutex::new(VecDeque::from(steps));
        Self::start_with(move |_, _| {
            lock(&steps).pop_front().unwrap_or_else(|| Step {
                reply: Reply::Error {
                    status: 500,
                    body: json!({"error": {"message": format!("script exhausted after {total} requests")}}),
                },
                usage: None,
                delay: None,
            })
        })
        .await
    }

    /// Answers every chat request with `responder(request index, request body)` (unbounded; for
    /// benches, see also [`ScriptedLlm::set_recording`]).
    pub async fn start_with(responder: impl Fn(usize, &Value) -> Step + Send + Sync + 'static) -> ScriptedLlm {
        Self::serve(Box::new(responder), None, "127.0.0.1:0").await
    }

    /// [`ScriptedLlm::start_with`] on every interface, so that a container on a bridge network
    /// reaches it (as `host.containers.internal:PORT`, PORT being [`ScriptedLlm::port`]).
    pub async fn start_for_containers(
        responder: impl Fn(usize, &Value) -> Step + Send + Sync + 'static,
    ) -> ScriptedLlm {
        Self::serve(Box::new(responder), None, "0.0.0.0:0").await
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().and_then(|p| p.trim_end_matches("/v1").parse().ok()).expect("the URL has a port")
    }

    /// Answers every chat request as `personality` would serve what `brain` means to say
    /// (see [`crate::personality`]).
    pub async fn start_as(
        personality: Personality,
        brain: impl Fn(&Value) -> Answer + Send + Sync + 'static,
    ) -> ScriptedLlm {
        let responder = move |index: usize, request: &Value| Step::from(personality.reply(index, request, &brain));
        Self::serve(Box::new(responder), Some(personality), "127.0.0.1:0").await
    }

    async fn serve(responder: Box<Responder>, personality: Option<Personality>, bind: &str) -> ScriptedLlm {
        let shared = Arc::new(Shared {
            responder,
            chats: Mutex::new(Vec::new()),
            chat_count: AtomicUsize::new(0),
            recording: AtomicBool::new(true),
            models: Mutex::new(vec!["scripted-model".to_owned()]),
            model_requests: AtomicUsize::new(0),
            personality,
            props: Mutex::new(None),
            native: AtomicBool::new(true),
            held: tokio::sync::watch::Sender::new(false),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .route("/api/show", post(ollama_show))
            .route("/props", get(llama_props))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind(bind).await.unwrap_or_else(|e| panic!("bind {bind}: {e}"));
        let port = listener.local_addr().expect("local address").port();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ScriptedLlm { url: format!("http://127.0.0.1:{port}/v1"), shared, task }
    }

    /// Replaces the ids listed by `GET /v1/models` (default `["scripted-model"]`; empty is allowed).
    pub fn set_models(&self, ids: Vec<String>) {
        *lock(&self.shared.models) = ids;
    }

    /// What `GET /props` answers, as llama-server does (`{"default_generation_settings":
    /// {"n_ctx": ..}}`); `None` (the default): 404.
    pub fn set_props(&self, props: Option<Value>) {
        *lock(&self.shared.props) = props;
    }

    /// Whether `POST /api/show` and `GET /props` answer (default); off, they answer 404 as
    /// behind a proxy that forwards only `/v1`, and the server cannot be told from its answers.
    pub fn set_native_api(&self, on: bool) {
        self.shared.native.store(on, Ordering::SeqCst);
    }

    /// Keeps every chat answer back until [`ScriptedLlm::release`] (requests are still
    /// recorded and counted when they arrive).
    pub fn hold(&self) {
        self.shared.held.send_replace(true);
    }

    /// Answers the chat requests held back, and every later one at once.
    pub fn release(&self) {
        self.shared.held.send_replace(false);
    }

    /// How many `GET /v1/models` requests were received.
    pub fn model_requests(&self) -> usize {
        self.shared.model_requests.load(Ordering::SeqCst)
    }

    /// How many chat requests were received (counted even when recording is off).
    pub fn chat_requests(&self) -> usize {
        self.shared.chat_count.load(Ordering::SeqCst)
    }

    /// Stop (or resume) keeping request bodies and headers, so long benches don't grow memory.
    pub fn set_recording(&self, on: bool) {
        self.shared.recording.store(on, Ordering::SeqCst);
    }

    /// Every chat request body received, in order (`null` for a body that is not JSON).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.chats).iter().map(|(body, _)| body.clone()).collect()
    }

    /// The `Authorization` header of each chat request, in order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        lock(&self.shared.chats).iter().map(|(_, authorization)| authorization.clone()).collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    shared.model_requests.fetch_add(1, Ordering::SeqCst);
    let entry = |id: &String| match shared.personality {
        Some(personality) => personality.model_entry(id),
        None => json!({"id": id, "object": "model"}),
    };
    let data: Vec<Value> = lock(&shared.models).iter().map(entry).collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// Ollama's `POST /api/show` (`{"model": ...}`, formerly `{"name": ...}`).
async fn ollama_show(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = request["model"].as_str().or_else(|| request["name"].as_str()).unwrap_or_default();
    let native = shared.native.load(Ordering::SeqCst);
    match shared.personality.filter(|_| native).and_then(|p| p.ollama_show(model)) {
        Some(show) => Json(show).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// llama-server's `GET /props`.
async fn llama_props(State(shared): State<Arc<Shared>>) -> Response {
    if !shared.native.load(Ordering::SeqCst) {
        return StatusCode::NOT_FOUND.into_response();
    }
    if let Some(props) = lock(&shared.props).clone() {
        return Json(props).into_response();
    }
    let model = lock(&shared.models).first().cloned().unwrap_or_default();
    match shared.personality.and_then(|p| p.llama_props(&model)) {
        Some(props) => Json(props).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn chat(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let authorization = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let index = {
        let mut chats = lock(&shared.chats);
        let index = shared.chat_count.fetch_add(1, Ordering::SeqCst);
        if shared.recording.load(Ordering::SeqCst) {
            chats.push((request.clone(), authorization));
        }
        index
    };
    let step = (shared.responder)(index, &request);
    let _ = shared.held.subscribe().wait_for(|held| !held).await;
    if let Some(delay) = step.delay {
        tokio::time::sleep(delay).await;
    }
    let model = request["model"].as_str().unwrap_or("scripted-model").to_owned();
    let id = format!("chatcmpl-scripted-{index}");
    if request["stream"] == Value::Bool(true) {
        let include_usage = request["stream_options"]["include_usage"] == Value::Bool(true);
        stream_reply(step, &id, &model, include_usage)
    } else {
        json_reply(step, &id, &model)
    }
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn usage_json(usage: Option<(u64, u64)>) -> Option<Value> {
    usage.map(|(prompt, completion)| {
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
    })
}

/// Non-terminal replies (errors, raw bodies) are the same streamed or not.
fn error_reply(reply: Reply) -> Result<Response, Reply> {
    match reply {
        Reply::Error { status: code, body } => Ok((status(code), Json(body)).into_response()),
        Reply::Raw { status: code, body } => {
            let content_type =
                if serde_json::from_str::<Value>(&body).is_ok() { "application/json" } else { "text/plain" };
            Ok((status(code), [(header::CONTENT_TYPE, content_type)], body).into_response())
        }
        other => Err(other),
    }
}

fn json_reply(step: Step, id: &str, model: &str) -> Response {
    let reply = match error_reply(step.reply) {
        Ok(response) => return response,
        Err(reply) => reply,
    };
    let (content, reasoning, calls) = parts(reply);
    let mut message = json!({"role": "assistant", "content": content});
    if let Some(reasoning) = reasoning {
        message["reasoning_content"] = Value::String(reasoning);
    }
    let finish_reason = if calls.is_empty() { "stop" } else { "tool_calls" };
    if !calls.is_empty() {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(call_id, name, arguments)| {
                json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    let mut body = json!({
        "id": id, "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    });
    if let Some(usage) = usage_json(step.usage) {
        body["usage"] = usage;
    }
    Json(body).into_response()
}

/// A successful reply as (content, reasoning, tool calls).
fn parts(reply: Reply) -> (Option<String>, Option<String>, Vec<Call>) {
    match reply {
        Reply::Content(text) => (Some(text), None, Vec::new()),
        Reply::ToolCalls(calls) => (None, None, calls),
        Reply::Message { content, reasoning, tool_calls } => (content, reasoning, tool_calls),
        Reply::Error { .. } | Reply::Raw { .. } => unreachable!("handled by error_reply"),
    }
}

/// Streamed content as a server tokenizes it: `<think>` and `</think>` are single tokens,
/// each run of text between them comes in up to three pieces.
fn content_pieces(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let tag = ["<think>", "</think>"].iter().filter_map(|tag| rest.find(tag).map(|at| (at, *tag))).min();
        match tag {
            Some((0, tag)) => {
                pieces.push(tag.to_owned());
                rest = &rest[tag.len()..];
            }
            Some((at, _)) => {
                pieces.extend(split_chars(&rest[..at], 3));
                rest = &rest[at..];
            }
            None => {
                pieces.extend(split_chars(rest, 3));
                rest = "";
            }
        }
    }
    pieces
}

/// Splits `text` into at most `parts` non-empty pieces on char boundaries.
fn split_chars(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(parts.max(1));
    chars.chunks(size).map(|chunk| chunk.iter().collect()).collect()
}

fn stream_reply(step: Step, id: &str, model: &str, include_usage: bool) -> Response {
    let reply = match error_reply(step.reply) {
        Ok(response) => return response,
        Err(reply) => reply,
    };
    let chunk = |delta: Value, finish_reason: Option<&str>| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    };
    let mut chunks = vec![chunk(json!({"role": "assistant"}), None)];
    let (content, reasoning, calls) = parts(reply);
    for piece in reasoning.as_deref().map(|text| split_chars(text, 2)).unwrap_or_default() {
        chunks.push(chunk(json!({"reasoning_content": piece}), None));
    }
    for piece in content.as_deref().map(content_pieces).unwrap_or_default() {
        chunks.push(chunk(json!({"content": piece}), None));
    }
    for (index, (call_id, name, arguments)) in calls.iter().enumerate() {
        let arguments = arguments.to_string();
        let mut halves = split_chars(&arguments, 2).into_iter();
        let first = halves.next().unwrap_or_default();
        let second = halves.collect::<String>();
        chunks.push(chunk(
            json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                   "function": {"name": name, "arguments": first}}]}),
            None,
        ));
        chunks.push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": second}}]}), None));
    }
    let finish_reason = if calls.is_empty() { "stop" } else { "tool_calls" };
    chunks.push(chunk(json!({}), Some(finish_reason)));
    if include_usage && let Some(usage) = usage_json(step.usage) {
        chunks.push(json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [], "usage": usage,
        }));
    }
    let mut body = String::new();
    for chunk in chunks {
        body.push_str("data: ");
        body.push_str(&chunk.to_string());
        body.push_str("\n\n");
    }
    body.push_str("data: [DONE]\n\n");
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}
