//! The HTTP surface (axum): health, the resource view and, behind API-key auth,
//! everything under `/api` and `/v1`.

pub mod alerts;
pub mod auth;
pub mod body;
pub mod bots;
pub mod change;
pub mod engine_schema;
pub mod error;
pub mod metrics;
pub mod runs;
pub mod status;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Extension, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use self::auth::{ApiKeys, Caller};
use self::error::ApiError;
use crate::audit::MAX_LIST;
use crate::catalog::CatalogStore;
use crate::catalog::status::{InForce, StatusBoard};
use crate::config::Scope;
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
}

/// Builds the router.
pub fn router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/api/v1/resources", get(status::resources))
        .route("/api/v1/chat", post(runs::chat))
        .route("/api/v1/runs", get(runs::list))
        .route("/api/v1/runs/{id}", get(runs::get))
        .route("/api/v1/runs/{id}/chat", post(runs::follow_up))
        .route("/api/v1/tools", get(runs::tools))
        .route("/api/v1/workspaces", get(change::workspaces))
        .route("/api/v1/workspaces/{namespace}/{name}/fetch", post(change::fetch))
        .route("/api/v1/change/simulations", post(change::simulate))
        .route("/api/v1/change/simulations/{id}", get(change::simulation))
        .route("/api/v1/change/simulations/{id}/apply", post(change::apply))
        .route("/api/v1/incidents", get(alerts::incidents))
        .route("/api/v1/incidents/{id}", get(alerts::incident))
        .route("/api/v1/alert-events/{id}", get(alerts::event))
        .route("/api/v1/investigation-jobs/{id}", get(alerts::job))
        .route("/metrics", get(metrics::metrics))
        .route_layer(middleware::from_fn_with_state(state.keys.clone(), auth::require_key));
    Router::new()
        .route("/health", get(status::health))
        // Each AlertSource authenticates its own callers (no API key).
        .route("/api/v1/alerts/{source}/webhook", post(alerts::webhook))
        .route("/api/v1/alerts/{namespace}/{source}/webhook", post(alerts::webhook_namespaced))
        .route("/api/v1/alertmanager/webhook", post(alerts::alertmanager_alias))
        // Each bot receiver authenticates its provider with its own secret (no API key).
        .route("/api/v1/bots/telegram/{receiver}/webhook", post(bots::telegram))
        .route("/api/v1/bots/mattermost/{receiver}/webhook", post(bots::mattermost))
        .merge(protected)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(error::envelope_rejections))
        .layer(middleware::from_fn_with_state(state.info.max_body_bytes, limit_body))
        .layer(middleware::from_fn_with_state(state.info.body_timeout, stalled_body))
        .layer(DefaultBodyLimit::max(state.info.max_body_bytes))
        .layer(middleware::from_fn(trace_requests))
        .with_state(state)
}

/// The router of a standby replica (operator mode, another replica leads): health,
/// resources, tools and metrics are served; everything that needs the journals or
/// starts work answers 503 so that clients and senders retry against the leader.
pub fn standby_router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/api/v1/resources", get(status::resources))
        .route("/api/v1/tools", get(runs::tools))
        .route("/metrics", get(metrics::metrics))
        .route_layer(middleware::from_fn_with_state(state.keys.clone(), auth::require_key));
    Router::new()
        .route("/health", get(status::health))
        .merge(protected)
        .fallback(standby)
        .layer(middleware::from_fn(trace_requests))
        .with_state(state)
}

async fn standby(request: Request) -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "standby",
        format!(
            "this replica is a standby; {} {} is served by the leader, retry",
            request.method(),
            request.uri().path()
        ),
    )
    .into_response();
    response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("2"));
    response
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
    let path = request.uri().path().to_string();
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
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Serves until `cancel` fires, then drains open requests for at most `grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    cancel: CancellationToken,
    grace: Duration,
) -> std::io::Result<()> {
    let shutdown = cancel.clone();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await });
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        result = &mut server => result,
        _ = async { cancel.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_seconds = grace.as_secs(), "open requests did not finish in time; closing them");
            Ok(())
        }
    }
}
