//! Fitting one model request into the model's context window (pure).
//!
//! A request's size is estimated from its JSON: the messages and tool definitions as serialized,
//! plus the global system instructions (SYSTEM.md) the client prepends, at [`BYTES_PER_TOKEN`]
//! bytes a token, rounded up. Three is conservative for English text and JSON in the tokenizers
//! small models use (Llama, Qwen, SmolLM, Gemma: 3.5 to 4.5 bytes a token), not for text that is
//! mostly CJK or random bytes; a server that still finds the request too long says so, and the
//! Run sends it once more, fitted smaller (`engine::context`).
//!
//! When the prompt and the completion budget (`max_tokens`) exceed the window, the completion is
//! first held to a quarter of the window (at least the floor below, at most `max_tokens`) and the
//! prompt is cut, each step only as far as needed, in this order:
//! 1. runbook excerpts: the retrieved documents of each search, lowest-ranked first; the
//!    best-ranked document of each search stays;
//! 2. tool results (and the planner's copy of the retrieval): the largest first, the older among
//!    equals, truncated with a marker down to [`MIN_RESULT_BYTES`]; no message is removed, so
//!    every tool call keeps its result;
//! 3. skill text: from its end, the last selected skill first;
//! 4. tool schemas: the tools whose name and description share the fewest words with the
//!    question go first, in the request's `tools` and in the planner's tool list (with the plan
//!    schema's branch for the tool, in the submit tool or the `response_format`); one stays in
//!    each, and the tool a request forces is never removed;
//! 5. the global system instructions (SYSTEM.md), from their end.
//!
//! The completion budget is then what the window leaves, never below the smaller of `max_tokens`
//! and the floor: [`MIN_COMPLETION_TOKENS`], or the request's `min_completion_tokens` when larger
//! (a structured step's answer, `llm::structured::MIN_ANSWER_TOKENS`). When the prompt cannot be
//! cut that far, the floor still holds: an answer cut off fails for sure, a request over the
//! estimate may still fit (the estimate is conservative), and a server that finds it too long
//! says so. Never cut: the user's question (the last user
//! message; in the planner's input its `request`), earlier turns, the host's step prompts
//! (planning, structuring, proposals) and assistant messages.

use serde::Serialize;

use crate::llm::{ChatRequest, Message, ToolChoice, ToolDefinition};
use cut::Cutter;

mod cut;

/// Length of a value's JSON serialization, without building it.
pub(super) fn serialized_len<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// Bytes of request JSON counted as one token.
pub const BYTES_PER_TOKEN: u64 = 3;
/// The smallest completion budget fitting leaves (or `max_tokens`, when smaller).
pub const MIN_COMPLETION_TOKENS: u32 = 256;
/// A tool result is never cut below this many bytes (marker included).
pub const MIN_RESULT_BYTES: usize = 256;
/// Bytes the client adds around SYSTEM.md at most: the separator, or a system message of its own.
const INSTRUCTIONS_FRAME_BYTES: usize = 32;
/// What fitting cut from requests, by category (counts and bytes, never content).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cuts {
    /// Retrieved runbook documents left out.
    pub runbook_documents: u32,
    /// Their bytes.
    pub runbook_bytes: u64,
    /// Tool results truncated.
    pub tool_results: u32,
    /// Bytes cut from them.
    pub tool_result_bytes: u64,
    /// Bytes cut from skill text.
    pub skill_bytes: u64,
    /// Tools not offered.
    pub tools: u32,
    /// Bytes of their schemas.
    pub tool_schema_bytes: u64,
    /// Bytes cut from the global system instructions (SYSTEM.md).
    pub instruction_bytes: u64,
    /// Tokens taken off the completion budget (`max_tokens`).
    pub completion_tokens: u64,
}

impl Cuts {
    /// Whether nothing was cut.
    pub fn is_empty(&self) -> bool {
        *self == Cuts::default()
    }

    fn add(&mut self, other: &Cuts) {
        self.runbook_documents += other.runbook_documents;
        self.runbook_bytes += other.runbook_bytes;
        self.tool_results += other.tool_results;
        self.tool_result_bytes += other.tool_result_bytes;
        self.skill_bytes += other.skill_bytes;
        self.tools += other.tools;
        self.tool_schema_bytes += other.tool_schema_bytes;
        self.instruction_bytes += other.instruction_bytes;
        self.completion_tokens += other.completion_tokens;
    }
}

/// How one request was fitted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fitted {
    /// The window, in tokens.
    pub window: u32,
    /// Estimated prompt tokens before fitting.
    pub prompt_tokens_before: u64,
    /// Estimated prompt tokens after.
    pub prompt_tokens_after: u64,
    /// `max_tokens` asked for.
    pub max_tokens_before: u32,
    /// `max_tokens` sent.
    pub max_tokens_after: u32,
    /// What was cut.
    pub cuts: Cuts,
}

impl Fitted {
    /// Whether the request was changed.
    pub fn changed(&self) -> bool {
        !self.cuts.is_empty()
    }
}

/// What a Run cut to fit its model's context window, over all its requests (a Run re-sends its
/// conversation, so what every request cuts again is counted again).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ContextCuts {
    /// The smallest window the Run's requests were fitted to.
    pub window: Option<u32>,
    /// Requests that were cut.
    pub fitted_requests: u32,
    /// Requests sent once more, smaller, after the server reported a context overflow.
    pub overflow_retries: u32,
    /// Totals over the requests.
    #[serde(flatten)]
    pub cuts: Cuts,
}

impl ContextCuts {
    /// Counts one fitted request (`overflow`: a retry after the server's overflow).
    pub fn add(&mut self, fitted: &Fitted, overflow: bool) {
        self.window = Some(self.window.map_or(fitted.window, |window| window.min(fitted.window)));
        self.fitted_requests += u32::from(fitted.changed());
        self.overflow_retries += u32::from(overflow);
        self.cuts.add(&fitted.cuts);
    }

    /// Whether the Run fitted or retried nothing.
    pub fn is_empty(&self) -> bool {
        self.fitted_requests == 0 && self.overflow_retries == 0
    }
}

/// Estimated tokens of `bytes` bytes of request JSON.
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

/// Estimated prompt tokens of `request` with `instructions` prepended. A `response_format` is
/// not prompt: llama-server, Ollama and vLLM turn its schema into a grammar (or guided decoding)
/// and show the model none of it (measured on Ollama with SmolLM2 in an 8,192-token window:
/// counting the plan's schema cut SYSTEM.md from two requests of a chat whose four requests took
/// 12,488 prompt tokens in all). A step that wants
/// the model to read its schema writes it into a message (`llm::structured`, `json_object` and
/// `text`), where it counts.
pub fn prompt_tokens(request: &ChatRequest, instructions: Option<&str>) -> u64 {
    estimate_tokens(prompt_bytes(&request.messages, &request.tools, instructions))
}

fn prompt_bytes(messages: &[Message], tools: &[ToolDefinition], instructions: Option<&str>) -> usize {
    serialized_len(&(messages, tools)) + instructions.map_or(0, |text| serialized_len(&text) + INSTRUCTIONS_FRAME_BYTES)
}

/// Fits `request` (with `instructions`, the SYSTEM.md the client will prepend) into `window`
/// tokens, cutting as the module says. `skills_from`: where skill text starts in the first
/// (system) message, when it carries any.
pub fn fit(
    request: &mut ChatRequest,
    instructions: &mut Option<String>,
    skills_from: Option<usize>,
    window: u32,
) -> Fitted {
    let asked = request.max_tokens;
    let before = prompt_tokens(request, instructions.as_deref());
    let mut fitted = Fitted {
        window,
        prompt_tokens_before: before,
        prompt_tokens_after: before,
        max_tokens_before: asked,
        max_tokens_after: asked,
        cuts: Cuts::default(),
    };
    if before + u64::from(asked) <= u64::from(window) {
        return fitted;
    }
    let floor = asked.min(MIN_COMPLETION_TOKENS.max(request.min_completion_tokens));
    let reserve = asked.min(floor.max(window / 4));
    let budget = usize::try_from(u64::from(window - reserve.min(window)) * BYTES_PER_TOKEN).unwrap_or(usize::MAX);
    let forced = match &request.tool_choice {
        Some(ToolChoice::Function(name)) => Some(name.clone()),
        _ => None,
    };
    let format = &mut request.response_format;
    let mut cutter = Cutter::new(&mut request.messages, &mut request.tools, format, instructions, budget);
    cutter.runbooks();
    cutter.tool_results();
    cutter.skills(skills_from);
    cutter.tools(forced.as_deref());
    cutter.instructions();
    let mut cuts = cutter.finish();
    let after = prompt_tokens(request, instructions.as_deref());
    let room = u64::from(window).saturating_sub(after);
    let completion = u64::from(asked).min(room).max(u64::from(floor));
    request.max_tokens = u32::try_from(completion).unwrap_or(asked);
    cuts.completion_tokens = u64::from(asked - request.max_tokens);
    fitted.prompt_tokens_after = after;
    fitted.max_tokens_after = request.max_tokens;
    fitted.cuts = cuts;
    fitted
}

#[cfg(test)]
mod tests;
