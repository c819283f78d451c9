//! "Did you mean …": the known names nearest a misspelt one, by edit distance.

/// Optimal-string-alignment distance between `a` and `b` in characters: insertions,
/// deletions, substitutions and swaps of two adjacent characters each cost 1
/// (Damerau–Levenshtein, each substring edited at most once).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows of the dynamic-programming table: two rows back, the last, this one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut last: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut last, row);
    }
    last[b.len()]
}

/// At most three of `known` that `word` was probably meant to be, nearest first:
/// those within a third of its length in edits (at least one), or, for a word of four
/// or more characters, those containing it; only the name itself when it is one spelt
/// with other case or `-` for `_` (both ignored). Empty when nothing is close.
pub fn closest<'a>(word: &str, known: &[&'a str]) -> Vec<&'a str> {
    let fold = |s: &str| s.to_lowercase().replace('-', "_");
    let word = fold(word);
    let reach = (word.chars().count() / 3).max(1);
    let mut near: Vec<(usize, &'a str)> = known
        .iter()
        .filter_map(|&name| {
            let candidate = fold(name);
            let distance = edit_distance(&word, &candidate);
            let contains = word.chars().count() >= 4 && candidate.contains(&word);
            (distance <= reach || contains).then_some((distance, name))
        })
        .collect();
    near.sort_unstable();
    // The same name spelt another way (`max-tokens`, `Max_Tokens`) is the one meant.
    if near.first().is_some_and(|(distance, _)| *distance == 0) {
        near.retain(|(distance, _)| *distance == 0);
    }
    near.into_iter().take(3).map(|(_, name)| name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_insertions_deletions_substitutions_and_swaps() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("max_tokens", "max_tokesn"), 1);
        assert_eq!(edit_distance("retention", "retension"), 1);
        assert_eq!(edit_distance("ca", "abc"), 3);
        assert_eq!(edit_distance("ñandú", "nandu"), 2);
    }

    #[test]
    fn closest_suggests_near_names_nearest_first_and_nothing_for_noise() {
        let known = ["max_tokens", "max_tokens_limit", "max_tool_calls", "audit_retention", "alert_retention"];
        assert_eq!(closest("max_token", &known), ["max_tokens", "max_tokens_limit"]);
        assert_eq!(closest("maxTokens", &known), ["max_tokens"]);
        assert_eq!(closest("max-tool-calls", &known), ["max_tool_calls"]);
        assert_eq!(closest("MAX_TOKENS", &known), ["max_tokens"]);
        assert_eq!(closest("audit_retension", &known), ["audit_retention", "alert_retention"]);
        assert_eq!(closest("retention", &known), ["alert_retention", "audit_retention"]);
        assert!(closest("foo", &known).is_empty());
        assert!(closest("temperature", &known).is_empty());
    }
}
