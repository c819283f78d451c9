//! Whether a value quoted as evidence occurs in a tool call's stored output,
//! compared as tokens so that formatting differences do not matter and partial
//! tokens never match.
//!
//! Rules (docs/alerts.md, "Evidence values"):
//! - Text is split into words, numbers and punctuation; whitespace runs and `"`
//!   are insignificant, `:` and `=` are the same separator.
//! - A quote matches a contiguous run of whole tokens: `7` never matches `17`,
//!   `db-7.prod` or `1.7`; `postgres` never matches `postgresql`, but
//!   `OutOfMemoryError` matches `java.lang.OutOfMemoryError:` (dots separate words).
//! - Numbers compare by value: `1820`, `1,820`, `1820.0`, `1.82e3`; `0.5`, `.5`.
//!   Leading zeros (`007`, dates) keep a token a word.
//! - Units: bytes `B`, `Ki`…`Ei` (`KiB`…`EiB`); seconds `ns`, `us`, `µs`, `ms`, `s`,
//!   `min`, `h`; ratio `%`. A number with a unit equals any number of the same
//!   dimension and base value (`512Mi` = `536870912B`, `1.5s` = `1500ms`). `m`, `k`,
//!   `M`, `KB`, `MB` are ambiguous and compare only as written words.
//! - A bare number in JSON takes the unit its key names: a key ending in `bytes`,
//!   `seconds`, `ratio` or `percent` (`{"memory_bytes": 536870912}` says `512Mi`,
//!   `{"cpu_ratio": 0.85}` says `85%`); it also still equals the bare number.
//! - A JSON key and its value read as `key: value`, so `restarts=7` matches
//!   `{"restarts": 7}` and the text `restarts: 7`.
//!
//! Matching is linear in the output (Knuth–Morris–Pratt over tokens); an output is
//! tokenised once per validation however many quotes cite it ([`Tokenized`]).

use serde_json::Value;

/// Most significant digits a number may have to compare by value.
const MAX_DIGITS: usize = 38;
/// Largest decimal exponent a number may have to compare by value.
const MAX_EXPONENT: i32 = 400;

/// What a number measures once its unit is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dimension {
    /// No unit.
    Plain,
    Bytes,
    Seconds,
    Ratio,
}

/// An exact decimal `mantissa × 10^exponent`, normalised (no trailing zeros in the
/// mantissa, zero is positive with exponent 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    mantissa: u128,
    exponent: i32,
}

impl Decimal {
    fn new(negative: bool, mut mantissa: u128, mut exponent: i32) -> Decimal {
        if mantissa == 0 {
            return Decimal { negative: false, mantissa: 0, exponent: 0 };
        }
        while mantissa.is_multiple_of(10) {
            mantissa /= 10;
            exponent += 1;
        }
        Decimal { negative, mantissa, exponent }
    }

    /// `self × factor × 10^shift`, or `None` when it does not fit.
    fn scaled(self, factor: u128, shift: i32) -> Option<Decimal> {
        Some(Decimal::new(self.negative, self.mantissa.checked_mul(factor)?, self.exponent + shift))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Number(Dimension, Decimal),
    /// Punctuation; `=` is stored as `:`.
    Punct(char),
    /// The end of one searchable run of an output; never part of a quote, so no
    /// match crosses it.
    Boundary,
}

/// A dimension and the factor `f × 10^shift` to its base unit.
type Unit = (Dimension, u128, i32);

/// The unit suffixes that convert.
fn unit(suffix: &str) -> Option<Unit> {
    let binary = |power: u32| Some((Dimension::Bytes, 1u128 << (10 * power), 0));
    match suffix {
        "" => Some((Dimension::Plain, 1, 0)),
        "B" => binary(0),
        "Ki" | "KiB" => binary(1),
        "Mi" | "MiB" => binary(2),
        "Gi" | "GiB" => binary(3),
        "Ti" | "TiB" => binary(4),
        "Pi" | "PiB" => binary(5),
        "Ei" | "EiB" => binary(6),
        "ns" => Some((Dimension::Seconds, 1, -9)),
        "us" | "µs" => Some((Dimension::Seconds, 1, -6)),
        "ms" => Some((Dimension::Seconds, 1, -3)),
        "s" => Some((Dimension::Seconds, 1, 0)),
        "min" => Some((Dimension::Seconds, 60, 0)),
        "h" => Some((Dimension::Seconds, 3600, 0)),
        "%" => Some((Dimension::Ratio, 1, -2)),
        _ => None,
    }
}

/// The unit a JSON key gives its bare number.
fn key_unit(key: &str) -> Option<Unit> {
    let key = key.to_ascii_lowercase();
    [("bytes", "B"), ("seconds", "s"), ("ratio", ""), ("percent", "%")]
        .into_iter()
        .find(|(end, _)| key.ends_with(end))
        .and_then(|(_, suffix)| unit(suffix))
        .map(|(dimension, factor, shift)| {
            (if dimension == Dimension::Plain { Dimension::Ratio } else { dimension }, factor, shift)
        })
}

/// Parses a whole run as a number with an optional convertible unit.
fn number(run: &str) -> Option<(Decimal, &str)> {
    let bytes = run.as_bytes();
    let mut i = 0;
    let negative = match bytes.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    let mut digits = String::new();
    let int_start = i;
    let mut group = 0usize;
    let mut grouped = false;
    while i < bytes.len() {
        match bytes[i] {
            b'0'..=b'9' => {
                digits.push(char::from(bytes[i]));
                group += 1;
            }
            b',' if group > 0 && (grouped && group == 3 || !grouped && group <= 3) => {
                grouped = true;
                group = 0;
            }
            _ => break,
        }
        i += 1;
    }
    if grouped && group != 3 || bytes.get(i.wrapping_sub(1)) == Some(&b',') {
        return None;
    }
    let integer = &run[int_start..i];
    if integer.len() > 1 && integer.starts_with('0') {
        return None;
    }
    let mut exponent: i32 = 0;
    if bytes.get(i) == Some(&b'.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i += 1;
        while let Some(d) = bytes.get(i).filter(|b| b.is_ascii_digit()) {
            digits.push(char::from(*d));
            exponent -= 1;
            i += 1;
        }
    }
    if digits.is_empty() {
        return None;
    }
    let mut has_exponent = false;
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(i + 1), Some(b'-' | b'+')));
        let start = i + 1 + sign;
        let end = start + bytes[start.min(bytes.len())..].iter().take_while(|b| b.is_ascii_digit()).count();
        if end > start && end - start <= 3 {
            let value: i32 = run[start..end].parse().ok()?;
            exponent += if bytes[i + 1] == b'-' { -value } else { value };
            has_exponent = true;
            i = end;
        }
    }
    let suffix = &run[i..];
    if has_exponent && !suffix.is_empty() || exponent.abs() > MAX_EXPONENT {
        return None;
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > MAX_DIGITS {
        return None;
    }
    let mantissa: u128 = if significant.is_empty() { 0 } else { significant.parse().ok()? };
    Some((Decimal::new(negative, mantissa, exponent), suffix))
}

/// A number token from a run; a bare number is read in `bare` when given.
fn number_token(run: &str, bare: Option<Unit>) -> Option<Token> {
    let (value, suffix) = number(run)?;
    let (dimension, factor, shift) = match bare {
        Some(key_unit) if suffix.is_empty() => key_unit,
        _ => unit(suffix)?,
    };
    Some(Token::Number(dimension, value.scaled(factor, shift)?))
}

fn run_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '.' | ',' | '%')
}

/// Splits text into tokens (see the module rules).
fn tokenize(text: &str, out: &mut Vec<Token>) {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (start, c) = chars[i];
        let sign = matches!(c, '-' | '+')
            && (i == 0 || !run_char(chars[i - 1].1))
            && chars.get(i + 1).is_some_and(|(_, n)| n.is_ascii_digit() || *n == '.');
        if run_char(c) || sign {
            let mut j = i + 1;
            while j < chars.len() {
                let (_, d) = chars[j];
                let exponent_sign = matches!(d, '-' | '+')
                    && matches!(chars[j - 1].1, 'e' | 'E')
                    && j >= 2
                    && chars[j - 2].1.is_ascii_digit()
                    && chars.get(j + 1).is_some_and(|(_, n)| n.is_ascii_digit());
                if !(run_char(d) || exponent_sign) {
                    break;
                }
                j += 1;
            }
            let end = chars.get(j).map_or(text.len(), |(at, _)| *at);
            run_tokens(&text[start..end], out);
            i = j;
        } else {
            if !c.is_whitespace() && c != '"' {
                out.push(Token::Punct(if c == '=' { ':' } else { c }));
            }
            i += 1;
        }
    }
}

/// Tokens of one run: a number, a word, or the parts between its commas, or its
/// dot-separated words (`java.lang.OutOfMemoryError`; a part of `db-7.prod` or
/// `1.5.3` stays a word, never a number); a trailing `.` or `,` is sentence
/// punctuation.
fn run_tokens(run: &str, out: &mut Vec<Token>) {
    let trimmed = run.trim_end_matches(['.', ',']);
    if !trimmed.is_empty() {
        if let Some(token) = number_token(trimmed, None) {
            out.push(token);
        } else if trimmed.contains(',') {
            for (n, part) in trimmed.split(',').enumerate() {
                if n > 0 {
                    out.push(Token::Punct(','));
                }
                if !part.is_empty() {
                    run_tokens(part, out);
                }
            }
        } else {
            for (n, part) in trimmed.split('.').enumerate() {
                if n > 0 {
                    out.push(Token::Punct('.'));
                }
                if !part.is_empty() {
                    out.push(Token::Word(part.to_string()));
                }
            }
        }
    }
    out.extend(run[trimmed.len()..].chars().map(Token::Punct));
}

/// Whether `quote` occurs in `output` under the module rules.
pub fn occurs(quote: &str, output: &Value) -> bool {
    Tokenized::new(output).contains(quote)
}

/// A stored output split into tokens once, so that many quotes can be searched in
/// it without splitting it again: every string, every `key: value` pair and every
/// scalar of the output, one after the other, separated so that no match crosses
/// from one into the next.
pub struct Tokenized {
    tokens: Vec<Token>,
}

impl Tokenized {
    /// Tokenises `output` (linear in its size).
    pub fn new(output: &Value) -> Tokenized {
        let mut tokenized = Tokenized { tokens: Vec::new() };
        tokenized.push(None, output);
        tokenized
    }

    /// Appends the scalars of `output`, each read alone and, under an object key,
    /// as `key: value` (a scalar in an array under a key reads with that key).
    fn push(&mut self, key: Option<&[Token]>, output: &Value) {
        match output {
            Value::Object(map) => {
                for (k, v) in map {
                    let mut key_tokens = Vec::new();
                    tokenize(k, &mut key_tokens);
                    key_tokens.push(Token::Punct(':'));
                    self.push_keyed(k, &key_tokens, v);
                }
            }
            Value::Array(items) => items.iter().for_each(|item| self.push(key, item)),
            Value::String(text) => self.scalar(key, |out| tokenize(text, out)),
            Value::Number(n) => self.scalar(key, |out| out.extend(number_token(&n.to_string(), None))),
            Value::Bool(b) => self.scalar(key, |out| out.push(Token::Word(b.to_string()))),
            Value::Null => {}
        }
    }

    /// A value under the object key `name` (tokens `key`): a bare number also
    /// reads in the unit the key names.
    fn push_keyed(&mut self, name: &str, key: &[Token], value: &Value) {
        match value {
            Value::Array(items) => items.iter().for_each(|item| self.push_keyed(name, key, item)),
            Value::Number(n) => {
                self.push(Some(key), value);
                let text = n.to_string();
                if let Some(token) = key_unit(name).and_then(|unit| number_token(&text, Some(unit))) {
                    self.scalar(Some(key), |out| out.push(token));
                }
            }
            _ => self.push(Some(key), value),
        }
    }

    /// One searchable run: `key` (already ending in `:`) then the value's tokens.
    /// The value alone is a part of that run, so it needs no run of its own.
    fn scalar(&mut self, key: Option<&[Token]>, value: impl FnOnce(&mut Vec<Token>)) {
        let start = self.tokens.len();
        self.tokens.extend(key.unwrap_or_default().iter().cloned());
        let value_start = self.tokens.len();
        value(&mut self.tokens);
        if self.tokens.len() == value_start {
            self.tokens.truncate(start);
            return;
        }
        self.tokens.push(Token::Boundary);
    }

    /// Whether `quote` occurs in this output under the module rules.
    pub fn contains(&self, quote: &str) -> bool {
        let mut pattern = Vec::new();
        tokenize(quote, &mut pattern);
        if pattern.is_empty() {
            return false;
        }
        contains(&self.tokens, &pattern, &failure_table(&pattern))
    }
}

/// Knuth–Morris–Pratt failure function of `pattern`.
fn failure_table(pattern: &[Token]) -> Vec<usize> {
    let mut table = vec![0; pattern.len()];
    let mut k = 0;
    for i in 1..pattern.len() {
        while k > 0 && pattern[i] != pattern[k] {
            k = table[k - 1];
        }
        if pattern[i] == pattern[k] {
            k += 1;
        }
        table[i] = k;
    }
    table
}

fn contains(haystack: &[Token], pattern: &[Token], failure: &[usize]) -> bool {
    let mut k = 0;
    for token in haystack {
        while k > 0 && *token != pattern[k] {
            k = failure[k - 1];
        }
        if *token == pattern[k] {
            k += 1;
            if k == pattern.len() {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn text(output: &str, quote: &str) -> bool {
        occurs(quote, &json!(output))
    }

    #[test]
    fn whitespace_runs_and_double_quotes_are_insignificant() {
        assert!(text("pod  web-1\n\tstatus   CrashLoopBackOff", "web-1 status CrashLoopBackOff"));
        assert!(text("autovacuum \"busy\"", "autovacuum busy"));
        assert!(!text("pod web-1", "web-12"));
    }

    #[test]
    fn numbers_compare_by_value_and_whole_tokens_only() {
        for quote in ["1820", "1,820", "1820.0", "1.82e3", "1.820E+3"] {
            assert!(text("longest query 1820 s", quote), "{quote}");
            assert!(text("longest query 1,820 s", quote), "{quote}");
        }
        assert!(text("ratio .5 of pods", "0.5"));
        assert!(text("ratio 0.50 of pods", ".5"));
        for output in ["restarts 17", "restarts 71", "restarts 7.5", "host db-7.prod", "v1.7", "restarts 7e2"] {
            assert!(!text(output, "7"), "{output}");
        }
        assert!(text("restarts were 7.", "7"));
        assert!(!text("version 1.5.3", "1.5"));
        assert!(text("version 1.5.3", "1.5.3"));
        assert!(text("java.lang.OutOfMemoryError: Java heap space", "OutOfMemoryError"));
        assert!(text("image registry.example/web:1.1 pulled", "registry.example/web:1.1"));
        assert!(!text("on 2024-01-07", "7"), "leading zeros keep a date part a word");
        assert!(text("temperature -3 now", "-3"));
        assert!(!text("db-3 is down", "-3"));
        assert!(!text("values 1,8,20", "1820"));
    }

    #[test]
    fn units_convert_within_their_dimension() {
        assert!(text("limit 536870912B", "512Mi"));
        assert!(text("limit 512MiB", "512Mi"));
        assert!(text("p99 1500ms", "1.5s"));
        assert!(text("p99 1.5s", "1500ms"));
        assert!(text("took 2h", "120min"));
        assert!(text("cpu 85%", "85.0%"));
        assert!(!text("p99 1.5s", "1.5"), "a bare number does not say seconds");
        assert!(!text("p99 1.5s", "1.5Mi"));
        assert!(!text("uptime 5m", "300s"), "m is ambiguous (minutes or milli)");
        assert!(text("uptime 5m", "5m"));
        assert!(!text("size 1KB", "1000B"));
    }

    #[test]
    fn json_numbers_take_the_unit_their_key_names() {
        let output = json!({"memory_bytes": 536870912, "cpu_ratio": 0.85, "disk_percent": 91,
                            "latency_seconds": 1.5, "restarts": 7, "pods": [17, 3]});
        for quote in [
            "512Mi",
            "536870912",
            "85%",
            "0.85",
            "91%",
            "1500ms",
            "1.5",
            "restarts=7",
            "restarts: 7",
            "\"restarts\": 7",
            "memory_bytes=512Mi",
            "3",
        ] {
            assert!(occurs(quote, &output), "{quote}");
        }
        for quote in ["7%", "restarts=17", "85", "1.5Mi", "restarts=3", "pods=7", "512"] {
            assert!(!occurs(quote, &output), "{quote}");
        }
    }

    #[test]
    fn key_value_reads_from_text_and_json() {
        assert!(text("status:\n  restartCount: 7\n", "restartCount=7"));
        assert!(!text("status:\n  restartCount: 7\n", "restarts=7"));
        assert!(occurs("ready=true", &json!({"ready": true})));
        assert!(occurs("phase=Running", &json!({"status": {"phase": "Running"}})));
        assert!(!occurs("phase=Pending", &json!({"status": {"phase": "Running"}, "note": "Pending"})));
    }

    #[test]
    fn empty_and_punctuation_only_quotes_never_match() {
        assert!(!text("anything", ""));
        assert!(!text("anything", "  \" "));
    }

    proptest! {
        #[test]
        fn an_integer_matches_its_formattings_and_not_a_longer_number(n in 0u64..10_000_000_000, digit in 1u8..10) {
            let output = json!(format!("value {n} end"));
            let grouped = n.to_string().as_bytes().rchunks(3).rev().map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>().join(",");
            let quotes = [n.to_string(), format!("{n}.0"), format!("{:e}", n as f64), grouped];
            for quote in &quotes {
                prop_assert!(occurs(quote, &output), "{} in {}", quote, output);
            }
            let longer = [json!(format!("value {digit}{n} end")), json!(format!("value {n}{digit} end"))];
            for output in &longer {
                prop_assert!(!occurs(&quotes[0], output), "{} in {}", quotes[0], output);
            }
        }

        #[test]
        fn a_substring_of_a_word_never_matches(word in "[a-z]{3,12}", cut in 1usize..3) {
            // Only digits around the word: a cut word can equal no other word of the output.
            let output = json!(format!("1 {word} 2"));
            prop_assert!(occurs(&word, &output));
            prop_assert!(!occurs(&word[cut..], &output));
            prop_assert!(!occurs(&word[..word.len() - cut], &output));
        }

        #[test]
        fn matching_never_panics(output in ".{0,200}", quote in ".{0,40}") {
            let _ = occurs(&quote, &json!(output));
        }
    }
}
