//! Akritas as an MCP server at `/mcp` (streamable HTTP, rmcp), behind the same API keys
//! as the rest of the API, so other agents (kagent, Claude Code, IDEs) can use it. Five
//! read-only tools: `ask` (a read-only Run, source `mcp`), `search_runbooks`,
//! `list_incidents`, `get_incident` and `get_run`. Each call acts as the API key of its
//! own HTTP request (namespace and actor); another namespace's Run or Incident does not
//! exist for it. `ask` is an audited Run; every other call appends a `read` record to the
//! audit journal (refused when the journal cannot record it). Sessions are bounded in
//! number and idle time; the `Host` header is checked against an allowlist (DNS rebinding).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::middleware;
use axum::routing::get_service;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::auth::Caller;
use super::mcp_sessions::{SessionGate, gate_sessions};
use crate::alerts::IncidentStatus;
use crate::audit::ReadRecord;
use crate::config::Scope;
use crate::engine::conversation::{Speaker, Turn};
use crate::engine::knowledge_tools::MAX_TOP_K;
use crate::engine::request::RunRequest;
use crate::victoriametrics::server::{input_schema, non_nullable_properties, parse_args};

/// Server name reported in `initialize`.
pub const SERVER_NAME: &str = "akritas";
/// Longest `ask` question in bytes.
pub const MAX_QUESTION_BYTES: usize = 16 * 1024;
/// Longest incident or Run id accepted.
const MAX_ID_BYTES: usize = 128;
/// Incidents listed when `limit` is not given.
const DEFAULT_INCIDENTS: usize = 100;

/// Limits of the MCP server (settings `mcp_max_sessions`, `mcp_session_idle_timeout`,
/// `mcp_allowed_hosts`; the public URL's host is allowed too).
#[derive(Clone, Debug)]
pub struct McpLimits {
    /// Sessions open at once; an `initialize` beyond it gets 503.
    pub max_sessions: usize,
    /// Sessions one API key may hold open at once; an `initialize` beyond it gets 429.
    pub max_sessions_per_key: usize,
    /// A session without traffic for this long is closed.
    pub idle_timeout: Duration,
    /// `Host` values accepted besides loopback.
    pub allowed_hosts: Vec<String>,
    /// Ends every session (and its SSE streams) when the server stops.
    pub shutdown: CancellationToken,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            max_sessions: crate::config::defaults::MCP_MAX_SESSIONS as usize,
            max_sessions_per_key: crate::config::defaults::MCP_MAX_SESSIONS_PER_KEY as usize,
            idle_timeout: crate::config::defaults::MCP_SESSION_IDLE_TIMEOUT,
            allowed_hosts: Vec::new(),
            shutdown: CancellationToken::new(),
        }
    }
}

/// The `/mcp` route (API keys are checked by the caller's `route_layer`).
pub fn routes(state: &AppState) -> Router<AppState> {
    let limits = &state.info.mcp;
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(limits.idle_timeout);
    let manager = Arc::new(manager);
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.extend(limits.allowed_hosts.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_cancellation_token(limits.shutdown.child_token())
        .with_max_request_body_bytes(state.info.max_body_bytes);
    let server = state.clone();
    let service = StreamableHttpService::new(move || Ok(AkritasMcp::new(server.clone())), manager.clone(), config);
    let gate = SessionGate::new(manager, limits.max_sessions, limits.max_sessions_per_key);
    // The methods streamable HTTP uses; others get the router's JSON 405.
    let methods = get_service(service.clone()).post_service(service.clone()).delete_service(service);
    Router::new().route("/mcp", methods).route_layer(middleware::from_fn_with_state(gate, gate_sessions))
}

/// Arguments of `ask`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = non_nullable_properties)]
pub struct AskArgs {
    /// The question (1..16384 bytes, not blank).
    #[schemars(length(min = 1, max = 16384))]
    pub question: String,
    /// Facts that select skills, such as {"service": "postgresql"} (at most 32 entries; keys up to 64 bytes,
    /// values up to 4096 bytes).
    #[schemars(extend("maxProperties" = 32))]
    pub context: Option<BTreeMap<String, String>>,
}

/// Arguments of `search_runbooks`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = non_nullable_properties)]
pub struct SearchArgs {
    /// What to look for (1..1024 bytes, not blank).
    #[schemars(length(min = 1, max = 1024))]
    pub query: String,
    /// Hits to return (1..20; default the host's search_top_k).
    #[schemars(range(min = 1, max = 20))]
    pub top_k: Option<u64>,
}

/// Arguments of `list_incidents`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = non_nullable_properties)]
pub struct ListIncidentsArgs {
    /// Most incidents to return, newest update first (1..1000, default 100).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u64>,
    /// Only incidents in this state.
    pub status: Option<IncidentFilter>,
}

/// Incident state filter.
#[derive(Clone, Copy, Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum IncidentFilter {
    /// Still firing.
    Firing,
    /// No alert of the incident fires any more (or it opened on a resolved event).
    Resolved,
}

/// Arguments of `get_incident` and `get_run`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdArgs {
    /// The id (1..128 bytes), as listed by `list_incidents` or returned by `ask` (`run_id`).
    #[schemars(length(min = 1, max = 128))]
    pub id: String,
}

/// The MCP server of one session; each call acts as the caller of its HTTP request.
#[derive(Clone)]
pub struct AkritasMcp {
    state: AppState,
    tool_router: ToolRouter<Self>,
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// The caller `auth::require_key` recorded on the HTTP request of this call, and the
/// call's arguments checked against the tool's schema (a tool error naming what to fix).
fn call_args<T: serde::de::DeserializeOwned + schemars::JsonSchema + 'static>(
    raw: JsonObject,
    parts: &axum::http::request::Parts,
) -> Result<(Caller, T), Box<CallToolResult>> {
    let caller = parts.extensions.get::<Caller>().cloned();
    let caller = caller.ok_or_else(|| Box::new(tool_error("the request carries no authenticated caller")))?;
    let args = parse_args::<T>(raw).map_err(|error| Box::new(tool_error(error.to_string())))?;
    Ok((caller, args))
}

impl AkritasMcp {
    /// A session's server over the host's state.
    pub fn new(state: AppState) -> Self {
        Self { state, tool_router: Self::tool_router() }
    }

    /// Audits a read of what `found` holds (when the audit journal is enabled), then answers
    /// it: the value, or the not-found message. A read the journal cannot record is refused.
    async fn read(
        &self,
        caller: &Caller,
        tool: &str,
        target: String,
        found: Result<(usize, Value), String>,
    ) -> CallToolResult {
        if let Some(audit) = self.state.engine.audit() {
            let read = ReadRecord {
                namespace: caller.namespace.clone(),
                source: "mcp".into(),
                actor: caller.name.clone(),
                tool: tool.into(),
                target,
                returned: found.as_ref().map_or(0, |(returned, _)| u32::try_from(*returned).unwrap_or(u32::MAX)),
            };
            if let Err(error) = audit.record_read(read).await {
                tracing::error!(%error, tool, "MCP read refused: the audit journal cannot record it");
                return tool_error(format!(
                    "the audit journal cannot record this read, so it is refused; retry later ({error})"
                ));
            }
        }
        match found {
            Ok((_, value)) => CallToolResult::structured(value),
            Err(missing) => tool_error(missing),
        }
    }

    async fn ask_as(&self, caller: Caller, args: AskArgs) -> CallToolResult {
        if !caller.allows(Scope::Chat) {
            return tool_error(format!(
                "API key {:?} lacks the chat scope `ask` needs (it starts a Run); use a key with chat",
                caller.name
            ));
        }
        if args.question.trim().is_empty() || args.question.len() > MAX_QUESTION_BYTES {
            return tool_error(format!("`question` must be 1..{MAX_QUESTION_BYTES} bytes and not blank"));
        }
        let context = args.context.unwrap_or_default();
        if let Err(message) = super::runs::check_context(&context) {
            return tool_error(message);
        }
        let request = RunRequest {
            namespace: caller.namespace,
            source: "mcp".into(),
            actor: caller.name,
            turns: vec![Turn { role: Speaker::User, content: args.question }],
            context,
            ..RunRequest::default()
        };
        match self.state.engine.run(request).await {
            Ok(outcome) => {
                let tools: Vec<Value> =
                    outcome.activity.iter().map(|a| json!({"name": a.name, "status": a.status})).collect();
                CallToolResult::structured(json!({
                    "answer": outcome.answer,
                    "run_id": outcome.run_id,
                    "skills": outcome.skills,
                    "tools": tools,
                    "usage": outcome.usage,
                }))
            }
            Err(error) => {
                let api = super::error::ApiError::from(error);
                let mut body = json!({"code": api.code, "message": api.message});
                if let Some(run_id) = api.details.get("run_id") {
                    body["run_id"] = run_id.clone();
                }
                CallToolResult::structured_error(body)
            }
        }
    }

    async fn search_as(&self, caller: Caller, args: SearchArgs) -> CallToolResult {
        let query = args.query.trim();
        if query.is_empty() || query.len() > 1024 {
            return tool_error("`query` must be 1..1024 bytes and not blank");
        }
        let scope = self.state.engine.tenancy().scope(&caller.namespace);
        let Some(retriever) = self.state.engine.retriever().filter(|r| r.is_available(&scope)) else {
            return tool_error(format!("no runbooks are loaded for namespace {:?}", caller.namespace));
        };
        let top_k = match args.top_k {
            None => self.state.engine.settings().search_top_k,
            Some(k @ 1..=MAX_TOP_K) => k as usize,
            Some(_) => return tool_error(format!("`top_k` must be an integer from 1 to {MAX_TOP_K}")),
        };
        match retriever.search(&scope, query, top_k).await {
            Ok(found) => {
                let target =
                    format!("query sha256:{} chars:{}", hex::encode(Sha256::digest(query)), query.chars().count());
                self.read(&caller, "search_runbooks", target, Ok((found.documents.len(), found.output))).await
            }
            Err(error) => tool_error(format!("runbook search failed: {error}")),
        }
    }

    async fn incidents_as(&self, caller: Caller, args: ListIncidentsArgs) -> CallToolResult {
        let Ok(store) = super::alerts::store(&self.state) else {
            return tool_error("alert ingestion is disabled on this host: there are no incidents");
        };
        let limit = match args.limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)) {
            None => DEFAULT_INCIDENTS,
            Some(l) if (1..=super::alerts::MAX_INCIDENTS).contains(&l) => l,
            Some(_) => {
                return tool_error(format!("`limit` must be an integer from 1 to {}", super::alerts::MAX_INCIDENTS));
            }
        };
        let status = args.status.map(|s| match s {
            IncidentFilter::Firing => IncidentStatus::Firing,
            IncidentFilter::Resolved => IncidentStatus::Resolved,
        });
        let target = format!("limit:{limit} status:{}", args.status.map_or("any", |s| s.as_str()));
        let found = match super::alerts::visible_incidents(store, &caller, limit, status).await {
            Ok(incidents) => Ok((incidents.len(), json!({"incidents": incidents}))),
            Err(error) => Err(error.message),
        };
        self.read(&caller, "list_incidents", target, found).await
    }

    async fn incident_as(&self, caller: Caller, args: IdArgs) -> CallToolResult {
        let Ok(store) = super::alerts::store(&self.state) else {
            return tool_error("alert ingestion is disabled on this host: there are no incidents");
        };
        let id = match checked_id(&args.id) {
            Ok(id) => id,
            Err(error) => return *error,
        };
        let found = match super::alerts::visible_incident(store, &caller, id).await {
            Ok(Some(incident)) => Ok((1, serde_json::to_value(incident).unwrap_or(Value::Null))),
            Ok(None) => Err(format!("incident {id:?} not found")),
            Err(error) => Err(error.message),
        };
        self.read(&caller, "get_incident", id.to_string(), found).await
    }

    async fn run_as(&self, caller: Caller, args: IdArgs) -> CallToolResult {
        let Some(audit) = self.state.engine.audit() else {
            return tool_error("the audit journal is disabled on this host: there are no Runs");
        };
        let id = match checked_id(&args.id) {
            Ok(id) => id,
            Err(error) => return *error,
        };
        let found = match super::runs::visible_run(audit, &caller, id).await {
            Ok(Some(run)) => Ok((1, json!({"run": run}))),
            Ok(None) => Err(format!("run {id:?} not found")),
            Err(error) => Err(error.message),
        };
        self.read(&caller, "get_run", id.to_string(), found).await
    }
}

impl IncidentFilter {
    fn as_str(self) -> &'static str {
        match self {
            IncidentFilter::Firing => "firing",
            IncidentFilter::Resolved => "resolved",
        }
    }
}

/// A trimmed id of 1..[`MAX_ID_BYTES`] bytes.
fn checked_id(id: &str) -> Result<&str, Box<CallToolResult>> {
    let id = id.trim();
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(Box::new(tool_error(format!("`id` must be 1..{MAX_ID_BYTES} bytes and not blank"))));
    }
    Ok(id)
}

#[tool_router]
impl AkritasMcp {
    #[tool(
        description = "Ask Akritas an operations question. It runs a read-only investigation (a Run) with the \
                       tools, runbooks and skills configured for your API key's namespace and returns \
                       {answer, run_id, skills, tools:[{name,status}], usage}. Needs a key with the chat scope.",
        input_schema = input_schema::<AskArgs>(),
        annotations(
            title = "Ask Akritas (read-only Run)",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn ask(
        &self,
        Parameters(raw): Parameters<JsonObject>,
        Extension(parts): Extension<axum::http::request::Parts>,
    ) -> Result<CallToolResult, McpError> {
        Ok(match call_args::<AskArgs>(raw, &parts) {
            Ok((caller, args)) => self.ask_as(caller, args).await,
            Err(error) => *error,
        })
    }

    #[tool(
        description = "Search the operators' runbooks (BM25) your namespace may read. Returns title, source, url, \
                       score and an excerpt per hit. Runbooks are guidance, not evidence about the current state.",
        input_schema = input_schema::<SearchArgs>(),
        annotations(
            title = "Search runbooks",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn search_runbooks(
        &self,
        Parameters(raw): Parameters<JsonObject>,
        Extension(parts): Extension<axum::http::request::Parts>,
    ) -> Result<CallToolResult, McpError> {
        Ok(match call_args::<SearchArgs>(raw, &parts) {
            Ok((caller, args)) => self.search_as(caller, args).await,
            Err(error) => *error,
        })
    }

    #[tool(
        description = "List the incidents of your namespace, newest update first (as GET /api/v1/incidents), \
                       optionally only `firing` or `resolved` ones.",
        input_schema = input_schema::<ListIncidentsArgs>(),
        annotations(
            title = "List incidents",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn list_incidents(
        &self,
        Parameters(raw): Parameters<JsonObject>,
        Extension(parts): Extension<axum::http::request::Parts>,
    ) -> Result<CallToolResult, McpError> {
        Ok(match call_args::<ListIncidentsArgs>(raw, &parts) {
            Ok((caller, args)) => self.incidents_as(caller, args).await,
            Err(error) => *error,
        })
    }

    #[tool(
        description = "One incident with its alert events, investigation jobs, Runs and deliveries \
                       (as GET /api/v1/incidents/{id}).",
        input_schema = input_schema::<IdArgs>(),
        annotations(
            title = "Get incident",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn get_incident(
        &self,
        Parameters(raw): Parameters<JsonObject>,
        Extension(parts): Extension<axum::http::request::Parts>,
    ) -> Result<CallToolResult, McpError> {
        Ok(match call_args::<IdArgs>(raw, &parts) {
            Ok((caller, args)) => self.incident_as(caller, args).await,
            Err(error) => *error,
        })
    }

    #[tool(
        description = "One Run as the audit journal recorded it: source, actor, status, tool calls with their \
                       arguments and results, skills, usage (as GET /api/v1/runs/{id}).",
        input_schema = input_schema::<IdArgs>(),
        annotations(
            title = "Get Run",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn get_run(
        &self,
        Parameters(raw): Parameters<JsonObject>,
        Extension(parts): Extension<axum::http::request::Parts>,
    ) -> Result<CallToolResult, McpError> {
        Ok(match call_args::<IdArgs>(raw, &parts) {
            Ok((caller, args)) => self.run_as(caller, args).await,
            Err(error) => *error,
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for AkritasMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Akritas, a Kubernetes operations assistant. `ask` runs a read-only investigation and returns the \
                 answer with its run_id; `get_run` shows what that Run did. `search_runbooks`, `list_incidents` and \
                 `get_incident` read what your API key's namespace may see. Nothing here changes the cluster.",
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_urls_host_is_allowed_besides_the_configured_hosts() {
        let flags = crate::config::ServeFlags {
            public_url: Some("https://Akritas.example.com:8443/ops".into()),
            mcp_allowed_hosts: vec!["akritas.ops.svc".into()],
            ..Default::default()
        };
        let settings = crate::config::load(&flags, &|_| None).unwrap();
        let limits = crate::app::narrow::mcp(&settings);
        assert_eq!(limits.allowed_hosts, ["akritas.ops.svc", "akritas.example.com:8443"]);
    }

    #[test]
    fn tool_schemas_are_strict_and_bounded() {
        let ask = input_schema::<AskArgs>();
        assert_eq!(ask.get("additionalProperties"), Some(&Value::Bool(false)));
        assert_eq!(ask["properties"]["question"]["maxLength"], 16384);
        assert_eq!(ask["properties"]["context"]["maxProperties"], 32);
        assert_eq!(ask["required"], json!(["question"]));
        let list = input_schema::<ListIncidentsArgs>();
        assert_eq!(list["properties"]["limit"]["maximum"], 1000);
        assert!(Value::Object((*list).clone()).to_string().contains("resolved"), "{list:?}");
        assert_eq!(input_schema::<IdArgs>()["properties"]["id"]["maxLength"], 128);
    }
}
