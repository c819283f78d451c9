use sha2::{Digest, Sha256};

use super::ToolName;

const PREFIX: &str = "akritas_";
/// Length of `akritas_` + sanitized name before the hash suffix.
const STEM_MAX: usize = 55;

/// OpenAI function name for a tool.
///
/// `akritas_` + the name with every char outside `[A-Za-z0-9_-]` replaced by `_`, truncated to 55 chars,
/// then `_` + the first 4 bytes of SHA-256(name) as lowercase hex. Always matches `^[A-Za-z0-9_-]{1,64}$`.
pub fn openai_alias(name: &ToolName) -> String {
    let mut alias = String::with_capacity(64);
    alias.push_str(PREFIX);
    let sanitized =
        name.as_str().chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' });
    alias.extend(sanitized.take(STEM_MAX - PREFIX.len()));
    let digest = Sha256::digest(name.as_str().as_bytes());
    alias.push('_');
    alias.push_str(&hex::encode(&digest[..4]));
    alias
}
