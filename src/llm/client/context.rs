//! What requests fitted to a context window need from the client: the window (discovered
//! once, [`crate::llm::window`]), what an overflow taught, and a view of the client that
//! prepends shortened system instructions.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use super::LlmClient;
use crate::llm::error::LlmError;
use crate::llm::window::{ContextWindow, Probe};

impl LlmClient {
    /// The global system instructions this client prepends, when there are any.
    pub fn system_instructions(&self) -> Option<&str> {
        self.system_instructions.as_deref()
    }

    /// This client prepending `instructions` instead (same connection, model, negotiated fields
    /// and context window): how a request fitted to a small window carries a shortened SYSTEM.md.
    pub fn with_system_instructions(&self, instructions: Option<Arc<str>>) -> Self {
        Self { inner: Arc::clone(&self.inner), system_instructions: instructions }
    }

    /// The model's context window ([`crate::llm::window`]): discovered on the first call (the
    /// probes bounded by the timeout), then cached; `None` when unknown. Never fails.
    pub async fn context_window(&self) -> Option<ContextWindow> {
        self.inner.window.get(self, self.inner.timeout).await
    }

    /// Lowers the context window of later requests to `tokens`: what a context overflow taught.
    pub fn learn_context_window(&self, tokens: u32) {
        self.inner.window.learn(tokens);
    }
}

/// The context-window discovery's requests ([`crate::llm::window`]).
impl Probe for LlmClient {
    fn base_url(&self) -> &str {
        LlmClient::base_url(self)
    }

    async fn model(&self) -> Result<String, LlmError> {
        LlmClient::model(self).await
    }

    async fn probe(&self, url: &str, body: Option<&Value>, deadline: Instant) -> Result<Option<Value>, LlmError> {
        let request = match body {
            Some(body) => self.inner.http.post(url).json(body),
            None => self.inner.http.get(url),
        };
        let mut response = self.execute(request, deadline).await?;
        if !response.status().is_success() {
            return Ok(None);
        }
        let body = self.read_body(&mut response, deadline, self.inner.max_response_bytes, false).await?;
        Ok(serde_json::from_slice(&body).ok())
    }
}
