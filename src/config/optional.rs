//! Settings that may be unset: a number or nothing (empty text, JSON `null`).

use serde_json::Value;

use super::value::{JsonErr, SettingValue, expected};

impl SettingValue for Option<u32> {
    /// Empty (or blank) text means "not set".
    fn from_text(s: &str, expect: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.is_empty() { Ok(None) } else { t.parse().map(Some).map_err(|_| expected(expect)) }
    }
    fn to_text(&self) -> String {
        self.map_or_else(|| "none".to_string(), |n| n.to_string())
    }
    fn from_json(v: &Value, expect: &str) -> Result<Self, JsonErr> {
        match v {
            Value::Null => Ok(None),
            _ => u32::from_json(v, expect).map(Some),
        }
    }
}

/// Integer range check of a value that may be unset.
pub(crate) fn u32_in<const LO: u32, const HI: u32>(v: Option<u32>, expect: &str) -> Result<Option<u32>, String> {
    match v {
        Some(n) if !(LO..=HI).contains(&n) => Err(expected(expect)),
        _ => Ok(v),
    }
}
