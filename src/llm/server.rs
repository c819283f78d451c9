//! What kind of model server answers, told from the answers the context-window discovery gets
//! anyway ([`super::discovery`]): no completion is spent. Under `model_protocol: auto` it says
//! which mode a model's structured steps start with ([`ServerFacts::start_mode`]):
//! - **Ollama** (`POST /api/show` answered as Ollama does): its `capabilities` without `"tools"`
//!   (v0.17.4 says `["completion"]` for SmolLM2, `["completion","tools"]` for a template with
//!   tools) mean every request carrying `tools` is refused with a 400, so none are sent for the
//!   model. Its structured steps start with `json_schema` either way: Ollama parses a tools
//!   model's calls but ignores `tool_choice`, so a forced call may come back as prose, a whole
//!   completion spent before falling back, while its grammar for a schema always holds.
//! - **llama-server** (`GET /props` answered): `json_schema`, since its grammar for a required
//!   tool call lets prose come before the call.
//! - **vLLM** (`GET /v1/models` entries `owned_by: "vllm"` or with `max_model_len`): `tool_call`,
//!   which it forces by guided decoding.
//! - anything else: nothing; `auto` starts with `tool_call` and falls back as the server shows.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::protocol::Mode;
use super::window::is_ollama_show;

/// The kind of model server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ServerKind {
    Ollama,
    LlamaServer,
    Vllm,
    /// None of the above (OpenAI, OpenRouter, a proxy that forwards only `/v1`, ...).
    Other,
}

/// What the server identification found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerFacts {
    pub kind: ServerKind,
    /// Whether the server takes `tools` for the model, when it says (Ollama's `capabilities`).
    pub tools: Option<bool>,
}

impl ServerFacts {
    /// The mode a model's structured steps start with under `auto`, when the kind says one.
    pub fn start_mode(self) -> Option<Mode> {
        match self.kind {
            // Ollama ignores `tool_choice`, so a forced call is never forced there: a model
            // that offers tools may answer in prose, a whole completion spent before the
            // fallback (measured on 2 cores with Qwen2.5-Coder-1.5B: 2.5 to 5 minutes for the
            // first plan of each of two concurrent Runs, which then ran out of wall time). Its
            // grammar for a JSON schema always holds.
            ServerKind::Ollama | ServerKind::LlamaServer => Some(Mode::JsonSchema),
            ServerKind::Vllm => Some(Mode::ToolCall),
            ServerKind::Other => None,
        }
    }

    /// The server says it refuses `tools` for the model.
    pub fn refuses_tools(self) -> bool {
        self.tools == Some(false)
    }
}

/// The server, from the successful JSON answers of `GET /props`, `POST /api/show` and
/// `GET /v1/models` (`None`: another status, not JSON, or not reached).
pub(super) fn identify(
    props: Option<&Value>,
    show: Option<&Value>,
    models: Option<&Value>,
    model: &str,
) -> ServerFacts {
    let facts = |kind, tools| ServerFacts { kind, tools };
    if let Some(show) = show.filter(|show| is_ollama_show(show)) {
        let tools = show["capabilities"].as_array().map(|capabilities| capabilities.iter().any(|c| c == "tools"));
        return facts(ServerKind::Ollama, tools);
    }
    if props.is_some_and(|props| props["default_generation_settings"].is_object()) {
        return facts(ServerKind::LlamaServer, None);
    }
    if models.is_some_and(|models| lists_vllm(models, model)) {
        return facts(ServerKind::Vllm, None);
    }
    facts(ServerKind::Other, None)
}

/// Whether `model`'s entry (any entry, when it is not listed) is vLLM's.
fn lists_vllm(models: &Value, model: &str) -> bool {
    let entries = models["data"].as_array().map(Vec::as_slice).unwrap_or_default();
    let vllm = |entry: &Value| entry["owned_by"] == "vllm" || entry["max_model_len"].is_u64();
    match entries.iter().find(|entry| entry["id"].as_str() == Some(model)) {
        Some(entry) => vllm(entry),
        None => entries.iter().any(vllm),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Answers captured from the real servers (`tests/fixtures/model_servers/`): Ollama v0.17.4
    /// with SmolLM2-135M as imported (no tools in its template) and with a template that has
    /// tools; llama-server (llama.cpp b1-0c1e570, `--jinja`) serving SmolLM2.
    fn fixture(name: &str) -> Value {
        let text = match name {
            "ollama-show" => include_str!("../../tests/fixtures/model_servers/ollama-0.17.4-show-smollm2.json"),
            "ollama-show-tools" => {
                include_str!("../../tests/fixtures/model_servers/ollama-0.17.4-show-smollm2-tools.json")
            }
            "llama-props" => include_str!("../../tests/fixtures/model_servers/llama-server-props.json"),
            "llama-models" => include_str!("../../tests/fixtures/model_servers/llama-server-models.json"),
            other => panic!("no fixture {other}"),
        };
        serde_json::from_str(text).unwrap()
    }

    /// Ollama's `GET /v1/models` (v0.17.4).
    fn ollama_models() -> Value {
        json!({"object": "list", "data": [
            {"id": "akritas-smollm2:latest", "object": "model", "created": 1_796_350_981_u64, "owned_by": "library"}]})
    }

    /// vLLM's `GET /v1/models` (as the testkit's vLLM personality answers it).
    fn vllm_models(model: &str) -> Value {
        json!({"object": "list", "data": [{"id": model, "object": "model", "created": 1_767_225_600, "owned_by": "vllm",
            "root": model, "parent": null, "max_model_len": 24576, "permission": [{"id": "modelperm-0"}]}]})
    }

    #[test]
    fn ollama_without_the_tools_capability_refuses_tools_and_starts_with_a_json_schema() {
        let show = fixture("ollama-show");
        let facts = identify(None, Some(&show), Some(&ollama_models()), "akritas-smollm2");
        assert_eq!(facts, ServerFacts { kind: ServerKind::Ollama, tools: Some(false) });
        assert!(facts.refuses_tools());
        assert_eq!(facts.start_mode(), Some(Mode::JsonSchema));
    }

    #[test]
    fn ollama_with_the_tools_capability_takes_tools_and_starts_with_a_json_schema() {
        let show = fixture("ollama-show-tools");
        let facts = identify(None, Some(&show), Some(&ollama_models()), "smollm2-tools");
        assert_eq!(facts, ServerFacts { kind: ServerKind::Ollama, tools: Some(true) });
        assert!(!facts.refuses_tools());
        assert_eq!(facts.start_mode(), Some(Mode::JsonSchema), "Ollama does not force a call: its grammar holds");
        // An Ollama that predates `capabilities` says nothing about tools.
        let mut old = show;
        old.as_object_mut().unwrap().remove("capabilities");
        assert_eq!(identify(None, Some(&old), None, "m"), ServerFacts { kind: ServerKind::Ollama, tools: None });
    }

    #[test]
    fn llama_server_answers_props_and_starts_with_a_json_schema() {
        let (props, models) = (fixture("llama-props"), fixture("llama-models"));
        let model = models["data"][0]["id"].as_str().unwrap().to_owned();
        // Its `/v1/models` also lists Ollama-style `models` with `capabilities`: only `/api/show` counts.
        assert_eq!(models["models"][0]["capabilities"], json!(["completion"]));
        let facts = identify(Some(&props), None, Some(&models), &model);
        assert_eq!(facts, ServerFacts { kind: ServerKind::LlamaServer, tools: None });
        assert_eq!(facts.start_mode(), Some(Mode::JsonSchema));
    }

    #[test]
    fn vllm_is_told_by_its_model_list_and_starts_with_a_tool_call() {
        let model = "Qwen/Qwen2.5-0.5B-Instruct";
        let facts = identify(None, None, Some(&vllm_models(model)), model);
        assert_eq!(facts, ServerFacts { kind: ServerKind::Vllm, tools: None });
        assert_eq!(facts.start_mode(), Some(Mode::ToolCall));
        let by_length = json!({"data": [{"id": "m", "object": "model", "owned_by": "someone", "max_model_len": 4096}]});
        assert_eq!(identify(None, None, Some(&by_length), "m").kind, ServerKind::Vllm);
        assert_eq!(identify(None, None, Some(&vllm_models("served")), "alias").kind, ServerKind::Vllm);
    }

    #[test]
    fn other_servers_seed_nothing() {
        let openai =
            json!({"object": "list", "data": [{"id": "gpt-4.1-mini", "object": "model", "owned_by": "system"}]});
        let openrouter = json!({"data": [{"id": "m", "context_length": 131072}]});
        for models in [Some(&openai), Some(&openrouter), Some(&ollama_models()), None] {
            let facts = identify(None, None, models, "m");
            assert_eq!(facts, ServerFacts { kind: ServerKind::Other, tools: None });
            assert_eq!(facts.start_mode(), None);
        }
        // Ollama's "not found" body and a `/props` without generation settings tell nothing.
        let missing = json!({"error": "model 'missing' not found"});
        assert_eq!(identify(Some(&json!({"ok": true})), Some(&missing), None, "m").kind, ServerKind::Other);
        // The model's own entry decides when it is listed.
        let mixed = json!({"data": [{"id": "m", "owned_by": "library"}, {"id": "other", "owned_by": "vllm"}]});
        assert_eq!(identify(None, None, Some(&mixed), "m").kind, ServerKind::Other);
    }
}
