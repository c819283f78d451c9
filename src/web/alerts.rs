//! Alert ingress (`POST /api/v1/alerts/{namespace}/{source}/webhook`, the older
//! `/api/v1/alerts/{source}/webhook` while the name is unambiguous, the Alertmanager
//! alias) and the incident API. Each AlertSource authenticates its own callers, API
//! keys play no part; nothing from a payload ever chooses a notification target or a
//! tool. A valid delivery is never refused for load or for being a big group: it is
//! stored, and investigations over the source's rate or the pending-job cap are
//! deferred or coalesced into a storm job (`alerts::admission`). While the alert journal cannot be written (disk full, read-only volume) a
//! delivery gets 507 Insufficient Storage with `Retry-After` and a message naming the
//! journal's directory; nothing of it is stored, and the next delivery after space
//! returns is stored without a restart.

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::auth::Caller;
use super::body::JsonBytes;
use super::error::ApiError;
use super::{AppState, IdPath, ListQuery};
use crate::alerts::adapters::{DecodeContext, adapter};
use crate::alerts::correlate::{IncidentState, IncidentStatus};
use crate::alerts::store::{AlertStore, AlertStoreError, IncidentDetail, Job, StoredEvent};
use crate::catalog::ObjectKey;
use crate::catalog::secrets::SecretResolver;
use crate::resources::alert_source::{AlertAuth, AlertProvider};
use crate::resources::{Kind, Resource};

/// Why a caller was not let in.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// Credentials missing or wrong (401).
    Unauthorized(&'static str),
    /// The source's own secret cannot be resolved (503); names the reference only.
    Misconfigured(String),
}

/// Checks every configured mechanism (all must pass), in constant time.
pub fn authenticate(
    auth: &AlertAuth,
    namespace: &str,
    headers: &HeaderMap,
    body: &[u8],
    secrets: &dyn SecretResolver,
) -> Result<(), AuthFailure> {
    let resolve =
        |reference| secrets.resolve(namespace, reference).map_err(|e| AuthFailure::Misconfigured(e.to_string()));
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let mut checked = false;
    if let Some(reference) = &auth.bearer_token {
        let expected = resolve(reference)?;
        let presented = header("authorization");
        let token = super::auth::bearer_token(&presented).unwrap_or_default();
        if !equal(token.as_bytes(), expected.expose().as_bytes()) {
            return Err(AuthFailure::Unauthorized("missing or wrong Bearer token"));
        }
        checked = true;
    }
    if let Some(secret_header) = &auth.secret_header {
        let expected = resolve(&secret_header.value)?;
        if !equal(header(&secret_header.name).as_bytes(), expected.expose().as_bytes()) {
            return Err(AuthFailure::Unauthorized("missing or wrong secret header"));
        }
        checked = true;
    }
    if let Some(reference) = &auth.hmac_secret {
        let secret = resolve(reference)?;
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes())
            .map_err(|_| AuthFailure::Misconfigured("HMAC secret unusable".into()))?;
        mac.update(body);
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        if !equal(header("x-akritas-signature").as_bytes(), expected.as_bytes()) {
            return Err(AuthFailure::Unauthorized("missing or wrong X-Akritas-Signature"));
        }
        checked = true;
    }
    if checked || auth.allow_unauthenticated == Some(true) {
        Ok(())
    } else {
        Err(AuthFailure::Unauthorized("no authentication configured"))
    }
}

fn equal(a: &[u8], b: &[u8]) -> bool {
    // Digests first, so the comparison does not leak the length.
    bool::from(Sha256::digest(a).ct_eq(&Sha256::digest(b)))
}

fn provider_name(provider: AlertProvider) -> &'static str {
    match provider {
        AlertProvider::Alertmanager => "alertmanager",
        AlertProvider::Generic => "generic",
        AlertProvider::Grafana => "grafana",
        AlertProvider::UptimeKuma => "uptime-kuma",
        AlertProvider::Pingdom => "pingdom",
    }
}

/// Path of `POST /api/v1/alerts/{namespace}/{source}/webhook`.
#[derive(Deserialize, JsonSchema)]
pub struct SourcePath {
    /// Namespace of the AlertSource.
    pub namespace: String,
    /// Name of the AlertSource.
    pub source: String,
}

/// Path of `POST /api/v1/alerts/{source}/webhook`.
#[derive(Deserialize, JsonSchema)]
pub struct SourceNamePath {
    /// The AlertSource's name, or `namespace.name`.
    pub source: String,
}

/// `POST /api/v1/alerts/{namespace}/{source}/webhook`: the AlertSource `namespace/source`.
pub async fn webhook_namespaced(
    State(state): State<AppState>,
    Path(SourcePath { namespace, source }): Path<SourcePath>,
    headers: HeaderMap,
    body: JsonBytes<Value>,
) -> Response {
    let body = body.0;
    let key = ObjectKey { kind: Kind::AlertSource, namespace, name: source };
    ingest(&state, &key, &headers, &body).await
}

/// `POST /api/v1/alerts/{source}/webhook`: `source` is the AlertSource name, or
/// `namespace.name`, and must name exactly one AlertSource in every namespace
/// watched; otherwise 409 names the namespaced routes.
pub async fn webhook(
    State(state): State<AppState>,
    Path(SourceNamePath { source }): Path<SourceNamePath>,
    headers: HeaderMap,
    body: JsonBytes<Value>,
) -> Response {
    let body = body.0;
    let catalog = state.catalog.current();
    let candidates: Vec<&ObjectKey> = catalog
        .of_kind(Kind::AlertSource)
        .map(|(key, _)| key)
        .filter(|key| key.name == source || format!("{}.{}", key.namespace, key.name) == source)
        .collect();
    let key = match candidates.as_slice() {
        [key] => (*key).clone(),
        [] => return ApiError::not_found(format!("no alert source {source:?}")).into_response(),
        several => return ambiguous(&format!("alert source {source:?} exists in several namespaces"), several),
    };
    ingest(&state, &key, &headers, &body).await
}

/// 409 naming the namespaced route of every candidate.
fn ambiguous(what: &str, candidates: &[&ObjectKey]) -> Response {
    let routes: Vec<String> = candidates.iter().map(|key| webhook_path(key)).collect();
    ApiError::new(StatusCode::CONFLICT, "ambiguous_source", format!("{what}; post to one of {}", routes.join(", ")))
        .into_response()
}

/// `POST /api/v1/alertmanager/webhook`: the home namespace's AlertSource with provider
/// `alertmanager` (the first by name), or else the only one in any namespace,
/// authenticated by that source alone (Alertmanager sends one `Authorization` header:
/// the source's token, not an API key). A tenant's source never turns the platform's
/// alias into a 409: Alertmanager drops deliveries answered with 4xx.
pub async fn alertmanager_alias(State(state): State<AppState>, headers: HeaderMap, body: JsonBytes<Value>) -> Response {
    let body = body.0;
    let catalog = state.catalog.current();
    let sources: Vec<&ObjectKey> = catalog
        .of_kind(Kind::AlertSource)
        .filter(|(_, e)| matches!(e.resource.as_ref(), Resource::AlertSource(s) if s.spec.provider == AlertProvider::Alertmanager))
        .map(|(k, _)| k)
        .collect();
    if let Some(home) = sources.iter().find(|key| key.namespace == state.keys.home()) {
        return ingest(&state, home, &headers, &body).await;
    }
    match sources.as_slice() {
        [key] => ingest(&state, key, &headers, &body).await,
        [] => ApiError::not_found("no AlertSource with provider alertmanager is configured").into_response(),
        several => ambiguous("several Alertmanager sources exist outside the home namespace", several),
    }
}

async fn ingest(state: &AppState, key: &ObjectKey, headers: &HeaderMap, body: &[u8]) -> Response {
    let Some(store) = &state.alerts else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "alerts_disabled",
            "alert ingestion is disabled on this host",
        )
        .into_response();
    };
    let catalog = state.catalog.current();
    let Some(Resource::AlertSource(source)) = catalog.entries.get(key).map(|e| e.resource.as_ref()) else {
        return ApiError::not_found(format!("no alert source {}/{}", key.namespace, key.name)).into_response();
    };
    let source_key = format!("{}/{}", key.namespace, key.name);
    match authenticate(&source.spec.auth, &key.namespace, headers, body, state.secrets.as_ref()) {
        Ok(()) => {}
        Err(AuthFailure::Unauthorized(why)) => {
            store.record_rejected(&source_key);
            publish_status(state, key);
            tracing::warn!(source = %key, why, "alert delivery rejected");
            return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why).into_response();
        }
        Err(AuthFailure::Misconfigured(why)) => {
            tracing::error!(source = %key, %why, "alert source cannot authenticate callers");
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "source_misconfigured",
                "the alert source's credentials are not available on this host",
            )
            .into_response();
        }
    }
    let provider = provider_name(source.spec.provider);
    let Some(decoder) = adapter(provider) else {
        return ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "unsupported_provider",
            format!("provider {provider} has no adapter"),
        )
        .into_response();
    };
    let context = DecodeContext { source_type: provider, source_name: &key.name, observed_at: jiff::Timestamp::now() };
    let decoded = match decoder.decode_delivery(body, &context) {
        Ok(decoded) => decoded,
        Err(error) => {
            store.record_rejected(&source_key);
            publish_status(state, key);
            return ApiError::new(StatusCode::BAD_REQUEST, "invalid_payload", error.to_string()).into_response();
        }
    };
    match store.ingest_delivery(&key.namespace, &key.name, decoded.events, decoded.truncated_by_provider).await {
        Ok(accepted) => {
            publish_status(state, key);
            let status = if accepted.events.iter().any(|e| e.status == "accepted") {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            (status, Json(accepted)).into_response()
        }
        Err(AlertStoreError::Unavailable(reason)) => insufficient_storage(key, &reason),
        Err(AlertStoreError::Journal(error)) if error.is_unwritable() => insufficient_storage(key, &error.to_string()),
        Err(
            error @ (AlertStoreError::Journal(_)
            | AlertStoreError::Inconsistent { .. }
            | AlertStoreError::NoSnapshot { .. }),
        ) => {
            tracing::error!(source = %key, %error, "alert delivery not stored");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the alert journal cannot record deliveries; retry later",
            )
            .into_response()
        }
    }
}

/// Seconds a sender is asked to wait while the journal cannot be written.
const STORAGE_RETRY_AFTER: &str = "10";

/// 507 with `Retry-After`: the journal cannot be written; `reason` names its directory and what to do.
fn insufficient_storage(key: &ObjectKey, reason: &str) -> Response {
    tracing::error!(source = %key, %reason, "alert delivery not stored: the alert journal cannot be written");
    let mut response = ApiError::new(
        StatusCode::INSUFFICIENT_STORAGE,
        "insufficient_storage",
        format!("nothing of this delivery was stored; retry later. {reason}"),
    )
    .into_response();
    response.headers_mut().insert(axum::http::header::RETRY_AFTER, HeaderValue::from_static(STORAGE_RETRY_AFTER));
    response
}

/// The path a provider posts to for this source.
pub fn webhook_path(key: &ObjectKey) -> String {
    format!("/api/v1/alerts/{}/{}/webhook", key.namespace, key.name)
}

/// Publishes an AlertSource's runtime status (webhook path and counters).
pub fn publish_status(state: &AppState, key: &ObjectKey) {
    let Some(store) = &state.alerts else { return };
    state.board.merge_runtime(key.clone(), source_status(store, key));
}

/// The runtime status of an AlertSource.
pub fn source_status(store: &crate::alerts::store::AlertStore, key: &ObjectKey) -> serde_json::Value {
    let counters = store.counters(&format!("{}/{}", key.namespace, key.name));
    json!({
        "webhookPath": webhook_path(key),
        "accepted": counters.accepted,
        "duplicate": counters.duplicate,
        "rejected": counters.rejected,
        "truncatedAlerts": counters.truncated_by_provider,
        "truncatedByHost": counters.truncated_by_host,
    })
}

/// Largest `limit` of an incident listing.
pub const MAX_INCIDENTS: usize = crate::audit::MAX_LIST;

/// The alert store, or 503 when alert ingestion is disabled.
pub(super) fn store(state: &AppState) -> Result<&std::sync::Arc<crate::alerts::store::AlertStore>, ApiError> {
    state.alerts.as_ref().ok_or_else(|| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "alerts_disabled", "alert ingestion is disabled on this host")
    })
}

/// `GET /api/v1/incidents`.
#[derive(Serialize, JsonSchema)]
pub struct IncidentList {
    /// Newest first.
    pub incidents: Vec<IncidentState>,
}

/// `GET /api/v1/incidents?limit=`.
pub async fn incidents(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<Json<IncidentList>, ApiError> {
    let store = store(&state)?;
    let limit = query.limit()?;
    Ok(Json(IncidentList { incidents: visible_incidents(store, &caller, limit, None) }))
}

/// The incidents of the namespaces the caller reads, newest update first, only those
/// in `status` when given (the incident listing of the API and of the MCP server).
pub(super) fn visible_incidents(
    store: &AlertStore,
    caller: &Caller,
    limit: usize,
    status: Option<IncidentStatus>,
) -> Vec<IncidentState> {
    store.incidents_where(limit, |namespace, state| {
        caller.sees(namespace) && status.is_none_or(|status| state == status)
    })
}

/// Incident `id` with its events, jobs, Runs and deliveries; another namespace's
/// incident does not exist for the caller.
pub(super) fn visible_incident(store: &AlertStore, caller: &Caller, id: &str) -> Option<IncidentDetail> {
    let (incident, events, jobs) = store.incident(id).filter(|(incident, _, _)| caller.sees(&incident.namespace))?;
    Some(IncidentDetail::new(incident, events, jobs))
}

/// `GET /api/v1/incidents/{id}` (another namespace's incident does not exist for the key).
pub async fn incident(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<IncidentDetail>, ApiError> {
    let incident =
        visible_incident(store(&state)?, &caller, &id).ok_or_else(|| ApiError::not_found("incident not found"))?;
    Ok(Json(incident))
}

/// Whether the caller reads the namespace of incident `id`.
fn sees_incident(store: &AlertStore, caller: &Caller, id: &str) -> bool {
    store.incident(id).is_some_and(|(incident, _, _)| caller.sees(&incident.namespace))
}

/// `GET /api/v1/alert-events/{id}`.
pub async fn event(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<StoredEvent>, ApiError> {
    let store = store(&state)?;
    let event = store
        .event(&id)
        .filter(|event| sees_incident(store, &caller, &event.incident_id))
        .ok_or_else(|| ApiError::not_found("alert event not found"))?;
    Ok(Json(event))
}

/// `GET /api/v1/investigation-jobs/{id}`.
pub async fn job(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<Job>, ApiError> {
    let job = store(&state)?
        .job(&id)
        .filter(|job| caller.sees(&job.namespace))
        .ok_or_else(|| ApiError::not_found("investigation job not found"))?;
    Ok(Json(job))
}
