//! The HTTP surface (axum): health, the resource view and, behind API-key auth,
//! everything under `/api` and `/v1`.

pub(crate) mod alerts;
pub mod auth;
pub(crate) mod body;
pub(crate) mod bots;
pub(crate) mod change;
pub mod edge;
pub(crate) mod engine_schema;
pub(crate) mod error;
pub(crate) mod facade;
pub mod listen;
pub mod mcp_server;
mod mcp_sessions;
pub mod metrics;
pub(crate) mod openapi;
pub(crate) mod runs;
pub(crate) mod schedules;
pub(crate) mod status;
pub mod ui;
pub(crate) mod webhook_names;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aide::axum::ApiRouter;
use aide::axum::routing::{get_with, post_with};
use aide::openapi::OpenApi;
use aide::transform::TransformOperation;
use axum::extract::{DefaultBodyLimit, Extension, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use self::auth::ApiKeys;
use self::error::ApiError;
use self::openapi::{keyed, own_credentials};
use crate::audit::MAX_LIST;
use crate::catalog::CatalogStore;
use crate::catalog::status::StatusBoard;
use crate::engine::run::Engine;

/// Everything the handlers read.
#[derive(Clone)]
pub struct AppState {
    /// The published Catalog.
    pub catalog: CatalogStore,
    /// Per-object load outcomes.
    pub board: StatusBoard,
    /// Configured API keys.
    pub keys: Arc<ApiKeys>,
    /// The run engine.
    pub engine: Arc<Engine>,
    /// The alert store (absent when alert ingestion is disabled).
    pub alerts: Option<Arc<crate::alerts::store::AlertStore>>,
    /// Secret resolution for alert-source authentication.
    pub secrets: Arc<dyn crate::catalog::secrets::SecretResolver>,
    /// Facts shown by `/health`.
    pub info: Arc<HostInfo>,
    /// The change pipeline (absent when the host keeps no data directory).
    pub change: Option<Arc<crate::change::service::ChangeService>>,
    /// The bots (absent when none is configured to run).
    pub bots: Option<Arc<crate::bots::host::Bots>>,
    /// The scheduler of RunSchedules (absent on a host that runs none).
    pub schedules: Option<Arc<crate::schedules::Scheduler>>,
}

/// Static facts about the running host.
#[derive(Clone, Debug)]
pub struct HostInfo {
    /// `standalone` or `kubernetes`.
    pub mode: &'static str,
    /// Model id Akritas exposes.
    pub model: String,
    /// Default response language.
    pub response_language: String,
    /// SHA-256 of the loaded SYSTEM.md.
    pub instructions_sha256: String,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Longest pause between two parts of a request body.
    pub body_timeout: Duration,
    /// Limits of the MCP server at `/mcp`.
    pub mcp: mcp_server::McpLimits,
    /// How validators are confined (`landlock ABI 7 …`, `off: …`, `unavailable: …`).
    pub validator_sandbox: String,
    /// The names this host answers to, and its public origin.
    pub edge: edge::Edge,
    /// The database the stores are in, as last probed, and this replica (`storage_backend: postgres`).
    pub database: Option<(crate::journal::database::HealthWatch, crate::journal::database::Replica)>,
    /// The namespace whose resources the one-segment webhook URLs name (`webhook_namespace`).
    pub webhook_namespace: String,
}

/// The native API with its documentation: every route under `/api/v1` and
/// `/health`, the answers each gives, and `keys` guarding the protected ones.
/// `/metrics` (Prometheus text) is served but not part of the JSON contract.
fn api(keys: Arc<ApiKeys>) -> ApiRouter<AppState> {
    let protected = ApiRouter::new()
        .api_route(
            "/api/v1/resources",
            get_with(status::resources, |op| {
                keyed(op.tag("status").summary("Resources the caller reads, with their load outcome"))
            }),
        )
        .api_route(
            "/api/v1/chat",
            post_with(runs::chat, |op| {
                keyed(op.tag("runs").summary("Ask a question: one read-only Run"))
                    .response::<200, Json<runs::ChatAnswer>>()
            }),
        )
        .api_route(
            "/api/v1/schedules",
            get_with(schedules::list, |op| {
                keyed(op.tag("schedules").summary("RunSchedules the caller reads, with their status"))
            }),
        )
        .api_route(
            "/api/v1/schedules/{namespace}/{name}/run",
            post_with(schedules::run_now, |op| {
                keyed(
                    op.tag("schedules").summary("Run a RunSchedule of the caller's namespace now (body empty or `{}`)"),
                )
                .response::<202, Json<schedules::RunNowAccepted>>()
                .with(optional_body)
            }),
        )
        .api_route("/api/v1/runs", get_with(runs::list, |op| keyed(op.tag("runs").summary("Runs, newest first"))))
        .api_route(
            "/api/v1/runs/{id}",
            get_with(runs::get, |op| keyed(op.tag("runs").summary("A Run with its events and raw tool results"))),
        )
        .api_route(
            "/api/v1/runs/{id}/export",
            get_with(runs::export, |op| {
                keyed(
                    op.tag("runs").summary("A finished Run as a replayable case (input hash, catalog, recorded calls)"),
                )
            }),
        )
        .api_route(
            "/api/v1/runs/{id}/chat",
            post_with(runs::follow_up, |op| {
                keyed(op.tag("runs").summary("Ask a follow-up about a finished Run"))
                    .response::<200, Json<runs::ChatAnswer>>()
            }),
        )
        .api_route(
            "/api/v1/tools",
            get_with(runs::tools, |op| {
                keyed(op.tag("runs").summary("The read-only tools a Run of the caller's namespace gets"))
            }),
        )
        .api_route(
            "/api/v1/workspaces",
            get_with(change::workspaces, |op| keyed(op.tag("change").summary("Workspaces the caller may change"))),
        )
        .api_route(
            "/api/v1/workspaces/{namespace}/{name}/fetch",
            post_with(change::fetch, |op| {
                keyed(op.tag("change").summary("Fetch a git Workspace now (body empty or `{}`)")).with(optional_body)
            }),
        )
        .api_route(
            "/api/v1/change/simulations",
            post_with(change::simulate, |op| {
                keyed(op.tag("change").summary("Prepare a verified change; never writes"))
                    .response::<200, Json<crate::change::service::PreviewOutcome>>()
            }),
        )
        .api_route(
            "/api/v1/change/simulations/{id}",
            get_with(change::simulation, |op| keyed(op.tag("change").summary("A pending or finished change"))),
        )
        .api_route(
            "/api/v1/change/simulations/{id}/apply",
            post_with(change::apply, |op| {
                keyed(op.tag("change").summary("Apply an approved change once (`admin` key, `{\"confirm\": true}`)"))
                    .response::<200, Json<crate::change::service::ApplyOutcome>>()
            }),
        )
        .api_route(
            "/api/v1/incidents",
            get_with(alerts::incidents, |op| keyed(op.tag("alerts").summary("Incidents, newest first"))),
        )
        .api_route(
            "/api/v1/incidents/{id}",
            get_with(alerts::incident, |op| {
                keyed(op.tag("alerts").summary("An incident with its events, jobs, Runs and deliveries"))
            }),
        )
        .api_route(
            "/api/v1/alert-events/{id}",
            get_with(alerts::event, |op| keyed(op.tag("alerts").summary("A stored alert event"))),
        )
        .api_route(
            "/api/v1/investigation-jobs/{id}",
            get_with(alerts::job, |op| keyed(op.tag("alerts").summary("An investigation job"))),
        )
        .route("/metrics", get(metrics::metrics))
        .route_layer(middleware::from_fn_with_state(keys, auth::require_key));
    ApiRouter::new()
        .api_route(
            "/health",
            get_with(status::health, |op| {
                op.tag("status").summary("Whether the host works (anyone), and what it runs (with an API key)")
            }),
        )
        .api_route(
            "/ready",
            get_with(status::ready, |op| {
                op.tag("status")
                    .summary("Whether the host takes new work: 200, or 503 while a journal or the database fails")
                    .response::<200, Json<status::Readiness>>()
                    .response::<503, Json<status::Readiness>>()
            }),
        )
        .api_route(
            "/api/v1/openapi.json",
            get_with(openapi::openapi_json, |op| {
                op.tag("status").summary("This document (no API key: it holds no secrets)")
            }),
        )
        // Each AlertSource authenticates its own callers (no API key).
        .api_route(
            "/api/v1/alerts/{source}/webhook",
            post_with(alerts::webhook, |op| {
                alert_webhook(
                    op.summary("Deliver alerts to the AlertSource of this name in the one namespace that has it"),
                )
            }),
        )
        .api_route(
            "/api/v1/alerts/{namespace}/{source}/webhook",
            post_with(alerts::webhook_namespaced, |op| {
                alert_webhook(op.summary("Deliver alerts to an AlertSource (its provider's payload)"))
            }),
        )
        .api_route(
            "/api/v1/alertmanager/webhook",
            post_with(alerts::alertmanager_alias, |op| {
                alert_webhook(op.summary("Deliver Alertmanager alerts to the one Alertmanager AlertSource"))
            }),
        )
        // Each bot receiver authenticates its provider with its own secret (no API key).
        .api_route(
            "/api/v1/bots/telegram/{receiver}/webhook",
            post_with(bots::telegram, |op| bot_webhook(op.summary("A Telegram update"))),
        )
        .api_route(
            "/api/v1/bots/mattermost/{receiver}/webhook",
            post_with(bots::mattermost, |op| {
                bot_webhook(op.summary("A Mattermost outgoing-webhook post or slash command")).with(form_body_too)
            }),
        )
        .api_route(
            "/api/v1/bots/slack/{receiver}/events",
            post_with(bots::slack_events, |op| {
                own_credentials(op.tag("bots").summary("A Slack Events API callback (signed)"))
                    .response::<200, Json<bots::SlackAnswer>>()
            }),
        )
        .api_route(
            "/api/v1/bots/slack/{receiver}/commands",
            post_with(bots::slack_commands, |op| {
                own_credentials(op.tag("bots").summary("A Slack slash command (signed form body)"))
                    .response::<200, Json<bots::SlackAnswer>>()
                    .with(form_body_too)
            }),
        )
        .merge(protected)
}

/// An alert webhook: the AlertSource's own credentials, the delivery's outcome.
fn alert_webhook(op: TransformOperation<'_>) -> TransformOperation<'_> {
    own_credentials(op.tag("alerts"))
        .response_with::<200, Json<crate::alerts::store::Accepted>, _>(|r| r.description("Every event was a duplicate"))
        .response_with::<202, Json<crate::alerts::store::Accepted>, _>(|r| {
            r.description("At least one event was new: stored, and investigated when it opened an incident")
        })
}

/// A bot webhook: the receiver's own secret, whether the update was taken.
fn bot_webhook(op: TransformOperation<'_>) -> TransformOperation<'_> {
    own_credentials(op.tag("bots")).response::<200, Json<bots::BotAnswer>>()
}

/// Documents a form-encoded body beside the JSON one (Mattermost sends either).
fn form_body_too(mut op: TransformOperation<'_>) -> TransformOperation<'_> {
    if let Some(aide::openapi::ReferenceOr::Item(body)) = op.inner_mut().request_body.as_mut()
        && let Some(json) = body.content.get("application/json").cloned()
    {
        body.content.insert("application/x-www-form-urlencoded".into(), json);
    }
    op
}

/// Marks a route's request body as optional.
fn optional_body(mut op: TransformOperation<'_>) -> TransformOperation<'_> {
    if let Some(aide::openapi::ReferenceOr::Item(body)) = op.inner_mut().request_body.as_mut() {
        body.required = false;
    }
    op
}

/// The OpenAPI document of the native API (what `GET /api/v1/openapi.json` answers).
pub fn document() -> OpenApi {
    let mut document = OpenApi::default();
    let _ = api(Arc::new(ApiKeys::default())).finish_api_with(&mut document, openapi::describe);
    document
}

/// Builds the router.
pub fn router(state: AppState) -> Router {
    let mut document = OpenApi::default();
    let app = api(state.keys.clone()).finish_api_with(&mut document, openapi::describe);
    // Outside the document: the MCP server (its own protocol, same keys) and the embedded UI
    // (it holds no data: its API calls carry the user's key).
    // Outside the document too: the OpenAI facade (OpenAI's own contract).
    let keyed = Router::new()
        .route("/v1/models", get(facade::models))
        .route("/v1/models/{id}", get(facade::model))
        .route("/v1/chat/completions", post(facade::chat_completions))
        .merge(mcp_server::routes(&state))
        .route_layer(middleware::from_fn_with_state(state.keys.clone(), auth::require_key));
    app.merge(keyed)
        .merge(ui::routes())
        .layer(Extension(openapi::Document::new(&document)))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(error::envelope_rejections))
        .layer(middleware::from_fn_with_state(state.info.max_body_bytes, limit_body))
        .layer(middleware::from_fn_with_state(state.info.body_timeout, stalled_body))
        .layer(DefaultBodyLimit::max(state.info.max_body_bytes))
        .layer(middleware::from_fn_with_state(Arc::new(state.info.edge.clone()), edge::guard))
        .layer(middleware::from_fn(trace_requests))
        .with_state(state)
}

/// The router of a standby replica (operator mode, another replica leads): health,
/// resources, tools, metrics and the facade's model list are served; everything that needs the journals or
/// starts work answers 503 so that clients and senders retry against the leader.
pub fn standby_router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/api/v1/resources", get(status::resources))
        .route("/api/v1/tools", get(runs::tools))
        .route("/metrics", get(metrics::metrics))
        .route("/v1/models", get(facade::models))
        .route("/v1/models/{id}", get(facade::model))
        .route_layer(middleware::from_fn_with_state(state.keys.clone(), auth::require_key));
    Router::new()
        .route("/health", get(status::health))
        .route("/ready", get(status::ready))
        .merge(ui::routes())
        .merge(protected)
        .fallback(standby)
        .layer(middleware::from_fn_with_state(Arc::new(state.info.edge.clone()), edge::guard))
        .layer(middleware::from_fn(trace_requests))
        .with_state(state)
}

async fn standby(request: Request) -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "standby",
        format!(
            "this replica is a standby; {} {} is served by the leader, retry",
            request.method(),
            request.uri().path()
        ),
    )
    .retry_after("2")
    .into_response()
}

/// Path of the routes that name one object by id.
#[derive(Deserialize, JsonSchema)]
pub struct IdPath {
    /// The object's id (`run_…`, `inc_…`, `evt_…`, `job_…`, or an approval id).
    pub id: String,
}

/// Query of the listings.
#[derive(Deserialize, JsonSchema)]
pub struct ListQuery {
    /// How many, newest first (default 100).
    #[schemars(with = "Option<u32>", range(min = 1, max = 1000))]
    limit: Option<String>,
}

impl ListQuery {
    /// The limit asked for, 100 by default.
    pub fn limit(&self) -> Result<usize, ApiError> {
        match self.limit.as_deref().map(str::parse::<usize>) {
            None => Ok(100),
            Some(Ok(n)) if (1..=MAX_LIST).contains(&n) => Ok(n),
            Some(_) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("limit must be an integer from 1 to {MAX_LIST}"),
            )),
        }
    }
}

async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(format!("no route for {} {}", request.method(), request.uri().path()))
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", request.method(), request.uri().path()),
    )
}

/// Rejects bodies whose declared length exceeds the limit before reading them;
/// streamed bodies are cut by `DefaultBodyLimit` in the extractors.
async fn limit_body(State(limit): State<usize>, request: Request, next: Next) -> Response {
    let declared =
        request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body is larger than {limit} bytes"),
        )
        .into_response()
    };
    if declared.is_some_and(|len| len > limit as u64) {
        return too_large();
    }
    // A body without Content-Length is cut off by the extractor while streaming.
    let response = next.run(request).await;
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE { too_large() } else { response }
}

/// Bounds the pause between two parts of a request body: a client that stops
/// sending mid-body gets 408 instead of holding its connection forever.
async fn stalled_body(State(timeout): State<Duration>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::Body::new(tower_http::timeout::TimeoutBody::new(timeout, body));
    let response = next.run(Request::from_parts(parts, body)).await;
    if response.status() != StatusCode::BAD_REQUEST {
        return response;
    }
    // The extractor reports the body's timeout as a 400 "failed to buffer" rejection.
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    if String::from_utf8_lossy(&bytes).contains(STALLED_BODY) {
        return ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!("the request body stopped arriving for {timeout:?}; send the whole body without pausing"),
        )
        .into_response();
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// What tower-http's body timeout says when it fires (tested: a stalled body gets 408).
const STALLED_BODY: &str = "data was not received within the designated timeout";

/// One log line per request (never bodies or headers); warnings for errors.
async fn trace_requests(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = logged_path(request.uri().path());
    let mut response = next.run(request).await;
    let status = response.status().as_u16();
    let duration_ms = started.elapsed().as_millis() as u64;
    if status >= 500 {
        tracing::error!(%method, %path, status, duration_ms, "request failed");
    } else if status >= 400 {
        tracing::warn!(%method, %path, status, duration_ms, "request rejected");
    } else {
        tracing::debug!(%method, %path, status, duration_ms, "request");
    }
    // API answers are never cached; the UI's assets set their own revalidation policy.
    response.headers_mut().entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

/// A request path as logged: an approval id (a capability) is never written to a log.
fn logged_path(path: &str) -> String {
    const APPROVALS: &str = "/api/v1/change/simulations/";
    match path.strip_prefix(APPROVALS) {
        Some(rest) if !rest.is_empty() => {
            let tail = rest.split_once('/').map(|(_, tail)| format!("/{tail}")).unwrap_or_default();
            format!("{APPROVALS}{{id}}{tail}")
        }
        _ => path.to_string(),
    }
}

#[cfg(test)]
#[test]
fn approval_ids_never_reach_the_access_log() {
    let id = "0123456789abcdef0123456789abcdef";
    assert_eq!(logged_path(&format!("/api/v1/change/simulations/{id}/apply")), "/api/v1/change/simulations/{id}/apply");
    assert_eq!(logged_path(&format!("/api/v1/change/simulations/{id}")), "/api/v1/change/simulations/{id}");
    assert_eq!(logged_path("/api/v1/change/simulations"), "/api/v1/change/simulations");
    assert_eq!(logged_path("/api/v1/runs/run_1"), "/api/v1/runs/run_1");
}

/// Serves until `cancel` fires, then drains open requests for at most `grace`, with the
/// default [`listen::Limits`] (tests and in-process hosts; `serve` uses [`listen::serve`] with
/// the settings).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    cancel: CancellationToken,
    grace: Duration,
) -> std::io::Result<()> {
    listen::serve(listener, app, cancel, listen::Limits::with_grace(grace)).await
}
