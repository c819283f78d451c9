//! Response language: BCP 47 tags and the instruction that keeps the model's prose
//! in the configured language while identifiers and evidence stay verbatim.

/// Normalises a BCP 47 language tag (`en-us` -> `en-US`,
/// `zh-hant-tw` -> `zh-Hant-TW`).
pub fn normalize_language(s: &str) -> Option<String> {
    if s.is_empty() || s.len() > 35 {
        return None;
    }
    let mut parts = s.split('-');
    let primary = parts.next()?;
    let plen = primary.len();
    if !primary.bytes().all(|b| b.is_ascii_alphabetic()) || !((2..=3).contains(&plen) || (5..=8).contains(&plen)) {
        return None;
    }
    let mut out = primary.to_ascii_lowercase();
    let mut in_extension = false;
    for sub in parts {
        if sub.is_empty() || sub.len() > 8 || !sub.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        let alpha = sub.bytes().all(|b| b.is_ascii_alphabetic());
        out.push('-');
        if sub.len() == 1 {
            in_extension = true;
        }
        if !in_extension && alpha && sub.len() == 4 {
            let lower = sub.to_ascii_lowercase();
            out.push_str(&lower[..1].to_ascii_uppercase());
            out.push_str(&lower[1..]);
        } else if !in_extension && alpha && sub.len() == 2 {
            out.push_str(&sub.to_ascii_uppercase());
        } else {
            out.push_str(&sub.to_ascii_lowercase());
        }
    }
    Some(out)
}

/// The instruction appended to every system prompt that produces prose.
pub fn language_instruction(tag: &str) -> String {
    format!(
        "Write all human-readable prose in the language of BCP 47 tag \"{tag}\", whatever language the user or the \
         data uses. Keep identifiers, code, commands, paths, hostnames, metric and label names and values, and \
         evidence references exactly as they are."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_normalised_or_rejected() {
        assert_eq!(normalize_language("EN-us").as_deref(), Some("en-US"));
        assert_eq!(normalize_language("zh-hant-tw").as_deref(), Some("zh-Hant-TW"));
        for bad in ["", "e", "en_US", "en--US", "123", "en-123456789", "ελ"] {
            assert_eq!(normalize_language(bad), None, "{bad}");
        }
    }

    #[test]
    fn instruction_names_the_tag() {
        assert!(language_instruction("fr").contains("\"fr\""));
    }
}
