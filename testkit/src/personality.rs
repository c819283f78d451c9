//! How each model server answers, as documented by its project: the same [`Answer`] of a
//! brain rendered the way Ollama, llama-server, vLLM, OpenAI or a reasoning model serves it.
//!
//! - **Ollama** (`server/routes.go`, `server/images.go`, `middleware/openai.go`, `openai/openai.go`):
//!   a request carrying `tools` for a model without the tools capability is refused with HTTP 400
//!   `{"error":{"message":"registry.ollama.ai/library/<model>:latest does not support tools",
//!   "type":"invalid_request_error","param":null,"code":null}}` (the `ChatHandler` capability
//!   check, its message turned into the OpenAI envelope by `NewError`, which types a 400 as
//!   `invalid_request_error`). `tool_choice` is not read at all, so a forced call may come back
//!   as prose. `response_format` `json_schema`/`json_object` become its `format`: the content is
//!   the JSON. `POST /api/show` reports `model_info["<arch>.context_length"]` and, when the
//!   Modelfile sets it, `num_ctx` in the `parameters` text (`%-30s %#v` per option).
//! - **llama-server** (`tools/server/README.md`): tools and `response_format` are honoured; a
//!   forced call may come with prose in `content` before it. `GET /props` carries
//!   `default_generation_settings.n_ctx`; `GET /v1/models` entries carry `meta.n_ctx_train`.
//! - **vLLM**: named and `required` `tool_choice` are honoured (guided decoding), as is
//!   `response_format`; `GET /v1/models` entries carry `max_model_len`.
//! - **OpenAI**: everything honoured; a `json_schema` with `strict: true` must be a schema
//!   strict mode supports: every object sets `additionalProperties: false` and lists each of its
//!   properties in `required`, else HTTP 400 `Invalid schema for response_format '<name>': In
//!   context=(...), ...` (`invalid_request_error`, `param: "response_format"`).
//! - **Reasoning**: a reasoning model behind a server without a reasoning parser for it: every
//!   answer's content starts with a `<think>…</think>` block carrying [`THINK_MARKER`] (and, for
//!   a structured answer, a draft of the object with its lists emptied, which fits the schema
//!   but is not the answer), which `reasoning_content` repeats; tools and formats honoured
//!   otherwise.

use serde_json::{Value, json};

use crate::brain::{Answer, Mode, asked};
use crate::wire::{Call, Reply};

/// Text inside every think block of [`Personality::Reasoning`]: it must never reach an
/// answer, a journal or a Run record.
pub const THINK_MARKER: &str = "THINK-MARKER-9c41d2";
/// `<arch>.context_length` the Ollama stand-in reports in `model_info` (the model's training window).
pub const OLLAMA_CONTEXT_LENGTH: u64 = 32768;
/// `num_ctx` the Ollama stand-in reports in `parameters` (the window requests actually get).
pub const OLLAMA_NUM_CTX: u64 = 8192;
/// `default_generation_settings.n_ctx` of the llama-server stand-in (`--ctx-size`).
pub const LLAMA_N_CTX: u64 = 16384;
/// `meta.n_ctx_train` of the llama-server stand-in's model.
pub const LLAMA_N_CTX_TRAIN: u64 = 131072;
/// `max_model_len` of the vLLM stand-in.
pub const VLLM_MAX_MODEL_LEN: u64 = 24576;

/// A model server's documented behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Personality {
    /// Ollama's OpenAI-compatible API; `tools`: whether the model has the tools capability.
    Ollama { tools: bool },
    /// llama.cpp's `llama-server` (with `--jinja`).
    LlamaServer,
    /// vLLM's OpenAI-compatible server (with a tool-call parser).
    Vllm,
    /// OpenAI's API.
    OpenAi,
    /// A reasoning model whose think blocks stay in the content.
    Reasoning,
}

impl Personality {
    /// The server's reply to a chat request, given what the model means to answer
    /// (`brain` is not asked when the server refuses the request before any model runs).
    /// `index` numbers the request, for call ids.
    pub fn reply(self, index: usize, request: &Value, brain: &dyn Fn(&Value) -> Answer) -> Reply {
        let offers_tools = request["tools"].as_array().is_some_and(|tools| !tools.is_empty());
        if self == (Personality::Ollama { tools: false }) && offers_tools {
            let model = ollama_name(request["model"].as_str().unwrap_or_default());
            return Reply::Error {
                status: 400,
                body: json!({"error": {"message": format!("{model} does not support tools"),
                                       "type": "invalid_request_error", "param": null, "code": null}}),
            };
        }
        if self == Personality::OpenAi
            && let Some(message) = strict_schema_refusal(&request["response_format"])
        {
            return Reply::Error {
                status: 400,
                body: json!({"error": {"message": message, "type": "invalid_request_error",
                                       "param": "response_format", "code": null}}),
            };
        }
        let mode = asked(request).map(|(_, mode)| mode);
        let call_id = format!("call_{index}");
        let answer = brain(request);
        let draft_source = match &answer {
            Answer::Structured { arguments, .. } => Some(arguments.clone()),
            _ => None,
        };
        let (content, tool_calls) = match answer {
            Answer::Structured { alias, arguments } => match mode {
                Some(Mode::ToolCall) => self.forced_call(call_id, alias, arguments),
                Some(Mode::JsonSchema | Mode::JsonObject) => (Some(arguments.to_string()), Vec::new()),
                Some(Mode::Text) | None => (Some(prose_with_object(&arguments)), Vec::new()),
            },
            Answer::Text(text) => (Some(text), Vec::new()),
            Answer::ToolCalls(calls) => (None, calls),
        };
        if self == Personality::Reasoning {
            // The model drafts the object while thinking: a draft that fits the schema but is
            // not the answer (its lists emptied).
            let thought = match draft_source.as_ref().map(draft) {
                Some(draft) => format!("{THINK_MARKER}: a first draft would be {draft}, but that misses the point."),
                None => format!("{THINK_MARKER}: the user wants this answered; I should be careful."),
            };
            let content = format!("<think>\n{thought}\n</think>\n\n{}", content.unwrap_or_default());
            return Reply::Message { content: Some(content), reasoning: Some(thought), tool_calls };
        }
        Reply::Message { content, reasoning: None, tool_calls }
    }

    /// A structured answer to a forced tool call, as this server delivers it.
    fn forced_call(self, id: String, alias: String, arguments: Value) -> (Option<String>, Vec<Call>) {
        match self {
            // `tool_choice` is ignored: the model just talks.
            Personality::Ollama { .. } => (
                Some(format!("I will use {alias} once I have looked at everything; here is what I found so far.")),
                Vec::new(),
            ),
            Personality::LlamaServer => {
                (Some(format!("Let me call {alias} with the answer.")), vec![(id, alias, arguments)])
            }
            Personality::Vllm | Personality::OpenAi | Personality::Reasoning => (None, vec![(id, alias, arguments)]),
        }
    }

    /// The `data` entry of `GET /v1/models` for `id`.
    pub fn model_entry(self, id: &str) -> Value {
        match self {
            Personality::Ollama { .. } => {
                json!({"id": ollama_short_name(id), "object": "model", "created": 1_767_225_600, "owned_by": "library"})
            }
            Personality::LlamaServer => json!({
                "id": id, "object": "model", "created": 1_767_225_600, "owned_by": "llamacpp",
                "meta": {"vocab_type": 2, "n_vocab": 151_936, "n_ctx_train": LLAMA_N_CTX_TRAIN, "n_embd": 3584,
                         "n_params": 7_615_616_512_u64, "size": 4_683_073_536_u64},
            }),
            Personality::Vllm => json!({
                "id": id, "object": "model", "created": 1_767_225_600, "owned_by": "vllm", "root": id,
                "parent": null, "max_model_len": VLLM_MAX_MODEL_LEN,
                "permission": [{"id": "modelperm-0", "object": "model_permission", "created": 1_767_225_600,
                                "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
                                "allow_search_indices": false, "allow_view": true, "allow_fine_tuning": false,
                                "organization": "*", "group": null, "is_blocking": false}],
            }),
            Personality::OpenAi | Personality::Reasoning => {
                json!({"id": id, "object": "model", "created": 1_767_225_600, "owned_by": "system"})
            }
        }
    }

    /// Ollama's `POST /api/show` answer for `model` (`None` for other servers: 404).
    pub fn ollama_show(self, model: &str) -> Option<Value> {
        let Personality::Ollama { tools } = self else { return None };
        let capabilities = if tools { json!(["completion", "tools"]) } else { json!(["completion"]) };
        let parameters =
            [format!("{:<30} {}", "num_ctx", OLLAMA_NUM_CTX), format!("{:<30} {:?}", "stop", "<|im_end|>")];
        Some(json!({
            "modelfile": format!("# Modelfile generated by \"ollama show\"\nFROM {}\n", ollama_name(model)),
            "parameters": parameters.join("\n"),
            "template": "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}",
            "details": {"parent_model": "", "format": "gguf", "family": "qwen2", "families": ["qwen2"],
                        "parameter_size": "7.6B", "quantization_level": "Q4_K_M"},
            "model_info": {"general.architecture": "qwen2", "general.parameter_count": 7_615_616_512_u64,
                           "qwen2.context_length": OLLAMA_CONTEXT_LENGTH, "qwen2.embedding_length": 3584},
            "capabilities": capabilities,
            "modified_at": "2026-01-01T00:00:00Z",
        }))
    }

    /// llama-server's `GET /props` answer (`None` for other servers: 404).
    pub fn llama_props(self, model: &str) -> Option<Value> {
        (self == Personality::LlamaServer).then(|| {
            json!({
                "default_generation_settings": {
                    "id": 0, "id_task": -1, "n_ctx": LLAMA_N_CTX, "speculative": false, "is_processing": false,
                    "params": {"n_predict": -1, "seed": 4_294_967_295_u64, "temperature": 0.8, "top_k": 40,
                               "top_p": 0.95, "min_p": 0.05, "max_tokens": -1, "stream": true},
                },
                "total_slots": 1,
                "model_path": format!("/models/{model}.gguf"),
                "chat_template": "{%- for message in messages %}{{ message.content }}{%- endfor %}",
                "build_info": "b6000-0000000",
            })
        })
    }
}

/// `arguments` with every top-level list emptied: still the schema's shape, not the answer.
fn draft(arguments: &Value) -> Value {
    let mut draft = arguments.clone();
    for value in draft.as_object_mut().into_iter().flat_map(|o| o.values_mut()) {
        if value.is_array() {
            *value = json!([]);
        }
    }
    draft
}

/// How Ollama names a model in its errors: `registry.ollama.ai/library/<name>:<tag>`.
fn ollama_name(model: &str) -> String {
    let tagged = if model.rsplit('/').next().is_some_and(|last| last.contains(':')) {
        model.to_owned()
    } else {
        format!("{model}:latest")
    };
    match tagged.matches('/').count() {
        0 => format!("registry.ollama.ai/library/{tagged}"),
        1 => format!("registry.ollama.ai/{tagged}"),
        _ => tagged,
    }
}

/// How Ollama lists a model: `<name>:<tag>`.
fn ollama_short_name(model: &str) -> String {
    if model.contains(':') { model.to_owned() } else { format!("{model}:latest") }
}

/// A small model's prose around the object it was asked for, in a fenced block.
fn prose_with_object(arguments: &Value) -> String {
    let pretty = serde_json::to_string_pretty(arguments).unwrap_or_default();
    format!(
        "Sure. Based on what I was given, this is the object:\n\n```json\n{pretty}\n```\n\nTell me if anything is missing."
    )
}

/// OpenAI's refusal of a strict `json_schema` response format whose schema strict mode does not
/// support (the two rules its structured-outputs guide states for every object).
fn strict_schema_refusal(format: &Value) -> Option<String> {
    let spec = &format["json_schema"];
    if format["type"] != "json_schema" || spec["strict"] != true {
        return None;
    }
    let problem = strict_problem(&spec["schema"], &mut Vec::new())?;
    Some(format!("Invalid schema for response_format '{}': {problem}", spec["name"].as_str().unwrap_or_default()))
}

fn strict_problem(schema: &Value, context: &mut Vec<String>) -> Option<String> {
    let here = |context: &[String]| {
        let items: Vec<String> = context.iter().map(|c| format!("'{c}'")).collect();
        match items.as_slice() {
            [one] => format!("In context=({one},)"),
            _ => format!("In context=({})", items.join(", ")),
        }
    };
    let properties = schema["properties"].as_object();
    if schema["type"] == "object" || properties.is_some() {
        if schema["additionalProperties"] != false {
            return Some(format!(
                "{}, 'additionalProperties' is required to be supplied and to be false.",
                here(context)
            ));
        }
        let required: Vec<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if let Some(missing) =
            properties.into_iter().flatten().map(|(key, _)| key).find(|key| !required.contains(&key.as_str()))
        {
            return Some(format!(
                "{}, 'required' is required to be supplied and to be an array including every key in properties. Missing '{missing}'.",
                here(context)
            ));
        }
    }
    let mut nested: Vec<(Vec<String>, &Value)> = Vec::new();
    for (key, value) in properties.into_iter().flatten() {
        nested.push((vec!["properties".into(), key.clone()], value));
    }
    if schema["items"].is_object() {
        nested.push((vec!["items".into()], &schema["items"]));
    }
    for keyword in ["anyOf", "$defs", "definitions"] {
        match &schema[keyword] {
            Value::Array(list) => {
                nested.extend(list.iter().enumerate().map(|(i, v)| (vec![keyword.into(), i.to_string()], v)))
            }
            Value::Object(map) => nested.extend(map.iter().map(|(k, v)| (vec![keyword.into(), k.clone()], v))),
            _ => {}
        }
    }
    for (path, value) in nested {
        let depth = context.len();
        context.extend(path);
        let problem = strict_problem(value, context);
        context.truncate(depth);
        if problem.is_some() {
            return problem;
        }
    }
    None
}
