//! An in-process Akritas host (the real router and engine) wired to a scripted model,
//! with test tools registered the way MCP tools will be.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use akritas::audit::AuditLog;
use akritas::catalog::CatalogStore;
use akritas::catalog::directory::DirectorySource;
use akritas::catalog::merge;
use akritas::catalog::status::StatusBoard;
use akritas::engine::budget::BudgetLimits;
use akritas::engine::request::EngineSettings;
use akritas::engine::retrieval::{RetrievalError, Retrieved, Retriever};
use akritas::engine::run::Engine;
use akritas::llm::{LlmClient, LlmConfig};
use akritas::resources::mcp_adapter::Permission;
use akritas::tools::{Registry, RegistryBuilder, ToolFuture, ToolHandler, ToolLimits, ToolName, ToolSpec};
use akritas::web::auth::ApiKeys;
use akritas::web::{self, AppState, HostInfo};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::scripted_llm::ScriptedLlm;

/// Text of the repository's SYSTEM.md, as the host loads it.
pub fn system_instructions() -> String {
    std::fs::read_to_string(crate::root().join("instructions/SYSTEM.md")).unwrap().trim().to_string()
}

/// Engine settings with generous limits; tests narrow what they exercise.
pub fn settings() -> EngineSettings {
    EngineSettings {
        limits: BudgetLimits {
            max_duration_ms: 30_000,
            max_model_calls: 12,
            max_tool_calls: 8,
            max_tool_result_bytes: 2 * 1024 * 1024,
            max_retrieved_context_bytes: 128 * 1024,
            max_context_tokens: 40_000,
            max_output_tokens: 16_384,
        },
        default_max_tokens: 1024,
        max_tokens_limit: 4096,
        temperature: 0.2,
        response_language: "en".into(),
        max_concurrent_runs: 4,
        alert_reserved_runs: 0,
        max_runs_per_namespace: 256,
        queue_timeout: Duration::from_secs(5),
        search_top_k: 5,
        keep_input_namespaces: Default::default(),
    }
}

/// A tool answering a fixed JSON output and counting its calls.
pub fn fixed_tool(
    builder: &mut RegistryBuilder,
    name: &str,
    permission: Permission,
    output: Value,
    calls: Arc<AtomicUsize>,
) {
    let schema = json!({"type": "object", "properties": {"host": {"type": "string"}}, "additionalProperties": false});
    let spec = ToolSpec::new(ToolName::try_from(name).unwrap(), format!("Test tool {name}."), permission, schema);
    let text = output.to_string();
    let handler: Arc<dyn ToolHandler> = Arc::new(move |_arguments: Value| -> ToolFuture {
        calls.fetch_add(1, Ordering::SeqCst);
        let text = text.clone();
        Box::pin(async move { Ok(text) })
    });
    builder.register(spec, handler).unwrap();
}

/// Call counters of the standard test tools.
#[derive(Default, Clone)]
pub struct Counters {
    pub inventory: Arc<AtomicUsize>,
    pub processes: Arc<AtomicUsize>,
    pub postgres: Arc<AtomicUsize>,
    pub restart: Arc<AtomicUsize>,
}

/// `inventory.host`, `linux.processes`, `postgres.activity` (read) and `ops.restart` (write).
pub fn standard_tools() -> (Registry, Counters) {
    let counters = Counters::default();
    let mut builder = RegistryBuilder::new(ToolLimits::default());
    fixed_tool(
        &mut builder,
        "inventory.host",
        Permission::Read,
        json!({"host": "db-7", "roles": ["postgresql"], "owner": "data-platform"}),
        counters.inventory.clone(),
    );
    fixed_tool(
        &mut builder,
        "linux.processes",
        Permission::Read,
        json!({"top": [{"pid": 4242, "command": "postgres: autovacuum worker", "cpu": 97.5}]}),
        counters.processes.clone(),
    );
    fixed_tool(
        &mut builder,
        "postgres.activity",
        Permission::Read,
        json!({"active": 3, "longest_query_seconds": 1820, "waiting": 0}),
        counters.postgres.clone(),
    );
    fixed_tool(&mut builder, "ops.restart", Permission::Write, json!({"restarted": true}), counters.restart.clone());
    (builder.build(), counters)
}

/// Scheduler settings for tests and benches: `concurrency` scheduled Runs at once,
/// `per_namespace` per namespace, a namespace's `daily_tokens`, quick notifications, no
/// shared namespace.
pub fn scheduler_settings(
    daily_tokens: u64,
    concurrency: usize,
    per_namespace: usize,
) -> akritas::schedules::SchedulerSettings {
    akritas::schedules::SchedulerSettings {
        daily_tokens,
        concurrency,
        per_namespace,
        public_url: None,
        delivery: akritas::notify::RetryPolicy {
            attempts: 2,
            base_delay: Duration::from_millis(20),
            timeout: Duration::from_secs(5),
        },
        tenancy: akritas::tenancy::Tenancy::default(),
    }
}

/// A chat Run of `actor` in namespace `default`, started and finished (succeeded).
pub async fn finished_run(audit: &AuditLog, actor: &str) -> akritas::audit::RunId {
    let run = audit
        .start(akritas::audit::NewRun {
            namespace: "default".into(),
            source: "chat".into(),
            actor: actor.into(),
            model: Some("scripted-model".into()),
            catalog_version: 1,
            metadata: Default::default(),
        })
        .await
        .unwrap();
    let finish = akritas::audit::Finish {
        status: akritas::audit::RunStatus::Succeeded,
        error: None,
        error_code: None,
        metadata: Default::default(),
    };
    audit.finish(&run, finish).await.unwrap();
    run
}

/// A retriever that finds the same output for every query, in every namespace.
pub struct FixedRetriever {
    pub output: Value,
    pub documents: Vec<(String, String)>,
    pub versions: std::collections::BTreeMap<String, String>,
}

impl Retriever for FixedRetriever {
    fn is_available(&self, _scope: &akritas::tenancy::Scope) -> bool {
        true
    }

    fn search(
        &self,
        _scope: &akritas::tenancy::Scope,
        _query: &str,
        _top_k: usize,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Retrieved, RetrievalError>> + Send>> {
        let found = Retrieved {
            output: self.output.clone(),
            documents: self.documents.clone(),
            versions: self.versions.clone(),
        };
        Box::pin(async move { Ok(found) })
    }
}

/// Loads a Catalog from a directory once.
pub fn catalog_from(dir: &Path) -> CatalogStore {
    let store = CatalogStore::new();
    merge::apply(DirectorySource::new(vec![dir.to_path_buf()], None).reload(), &store, &StatusBoard::default());
    store
}

/// An engine on a scripted model.
pub fn engine(
    llm: &ScriptedLlm,
    settings: EngineSettings,
    tools: Registry,
    catalog: CatalogStore,
    audit: Option<Arc<AuditLog>>,
    retriever: Option<Arc<dyn Retriever>>,
) -> Engine {
    akritas::install_crypto_provider();
    let config =
        LlmConfig { system_instructions: Some(Arc::from(system_instructions())), ..LlmConfig::new(llm.url.clone()) };
    let client = LlmClient::new(config, reqwest::Client::new()).unwrap();
    Engine::new(settings, client, tools, audit, catalog, retriever)
}

/// A served router: `url` is `http://127.0.0.1:PORT`.
pub struct Host {
    pub url: String,
    pub engine: Arc<Engine>,
    cancel: CancellationToken,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Serves the real router for an engine.
pub async fn serve(engine: Engine, catalog: CatalogStore, keys: ApiKeys) -> Host {
    serve_with(engine, catalog, keys, None, Arc::new(akritas::catalog::secrets::EnvSecrets::process())).await
}

/// Serves the real router for an engine and an alert store.
pub async fn serve_with(
    engine: Engine,
    catalog: CatalogStore,
    keys: ApiKeys,
    alerts: Option<Arc<akritas::alerts::store::AlertStore>>,
    secrets: Arc<dyn akritas::catalog::secrets::SecretResolver>,
) -> Host {
    let engine = Arc::new(engine);
    let state = app_state(engine.clone(), catalog, keys, alerts, secrets, 1024 * 1024);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let cancel = CancellationToken::new();
    tokio::spawn(web::serve(listener, web::router(state), cancel.clone(), Duration::from_secs(1)));
    Host { url, engine, cancel }
}

/// The state the router serves (standalone mode, bodies up to `max_body_bytes`).
pub fn app_state(
    engine: Arc<Engine>,
    catalog: CatalogStore,
    keys: ApiKeys,
    alerts: Option<Arc<akritas::alerts::store::AlertStore>>,
    secrets: Arc<dyn akritas::catalog::secrets::SecretResolver>,
    max_body_bytes: usize,
) -> AppState {
    let info = HostInfo {
        database: None,
        mode: "standalone",
        model: "akritas".into(),
        response_language: "en".into(),
        instructions_sha256: String::new(),
        max_body_bytes,
        body_timeout: Duration::from_secs(30),
        mcp: web::mcp_server::McpLimits::default(),
        validator_sandbox: "not used: this host has no change pipeline".into(),
        edge: web::edge::Edge::default(),
        webhook_namespace: akritas::tenancy::DEFAULT_NAMESPACE.into(),
    };
    AppState {
        catalog,
        board: StatusBoard::default(),
        keys: Arc::new(keys),
        engine,
        alerts,
        secrets,
        info: Arc::new(info),
        change: None,
        bots: None,
        schedules: None,
    }
}

/// The change pipeline as `serve` builds it, over `catalog`'s Workspaces, with its
/// approval journal and clones under `data_dir`, on the scripted model.
pub async fn change_service(
    llm: &ScriptedLlm,
    catalog: CatalogStore,
    audit: Arc<AuditLog>,
    data_dir: &Path,
) -> Arc<akritas::change::service::ChangeService> {
    use akritas::app::change::{Directory, service};
    use akritas::app::workspaces::Workspaces;
    let board = StatusBoard::default();
    let secrets = Arc::new(akritas::catalog::secrets::EnvSecrets::process());
    // Path workspaces anywhere but the data directory (the tests' trees are temporary).
    let policy = akritas::catalog::policy::ResourcePolicy {
        workspace_roots: vec!["/".into()],
        data_dir: data_dir.to_path_buf(),
        ..Default::default()
    };
    let workspaces = Workspaces::new(data_dir.to_path_buf(), secrets, board.clone(), Arc::new(policy));
    let directory = Directory::new(catalog, board, workspaces);
    let settings =
        akritas::config::Settings { data_dir: data_dir.to_path_buf(), ..akritas::config::Settings::default() };
    let client = LlmClient::new(LlmConfig::new(llm.url.clone()), reqwest::Client::new()).unwrap();
    service(&settings, client, audit, directory, &akritas::app::storage::Stores::Embedded).await.unwrap()
}

/// An investigated incident's notification, with Markdown and a mention in its summary.
pub fn sample_notification() -> akritas::notify::Notification {
    akritas::notify::Notification {
        incident_id: "inc-7".into(),
        run_id: Some("run-7".into()),
        run_url: akritas::notify::run_url(Some("https://akritas.test"), "run-7"),
        source: "alertmanager:prod".into(),
        title: "HighCPU".into(),
        severity: akritas::severity::Severity::Critical,
        status: akritas::notify::AlertStatus::Firing,
        entity: "deployment:shop/api".into(),
        finding: akritas::investigation::FindingStatus::Suspected,
        confidence: akritas::investigation::Confidence::High,
        actionability: akritas::investigation::Actionability::RequiresHuman,
        summary: "*CPU* saturated, ping @channel".into(),
        impact: "checkout errors for 3% of users".into(),
        evidence: vec!["tool-call:call_akritas_planned_1".into()],
        ruled_out: vec!["disk pressure".into()],
        affected_components: vec!["shop/api".into()],
        recommended_actions: vec!["Scale `api` to 4 replicas".into()],
        evidence_count: 5,
        evidence_coverage: None,
        refused_evidence: 0,
        status_downgrade: None,
        production_writes: 0,
    }
}
