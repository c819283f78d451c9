//! [`LlmClient`]: the OpenAI-compatible HTTP client.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderValue};
use tokio::time::Instant;

use super::error::{LlmError, excerpt, from_reqwest};
use super::learned::{Learned, ModelFacts, flatten, refuses_tools, rejects_parameter};
use super::protocol::{Mode, ModeSource, Protocol};
use super::reasoning::strip_think;
use super::stream::{ChatStream, StreamLimits, events_of};
use super::wire::{
    ChatRequest, ChatResponse, Message, Role, StreamOptions, ToolChoice, WireModels, WireRequest, WireResponse,
};

mod context;
mod probe;

/// Default [`LlmConfig::max_response_bytes`]: 4 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// Default [`LlmConfig::timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// At most this much of an error body is read (for the excerpt and the token-limit negotiation).
const ERROR_BODY_LIMIT: usize = 64 * 1024;

const MAX_TOKENS: &str = "max_tokens";
const MAX_COMPLETION_TOKENS: &str = "max_completion_tokens";

/// Connection settings of an OpenAI-compatible server. `Debug` never shows the API key.
#[derive(Clone)]
pub struct LlmConfig {
    /// Absolute `http(s)` URL ending in `/v1` (a trailing `/` is stripped).
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>`; never logged, never in errors or `Debug`.
    pub api_key: Option<String>,
    /// `None`: the first id of `GET {base_url}/models`, cached after the first success.
    pub model: Option<String>,
    /// Bounds a whole call: `chat` including body and token-limit retry, `chat_stream` including
    /// the last streamed byte.
    pub timeout: Duration,
    /// Larger bodies (or total streamed bytes) fail with [`LlmError::ResponseTooLarge`].
    pub max_response_bytes: usize,
    /// The model's context window in tokens, when set (`model_context_tokens`; [`super::window`]).
    pub context_tokens: Option<u32>,
    /// Prepended to the first system message of every request (`"<instructions>\n\n<content>"`),
    /// or inserted as a new first system message. The caller's messages are never changed.
    pub system_instructions: Option<Arc<str>>,
    /// How structured answers are asked for (setting `model_protocol`).
    pub protocol: Protocol,
}

impl LlmConfig {
    /// A config with defaults: no key, model discovered, [`DEFAULT_TIMEOUT`],
    /// [`DEFAULT_MAX_RESPONSE_BYTES`], no system instructions.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            model: None,
            timeout: DEFAULT_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            context_tokens: None,
            system_instructions: None,
            protocol: Protocol::Auto,
        }
    }
}

impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("context_tokens", &self.context_tokens)
            .field("system_instructions_chars", &self.system_instructions.as_ref().map(|text| text.chars().count()))
            .field("protocol", &self.protocol)
            .finish()
    }
}

/// Client of one OpenAI-compatible `/v1` endpoint. Cheap to clone (an `Arc` inside); clones share
/// the discovered model, the negotiated token-limit field and the context window.
#[derive(Clone)]
pub struct LlmClient {
    inner: Arc<Inner>,
    /// Per clone: a request fitted to a small context window carries a shortened copy.
    system_instructions: Option<Arc<str>>,
}

struct Inner {
    base_url: String,
    api_key: Option<Arc<str>>,
    configured_model: Option<String>,
    discovered_model: tokio::sync::OnceCell<String>,
    timeout: Duration,
    max_response_bytes: usize,
    window: super::window::WindowCache,
    /// Per model: what the server said about itself (the context window, what it is).
    discoveries: super::discovery::Discoveries,
    http: reqwest::Client,
    /// Sticky result of the token-limit negotiation: send `max_completion_tokens` instead of `max_tokens`.
    use_max_completion_tokens: AtomicBool,
    protocol: Protocol,
    /// Per model: the structured mode that answered, and whether `tools` were refused.
    learned: Learned,
    /// Whether the last request reached the server.
    reach: std::sync::Mutex<Reach>,
}

/// Whether the model server answered the last request that got through or failed to connect
/// (a request that timed out waiting for a slow answer says nothing about it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// `None` until a request was made.
    pub reachable: Option<bool>,
    /// Why the last request could not reach it (the transport error and its causes, the API
    /// key redacted).
    pub error: Option<String>,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = &self.inner;
        f.debug_struct("LlmClient")
            .field("base_url", &inner.base_url)
            .field("api_key", &inner.api_key.as_ref().map(|_| "[redacted]"))
            .field("model", &inner.configured_model.as_deref().or(inner.discovered_model.get().map(String::as_str)))
            .field("timeout", &inner.timeout)
            .field("max_response_bytes", &inner.max_response_bytes)
            .field("token_limit_field", &self.token_limit_field())
            .finish_non_exhaustive()
    }
}

impl LlmClient {
    /// Bytes the global system instructions add to every request.
    pub fn system_instructions_len(&self) -> usize {
        self.system_instructions.as_ref().map_or(0, |text| text.len() + 2)
    }

    /// SHA-256 (hex) of the global system instructions, when there are any: what a
    /// Run records so a replay can tell which SYSTEM.md version it ran with.
    pub fn system_instructions_sha256(&self) -> Option<String> {
        use sha2::Digest;
        self.system_instructions.as_ref().map(|text| hex::encode(sha2::Sha256::digest(text.as_bytes())))
    }

    /// Validates `config`; `http` is built by the caller (redirect policy, proxies, TLS).
    pub fn new(config: LlmConfig, http: reqwest::Client) -> Result<Self, LlmError> {
        let base_url = validate_base_url(&config.base_url)?;
        if config.timeout.is_zero() {
            return Err(LlmError::InvalidConfig("timeout must be greater than zero".into()));
        }
        if config.max_response_bytes == 0 {
            return Err(LlmError::InvalidConfig("max_response_bytes must be greater than zero".into()));
        }
        if let Some(key) = &config.api_key {
            if key.trim().is_empty() {
                return Err(LlmError::InvalidConfig("api_key is empty".into()));
            }
            if HeaderValue::from_str(&format!("Bearer {key}")).is_err() {
                return Err(LlmError::InvalidConfig(
                    "api_key contains characters not allowed in an HTTP header".into(),
                ));
            }
        }
        if config.model.as_deref().is_some_and(|model| model.trim().is_empty()) {
            return Err(LlmError::InvalidConfig("model is empty".into()));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                base_url,
                api_key: config.api_key.map(Arc::from),
                configured_model: config.model,
                discovered_model: tokio::sync::OnceCell::new(),
                timeout: config.timeout,
                max_response_bytes: config.max_response_bytes,
                window: super::window::WindowCache::new(config.context_tokens),
                discoveries: super::discovery::Discoveries::default(),
                http,
                use_max_completion_tokens: AtomicBool::new(false),
                protocol: config.protocol,
                learned: Learned::default(),
                reach: std::sync::Mutex::default(),
            }),
            system_instructions: config.system_instructions,
        })
    }

    /// The `model_protocol` setting.
    pub fn protocol(&self) -> Protocol {
        self.inner.protocol
    }

    /// What holds for `model`'s structured steps now: under `auto`, what this client learned
    /// (seeded by the server identification); a fixed protocol's mode, from the setting.
    pub fn model_facts(&self, model: &str) -> ModelFacts {
        self.inner.learned.get(model).under(self.inner.protocol)
    }

    /// The structured mode remembered for `model` under `auto` (answered, or seeded by the server
    /// identification).
    pub fn learned_mode(&self, model: &str) -> Option<Mode> {
        self.inner.learned.get(model).mode
    }

    pub(crate) fn remember_mode(&self, model: &str, mode: Mode, source: ModeSource) {
        self.inner.learned.update(model, |facts| {
            facts.mode = Some(mode);
            facts.source = Some(source);
        });
    }

    /// Whether the server refused `tools` for `model` (requests for it then carry none).
    pub fn tools_refused(&self, model: &str) -> bool {
        self.inner.learned.get(model).tools_refused
    }

    /// The model the client asks, when known without a request (configured, or discovered).
    pub fn known_model(&self) -> Option<String> {
        self.inner.configured_model.clone().or_else(|| self.inner.discovered_model.get().cloned())
    }

    /// The validated base URL (no trailing `/`).
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    /// The request field currently used for the completion budget (`max_tokens` or
    /// `max_completion_tokens`).
    pub fn token_limit_field(&self) -> &'static str {
        if self.inner.use_max_completion_tokens.load(Ordering::Relaxed) { MAX_COMPLETION_TOKENS } else { MAX_TOKENS }
    }

    /// Ids listed by `GET {base}/models`, in server order.
    pub async fn models(&self) -> Result<Vec<String>, LlmError> {
        let deadline = Instant::now() + self.inner.timeout;
        self.models_until(deadline).await
    }

    /// The configured model, or the first id of [`LlmClient::models`] (discovered once, then cached).
    pub async fn model(&self) -> Result<String, LlmError> {
        let deadline = Instant::now() + self.inner.timeout;
        self.model_until(deadline).await
    }

    /// One non-streamed completion (`"stream": false`).
    pub async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let result = self.chat_once(request).await;
        record_call(&result, started.elapsed());
        result
    }

    async fn chat_once(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let deadline = Instant::now() + self.inner.timeout;
        let model = self.model_until(deadline).await?;
        let mut response = self.post_chat(request, &model, false, deadline).await?;
        let body = self.read_body(&mut response, deadline, self.inner.max_response_bytes, false).await?;
        self.parse_completion(&body)
    }

    /// A streamed completion (`"stream": true`, usage requested). Errors before the first byte
    /// (HTTP status, transport, token-limit negotiation) are returned here; later ones are items of
    /// the stream. A server that ignores `stream` and answers JSON is accepted too.
    pub async fn chat_stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        let deadline = Instant::now() + self.inner.timeout;
        let model = self.model_until(deadline).await?;
        let mut response = self.post_chat(request, &model, true, deadline).await?;
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.trim_start().to_ascii_lowercase().starts_with("application/json"));
        if is_json {
            let body = self.read_body(&mut response, deadline, self.inner.max_response_bytes, false).await?;
            return Ok(ChatStream::from_events(events_of(self.parse_completion(&body)?)));
        }
        Ok(ChatStream::from_response(
            response,
            StreamLimits {
                max_bytes: self.inner.max_response_bytes,
                deadline,
                timeout: self.inner.timeout,
                api_key: self.inner.api_key.clone(),
                already_read: 0,
            },
        ))
    }

    async fn model_until(&self, deadline: Instant) -> Result<String, LlmError> {
        if let Some(model) = &self.inner.configured_model {
            return Ok(model.clone());
        }
        let model = self
            .inner
            .discovered_model
            .get_or_try_init(|| async {
                let models = self.models_until(deadline).await?;
                models.into_iter().find(|id| !id.trim().is_empty()).ok_or(LlmError::NoModels)
            })
            .await?;
        Ok(model.clone())
    }

    async fn models_until(&self, deadline: Instant) -> Result<Vec<String>, LlmError> {
        let started = Instant::now();
        let request = self.inner.http.get(format!("{}/models", self.inner.base_url));
        let mut response = self.execute(request, deadline).await?;
        let status = response.status().as_u16();
        tracing::debug!(endpoint = "models", status, duration_ms = elapsed_ms(started), "model server request");
        if !response.status().is_success() {
            return Err(self.http_error(status, &mut response, deadline).await);
        }
        let body = self.read_body(&mut response, deadline, self.inner.max_response_bytes, false).await?;
        let models: WireModels = serde_json::from_slice(&body)
            .map_err(|err| LlmError::InvalidResponse(format!("models list is not valid: {err}")))?;
        Ok(models.data.into_iter().map(|model| model.id).collect())
    }

    /// Sends a chat completion request and returns the successful response (headers read, body not).
    /// Runs the token-limit negotiation: at most one retry, with the other field, when the server
    /// rejects the one sent.
    async fn post_chat(
        &self,
        request: &ChatRequest,
        model: &str,
        stream: bool,
        deadline: Instant,
    ) -> Result<reqwest::Response, LlmError> {
        let mut use_completion_field = self.inner.use_max_completion_tokens.load(Ordering::Relaxed);
        let mut retried = false;
        let mut retried_without_tools = false;
        loop {
            let without_tools = self.tools_refused(model);
            let messages = self.effective_messages(&request.messages);
            let messages = if without_tools { Cow::Owned(flatten(&messages)) } else { messages };
            let body = encode_request(request, model, &messages, use_completion_field, stream, without_tools)?;
            let started = Instant::now();
            let http_request = self
                .inner
                .http
                .post(format!("{}/chat/completions", self.inner.base_url))
                .header(CONTENT_TYPE, "application/json")
                .body(body);
            let mut response = self.execute(http_request, deadline).await?;
            let status = response.status().as_u16();
            tracing::debug!(
                endpoint = "chat/completions",
                status,
                duration_ms = elapsed_ms(started),
                model,
                stream,
                "model server request"
            );
            if response.status().is_success() {
                return Ok(response);
            }
            let limit = ERROR_BODY_LIMIT.min(self.inner.max_response_bytes);
            let body = self.read_body(&mut response, deadline, limit, true).await?;
            if !without_tools && !request.tools.is_empty() && matches!(status, 400 | 500) && refuses_tools(&body) {
                // Remembered for the model: later requests carry no tools. A forced call is not
                // retried (the structured port falls back); a free one goes again without tools.
                self.inner.learned.update(model, |facts| facts.tools_refused = true);
                tracing::info!(model, "the model server refused tools for this model; sending none from now on");
                let forced = matches!(request.tool_choice, Some(ToolChoice::Required | ToolChoice::Function(_)));
                if !forced && !retried_without_tools {
                    retried_without_tools = true;
                    continue;
                }
            }
            let sent_field = if use_completion_field { MAX_COMPLETION_TOKENS } else { MAX_TOKENS };
            if !retried && matches!(status, 400 | 422) && rejects_parameter(&body, sent_field) {
                retried = true;
                // Sticky for this client (and its clones); harmless if a concurrent call flipped it already.
                let _ = self.inner.use_max_completion_tokens.compare_exchange(
                    use_completion_field,
                    !use_completion_field,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                use_completion_field = !use_completion_field;
                tracing::debug!(rejected = sent_field, "model server rejected the token-limit field; retrying");
                continue;
            }
            return Err(LlmError::Http { status, excerpt: excerpt(&body, self.inner.api_key.as_deref()) });
        }
    }

    /// The caller's messages with the system instructions applied (borrowed when there are none).
    fn effective_messages<'a>(&self, messages: &'a [Message]) -> Cow<'a, [Message]> {
        let Some(instructions) = self.system_instructions.as_deref() else {
            return Cow::Borrowed(messages);
        };
        let mut messages = messages.to_vec();
        match messages.iter_mut().find(|message| message.role == Role::System) {
            Some(system) => {
                system.content = Some(match system.content.as_deref() {
                    Some(existing) if !existing.is_empty() => format!("{instructions}\n\n{existing}"),
                    _ => instructions.to_owned(),
                });
            }
            None => messages.insert(0, Message::system(instructions)),
        }
        Cow::Owned(messages)
    }

    async fn execute(
        &self,
        request: reqwest::RequestBuilder,
        deadline: Instant,
    ) -> Result<reqwest::Response, LlmError> {
        let request = match &self.inner.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        };
        let sent = tokio::time::timeout_at(deadline, request.send()).await.map_err(|_| self.timeout_error())?;
        let reach = match &sent {
            Ok(_) => Reach { reachable: Some(true), error: None },
            // A slow answer says nothing about whether the server can be reached.
            Err(err) if err.is_timeout() && !err.is_connect() => return sent.map_err(|err| self.transport_error(err)),
            Err(err) if err.is_timeout() => Reach { reachable: Some(false), error: Some("connect timed out".into()) },
            Err(_) => Reach { reachable: Some(false), error: None },
        };
        let sent = sent.map_err(|err| self.transport_error(err));
        let error = match &sent {
            Err(LlmError::Transport(text)) => Some(text.clone()),
            _ => reach.error,
        };
        *self.inner.reach.lock().unwrap_or_else(|p| p.into_inner()) = Reach { error, ..reach };
        sent
    }

    /// Whether the last request reached the server, and why not.
    pub fn reach(&self) -> Reach {
        self.inner.reach.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the body incrementally, stopping as soon as it exceeds `limit` (error, or cut when
    /// `truncate`).
    async fn read_body(
        &self,
        response: &mut reqwest::Response,
        deadline: Instant,
        limit: usize,
        truncate: bool,
    ) -> Result<Vec<u8>, LlmError> {
        let too_large = || LlmError::ResponseTooLarge { limit };
        if !truncate && response.content_length().is_some_and(|length| length > limit as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        loop {
            let chunk = tokio::time::timeout_at(deadline, response.chunk())
                .await
                .map_err(|_| self.timeout_error())?
                .map_err(|err| self.transport_error(err))?;
            let Some(chunk) = chunk else { break };
            let room = limit.saturating_sub(body.len());
            if chunk.len() > room {
                if truncate {
                    body.extend_from_slice(&chunk[..room]);
                    break;
                }
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    async fn http_error(&self, status: u16, response: &mut reqwest::Response, deadline: Instant) -> LlmError {
        let limit = ERROR_BODY_LIMIT.min(self.inner.max_response_bytes);
        match self.read_body(response, deadline, limit, true).await {
            Ok(body) => LlmError::Http { status, excerpt: excerpt(&body, self.inner.api_key.as_deref()) },
            Err(err) => err,
        }
    }

    fn parse_completion(&self, body: &[u8]) -> Result<ChatResponse, LlmError> {
        let response: WireResponse = serde_json::from_slice(body)
            .map_err(|err| LlmError::InvalidResponse(format!("body is not a chat completion: {err}")))?;
        let mut choices = response.choices;
        if choices.is_empty()
            && let Some(error) = response.error.filter(|error| !error.is_null())
        {
            let text = excerpt(error.to_string().as_bytes(), self.inner.api_key.as_deref());
            return Err(LlmError::InvalidResponse(format!("server reported an error: {text}")));
        }
        if choices.len() != 1 {
            return Err(LlmError::InvalidResponse(format!("expected exactly one choice, got {}", choices.len())));
        }
        let Some(choice) = choices.pop() else {
            return Err(LlmError::InvalidResponse("expected exactly one choice, got 0".into()));
        };
        let Some(message) = choice.message else {
            return Err(LlmError::InvalidResponse("choice has no message".into()));
        };
        let mut message = message.into_message();
        message.content = message.content.map(|content| strip_think(&content));
        Ok(ChatResponse { message, finish_reason: choice.finish_reason, usage: response.usage })
    }

    fn timeout_error(&self) -> LlmError {
        LlmError::Timeout { after: self.inner.timeout }
    }

    fn transport_error(&self, err: reqwest::Error) -> LlmError {
        from_reqwest(err, self.inner.timeout, self.inner.api_key.as_deref())
    }
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn validate_base_url(raw: &str) -> Result<String, LlmError> {
    let invalid = |reason: &str| LlmError::InvalidConfig(format!("base_url {reason}"));
    let base = raw.trim_end_matches('/');
    let url = url::Url::parse(base).map_err(|_| invalid("is not an absolute URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("must use http or https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("must not contain credentials (use api_key)"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("must not have a query or fragment"));
    }
    if !url.path().trim_end_matches('/').ends_with("/v1") || !base.ends_with("/v1") {
        return Err(invalid("must end in /v1"));
    }
    Ok(base.to_owned())
}

fn encode_request(
    request: &ChatRequest,
    model: &str,
    messages: &[Message],
    use_completion_field: bool,
    stream: bool,
    without_tools: bool,
) -> Result<Vec<u8>, LlmError> {
    let has_tools = !request.tools.is_empty() && !without_tools;
    let wire = WireRequest {
        model,
        messages,
        tools: has_tools.then_some(request.tools.as_slice()),
        tool_choice: request.tool_choice.as_ref().filter(|_| has_tools),
        parallel_tool_calls: request.parallel_tool_calls.filter(|_| has_tools),
        max_tokens: (!use_completion_field).then_some(request.max_tokens),
        max_completion_tokens: use_completion_field.then_some(request.max_tokens),
        temperature: request.temperature,
        response_format: request.response_format.as_ref(),
        stream,
        stream_options: stream.then_some(StreamOptions { include_usage: true }),
    };
    serde_json::to_vec(&wire).map_err(|err| LlmError::InvalidConfig(format!("cannot encode the request: {err}")))
}

/// One model call for `/metrics`: count and latency by outcome, tokens by kind.
/// Counts one model call (outcome, latency, reported tokens) in the metrics.
pub(crate) fn record_call(result: &Result<ChatResponse, LlmError>, took: std::time::Duration) {
    let outcome = match result {
        Ok(_) => "ok",
        Err(error) => error.kind(),
    };
    crate::telemetry::count("akritas_model_calls_total", "Model calls by outcome.", &[("outcome", outcome)], 1.0);
    crate::telemetry::observe(
        "akritas_model_call_seconds",
        "Latency of one model call, by outcome.",
        &[("outcome", outcome)],
        took,
    );
    if let Ok(ChatResponse { usage: Some(usage), .. }) = result {
        for (kind, tokens) in [("prompt", usage.prompt_tokens), ("completion", usage.completion_tokens)] {
            crate::telemetry::count(
                "akritas_model_tokens_total",
                "Tokens the model server reported, by kind.",
                &[("kind", kind)],
                tokens as f64,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn base_url_validation() {
        assert_eq!(validate_base_url("http://127.0.0.1:8080/v1/").unwrap(), "http://127.0.0.1:8080/v1");
        assert_eq!(validate_base_url("https://openrouter.ai/api/v1").unwrap(), "https://openrouter.ai/api/v1");
        for bad in [
            "",
            "/v1",
            "localhost:8080/v1",
            "ftp://host/v1",
            "http://host",
            "http://host/v2",
            "http://user:pw@host/v1",
            "http://host/v1?x=1",
            "http://host/v1#f",
        ] {
            assert!(matches!(validate_base_url(bad), Err(LlmError::InvalidConfig(_))), "{bad}");
        }
    }

    #[test]
    fn config_validation() {
        crate::install_crypto_provider();
        let http = reqwest::Client::builder().build().unwrap();
        let ok = LlmConfig::new("http://localhost:1/v1");
        assert!(LlmClient::new(ok.clone(), http.clone()).is_ok());
        let cases = [
            LlmConfig { timeout: Duration::ZERO, ..ok.clone() },
            LlmConfig { max_response_bytes: 0, ..ok.clone() },
            LlmConfig { api_key: Some(" ".into()), ..ok.clone() },
            LlmConfig { api_key: Some("sk-a\nb".into()), ..ok.clone() },
            LlmConfig { model: Some(String::new()), ..ok.clone() },
        ];
        for config in cases {
            match LlmClient::new(config, http.clone()) {
                Err(err @ LlmError::InvalidConfig(_)) => {
                    assert!(!err.is_upstream());
                    assert!(!err.to_string().contains("sk-a"));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn request_encoding_omits_tool_fields_without_tools() {
        let mut request = ChatRequest::new(vec![Message::user("q")]);
        request.tool_choice = Some(super::super::wire::ToolChoice::Required);
        request.parallel_tool_calls = Some(false);
        let body: Value =
            serde_json::from_slice(&encode_request(&request, "m", &request.messages, false, false, false).unwrap())
                .unwrap();
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 1024, "stream": false})
        );
        let body: Value =
            serde_json::from_slice(&encode_request(&request, "m", &request.messages, true, true, false).unwrap())
                .unwrap();
        assert_eq!(body["max_completion_tokens"], 1024);
        assert!(body.get("max_tokens").is_none());
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
    }
}
