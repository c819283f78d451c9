//! Splitting document text into overlapping chunks, measured in characters.

/// One chunk of a document's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Position of the chunk in the document, from 0.
    pub index: u32,
    /// Offset of the first character, in characters (Unicode scalar values).
    pub start_char: usize,
    /// The chunk's text, an exact slice of the document.
    pub text: String,
}

/// Splits `text` into chunks of at most `chunk_chars` characters; consecutive chunks share exactly
/// `overlap_chars` characters. A cut prefers a paragraph break, then a line break, then whitespace
/// within the last 20% of the window, else it falls at the window's end.
///
/// Callers validate `overlap_chars < chunk_chars`; degenerate values are clamped here rather than
/// panicking (`chunk_chars` at least 1, `overlap_chars` below it). Empty text yields no chunks.
pub fn chunks(text: &str, chunk_chars: usize, overlap_chars: usize) -> Vec<Chunk> {
    let chunk = chunk_chars.max(1);
    let overlap = overlap_chars.min(chunk - 1);
    // Byte offset of every char plus the end, so that char positions slice the str safely.
    let bounds: Vec<usize> = text.char_indices().map(|(b, _)| b).chain(std::iter::once(text.len())).collect();
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut out = Vec::new();
    let mut start = 0usize;
    while start < n {
        let end = (start + chunk).min(n);
        let cut = if end == n { n } else { best_cut(&chars, start + overlap + 1, end, chunk) };
        out.push(Chunk {
            index: u32::try_from(out.len()).unwrap_or(u32::MAX),
            start_char: start,
            text: text[bounds[start]..bounds[cut]].to_owned(),
        });
        if cut == n {
            break;
        }
        start = cut - overlap;
    }
    out
}

/// The cut position (exclusive end) in `[lo, end]`, searching the last fifth of the window.
fn best_cut(chars: &[char], lo: usize, end: usize, chunk: usize) -> usize {
    let lo = lo.max(end.saturating_sub(chunk / 5)).max(1);
    if lo > end {
        return end;
    }
    let paragraph = |p: usize| p >= 2 && chars[p - 1] == '\n' && chars[p - 2] == '\n';
    let line = |p: usize| chars[p - 1] == '\n';
    let space = |p: usize| chars[p - 1].is_whitespace();
    for test in [&paragraph as &dyn Fn(usize) -> bool, &line, &space] {
        if let Some(p) = (lo..=end).rev().find(|&p| test(p)) {
            return p;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks coverage, bounds, overlap and order for one input.
    fn check(text: &str, chunk: usize, overlap: usize) -> Vec<Chunk> {
        let got = chunks(text, chunk, overlap);
        let chars: Vec<char> = text.chars().collect();
        if chars.is_empty() {
            assert!(got.is_empty());
            return got;
        }
        assert_eq!(got[0].start_char, 0);
        let mut covered_to = 0;
        for (i, c) in got.iter().enumerate() {
            assert_eq!(c.index as usize, i);
            let len = c.text.chars().count();
            assert!(len <= chunk && len > 0, "chunk {i} has {len} chars");
            let expect: String = chars[c.start_char..c.start_char + len].iter().collect();
            assert_eq!(c.text, expect, "chunk {i} is an exact slice");
            if i > 0 {
                assert_eq!(c.start_char, covered_to - overlap, "chunk {i} overlaps by exactly {overlap}");
            }
            covered_to = c.start_char + len;
        }
        assert_eq!(covered_to, chars.len(), "every char covered");
        got
    }

    #[test]
    fn empty_text_has_no_chunks() {
        assert!(chunks("", 100, 10).is_empty());
    }

    #[test]
    fn short_text_is_one_chunk() {
        let got = check("hello world", 100, 10);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text, "hello world");
    }

    #[test]
    fn prefers_paragraph_then_line_then_space() {
        // Window of 50: a paragraph break at 45 and a line break at 48 → paragraph wins.
        let text = format!("{}\n\n{}\n{}", "a".repeat(43), "b".repeat(2), "c".repeat(60));
        let got = check(&text, 50, 5);
        assert!(got[0].text.ends_with("\n\n"), "{:?}", got[0].text);
        let text = format!("{} {}\n{}", "a".repeat(40), "b".repeat(4), "c".repeat(60));
        assert!(check(&text, 50, 5)[0].text.ends_with("bbbb\n"));
        let text = format!("{} {}", "a".repeat(44), "c".repeat(60));
        assert!(check(&text, 50, 5)[0].text.ends_with("a "));
    }

    #[test]
    fn break_outside_last_fifth_is_ignored() {
        // The only space is at 10 of a 50-char window: hard cut at 50.
        let text = format!("{} {}", "a".repeat(9), "b".repeat(100));
        let got = check(&text, 50, 0);
        assert_eq!(got[0].text.chars().count(), 50);
    }

    #[test]
    fn overlap_and_coverage_on_varied_inputs() {
        let words = "alpha beta\ngamma delta\n\nepsilon zeta eta theta iota kappa lambda mu ";
        let text = words.repeat(40);
        for (chunk, overlap) in [(1, 0), (2, 1), (7, 3), (50, 0), (50, 49), (120, 15), (1200, 150), (5000, 100)] {
            check(&text, chunk, overlap);
        }
    }

    #[test]
    fn multibyte_text_never_splits_a_char() {
        let text = "Η βάση δεδομένων 🐘 είναι γεμάτη.\n\nΟ δίσκος 💾 γεμίζει γρήγορα; 🔥🔥🔥 ".repeat(30);
        for (chunk, overlap) in [(3, 1), (10, 2), (64, 8), (200, 30)] {
            let got = check(&text, chunk, overlap);
            assert!(got.len() > 1);
        }
        let emoji = "👩‍🚀".repeat(25);
        check(&emoji, 6, 2);
    }

    #[test]
    fn degenerate_params_do_not_panic() {
        check("some text here", 5, 0);
        let got = chunks("some text here", 0, 0);
        assert_eq!(got.len(), 14);
        let got = chunks("some text here", 4, 9);
        assert!(!got.is_empty());
    }
}
