//! One document: normalised text, its title and its hash.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One imported document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    /// Path relative to the input root, `/`-separated.
    pub id: String,
    /// Front matter `title:`, first heading, or the file stem.
    pub title: String,
    /// The import's source label.
    pub source: String,
    /// Optional link to the original.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Normalised text (no BOM, LF line ends, trimmed, one trailing newline).
    pub text: String,
    /// Hex SHA-256 of `text`.
    pub sha256: String,
}

impl Document {
    /// Builds a document from raw text: normalises it, derives the title (falling back to
    /// `fallback_title`) and hashes it.
    pub fn from_text(id: String, source: String, url: Option<String>, raw: &str, fallback_title: &str) -> Self {
        let text = normalise(raw);
        let title = title_of(&text).unwrap_or_else(|| fallback_title.to_owned());
        let sha256 = sha256_hex(text.as_bytes());
        Self { id, title, source, url, text, sha256 }
    }
}

/// Strips a BOM, converts CRLF/CR to LF, trims and ends with one newline.
pub fn normalise(raw: &str) -> String {
    let raw = raw.strip_prefix('\u{feff}').unwrap_or(raw);
    let text = raw.replace("\r\n", "\n").replace('\r', "\n");
    let trimmed = text.trim();
    if trimmed.is_empty() { String::new() } else { format!("{trimmed}\n") }
}

/// Title from front matter `title:`, else the first `# ` heading or setext `Title\n===`.
pub fn title_of(text: &str) -> Option<String> {
    front_matter_title(text).or_else(|| heading_title(text))
}

/// A non-empty `title:` (quotes stripped) of a front matter block: `---` lines around the
/// start of the text.
fn front_matter_title(text: &str) -> Option<String> {
    let rest = text.strip_prefix("---\n")?;
    let end = rest.find("\n---\n")?;
    rest[..end].lines().find_map(|line| {
        let value = line.strip_prefix("title:")?.trim().trim_matches(|c| c == '"' || c == '\'').trim();
        (!value.is_empty()).then(|| value.to_owned())
    })
}

/// The first ATX `# ` heading or setext `===` heading outside code fences.
fn heading_title(text: &str) -> Option<String> {
    let mut previous: Option<&str> = None;
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim_end();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            previous = None;
            continue;
        }
        if in_fence {
            continue;
        }
        if let Some(h) = trimmed.strip_prefix("# ") {
            let h = h.trim().trim_end_matches('#').trim();
            if !h.is_empty() {
                return Some(h.to_owned());
            }
        }
        if let Some(prev) = previous
            && !trimmed.is_empty()
            && trimmed.chars().all(|c| c == '=')
            && !prev.trim().is_empty()
        {
            return Some(prev.trim().to_owned());
        }
        previous = Some(trimmed);
    }
    None
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_from_front_matter_heading_and_setext() {
        assert_eq!(title_of("---\nowner: x\ntitle: \"Disk full\"\n---\n# Other\n").as_deref(), Some("Disk full"));
        assert_eq!(title_of("intro\n\n# High CPU #\nbody").as_deref(), Some("High CPU"));
        assert_eq!(
            title_of("Postgres connections\n====================\nbody").as_deref(),
            Some("Postgres connections")
        );
        assert_eq!(title_of("```\n# not a title\n```\nplain"), None);
        assert_eq!(title_of("~~~\n# not a title\n~~~\n# After the fence\n").as_deref(), Some("After the fence"));
        assert_eq!(title_of("## Second level only\n"), None);
        assert_eq!(title_of("#NoSpace\n"), None);
    }

    #[test]
    fn front_matter_needs_both_fences_and_a_value() {
        assert_eq!(title_of("---\ntitle: 'Quoted'\n---\nbody\n").as_deref(), Some("Quoted"));
        // A blank title falls through to the first heading.
        assert_eq!(title_of("---\ntitle: \"\"\n---\n# Heading\n").as_deref(), Some("Heading"));
        // No closing fence: not front matter.
        assert_eq!(title_of("---\ntitle: Open\nbody\n"), None);
        // `title:` after the front matter is body text.
        assert_eq!(title_of("---\nowner: x\n---\ntitle: Later\n"), None);
        // A setext underline after a blank line is not a heading.
        assert_eq!(title_of("\n===\n"), None);
    }

    #[test]
    fn normalisation_and_hash() {
        assert_eq!(normalise("\u{feff}  a\r\nb\rc \n\n"), "a\nb\nc\n");
        assert_eq!(normalise(" \r\n\t"), "");
        let doc = Document::from_text("x".into(), "s".into(), None, "a\r\n", "fallback");
        assert_eq!(doc.sha256, sha256_hex(b"a\n"));
        assert_eq!(doc.title, "fallback");
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
