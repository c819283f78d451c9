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
    fn display_and_upstream() {
        let error = LlmError::Http { status: 429, excerpt: "slow down".into() };
        assert_eq!(error.to_string(), "model server answered HTTP 429: slow down");
        assert!(error.is_upstream());
        assert!(LlmError::NoModels.is_upstream());
        assert!(!LlmError::InvalidConfig("x".into()).is_upstream());
    }
}
