//! Validation of a conversation handed to a Run (native chat, facade, bots):
//! roles, alternation and bounds. Violations are the caller's mistake (HTTP 400).

use serde::{Deserialize, Serialize};

/// Most messages in one conversation.
pub const MAX_MESSAGES: usize = 64;
/// Most content bytes in one conversation.
pub const MAX_CONTENT_BYTES: usize = 256 * 1024;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    /// Client-supplied context.
    System,
    /// The person.
    User,
    /// Earlier Akritas answers.
    Assistant,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Role.
    pub role: Speaker,
    /// Text.
    pub content: String,
}

/// Checks the shape: an optional leading system message, then turns alternating
/// from `user`, ending with `user`; none blank; bounded.
pub fn validate(turns: &[Turn]) -> Result<(), String> {
    if turns.is_empty() {
        return Err("messages must contain at least one user message".into());
    }
    if turns.len() > MAX_MESSAGES {
        return Err(format!("messages has {} entries; at most {MAX_MESSAGES} are allowed", turns.len()));
    }
    let total: usize = turns.iter().map(|t| t.content.len()).sum();
    if total > MAX_CONTENT_BYTES {
        return Err(format!("messages hold {total} bytes of content; at most {MAX_CONTENT_BYTES} are allowed"));
    }
    let body = match turns.first().map(|t| t.role) {
        Some(Speaker::System) => &turns[1..],
        _ => turns,
    };
    if body.is_empty() {
        return Err("messages must contain at least one user message after the system message".into());
    }
    for (i, turn) in turns.iter().enumerate() {
        if turn.content.trim().is_empty() {
            return Err(format!("messages[{i}].content must not be blank"));
        }
    }
    let offset = turns.len() - body.len();
    for (i, turn) in body.iter().enumerate() {
        let expected = if i % 2 == 0 { Speaker::User } else { Speaker::Assistant };
        if turn.role != expected {
            let role =
                serde_json::to_value(turn.role).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            let want = if expected == Speaker::User { "user" } else { "assistant" };
            let detail =
                if turn.role == Speaker::System { "; only the first message may be a system message" } else { "" };
            return Err(format!(
                "messages[{}].role is {role:?} but {want:?} was expected: turns alternate user/assistant starting with user{detail}",
                i + offset
            ));
        }
    }
    if body.last().map(|t| t.role) != Some(Speaker::User) {
        return Err("the last message must be from the user".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(role: Speaker, content: &str) -> Turn {
        Turn { role, content: content.to_string() }
    }

    #[test]
    fn accepts_system_then_alternation() {
        let turns = [
            turn(Speaker::System, "ctx"),
            turn(Speaker::User, "a"),
            turn(Speaker::Assistant, "b"),
            turn(Speaker::User, "c"),
        ];
        assert_eq!(validate(&turns), Ok(()));
    }

    #[test]
    fn rejects_bad_shapes_with_the_index() {
        assert_eq!(validate(&[]).unwrap_err(), "messages must contain at least one user message");
        assert!(validate(&[turn(Speaker::System, "x")]).unwrap_err().contains("after the system message"));
        assert_eq!(
            validate(&[turn(Speaker::User, "a"), turn(Speaker::User, "b")]).unwrap_err(),
            "messages[1].role is \"user\" but \"assistant\" was expected: turns alternate user/assistant starting with user"
        );
        assert!(
            validate(&[turn(Speaker::User, "a"), turn(Speaker::System, "b")])
                .unwrap_err()
                .contains("only the first message")
        );
        assert_eq!(
            validate(&[turn(Speaker::User, "a"), turn(Speaker::Assistant, "b")]).unwrap_err(),
            "the last message must be from the user"
        );
        assert_eq!(validate(&[turn(Speaker::User, " ")]).unwrap_err(), "messages[0].content must not be blank");
        let many: Vec<Turn> =
            (0..65).map(|i| turn(if i % 2 == 0 { Speaker::User } else { Speaker::Assistant }, "x")).collect();
        assert!(validate(&many).unwrap_err().contains("at most 64"));
        assert!(
            validate(&[turn(Speaker::User, &"x".repeat(MAX_CONTENT_BYTES + 1))])
                .unwrap_err()
                .contains("bytes of content")
        );
    }
}
