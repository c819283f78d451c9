//! Change routes: `GET /api/v1/workspaces`, `POST /api/v1/workspaces/{namespace}/{name}/fetch`,
//! `POST /api/v1/change/simulations`, `GET /api/v1/change/simulations/{id}` and
//! `POST /api/v1/change/simulations/{id}/apply` (an `admin` key only: the one
//! route in Akritas that writes).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::runs::{decode, require_json};
use crate::change::ChangeError;
use crate::change::service::{Approver, ChangeService, PreviewRequest, Requester};
use crate::config::Scope;

/// Body of `POST /api/v1/change/simulations/{id}/apply`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplyBody {
    #[serde(default)]
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

/// The envelope of a change failure; a failed proposal carries its per-attempt diagnostics.
pub fn change_error(error: ChangeError) -> ApiError {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let code = error.code();
    match error {
        ChangeError::Proposal { message, diagnostics } => {
            ApiError::new(status, code, message).with("details", json!(diagnostics))
        }
        other => ApiError::new(status, code, other.to_string()),
    }
}

/// `GET /api/v1/workspaces`: the Workspaces the caller's namespace may use.
pub async fn workspaces(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let service = service(&state)?;
    let tenancy = state.engine.tenancy();
    let visible: Vec<Value> = service
        .workspaces()
        .into_iter()
        .filter(|w| w["namespace"].as_str().is_some_and(|ns| caller.sees(ns) || tenancy.is_shared(ns)))
        .collect();
    Ok(Json(json!({ "workspaces": visible })))
}

/// Body of `POST /api/v1/workspaces/{namespace}/{name}/fetch`: empty or `{}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchBody {}

/// `POST /api/v1/workspaces/{namespace}/{name}/fetch`: fetch a git Workspace now.
pub async fn fetch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((namespace, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    if !body.is_empty() {
        let FetchBody {} = decode(&body)?;
    }
    let service = service(&state)?;
    if !caller.sees(&namespace) {
        return Err(ApiError::not_found(format!("Workspace {namespace}/{name} not found")));
    }
    let head = service.fetch(&namespace, &name).await.map_err(change_error)?;
    Ok(Json(head))
}

/// `POST /api/v1/change/simulations`: prepare a change (never writes).
pub async fn simulate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    let service = service(&state)?;
    let request: PreviewRequest = decode(&body)?;
    let namespace = request.namespace.clone().unwrap_or_else(|| caller.namespace.clone());
    if !caller.sees(&namespace) && !state.engine.tenancy().is_shared(&namespace) {
        return Err(ApiError::not_found(format!("Workspace {namespace}/{} not found", request.workspace.trim())));
    }
    let who = Requester { namespace: caller.namespace.clone(), source: "api".into(), actor: caller.name.clone() };
    let outcome = service.preview(request, who).await.map_err(change_error)?;
    Ok((StatusCode::OK, [("x-akritas-run-id", outcome.run_id.clone())], Json(outcome)).into_response())
}

/// `GET /api/v1/change/simulations/{id}`: a pending or finished change.
pub async fn simulation(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let service = service(&state)?;
    match service.get(&id) {
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
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    if !caller.allows(Scope::Admin) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            "applying a change needs an API key with the admin scope",
        ));
    }
    require_json(&headers)?;
    let service = service(&state)?;
    let body: ApplyBody = decode(&body)?;
    if !body.confirm {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "confirm_required", "explicit confirm=true is required"));
    }
    let outcome = service.apply(&id, Approver { name: caller.name.clone() }).await.map_err(change_error)?;
    Ok((StatusCode::OK, [("x-akritas-run-id", outcome.run_id.clone())], Json(outcome)).into_response())
}
