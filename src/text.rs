//! Bounded text: the one place that cuts strings to a size, by characters or by
//! bytes, on character boundaries, with an optional marker that says text was cut.
//! Every bound here includes the marker, so a caller's limit is the real limit.

/// The marker most outputs use.
pub(crate) const ELLIPSIS: &str = "...";

/// The longest prefix of `s` with at most `max` characters (no marker).
pub fn prefix_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

/// The longest prefix of `s` with at most `max` bytes that ends on a character
/// boundary (no marker).
pub(crate) fn prefix_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` when it has at most `max` characters; otherwise a prefix followed by
/// `marker`, exactly `max` characters in all (only the marker's first `max`
/// characters when the marker alone does not fit).
pub fn truncate_chars(s: &str, max: usize, marker: &str) -> String {
    if s.chars().nth(max).is_none() {
        return s.to_owned();
    }
    let marker_chars = marker.chars().count();
    if max <= marker_chars {
        return prefix_chars(marker, max).to_owned();
    }
    let mut out = String::with_capacity(s.len().min(max * 4));
    out.push_str(prefix_chars(s, max - marker_chars));
    out.push_str(marker);
    out
}

/// `s` when it has at most `max` bytes; otherwise a prefix cut on a character
/// boundary followed by `marker`, at most `max` bytes in all.
pub(crate) fn truncate_bytes(s: &str, max: usize, marker: &str) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    if max <= marker.len() {
        return prefix_bytes(marker, max).to_owned();
    }
    let mut out = String::with_capacity(max);
    out.push_str(prefix_bytes(s, max - marker.len()));
    out.push_str(marker);
    out
}

/// Whitespace runs (newlines included) collapsed to single spaces, ends trimmed:
/// text for a one-line message.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_stop_on_character_boundaries() {
        assert_eq!(prefix_chars("ñandú", 3), "ñan");
        assert_eq!(prefix_chars("ab", 5), "ab");
        assert_eq!(prefix_bytes("ñandú", 1), "");
        assert_eq!(prefix_bytes("ñandú", 3), "ña");
        assert_eq!(prefix_bytes("ab", 5), "ab");
    }

    #[test]
    fn truncation_by_characters_includes_the_marker() {
        assert_eq!(truncate_chars("abcdef", 6, ELLIPSIS), "abcdef");
        assert_eq!(truncate_chars("abcdefg", 6, ELLIPSIS), "abc...");
        assert_eq!(truncate_chars("ααααααα", 5, "…"), "αααα…");
        assert_eq!(truncate_chars("abcdefg", 2, ELLIPSIS), "..");
        assert_eq!(truncate_chars("abcdefg", 0, ELLIPSIS), "");
        assert_eq!(truncate_chars("abcdefg", 4, ""), "abcd");
    }

    #[test]
    fn truncation_by_bytes_includes_the_marker() {
        assert_eq!(truncate_bytes("abcdef", 6, ELLIPSIS), "abcdef");
        assert_eq!(truncate_bytes("abcdefg", 6, ELLIPSIS), "abc...");
        // "é" is two bytes: never cut in half.
        assert_eq!(truncate_bytes("éééé", 6, ELLIPSIS), "é...");
        assert_eq!(truncate_bytes("abcdefg", 2, ELLIPSIS), "..");
        for max in 0..12 {
            assert!(truncate_bytes("ñandú ñandú", max, ELLIPSIS).len() <= max);
        }
    }

    #[test]
    fn one_line_collapses_whitespace() {
        assert_eq!(one_line("  a\n\tb  c  "), "a b c");
        assert_eq!(one_line(""), "");
    }
}
