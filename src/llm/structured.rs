//! The structured-step port: every step that needs a structured answer (the investigation plan,
//! the result, the change proposal, the discovery plan) asks through it, whatever the server
//! supports. Servers differ: vLLM and OpenAI honour a forced tool call; Ollama ignores
//! `tool_choice` and refuses `tools` outright for a model whose template has none; llama-server
//! may write prose before the call. All of them honour a JSON schema as `response_format`.
//!
//! Modes ([`Mode`]), in fallback order:
//! - `tool_call`: the submit tool offered alone with `tool_choice: "required"`;
//! - `json_schema`: no tools; `response_format: {type: json_schema, strict: true}` (a grammar on
//!   llama.cpp and Ollama, so its `maxLength`/`maxItems` are kept within what llama.cpp parses),
//!   the answer is the object as `content`;
//! - `json_object`: `response_format: {type: json_object}` and the schema in the prompt;
//! - `text`: the schema in the prompt, the first JSON object in the prose is taken, with one
//!   targeted repair turn when there is none or it does not match the schema (also in the two
//!   modes before, which a server may not enforce).
//!
//! [`Protocol::Auto`] starts with the mode remembered for the model: before the first step, what
//! the server is ([`LlmClient::server`], told without a completion: Ollama and llama-server start
//! with `json_schema`, vLLM with `tool_call`), else `tool_call`. It falls back, for the call and for
//! later ones, when a forced call comes back as prose, or the server refuses a mode with a 4xx
//! naming it. Fallbacks are counted in `/metrics` (`akritas_model_protocol_fallbacks_total`). A
//! fixed protocol never probes the server for a mode and never falls back.
//!
//! The port is sans-IO: [`Asking`] says which request to send next and digests each answer, so
//! each caller sends through its own budget and records. Whatever the mode, the answer is
//! normalised to one call of the submit tool, so callers validate it as they always did.

use serde_json::{Value, json};

use super::client::LlmClient;
use super::error::LlmError;
use super::grammar::{grammar_bounded, outline};
pub use super::protocol::{Mode, ModeSource, Protocol};
use super::reasoning::strip_think;
use super::wire::{ChatRequest, ChatResponse, Message, Role, ToolCall, ToolChoice, ToolDefinition};

/// The completion budget a structured answer keeps when its request is fitted to a small context
/// window (or the step's `max_tokens`, when smaller): a result with a summary, a few evidence
/// quotes and next steps takes 300 to 450 tokens in the tokenizers of small models, and a JSON
/// answer cut off is no answer. Measured on Ollama with SmolLM2-135M in an 8,192-token window:
/// fitting had taken an alert's result step down to 256 tokens, and the result was cut mid-string.
pub const MIN_ANSWER_TOKENS: u32 = 512;

/// One structured step: the conversation, and the submit tool whose arguments are the answer.
#[derive(Debug, Clone)]
pub struct Step {
    pub messages: Vec<Message>,
    /// The submit tool's function name (an OpenAI alias: `[A-Za-z0-9_-]`).
    pub name: String,
    pub description: String,
    /// JSON schema of the answer object.
    pub schema: Value,
    /// A tighter schema sent in its place (`tool_call` and `json_schema`), for a server that
    /// turns it into a grammar: whatever it admits also meets `schema`, which checks the answer.
    pub grammar: Option<Value>,
    pub max_tokens: u32,
    pub temperature: Option<f64>,
}

/// How a step was answered.
#[derive(Debug, Clone)]
pub struct Answered {
    /// The last response. When an object was taken from `content`, it is one call of the
    /// submit tool (id `structured_1`) with that object as arguments, and no content.
    pub response: ChatResponse,
    /// The mode of the last request.
    pub mode: Mode,
    /// `(from, to)` for each fallback during the step.
    pub fallbacks: Vec<(Mode, Mode)>,
    /// Requests sent (fallbacks and the repair turn included).
    pub requests: u32,
}

/// What to do after an answer.
#[derive(Debug)]
pub enum Next {
    /// Send this request.
    Ask(ChatRequest),
    /// The step is answered (which may still be no submission: the caller says why).
    Done(Answered),
    /// The server failed in a way no other mode can help.
    Failed(LlmError),
}

/// The sans-IO state of one structured step.
pub struct Asking {
    llm: LlmClient,
    model: String,
    step: Step,
    mode: Mode,
    /// Where the first mode came from.
    source: ModeSource,
    auto: bool,
    repaired: bool,
    repair: Vec<Message>,
    fallbacks: Vec<(Mode, Mode)>,
    requests: u32,
    /// The schema compiled, once a JSON answer is to be checked (a tool call answer never is).
    validator: std::cell::OnceCell<Option<jsonschema::Validator>>,
}

/// Id of the submit call made from a JSON answer.
pub const STRUCTURED_CALL_ID: &str = "structured_1";
/// At most this much of a wrong answer is repeated in the repair turn.
const REPAIR_ECHO_CHARS: usize = 2_000;
/// At most this much of an answer cut off at the token limit is repeated in the repair turn.
const CUT_OFF_ECHO_CHARS: usize = 400;

impl Asking {
    /// Starts a step for `model` once the client knows what it can of the server: under `auto`,
    /// the server identification (once per model, bounded by [`super::PROBE_TIMEOUT`]) seeds the
    /// first mode. Returns the first request.
    pub async fn begin(llm: &LlmClient, model: &str, step: Step) -> (Self, ChatRequest) {
        if llm.protocol() == Protocol::Auto {
            llm.server().await;
        }
        Self::start(llm, model, step)
    }

    /// Starts a step for `model` with what the client knows now ([`LlmClient::model_facts`]), and
    /// returns the first request.
    pub fn start(llm: &LlmClient, model: &str, step: Step) -> (Self, ChatRequest) {
        let facts = llm.model_facts(model);
        let (mode, source) = match facts.mode {
            Some(mode) => (mode, facts.source.unwrap_or(ModeSource::Default)),
            // A model that refused tools before anything answered starts after the tool call.
            None if facts.tools_refused => (Mode::JsonSchema, ModeSource::Fallback),
            None => (Mode::ToolCall, ModeSource::Default),
        };
        let asking = Self {
            llm: llm.clone(),
            model: model.to_string(),
            step,
            mode,
            source,
            auto: llm.protocol() == Protocol::Auto,
            repaired: false,
            repair: Vec::new(),
            fallbacks: Vec::new(),
            requests: 1,
            validator: std::cell::OnceCell::new(),
        };
        let request = asking.request();
        (asking, request)
    }

    /// The mode of the request last returned.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Digests the answer to the last request.
    pub fn receive(&mut self, answer: Result<ChatResponse, LlmError>) -> Next {
        let response = match answer {
            Ok(response) => response,
            Err(error) => {
                return match self.refused(&error) {
                    true => self.fall_back(),
                    false => Next::Failed(error),
                };
            }
        };
        if self.mode == Mode::ToolCall {
            if !response.message.tool_calls.is_empty() || !self.auto {
                self.remember();
                return Next::Done(self.answered(response));
            }
            // A forced call answered with prose: the server does not force calls.
            return self.fall_back();
        }
        let content = response.message.content.as_deref().map(strip_think).unwrap_or_default();
        // Ollama ends an answer that repeats one token 31 times with no finish reason at all.
        let cut_off = !matches!(response.finish_reason.as_deref(), Some("stop" | "tool_calls"));
        match self.object_in(&content, cut_off) {
            Ok(object) => {
                self.remember();
                Next::Done(self.answered(submission(response, &self.step.name, &object)))
            }
            Err(problem) if !self.repaired => {
                self.repaired = true;
                // A cut-off answer is echoed only in part: a weak model given all of it writes it again.
                let echo_chars =
                    if matches!(problem, Problem::CutOff) { CUT_OFF_ECHO_CHARS } else { REPAIR_ECHO_CHARS };
                let echo: String = content.chars().take(echo_chars).collect();
                let prompt = repair_prompt(&self.step.name, &problem, self.step.max_tokens);
                self.repair = vec![Message::assistant(echo), Message::user(prompt)];
                self.ask()
            }
            Err(Problem::Mismatch { object, .. }) => {
                // Still not the schema: the caller's validation says exactly what is wrong.
                Next::Done(self.answered(submission(response, &self.step.name, &object)))
            }
            Err(Problem::NoObject | Problem::CutOff) => Next::Done(self.answered(response)),
        }
    }

    fn answered(&self, response: ChatResponse) -> Answered {
        Answered { response, mode: self.mode, fallbacks: self.fallbacks.clone(), requests: self.requests }
    }

    fn remember(&self) {
        if self.auto {
            let source = if self.fallbacks.is_empty() { self.source } else { ModeSource::Fallback };
            self.llm.remember_mode(&self.model, self.mode, source);
        }
    }

    /// Whether the server refused the current mode itself (not the request's content).
    fn refused(&self, error: &LlmError) -> bool {
        let LlmError::Http { status: 400 | 404 | 415 | 422 | 501, excerpt } = error else { return false };
        let text = excerpt.to_ascii_lowercase();
        let refuses = ["not support", "unsupported", "requires", "not allowed", "not implemented", "invalid"]
            .iter()
            .any(|phrase| text.contains(phrase));
        let names_mode = match self.mode {
            Mode::ToolCall => text.contains("tool"),
            Mode::JsonSchema => text.contains("response_format") || text.contains("json_schema"),
            Mode::JsonObject => text.contains("response_format") || text.contains("json_object"),
            Mode::Text => false,
        };
        self.auto && refuses && names_mode
    }

    fn fall_back(&mut self) -> Next {
        let Some(next) = self.mode.next().filter(|_| self.auto) else {
            return Next::Failed(LlmError::InvalidResponse(format!(
                "the model server refused structured answers in {} mode",
                self.mode
            )));
        };
        crate::telemetry::count(
            "akritas_model_protocol_fallbacks_total",
            "Structured steps that fell back to another mode, by mode.",
            &[("from", self.mode.as_str()), ("to", next.as_str())],
            1.0,
        );
        tracing::info!(model = %self.model, from = %self.mode, to = %next, "structured step falls back");
        self.fallbacks.push((self.mode, next));
        // Steps that start from now on skip the mode that failed, without waiting for this one.
        self.llm.remember_mode(&self.model, next, ModeSource::Fallback);
        self.mode = next;
        self.repaired = false;
        self.repair.clear();
        self.ask()
    }

    fn ask(&mut self) -> Next {
        self.requests += 1;
        Next::Ask(self.request())
    }

    /// The request of the current mode (with the repair turn, once there is one).
    fn request(&self) -> ChatRequest {
        let step = &self.step;
        let mut request = ChatRequest::new(step.messages.clone());
        request.max_tokens = step.max_tokens;
        request.min_completion_tokens = MIN_ANSWER_TOKENS;
        request.temperature = step.temperature;
        match self.mode {
            Mode::ToolCall => {
                let schema = grammar_bounded(step.grammar.as_ref().unwrap_or(&step.schema));
                request.tools = vec![ToolDefinition::function(&step.name, &step.description, schema)];
                request.tool_choice = Some(ToolChoice::Required);
                request.parallel_tool_calls = Some(false);
            }
            Mode::JsonSchema => {
                // `strict` only where OpenAI's strict subset holds (every object closed, every
                // property required); llama.cpp and Ollama apply the schema as a grammar either way.
                let mut format = json!({"type": "json_schema", "json_schema": {
                    "name": step.name, "strict": strict_subset(&step.schema)}});
                format["json_schema"]["schema"] = grammar_bounded(step.grammar.as_ref().unwrap_or(&step.schema));
                request.response_format = Some(format);
            }
            Mode::JsonObject => request.response_format = Some(json!({"type": "json_object"})),
            Mode::Text => {}
        }
        if self.mode != Mode::ToolCall {
            instruct(&mut request.messages, &instruction(self.mode, step));
        }
        request.messages.extend(self.repair.iter().cloned());
        request
    }

    /// The first JSON object in `content`, checked against the schema. An answer that stopped
    /// for another reason than its end (`cut_off`: the token limit, or a server's loop guard)
    /// before its first object closed has none: an object inside it (a check's arguments, say)
    /// is not the answer.
    fn object_in(&self, content: &str, cut_off: bool) -> Result<Value, Problem> {
        if cut_off && ends_inside_first_object(content) {
            tracing::debug!(step = %self.step.name, max_tokens = self.step.max_tokens, "structured answer cut off at the token limit");
            return Err(Problem::CutOff);
        }
        let object = first_object(content).ok_or(Problem::NoObject)?;
        let validator = self.validator.get_or_init(|| jsonschema::options().offline().build(&self.step.schema).ok());
        let mismatch = validator.as_ref().and_then(|validator| {
            let error = validator.iter_errors(&object).next()?;
            let path = error.instance_path().as_str();
            // Where and which rule, never the value (model text may repeat tool output).
            tracing::debug!(step = %self.step.name, at = path, rule = error.kind().keyword(), "structured answer does not match its schema");
            let message: String = error.to_string().chars().take(300).collect();
            Some(format!("at {}: {message}", if path.is_empty() { "/" } else { path }))
        });
        match mismatch {
            Some(reason) => Err(Problem::Mismatch { object, reason }),
            None => Ok(object),
        }
    }
}

enum Problem {
    NoObject,
    /// The answer stopped (at the token limit, or cut by the server) before its object closed.
    CutOff,
    Mismatch {
        object: Value,
        reason: String,
    },
}

/// Whether `schema` is in OpenAI's strict subset: each object schema lists its
/// properties, requires all of them and allows no others (nested schemas alike).
fn strict_subset(schema: &Value) -> bool {
    let Value::Object(map) = schema else { return true };
    let is_object = map.get("type").and_then(Value::as_str) == Some("object") || map.contains_key("properties");
    if is_object {
        let properties = map.get("properties").and_then(Value::as_object);
        let required: Vec<&str> =
            map.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        let closed = map.get("additionalProperties") == Some(&Value::Bool(false));
        let all_required = properties.is_some_and(|p| p.keys().all(|key| required.contains(&key.as_str())));
        if !closed || !all_required {
            return false;
        }
    }
    let nested = map.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.values());
    let items = map.get("items").into_iter();
    let options =
        ["anyOf", "oneOf", "allOf"].iter().filter_map(|key| map.get(*key).and_then(Value::as_array)).flatten();
    nested.chain(items).chain(options).all(strict_subset)
}

/// The paragraph that asks for the object, appended to the system message.
fn instruction(mode: Mode, step: &Step) -> String {
    let ask = format!(
        "Answer with exactly one JSON object: the arguments of `{}` ({}). Write nothing else: no prose, no code fence.",
        step.name,
        step.description.trim_end_matches('.')
    );
    match mode {
        Mode::ToolCall => ask,
        // The grammar gives the keys, not what they mean.
        Mode::JsonSchema => match outline(&step.schema) {
            fields if fields.is_empty() => ask,
            fields => format!("{ask} Its fields:\n{fields}"),
        },
        Mode::JsonObject | Mode::Text => format!("{ask} It must match this JSON schema: {}", step.schema),
    }
}

/// Appends `paragraph` to the first system message (or adds one first).
fn instruct(messages: &mut Vec<Message>, paragraph: &str) {
    match messages.iter_mut().find(|m| m.role == Role::System) {
        Some(system) => {
            let text = system.content.get_or_insert_with(String::new);
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(paragraph);
        }
        None => messages.insert(0, Message::system(paragraph)),
    }
}

fn repair_prompt(name: &str, problem: &Problem, max_tokens: u32) -> String {
    let what = match problem {
        Problem::NoObject => "it holds no JSON object".to_string(),
        Problem::CutOff => {
            return format!(
                "That answer stopped before its JSON object closed (the limit is {max_tokens} tokens). Answer again with \
                 a shorter JSON object (the arguments of `{name}`): a few plain words per text, only the items that matter."
            );
        }
        Problem::Mismatch { reason, .. } => format!("it does not match the schema: {reason}"),
    };
    format!(
        "That answer cannot be used: {what}. Answer again with only the JSON object (the arguments of `{name}`), \
         nothing before or after it."
    )
}

/// `response` as one call of the submit tool with `object` as its arguments.
fn submission(mut response: ChatResponse, name: &str, object: &Value) -> ChatResponse {
    response.message.content = None;
    response.message.tool_calls = vec![ToolCall::function(STRUCTURED_CALL_ID, name, object.to_string())];
    response
}

/// Whether `text` ends inside the JSON value its first `{` opens.
fn ends_inside_first_object(text: &str) -> bool {
    let Some(at) = text.find('{') else { return false };
    let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
    matches!(values.next(), Some(Err(error)) if error.is_eof())
}

/// At most this many `{` are tried as the start of an object.
const MAX_STARTS: usize = 64;

/// The first JSON object in `text`: code fences and prose around it are ignored.
pub fn first_object(text: &str) -> Option<Value> {
    text.match_indices('{').take(MAX_STARTS).find_map(|(at, _)| {
        let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        match values.next() {
            Some(Ok(value @ Value::Object(_))) => Some(value),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests;
