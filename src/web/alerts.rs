//! Alert ingress (`POST /api/v1/alerts/{namespace}/{source}/webhook`, the one-segment
//! `/api/v1/alerts/{source}/webhook` of the webhook namespace or `namespace.name`, the
//! Alertmanager alias) and the incident API. Each AlertSource authenticates its own callers, API
//! keys play no part; nothing from a payload ever chooses a notification target or a
//! tool. A valid delivery is never refused for load or for being a big group: it is
//! stored, and investigations over the source's rate or the pending-job cap are
//! deferred or coalesced into a storm job (`alerts::admission`). While the alert journal cannot be written (disk full, read-only volume) a
//! delivery gets 507 Insufficient Storage with `Retry-After` and a message naming the
//! journal's directory; nothing of it is stored, and the next delivery after space
//! returns is stored without a restart.

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::auth::Caller;
use super::body::JsonBytes;
use super::error::ApiError;
use super::{AppState, IdPath, ListQuery};
use crate::alerts::adapters::{DecodeContext, adapter};
use crate::alerts::correlate::{IncidentState, IncidentStatus};
use crate::alerts::signature::{self, SIGNATURE_HEADER, Signed};
use crate::alerts::store::{AlertStore, AlertStoreError, IncidentDetail, Job, StoredEvent};
use crate::catalog::ObjectKey;
use crate::catalog::secrets::SecretResolver;
use crate::resources::alert_source::{AlertAuth, AlertProvider};
use crate::resources::{Kind, Resource};

/// Why a caller was not let in.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// Credentials missing or wrong (401): what to send instead.
    Unauthorized(String),
    /// The source's own secret cannot be resolved (503); names the reference only.
    Misconfigured(String),
}

/// Checks every configured mechanism (all must pass), in constant time. A signature that
/// covered a timestamp is returned, for the store to refuse its replay.
pub fn authenticate(
    auth: &AlertAuth,
    namespace: &str,
    headers: &HeaderMap,
    body: &[u8],
    secrets: &dyn SecretResolver,
) -> Result<Option<Signed>, AuthFailure> {
    let resolve =
        |reference| secrets.resolve(namespace, reference).map_err(|e| AuthFailure::Misconfigured(e.to_string()));
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let unauthorized = |why: &str| AuthFailure::Unauthorized(why.to_string());
    let mut checked = false;
    let mut signed = None;
    if let Some(reference) = &auth.bearer_token {
        let expected = resolve(reference)?;
        let presented = header("authorization");
        let token = super::auth::bearer_token(&presented).unwrap_or_default();
        if !equal(token.as_bytes(), expected.expose().as_bytes()) {
            return Err(unauthorized("missing or wrong Bearer token"));
        }
        checked = true;
    }
    if let Some(secret_header) = &auth.secret_header {
        let expected = resolve(&secret_header.value)?;
        if !equal(header(&secret_header.name).as_bytes(), expected.expose().as_bytes()) {
            return Err(unauthorized("missing or wrong secret header"));
        }
        checked = true;
    }
    if let Some(reference) = &auth.hmac_secret {
        let secret = resolve(reference)?;
        let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let timestamp = auth.hmac_timestamp_header.as_deref().map(|name| (name, value(name)));
        let now = jiff::Timestamp::now().as_second();
        signed = signature::verify(secret.expose().as_bytes(), value(SIGNATURE_HEADER), timestamp, body, now)
            .map_err(|refused| AuthFailure::Unauthorized(refused.to_string()))?;
        checked = true;
    }
    if checked || auth.allow_unauthenticated == Some(true) {
        Ok(signed)
    } else {
        Err(unauthorized("no authentication configured"))
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
    /// The name of an AlertSource of the webhook namespace, or `namespace.name`.
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
    answer(ingest(&state, &key, &headers, &body).await)
}

/// `POST /api/v1/alerts/{source}/webhook`: `source` is an AlertSource of the webhook
/// namespace, or `namespace.name` ([`super::webhook_names`]); no other namespace's source
/// ever changes which one it is.
pub async fn webhook(
    State(state): State<AppState>,
    Path(SourceNamePath { source }): Path<SourceNamePath>,
    headers: HeaderMap,
    body: JsonBytes<Value>,
) -> Response {
    let named = super::webhook_names::resolve(&source, &state.info.webhook_namespace);
    let key = ObjectKey { kind: Kind::AlertSource, namespace: named.namespace.into(), name: named.name.into() };
    let outcome = match ingest(&state, &key, &headers, &body.0).await {
        Err(Refused::NoSource(_)) => Err(Refused::NoSource(named.not_found("AlertSource"))),
        outcome => outcome,
    };
    answer(outcome)
}

/// Why a delivery was not taken. Each answer is decided in one place: `From<Refused> for ApiError`.
#[derive(Debug)]
enum Refused {
    /// Alert ingestion is off on this host.
    Disabled,
    /// No such source (what was asked for).
    NoSource(String),
    /// The caller's credentials are missing or wrong: what to send instead.
    Unauthorized(String),
    /// The source's own credentials cannot be resolved here.
    Misconfigured,
    /// The provider has no adapter.
    UnsupportedProvider(&'static str),
    /// The body is not the provider's payload.
    InvalidPayload(String),
    /// The journal cannot be written (its directory and what to do): nothing was stored.
    Storage(String),
    /// The journal cannot record deliveries now.
    StoreUnavailable,
    /// The database cannot be reached or written now: nothing of the delivery was stored.
    DatabaseDown(String),
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Disabled => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "alerts_disabled",
                "alert ingestion is disabled on this host",
            ),
            Refused::NoSource(what) => ApiError::not_found(what),
            Refused::Unauthorized(why) => ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why),
            Refused::Misconfigured => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "source_misconfigured",
                "the alert source's credentials are not available on this host",
            ),
            Refused::UnsupportedProvider(provider) => ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "unsupported_provider",
                format!("provider {provider} has no adapter"),
            ),
            Refused::InvalidPayload(error) => ApiError::new(StatusCode::BAD_REQUEST, "invalid_payload", error),
            Refused::Storage(reason) => ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "insufficient_storage",
                format!("nothing of this delivery was stored; retry later. {reason}"),
            )
            .retry_after(STORAGE_RETRY_AFTER),
            Refused::StoreUnavailable => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the alert journal cannot record deliveries; retry later",
            ),
            Refused::DatabaseDown(reason) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                format!("nothing of this delivery was stored; retry later. {reason}"),
            )
            .retry_after(DATABASE_RETRY_AFTER),
        }
    }
}

fn answer(outcome: Result<Response, Refused>) -> Response {
    outcome.unwrap_or_else(|refused| ApiError::from(refused).into_response())
}

/// `POST /api/v1/alertmanager/webhook`: the webhook namespace's AlertSource with provider
/// `alertmanager` (the first by name), authenticated by that source alone (Alertmanager sends
/// one `Authorization` header: the source's token, not an API key). Another namespace's
/// source never changes it: Alertmanager drops deliveries answered with 4xx.
pub async fn alertmanager_alias(State(state): State<AppState>, headers: HeaderMap, body: JsonBytes<Value>) -> Response {
    let catalog = state.catalog.current();
    let namespace = &state.info.webhook_namespace;
    let found = catalog
        .of_kind(Kind::AlertSource)
        .filter(|(key, _)| key.namespace == *namespace)
        .find(|(_, e)| matches!(e.resource.as_ref(), Resource::AlertSource(s) if s.spec.provider == AlertProvider::Alertmanager))
        .map(|(key, _)| key);
    let outcome = match found {
        Some(key) => ingest(&state, key, &headers, &body.0).await,
        None => Err(Refused::NoSource(format!(
            "no AlertSource with provider alertmanager in namespace {namespace:?} (the webhook namespace, setting \
             webhook_namespace); post to /api/v1/alerts/{{namespace}}/{{name}}/webhook for another namespace's"
        ))),
    };
    answer(outcome)
}

/// Takes one delivery for the AlertSource `key`: authenticated by the source, decoded by its
/// provider's adapter, stored (202 when an event was accepted, else 200).
async fn ingest(state: &AppState, key: &ObjectKey, headers: &HeaderMap, body: &[u8]) -> Result<Response, Refused> {
    let store = state.alerts.as_ref().ok_or(Refused::Disabled)?;
    let catalog = state.catalog.current();
    let Some(Resource::AlertSource(source)) = catalog.entries.get(key).map(|e| e.resource.as_ref()) else {
        return Err(Refused::NoSource(format!("no alert source {}/{}", key.namespace, key.name)));
    };
    let source_key = format!("{}/{}", key.namespace, key.name);
    let rejected = || {
        store.record_rejected(&source_key);
        publish_status(state, key);
    };
    let auth = authenticate(&source.spec.auth, &key.namespace, headers, body, state.secrets.as_ref());
    let signed = auth.map_err(|failure| match failure {
        AuthFailure::Unauthorized(why) => {
            rejected();
            tracing::warn!(source = %key, %why, "alert delivery rejected");
            Refused::Unauthorized(why)
        }
        AuthFailure::Misconfigured(why) => {
            tracing::error!(source = %key, %why, "alert source cannot authenticate callers");
            Refused::Misconfigured
        }
    })?;
    let provider = provider_name(source.spec.provider);
    let decoder = adapter(provider).ok_or(Refused::UnsupportedProvider(provider))?;
    let context = DecodeContext { source_type: provider, source_name: &key.name, observed_at: jiff::Timestamp::now() };
    let decoded = decoder.decode_batch(body, &context).map_err(|error| {
        rejected();
        Refused::InvalidPayload(error.to_string())
    })?;
    let truncated = decoded.truncated_by_provider;
    let stored = store.ingest_signed(&key.namespace, &key.name, decoded.events, truncated, signed).await;
    let accepted = stored.map_err(|error| match error {
        AlertStoreError::Replayed => {
            rejected();
            tracing::warn!(source = %key, "alert delivery rejected: a replayed signature");
            Refused::Unauthorized(error.to_string())
        }
        // On the database a failed write or a recovery in progress is the database's outage.
        AlertStoreError::Database(_) | AlertStoreError::Unavailable(_) if store.on_database() => {
            tracing::warn!(source = %key, %error, "alert delivery not stored: the database is unavailable");
            Refused::DatabaseDown(error.to_string())
        }
        AlertStoreError::Unavailable(reason) => storage_full(key, reason),
        AlertStoreError::Journal(error) if error.is_unwritable() => storage_full(key, error.to_string()),
        error => {
            tracing::error!(source = %key, %error, "alert delivery not stored");
            Refused::StoreUnavailable
        }
    })?;
    publish_status(state, key);
    let status =
        if accepted.events.iter().any(|e| e.status == "accepted") { StatusCode::ACCEPTED } else { StatusCode::OK };
    Ok((status, Json(accepted)).into_response())
}

/// The journal cannot be written: `reason` names its directory and what to do.
fn storage_full(key: &ObjectKey, reason: String) -> Refused {
    tracing::error!(source = %key, %reason, "alert delivery not stored: the alert journal cannot be written");
    Refused::Storage(reason)
}

/// Seconds a sender is asked to wait while the journal cannot be written.
const STORAGE_RETRY_AFTER: &str = "10";
/// Seconds a sender is asked to wait while the database cannot be reached.
const DATABASE_RETRY_AFTER: &str = "5";

/// Publishes an AlertSource's runtime status (webhook path and counters).
fn publish_status(state: &AppState, key: &ObjectKey) {
    if let Some(store) = &state.alerts {
        crate::alerts::source_status::publish(store, &state.board, key);
    }
}

/// Largest `limit` of an incident listing.
pub const MAX_INCIDENTS: usize = crate::audit::MAX_LIST;

/// The alert store, or 503 when alert ingestion is disabled.
pub(super) fn store(state: &AppState) -> Result<&std::sync::Arc<crate::alerts::store::AlertStore>, ApiError> {
    state.alerts.as_ref().ok_or_else(|| Refused::Disabled.into())
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
    Ok(Json(IncidentList { incidents: visible_incidents(store, &caller, limit, None).await? }))
}

/// The incidents of the namespaces the caller reads, newest update first, only those
/// in `status` when given (the incident listing of the API and of the MCP server).
pub(super) async fn visible_incidents(
    store: &AlertStore,
    caller: &Caller,
    limit: usize,
    status: Option<IncidentStatus>,
) -> Result<Vec<IncidentState>, ApiError> {
    let visible = |namespace: &str, state| caller.sees(namespace) && status.is_none_or(|status| state == status);
    store.incidents_where(limit, visible).await.map_err(unreadable)
}

/// The alert store could not be read (its database is unreachable): 503, retry shortly.
pub(super) fn unreadable(error: AlertStoreError) -> ApiError {
    Refused::DatabaseDown(error.to_string()).into()
}

/// Incident `id` with its events, jobs, Runs and deliveries; another namespace's
/// incident does not exist for the caller.
pub(super) async fn visible_incident(
    store: &AlertStore,
    caller: &Caller,
    id: &str,
) -> Result<Option<IncidentDetail>, ApiError> {
    let found = store.incident(id).await.map_err(unreadable)?;
    let found = found.filter(|(incident, _, _)| caller.sees(&incident.namespace));
    Ok(found.map(|(incident, events, jobs)| IncidentDetail::new(incident, events, jobs)))
}

/// `GET /api/v1/incidents/{id}` (another namespace's incident does not exist for the key).
pub async fn incident(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<IncidentDetail>, ApiError> {
    let incident = visible_incident(store(&state)?, &caller, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("incident not found"))?;
    Ok(Json(incident))
}

/// Whether the caller reads the namespace of incident `id`.
async fn sees_incident(store: &AlertStore, caller: &Caller, id: &str) -> Result<bool, ApiError> {
    let found = store.incident(id).await.map_err(unreadable)?;
    Ok(found.is_some_and(|(incident, _, _)| caller.sees(&incident.namespace)))
}

/// `GET /api/v1/alert-events/{id}`.
pub async fn event(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<StoredEvent>, ApiError> {
    let store = store(&state)?;
    let not_found = || ApiError::not_found("alert event not found");
    let event = store.event(&id).await.map_err(unreadable)?.ok_or_else(not_found)?;
    if !sees_incident(store, &caller, &event.incident_id).await? {
        return Err(not_found());
    }
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
        .await
        .map_err(unreadable)?
        .filter(|job| caller.sees(&job.namespace))
        .ok_or_else(|| ApiError::not_found("investigation job not found"))?;
    Ok(Json(job))
}
