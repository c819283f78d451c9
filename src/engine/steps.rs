//! The steps of a Run up to its answer (docs/architecture.md, the path of a Run, steps
//! 2–6): the messages, skills named in the request, automatic retrieval, the forced plan and
//! its checks, then the adaptive tool loop over the same read-only catalog.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::bare_calls;
use super::conversation::{Speaker, Turn};
use super::knowledge_tools;
use super::planning;
use super::progress::{ProgressSink, RunProgress};
use super::record::{self, CallKind, canonical_json};
use super::request::{ModelError, RunRequest};
use super::retrieval::{PREFETCH_CALL_ID, Prefetch, Retriever};
use super::skills::{self, RunSkills, SkillEntry};
use super::state::{RunState, Stop, definitions};
use crate::audit::NewEvent;
use crate::language::language_instruction;
use crate::llm::{self, Message, ToolChoice};
use crate::tenancy::Scope;
use crate::text::{ELLIPSIS, truncate_bytes};
use crate::tools::{ErrorCode, Registry, RegistryBuilder, RegistryError, ToolCall, ToolError, ToolResult};

/// What the steps use from the engine, fixed when the Run starts.
pub struct Inputs<'a> {
    /// The authorized read-only tools.
    pub tools: Registry,
    /// Runbook retrieval, when configured.
    pub retriever: Option<&'a Arc<dyn Retriever>>,
    /// The Run's namespace and what it may see (knowledge bases are searched within it).
    pub scope: &'a Scope,
    /// Top-k of the automatic retrieval.
    pub search_top_k: usize,
    /// Skills of the pinned Catalog, by name.
    pub catalog_skills: Arc<BTreeMap<String, SkillEntry>>,
}

/// Runs the steps and returns the model's final answer.
pub async fn answer(state: &mut RunState<'_>, inputs: &Inputs<'_>, request: &RunRequest) -> Result<String, Stop> {
    // System message: client context, language; skills are appended as they are selected.
    let (system, turns) = opening(&request.turns, &state.params.language);
    state.base_system = system;
    state.history.push(Message::system(state.base_system.clone()));
    state.history.extend(turns.iter().map(|turn| match turn.role {
        Speaker::Assistant => Message::assistant(turn.content.clone()),
        _ => Message::user(turn.content.clone()),
    }));
    let question = turns.last().map(|t| t.content.trim().to_string()).unwrap_or_default();

    // Skills the request names, then those its facts select, then those about a tool it may
    // call.
    let named: Vec<SkillEntry> =
        request.skills.iter().filter_map(|name| inputs.catalog_skills.get(name).cloned()).collect();
    state.add_skills(&named, "named").await?;
    let mut facts = skills::facts_from_text(&question);
    facts.extend(skills::facts_from_context(&request.context));
    let chosen: Vec<SkillEntry> = skills::select(&inputs.catalog_skills, &facts).into_iter().cloned().collect();
    state.add_skills(&chosen, "request").await?;
    let about_tools: Vec<SkillEntry> =
        skills::select(&inputs.catalog_skills, &skills::facts_from_tools(&inputs.tools)).into_iter().cloned().collect();
    state.add_skills(&about_tools, "tool").await?;

    // Automatic retrieval.
    let mut retrieved = Value::Null;
    if let Some(retriever) = inputs.retriever.filter(|r| r.is_available(inputs.scope))
        && state.budget.tool_calls_left() > 0
    {
        retrieved = retrieve(state, retriever.as_ref(), inputs.scope, &question, inputs.search_top_k).await?;
    }

    // The execution catalog: authorized read-only tools plus this Run's knowledge tools.
    let execution = execution_registry(inputs, &state.skills)?;

    // Successful calls so far, by tool and canonical arguments: such a call made again is not
    // run again. Failed ones, the same way: see [`Failed::settled`].
    let mut made: HashMap<String, String> = HashMap::new();
    let mut failed: HashMap<String, Failed> = HashMap::new();
    // Forced planning, then every planned check. The conversation carries the checks as the
    // assistant's own calls under the host's ids, each followed by its result: the form a model
    // trained on tool calls reads results in (the plan submission itself is left out: a small
    // model shown it submits the plan again as its answer).
    if state.budget.tool_calls_left() > 0 {
        let checks =
            planning::plan(state, &execution, &question, &retrieved, &request.context, request.investigate).await?;
        let planned = checks.iter().map(|check| check.tool.to_string()).collect();
        state.report(RunProgress::Plan { checks: planned }).await;
        let at = state.history.len();
        let mut calls = Vec::with_capacity(checks.len());
        for check in checks {
            let arguments = check.arguments.to_string();
            let result = state.execute_tool(&execution, &check.tool, &arguments, None).await?;
            remember(&mut made, &mut failed, call_key(&check.tool, &arguments), &result);
            let name = execution.alias_of(&check.tool).unwrap_or_else(|| check.tool.clone());
            calls.push(llm::ToolCall::function(result.id.clone(), name, arguments));
            state.select_from_inventory(&inputs.catalog_skills, &result).await?;
        }
        if !calls.is_empty() {
            state.history.insert(at, Message::assistant_tool_calls(calls));
        }
    }

    // Adaptive loop.
    let mut nudged = false;
    let mut only_repeats = false;
    let mut refused_failure = false;
    loop {
        let tools =
            if state.budget.tool_calls_left() > 0 && !only_repeats { definitions(&execution) } else { Vec::new() };
        let choice = (!tools.is_empty()).then_some(ToolChoice::Auto);
        let history = std::mem::take(&mut state.history);
        let (max_tokens, temperature) = (state.params.max_tokens, state.params.temperature);
        // A watched Run streams its answer phase.
        let stream_to = state.progress.clone().filter(ProgressSink::is_open);
        let offered: Vec<(String, String)> = tools
            .iter()
            .filter_map(|t| {
                execution.resolve_alias(&t.function.name).map(|name| (t.function.name.clone(), name.to_string()))
            })
            .collect();
        let (response, history) = state.call_model(history, tools, choice, max_tokens, temperature, stream_to).await?;
        state.history = history;
        let mut calls = response.message.tool_calls;
        if calls.is_empty() {
            calls = bare_calls::read(response.message.content.as_deref().unwrap_or_default(), &offered);
        }
        if calls.is_empty() {
            let answer = response.message.content.unwrap_or_default();
            if !answer.trim().is_empty() {
                return Ok(answer.trim().to_string());
            }
            // An empty reply (a small model's, or a tool call the server could not parse and
            // dropped) is asked once more, when the budget leaves a call for the answer (and
            // one for the structured result after it).
            if nudged || state.budget.model_calls_left() < 1 + u32::from(request.investigate) {
                return Err(ModelError::NoAnswer.into());
            }
            nudged = true;
            tracing::info!("the model's reply was empty; it is asked once more for an answer");
            let event = NewEvent { kind: EMPTY_REPLY.into(), status: Some("asked_again".into()), ..Default::default() };
            state.record.event(event).await?;
            state.history.push(Message::user(EMPTY_REPLY_NUDGE));
            continue;
        }
        let (assistant, prepared) = prepare_calls(calls, state.activity.len());
        let host_key = |call: &ToolCall| {
            let tool = execution.resolve_alias(&call.name).map_or_else(|| call.name.clone(), ToString::to_string);
            call_key(&tool, &call.arguments)
        };
        // A call made before with the same arguments is not run again (measured:
        // Qwen2.5-Coder-1.5B called the same pod status seven times in a row). A reply of nothing
        // but such calls is left out of the conversation, and the model, offered no tools next,
        // is asked for its answer (measured: shown its repeat and a refusal of it, the model
        // answered "inconclusive", or that a node with `DiskPressure` True had none, as if the
        // check had failed).
        // A failed call made again is refused once with what to change; a reply of nothing
        // but repeats after that is treated as above (measured: Qwen2.5-Coder-0.5B sent the same
        // failing query six times until the tool-call budget ran out).
        let settled = |call: &ToolCall| failed.get(&host_key(call)).is_some_and(Failed::settled);
        let repeats_failure = prepared.iter().any(settled);
        only_repeats = prepared.iter().all(|call| made.contains_key(&host_key(call)) || settled(call))
            && (refused_failure || !repeats_failure);
        if only_repeats {
            let event = NewEvent { kind: REPEATED_CALLS.into(), status: Some("not_run".into()), ..Default::default() };
            state.record.event(event).await?;
            state.history.push(Message::user(ANSWER_FROM_RESULTS));
            continue;
        }
        state.history.push(assistant);
        // A reply asking for more calls than the budget has left runs as many as it can; the
        // others are answered as not run, and the next request offers no tools (measured:
        // Qwen2.5-Coder-0.5B asked for 4 calls with 2 left in 4 of 22 starter cases, and each
        // Run ended without a result). With none left, the call fails the Run as before. A
        // repeat beside new calls is answered with a pointer to its result.
        let room = (state.budget.tool_calls_left() as usize).max(1);
        let mut ran = 0;
        for call in prepared {
            let key = host_key(&call);
            if let Some(earlier) = made.get(&key) {
                state.history.push(Message::tool(call.id, repeated_call(earlier)));
                continue;
            }
            if let Some(earlier) = failed.get(&key).filter(|f| f.settled()) {
                refused_failure = true;
                let metadata = [("call".to_string(), json!(earlier.id)), ("tool".to_string(), json!(earlier.tool))];
                let event = NewEvent {
                    kind: REPEATED_CALLS.into(),
                    status: Some("refused".into()),
                    metadata: metadata.into(),
                    ..Default::default()
                };
                state.record.event(event).await?;
                state.history.push(Message::tool(call.id, earlier.refusal()));
                continue;
            }
            if ran >= room {
                state.history.push(Message::tool(call.id, NOT_RUN_OVER_BUDGET));
                continue;
            }
            ran += 1;
            let result = state.execute_tool(&execution, &call.name, &call.arguments, Some(&call.id)).await?;
            remember(&mut made, &mut failed, key, &result);
            state.select_from_inventory(&inputs.catalog_skills, &result).await?;
        }
        // Skills loaded through knowledge.load_skill.
        let loaded: Vec<SkillEntry> =
            state.skills.selected().into_iter().filter(|s| !state.injected.contains(&s.name)).collect();
        state.add_skills(&loaded, "loaded").await?;
    }
}

/// What the model is told of a call past the Run's tool-call budget.
pub const NOT_RUN_OVER_BUDGET: &str = r#"{"error":{"code":"budget_exhausted","message":"not run: this Run's tool calls are spent; answer from the results above"}}"#;

/// What the model is asked after a reply whose every call was made before: those calls'
/// results are in the conversation already.
pub const ANSWER_FROM_RESULTS: &str = "Every check you asked for has run, and its result is above. Answer now from those results: what they show, citing the values the tools returned.";

/// Event kind of a reply whose every call was made before (none ran again).
pub const REPEATED_CALLS: &str = "repeated_calls";

/// What the model is told of a call it made before with the same arguments.
fn repeated_call(earlier: &str) -> String {
    json!({"error": {"code": "repeated_call", "message": format!(
        "not run again: call {earlier} above has the same tool and arguments, and its result is above; \
         answer from the results, or call a different tool or different arguments")}})
    .to_string()
}

/// A call of this Run that failed, by its identity ([`call_key`]).
struct Failed {
    /// The host's id of its first failure.
    id: String,
    /// Host tool name.
    tool: String,
    /// Its error.
    error: ToolError,
    /// How many times it failed.
    times: u32,
}

impl Failed {
    /// Whether the same call would fail again, so it is not run again: a call the host refused
    /// (arguments, name, permission) or whose output it refused fails the same way each time; a
    /// tool's own failure or timeout may pass, so such a call runs once more, and is settled
    /// when it failed twice.
    fn settled(&self) -> bool {
        self.times >= 2 || !matches!(self.error.code, ErrorCode::ToolError | ErrorCode::Timeout)
    }

    /// What the model is told of this call made again: which call failed, how, and what to do.
    fn refusal(&self) -> String {
        let message = truncate_bytes(&self.error.message, MAX_REFUSAL_QUOTE_BYTES, ELLIPSIS);
        let times = if self.times >= 2 { "failed twice" } else { "failed" };
        json!({"error": {"code": "repeated_failed_call", "message": format!(
            "not run again: call {} above has the same tool and arguments and {times} ({}: {message}); \
             the same call fails the same way. Change the arguments that error names, call a different tool, \
             or answer from the results above",
            self.id, self.error.code)}})
        .to_string()
    }
}

/// Longest part of an error message a refusal of its repeat quotes, in bytes.
const MAX_REFUSAL_QUOTE_BYTES: usize = 240;

/// Notes a call's result under its identity: a success in `made`, a failure in `failed`.
fn remember(
    made: &mut HashMap<String, String>,
    failed: &mut HashMap<String, Failed>,
    key: String,
    result: &ToolResult,
) {
    match &result.error {
        None => {
            made.entry(key).or_insert_with(|| result.id.clone());
        }
        Some(error) => {
            let first = || Failed { id: result.id.clone(), tool: result.name.clone(), error: error.clone(), times: 0 };
            let entry = failed.entry(key).or_insert_with(first);
            entry.times += 1;
            entry.error = error.clone();
        }
    }
}

/// A call's identity within a Run: the host tool name and its canonical arguments (the text
/// itself when it is not JSON).
fn call_key(tool: &str, arguments: &str) -> String {
    let arguments =
        serde_json::from_str::<Value>(arguments).map_or_else(|_| arguments.to_string(), |v| canonical_json(&v));
    format!("{tool}\n{arguments}")
}

/// Event kind of an empty reply asked again.
pub const EMPTY_REPLY: &str = "empty_reply";
/// The turn added after an empty reply.
pub const EMPTY_REPLY_NUDGE: &str = "(Akritas) Your last reply was empty: it held neither an answer nor a tool call. \
Answer the question now, in plain text: in two or three sentences, what the tool results above show is the cause, \
quoting the values that show it.";

/// The base system message (client context first, then the language
/// instruction) and the turns after the client's system message.
fn opening<'t>(turns: &'t [Turn], language: &str) -> (String, &'t [Turn]) {
    let mut system = String::new();
    let mut rest = turns;
    if let Some(first) = turns.first().filter(|t| t.role == Speaker::System) {
        system.push_str("Additional client context:\n");
        system.push_str(first.content.trim());
        system.push_str("\n\n");
        rest = &turns[1..];
    }
    system.push_str(&language_instruction(language));
    (system, rest)
}

/// The automatic retrieval for the latest user message, recorded as a
/// `knowledge.search` call (the query by hash and length) with the documents it
/// put into the Run.
async fn retrieve(
    state: &mut RunState<'_>,
    retriever: &dyn Retriever,
    scope: &Scope,
    query: &str,
    top_k: usize,
) -> Result<Value, Stop> {
    state.budget.begin_tool_call(Instant::now())?;
    let started = Instant::now();
    let found = retriever.search(scope, query, top_k).await;
    let prefetch = Prefetch::new(found, started.elapsed());
    let text = prefetch.result.to_json_string();
    state.budget.record_retrieved(text.len())?;
    state.budget.record_tool_result(text.len())?;
    state.history.extend(prefetch.messages(&Prefetch::arguments(query)));
    // The query is the user's message: the audit keeps its hash and length only.
    state.record_call(CallKind::Retrieval, Some(Prefetch::recorded_arguments(query)), prefetch.result.clone()).await?;
    for (id, title) in &prefetch.documents {
        let event = record::context_retrieved_event(id, title, PREFETCH_CALL_ID, &prefetch.versions);
        state.record.event(event).await?;
    }
    Ok(serde_json::to_value(&prefetch.result).unwrap_or(Value::Null))
}

/// The authorized read-only tools plus this Run's knowledge tools (skills, search).
fn execution_registry(inputs: &Inputs<'_>, state: &RunSkills) -> Result<Registry, RegistryError> {
    let retriever = inputs.retriever.filter(|r| r.is_available(inputs.scope));
    if inputs.catalog_skills.is_empty() && retriever.is_none() {
        return Ok(inputs.tools.clone());
    }
    let mut builder = RegistryBuilder::new(knowledge_tools::limits());
    if !inputs.catalog_skills.is_empty() {
        knowledge_tools::register(&mut builder, inputs.catalog_skills.clone(), state.clone())?;
    }
    if let Some(retriever) = retriever {
        knowledge_tools::register_search(&mut builder, retriever.clone(), inputs.scope.clone(), inputs.search_top_k)?;
    }
    inputs.tools.merge(&builder.build())
}

/// The model's calls as the conversation carries them: ids that are not safe call
/// ids are replaced (`call_<n>`, numbered after the `done` calls of the Run); the
/// assistant message repeats the calls with those ids. They only pair a call with
/// its answer: the host executes and records each under its own id.
fn prepare_calls(calls: Vec<llm::ToolCall>, done: usize) -> (Message, Vec<ToolCall>) {
    let mut assistant = Message::assistant_tool_calls(Vec::new());
    let mut prepared = Vec::with_capacity(calls.len());
    for (n, call) in calls.into_iter().enumerate() {
        let id = if is_call_id(&call.id) { call.id.clone() } else { format!("call_{}", done + n + 1) };
        let mut sent = call.clone();
        sent.id = id.clone();
        assistant.tool_calls.push(sent);
        prepared.push(ToolCall { id, name: call.function.name, arguments: call.function.arguments });
    }
    (assistant, prepared)
}

fn is_call_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(role: Speaker, content: &str) -> Turn {
        Turn { role, content: content.to_string() }
    }

    #[test]
    fn client_context_leads_the_system_message_and_leaves_the_turns() {
        let turns = [turn(Speaker::System, "  cluster: prod-eu  "), turn(Speaker::User, "why?")];
        let (system, rest) = opening(&turns, "de");
        assert_eq!(system, format!("Additional client context:\ncluster: prod-eu\n\n{}", language_instruction("de")));
        assert_eq!(rest, &turns[1..]);

        let turns = [turn(Speaker::User, "why?")];
        let (system, rest) = opening(&turns, "en");
        assert_eq!(system, language_instruction("en"));
        assert_eq!(rest, &turns[..]);
    }

    #[test]
    fn unsafe_call_ids_are_replaced_and_numbered_after_earlier_calls() {
        let calls = vec![
            llm::ToolCall::function("call_ok-1.a", "inventory_host", r#"{"host":"db1"}"#),
            llm::ToolCall::function("", "inventory_host", "{}"),
            llm::ToolCall::function("bad id/with spaces", "metrics_query", "{}"),
            llm::ToolCall::function("x".repeat(129), "metrics_query", "{}"),
        ];
        let (assistant, prepared) = prepare_calls(calls, 5);
        let ids: Vec<&str> = prepared.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_ok-1.a", "call_7", "call_8", "call_9"]);
        let sent: Vec<&str> = assistant.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(sent, ids, "the conversation repeats the ids the host used");
        assert_eq!(prepared[0].name, "inventory_host");
        assert_eq!(prepared[0].arguments, r#"{"host":"db1"}"#);
    }
}
