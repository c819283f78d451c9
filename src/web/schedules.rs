//! `GET /api/v1/schedules`: the RunSchedules the caller reads (its namespaces and the shared
//! ones), each with its spec, conditions and status, as the operator writes them.

use axum::Json;
use axum::extract::{Extension, State};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::auth::Caller;
use crate::resources::Kind;
use crate::resources::common::Condition;
use crate::resources::run_schedule::RunScheduleStatus;

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
