//! One preview in progress: the snapshot (explicit files or discovery), the
//! proposal attempts, the edits, the diff and the validators, each step charged
//! to the preview's Run budget and recorded on its audit Run.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};

use super::error::ChangeError;
use super::proposal::{AttemptDiagnostic, Proposal, Stage};
use super::record::Record;
use super::snapshot::Snapshot;
use super::types::{ChangeSettings, PreviewRequest, ResolvedWorkspace, Timings, millis};
use super::{FileChange, ValidatorResult, discovery, git, proposal};
use crate::audit::NewEvent;
use crate::engine::budget::{Budget, ReportedUsage};
use crate::engine::context;
use crate::llm::structured;
use crate::llm::{ChatRequest, ChatResponse, LlmClient, LlmError, Message, ToolDefinition};

/// Proposal attempts per preview (the second one carries a repair hint).
pub const ATTEMPTS: u32 = 2;
/// Output tokens of the discovery planning call at most.
const PLAN_MAX_TOKENS: u32 = 512;

#[derive(Clone, Copy, Debug)]
pub(super) struct Params {
    pub(super) max_tokens: u32,
    pub(super) temperature: f64,
}

/// What a preview prepared.
pub(super) struct Prepared {
    pub(super) commit: Option<String>,
    pub(super) proposal: Proposal,
    pub(super) changes: Vec<FileChange>,
    pub(super) warnings: Vec<String>,
    pub(super) diff: String,
    pub(super) diff_sha256: String,
    pub(super) validators: Vec<ValidatorResult>,
    pub(super) attempts: Vec<AttemptDiagnostic>,
    pub(super) discovery: Option<Value>,
}

/// One preview in progress.
pub(super) struct Preview<'a> {
    pub(super) llm: &'a LlmClient,
    pub(super) settings: &'a ChangeSettings,
    pub(super) budget: Budget,
    pub(super) record: &'a Record,
    pub(super) params: Params,
    pub(super) timings: Timings,
    pub(super) attempts: Vec<AttemptDiagnostic>,
    /// The mode of the last structured step (discovery plan, proposal).
    pub(super) protocol: Option<structured::Mode>,
    /// The namespace of whoever asked.
    pub(super) requester: String,
    /// Fires when the preview is abandoned.
    pub(super) cancel: tokio_util::sync::CancellationToken,
}

impl Preview<'_> {
    pub(super) async fn execute(
        &mut self,
        request: &PreviewRequest,
        workspace: &ResolvedWorkspace,
    ) -> Result<Prepared, ChangeError> {
        let shared = workspace.lock.clone().read_owned().await;
        let dir = workspace.dir.clone();
        let commit = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || git::head(&dir).ok().map(|h| h.commit))
                .await
                .map_err(|_| ChangeError::Interrupted)?
        };
        let snapshot_started = Instant::now();
        let (snapshot, discovery) = if request.files.is_empty() {
            let (snapshot, facts) = self.discover(&dir, &request.request).await?;
            (snapshot, Some(facts))
        } else {
            let (root, request_text, files) = (dir.clone(), request.request.clone(), request.files.clone());
            let snapshot = tokio::task::spawn_blocking(move || super::snapshot::load(&root, &request_text, &files))
                .await
                .map_err(|_| ChangeError::Interrupted)?
                .map_err(|e| ChangeError::Invalid(e.to_string()))?;
            (snapshot, None)
        };
        self.timings.snapshot_ms += millis(snapshot_started.elapsed());
        self.record
            .event(NewEvent {
                kind: "snapshot".into(),
                status: Some("read".into()),
                metadata: BTreeMap::from([
                    ("files".into(), json!(snapshot.files.iter().map(|f| &f.path).collect::<Vec<_>>())),
                    ("commit".into(), json!(commit)),
                    ("discovered".into(), json!(discovery.is_some())),
                ]),
                ..NewEvent::default()
            })
            .await;
        let (proposal, materialised) = self.propose(&dir, &snapshot).await?;
        let diff = super::diff::unified(&materialised.changes);
        let diff_sha256 = super::diff::sha256(&diff);
        let validators_started = Instant::now();
        let validators = if materialised.changes.is_empty() || workspace.validators.is_empty() {
            drop(shared);
            Vec::new()
        } else {
            let (root, changes, limits) = (dir.clone(), materialised.changes.clone(), self.settings.copy_limits);
            // Copying a large tree is the expensive part of a preview: only validators
            // that read more than the changed files get it.
            let full_tree = workspace.validators.iter().any(|v| v.full_tree);
            let copy = tokio::task::spawn_blocking(move || {
                if full_tree {
                    super::validators::prepare(&root, &changes, &limits)
                } else {
                    super::validators::prepare_changed_only(&changes, &limits)
                }
            })
            .await
            .map_err(|_| ChangeError::Interrupted)?
            .map_err(|e| ChangeError::Invalid(format!("validators cannot run: {e}")))?;
            drop(shared);
            let scope = super::validators::Scope {
                workspace: &workspace.namespace,
                requester: &self.requester,
                cancel: &self.cancel,
            };
            let results = super::validators::run(
                &copy,
                &materialised.changes,
                &workspace.validators,
                &self.settings.validators,
                scope,
            )
            .await;
            // Gone before the preview's slot is given back.
            copy.remove().await;
            if self.cancel.is_cancelled() {
                return Err(ChangeError::Interrupted);
            }
            results
        };
        self.timings.validators_ms = millis(validators_started.elapsed());
        for result in &validators {
            self.record
                .event(NewEvent {
                    kind: "validator".into(),
                    status: Some(serde_json::to_value(result.status).unwrap_or_default().as_str().unwrap_or("").into()),
                    metadata: BTreeMap::from([
                        ("name".into(), json!(result.name)),
                        ("files".into(), json!(result.files)),
                        ("exit_code".into(), json!(result.exit_code)),
                        ("duration_ms".into(), json!(result.duration_ms)),
                    ]),
                    result: Some(json!({"output": result.output, "truncated": result.truncated})),
                    ..NewEvent::default()
                })
                .await;
        }
        Ok(Prepared {
            commit,
            proposal,
            changes: materialised.changes,
            warnings: materialised.warnings,
            diff,
            diff_sha256,
            validators,
            attempts: std::mem::take(&mut self.attempts),
            discovery,
        })
    }

    /// Discovery: the model plans lexical queries, the host scans and ranks.
    async fn discover(&mut self, dir: &std::path::Path, request: &str) -> Result<(Snapshot, Value), ChangeError> {
        let tool = ToolDefinition::function(
            discovery::PLAN_TOOL,
            "Plan lexical repository searches.",
            discovery::plan_schema(),
        );
        let messages = vec![
            Message::system(discovery::PLAN_PROMPT),
            Message::user(json!({"change_request": request}).to_string()),
        ];
        let max_tokens = self.params.max_tokens.min(PLAN_MAX_TOKENS);
        let response = self.call(messages, tool, max_tokens).await?;
        let calls = &response.message.tool_calls;
        let [call] = calls.as_slice() else {
            return Err(ChangeError::Proposal {
                message: format!(
                    "the model made {} tool calls while planning discovery; exactly one is required",
                    calls.len()
                ),
                diagnostics: Vec::new(),
            });
        };
        if call.function.name != discovery::PLAN_TOOL {
            return Err(ChangeError::Proposal {
                message: format!("the model called {:?} while planning discovery", call.function.name),
                diagnostics: Vec::new(),
            });
        }
        let queries = discovery::decode_queries(&call.function.arguments).map_err(|e| ChangeError::Proposal {
            message: format!("discovery plan rejected: {e}"),
            diagnostics: Vec::new(),
        })?;
        let (root, text, planned) = (dir.to_path_buf(), request.to_string(), queries.clone());
        let (snapshot, scanned, bytes) = tokio::task::spawn_blocking(move || {
            let scan = discovery::scan(&root, &text, &planned)?;
            let snapshot = discovery::select(&root, &text, &scan)?;
            Ok::<_, discovery::DiscoveryError>((snapshot, scan.files_scanned, scan.bytes_scanned))
        })
        .await
        .map_err(|_| ChangeError::Interrupted)?
        .map_err(|e| ChangeError::Invalid(e.to_string()))?;
        let facts = json!({"queries": queries, "files_scanned": scanned, "bytes_scanned": bytes,
            "selected": snapshot.files.iter().map(|f| &f.path).collect::<Vec<_>>()});
        self.record
            .event(NewEvent {
                kind: "discovery".into(),
                status: Some("succeeded".into()),
                metadata: BTreeMap::from([
                    ("queries".into(), json!(queries)),
                    ("files_scanned".into(), json!(scanned)),
                    ("model_protocol".into(), json!(self.protocol.map(|m| m.as_str()))),
                ]),
                ..NewEvent::default()
            })
            .await;
        Ok((snapshot, facts))
    }

    /// Up to [`ATTEMPTS`] forced proposal calls; each failure feeds a targeted repair hint.
    async fn propose(
        &mut self,
        dir: &std::path::Path,
        snapshot: &Snapshot,
    ) -> Result<(Proposal, super::edits::Materialised), ChangeError> {
        let tool =
            ToolDefinition::function(proposal::PROPOSE_TOOL, "Propose the structured change.", proposal::schema());
        let system = format!(
            "{}\n\n{}",
            proposal::system_prompt(),
            crate::language::language_instruction(&self.settings.response_language)
        );
        for attempt in 1..=ATTEMPTS {
            let user = proposal::user_message(snapshot, "<inline>", self.attempts.last());
            let messages = vec![Message::system(system.clone()), Message::user(user)];
            let outcome = self.attempt(attempt, dir, snapshot, messages, tool.clone()).await;
            match outcome {
                Ok(done) => return Ok(done),
                Err(AttemptFailure::Fatal(error)) => return Err(error),
                Err(AttemptFailure::Retry(diagnostic)) => {
                    self.record
                        .event(NewEvent {
                            kind: "proposal".into(),
                            status: Some("rejected".into()),
                            metadata: BTreeMap::from([
                                ("attempt".into(), json!(attempt)),
                                ("stage".into(), json!(diagnostic.stage)),
                                ("error".into(), json!(diagnostic.error)),
                            ]),
                            ..NewEvent::default()
                        })
                        .await;
                    self.attempts.push(*diagnostic);
                }
            }
        }
        let message = format!(
            "the model did not produce a valid proposal in {ATTEMPTS} attempts: {}",
            self.attempts.last().map(|d| d.error.as_str()).unwrap_or("no diagnostic")
        );
        Err(ChangeError::Proposal { message, diagnostics: std::mem::take(&mut self.attempts) })
    }

    async fn attempt(
        &mut self,
        attempt: u32,
        dir: &std::path::Path,
        snapshot: &Snapshot,
        messages: Vec<Message>,
        tool: ToolDefinition,
    ) -> Result<(Proposal, super::edits::Materialised), AttemptFailure> {
        let diagnostic = |stage: Stage, error: String| AttemptDiagnostic::new(attempt, stage, error);
        let response = match self.call(messages, tool, self.params.max_tokens).await {
            Ok(response) => response,
            Err(ChangeError::Upstream(error)) => {
                return Err(AttemptFailure::Retry(Box::new(diagnostic(Stage::Upstream, error))));
            }
            Err(other) => return Err(AttemptFailure::Fatal(other)),
        };
        let calls = &response.message.tool_calls;
        let failure = |stage: Stage, error: String, arguments: Option<&str>| {
            let mut d = diagnostic(stage, error);
            d.finish_reason = response.finish_reason.clone();
            d.completion_tokens = response.usage.map(|u| u.completion_tokens);
            d.tool_name = calls.first().map(|c| c.function.name.clone());
            d.argument_bytes = arguments.map(str::len);
            d.arguments_preview = arguments.map(proposal::preview_arguments);
            d.hint = proposal::hint(stage, &d.error, d.finish_reason.as_deref());
            AttemptFailure::Retry(Box::new(d))
        };
        let [call] = calls.as_slice() else {
            return Err(failure(
                Stage::ToolCall,
                format!("expected exactly one {} call, got {} tool calls", proposal::PROPOSE_TOOL, calls.len()),
                None,
            ));
        };
        if call.function.name != proposal::PROPOSE_TOOL {
            return Err(failure(
                Stage::ToolCall,
                format!("expected a {} call, got {:?}", proposal::PROPOSE_TOOL, call.function.name),
                None,
            ));
        }
        let arguments = call.function.arguments.as_str();
        let proposal = proposal::decode(arguments).map_err(|(stage, error)| failure(stage, error, Some(arguments)))?;
        let (root, snap, edits) = (dir.to_path_buf(), snapshot.clone(), proposal.edits.clone());
        let materialised = tokio::task::spawn_blocking(move || super::edits::materialise(&root, &snap, &edits))
            .await
            .map_err(|_| AttemptFailure::Fatal(ChangeError::Interrupted))?
            .map_err(|e| failure(Stage::HostValidation, e.to_string(), Some(arguments)))?;
        self.record
            .event(NewEvent {
                kind: "proposal".into(),
                status: Some("accepted".into()),
                metadata: BTreeMap::from([
                    ("attempt".into(), json!(attempt)),
                    ("edits".into(), json!(proposal.edits.len())),
                    ("clarifications".into(), json!(proposal.clarifications.len())),
                    ("model_protocol".into(), json!(self.protocol.map(|m| m.as_str()))),
                ]),
                ..NewEvent::default()
            })
            .await;
        Ok((proposal, materialised))
    }

    /// One structured step (a forced call of `tool`, or a JSON answer turned into
    /// one) through the structured-step port, each request within the Run budget.
    async fn call(
        &mut self,
        messages: Vec<Message>,
        tool: ToolDefinition,
        max_tokens: u32,
    ) -> Result<ChatResponse, ChangeError> {
        let model = self.llm.model().await.map_err(|e| ChangeError::Upstream(e.to_string()))?;
        let step = structured::Step {
            messages,
            name: tool.function.name,
            description: tool.function.description,
            schema: tool.function.parameters,
            grammar: None,
            max_tokens,
            temperature: Some(self.params.temperature),
        };
        let (mut asking, mut request) = structured::Asking::begin(self.llm, &model, step).await;
        let answered = loop {
            match asking.receive(self.send(request).await?) {
                structured::Next::Ask(next) => request = next,
                structured::Next::Done(answered) => break answered,
                structured::Next::Failed(error) => return Err(ChangeError::Upstream(error.to_string())),
            }
        };
        self.protocol = Some(answered.mode);
        Ok(answered.response)
    }

    /// Sends one request within the Run budget, fitted to the model's context window; a request
    /// the server refuses as too long for it goes once more, fitted smaller. The inner error is
    /// the server's.
    async fn send(&mut self, mut request: ChatRequest) -> Result<Result<ChatResponse, LlmError>, ChangeError> {
        let llm = self.fit(self.llm, &mut request, None).await;
        match self.send_fitted(&llm, &mut request).await? {
            Err(error) if error.is_context_overflow() => {
                let llm = self.fit(&llm, &mut request, Some(&error)).await;
                self.send_fitted(&llm, &mut request).await
            }
            answer => Ok(answer),
        }
    }

    /// Fits `request` to the model's context window and records what was cut.
    async fn fit(&self, llm: &LlmClient, request: &mut ChatRequest, overflow: Option<&LlmError>) -> LlmClient {
        let fitting = context::fit_request(llm, request, "", overflow).await;
        if let Some(report) = &fitting.report {
            self.record.event(context::fitted_event(report)).await;
        }
        fitting.llm
    }

    /// Sends one request with `llm` within the Run budget.
    async fn send_fitted(
        &mut self,
        llm: &LlmClient,
        request: &mut ChatRequest,
    ) -> Result<Result<ChatResponse, LlmError>, ChangeError> {
        let max_tokens = request.max_tokens;
        let size = serde_json::to_vec(&(&request.messages, &request.tools, &request.response_format))
            .map(|b| b.len())
            .unwrap_or_default()
            + llm.system_instructions_len();
        request.max_tokens = self
            .budget
            .begin_model_call(size, max_tokens, Instant::now())
            .map_err(|e| ChangeError::Budget(e.to_string()))?;
        let time_left = self.budget.time_left(Instant::now());
        let started = Instant::now();
        let response = tokio::time::timeout(time_left, llm.chat(request)).await;
        self.timings.model_ms += millis(started.elapsed());
        match response {
            Ok(Ok(response)) => {
                let reported = response
                    .usage
                    .map(|u| ReportedUsage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens });
                self.budget.finish_model_call(reported).map_err(|e| ChangeError::Budget(e.to_string()))?;
                Ok(Ok(response))
            }
            Ok(Err(error)) => {
                // A request refused as too long for the context generated nothing.
                let _ = self.budget.finish_model_call(error.is_context_overflow().then(ReportedUsage::default));
                Ok(Err(error))
            }
            Err(_) => {
                let _ = self.budget.finish_model_call(None);
                Err(ChangeError::Budget(self.budget.wall_time_exhausted().to_string()))
            }
        }
    }
}

enum AttemptFailure {
    Retry(Box<AttemptDiagnostic>),
    Fatal(ChangeError),
}
