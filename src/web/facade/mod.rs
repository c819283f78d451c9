//! The OpenAI-compatible facade: `GET /v1/models`, `GET /v1/models/{id}` and
//! `POST /v1/chat/completions`, exposing Akritas as one model on the same
//! read-only engine, budget, audit and API keys as the native chat (audit source
//! `openai_chat`). Errors use the OpenAI envelope
//! `{"error": {"message", "type", "param", "code"}}`.

mod progress_line;
pub(crate) mod request;
mod stream;

use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use crate::audit::RunId;
use crate::engine::budget::BudgetUsage;
use crate::engine::progress;
use crate::engine::request::{RequestError, RunError, RunOutcome, RunRequest};

/// Audit source of facade Runs.
pub const SOURCE: &str = "openai_chat";
/// Response header carrying the Run id.
pub const RUN_ID_HEADER: &str = "x-akritas-run-id";
/// Progress events held between the Run and a slow stream reader.
const PROGRESS_CAPACITY: usize = 256;

/// `GET /v1/models`.
pub async fn models(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_object(&state.info.model)]}))
}

/// `GET /v1/models/{id}`.
pub async fn model(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    if id == state.info.model {
        return Json(model_object(&id)).into_response();
    }
    request::model_not_found(&id, &state.info.model).into_response()
}

fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": now(), "owned_by": "akritas"})
}

/// `POST /v1/chat/completions`: one Run; streamed as it happens when `stream` is set.
pub async fn chat_completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(error) = super::body::require_json(&headers) {
        return error.with("param", Value::Null).into_response();
    }
    let limit = state.engine.settings().max_tokens_limit;
    let completion = match request::decode(&body, &state.info.model, limit) {
        Ok(completion) => completion,
        Err(error) => return error.into_response(),
    };
    let (sink, receiver) = progress::channel(PROGRESS_CAPACITY);
    let run = RunRequest {
        namespace: caller.namespace,
        source: SOURCE.into(),
        actor: caller.name,
        turns: completion.turns.clone(),
        max_tokens: completion.max_tokens,
        temperature: completion.temperature,
        progress: completion.stream.then_some(sink),
        ..RunRequest::default()
    };
    // The Run executes on its own task: a client that goes away neither cancels it
    // nor leaves it half recorded.
    let engine = state.engine.clone();
    let task = tokio::spawn(async move { engine.run(run).await });
    let model = state.info.model.clone();
    if completion.stream {
        return stream::respond(model, &completion, receiver, task).await;
    }
    match task.await {
        Ok(Ok(outcome)) => completion_response(&model, &outcome),
        Ok(Err(error)) => run_failure(error),
        Err(_) => internal_failure().into_response(),
    }
}

fn completion_response(model: &str, outcome: &RunOutcome) -> Response {
    let body = json!({
        "id": completion_id(outcome.run_id.as_ref()),
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": outcome.answer},
            "logprobs": null,
            "finish_reason": "stop",
        }],
        "usage": usage(&outcome.usage),
    });
    let mut response = Json(body).into_response();
    if let Some(value) = outcome.run_id.as_ref().and_then(|id| HeaderValue::from_str(id.as_str()).ok()) {
        response.headers_mut().insert(RUN_ID_HEADER, value);
    }
    response
}

/// `chatcmpl-<run id>`, or a random id when the audit is disabled.
fn completion_id(run_id: Option<&RunId>) -> String {
    format!("chatcmpl-{}", run_id.cloned().unwrap_or_else(RunId::generate))
}

/// The OpenAI usage of a whole Run: the model server's reported tokens over every call.
fn usage(usage: &BudgetUsage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

/// A failed Run in the OpenAI envelope: input errors 400 naming the parameter, busy
/// 503 and audit unwritable 507 with `Retry-After`, budget 422, model server 502.
fn run_failure(error: RunError) -> Response {
    failure(error).into_response()
}

/// The error of a failed Run and how long to wait before retrying it.
fn failure(error: RunError) -> ApiError {
    let param = match &error {
        RunError::Invalid(RequestError::MaxTokens { .. }) => Value::from("max_tokens"),
        RunError::Invalid(RequestError::Temperature(_)) => Value::from("temperature"),
        RunError::Invalid(_) => Value::from("messages"),
        _ => Value::Null,
    };
    ApiError::from(error).with("param", param)
}

fn internal_failure() -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "the Run ended unexpectedly; see the server log")
        .with("param", Value::Null)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
