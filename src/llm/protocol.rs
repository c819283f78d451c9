//! The `model_protocol` setting and the modes of a structured step (see `structured`).

use std::fmt;
use std::str::FromStr;

/// Setting `model_protocol`: how structured answers are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// Start with the remembered mode (what the server is says which, else tool_call) and fall
    /// back as the server shows.
    #[default]
    Auto,
    /// Always this mode.
    Fixed(Mode),
}

/// How one structured answer is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    ToolCall,
    JsonSchema,
    JsonObject,
    Text,
}

impl Mode {
    /// Every mode, in fallback order.
    pub(crate) const ALL: [Mode; 4] = [Mode::ToolCall, Mode::JsonSchema, Mode::JsonObject, Mode::Text];

    /// Its setting value (`tool_call`, `json_schema`, `json_object`, `text`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::ToolCall => "tool_call",
            Mode::JsonSchema => "json_schema",
            Mode::JsonObject => "json_object",
            Mode::Text => "text",
        }
    }

    /// The mode after this one in fallback order.
    pub(crate) fn next(self) -> Option<Mode> {
        let at = Mode::ALL.iter().position(|m| *m == self)?;
        Mode::ALL.get(at + 1).copied()
    }
}

/// Where the mode a model's structured steps start with comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModeSource {
    /// The server identification (`auto`): what the server is says which mode works.
    Probe,
    /// The server refused or ignored the mode before (`auto`): the one it fell back to.
    Fallback,
    /// `auto`'s first mode, `tool_call`, which answered.
    Default,
    /// A fixed `model_protocol`.
    Setting,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Protocol {
    /// Its setting value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Protocol::Auto => "auto",
            Protocol::Fixed(mode) => mode.as_str(),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Protocol {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        if value == "auto" {
            return Ok(Protocol::Auto);
        }
        Mode::ALL.into_iter().find(|m| m.as_str() == value).map(Protocol::Fixed).ok_or_else(|| {
            format!("unknown model protocol {value:?}; choose auto, tool_call, json_schema, json_object or text")
        })
    }
}
