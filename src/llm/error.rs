//! The llm module's error type.

use std::time::Duration;

/// Everything that can go wrong talking to the model server.
///
/// No variant ever carries the API key: HTTP bodies are redacted before they are stored.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The server answered with a non-success status. `excerpt` is the body as text,
    /// whitespace-collapsed, at most [`EXCERPT_MAX_CHARS`] characters, API key redacted.
    #[error("model server answered HTTP {status}: {excerpt}")]
    Http { status: u16, excerpt: String },
    /// The whole request (for streams: the whole stream) took longer than the configured timeout.
    #[error("model server did not answer within {after:?}")]
    Timeout { after: Duration },
    /// Connection refused, reset, TLS failure, ...; the message says where the address is set.
    #[error("cannot reach model server: {0} (the model server's address is set by --base-url or AKRITAS_BASE_URL)")]
    Transport(String),
    /// The response body (or the total streamed bytes) exceeded `max_response_bytes`.
    #[error("model server response exceeds {limit} bytes")]
    ResponseTooLarge { limit: usize },
    /// The body is not a valid OpenAI-compatible answer.
    #[error("invalid model server response: {0}")]
    InvalidResponse(String),
    /// `GET /models` listed no model and none is configured.
    #[error("model server lists no models")]
    NoModels,
    /// The [`super::LlmConfig`] is unusable.
    #[error("invalid model server configuration: {0}")]
    InvalidConfig(String),
}

impl LlmError {
    /// A short, fixed name of what went wrong (metrics label).
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Http { status, .. } if *status >= 500 => "http_5xx",
            LlmError::Http { status: 429, .. } => "http_429",
            LlmError::Http { .. } => "http_4xx",
            LlmError::Timeout { .. } => "timeout",
            LlmError::Transport(_) => "transport",
            LlmError::ResponseTooLarge { .. } => "too_large",
            LlmError::InvalidResponse(_) => "invalid_response",
            LlmError::NoModels => "no_models",
            LlmError::InvalidConfig(_) => "invalid_config",
        }
    }
}

/// Maximum length, in characters, of [`LlmError::Http::excerpt`].
pub const EXCERPT_MAX_CHARS: usize = 512;

impl LlmError {
    /// True when the failure comes from (or on the way to) the model server; the HTTP layer maps
    /// those to 502. Only [`LlmError::InvalidConfig`] is not upstream.
    pub fn is_upstream(&self) -> bool {
        !matches!(self, LlmError::InvalidConfig(_))
    }
}

/// Phrases (lower-case) by which model servers say a request does not fit the model's context
/// window: llama-server (message and error type), vLLM and OpenAI ("maximum context length is N
/// tokens", vLLM also "maximum model length of N"), OpenAI's error code, and Ollama's runner when
/// a request asks it not to truncate (by default Ollama drops the oldest messages silently).
const OVERFLOW_PHRASES: &[&str] = &[
    "exceeds the available context size",
    "exceed_context_size_error",
    "maximum context length",
    "maximum model length",
    "context_length_exceeded",
    "input length exceeds the context length",
];

/// Where servers name the window in an overflow error, each followed (after at most a few
/// characters) by the number: llama-server's `"n_ctx":N` and "context size (N tokens)", vLLM and
/// OpenAI's "maximum context length is N", vLLM's "maximum model length of N".
const WINDOW_MARKERS: &[&str] =
    &["\"n_ctx\":", "context size (", "maximum context length is ", "maximum model length of "];

impl LlmError {
    /// Whether the server refused the request because it does not fit the model's context window
    /// (HTTP 400, 413 or 422 with one of the servers' phrases): worth one retry, smaller.
    pub fn is_context_overflow(&self) -> bool {
        let LlmError::Http { status: 400 | 413 | 422, excerpt } = self else { return false };
        let lower = excerpt.to_lowercase();
        OVERFLOW_PHRASES.iter().any(|phrase| lower.contains(phrase))
    }

    /// The context window, in tokens, that an overflow error names, when it names one.
    pub fn reported_context_tokens(&self) -> Option<u32> {
        if !self.is_context_overflow() {
            return None;
        }
        let LlmError::Http { excerpt, .. } = self else { return None };
        let lower = excerpt.to_lowercase();
        WINDOW_MARKERS.iter().find_map(|marker| {
            let after = &lower[lower.find(marker)? + marker.len()..];
            let digits: String = after.trim_start().chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok().filter(|tokens| *tokens > 0)
        })
    }
}

/// Body text for error messages: lossy UTF-8, key redacted, whitespace collapsed, ≤ 512 chars.
pub(crate) fn excerpt(body: &[u8], api_key: Option<&str>) -> String {
    let text = redact(&String::from_utf8_lossy(body), api_key);
    crate::text::truncate_chars(&crate::text::one_line(&text), EXCERPT_MAX_CHARS, "…")
}

/// Replaces the API key, every secret the host resolved and credential-looking
/// fragments by `[redacted]` ([`crate::redact`]).
pub(crate) fn redact(text: &str, api_key: Option<&str>) -> String {
    let text = match api_key {
        Some(key) if !key.is_empty() => text.replace(key, "[redacted]"),
        _ => text.to_owned(),
    };
    crate::redact::redact(&text)
}

/// Maps a reqwest failure; the message includes the error's causes, API key redacted.
pub(crate) fn from_reqwest(err: reqwest::Error, timeout: Duration, api_key: Option<&str>) -> LlmError {
    if err.is_timeout() {
        return LlmError::Timeout { after: timeout };
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    LlmError::Transport(redact(&text, api_key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_collapses_truncates_and_redacts() {
        let body = format!("  error:\n\n  bad key sk-secret   {}", "x ".repeat(1000));
        let text = excerpt(body.as_bytes(), Some("sk-secret"));
        assert!(text.starts_with("error: bad key [redacted] x x"));
        assert_eq!(text.chars().count(), EXCERPT_MAX_CHARS);
        assert!(!text.contains("sk-secret"));
    }

    #[test]
    fn excerpts_redact_every_secret_the_host_resolved() {
        crate::redact::register("client-key-llm-5b7c");
        let text = excerpt(b"unknown key client-key-llm-5b7c in X-Api-Key", None);
        assert_eq!(text, "unknown key [redacted] in X-Api-Key");
    }

    #[test]
    fn an_unreachable_model_server_names_where_its_address_is_set() {
        let error = LlmError::Transport("error sending request for url (http://127.0.0.1:8080/v1/models)".into());
        let text = error.to_string();
        assert!(
            text.contains("127.0.0.1:8080") && text.contains("--base-url") && text.contains("AKRITAS_BASE_URL"),
            "{text}"
        );
    }

    #[test]
    fn context_overflows_of_each_server_are_recognised_with_the_window_they_name() {
        let http = |status, body: &str| LlmError::Http { status, excerpt: excerpt(body.as_bytes(), None) };
        let cases = [
            // llama-server, current and older wording.
            (
                r#"{"error":{"code":400,"message":"request (3120 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3120,"n_ctx":2048}}"#,
                Some(2048),
            ),
            (
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"invalid_request_error"}}"#,
                None,
            ),
            // vLLM, two wordings.
            (
                r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (3976 in the messages, 1024 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
                Some(4096),
            ),
            (
                r#"{"object":"error","message":"The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","code":400}"#,
                Some(8192),
            ),
            // OpenAI.
            (
                r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130211 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
                Some(128000),
            ),
            // Ollama asked not to truncate.
            (r#"{"error":"the input length exceeds the context length"}"#, None),
        ];
        for (body, window) in cases {
            let error = http(400, body);
            assert!(error.is_context_overflow(), "{body}");
            assert_eq!(error.reported_context_tokens(), window, "{body}");
        }
        let not_overflows = [
            http(400, r#"{"error":{"message":"max_tokens must be at most 4096","param":"max_tokens"}}"#),
            http(500, "the request exceeds the available context size"),
            http(400, "model does not support tools"),
            LlmError::Timeout { after: Duration::from_secs(1) },
        ];
        for error in not_overflows {
            assert!(!error.is_context_overflow(), "{error}");
            assert_eq!(error.reported_context_tokens(), None);
        }
    }

    #[test]
    fn display_and_upstream() {
        let error = LlmError::Http { status: 429, excerpt: "slow down".into() };
        assert_eq!(error.to_string(), "model server answered HTTP 429: slow down");
        assert!(error.is_upstream());
        assert!(LlmError::NoModels.is_upstream());
        assert!(!LlmError::InvalidConfig("x".into()).is_upstream());
    }
}
