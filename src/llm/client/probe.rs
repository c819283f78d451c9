//! What the client asks the model server about itself ([`crate::llm::discovery`]): the probes'
//! requests, and what their answers seed under `model_protocol: auto`.

use serde_json::Value;
use tokio::time::Instant;

use super::LlmClient;
use crate::llm::discovery::{Discovery, Probe};
use crate::llm::error::LlmError;
use crate::llm::protocol::Protocol;
use crate::llm::server::{ServerFacts, ServerKind};

impl LlmClient {
    /// What the server is, for the client's model: probed once per model without a completion
    /// (bounded by the timeout and [`crate::llm::PROBE_TIMEOUT`]), then remembered. Under `auto`
    /// the answer seeds the model's facts ([`LlmClient::model_facts`]) before any caller sees it.
    /// `None` when the model or the server cannot be reached (asked again next time).
    pub async fn server(&self) -> Option<ServerFacts> {
        self.discovery().await.map(|(_, discovery)| discovery.server)
    }

    /// What the server is for `model`, when it was identified already (no request).
    pub fn known_server(&self, model: &str) -> Option<ServerKind> {
        self.inner.discoveries.known(model).map(|discovery| discovery.server.kind)
    }

    /// The discovery of the client's model (probed once per model).
    pub(super) async fn discovery(&self) -> Option<(String, Discovery)> {
        let found = |model: &str, discovery: &Discovery| {
            let server = discovery.server;
            tracing::info!(model, server = ?server.kind, tools = ?server.tools, "model server identified");
            if self.inner.protocol == Protocol::Auto {
                self.inner.learned.update(model, |facts| facts.seed(server));
            }
        };
        self.inner.discoveries.get(self, self.inner.timeout, found).await
    }
}

/// The discovery's requests ([`crate::llm::discovery`]).
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
