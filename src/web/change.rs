//! Change routes: `GET /api/v1/workspaces`, `POST /api/v1/workspaces/{namespace}/{name}/fetch`,
//! `POST /api/v1/change/simulations`, `GET /api/v1/change/simulations/{id}` and
//! `POST /api/v1/change/simulations/{id}/apply` (an `admin` key only: the one
//! route in Akritas that writes).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::auth::Caller;
use super::body::{JsonBytes, decode, require_json};
use super::error::ApiError;
use super::{AppState, IdPath};
use crate::change::ChangeError;
use crate::change::approvals::{ApprovalId, TakeError};
use crate::change::service::{
    Approver, ChangeService, ChangeView, FetchedHead, PreviewRequest, Requester, WorkspaceView,
};
use crate::config::Scope;

/// Body of `POST /api/v1/change/simulations/{id}/apply`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("required" = ["confirm"]))]
pub struct ApplyBody {
    /// Must be `true`: the explicit confirmation (a body without it is refused).
    #[serde(default)]
    #[schemars(extend("const" = true))]
    confirm: bool,
}

fn service(state: &AppState) -> Result<&Arc<ChangeService>, ApiError> {
    state.change.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "change_disabled",
            "the change pipeline is not running on this host (no data directory for approvals)",
        )
    })
}

/// A change failure's answer, decided here for every route: a bad request 400, an unknown
/// Workspace or change 404, a Workspace not ready or a stale or conflicting preview 409, too
/// many pending changes 429, busy 503, the model server or git 502, the audit 507, the
/// approval store, a failed write or an interrupted task 500. A failed proposal carries its
/// per-attempt diagnostics.
impl From<ChangeError> for ApiError {
    fn from(error: ChangeError) -> Self {
        let status = match &error {
            ChangeError::Invalid(_) => StatusCode::BAD_REQUEST,
            ChangeError::NotFound(_) => StatusCode::NOT_FOUND,
            ChangeError::NotReady(_) | ChangeError::Stale(_) | ChangeError::Conflict(_) => StatusCode::CONFLICT,
            ChangeError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            ChangeError::TooManyPending(_) => StatusCode::TOO_MANY_REQUESTS,
            ChangeError::Upstream(_) | ChangeError::Proposal { .. } | ChangeError::Budget(_) | ChangeError::Git(_) => {
                StatusCode::BAD_GATEWAY
            }
            ChangeError::Audit(_) => StatusCode::INSUFFICIENT_STORAGE,
            ChangeError::Approval(_) | ChangeError::Write(_) | ChangeError::Interrupted => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        let code = error.code();
        match error {
            ChangeError::Proposal { message, diagnostics } => {
                ApiError::new(status, code, message).with("details", json!(diagnostics))
            }
            other => ApiError::new(status, code, other.to_string()),
        }
    }
}

/// `GET /api/v1/workspaces`: the Workspaces the caller's namespace may use.
pub async fn workspaces(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<WorkspaceList>, ApiError> {
    let service = service(&state)?;
    let tenancy = state.engine.tenancy();
    let workspaces = service
        .workspaces()
        .into_iter()
        .filter(|w| caller.sees(&w.namespace) || tenancy.is_shared(&w.namespace))
        .collect();
    Ok(Json(WorkspaceList { workspaces }))
}

/// `GET /api/v1/workspaces`.
#[derive(Serialize, JsonSchema)]
pub struct WorkspaceList {
    /// The Workspaces of the caller's and the shared namespaces.
    pub workspaces: Vec<WorkspaceView>,
}

/// Path of `POST /api/v1/workspaces/{namespace}/{name}/fetch`.
#[derive(Deserialize, JsonSchema)]
pub struct WorkspacePath {
    /// Namespace of the Workspace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Body of `POST /api/v1/workspaces/{namespace}/{name}/fetch`: empty or `{}`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchBody {}

/// `POST /api/v1/workspaces/{namespace}/{name}/fetch`: fetch a git Workspace now.
pub async fn fetch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(WorkspacePath { namespace, name }): Path<WorkspacePath>,
    body: JsonBytes<FetchBody>,
) -> Result<Json<FetchedHead>, ApiError> {
    if !body.0.is_empty() {
        let FetchBody {} = decode(&body.0)?;
    }
    let service = service(&state)?;
    if !caller.sees(&namespace) {
        return Err(ApiError::not_found(format!("Workspace {namespace}/{name} not found")));
    }
    let head = service.fetch(&namespace, &name).await?;
    Ok(Json(head))
}

/// `POST /api/v1/change/simulations`: prepare a change (never writes).
pub async fn simulate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: JsonBytes<PreviewRequest>,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    let service = service(&state)?;
    let request: PreviewRequest = decode(&body.0)?;
    let namespace = request.namespace.clone().unwrap_or_else(|| caller.namespace.clone());
    if !caller.sees(&namespace) && !state.engine.tenancy().is_shared(&namespace) {
        return Err(ApiError::not_found(format!("Workspace {namespace}/{} not found", request.workspace.trim())));
    }
    let who = Requester { namespace: caller.namespace.clone(), source: "api".into(), actor: caller.name.clone() };
    let outcome = service.preview(request, who).await?;
    Ok((StatusCode::OK, [("x-akritas-run-id", outcome.run_id.clone())], Json(outcome)).into_response())
}

/// `GET /api/v1/change/simulations/{id}`: a pending or finished change.
pub async fn simulation(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<ChangeView>, ApiError> {
    let service = service(&state)?;
    let found = match ApprovalId::parse(&id) {
        Some(id) => service.get(&id).await?,
        None => None,
    };
    match found {
        Some((namespace, view)) if caller.sees(&namespace) => Ok(Json(view)),
        _ => Err(ApiError::not_found("pending change not found")),
    }
}

/// `POST /api/v1/change/simulations/{id}/apply` with `{"confirm": true}`: writes
/// the approved change once. The route needs the `admin` scope (checked by the
/// key middleware and again here).
pub async fn apply(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    headers: HeaderMap,
    body: JsonBytes<ApplyBody>,
) -> Result<Response, ApiError> {
    if !caller.allows(Scope::Admin) || !state.keys.enabled() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            "applying a change needs an API key with the admin scope; without api_keys (anonymous loopback access) nothing is ever applied",
        ));
    }
    require_json(&headers)?;
    let service = service(&state)?;
    let body: ApplyBody = decode(&body.0)?;
    if !body.confirm {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "confirm_required", "explicit confirm=true is required"));
    }
    let id = ApprovalId::parse(&id).ok_or_else(|| ChangeError::NotFound(TakeError::NotFound.to_string()))?;
    let outcome = service.apply(&id, Approver { name: caller.name.clone() }).await?;
    Ok((StatusCode::OK, [("x-akritas-run-id", outcome.run_id.clone())], Json(outcome)).into_response())
}
