//! Run ids.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A Run id: `run_` and 32 lower-case hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    /// A new random id.
    pub fn generate() -> Self {
        Self(format!("run_{:032x}", rand::random::<u128>()))
    }

    /// Parses an id.
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix("run_")?;
        (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            .then(|| Self(text.to_string()))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as a number (the index keeps ids in 16 bytes).
    pub(super) fn to_u128(&self) -> u128 {
        u128::from_str_radix(&self.0[4..], 16).unwrap_or_default()
    }

    /// The id of a number [`RunId::to_u128`] made.
    pub(super) fn from_u128(id: u128) -> Self {
        Self(format!("run_{id:032x}"))
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Text that is not a Run id.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a Run id")]
pub struct InvalidRunId(String);

impl TryFrom<String> for RunId {
    type Error = InvalidRunId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        RunId::parse(&value).ok_or(InvalidRunId(value))
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.0
    }
}
