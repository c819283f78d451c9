//! One process-wide list of every secret value the host resolved (the upstream key,
//! the client API keys, every value a secret resolver returned: MCP headers and env
//! entries, receiver and alert-source tokens), and the one redaction every stored or
//! logged error goes through: those values, then credential-looking fragments.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{LazyLock, RwLock};

/// What a redacted value becomes.
pub const REDACTED: &str = "[redacted]";
/// Values shorter than this are not registered: redacting them would mangle every
/// message, and a value that short is no secret.
pub const MIN_SECRET_BYTES: usize = 4;
/// Most values kept; the oldest (rotated away) go first.
const MAX_VALUES: usize = 4096;

static KNOWN: LazyLock<RwLock<VecDeque<String>>> = LazyLock::new(RwLock::default);

/// Credential-looking fragments: `Bearer x`, `Basic x`, `token=x`, `password: x`, …
static PATTERNS: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
    regex::Regex::new(
        r#"(?i)((?:authorization\s*[=:]\s*)?(?:bearer|basic)\s+|(?:api[_-]?key|token|password|passwd|secret|authorization)\s*[=:]\s*)[^\s,;&"']+"#,
    )
    .ok()
});

/// Adds a resolved secret value to the list (values shorter than [`MIN_SECRET_BYTES`]
/// are ignored; a value already known is not added twice).
pub fn register(value: &str) {
    let value = value.trim();
    if value.len() < MIN_SECRET_BYTES {
        return;
    }
    if KNOWN.read().unwrap_or_else(|p| p.into_inner()).iter().any(|known| known == value) {
        return;
    }
    let mut known = KNOWN.write().unwrap_or_else(|p| p.into_inner());
    if known.iter().any(|k| k == value) {
        return;
    }
    if known.len() >= MAX_VALUES {
        known.pop_front();
    }
    known.push_back(value.to_owned());
}

/// `text` with every registered value, every value of `extra`, and every
/// credential-looking fragment replaced by [`REDACTED`].
pub fn redact_with(text: &str, extra: &[String]) -> String {
    let cleaned = replace_values(text, extra);
    match PATTERNS.as_ref() {
        Some(patterns) => patterns.replace_all(&cleaned, "${1}[redacted]").into_owned(),
        None => cleaned,
    }
}

/// `text` with every registered value and credential-looking fragment replaced.
pub fn redact(text: &str) -> String {
    redact_with(text, &[])
}

/// `text` with every registered value and every value of `extra` replaced.
fn replace_values(text: &str, extra: &[String]) -> String {
    let known = KNOWN.read().unwrap_or_else(|p| p.into_inner());
    // Longest first, so that a value containing another is replaced whole.
    let mut values: Vec<&str> = known
        .iter()
        .map(String::as_str)
        .chain(extra.iter().map(String::as_str).filter(|v| v.len() >= MIN_SECRET_BYTES))
        .filter(|v| text.contains(v))
        .collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    let mut cleaned = text.to_owned();
    for value in values {
        cleaned = cleaned.replace(value, REDACTED);
    }
    cleaned
}

/// The log writer: stderr, with every registered value replaced in each formatted
/// event (crates we do not control log errors too: rmcp logs a server's answer).
/// Only whole values are replaced, so a JSON log line stays JSON.
#[derive(Clone, Copy, Debug, Default)]
pub struct RedactedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactedStderr {
    type Writer = EventBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        EventBuffer(Vec::new())
    }
}

/// One formatted event, written to stderr (redacted) when dropped.
pub struct EventBuffer(Vec<u8>);

impl io::Write for EventBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let cleaned = replace_values(&String::from_utf8_lossy(&self.0), &[]);
        let _ = io::stderr().write_all(cleaned.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_values_and_credential_fragments_are_replaced() {
        register("rd-test-value-1f2e3d");
        register("rd-test-value-1f2e3d-longer");
        register("abc");
        let text = "server said: rd-test-value-1f2e3d-longer and rd-test-value-1f2e3d; \
                    Authorization: Bearer tok.en token=zzz password: hunter2 abc";
        let clean = redact(text);
        for secret in ["rd-test-value", "tok.en", "zzz", "hunter2"] {
            assert!(!clean.contains(secret), "{clean}");
        }
        assert!(clean.starts_with("server said: [redacted] and [redacted];"), "{clean}");
        assert!(clean.ends_with(" abc"), "values shorter than 4 bytes are not registered: {clean}");
        assert_eq!(redact_with("x extra-secret-9 y", &["extra-secret-9".into()]), "x [redacted] y");
        assert_eq!(replace_values("token=rd-test-value-1f2e3d", &[]), "token=[redacted]", "logs: values only");
    }
}
