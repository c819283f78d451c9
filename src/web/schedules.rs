//! `GET /api/v1/schedules`: the RunSchedules the caller reads (its namespaces and the shared
//! ones), each with its spec, conditions and status, as the operator writes them.
//! `POST /api/v1/schedules/{namespace}/{name}/run`: a Run of one of the caller's own now.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::auth::Caller;
use super::body::JsonBytes;
use super::error::ApiError;
use crate::catalog::ObjectKey;
use crate::resources::Kind;
use crate::resources::common::Condition;
use crate::resources::run_schedule::RunScheduleStatus;
use crate::schedules::RunNowError;
use crate::schedules::decide::NotNow;

/// `GET /api/v1/schedules`.
#[derive(Serialize, JsonSchema)]
pub struct Schedules {
    /// The schedules the caller reads, by namespace and name.
    pub schedules: Vec<ScheduleView>,
}

/// One RunSchedule.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleView {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The spec in force (absent when no version was ever valid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<Value>,
    /// `Ready`, `ReferencesResolved` and `Suspended`.
    pub conditions: Vec<Condition>,
    /// Ticks, the newest result, failures, skips (absent until the scheduler looked at it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<RunScheduleStatus>,
    /// Every problem of the newest version (absent when there is none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(default)]
    pub errors: Vec<String>,
}

/// `GET /api/v1/schedules`: tenant-filtered like `/api/v1/resources`.
pub async fn list(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> Json<Schedules> {
    let board = state.board.get();
    let visible = |namespace: &str| caller.sees(namespace) || state.engine.tenancy().is_shared(namespace);
    let schedules = board
        .resources
        .iter()
        .filter(|report| report.key.kind == Kind::RunSchedule && visible(&report.key.namespace))
        .map(|report| ScheduleView {
            namespace: report.key.namespace.clone(),
            name: report.key.name.clone(),
            spec: report.spec.clone(),
            conditions: report.conditions.clone(),
            status: state.board.facts_of::<RunScheduleStatus>(&report.key),
            errors: report.errors.clone(),
        })
        .collect();
    Json(Schedules { schedules })
}

/// Path of `POST /api/v1/schedules/{namespace}/{name}/run`.
#[derive(Deserialize, JsonSchema)]
pub struct SchedulePath {
    /// Namespace of the RunSchedule.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Body of `POST /api/v1/schedules/{namespace}/{name}/run`: empty or `{}`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunNowBody {}

/// An empty body, or the JSON object `{}` (serde would take `[]` for a struct without fields).
fn no_arguments(body: &axum::body::Bytes) -> Result<(), ApiError> {
    if body.is_empty() {
        return Ok(());
    }
    let value: Value = super::body::decode(body)?;
    match value.as_object() {
        Some(object) if object.is_empty() => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the body must be empty or the JSON object {}: this request takes no arguments",
        )),
    }
}

/// `202` of `POST /api/v1/schedules/{namespace}/{name}/run`.
#[derive(Serialize, JsonSchema)]
pub struct RunNowAccepted {
    /// `namespace/name`.
    pub schedule: String,
    /// The time the Run is scheduled for (RFC 3339); its result shows in the schedule's
    /// `status.lastResult` and `recentRuns` with this `scheduledTime`.
    pub scheduled_time: String,
    /// The Run's `job_id`, in its metadata in the audit; `status.recentRuns` lists the Run once
    /// it has started.
    pub job_id: String,
}

/// `POST /api/v1/schedules/{namespace}/{name}/run`: a Run of a schedule of the caller's own
/// namespaces now (a shared namespace's schedules are read, not run, by other tenants), under
/// the rules of a tick: 409 while one of its Runs runs or when it is not ready, 429 when the
/// namespace's daily token budget for schedules is spent.
pub async fn run_now(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(SchedulePath { namespace, name }): Path<SchedulePath>,
    body: JsonBytes<RunNowBody>,
) -> Result<(StatusCode, Json<RunNowAccepted>), ApiError> {
    no_arguments(&body.0)?;
    let id = format!("{namespace}/{name}");
    let key = ObjectKey { kind: crate::resources::Kind::RunSchedule, namespace: namespace.clone(), name: name.clone() };
    if !caller.sees(&namespace) || !state.catalog.current().entries.contains_key(&key) {
        return Err(ApiError::not_found(format!("RunSchedule {id} not found")));
    }
    let scheduler = state.schedules.as_ref().ok_or_else(|| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "schedules_disabled", "this host runs no scheduler")
    })?;
    match scheduler.run_now(&key, &caller.name).await {
        Ok(at) => {
            let job_id = crate::schedules::scheduler::tick_id(&id, at);
            Ok((StatusCode::ACCEPTED, Json(RunNowAccepted { schedule: id, scheduled_time: at.to_string(), job_id })))
        }
        Err(RunNowError::NotFound(_)) => Err(ApiError::not_found(format!("RunSchedule {id} not found"))),
        Err(error @ RunNowError::NotReady(_)) => {
            Err(ApiError::new(StatusCode::CONFLICT, "schedule_not_ready", error.to_string()))
        }
        Err(RunNowError::NotNow(error @ NotNow::Running { .. })) => {
            Err(ApiError::new(StatusCode::CONFLICT, "schedule_running", error.to_string()))
        }
        Err(RunNowError::NotNow(error @ NotNow::CostCap(_))) => {
            Err(ApiError::new(StatusCode::TOO_MANY_REQUESTS, "schedule_budget_spent", error.to_string()))
        }
        Err(error @ RunNowError::Store(_)) => {
            tracing::error!(component = "akritas_schedules", schedule = %id, %error, "a Run asked for now was not recorded");
            Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", error.to_string()))
        }
    }
}
