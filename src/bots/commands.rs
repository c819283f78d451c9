//! Bot commands (`/start` or `/help`, `/new` or `/reset`, `/status`, `/ask`, `/incident ID`): parsed from the message text, answered
//! with fixed texts and never sent to the model.

/// What a message asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Empty text, `/start` or `/help`.
    Help,
    /// `/new` or `/reset`: forget this conversation.
    New,
    /// `/status`: how much history is retained.
    Status,
    /// `/ask <question>`.
    Ask(String),
    /// `/incident <id>`: the incident's state and latest result.
    Incident(String),
    /// Plain text: a question.
    Chat(String),
    /// A command that cannot run as written; the string is the reply.
    Unsupported(String),
}

/// Reply to [`Command::Help`].
pub const HELP: &str = "Send a question or incident description. Commands: /new resets this conversation, /status shows retained history, /incident ID shows an incident's state and latest result, /help shows this message.";
/// Reply to [`Command::New`].
pub const RESET: &str = "Conversation reset. The next message starts with empty history.";
/// Reply to an unknown command.
pub const UNSUPPORTED: &str = "Unsupported command. Use /help, /new, /status, /incident ID, or /ask <question>.";
/// Reply to `/ask` without a question.
pub const ASK_WITHOUT_TEXT: &str = "Send a question after /ask, or use /help.";
/// Reply to `/incident` without a valid id.
pub const INCIDENT_USAGE: &str = "Usage: /incident ID, for example /incident inc_0123abcd.";
/// Reply when the model or the engine failed.
pub const FAILURE: &str = "Akritas could not complete this request. Try again later.";

/// Reply to [`Command::Status`].
pub fn status_text(retained: usize, limit: usize) -> String {
    format!("Conversation is active. Retained messages: {retained} of {limit}.")
}

/// Reply to [`Command::Incident`] for an id the namespace does not have.
pub fn incident_not_found(id: &str) -> String {
    format!("No incident {id} in this namespace.")
}

/// Longest incident id accepted.
const MAX_INCIDENT_ID: usize = 128;

fn valid_incident_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_INCIDENT_ID
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Reads a message: the first token, lower-cased and without an `@botname` suffix, names the
/// command when it starts with `/`; anything else is a question.
pub fn parse(text: &str) -> Command {
    let text = text.trim();
    let (first, rest) = match text.split_once(char::is_whitespace) {
        Some((first, rest)) => (first, rest.trim()),
        None => (text, ""),
    };
    if first.is_empty() {
        return Command::Help;
    }
    if !first.starts_with('/') {
        return Command::Chat(text.to_owned());
    }
    let name = first.split_once('@').map_or(first, |(name, _bot)| name).to_lowercase();
    match name.as_str() {
        "/start" | "/help" => Command::Help,
        "/new" | "/reset" => Command::New,
        "/status" => Command::Status,
        "/ask" if rest.is_empty() => Command::Unsupported(ASK_WITHOUT_TEXT.to_owned()),
        "/ask" => Command::Ask(rest.to_owned()),
        "/incident" => match rest.split_whitespace().collect::<Vec<_>>().as_slice() {
            [id] if valid_incident_id(id) => Command::Incident((*id).to_owned()),
            _ => Command::Unsupported(INCIDENT_USAGE.to_owned()),
        },
        _ => Command::Unsupported(UNSUPPORTED.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_and_start_are_help() {
        assert_eq!(parse(""), Command::Help);
        assert_eq!(parse("   "), Command::Help);
        assert_eq!(parse("/start"), Command::Help);
        assert_eq!(parse("/HELP@akritas_bot"), Command::Help);
    }

    #[test]
    fn reset_is_new_and_status_is_status() {
        assert_eq!(parse("/new"), Command::New);
        assert_eq!(parse("/Reset@bot"), Command::New);
        assert_eq!(parse("/status extra words"), Command::Status);
    }

    #[test]
    fn ask_needs_a_question() {
        assert_eq!(parse("/ask"), Command::Unsupported(ASK_WITHOUT_TEXT.into()));
        assert_eq!(parse("/ask@bot   why is the api slow? "), Command::Ask("why is the api slow?".into()));
    }

    #[test]
    fn incident_needs_one_well_formed_id() {
        assert_eq!(parse("/incident inc_00ff"), Command::Incident("inc_00ff".into()));
        assert_eq!(parse("/incident"), Command::Unsupported(INCIDENT_USAGE.into()));
        assert_eq!(parse("/incident a b"), Command::Unsupported(INCIDENT_USAGE.into()));
        assert_eq!(parse("/incident ../etc"), Command::Unsupported(INCIDENT_USAGE.into()));
        assert_eq!(parse(&format!("/incident {}", "a".repeat(129))), Command::Unsupported(INCIDENT_USAGE.into()));
    }

    #[test]
    fn unknown_commands_are_unsupported_and_plain_text_is_chat() {
        assert_eq!(parse("/deploy now"), Command::Unsupported(UNSUPPORTED.into()));
        assert_eq!(parse("  why is /var full? "), Command::Chat("why is /var full?".into()));
    }

    #[test]
    fn texts_match_upstream() {
        assert_eq!(status_text(4, 20), "Conversation is active. Retained messages: 4 of 20.");
        assert!(HELP.contains("/incident ID"));
    }
}
