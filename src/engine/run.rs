//! The run loop (ARCHITECTURE.md §4): every chat, follow-up, bot message, facade
//! call and alert goes through [`Engine::run`]. The host owns the budget, decides
//! which tools exist, executes every call itself and records what it did. The
//! steps live in their own modules; this one admits a Run, opens and closes its
//! record, and maps how it ended.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::conversation;
use super::record::{self, Recorder};
use super::request::{self, EngineSettings, RequestError, RunError, RunOutcome, RunRequest};
use super::retrieval::Retriever;
use super::skills;
use super::state::RunState;
use super::steps::{self, Inputs};
use super::structuring;
use crate::audit::{ActiveRun, AuditError, AuditLog, RunId};
use crate::catalog::CatalogStore;
use crate::llm::LlmClient;
use crate::tools::{ReadOnlyPolicy, Registry};

/// The engine: shared by every entry point.
pub struct Engine {
    settings: EngineSettings,
    llm: LlmClient,
    tools: std::sync::RwLock<Registry>,
    audit: Option<Arc<AuditLog>>,
    catalog: CatalogStore,
    retriever: Option<Arc<dyn Retriever>>,
    slots: Arc<Semaphore>,
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
        let slots = Arc::new(Semaphore::new(settings.max_concurrent_runs.max(1)));
        Self {
            tools: std::sync::RwLock::new(tools.filter(&ReadOnlyPolicy)),
            settings,
            llm,
            audit,
            catalog,
            retriever,
            slots,
        }
    }

    /// The authorized read-only tools now (a Run keeps the set it started with).
    pub fn tools(&self) -> Registry {
        self.tools.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the tools (for example when MCP adapters change); only `read`
    /// tools are kept.
    pub fn set_tools(&self, tools: &Registry) {
        *self.tools.write().unwrap_or_else(|p| p.into_inner()) = tools.filter(&ReadOnlyPolicy);
    }

    /// The audit log, when enabled.
    pub fn audit(&self) -> Option<&Arc<AuditLog>> {
        self.audit.as_ref()
    }

    /// Settings.
    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    /// Runs a conversation to an answer.
    pub async fn run(&self, request: RunRequest) -> Result<RunOutcome, RunError> {
        conversation::validate(&request.turns).map_err(RequestError::from)?;
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
        let active = audit.claim(run_id).map_err(|error| match error {
            AuditError::RunActive(id) => RunError::RunBusy(id),
            AuditError::UnknownRun(_) => RunError::UnknownRun,
            other => RunError::Audit(other),
        })?;
        let run = audit.get(run_id).ok_or(RunError::UnknownRun)?;
        request.turns = request::follow_up_turns(&run, question)?;
        self.execute(request, Some(active)).await
    }

    async fn execute(&self, request: RunRequest, follow_up: Option<ActiveRun>) -> Result<RunOutcome, RunError> {
        let params = request.parameters(&self.settings)?;
        let _permit = tokio::time::timeout(self.settings.queue_timeout, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| RunError::Busy {
                slots: self.settings.max_concurrent_runs,
                waited: self.settings.queue_timeout,
            })?
            .map_err(|_| RunError::Busy { slots: self.settings.max_concurrent_runs, waited: Duration::ZERO })?;
        let catalog = self.catalog.current();
        let model = self.llm.model().await.map_err(|error| RunError::Upstream { run_id: None, error })?;
        let recorder = Recorder::open(self.audit.clone(), follow_up, &request, &model, catalog.version).await?;
        let run_id = recorder.run_id().cloned();

        let mut state = RunState::new(&self.llm, recorder, self.settings.limits.clone(), params);
        let inputs = Inputs {
            tools: self.tools(),
            retriever: self.retriever.as_ref(),
            search_top_k: self.settings.search_top_k,
            catalog_skills: Arc::new(skills::skills_of(&catalog)),
        };
        let result = match steps::answer(&mut state, &inputs, &request).await {
            Ok(answer) if request.investigate => {
                structuring::structure(&mut state, &answer).await.map(|result| (answer, Some(result)))
            }
            Ok(answer) => Ok((answer, None)),
            Err(stop) => Err(stop),
        };
        let usage = state.budget.usage(Instant::now());
        let skills = state.skills.names();
        let outcome = match result {
            Ok((answer, investigation)) => Ok(RunOutcome {
                run_id: run_id.clone(),
                model,
                answer,
                skills: skills.clone(),
                activity: state.activity,
                gaps: state.gaps,
                plan_error: state.plan_error,
                limits: self.settings.limits.clone(),
                usage: usage.clone(),
                catalog_version: catalog.version,
                investigation,
            }),
            Err(stop) => Err(stop.into_run_error(run_id.clone(), usage.clone())),
        };
        let finish = record::finish(&usage, &skills, catalog.version, outcome.as_ref().err());
        if let Err(error) = state.record.close(finish).await {
            if let Some(id) = &run_id {
                tracing::error!(run_id = %id, %error, "could not record the end of a Run");
            }
            return Err(RunError::Audit(error));
        }
        outcome
    }
}
