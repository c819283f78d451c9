//! What requests fitted to a context window need from the client: the window (discovered
//! once per model, [`crate::llm::window`]), what an overflow taught, and a view of the client
//! that prepends shortened system instructions.

use std::sync::Arc;

use super::LlmClient;
use crate::llm::window::ContextWindow;

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
        let discovered = self.discovery().await.and_then(|(_, discovery)| discovery.window);
        self.inner.window.get(discovered)
    }

    /// Lowers the context window of later requests to `tokens`: what a context overflow taught.
    pub fn learn_context_window(&self, tokens: u32) {
        self.inner.window.learn(tokens);
    }
}
