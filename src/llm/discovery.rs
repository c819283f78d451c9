//! Asking the model server about itself, without a completion: the probes of llama-server
//! (`GET <root>/props`), Ollama (`POST <root>/api/show`, then `GET <root>/api/ps`) and vLLM
//! (`GET <base>/models`) run side by side, each bounded by the client's timeout and at most
//! [`PROBE_TIMEOUT`]. `<root>` is the base URL without its `/v1`. Their answers give both the
//! context window ([`super::window`]) and what the server is ([`super::server`]).
//!
//! Once per client and model: a model the client has not asked before is probed again; a
//! server that could not be reached by any probe is asked again next time. Discovery never
//! fails a call.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::error::LlmError;
use super::server::{ServerFacts, identify};
use super::window::{Discovered, is_ollama_show, listed_window, llama_server_window, ollama_window};

/// Longest wait for one discovery probe (the client's timeout may be much longer).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many models are probed and remembered per client (a client asks one or a few).
const MAX_MODELS: usize = 64;

/// What discovery asks of the client (implemented by [`super::LlmClient`]).
pub(super) trait Probe {
    /// The validated base URL, ending in `/v1`.
    fn base_url(&self) -> &str;
    /// The model the client asks.
    async fn model(&self) -> Result<String, LlmError>;
    /// `GET` `url` (or `POST` `body` as JSON): the JSON of a successful answer, `None` for another
    /// status or a body that is not JSON.
    async fn probe(&self, url: &str, body: Option<&Value>, deadline: Instant) -> Result<Option<Value>, LlmError>;
}

/// What the server said about one model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Discovery {
    /// The context window it reports (or Ollama's default, assumed).
    pub window: Option<Discovered>,
    /// What the server is.
    pub server: ServerFacts,
}

/// The discoveries of one client, per model.
#[derive(Debug, Default)]
pub(super) struct Discoveries {
    by_model: Mutex<BTreeMap<String, Arc<OnceCell<Discovery>>>>,
}

impl Discoveries {
    /// The discovery of the client's model: probed the first time (the probes bounded by
    /// `timeout` and [`PROBE_TIMEOUT`]), then remembered. `found` runs once, when the server
    /// answered, before any caller sees the discovery. `None` when the model is unknown or the
    /// server could not be reached.
    pub(super) async fn get(
        &self,
        client: &impl Probe,
        timeout: Duration,
        found: impl FnOnce(&str, &Discovery),
    ) -> Option<(String, Discovery)> {
        let deadline = Instant::now() + timeout.min(PROBE_TIMEOUT);
        let model = tokio::time::timeout_at(deadline, client.model()).await.ok()?.ok()?;
        let cell = self.cell(&model);
        let discovery = cell
            .get_or_try_init(|| async {
                let discovery = discover(client, &model, deadline).await.ok_or(())?;
                found(&model, &discovery);
                Ok::<_, ()>(discovery)
            })
            .await
            .ok()
            .copied()?;
        Some((model, discovery))
    }

    /// The discovery of `model`, when it is done.
    pub(super) fn known(&self, model: &str) -> Option<Discovery> {
        self.lock().get(model).and_then(|cell| cell.get().copied())
    }

    /// The cell of `model` (a new one, not remembered, past [`MAX_MODELS`]).
    fn cell(&self, model: &str) -> Arc<OnceCell<Discovery>> {
        let mut map = self.lock();
        if let Some(cell) = map.get(model) {
            return Arc::clone(cell);
        }
        let cell = Arc::new(OnceCell::new());
        if map.len() < MAX_MODELS {
            map.insert(model.to_string(), Arc::clone(&cell));
        }
        cell
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<OnceCell<Discovery>>>> {
        self.by_model.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Asks llama-server, Ollama and vLLM side by side; `None` when the server could not be reached
/// by any probe (worth asking again).
async fn discover(client: &impl Probe, model: &str, deadline: Instant) -> Option<Discovery> {
    let base = client.base_url();
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let (props_url, models_url) = (format!("{root}/props"), format!("{base}/models"));
    let props = client.probe(&props_url, None, deadline);
    let ollama = async {
        let show = client.probe(&format!("{root}/api/show"), Some(&json!({"model": model})), deadline).await?;
        let ps = match &show {
            Some(show) if is_ollama_show(show) => client.probe(&format!("{root}/api/ps"), None, deadline).await?,
            _ => None,
        };
        Ok::<_, LlmError>((show, ps))
    };
    let models = client.probe(&models_url, None, deadline);
    let (props, ollama, models) = tokio::join!(props, ollama, models);
    let unreachable = |error: Option<&LlmError>| matches!(error, Some(LlmError::Transport(_)));
    if unreachable(props.as_ref().err()) && unreachable(ollama.as_ref().err()) && unreachable(models.as_ref().err()) {
        return None;
    }
    let (props, models) = (props.ok().flatten(), models.ok().flatten());
    let (show, ps) = ollama.unwrap_or_default();
    let window = props
        .as_ref()
        .and_then(llama_server_window)
        .map(Discovered::Reported)
        .or_else(|| show.as_ref().and_then(|show| ollama_window(show, ps.as_ref(), model)))
        .or_else(|| models.as_ref().and_then(|models| listed_window(models, model)).map(Discovered::Reported));
    let server = identify(props.as_ref(), show.as_ref(), models.as_ref(), model);
    tracing::debug!(?window, server = ?server.kind, tools = ?server.tools, "model server discovery");
    Some(Discovery { window, server })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::server::ServerKind;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A server that answers the probes as Ollama serving `model` does (or is down).
    struct Fake {
        model: Mutex<String>,
        down: std::sync::atomic::AtomicBool,
        probes: AtomicUsize,
    }

    impl Fake {
        fn new(model: &str) -> Self {
            Self { model: Mutex::new(model.into()), down: Default::default(), probes: AtomicUsize::new(0) }
        }
    }

    impl Probe for Fake {
        fn base_url(&self) -> &str {
            "http://ollama.invalid:11434/v1"
        }

        async fn model(&self) -> Result<String, LlmError> {
            Ok(self.model.lock().unwrap().clone())
        }

        async fn probe(&self, url: &str, body: Option<&Value>, _: Instant) -> Result<Option<Value>, LlmError> {
            self.probes.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(LlmError::Transport("connection refused".into()));
            }
            Ok(match (url, body) {
                ("http://ollama.invalid:11434/api/show", Some(_)) => Some(json!({
                    "parameters": "num_ctx                        8192",
                    "model_info": {"general.architecture": "llama", "llama.context_length": 8192},
                    "capabilities": ["completion"]})),
                ("http://ollama.invalid:11434/api/ps", None) => Some(json!({"models": []})),
                ("http://ollama.invalid:11434/v1/models", None) => {
                    Some(json!({"data": [{"id": "smollm2:latest", "owned_by": "library"}]}))
                }
                _ => None,
            })
        }
    }

    #[tokio::test]
    async fn one_discovery_per_model_gives_the_window_and_the_server() {
        let (fake, discoveries) = (Fake::new("smollm2:latest"), Discoveries::default());
        let found = AtomicUsize::new(0);
        let count = |_: &str, _: &Discovery| {
            found.fetch_add(1, Ordering::SeqCst);
        };
        let (model, discovery) = discoveries.get(&fake, Duration::from_secs(1), count).await.unwrap();
        assert_eq!(model, "smollm2:latest");
        assert_eq!(discovery.window, Some(Discovered::Reported(8192)));
        assert_eq!(discovery.server, ServerFacts { kind: ServerKind::Ollama, tools: Some(false) });
        assert_eq!(fake.probes.load(Ordering::SeqCst), 4, "props, show, ps, models");
        assert!(discoveries.get(&fake, Duration::from_secs(1), count).await.is_some());
        assert_eq!((fake.probes.load(Ordering::SeqCst), found.load(Ordering::SeqCst)), (4, 1), "asked once");
        assert_eq!(discoveries.known("smollm2:latest"), Some(discovery));

        // Another model is probed on its own.
        *fake.model.lock().unwrap() = "gemma3:latest".into();
        assert!(discoveries.known("gemma3:latest").is_none());
        discoveries.get(&fake, Duration::from_secs(1), count).await.unwrap();
        assert_eq!((fake.probes.load(Ordering::SeqCst), found.load(Ordering::SeqCst)), (8, 2));
    }

    #[tokio::test]
    async fn a_server_that_could_not_be_reached_is_asked_again() {
        let (fake, discoveries) = (Fake::new("m"), Discoveries::default());
        fake.down.store(true, Ordering::SeqCst);
        assert!(discoveries.get(&fake, Duration::from_secs(1), |_, _| panic!("nothing found")).await.is_none());
        assert!(discoveries.known("m").is_none());
        fake.down.store(false, Ordering::SeqCst);
        let (_, discovery) = discoveries.get(&fake, Duration::from_secs(1), |_, _| {}).await.unwrap();
        assert_eq!(discovery.server.kind, ServerKind::Ollama);
    }
}
