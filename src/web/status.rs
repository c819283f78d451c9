//! `GET /health` and `GET /api/v1/resources`: what the host runs and what it loaded.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::auth::Caller;
use crate::catalog::status::{InForce, Problem, ResourceReport};
use crate::config::Scope;
use crate::llm::structured::{Mode, ModeSource};
use crate::llm::{LlmClient, ModelFacts, ServerKind};
use crate::resources::common::{READY, find_condition, is_ready};

/// `GET /health`.
#[derive(Serialize, JsonSchema)]
pub struct Health {
    /// `ok`, or `degraded` when a journal cannot be written or a declared resource
    /// is not Ready. The HTTP status stays 200 while the host serves, so probes
    /// that read only the status code are unaffected; alert on this field or on
    /// `akritas_resources_not_ready` to act on it.
    pub status: &'static str,
    /// The components that are degraded, and why.
    pub degraded: Vec<Degraded>,
    /// Akritas version.
    pub version: &'static str,
    /// `standalone` or `kubernetes`.
    pub mode: &'static str,
    /// Model id Akritas exposes.
    pub model: String,
    /// Default response language.
    pub response_language: String,
    /// `api-key` or `disabled`.
    pub authentication: &'static str,
    /// SHA-256 of the loaded SYSTEM.md.
    pub system_instructions_sha256: String,
    /// How validators are confined: `landlock ABI N …`, `off: …` (an explicit
    /// `validator_sandbox: off`) or `unavailable: …` (validators do not run).
    pub validator_sandbox: String,
    /// How structured answers are asked of the upstream model.
    pub model_protocol: ModelProtocolHealth,
    /// The upstream model server as the host last reached it.
    pub model_server: ModelServerHealth,
    /// The Catalog in force.
    pub catalog: CatalogHealth,
    /// Where the stores are.
    pub storage: StorageHealth,
}

/// Where the audit, alerts, approvals and bot sessions are kept.
#[derive(Serialize, JsonSchema)]
pub struct StorageHealth {
    /// `embedded` or `postgres`.
    pub backend: &'static str,
    /// On `postgres`: the database as this replica reaches it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<crate::journal::database::DatabaseHealth>,
    /// On `postgres`: this replica's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
}

/// How structured answers (plans, results, proposals) are asked of the upstream model: the
/// setting, and what the host knows of the model.
#[derive(Serialize, JsonSchema)]
pub struct ModelProtocolHealth {
    /// The `model_protocol` setting: `auto`, or the one mode it fixes.
    pub setting: &'static str,
    /// The upstream model: configured, or discovered (`null` until the server listed one).
    pub model: Option<String>,
    /// What the model server is, once identified (`auto` identifies it at start; a fixed
    /// protocol at the first request).
    pub server: Option<ServerKind>,
    /// The mode the model's next structured step starts with (`null` under `auto` until the
    /// server is identified or a step answered: then `tool_call`, falling back as needed).
    pub mode: Option<Mode>,
    /// Where `mode` comes from: `probe` (what the server is), `fallback` (the server refused or
    /// ignored the mode before), `default` (auto's first mode answered) or `setting`.
    pub source: Option<ModeSource>,
    /// The server refused `tools` for the model, or says it would: requests carry none.
    pub tools_refused: bool,
}

impl ModelProtocolHealth {
    fn of(llm: &LlmClient) -> Self {
        let model = llm.known_model();
        let facts = model.as_deref().map_or_else(ModelFacts::default, |model| llm.model_facts(model));
        let facts = facts.under(llm.protocol());
        Self {
            setting: llm.protocol().as_str(),
            server: model.as_deref().and_then(|model| llm.known_server(model)),
            model,
            mode: facts.mode,
            source: facts.source,
            tools_refused: facts.tools_refused,
        }
    }
}

/// The upstream model server as the host last reached it.
#[derive(Serialize, JsonSchema)]
pub struct ModelServerHealth {
    /// Its base URL (`base_url`).
    pub url: String,
    /// Whether the last request reached it; `null` before the first.
    pub reachable: Option<bool>,
    /// Why the last request could not reach it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A degraded component.
#[derive(Serialize, JsonSchema)]
pub struct Degraded {
    /// `alerts`, `audit`, `database`, `model_server` or `resources`.
    pub component: &'static str,
    /// What failed and what it means for callers.
    pub reason: String,
}

/// The Catalog in force.
#[derive(Serialize, JsonSchema)]
pub struct CatalogHealth {
    /// Monotonic version.
    pub version: u64,
    /// Content hash.
    pub hash: String,
    /// Objects per kind.
    pub counts: BTreeMap<&'static str, usize>,
    /// Objects whose newest version is not in force.
    pub invalid_resources: usize,
    /// Problems not tied to an object.
    pub problems: usize,
    /// Declared resources that are not Ready, counted by kind, status and reason.
    pub not_ready: Vec<NotReady>,
}

/// How many resources of a kind are not Ready for one reason.
#[derive(Serialize, JsonSchema, Debug)]
pub struct NotReady {
    /// Resource kind.
    pub kind: &'static str,
    /// The `Ready` condition's reason (`CommandNotAllowed`, `SecretsUnresolved`, …).
    pub reason: String,
    /// The host is still looking (`Resolving`, `Connecting`, `Checking`,
    /// `Indexing`): not a problem yet, and not counted as degraded.
    pub in_progress: bool,
    /// Resources of `kind` whose `Ready` condition has this `reason`.
    pub count: usize,
}

/// The resources on `reports` that are not Ready, by kind and reason; a check still
/// under way ([`ResourceReport::problem`] is none) is `in_progress`.
fn not_ready(reports: &[ResourceReport]) -> Vec<NotReady> {
    let mut counts: BTreeMap<(&'static str, String, bool), usize> = BTreeMap::new();
    for report in reports.iter().filter(|r| !is_ready(&r.conditions)) {
        let reason = find_condition(&report.conditions, READY).map_or("Unknown", |c| c.reason.as_str());
        let in_progress = report.problem().is_none();
        *counts.entry((report.key.kind.as_str(), reason.to_string(), in_progress)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((kind, reason, in_progress), count)| NotReady { kind, reason, in_progress, count })
        .collect()
}

/// `2 of 11 resources are not Ready (McpAdapter CommandNotAllowed 1, …); …`, or
/// `None` when every resource that is not Ready is still being looked at.
fn not_ready_reason(not_ready: &[NotReady], total: usize) -> Option<String> {
    let failing: Vec<&NotReady> = not_ready.iter().filter(|n| !n.in_progress).collect();
    let count: usize = failing.iter().map(|n| n.count).sum();
    let parts: Vec<String> = failing.iter().map(|n| format!("{} {} {}", n.kind, n.reason, n.count)).collect();
    (count > 0).then(|| {
        format!(
            "{count} of {total} resources are not Ready ({}); their conditions say what to fix: \
             GET /api/v1/resources or `akritas validate`",
            parts.join(", ")
        )
    })
}

/// `GET /health`: the whole [`Health`] to a caller with a valid API key (to everyone when no
/// key is configured), only the status to anyone else: the components' reasons name
/// database errors, this replica and what the host runs.
pub async fn health(State(state): State<AppState>, headers: HeaderMap) -> Json<HealthAnswer> {
    let health = full_health(&state);
    Json(match state.keys.caller(&headers) {
        Some(_) => HealthAnswer::Full(Box::new(health)),
        None => HealthAnswer::Status(HealthStatus { status: health.status, details: STATUS_ONLY }),
    })
}

/// `GET /ready`: readiness. 200 while the host takes new work; 503 while a component it needs
/// to accept work cannot be used (a journal that cannot be written, the database unreachable),
/// so that traffic goes to a replica that can. Resources that are not Ready leave the host
/// ready: it serves, and `status` says `degraded`. Anyone may ask; like an anonymous `/health`,
/// it names no reason.
pub async fn ready(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let health = full_health(&state);
    let blocking: Vec<&'static str> =
        health.degraded.iter().map(|d| d.component).filter(|c| BLOCKS_WORK.contains(c)).collect();
    let code = if blocking.is_empty() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(Readiness { ready: blocking.is_empty(), status: health.status, not_ready: blocking }))
}

/// The degraded components that make a host refuse new work.
const BLOCKS_WORK: [&str; 3] = ["alerts", "audit", "database"];

/// What `GET /ready` answers.
#[derive(Serialize, JsonSchema)]
pub struct Readiness {
    /// Whether the host takes new work (the status code says the same: 200 or 503).
    pub ready: bool,
    /// `ok` or `degraded`, as `/health` says.
    pub status: &'static str,
    /// The components that keep it from taking work: `alerts`, `audit` or `database`.
    pub not_ready: Vec<&'static str>,
}

/// What `GET /health` answers.
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
pub enum HealthAnswer {
    /// To a caller with a valid API key, or to any caller when no key is configured.
    Full(Box<Health>),
    /// To a caller without a valid API key.
    Status(HealthStatus),
}

/// `GET /health` without a valid API key.
#[derive(Serialize, JsonSchema)]
pub struct HealthStatus {
    /// `ok` or `degraded`, as in the answer to a caller with a key.
    pub status: &'static str,
    /// Where the rest is.
    pub details: &'static str,
}

/// What an anonymous `/health` says of the rest.
const STATUS_ONLY: &str = "send an API key (Authorization: Bearer) to see why, and what this host runs";

/// The whole health of the host; the database's is its last probe ([`HealthWatch`]), so no
/// call makes a round trip to it.
///
/// [`HealthWatch`]: crate::journal::database::HealthWatch
fn full_health(state: &AppState) -> Health {
    let catalog = state.catalog.current();
    let board = state.board.get();
    let invalid = board.resources.iter().filter(|r| r.in_force != InForce::Current).count();
    let not_ready = not_ready(&board.resources);
    let mut degraded = Vec::new();
    if let Some(reason) = not_ready_reason(&not_ready, board.resources.len()) {
        degraded.push(Degraded { component: "resources", reason });
    }
    if let Some(alerts) = &state.alerts
        && let Some(reason) = alerts.degraded()
    {
        // A journal that failed a write is retried in the background (at most once a
        // second), so the host recovers when space returns even with no traffic.
        let alerts = alerts.clone();
        tokio::spawn(async move { alerts.recover().await });
        degraded.push(Degraded { component: "alerts", reason });
    }
    if let Some(audit) = state.engine.audit()
        && let Some(reason) = audit.write_failure()
    {
        let audit = audit.clone();
        tokio::spawn(async move { audit.recover().await });
        degraded.push(Degraded {
            component: "audit",
            reason: format!(
                "{reason}; chats and follow-ups get 507 and Runs cannot be recorded until a write succeeds again"
            ),
        });
    }
    let llm = state.engine.llm();
    let reach = llm.reach();
    if reach.reachable == Some(false) {
        degraded.push(Degraded {
            component: "model_server",
            reason: format!(
                "the model server at {} cannot be reached ({}); chats and investigations fail until it answers",
                llm.base_url(),
                reach.error.as_deref().unwrap_or("no cause given"),
            ),
        });
    }
    let model_server =
        ModelServerHealth { url: llm.base_url().to_string(), reachable: reach.reachable, error: reach.error };
    let storage = match &state.info.database {
        None => StorageHealth { backend: "embedded", database: None, replica: None },
        Some((watch, replica)) => {
            let health = watch.current();
            if let Some(error) = &health.error {
                degraded.push(Degraded {
                    component: "database",
                    reason: format!(
                        "the database is unreachable ({error}); deliveries get 503 with Retry-After and reads fail until \
                         it answers again"
                    ),
                });
            }
            StorageHealth { backend: "postgres", database: Some(health), replica: Some(replica.id().to_string()) }
        }
    };
    Health {
        status: if degraded.is_empty() { "ok" } else { "degraded" },
        degraded,
        version: env!("CARGO_PKG_VERSION"),
        mode: state.info.mode,
        model: state.info.model.clone(),
        response_language: state.info.response_language.clone(),
        authentication: if state.keys.enabled() { "api-key" } else { "disabled" },
        system_instructions_sha256: state.info.instructions_sha256.clone(),
        validator_sandbox: state.info.validator_sandbox.clone(),
        model_protocol: ModelProtocolHealth::of(llm),
        model_server,
        catalog: CatalogHealth {
            version: catalog.version,
            hash: catalog.hash.clone(),
            counts: catalog.counts(),
            invalid_resources: invalid,
            problems: board.problems.len(),
            not_ready,
        },
        storage,
    }
}

/// `GET /api/v1/resources`.
#[derive(Serialize, JsonSchema)]
pub struct Resources {
    /// Catalog version in force.
    pub catalog_version: u64,
    /// Its content hash.
    pub catalog_hash: String,
    /// RFC 3339 time of the last load.
    pub loaded_at: String,
    /// The objects the caller reads.
    pub resources: Vec<ResourceView>,
    /// Problems not tied to an object (`admin` keys only; empty for others).
    pub problems: Vec<Problem>,
}

/// An object with its load outcome and runtime status.
#[derive(Serialize, JsonSchema)]
pub struct ResourceView {
    /// The load outcome.
    #[serde(flatten)]
    pub report: ResourceReport,
    /// What the host observed at runtime (per kind: webhook path and counters, discovered tools, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// `GET /api/v1/resources`: the resources of the namespaces the caller reads and
/// of the shared namespaces (its Runs use those); load problems of manifests that
/// could not be attributed to an object are shown to `admin` keys only.
pub async fn resources(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> Json<Resources> {
    let catalog = state.catalog.current();
    let board = state.board.get();
    let visible = |namespace: &str| caller.sees(namespace) || state.engine.tenancy().is_shared(namespace);
    let resources = board
        .resources
        .iter()
        .filter(|report| visible(&report.key.namespace))
        .map(|report| ResourceView {
            report: report.clone(),
            status: state.board.facts(&report.key).filter(|facts| !facts.is_empty()).map(serde_json::Value::Object),
        })
        .collect();
    Json(Resources {
        catalog_version: catalog.version,
        catalog_hash: catalog.hash.clone(),
        loaded_at: board.loaded_at.clone(),
        resources,
        problems: if caller.allows(Scope::Admin) { board.problems.clone() } else { Vec::new() },
    })
}
