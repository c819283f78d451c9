//! The HTTP surface (axum): health, the resource view and, behind API-key auth,
//! everything under `/api` and `/v1`.

pub mod alerts;
pub mod auth;
pub mod bots;
pub mod change;
pub mod error;
pub mod facade;
pub mod metrics;
pub mod runs;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Extension, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use self::auth::{ApiKeys, Caller};
use self::error::ApiError;
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
        .route("/api/v1/resources", get(resources))
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
        .route("/v1/models", get(facade::models))
        .route("/v1/models/{id}", get(facade::model))
        .route("/v1/chat/completions", post(facade::chat_completions))
        .route_layer(middleware::from_fn_with_state(state.keys.clone(), auth::require_key));
    Router::new()
        .route("/health", get(health))
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
/// resources, tools, metrics and the facade's model list are served; everything that needs the journals or
/// starts work answers 503 so that clients and senders retry against the leader.
pub fn standby_router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/api/v1/resources", get(resources))
        .route("/api/v1/tools", get(runs::tools))
        .route("/metrics", get(metrics::metrics))
        .route("/v1/models", get(facade::models))
        .route("/v1/models/{id}", get(facade::model))
        .route_layer(middleware::from_fn_with_state(state.keys.clone(), auth::require_key));
    Router::new()
        .route("/health", get(health))
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

async fn health(State(state): State<AppState>) -> Json<Value> {
    let catalog = state.catalog.current();
    let board = state.board.get();
    let invalid = board.resources.iter().filter(|r| r.in_force != InForce::Current).count();
    let mut degraded = Vec::new();
    if let Some(alerts) = &state.alerts
        && let Some(reason) = alerts.degraded()
    {
        // A journal that failed a write is retried in the background (at most once a
        // second), so the host recovers when space returns even with no traffic.
        let alerts = alerts.clone();
        tokio::spawn(async move { alerts.recover().await });
        degraded.push(json!({"component": "alerts", "reason": reason}));
    }
    if let Some(audit) = state.engine.audit()
        && let Some(reason) = audit.write_failure()
    {
        let audit = audit.clone();
        tokio::spawn(async move { audit.recover().await });
        degraded.push(json!({"component": "audit", "reason": format!(
            "{reason}; chats and follow-ups get 507 and Runs cannot be recorded until a write succeeds again"
        )}));
    }
    Json(json!({
        "status": if degraded.is_empty() { "ok" } else { "degraded" },
        "degraded": degraded,
        "version": env!("CARGO_PKG_VERSION"),
        "mode": state.info.mode,
        "model": state.info.model,
        "response_language": state.info.response_language,
        "authentication": if state.keys.enabled() { "api-key" } else { "disabled" },
        "system_instructions_sha256": state.info.instructions_sha256,
        "catalog": {
            "version": catalog.version,
            "hash": catalog.hash,
            "counts": catalog.counts(),
            "invalid_resources": invalid,
            "problems": board.problems.len(),
        },
    }))
}

/// `GET /api/v1/resources`: the resources of the namespaces the caller reads and
/// of the shared namespaces (its Runs use those); load problems of manifests that
/// could not be attributed to an object are shown to `admin` keys only.
async fn resources(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> Json<Value> {
    let catalog = state.catalog.current();
    let board = state.board.get();
    let visible = |namespace: &str| caller.sees(namespace) || state.engine.tenancy().is_shared(namespace);
    let resources: Vec<Value> = board
        .resources
        .iter()
        .filter(|report| visible(&report.key.namespace))
        .map(|report| {
            let mut item = serde_json::to_value(report).unwrap_or(Value::Null);
            if let Some(status) =
                state.board.runtime(&report.key).filter(|s| s.as_object().is_some_and(|m| !m.is_empty()))
            {
                item["status"] = status;
            }
            item
        })
        .collect();
    Json(json!({
        "catalog_version": catalog.version,
        "catalog_hash": catalog.hash,
        "loaded_at": board.loaded_at,
        "resources": resources,
        "problems": if caller.allows(Scope::Admin) { json!(board.problems) } else { json!([]) },
    }))
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
    // Streamed answers are many small writes: without TCP_NODELAY each one after the
    // first waits for the client's delayed ACK (about 40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
    });
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
