//! Native chat and Run routes: `POST /api/v1/chat`, `GET /api/v1/runs`,
//! `GET /api/v1/runs/{id}`, `POST /api/v1/runs/{id}/chat`, `GET /api/v1/tools`.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use crate::audit::{MAX_LIST, RunId};
use crate::engine::conversation::Turn;
use crate::engine::request::{RunError, RunOutcome, RunRequest};

/// Body of `POST /api/v1/chat`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatBody {
    messages: Vec<Turn>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    debug: bool,
    #[serde(default)]
    response_language: Option<String>,
    #[serde(default)]
    context: BTreeMap<String, String>,
}

/// Body of `POST /api/v1/runs/{id}/chat`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FollowUpBody {
    message: String,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    debug: bool,
    #[serde(default)]
    response_language: Option<String>,
}

/// Most context facts in a chat request.
const MAX_CONTEXT_ENTRIES: usize = 32;

/// Decodes a strict JSON body with a message naming the offending field.
pub fn decode<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let message = if path == "." || path.is_empty() { inner.to_string() } else { format!("{path}: {inner}") };
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", format!("invalid request body: {message}"))
    })?;
    deserializer.end().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "invalid request body: trailing data after the JSON value",
        )
    })?;
    Ok(value)
}

/// Refuses a body labelled as anything but JSON (`application/json` or `application/*+json`);
/// a body without a label is read as JSON.
pub(super) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    let essence = value.to_str().ok().and_then(|v| v.split(';').next()).map(|v| v.trim().to_ascii_lowercase());
    match essence.as_deref() {
        Some(m) if m == "application/json" || (m.starts_with("application/") && m.ends_with("+json")) => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the request body must be JSON: send it with `Content-Type: application/json`",
        )),
    }
}

/// `POST /api/v1/chat`.
pub async fn chat(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(error) = require_json(&headers) {
        return error.into_response();
    }
    let body: ChatBody = match decode(&body) {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    if body.context.len() > MAX_CONTEXT_ENTRIES || body.context.iter().any(|(k, v)| k.len() > 64 || v.len() > 4096) {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!(
                "context allows at most {MAX_CONTEXT_ENTRIES} entries with keys up to 64 and values up to 4096 bytes"
            ),
        )
        .into_response();
    }
    let request = RunRequest {
        namespace: caller.namespace,
        source: "chat".into(),
        actor: caller.name,
        turns: body.messages,
        max_tokens: body.max_tokens,
        temperature: body.temperature,
        response_language: body.response_language,
        context: body.context,
        ..RunRequest::default()
    };
    respond(state.engine.run(request).await, body.debug)
}

/// `POST /api/v1/runs/{id}/chat`.
pub async fn follow_up(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if state.engine.audit().is_none() {
        return audit_disabled().into_response();
    }
    let Some(run_id) = RunId::parse(&id) else { return run_not_found().into_response() };
    // A Run of a namespace the key does not read does not exist for it; the
    // follow-up continues in the Run's own namespace.
    let Some(namespace) = state.engine.audit().and_then(|audit| audit.namespace_of(&run_id)) else {
        return run_not_found().into_response();
    };
    if !caller.sees(&namespace) {
        return run_not_found().into_response();
    }
    if let Err(error) = require_json(&headers) {
        return error.into_response();
    }
    let body: FollowUpBody = match decode(&body) {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    let request = RunRequest {
        namespace,
        source: "follow_up".into(),
        actor: caller.name,
        max_tokens: body.max_tokens,
        temperature: body.temperature,
        response_language: body.response_language,
        ..RunRequest::default()
    };
    respond(state.engine.follow_up(&run_id, &body.message, request).await, body.debug)
}

fn respond(result: Result<RunOutcome, RunError>, debug: bool) -> Response {
    match result {
        Ok(outcome) => Json(outcome_json(&outcome, debug)).into_response(),
        Err(error) => {
            let retry_after = retry_after(&error);
            with_retry_after(run_error(error).into_response(), retry_after)
        }
    }
}

/// Seconds a client should wait before retrying a Run that failed this way.
pub fn retry_after(error: &RunError) -> Option<&'static str> {
    match error {
        RunError::Busy { .. } => Some("5"),
        RunError::Audit(audit) if audit.is_unwritable() => Some("10"),
        _ => None,
    }
}

/// The response with a `Retry-After` header when `seconds` is set.
pub fn with_retry_after(mut response: Response, seconds: Option<&'static str>) -> Response {
    if let Some(seconds) = seconds {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(seconds));
    }
    response
}

/// The chat response body.
pub fn outcome_json(outcome: &RunOutcome, debug: bool) -> Value {
    let activity: Vec<Value> = outcome
        .activity
        .iter()
        .map(|a| {
            let mut item = json!({"name": a.name, "id": a.id, "status": a.status, "duration_ms": a.duration_ms});
            if debug {
                item["arguments"] = a.arguments.clone();
                item["result"] = serde_json::to_value(&a.result).unwrap_or(Value::Null);
            }
            item
        })
        .collect();
    let mut body = json!({
        "model": outcome.model,
        "answer": outcome.answer,
        "skills": outcome.skills,
        "activity": activity,
        "capability_gaps": outcome.gaps,
        "catalog_version": outcome.catalog_version,
        "budget": {"limits": outcome.limits, "usage": outcome.usage},
    });
    if let Some(id) = &outcome.run_id {
        body["run_id"] = json!(id);
    }
    if let Some(error) = &outcome.plan_error {
        body["plan_error"] = json!(error);
    }
    body
}

/// Maps a Run failure to its HTTP answer.
pub fn run_error(error: RunError) -> ApiError {
    let status = match &error {
        RunError::Invalid(_) => StatusCode::BAD_REQUEST,
        // The audit journal cannot be written (disk full, read-only volume): nothing was recorded.
        RunError::Audit(audit) if audit.is_unwritable() => StatusCode::INSUFFICIENT_STORAGE,
        RunError::Busy { .. } | RunError::Audit(_) => StatusCode::SERVICE_UNAVAILABLE,
        RunError::Budget { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        RunError::Upstream { .. } | RunError::Model { .. } | RunError::Structure { .. } => StatusCode::BAD_GATEWAY,
        RunError::UnknownRun => StatusCode::NOT_FOUND,
        RunError::RunBusy(_) => StatusCode::CONFLICT,
    };
    let mut api = ApiError::new(status, error.code(), error.to_string());
    if let Some(id) = error.run_id() {
        api = api.with("run_id", id.as_str());
    }
    if let RunError::Budget { exhausted, usage, .. } = &error {
        api = api
            .with("dimension", exhausted.dimension.as_str())
            .with("usage", serde_json::to_value(usage).unwrap_or(Value::Null));
    }
    api
}

#[derive(Deserialize)]
pub struct ListQuery {
    limit: Option<String>,
}

/// `GET /api/v1/runs?limit=`.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Response {
    let Some(audit) = state.engine.audit() else { return audit_disabled().into_response() };
    let limit = match query.limit.as_deref().map(str::parse::<usize>) {
        None => 100,
        Some(Ok(n)) if (1..=MAX_LIST).contains(&n) => n,
        Some(_) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("limit must be an integer from 1 to {MAX_LIST}"),
            )
            .into_response();
        }
    };
    Json(json!({ "runs": audit.list_where(limit, |namespace| caller.sees(namespace)) })).into_response()
}

/// `GET /api/v1/runs/{id}`.
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let Some(audit) = state.engine.audit() else { return audit_disabled().into_response() };
    match RunId::parse(&id).and_then(|id| audit.get(&id)).filter(|run| caller.sees(&run.namespace)) {
        Some(run) => Json(json!({ "run": run })).into_response(),
        None => run_not_found().into_response(),
    }
}

/// `GET /api/v1/tools`: the authorized read-only tools a Run of the caller's
/// namespace gets.
pub async fn tools(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> Json<Value> {
    let tools: Vec<Value> = state
        .engine
        .tools_for(&caller.namespace)
        .definitions()
        .iter()
        .map(|spec| json!({"name": spec.name.as_str(), "description": spec.description, "permission": spec.permission}))
        .collect();
    Json(json!({ "tools": tools }))
}

fn run_not_found() -> ApiError {
    ApiError::not_found("run not found")
}

fn audit_disabled() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "audit_disabled", "the audit journal is disabled on this host")
}
