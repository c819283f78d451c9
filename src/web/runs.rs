//! Native chat and Run routes: `POST /api/v1/chat`, `GET /api/v1/runs`,
//! `GET /api/v1/runs/{id}`, `GET /api/v1/runs/{id}/export`, `POST /api/v1/runs/{id}/chat`,
//! `GET /api/v1/tools`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::auth::Caller;
use super::body::JsonBytes;
use super::engine_schema::{BudgetLimitsSchema, BudgetUsageSchema, CapabilityGapSchema, ContextCutsSchema, TurnSchema};
use super::error::ApiError;
use super::{AppState, IdPath, ListQuery};
use crate::audit::{AuditLog, RunId, RunRecord};
use crate::engine::budget::{BudgetLimits, BudgetUsage};
use crate::engine::conversation::Turn;
use crate::engine::fit::ContextCuts;
use crate::engine::plan::CapabilityGap;
use crate::engine::request::{RunError, RunOutcome, RunRequest};
use crate::engine::skills::skills_of;
use crate::replay::{Case, ExportCatalog};
use crate::resources::mcp_adapter::Permission;
use crate::tools::ToolResult;

/// A strict chat request body: the route's own fields, then the answer options both chat routes
/// take. A macro rather than a flattened struct, because serde's `flatten` cannot be combined
/// with `deny_unknown_fields`, and a misspelt option must be refused, not ignored.
macro_rules! chat_body {
    ($(#[$doc:meta])* $name:ident { $($own:tt)* }) => {
        $(#[$doc])*
        #[derive(Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($own)*
            /// Output tokens of the answer, at most the configured limit (absent or 0: the host's default).
            #[serde(default)]
            max_tokens: Option<u32>,
            /// Sampling temperature, 0 to 2.
            #[serde(default)]
            #[schemars(range(min = 0.0, max = 2.0))]
            temperature: Option<f64>,
            /// Add each tool call's arguments and result to `activity`.
            #[serde(default)]
            debug: bool,
            /// Language of the answer (BCP 47), instead of the host's default.
            #[serde(default)]
            response_language: Option<String>,
        }
    };
}

chat_body! {
    /// Body of `POST /api/v1/chat`.
    ChatBody {
        /// The conversation (at most 64 messages, 256 KiB of content): an optional
        /// system message first, at least one user message, the last one from the user.
        #[schemars(with = "Vec<TurnSchema>", length(min = 1, max = 64))]
        messages: Vec<Turn>,
        /// Facts for the Run (at most 32; keys up to 64, values up to 4096 bytes).
        #[serde(default)]
        context: BTreeMap<String, String>,
    }
}

chat_body! {
    /// Body of `POST /api/v1/runs/{id}/chat`.
    FollowUpBody {
        /// The follow-up question.
        #[schemars(length(min = 1))]
        message: String,
    }
}

/// The answer of a chat or follow-up.
#[derive(Serialize, JsonSchema)]
pub struct ChatAnswer {
    /// The audit Run (absent when the host keeps no audit journal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// Upstream model id.
    pub model: String,
    /// The answer (Markdown).
    pub answer: String,
    /// Selected skills.
    pub skills: Vec<String>,
    /// Every executed tool call, in order.
    pub activity: Vec<ActivityView>,
    /// Steps no authorized tool could perform.
    #[schemars(with = "Vec<CapabilityGapSchema>")]
    pub capability_gaps: Vec<CapabilityGap>,
    /// Catalog version the Run pinned.
    pub catalog_version: u64,
    /// Limits and usage of the Run.
    pub budget: BudgetView,
    /// Why the plan was not used, if it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_error: Option<String>,
    /// How the structured steps (plan, result) were asked for: `tool_call`,
    /// `json_schema`, `json_object` or `text` (see the `model_protocol` setting).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_protocol: Option<String>,
    /// Each fallback of the structured steps (`plan: tool_call -> json_schema`; absent when
    /// the first mode answered).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_protocol_fallbacks: Vec<String>,
    /// What was cut to fit the model's context window (absent when nothing was).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<ContextCutsSchema>")]
    pub context_cuts: Option<ContextCuts>,
}

/// One executed tool call of a chat answer.
#[derive(Serialize, JsonSchema)]
pub struct ActivityView {
    /// Host tool name.
    pub name: String,
    /// Call id.
    pub id: String,
    /// `ok` or the error code.
    pub status: String,
    /// Wall time of the call in milliseconds, measured around the tool's whole execution.
    pub duration_ms: u64,
    /// Arguments as the host passed them (`debug` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The raw result (`debug` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ToolResult>,
}

/// Budget of a Run.
#[derive(Serialize, JsonSchema)]
pub struct BudgetView {
    /// The limits.
    #[schemars(with = "BudgetLimitsSchema")]
    pub limits: BudgetLimits,
    /// What the Run used.
    #[schemars(with = "BudgetUsageSchema")]
    pub usage: BudgetUsage,
}

/// `GET /api/v1/runs`.
#[derive(Serialize, JsonSchema)]
pub struct RunList {
    /// Newest first, without raw tool arguments and results.
    pub runs: Vec<RunRecord>,
}

/// `GET /api/v1/runs/{id}`.
#[derive(Serialize, JsonSchema)]
pub struct RunDetail {
    /// The Run with its events.
    pub run: RunRecord,
}

/// `GET /api/v1/tools`.
#[derive(Serialize, JsonSchema)]
pub struct ToolList {
    /// The authorized read-only tools.
    pub tools: Vec<ToolView>,
}

/// A tool a Run may call.
#[derive(Serialize, JsonSchema)]
pub struct ToolView {
    /// Host tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// What it may do.
    pub permission: Permission,
}

/// Most context facts in a chat request.
const MAX_CONTEXT_ENTRIES: usize = 32;

/// Checks the context facts of a chat (and of the MCP `ask` tool) against their bounds.
pub(super) fn check_context(context: &BTreeMap<String, String>) -> Result<(), String> {
    if context.len() > MAX_CONTEXT_ENTRIES || context.iter().any(|(k, v)| k.len() > 64 || v.len() > 4096) {
        return Err(format!(
            "context allows at most {MAX_CONTEXT_ENTRIES} entries with keys up to 64 and values up to 4096 bytes"
        ));
    }
    Ok(())
}

/// `POST /api/v1/chat`.
pub async fn chat(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: JsonBytes<ChatBody>,
) -> Response {
    let body = match body.decode(&headers) {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    if let Err(message) = check_context(&body.context) {
        return ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message).into_response();
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
    Path(IdPath { id }): Path<IdPath>,
    headers: HeaderMap,
    body: JsonBytes<FollowUpBody>,
) -> Response {
    if state.engine.audit().is_none() {
        return audit_disabled().into_response();
    }
    let Some(run_id) = RunId::parse(&id) else { return run_not_found().into_response() };
    // A Run of a namespace the key does not read does not exist for it; the
    // follow-up continues in the Run's own namespace.
    let Some(audit) = state.engine.audit() else { return audit_disabled().into_response() };
    let namespace = match audit.namespace_of(&run_id).await {
        Ok(Some(namespace)) => namespace,
        Ok(None) => return run_not_found().into_response(),
        Err(error) => return audit_unreadable(error).into_response(),
    };
    if !caller.sees(&namespace) {
        return run_not_found().into_response();
    }
    let body = match body.decode(&headers) {
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
        Ok(outcome) => Json(ChatAnswer::new(outcome, debug)).into_response(),
        Err(error) => ApiError::from(error).into_response(),
    }
}

impl ChatAnswer {
    /// The answer of a finished Run; `debug` adds raw tool arguments and results.
    pub fn new(outcome: RunOutcome, debug: bool) -> Self {
        let activity = outcome
            .activity
            .into_iter()
            .map(|a| ActivityView {
                name: a.name,
                id: a.id,
                status: a.status,
                duration_ms: a.duration_ms,
                arguments: debug.then_some(a.arguments),
                result: debug.then_some(a.result),
            })
            .collect();
        ChatAnswer {
            run_id: outcome.run_id,
            model: outcome.model,
            answer: outcome.answer,
            skills: outcome.skills,
            activity,
            capability_gaps: outcome.gaps,
            catalog_version: outcome.catalog_version,
            budget: BudgetView { limits: outcome.limits, usage: outcome.usage },
            plan_error: outcome.plan_error,
            model_protocol: outcome.model_protocol,
            model_protocol_fallbacks: outcome.model_protocol_fallbacks,
            context_cuts: Some(outcome.context_cuts).filter(|cuts| !cuts.is_empty()),
        }
    }
}

/// A failed Run's answer, decided here for every route: input errors 400, busy 503 and audit
/// unwritable 507 with `Retry-After`, budget 422 (with the dimension and usage), the model
/// server 502, an unknown Run 404, a Run answering another follow-up 409.
impl From<RunError> for ApiError {
    fn from(error: RunError) -> Self {
        let status = match &error {
            RunError::Invalid(_) => StatusCode::BAD_REQUEST,
            // The audit journal cannot be written (disk full, read-only volume): nothing was recorded.
            RunError::Audit(audit) if audit.is_unwritable() => StatusCode::INSUFFICIENT_STORAGE,
            RunError::Busy(_) | RunError::Audit(_) => StatusCode::SERVICE_UNAVAILABLE,
            RunError::Budget { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            RunError::Upstream { .. } | RunError::Model { .. } | RunError::Structure { .. } => StatusCode::BAD_GATEWAY,
            RunError::UnknownRun => StatusCode::NOT_FOUND,
            RunError::RunBusy(_) => StatusCode::CONFLICT,
        };
        let retry_after = match &error {
            RunError::Busy(_) => Some("5"),
            RunError::Audit(audit) if audit.is_unwritable() => Some("10"),
            _ => None,
        };
        let mut api = ApiError::new(status, error.code(), error.to_string());
        api.retry_after = retry_after;
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
}

/// `GET /api/v1/runs?limit=`.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<Json<RunList>, ApiError> {
    let audit = state.engine.audit().ok_or_else(audit_disabled)?;
    let limit = query.limit()?;
    let runs = audit.list_where(limit, |namespace| caller.sees(namespace)).await.map_err(audit_unreadable)?;
    Ok(Json(RunList { runs }))
}

/// `GET /api/v1/runs/{id}`.
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<RunDetail>, ApiError> {
    let audit = state.engine.audit().ok_or_else(audit_disabled)?;
    match visible_run(audit, &caller, &id).await? {
        Some(run) => Ok(Json(RunDetail { run })),
        None => Err(run_not_found()),
    }
}

/// `GET /api/v1/runs/{id}/export`: the finished Run as a replayable case, with the
/// catalog (skills, tool schemas) its namespace sees now.
pub async fn export(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<Case>, ApiError> {
    let audit = state.engine.audit().ok_or_else(audit_disabled)?;
    let run = visible_run(audit, &caller, &id).await?.ok_or_else(run_not_found)?;
    let tools = state.engine.tools_for(&run.namespace);
    let catalog = state.catalog.current();
    let skills = skills_of(&catalog, &state.engine.tenancy().scope(&run.namespace));
    let exported = ExportCatalog { tools: &tools, skills: &skills, version: catalog.version };
    let mut case = crate::replay::export(&run, &exported)
        .map_err(|error| ApiError::new(StatusCode::CONFLICT, error.code(), error.to_string()))?;
    if let Some(store) = &state.alerts {
        supply_alert_input(&mut case, &run, store).await;
    }
    Ok(Json(case))
}

/// An alert investigation's input is the alert and its incident, which the alert
/// store still holds: the case gets it when the rebuilt input has the hash the Run
/// recorded (a Run whose alert retention removed, or recorded before the prompt
/// kept only the incident's fixed facts, is exported without input).
async fn supply_alert_input(case: &mut Case, run: &RunRecord, store: &crate::alerts::store::AlertStore) {
    if !run.source.starts_with("alert:") {
        return;
    }
    let Some(job_id) = run.metadata.get("job_id").and_then(Value::as_str) else { return };
    if let Some((turns, context)) = crate::alerts::request::rebuilt_input(store, job_id).await {
        // A mismatch leaves the case without input, as for any other Run.
        let _ = case.supply_turns(turns, context);
    }
}

/// Run `id` when the caller reads its namespace (otherwise it does not exist for it).
pub(super) async fn visible_run(audit: &AuditLog, caller: &Caller, id: &str) -> Result<Option<RunRecord>, ApiError> {
    let Some(id) = RunId::parse(id) else { return Ok(None) };
    let run = audit.get(&id).await.map_err(audit_unreadable)?;
    Ok(run.filter(|run| caller.sees(&run.namespace)))
}

/// The audit could not be read (its database is unreachable): 503, retry shortly.
pub(super) fn audit_unreadable(error: crate::audit::AuditError) -> ApiError {
    let mut api = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "audit_unavailable", error.to_string());
    api.retry_after = Some("5");
    api
}

/// `GET /api/v1/tools`: the authorized read-only tools a Run of the caller's
/// namespace gets.
pub async fn tools(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> Json<ToolList> {
    let tools = state
        .engine
        .tools_for(&caller.namespace)
        .definitions()
        .iter()
        .map(|spec| ToolView {
            name: spec.name.as_str().to_string(),
            description: spec.description.clone(),
            permission: spec.permission,
        })
        .collect();
    Json(ToolList { tools })
}

fn run_not_found() -> ApiError {
    ApiError::not_found("run not found")
}

pub(super) fn audit_disabled() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "audit_disabled", "the audit journal is disabled on this host")
}
