use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::RegistryError;

/// Maximum length of a tool name in bytes.
const MAX_NAME_LEN: usize = 128;

/// Validated tool name: `^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ToolName(String);

impl ToolName {
    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn check(s: &str) -> Result<(), &'static str> {
        let mut chars = s.chars();
        match chars.next() {
            None => return Err("must not be empty"),
            Some(c) if !c.is_ascii_alphanumeric() => return Err("must start with an ASCII letter or digit"),
            Some(_) => {}
        }
        if s.len() > MAX_NAME_LEN {
            return Err("must be at most 128 characters");
        }
        if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
            return Err("may only contain ASCII letters, digits, '.', '_' and '-'");
        }
        Ok(())
    }
}

impl FromStr for ToolName {
    type Err = RegistryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::check(s).map_err(|reason| RegistryError::InvalidName { name: preview(s), reason })?;
        Ok(Self(s.to_owned()))
    }
}

impl TryFrom<&str> for ToolName {
    type Error = RegistryError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl TryFrom<String> for ToolName {
    type Error = RegistryError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::check(&s).map_err(|reason| RegistryError::InvalidName { name: preview(&s), reason })?;
        Ok(Self(s))
    }
}

impl From<ToolName> for String {
    fn from(name: ToolName) -> Self {
        name.0
    }
}

impl AsRef<str> for ToolName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Lets maps keyed by `ToolName` be queried with `&str` (ordering and hashing match `String`).
impl Borrow<str> for ToolName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A bounded copy of a rejected name for error messages.
fn preview(s: &str) -> String {
    crate::text::truncate_bytes(s, 160, crate::text::ELLIPSIS)
}
