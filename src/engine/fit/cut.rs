//! The cuts of [`super::fit`], one pass a category, each only as far as the budget needs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::{Cuts, MIN_RESULT_BYTES, prompt_bytes, serialized_len};
use crate::engine::retrieval::SEARCH_TOOL;
use crate::llm::{Message, Role, ToolDefinition};

/// Skill text and SYSTEM.md shorter than this after a cut are dropped whole.
const MIN_TEXT_BYTES: usize = 64;
/// Appended where skill text or SYSTEM.md was cut.
pub(super) const TEXT_MARKER: &str = "\n…[cut by Akritas to fit the model's context window]";
/// Key of an omitted-document count in a search output.
pub(super) const OMITTED_RESULTS: &str = "results_cut_to_fit_context";

/// Keys of the planner's input (`engine::planning`).
pub(super) mod planner {
    pub const REQUEST: &str = "request";
    pub const RUNBOOKS: &str = "knowledge_search_result";
    pub const SKILLS: &str = "selected_operational_skills";
    pub const SKILL_TEXT: &str = "instructions";
    pub const TOOLS: &str = "available_execution_tools";
}

/// Words too common to relate a tool to a question.
const STOP_WORDS: &[&str] = &[
    "all", "and", "any", "are", "can", "does", "for", "from", "has", "have", "how", "into", "its", "not", "the",
    "this", "that", "was", "what", "when", "why", "with", "you",
];

/// A part of the request that carries text: a message, or the planner's copy of the retrieval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    Message(usize),
    PlannerRunbooks,
}

/// The planner's input, parsed: the last user message when it is the planner's JSON object.
struct Planner {
    index: usize,
    input: Map<String, Value>,
}

/// One request being cut: its parts, the budget, and what was cut so far.
pub(super) struct Cutter<'a> {
    messages: &'a mut Vec<Message>,
    tools: &'a mut Vec<ToolDefinition>,
    format: &'a mut Option<Value>,
    instructions: &'a mut Option<String>,
    planner: Option<Planner>,
    /// Prompt bytes allowed.
    budget: usize,
    /// Prompt bytes now.
    total: usize,
    /// Original and kept bytes of every truncated tool result.
    truncated: BTreeMap<Place, (usize, usize)>,
    cuts: Cuts,
}

impl<'a> Cutter<'a> {
    pub(super) fn new(
        messages: &'a mut Vec<Message>,
        tools: &'a mut Vec<ToolDefinition>,
        format: &'a mut Option<Value>,
        instructions: &'a mut Option<String>,
        budget: usize,
    ) -> Self {
        let planner = messages.iter().rposition(|m| m.role == Role::User).and_then(|index| {
            let input = serde_json::from_str::<Map<String, Value>>(messages[index].content.as_deref()?).ok()?;
            (input.contains_key(planner::TOOLS) || input.contains_key(planner::RUNBOOKS))
                .then_some(Planner { index, input })
        });
        let mut cutter = Cutter {
            messages,
            tools,
            format,
            instructions,
            planner,
            budget,
            total: 0,
            truncated: BTreeMap::new(),
            cuts: Cuts::default(),
        };
        cutter.measure();
        cutter
    }

    fn measure(&mut self) {
        self.total = prompt_bytes(self.messages, self.tools, self.instructions.as_deref());
    }

    /// Bytes over the budget.
    fn over(&self) -> usize {
        self.total.saturating_sub(self.budget)
    }

    fn write_planner(&mut self) {
        if let Some(planner) = &self.planner {
            let text = Value::Object(planner.input.clone()).to_string();
            self.messages[planner.index].content = Some(text);
        }
    }

    /// Step 1, retrieved documents: lowest-ranked first; the best of each search stays.
    pub(super) fn runbooks(&mut self) {
        let mut searches: Vec<(Place, Value)> = Vec::new();
        for (index, message) in self.messages.iter().enumerate() {
            if message.role != Role::Tool {
                continue;
            }
            if let Some(value) = message.content.as_deref().and_then(|text| serde_json::from_str::<Value>(text).ok())
                && value["name"] == SEARCH_TOOL
                && value["output"]["results"].is_array()
            {
                searches.push((Place::Message(index), value));
            }
        }
        if let Some(value) = self.planner.as_ref().and_then(|p| p.input.get(planner::RUNBOOKS))
            && value["output"]["results"].is_array()
        {
            searches.push((Place::PlannerRunbooks, value.clone()));
        }
        let results = |value: &Value| value["output"]["results"].as_array().map_or(0, Vec::len);
        while self.over() > 0 {
            let Some(chosen) = (0..searches.len())
                .filter(|&k| results(&searches[k].1) > 1)
                .max_by_key(|&k| (results(&searches[k].1), Reverse(k)))
            else {
                break;
            };
            let (place, value) = &mut searches[chosen];
            let Some(removed) = value["output"]["results"].as_array_mut().and_then(Vec::pop) else { break };
            self.cuts.runbook_documents += 1;
            self.cuts.runbook_bytes += serialized_len(&removed) as u64;
            let omitted = value["output"][OMITTED_RESULTS].as_u64().unwrap_or(0) + 1;
            value["output"][OMITTED_RESULTS] = Value::from(omitted);
            match *place {
                Place::Message(index) => self.messages[index].content = Some(value.to_string()),
                Place::PlannerRunbooks => {
                    if let Some(planner) = &mut self.planner {
                        planner.input.insert(planner::RUNBOOKS.into(), value.clone());
                    }
                    self.write_planner();
                }
            }
            self.measure();
        }
    }

    /// The text of a tool result (the planner's retrieval as its JSON text).
    fn result_text(&self, place: Place) -> Option<String> {
        match place {
            Place::Message(index) => self.messages[index].content.clone(),
            Place::PlannerRunbooks => match self.planner.as_ref()?.input.get(planner::RUNBOOKS)? {
                Value::String(text) => Some(text.clone()),
                value => Some(value.to_string()),
            },
        }
    }

    /// Step 2, tool results: the largest first (the older among equals), down to a common size.
    pub(super) fn tool_results(&mut self) {
        let mut places: Vec<Place> = (0..self.messages.len())
            .filter(|&index| self.messages[index].role == Role::Tool)
            .map(Place::Message)
            .collect();
        if self.planner.as_ref().is_some_and(|p| p.input.contains_key(planner::RUNBOOKS)) {
            places.push(Place::PlannerRunbooks);
        }
        let order = |place: Place, planner: Option<&Planner>| match place {
            Place::Message(index) => index,
            Place::PlannerRunbooks => planner.map_or(0, |p| p.index),
        };
        while self.over() > 0 {
            let sizes: Vec<(Place, usize)> =
                places.iter().map(|&place| (place, self.result_text(place).map_or(0, |t| t.len()))).collect();
            let planner = self.planner.as_ref();
            let Some(&(place, size)) = sizes
                .iter()
                .filter(|(_, size)| *size > MIN_RESULT_BYTES)
                .max_by_key(|(place, size)| (*size, Reverse(order(*place, planner))))
            else {
                break;
            };
            let next = sizes.iter().filter(|(other, _)| *other != place).map(|(_, size)| *size).max().unwrap_or(0);
            let mut target = MIN_RESULT_BYTES.max(size.saturating_sub(self.over()));
            if next < size {
                target = target.max(next);
            }
            let Some(text) = self.result_text(place) else { break };
            let original = self.truncated.get(&place).map_or(text.len(), |(original, _)| *original);
            let shown = |kept: usize| {
                format!("\n…[cut by Akritas to fit the model's context window: {kept} of {original} bytes shown]")
            };
            let kept = floor_char_boundary(&text, target.saturating_sub(shown(original).len()));
            let cut = format!("{}{}", &text[..kept], shown(kept));
            if cut.len() >= text.len() {
                break;
            }
            self.truncated.insert(place, (original, kept));
            match place {
                Place::Message(index) => self.messages[index].content = Some(cut),
                Place::PlannerRunbooks => {
                    if let Some(planner) = &mut self.planner {
                        planner.input.insert(planner::RUNBOOKS.into(), Value::String(cut));
                    }
                    self.write_planner();
                }
            }
            self.measure();
        }
    }

    /// Step 3, skill text: the system message's skills from their end, then the planner's
    /// skills, the last one first.
    pub(super) fn skills(&mut self, skills_from: Option<usize>) {
        if let (Some(from), Some(first)) = (skills_from, self.messages.first_mut())
            && first.role == Role::System
            && let Some(content) = &mut first.content
            && content.len() > from
            && content.is_char_boundary(from)
            && self.total > self.budget
        {
            let over = self.total - self.budget;
            let (kept, text) = cut_text(&content[from..], over);
            self.cuts.skill_bytes += (content.len() - from - kept) as u64;
            content.replace_range(from.., &text);
            self.measure();
        }
        let count = self
            .planner
            .as_ref()
            .and_then(|p| p.input.get(planner::SKILLS))
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        for index in (0..count).rev() {
            let over = self.over();
            if over == 0 {
                break;
            }
            let Some(planner) = &mut self.planner else { break };
            let Some(text) = planner.input[planner::SKILLS][index][planner::SKILL_TEXT].as_str().map(str::to_owned)
            else {
                continue;
            };
            let (kept, cut) = cut_text(&text, over);
            if kept == text.len() {
                continue;
            }
            self.cuts.skill_bytes += (text.len() - kept) as u64;
            planner.input[planner::SKILLS][index][planner::SKILL_TEXT] = Value::String(cut);
            self.write_planner();
            self.measure();
        }
    }

    /// Step 4, tool schemas: the least related to the question first; one stays in each list,
    /// and a forced tool always.
    pub(super) fn tools(&mut self, forced: Option<&str>) {
        if self.over() == 0 {
            return;
        }
        let question = words(&self.question());
        let related = |text: String| words(&text).intersection(&question).count();
        // (relevance, list, position, name, bytes); list 0: the request's tools, 1: the planner's.
        let mut candidates: Vec<(usize, u8, usize, String, usize)> = Vec::new();
        for (position, tool) in self.tools.iter().enumerate() {
            if Some(tool.function.name.as_str()) != forced {
                let text = format!("{} {}", tool.function.name, tool.function.description);
                candidates.push((related(text), 0, position, tool.function.name.clone(), serialized_len(tool) + 1));
            }
        }
        let listed = self.planner.as_ref().and_then(|p| p.input.get(planner::TOOLS)).and_then(Value::as_array);
        for (position, tool) in listed.into_iter().flatten().enumerate() {
            let name = tool["name"].as_str().unwrap_or_default().to_string();
            let text = format!("{name} {}", tool["description"].as_str().unwrap_or_default());
            // Inside the planner's message the entry is escaped JSON text.
            let bytes = serialized_len(&tool.to_string()) - 1;
            candidates.push((related(text), 1, position, name, bytes));
        }
        candidates.sort_by_key(|(relevance, list, position, _, _)| (*relevance, Reverse(*position), *list));
        let mut planner_changed = false;
        for (_, list, _, name, bytes) in candidates {
            if self.over() == 0 {
                break;
            }
            let removed = if list == 0 {
                let keep_one = self.tools.len() > 1;
                let at = self.tools.iter().position(|t| t.function.name == name).filter(|_| keep_one);
                at.map(|at| self.tools.remove(at)).is_some()
            } else {
                let listed = self.planner.as_mut().and_then(|p| p.input.get_mut(planner::TOOLS));
                let removed = match listed.and_then(Value::as_array_mut) {
                    Some(tools) if tools.len() > 1 => {
                        let at = tools.iter().position(|t| t["name"].as_str() == Some(name.as_str()));
                        at.map(|at| tools.remove(at)).is_some()
                    }
                    _ => false,
                };
                // The plan schema's branch for the tool goes with it: from the submit tool
                // (prompt) and from the `response_format` (a grammar, not counted).
                if removed {
                    let schemas = self.tools.iter_mut().map(|t| &mut t.function.parameters);
                    let branches: usize = schemas.map(|schema| drop_branch(schema, &name)).sum();
                    if let Some(format) = self.format.as_mut() {
                        drop_branch(format, &name);
                    }
                    self.cuts.tool_schema_bytes += branches as u64;
                    self.total = self.total.saturating_sub(branches);
                }
                removed
            };
            if removed {
                planner_changed |= list == 1;
                self.cuts.tools += 1;
                self.cuts.tool_schema_bytes += bytes as u64;
                self.total = self.total.saturating_sub(bytes);
            }
        }
        if planner_changed {
            self.write_planner();
        }
        self.measure();
    }

    /// The question: the planner's `request`, else the last user message.
    fn question(&self) -> String {
        if let Some(request) = self.planner.as_ref().and_then(|p| p.input.get(planner::REQUEST)?.as_str()) {
            return request.to_string();
        }
        let last = self.messages.iter().rev().find(|m| m.role == Role::User);
        last.and_then(|m| m.content.clone()).unwrap_or_default()
    }

    /// Step 5, the global system instructions: from their end.
    pub(super) fn instructions(&mut self) {
        let over = self.over();
        let Some(text) = self.instructions.as_mut().filter(|_| over > 0) else { return };
        let (kept, cut) = cut_text(text, over);
        self.cuts.instruction_bytes += (text.len() - kept) as u64;
        *self.instructions = (!cut.is_empty()).then_some(cut);
        self.measure();
    }

    pub(super) fn finish(mut self) -> Cuts {
        self.cuts.tool_results = u32::try_from(self.truncated.len()).unwrap_or(u32::MAX);
        self.cuts.tool_result_bytes = self.truncated.values().map(|(original, kept)| (original - kept) as u64).sum();
        self.cuts
    }
}

/// Removes, anywhere in `schema`, the `anyOf` branch that stands for the tool `name` (its
/// `properties.tool.enum` is `[name]`, as the plan schema keys its checks), unless it is the last;
/// the bytes removed.
fn drop_branch(schema: &mut Value, name: &str) -> usize {
    match schema {
        Value::Object(map) => {
            let mut removed = 0;
            if let Some(Value::Array(branches)) = map.get_mut("anyOf")
                && branches.len() > 1
                && let Some(at) = branches.iter().position(|b| b["properties"]["tool"]["enum"] == json!([name]))
            {
                removed += serialized_len(&branches.remove(at)) + 1;
            }
            removed + map.values_mut().map(|value| drop_branch(value, name)).sum::<usize>()
        }
        Value::Array(items) => items.iter_mut().map(|item| drop_branch(item, name)).sum(),
        _ => 0,
    }
}

/// `text` shortened by at least `over` bytes, with a marker (or emptied when little would be
/// left): the bytes kept and the new text.
fn cut_text(text: &str, over: usize) -> (usize, String) {
    // The marker as the request's JSON carries it (its newline escaped).
    let keep = text.len().saturating_sub(over + serialized_len(TEXT_MARKER) - 2);
    if keep < MIN_TEXT_BYTES {
        return (0, String::new());
    }
    let kept = floor_char_boundary(text, keep);
    (kept, format!("{}{TEXT_MARKER}", &text[..kept]))
}

fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Lower-case words of at least three characters, without the commonest.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.chars().count() >= 3)
        .map(str::to_lowercase)
        .filter(|word| !STOP_WORDS.contains(&word.as_str()))
        .collect()
}
