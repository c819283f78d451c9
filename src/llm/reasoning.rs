//! Reasoning output is not the answer. Reasoning models (DeepSeek-R1, Qwen3, QwQ, …) write
//! `<think>…</think>` blocks into `content`, or send their reasoning in a separate
//! `reasoning_content`/`reasoning` field. The separate fields are never read (the wire types do
//! not deserialize them); the blocks are removed here, from whole messages ([`strip_think`]) and
//! from streamed text ([`ThinkFilter`]), so no step parses them, no person is shown them and no
//! audit record keeps them. Their tokens still count: the server reports them in `usage`.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// `text` without its think blocks. A closing tag with no opening one before it (templates that
/// open the block in the prompt) drops everything before it; an unterminated block is dropped to
/// the end. Surrounding whitespace is trimmed when a block was removed.
pub fn strip_think(text: &str) -> String {
    if !text.contains(OPEN) && !text.contains(CLOSE) {
        return text.to_string();
    }
    let mut rest = text;
    if let Some(close) = rest.find(CLOSE)
        && rest.find(OPEN).is_none_or(|open| open > close)
    {
        rest = &rest[close + CLOSE.len()..];
    }
    let mut filter = ThinkFilter::default();
    let mut out = filter.push(rest);
    out.push_str(&filter.finish());
    out.trim().to_string()
}

/// Removes think blocks from text that arrives in pieces split anywhere, tags included. Text
/// outside a block is passed on as soon as it cannot be the start of a tag.
#[derive(Debug, Default)]
pub struct ThinkFilter {
    inside: bool,
    held: String,
}

impl ThinkFilter {
    /// The part of `piece` (with what was held back) that is known to be answer text.
    pub fn push(&mut self, piece: &str) -> String {
        self.held.push_str(piece);
        let mut out = String::new();
        loop {
            let tag = if self.inside { CLOSE } else { OPEN };
            if let Some(at) = self.held.find(tag) {
                if !self.inside {
                    out.push_str(&self.held[..at]);
                }
                self.held.drain(..at + tag.len());
                self.inside = !self.inside;
                continue;
            }
            // Keep the longest suffix that could begin the tag; pass on (or drop) the rest.
            let keep = (1..tag.len()).rev().find(|&n| self.held.ends_with(&tag[..n])).unwrap_or(0);
            let cut = self.held.len() - keep;
            if !self.inside {
                out.push_str(&self.held[..cut]);
            }
            self.held.drain(..cut);
            return out;
        }
    }

    /// The end of the text: what was held back, unless it is inside an unterminated block.
    pub fn finish(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        if self.inside { String::new() } else { held }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_blocks_are_not_the_answer() {
        assert_eq!(strip_think("<think>secret plan</think>\n\nThe answer."), "The answer.");
        assert_eq!(strip_think("A <think>x</think>B<think>y</think> C"), "A B C");
        assert_eq!(strip_think("reasoning without an opening tag</think>{\"a\": 1}"), "{\"a\": 1}");
        assert_eq!(strip_think("answer <think>never closed"), "answer");
        assert_eq!(strip_think("  plain text stays as it is "), "  plain text stays as it is ");
    }

    #[test]
    fn streamed_think_blocks_are_removed_wherever_the_pieces_split() {
        let text = "<think>MARKER one</think>Hello <think>MARKER two</think>world<";
        for size in 1..=text.len() {
            let mut filter = ThinkFilter::default();
            let mut out = String::new();
            let bytes = text.as_bytes();
            for piece in bytes.chunks(size) {
                out.push_str(&filter.push(std::str::from_utf8(piece).unwrap()));
            }
            out.push_str(&filter.finish());
            assert_eq!(out, "Hello world<", "pieces of {size}");
        }
        let mut filter = ThinkFilter::default();
        assert_eq!(filter.push("a <th"), "a ");
        assert_eq!(filter.push("ink>hidden"), "");
        assert_eq!(filter.finish(), "", "an unterminated block is dropped");
    }
}
