//! How each flag shape of [`super::ServeFlags`] yields a setting value.

use super::value::SettingValue;

/// Flag shapes in [`ServeFlags`]: how a flag field yields a value.
pub(super) trait FlagField {
    /// `None` when the flag was not given; else the parsed value or
    /// `(offending text, problem)`.
    fn parse<T: SettingValue>(&self, expect: &str) -> Option<Result<T, (String, String)>>;
    /// The given text, for error messages.
    fn shown(&self) -> String;
}

impl FlagField for Option<String> {
    fn parse<T: SettingValue>(&self, expect: &str) -> Option<Result<T, (String, String)>> {
        self.as_deref().map(|s| T::from_text(s, expect).map_err(|p| (s.to_string(), p)))
    }
    fn shown(&self) -> String {
        self.clone().unwrap_or_default()
    }
}

impl FlagField for bool {
    fn parse<T: SettingValue>(&self, expect: &str) -> Option<Result<T, (String, String)>> {
        self.then(|| T::from_text("true", expect).map_err(|p| ("true".to_string(), p)))
    }
    fn shown(&self) -> String {
        self.to_string()
    }
}

impl FlagField for Vec<String> {
    fn parse<T: SettingValue>(&self, expect: &str) -> Option<Result<T, (String, String)>> {
        (!self.is_empty()).then(|| T::from_items(self, expect))
    }
    fn shown(&self) -> String {
        self.join(", ")
    }
}
