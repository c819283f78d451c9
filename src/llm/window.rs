//! The model's context window: what the server says it is, what the operator set, or what an
//! overflow taught ([`super::LlmClient::context_window`]).
//!
//! The server is asked once per client and model, by the probes of [`super::discovery`] (which
//! also tell what the server is); discovery never fails a call. What each server says:
//! - llama-server: `GET <root>/props`, `default_generation_settings.n_ctx` (the window of one
//!   slot, which is what one request gets).
//! - Ollama: `POST <root>/api/show {"model"}` says it is Ollama; the window is the model's
//!   `context_length` in `GET <root>/api/ps` when it is loaded, else `num_ctx` in its
//!   `parameters`, else Ollama's default, [`OLLAMA_DEFAULT_NUM_CTX`] — an assumption, since the
//!   server may set `OLLAMA_CONTEXT_LENGTH` or pick 32k/256k by VRAM, which no API shows — each
//!   at most `model_info.<architecture>.context_length` (Ollama caps it so too).
//! - vLLM: `GET <base>/models`, the model's `max_model_len` (OpenRouter: `context_length`).
//!
//! The setting `model_context_tokens` ([`super::LlmConfig::context_tokens`]) is the window when
//! nothing is discovered or only Ollama's default is assumed, and an upper bound on a window the
//! server reports: an operator may fit requests to less than the server allows, never to more.
//! A window learned from an overflow ([`super::LlmClient::learn_context_window`]) lowers it for
//! the client's later requests.

use std::sync::atomic::{AtomicU32, Ordering};

use serde::Serialize;
use serde_json::Value;

/// Ollama's context window when neither the model nor the server says otherwise: the smallest of
/// the VRAM-based defaults of Ollama v0.17 (4096 below 24 GiB of VRAM, then 32768 and 262144).
pub const OLLAMA_DEFAULT_NUM_CTX: u32 = 4096;

/// The context window requests of a client are fitted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ContextWindow {
    /// Tokens (prompt and completion together).
    pub tokens: u32,
    /// Where the number comes from.
    pub source: WindowSource,
}

/// Where a [`ContextWindow`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// The model server reported it (llama-server, vLLM, Ollama's loaded model or `num_ctx`).
    Server,
    /// The setting `model_context_tokens`.
    Setting,
    /// Ollama's default window, assumed.
    OllamaDefault,
    /// Learned from a context overflow the server reported.
    Overflow,
}

/// What discovery found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Discovered {
    /// The server's own number.
    Reported(u32),
    /// Ollama's default, assumed.
    Assumed(u32),
}

/// The per-client window state: the setting, and a window learned from overflows.
#[derive(Debug)]
pub(super) struct WindowCache {
    configured: Option<u32>,
    /// 0: nothing learned.
    learned: AtomicU32,
}

impl WindowCache {
    pub(super) fn new(configured: Option<u32>) -> Self {
        let configured = configured.filter(|tokens| *tokens > 0);
        Self { configured, learned: AtomicU32::new(0) }
    }

    /// The window: what discovery found, combined with the setting and what overflows taught.
    pub(super) fn get(&self, discovered: Option<Discovered>) -> Option<ContextWindow> {
        let learned = Some(self.learned.load(Ordering::Relaxed)).filter(|tokens| *tokens > 0);
        combine(self.configured, discovered, learned)
    }

    /// Lowers the window of later requests to `tokens` (never raises it).
    pub(super) fn learn(&self, tokens: u32) {
        let _ = self.learned.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |learned| {
            (learned == 0 || tokens < learned).then_some(tokens.max(1))
        });
    }
}

/// The setting caps a reported window and replaces an assumed one; a learned window lowers either.
fn combine(configured: Option<u32>, discovered: Option<Discovered>, learned: Option<u32>) -> Option<ContextWindow> {
    let window = |tokens, source| ContextWindow { tokens, source };
    let base = match (configured, discovered) {
        (Some(set), Some(Discovered::Reported(server))) if server < set => Some(window(server, WindowSource::Server)),
        (Some(set), _) => Some(window(set, WindowSource::Setting)),
        (None, Some(Discovered::Reported(server))) => Some(window(server, WindowSource::Server)),
        (None, Some(Discovered::Assumed(tokens))) => Some(window(tokens, WindowSource::OllamaDefault)),
        (None, None) => None,
    };
    match (base, learned) {
        (Some(base), Some(learned)) if learned >= base.tokens => Some(base),
        (_, Some(learned)) => Some(window(learned, WindowSource::Overflow)),
        (base, None) => base,
    }
}

/// llama-server's `/props`: the window of one slot.
pub(super) fn llama_server_window(props: &Value) -> Option<u32> {
    positive(&props["default_generation_settings"]["n_ctx"])
}

/// `GET /v1/models`: vLLM's `max_model_len` (OpenRouter's `context_length`) of `model`.
pub(super) fn listed_window(models: &Value, model: &str) -> Option<u32> {
    let entry = models["data"].as_array()?.iter().find(|entry| entry["id"].as_str() == Some(model))?;
    positive(&entry["max_model_len"]).or_else(|| positive(&entry["context_length"]))
}

/// Whether an `/api/show` answer is Ollama's.
pub(super) fn is_ollama_show(show: &Value) -> bool {
    show.get("model_info").is_some_and(Value::is_object) || show.get("parameters").is_some_and(Value::is_string)
}

/// Ollama: the loaded model's window, else `num_ctx` of its parameters, else the default; each
/// at most what the model was trained for.
pub(super) fn ollama_window(show: &Value, ps: Option<&Value>, model: &str) -> Option<Discovered> {
    if !is_ollama_show(show) {
        return None;
    }
    let trained = trained_context(&show["model_info"]).unwrap_or(u32::MAX);
    let same = |name: Option<&str>| name.is_some_and(|name| name == model || name == format!("{model}:latest"));
    let loaded = ps
        .and_then(|ps| ps["models"].as_array())
        .into_iter()
        .flatten()
        .find(|entry| same(entry["name"].as_str()) || same(entry["model"].as_str()))
        .and_then(|entry| positive(&entry["context_length"]));
    if let Some(tokens) = loaded {
        return Some(Discovered::Reported(tokens));
    }
    let num_ctx = show["parameters"].as_str().into_iter().flat_map(str::lines).find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("num_ctx")).then(|| words.next()?.parse::<u32>().ok()).flatten()
    });
    Some(match num_ctx.filter(|tokens| *tokens > 0) {
        Some(tokens) => Discovered::Reported(tokens.min(trained)),
        None => Discovered::Assumed(OLLAMA_DEFAULT_NUM_CTX.min(trained)),
    })
}

/// `<architecture>.context_length` of Ollama's `model_info`.
fn trained_context(info: &Value) -> Option<u32> {
    let architecture = info["general.architecture"].as_str()?;
    positive(&info[format!("{architecture}.context_length")])
}

fn positive(value: &Value) -> Option<u32> {
    value.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn llama_server_props_name_the_window_of_a_slot() {
        let props = json!({"default_generation_settings": {"n_ctx": 2048, "params": {}}, "total_slots": 2});
        assert_eq!(llama_server_window(&props), Some(2048));
        assert_eq!(llama_server_window(&json!({"total_slots": 1})), None);
        assert_eq!(llama_server_window(&json!({"default_generation_settings": {"n_ctx": 0}})), None);
    }

    #[test]
    fn a_listed_model_names_its_window() {
        let vllm = json!({"object": "list", "data": [
            {"id": "other", "max_model_len": 32768},
            {"id": "Qwen/Qwen2.5-0.5B-Instruct", "object": "model", "max_model_len": 4096},
        ]});
        assert_eq!(listed_window(&vllm, "Qwen/Qwen2.5-0.5B-Instruct"), Some(4096));
        assert_eq!(listed_window(&vllm, "missing"), None);
        let openrouter = json!({"data": [{"id": "m", "context_length": 131072}]});
        assert_eq!(listed_window(&openrouter, "m"), Some(131072));
        // llama-server lists n_ctx_train under meta: the trained window, not the server's.
        let llama = json!({"data": [{"id": "m", "meta": {"n_ctx_train": 8192}}]});
        assert_eq!(listed_window(&llama, "m"), None);
    }

    #[test]
    fn ollama_prefers_the_loaded_window_then_num_ctx_then_its_default_each_capped_by_training() {
        let show = |parameters: &str, trained: u64| {
            json!({"parameters": parameters, "details": {"family": "llama"},
                   "model_info": {"general.architecture": "llama", "llama.context_length": trained}})
        };
        let ps = json!({"models": [{"name": "smollm2:135m", "model": "smollm2:135m", "context_length": 6144}]});
        let plain = show("stop \"<|im_end|>\"", 8192);
        assert_eq!(ollama_window(&plain, Some(&ps), "smollm2:135m"), Some(Discovered::Reported(6144)));
        assert_eq!(ollama_window(&plain, Some(&ps), "other"), Some(Discovered::Assumed(4096)));
        assert_eq!(ollama_window(&plain, None, "smollm2:135m"), Some(Discovered::Assumed(4096)));
        let tuned = show("num_ctx                        16384\nstop \"<|im_end|>\"", 8192);
        assert_eq!(ollama_window(&tuned, None, "smollm2:135m"), Some(Discovered::Reported(8192)));
        let small = show("", 2048);
        assert_eq!(ollama_window(&small, None, "m"), Some(Discovered::Assumed(2048)));
        let latest = json!({"models": [{"name": "gemma3:latest", "context_length": 2048}]});
        assert_eq!(ollama_window(&plain, Some(&latest), "gemma3"), Some(Discovered::Reported(2048)));
        assert_eq!(ollama_window(&json!({"error": "not found"}), None, "m"), None);
    }

    #[test]
    fn the_setting_caps_a_reported_window_and_replaces_an_assumed_one() {
        let window = |tokens, source| Some(ContextWindow { tokens, source });
        let reported = Some(Discovered::Reported(4096));
        assert_eq!(combine(None, None, None), None);
        assert_eq!(combine(Some(8192), reported, None), window(4096, WindowSource::Server));
        assert_eq!(combine(Some(2048), reported, None), window(2048, WindowSource::Setting));
        assert_eq!(combine(None, reported, None), window(4096, WindowSource::Server));
        assert_eq!(combine(Some(32768), Some(Discovered::Assumed(4096)), None), window(32768, WindowSource::Setting));
        assert_eq!(combine(None, Some(Discovered::Assumed(4096)), None), window(4096, WindowSource::OllamaDefault));
        assert_eq!(combine(Some(2048), None, None), window(2048, WindowSource::Setting));
        // What an overflow taught lowers any of them, and stands alone.
        assert_eq!(combine(Some(8192), reported, Some(3000)), window(3000, WindowSource::Overflow));
        assert_eq!(combine(Some(2048), None, Some(3000)), window(2048, WindowSource::Setting));
        assert_eq!(combine(None, None, Some(1500)), window(1500, WindowSource::Overflow));
    }

    #[test]
    fn a_learned_window_only_ever_goes_down() {
        let cache = WindowCache::new(None);
        cache.learn(3000);
        cache.learn(5000);
        assert_eq!(cache.learned.load(Ordering::Relaxed), 3000);
        cache.learn(1000);
        assert_eq!(cache.learned.load(Ordering::Relaxed), 1000);
    }
}
