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
    /// Who wrote it: an optional first `system` turn, then `user` and `assistant` alternating.
    pub role: Speaker,
    /// The message text: never blank; all turns together hold at most [`MAX_CONTENT_BYTES`].
    pub content: String,
}

impl Speaker {
    /// The role as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Speaker::System => "system",
            Speaker::User => "user",
            Speaker::Assistant => "assistant",
        }
    }
}

/// What is wrong with a conversation; each message names the rule and the index.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConversationError {
    /// No messages at all.
    #[error("messages must contain at least one user message")]
    Empty,
    /// Over [`MAX_MESSAGES`].
    #[error("messages has {0} entries; at most {MAX_MESSAGES} are allowed")]
    TooMany(usize),
    /// Over [`MAX_CONTENT_BYTES`].
    #[error("messages hold {0} bytes of content; at most {MAX_CONTENT_BYTES} are allowed")]
    TooLarge(usize),
    /// Only a system message.
    #[error("messages must contain at least one user message after the system message")]
    OnlySystem,
    /// A message with blank content.
    #[error("messages[{0}].content must not be blank")]
    Blank(usize),
    /// A message out of the user/assistant alternation.
    #[error(
        "messages[{index}].role is {:?} but {:?} was expected: turns alternate user/assistant starting with user{}",
        .role.as_str(),
        .expected.as_str(),
        if *.role == Speaker::System { "; only the first message may be a system message" } else { "" }
    )]
    OutOfTurn {
        /// Index of the message.
        index: usize,
        /// Its role.
        role: Speaker,
        /// The role the alternation expects there.
        expected: Speaker,
    },
    /// The conversation ends with an assistant message.
    #[error("the last message must be from the user")]
    LastNotUser,
}

/// Checks the shape: an optional leading system message, then turns alternating
/// from `user`, ending with `user`; none blank; bounded.
pub fn validate(turns: &[Turn]) -> Result<(), ConversationError> {
    if turns.is_empty() {
        return Err(ConversationError::Empty);
    }
    if turns.len() > MAX_MESSAGES {
        return Err(ConversationError::TooMany(turns.len()));
    }
    let total: usize = turns.iter().map(|t| t.content.len()).sum();
    if total > MAX_CONTENT_BYTES {
        return Err(ConversationError::TooLarge(total));
    }
    let body = match turns.first().map(|t| t.role) {
        Some(Speaker::System) => &turns[1..],
        _ => turns,
    };
    if body.is_empty() {
        return Err(ConversationError::OnlySystem);
    }
    if let Some(index) = turns.iter().position(|turn| turn.content.trim().is_empty()) {
        return Err(ConversationError::Blank(index));
    }
    let offset = turns.len() - body.len();
    for (i, turn) in body.iter().enumerate() {
        let expected = if i % 2 == 0 { Speaker::User } else { Speaker::Assistant };
        if turn.role != expected {
            return Err(ConversationError::OutOfTurn { index: i + offset, role: turn.role, expected });
        }
    }
    if body.last().map(|t| t.role) != Some(Speaker::User) {
        return Err(ConversationError::LastNotUser);
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

    fn rejection(turns: &[Turn]) -> String {
        validate(turns).unwrap_err().to_string()
    }

    #[test]
    fn rejects_bad_shapes_with_the_index() {
        assert_eq!(rejection(&[]), "messages must contain at least one user message");
        assert!(rejection(&[turn(Speaker::System, "x")]).contains("after the system message"));
        assert_eq!(
            rejection(&[turn(Speaker::User, "a"), turn(Speaker::User, "b")]),
            "messages[1].role is \"user\" but \"assistant\" was expected: turns alternate user/assistant starting with user"
        );
        assert!(rejection(&[turn(Speaker::User, "a"), turn(Speaker::System, "b")]).contains("only the first message"));
        assert_eq!(
            rejection(&[turn(Speaker::User, "a"), turn(Speaker::Assistant, "b")]),
            "the last message must be from the user"
        );
        assert_eq!(rejection(&[turn(Speaker::User, " ")]), "messages[0].content must not be blank");
        let many: Vec<Turn> =
            (0..65).map(|i| turn(if i % 2 == 0 { Speaker::User } else { Speaker::Assistant }, "x")).collect();
        assert!(rejection(&many).contains("at most 64"));
        assert!(rejection(&[turn(Speaker::User, &"x".repeat(MAX_CONTENT_BYTES + 1))]).contains("bytes of content"));
    }
}
