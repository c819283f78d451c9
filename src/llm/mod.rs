//! Client of OpenAI-compatible chat completion servers (`/v1`: llama-server, vLLM, OpenRouter,
//! OpenAI).
//!
//! - [`LlmClient::chat`]: one completion, with tools; [`LlmClient::chat_stream`]: the same as SSE
//!   events ([`ChatStream`], a `futures_util::Stream`), assembled by [`collect`] if wanted.
//! - The model is configured or discovered (first id of `GET /models`, cached).
//! - The completion budget is sent as `max_tokens`; a server rejecting it gets one retry with
//!   `max_completion_tokens` (and vice versa), remembered for the client's later requests.
//! - The model's context window is discovered from the server or configured ([`window`]); a
//!   context overflow the server reports is recognised ([`LlmError::is_context_overflow`]).
//! - The same discovery tells what the server is ([`ServerKind`]), which under
//!   `model_protocol: auto` picks the mode structured steps start with ([`structured`]).
//! - Every failure is an [`LlmError`]; none carries the API key, and nothing logs prompts, outputs,
//!   tool arguments or the key (`tracing::debug!` per request: endpoint, status, duration, model).

mod client;
mod discovery;
mod error;
pub(crate) mod grammar;
mod learned;
mod protocol;
pub(crate) mod reasoning;
mod server;
mod stream;
pub mod structured;
pub(crate) mod window;
mod wire;

pub(crate) use client::record_call as record_model_call;
pub use client::{DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, LlmClient, LlmConfig, Reach};
pub use discovery::PROBE_TIMEOUT;
pub use error::{EXCERPT_MAX_CHARS, LlmError};
pub use learned::{ModelFacts, flatten};
pub use server::{ServerFacts, ServerKind};
pub use stream::{ChatStream, SseParser, StreamAccumulator, StreamEvent, collect};
pub(crate) use window::{ContextWindow, WindowSource};
pub use wire::{
    ChatRequest, ChatResponse, FunctionCall, FunctionDefinition, Message, Role, ToolCall, ToolChoice, ToolDefinition,
    Usage,
};
