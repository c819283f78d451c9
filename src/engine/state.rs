//! One executing Run: its state and the budgeted operations every step performs
//! on it — a model request, a tool call, skills joining the Run.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};

use super::budget::{Budget, BudgetLimits, BudgetUsage, Exhausted, ReportedUsage};
use super::context;
use super::fit::{ContextCuts, serialized_len};
use super::knowledge_tools;
use super::plan::CapabilityGap;
use super::progress::{ProgressSink, RunProgress};
use super::record::{self, CallKind, Recorder};
use super::request::{Activity, ModelError, Parameters, RunError, StructureError};
use super::skills::{self, RunSkills, SkillEntry};
use crate::audit::{AuditError, NewEvent, RunId};
use crate::investigation::Evidence;
use crate::llm::structured::{self, Asking, Mode, Next};
use crate::llm::{
    ChatRequest, ChatResponse, LlmClient, LlmError, Message, StreamAccumulator, StreamEvent, ToolChoice, ToolDefinition,
};
use crate::tools::{ErrorCode, ReadOnlyPolicy, Registry, RegistryError, ToolCall, ToolResult};

/// Why a Run stopped early, before it is mapped to a [`RunError`].
#[derive(Debug)]
pub enum Stop {
    /// A budget dimension ran out.
    Budget(Exhausted),
    /// The model server failed.
    Upstream(LlmError),
    /// The model broke the protocol.
    Model(ModelError),
    /// The structured result was missing or rejected.
    Structure(StructureError),
    /// The audit journal failed.
    Audit(AuditError),
}

impl From<Exhausted> for Stop {
    fn from(e: Exhausted) -> Self {
        Stop::Budget(e)
    }
}

impl From<AuditError> for Stop {
    fn from(e: AuditError) -> Self {
        Stop::Audit(e)
    }
}

impl From<ModelError> for Stop {
    fn from(e: ModelError) -> Self {
        Stop::Model(e)
    }
}

impl From<RegistryError> for Stop {
    fn from(e: RegistryError) -> Self {
        Stop::Model(e.into())
    }
}

impl From<StructureError> for Stop {
    fn from(e: StructureError) -> Self {
        Stop::Structure(e)
    }
}

impl Stop {
    /// The error the caller sees, with the Run id and the usage at the end.
    pub fn into_run_error(self, run_id: Option<RunId>, usage: BudgetUsage) -> RunError {
        match self {
            Stop::Budget(exhausted) => RunError::Budget { run_id, exhausted, usage },
            Stop::Upstream(error) => RunError::Upstream { run_id, error },
            Stop::Model(error) => RunError::Model { run_id, error },
            Stop::Structure(error) => RunError::Structure { run_id, error },
            Stop::Audit(error) => RunError::Audit(error),
        }
    }
}

/// The state of one executing Run.
pub struct RunState<'a> {
    /// The model.
    pub llm: &'a LlmClient,
    /// Where the Run's records go.
    pub record: Recorder,
    /// The Run's budget.
    pub budget: Budget,
    /// The conversation sent to the model.
    pub history: Vec<Message>,
    /// The system message before any skill was injected.
    pub base_system: String,
    /// Skills selected so far (shared with the knowledge tools).
    pub skills: RunSkills,
    /// Skills already injected into the system message, in order.
    pub injected: Vec<String>,
    /// Every executed call, in order.
    pub activity: Vec<Activity>,
    /// Successful execution-tool calls by host-assigned id, with their output:
    /// all a structured result may cite.
    pub evidence: Evidence,
    /// Calls the host has numbered on this Run (`call-<n>`).
    pub calls: u32,
    /// Steps no tool could perform.
    pub gaps: Vec<CapabilityGap>,
    /// Why the plan was not used, if it was not.
    pub plan_error: Option<String>,
    /// Sampling parameters.
    pub params: Parameters,
    /// Where progress goes as it happens (none: nobody watches).
    pub progress: Option<ProgressSink>,
    /// The mode of the last structured step (plan, result), once there was one.
    pub protocol: Option<Mode>,
    /// Each fallback of its structured steps (`plan: tool_call -> json_schema`).
    pub protocol_fallbacks: Vec<String>,
    /// What fitting the model's context window cut so far.
    pub context: ContextCuts,
}

impl<'a> RunState<'a> {
    /// A Run starting now.
    pub fn new(llm: &'a LlmClient, record: Recorder, limits: BudgetLimits, params: Parameters) -> Self {
        let calls = record.calls_before();
        RunState {
            llm,
            record,
            budget: Budget::new(limits, Instant::now()),
            history: Vec::new(),
            base_system: String::new(),
            skills: RunSkills::default(),
            injected: Vec::new(),
            activity: Vec::new(),
            evidence: Evidence::new(),
            calls,
            gaps: Vec::new(),
            plan_error: None,
            params,
            progress: None,
            protocol: None,
            protocol_fallbacks: Vec::new(),
            context: ContextCuts::default(),
        }
    }

    /// Reports progress to the watcher, if any.
    pub async fn report(&self, event: RunProgress) {
        if let Some(sink) = &self.progress {
            sink.emit(event).await;
        }
    }

    /// Sends one budgeted model request, fitted to the model's context window; gives the
    /// messages back for reuse, as sent. With `stream_to` the request is streamed and the
    /// text of its response reported there as it arrives (the budget is charged the same way).
    pub async fn call_model(
        &mut self,
        messages: Vec<Message>,
        tools: Vec<ToolDefinition>,
        tool_choice: Option<ToolChoice>,
        max_tokens: u32,
        temperature: f64,
        stream_to: Option<ProgressSink>,
    ) -> Result<(ChatResponse, Vec<Message>), Stop> {
        let parallel = (!tools.is_empty()).then_some(false);
        let request = ChatRequest {
            messages,
            tools,
            tool_choice,
            parallel_tool_calls: parallel,
            max_tokens,
            temperature: Some(temperature),
            response_format: None,
            min_completion_tokens: 0,
        };
        let (response, request) = self.send(request, stream_to.as_ref()).await?;
        Ok((response.map_err(Stop::Upstream)?, request.messages))
    }

    /// Sends one request within the budget, fitted to the model's context window; a request
    /// the server refuses as too long for it goes once more, fitted smaller. The outer error
    /// stops the Run; the inner one is the server's.
    async fn send(
        &mut self,
        mut request: ChatRequest,
        stream_to: Option<&ProgressSink>,
    ) -> Result<(Result<ChatResponse, LlmError>, ChatRequest), Stop> {
        let (record, totals, base) = (&self.record, &mut self.context, &self.base_system);
        let llm = context::fit_for_run(self.llm, record, totals, base, &mut request, None).await?;
        match self.send_fitted(&llm, request, stream_to).await? {
            (Err(error), mut request) if error.is_context_overflow() => {
                let (record, totals, base) = (&self.record, &mut self.context, &self.base_system);
                let llm = context::fit_for_run(&llm, record, totals, base, &mut request, Some(&error)).await?;
                self.send_fitted(&llm, request, stream_to).await
            }
            sent => Ok(sent),
        }
    }

    /// Sends one request with `llm` within the budget (its `max_tokens` capped by what is left).
    async fn send_fitted(
        &mut self,
        llm: &LlmClient,
        mut request: ChatRequest,
        stream_to: Option<&ProgressSink>,
    ) -> Result<(Result<ChatResponse, LlmError>, ChatRequest), Stop> {
        let size = serialized_len(&(&request.messages, &request.tools, &request.response_format))
            + llm.system_instructions_len();
        request.max_tokens = self.budget.begin_model_call(size, request.max_tokens, Instant::now())?;
        let time_left = self.budget.time_left(Instant::now());
        let call = async {
            match stream_to {
                Some(sink) => stream_chat(llm, &request, sink).await,
                None => llm.chat(&request).await,
            }
        };
        let response = match tokio::time::timeout(time_left, call).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                // A request refused as too long for the context generated nothing.
                let _ = self.budget.finish_model_call(error.is_context_overflow().then(ReportedUsage::default));
                return Ok((Err(error), request));
            }
            Err(_) => {
                let _ = self.budget.finish_model_call(None);
                return Err(Stop::Budget(self.budget.wall_time_exhausted()));
            }
        };
        let reported = response
            .usage
            .map(|u| ReportedUsage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens });
        self.budget.finish_model_call(reported)?;
        Ok((Ok(response), request))
    }

    /// One structured step (`step_kind`: plan, result) through the structured-step
    /// port, each request within the budget. The answer is one call of the submit
    /// tool when the model gave one, whatever the mode; the mode and any fallback
    /// are recorded when the Run ends.
    pub async fn call_structured(&mut self, step_kind: &str, step: structured::Step) -> Result<ChatResponse, Stop> {
        let model = self.llm.model().await.map_err(Stop::Upstream)?;
        let (mut asking, mut request) = Asking::begin(self.llm, &model, step).await;
        let answered = loop {
            let (answer, _) = self.send(request, None).await?;
            match asking.receive(answer) {
                Next::Ask(next) => request = next,
                Next::Done(answered) => break answered,
                Next::Failed(error) => return Err(Stop::Upstream(error)),
            }
        };
        self.protocol = Some(answered.mode);
        let fallbacks = answered.fallbacks.iter().map(|(from, to)| format!("{step_kind}: {from} -> {to}"));
        self.protocol_fallbacks.extend(fallbacks);
        Ok(answered.response)
    }

    /// Executes one call of `name` within the budget under the next host-assigned
    /// id (`call-<n>`, never the model's), and records it; a failed call is a
    /// result too. The tool result the model reads carries the host id; it answers
    /// `conversation_id` (the id of the model's call), or the host id for a call the
    /// host planned. Only a successful call outside the knowledge tools is evidence.
    pub async fn execute_tool(
        &mut self,
        registry: &Registry,
        name: &str,
        arguments: &str,
        conversation_id: Option<&str>,
    ) -> Result<ToolResult, Stop> {
        self.budget.begin_tool_call(Instant::now())?;
        self.calls = self.calls.saturating_add(1);
        let call =
            ToolCall { id: format!("call-{}", self.calls), name: name.to_string(), arguments: arguments.to_string() };
        let time_left = self.budget.time_left(Instant::now());
        let result = tokio::time::timeout(time_left, registry.execute(&call, &ReadOnlyPolicy))
            .await
            .map_err(|_| Stop::Budget(self.budget.wall_time_exhausted()))?;
        let kind =
            if knowledge_tools::is_knowledge_tool(&result.name) { CallKind::Knowledge } else { CallKind::Execution };
        let (text, untrusted) = match kind {
            CallKind::Execution => model_text(&result),
            _ => (result.to_json_string(), 0),
        };
        self.history.push(Message::tool(conversation_id.unwrap_or(&call.id).to_string(), text.clone()));
        if untrusted > 0 {
            let event = NewEvent {
                kind: UNTRUSTED_TEXT.into(),
                status: Some("marked".into()),
                metadata: [
                    ("call".to_string(), json!(call.id)),
                    ("tool".to_string(), json!(result.name)),
                    ("strings".to_string(), json!(untrusted)),
                ]
                .into(),
                ..Default::default()
            };
            self.record.event(event).await?;
        }
        if kind == CallKind::Execution && result.is_ok() {
            self.evidence.insert(result.id.clone(), result.output.clone().unwrap_or(Value::Null));
        }
        // Arguments are recorded once the tool's schema accepted them; a call refused
        // before that keeps only its result (what the model was told).
        let arguments = reached_handler(&result).then(|| record::arguments_value(&call.arguments));
        self.record_call(kind, arguments, result.clone()).await?;
        self.budget.record_tool_result(text.len())?;
        Ok(result)
    }

    /// Records a call in the audit and in the Run's activity.
    pub async fn record_call(
        &mut self,
        kind: CallKind,
        arguments: Option<Value>,
        result: ToolResult,
    ) -> Result<(), Stop> {
        self.record.event(record::tool_call_event(kind, arguments.clone(), &result)).await?;
        if kind != CallKind::Plan {
            let event = RunProgress::Tool {
                name: result.name.clone(),
                id: result.id.clone(),
                status: result.status().to_string(),
                duration_ms: record::duration_ms(result.duration),
            };
            self.report(event).await;
        }
        self.activity.push(Activity {
            name: result.name.clone(),
            id: result.id.clone(),
            status: result.status().to_string(),
            duration_ms: record::duration_ms(result.duration),
            arguments: arguments.unwrap_or(Value::Null),
            result,
        });
        Ok(())
    }

    /// Skills selected from a successful inventory or CMDB result.
    pub async fn select_from_inventory(
        &mut self,
        catalog_skills: &BTreeMap<String, SkillEntry>,
        result: &ToolResult,
    ) -> Result<(), Stop> {
        let (true, Some(output)) = (result.is_ok() && skills::is_inventory_tool(&result.name), &result.output) else {
            return Ok(());
        };
        let facts = skills::facts_from_output(output);
        let chosen: Vec<SkillEntry> = skills::select(catalog_skills, &facts).into_iter().cloned().collect();
        self.add_skills(&chosen, "inventory").await
    }

    /// Adds skills to the Run (within the cap), records each, and injects the new
    /// ones into the system message.
    pub async fn add_skills(&mut self, chosen: &[SkillEntry], how: &str) -> Result<(), Stop> {
        let mut changed = false;
        for skill in chosen {
            if self.injected.contains(&skill.name) {
                continue;
            }
            // At the cap, further skills are ignored (the knowledge tool reports the cap itself).
            if self.skills.add(skill).is_err() && !self.skills.names().contains(&skill.name) {
                continue;
            }
            self.injected.push(skill.name.clone());
            changed = true;
            self.record.event(record::skill_selected_event(skill, how)).await?;
        }
        if changed {
            self.report(RunProgress::Skills { names: self.skills.names() }).await;
            let injected: Vec<SkillEntry> =
                self.skills.selected().into_iter().filter(|s| self.injected.contains(&s.name)).collect();
            if let Some(first) = self.history.first_mut() {
                *first = Message::system(system_with_skills(&self.base_system, &injected));
            }
        }
        Ok(())
    }
}

/// One streamed model request: the text of a response is reported as it arrives
/// (leading whitespace dropped) until the response turns to tool calls; the
/// assembled response is returned as a non-streamed call would.
async fn stream_chat(llm: &LlmClient, request: &ChatRequest, sink: &ProgressSink) -> Result<ChatResponse, LlmError> {
    let started = Instant::now();
    let result = forward_stream(llm, request, sink).await;
    crate::llm::record_model_call(&result, started.elapsed());
    result
}

async fn forward_stream(llm: &LlmClient, request: &ChatRequest, sink: &ProgressSink) -> Result<ChatResponse, LlmError> {
    let mut stream = llm.chat_stream(request).await?;
    let mut response = StreamAccumulator::new();
    let (mut calling, mut started) = (false, false);
    while let Some(event) = stream.next().await {
        let event = event?;
        match &event {
            StreamEvent::ToolCallDelta { .. } => calling = true,
            StreamEvent::ContentDelta(text) if !calling => {
                let text = if started { text.as_str() } else { text.trim_start() };
                if !text.is_empty() {
                    started = true;
                    sink.emit(RunProgress::AnswerDelta(text.to_string())).await;
                }
            }
            _ => {}
        }
        response.push(event);
    }
    response.finish()
}

/// The system message with the guidance of `injected` skills appended, their conclusions
/// without tags ([`super::verdicts::prose`]).
fn system_with_skills(base: &str, injected: &[SkillEntry]) -> String {
    let mut system = base.to_string();
    let prose: Vec<SkillEntry> = injected
        .iter()
        .map(|skill| SkillEntry { content: super::verdicts::prose(&skill.content).into(), ..skill.clone() })
        .collect();
    if let Some(text) = skills::injection(&prose) {
        system.push_str("\n\n");
        system.push_str(&text);
    }
    system
}

/// Whether the call got past the call shape, the tool lookup, the policy and the
/// argument schema.
fn reached_handler(result: &ToolResult) -> bool {
    result.error.as_ref().is_none_or(|error| {
        !matches!(
            error.code,
            ErrorCode::InvalidCall | ErrorCode::UnknownTool | ErrorCode::PermissionDenied | ErrorCode::InvalidArguments
        )
    })
}

/// The OpenAI tool definitions of a registry.
pub fn definitions(registry: &Registry) -> Vec<ToolDefinition> {
    registry.openai_definitions().into_iter().filter_map(|d| serde_json::from_value(d).ok()).collect()
}

/// Event recorded when a tool's output held instruction-like text the host marked (counts, the
/// call and the tool; never the text).
pub const UNTRUSTED_TEXT: &str = "untrusted_text";

/// What the model reads of an execution call: its output as the value (instruction-like
/// strings marked as untrusted data), or `{"error": …}`; the call's id travels as the tool
/// message's metadata, not in its text, so there is no wrapper to quote. With the number of
/// strings marked.
fn model_text(result: &ToolResult) -> (String, usize) {
    match (&result.output, &result.error) {
        (_, Some(error)) => (json!({"error": error}).to_string(), 0),
        (Some(output), None) => {
            let (marked, count) = crate::investigation::untrusted::mark(output);
            (marked.to_string(), count)
        }
        (None, None) => ("null".to_string(), 0),
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::engine::budget::Dimension;

    #[test]
    fn skills_are_appended_to_the_base_system_message() {
        assert_eq!(system_with_skills("base", &[]), "base");
        let skill = SkillEntry::fixture("postgres", "check autovacuum");
        let system = system_with_skills("base", std::slice::from_ref(&skill));
        let injection = skills::injection(&[skill]).unwrap();
        assert_eq!(system, format!("base\n\n{injection}"));
        assert!(system.contains("check autovacuum"));
        let tagged =
            SkillEntry::fixture("pg", "# PG\n\n## Conclusions\n\n- [confirmed, requires_human; when x>=1] Stuck.\n");
        let system = system_with_skills("base", &[tagged]);
        assert!(system.contains("\n- Stuck.") && !system.contains("[confirmed"), "{system}");
    }

    #[test]
    fn stops_map_to_run_errors_with_the_run_id() {
        let id = RunId::generate();
        let exhausted = Exhausted { dimension: Dimension::ModelCalls, needed: 2, limit: 1 };
        let usage = BudgetUsage { model_calls: 1, ..BudgetUsage::default() };
        let error = Stop::Budget(exhausted.clone()).into_run_error(Some(id.clone()), usage.clone());
        assert!(matches!(&error, RunError::Budget { exhausted: e, usage: u, .. } if *e == exhausted && *u == usage));
        assert_eq!(error.run_id(), Some(&id));
        let error = Stop::Model(ModelError::NoAnswer).into_run_error(Some(id.clone()), BudgetUsage::default());
        assert_eq!((error.code(), error.run_id()), ("model_error", Some(&id)));
        assert_eq!(error.to_string(), "model error: the model returned neither an answer nor tool calls");
        let structure = StructureError::NotOneSubmission { calls: 2, submitted: 1 };
        let error = Stop::Structure(structure).into_run_error(None, BudgetUsage::default());
        assert_eq!(error.code(), "structure_failed");
        assert_eq!(
            error.to_string(),
            "investigation result rejected: the model did not submit exactly one result (it made 2 tool calls, 1 of \
             them the result tool)"
        );
    }
}
