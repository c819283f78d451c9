//! The run loop (docs/architecture.md, the path of a Run): every chat, follow-up, bot
//! message, facade call and alert goes through [`Engine::run`]. The host owns the budget, decides
//! which tools exist, executes every call itself and records what it did. The
//! steps live in their own modules; this one admits a Run, opens and closes its
//! record, and maps how it ended.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::slots::{Class, FairSlots};

use super::conversation;
use super::progress::RunProgress;
use super::record::{self, Opening, Recorder};
use super::request::{self, EngineSettings, FailedRun, RequestError, RunError, RunOutcome, RunRequest};
use super::retrieval::Retriever;
use super::skills;
use super::state::RunState;
use super::steps::{self, Inputs};
use super::structuring;
use crate::audit::{ActiveRun, AuditError, AuditLog, RunId};
use crate::catalog::CatalogStore;
use crate::llm::LlmClient;
use crate::tenancy::Tenancy;
use crate::tools::{ReadOnlyPolicy, Registry, ScopedTools};

/// The read-only tools the engine may hand out: some visible to every Run (built
/// in, or given by a test), the rest owned by the namespace of the resource that
/// declared them.
#[derive(Clone)]
struct Tools {
    everywhere: Registry,
    /// Built-in tools bound to each Run's scope (the Kubernetes tools).
    scoped: Option<Arc<dyn ScopedTools>>,
    by_namespace: BTreeMap<String, Registry>,
}

/// The engine: shared by every entry point.
pub struct Engine {
    settings: EngineSettings,
    llm: LlmClient,
    tools: std::sync::RwLock<Tools>,
    tenancy: Tenancy,
    audit: Option<Arc<AuditLog>>,
    catalog: CatalogStore,
    retriever: Option<Arc<dyn Retriever>>,
    slots: Arc<FairSlots>,
}

impl Engine {
    /// Builds the engine. `tools` is filtered to the read-only tools here, whatever
    /// the caller passes: only `read` tools ever reach a Run.
    pub fn new(
        settings: EngineSettings,
        llm: LlmClient,
        tools: Registry,
        audit: Option<Arc<AuditLog>>,
        catalog: CatalogStore,
        retriever: Option<Arc<dyn Retriever>>,
    ) -> Self {
        let slots = Arc::new(FairSlots::new(crate::slots::Limits {
            pool: "runs",
            total: (settings.max_concurrent_runs, "max_concurrent_runs"),
            reserved: (settings.alert_reserved_runs, "alert_reserved_runs"),
            per_key: (settings.max_runs_per_namespace, "max_runs_per_namespace"),
        }));
        let tools = Tools { everywhere: tools.filter(&ReadOnlyPolicy), scoped: None, by_namespace: BTreeMap::new() };
        Self {
            tools: std::sync::RwLock::new(tools),
            tenancy: Tenancy::default(),
            settings,
            llm,
            audit,
            catalog,
            retriever,
            slots,
        }
    }

    /// Which namespaces' resources a Run of each namespace may use.
    pub fn with_tenancy(mut self, tenancy: Tenancy) -> Self {
        self.tenancy = tenancy;
        self
    }

    /// The tenancy in force.
    pub fn tenancy(&self) -> &Tenancy {
        &self.tenancy
    }

    /// The model client Runs ask.
    pub fn llm(&self) -> &LlmClient {
        &self.llm
    }

    /// The authorized read-only tools a Run of `namespace` gets now (a Run keeps
    /// the set it started with): the tools visible everywhere, the built-in scoped
    /// tools bound to that namespace, those of its own namespace and those of the
    /// shared namespaces. A name already taken is not
    /// shadowed: the earlier registry keeps it (adapters refuse such a namespace
    /// before they start, so this is a last line of defence).
    pub fn tools_for(&self, namespace: &str) -> Registry {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner()).clone();
        let own = tools.by_namespace.get(namespace).into_iter();
        let shared = tools
            .by_namespace
            .iter()
            .filter(|(owner, _)| owner.as_str() != namespace && self.tenancy.is_shared(owner))
            .map(|(_, registry)| registry);
        let scoped = tools.scoped.as_ref().map(|scoped| scoped.registry_for(namespace).filter(&ReadOnlyPolicy));
        let mut visible = tools.everywhere;
        for registry in scoped.iter().chain(own).chain(shared) {
            match visible.merge(registry) {
                Ok(merged) => visible = merged,
                Err(error) => tracing::warn!(%namespace, %error, "tools not offered: a name is already taken"),
            }
        }
        visible
    }

    /// Replaces the tools every namespace sees (built-in or test tools); only
    /// `read` tools are kept.
    pub fn set_tools(&self, tools: &Registry) {
        self.tools.write().unwrap_or_else(|p| p.into_inner()).everywhere = tools.filter(&ReadOnlyPolicy);
    }

    /// Sets the built-in tools bound to each Run's scope (`None`: none).
    pub fn set_scoped_tools(&self, scoped: Option<Arc<dyn ScopedTools>>) {
        self.tools.write().unwrap_or_else(|p| p.into_inner()).scoped = scoped;
    }

    /// Replaces the tools owned by namespaces (MCP adapters, by the namespace of
    /// their resource); only `read` tools are kept.
    pub fn set_namespaced_tools(&self, tools: &BTreeMap<String, Registry>) {
        let filtered = tools.iter().map(|(ns, registry)| (ns.clone(), registry.filter(&ReadOnlyPolicy))).collect();
        self.tools.write().unwrap_or_else(|p| p.into_inner()).by_namespace = filtered;
    }

    /// The audit log, when enabled.
    pub fn audit(&self) -> Option<&Arc<AuditLog>> {
        self.audit.as_ref()
    }

    /// The runbook retrieval Runs use, when a knowledge base is configured.
    pub fn retriever(&self) -> Option<&Arc<dyn Retriever>> {
        self.retriever.as_ref()
    }

    /// The budget, token, concurrency and retrieval settings every Run of this engine uses.
    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    /// Runs a conversation to an answer.
    pub async fn run(&self, request: RunRequest) -> Result<RunOutcome, RunError> {
        self.run_traced(request).await.map_err(|failed| failed.error)
    }

    /// Runs a conversation to an answer; a failed Run also gives what it spent and
    /// the tool calls it made before it stopped (replay and evals report them).
    pub async fn run_traced(&self, request: RunRequest) -> Result<RunOutcome, FailedRun> {
        conversation::validate(&request.turns).map_err(|e| RunError::from(RequestError::from(e)))?;
        self.execute(request, None).await
    }

    /// Continues an existing Run with a follow-up question; events are appended to it.
    pub async fn follow_up(
        &self,
        run_id: &RunId,
        question: &str,
        mut request: RunRequest,
    ) -> Result<RunOutcome, RunError> {
        let question = request::follow_up_question(question)?;
        let audit = self.audit.as_ref().ok_or(RunError::UnknownRun)?;
        // Held until the follow-up ends: a second one on the same Run is refused.
        let active = audit.claim(run_id).await.map_err(|error| match error {
            AuditError::RunActive(id) => RunError::RunBusy(id),
            AuditError::UnknownRun(_) => RunError::UnknownRun,
            other => RunError::Audit(other),
        })?;
        let run = audit.get(run_id).await.map_err(RunError::Audit)?.ok_or(RunError::UnknownRun)?;
        request.turns = request::follow_up_turns(&run, question)?;
        self.execute(request, Some(active)).await.map_err(|failed| failed.error)
    }

    async fn execute(&self, request: RunRequest, follow_up: Option<ActiveRun>) -> Result<RunOutcome, FailedRun> {
        let params = request.parameters(&self.settings).map_err(RunError::from)?;
        // Alert investigations may take the slots kept for them; every other Run counts
        // against its namespace's share.
        let class = if request.source.starts_with("alert:") { Class::Reserved } else { Class::Shared };
        let _slot =
            self.slots.acquire(&request.namespace, class, self.settings.queue_timeout).await.map_err(RunError::Busy)?;
        let catalog = self.catalog.current();
        let model = self.llm.model().await.map_err(|error| RunError::Upstream { run_id: None, error })?;
        let instructions = self.llm.system_instructions_sha256();
        let keep_input = self.settings.keep_input_namespaces.contains(&request.namespace);
        let opening = Opening { model: &model, catalog_version: catalog.version, instructions, keep_input };
        let recorder =
            Recorder::open(self.audit.clone(), follow_up, &request, opening).await.map_err(RunError::from)?;
        let run_id = recorder.run_id().cloned();

        let mut state = RunState::new(&self.llm, recorder, self.settings.limits.clone(), params);
        state.progress = request.progress.clone();
        state.report(RunProgress::Started { run_id: run_id.clone() }).await;
        let scope = self.tenancy.scope(&request.namespace);
        let inputs = Inputs {
            tools: self.tools_for(&request.namespace),
            retriever: self.retriever.as_ref(),
            scope: &scope,
            search_top_k: self.settings.search_top_k,
            catalog_skills: Arc::new(skills::skills_of(&catalog, &scope)),
        };
        let result = match steps::answer(&mut state, &inputs, &request).await {
            Ok(answer) if request.investigate => {
                let question = request.turns.last().map(|turn| turn.content.as_str()).unwrap_or_default();
                structuring::structure(&mut state, question, &answer).await.map(|result| (answer, Some(result)))
            }
            Ok(answer) => Ok((answer, None)),
            Err(stop) => Err(stop),
        };
        let usage = state.budget.usage(Instant::now());
        let skills = state.skills.names();
        let (outcome, activity) = match result {
            Ok((answer, investigation)) => (
                Ok(RunOutcome {
                    run_id: run_id.clone(),
                    model: model.clone(),
                    answer,
                    skills: skills.clone(),
                    activity: state.activity,
                    gaps: state.gaps,
                    plan_error: state.plan_error,
                    limits: self.settings.limits.clone(),
                    usage: usage.clone(),
                    catalog_version: catalog.version,
                    investigation,
                    model_protocol: state.protocol.map(|mode| mode.as_str().to_string()),
                    model_protocol_fallbacks: state.protocol_fallbacks.clone(),
                    context_cuts: state.context,
                }),
                Vec::new(),
            ),
            Err(stop) => (Err(stop.into_run_error(run_id.clone(), usage.clone())), state.activity),
        };
        crate::telemetry::count(
            "akritas_runs_total",
            "Runs that ended, by source and outcome (ok or the error code).",
            &[("source", &request.source), ("outcome", outcome.as_ref().map_or_else(|e| e.code(), |_| "ok"))],
            1.0,
        );
        let mut finish = record::finish(&usage, &skills, catalog.version, outcome.as_ref().err());
        let protocol = state.protocol.map(|mode| mode.as_str().to_string());
        if let Some(mode) = &protocol {
            finish.metadata.insert(record::MODEL_PROTOCOL.into(), serde_json::json!(mode));
        }
        if !state.protocol_fallbacks.is_empty() {
            finish
                .metadata
                .insert(record::MODEL_PROTOCOL_FALLBACKS.into(), serde_json::json!(state.protocol_fallbacks));
        }
        if let Err(error) = state.record.close(finish).await {
            if let Some(id) = &run_id {
                tracing::error!(run_id = %id, %error, "could not record the end of a Run");
            }
            // The Run's calls are reported even when its end could not be recorded.
            let activity = outcome.map_or(activity, |run| run.activity);
            let error = RunError::Audit(error);
            return Err(FailedRun {
                error,
                usage: Some(usage),
                activity,
                model: Some(model),
                model_protocol: protocol,
            });
        }
        outcome.map_err(|error| FailedRun {
            error,
            usage: Some(usage),
            activity,
            model: Some(model),
            model_protocol: protocol,
        })
    }
}
