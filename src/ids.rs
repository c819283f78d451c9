//! The ids the alert pipeline gives what it stores: events (`evt_…`), incidents (`inc_…`) and
//! investigation jobs (`job_…`), each its own type so one cannot stand for another. They are
//! written and read as the same text as ever; ids from older journals may be any text, so none
//! is refused when read. Below alerts, notify and bots, which all carry them.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! text_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(transparent)]
        #[schemars(transparent)]
        pub struct $name(String);

        impl $name {
            /// A new random id: the prefix and 32 lower-case hex digits.
            pub fn generate() -> Self {
                Self(format!(concat!($prefix, "_{:032x}"), rand::random::<u128>()))
            }

            /// The id text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                Self(text)
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                Self(text.to_string())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }
    };
}

text_id!(
    /// An event the host stored: `evt_` and 32 hex digits.
    EventId,
    "evt"
);
text_id!(
    /// An incident: `inc_` and 32 hex digits.
    IncidentId,
    "inc"
);
text_id!(
    /// An investigation job: `job_` and 32 hex digits.
    JobId,
    "job"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_their_text_on_the_wire_and_any_old_text_is_read() {
        let id = IncidentId::generate();
        assert!(id.starts_with("inc_") && id.len() == 36, "{id}");
        assert_eq!(serde_json::to_value(&id).unwrap(), serde_json::Value::String(id.to_string()));
        let old: JobId = serde_json::from_str("\"job-from-an-old-journal\"").unwrap();
        assert_eq!(old, "job-from-an-old-journal");
        let schema = serde_json::to_value(schemars::schema_for!(EventId)).unwrap();
        assert_eq!(schema["type"], "string", "{schema}");
    }
}
