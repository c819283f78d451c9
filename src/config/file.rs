//! Reading the strict, versioned JSON config file.

use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::{ConfigError, KEYS, SECTIONS, section_of};

/// Largest accepted config file, in bytes (1 MiB).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The only supported value of `"version"`.
pub const FILE_VERSION: u64 = 1;

/// A JSON object's entries in order; a duplicate key is refused.
struct Entries(Vec<(String, Value)>);

/// Collects a JSON object's entries, refusing a duplicate key.
fn collect<'de, A: MapAccess<'de>>(
    mut m: A,
    mut value: impl FnMut(&str, &mut A) -> Result<Value, A::Error>,
) -> Result<Vec<(String, Value)>, A::Error> {
    let mut out: Vec<(String, Value)> = Vec::new();
    while let Some(k) = m.next_key::<String>()? {
        if out.iter().any(|(o, _)| *o == k) {
            return Err(serde::de::Error::custom(format!("duplicate field {k:?}")));
        }
        let v = value(&k, &mut m)?;
        out.push((k, v));
    }
    Ok(out)
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Entries, A::Error> {
                collect(m, |_, m| m.next_value()).map(Entries)
            }
        }
        d.deserialize_map(V)
    }
}

/// The file's top-level object: a section's object is read as [`Entries`] too, so a
/// duplicate key inside a section is refused like one at the top. `sections` names the
/// entries that are sections: `model` and `kubernetes` are also the names of settings,
/// which an older file gives at the top level (a string, a boolean).
struct Top {
    entries: Vec<(String, Value)>,
    sections: Vec<String>,
}

/// The value of a key named like a section: its object of settings, or any other value.
enum Section {
    Settings(Entries),
    Other(Value),
}

impl<'de> Deserialize<'de> for Section {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Section;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Section, A::Error> {
                collect(m, |_, m| m.next_value()).map(|entries| Section::Settings(Entries(entries)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Section, A::Error> {
                Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(Section::Other)
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Section, E> {
                Ok(Section::Other(v.into()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Section, E> {
                Ok(Section::Other(v.into()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Section, E> {
                Ok(Section::Other(v.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Section, E> {
                Ok(Section::Other(v.into()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Section, E> {
                Ok(Section::Other(v.into()))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Section, E> {
                Ok(Section::Other(Value::Null))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Top;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Top, A::Error> {
                let mut sections = Vec::new();
                let entries = collect(m, |k, m| {
                    if !SECTIONS.contains(&k) {
                        return m.next_value();
                    }
                    match m.next_value::<Section>()? {
                        Section::Settings(Entries(entries)) => {
                            sections.push(k.to_owned());
                            Ok(Value::Object(entries.into_iter().collect()))
                        }
                        Section::Other(value) if KEYS.contains(&k) => Ok(value),
                        Section::Other(value) => Err(serde::de::Error::custom(format!(
                            "the section {k:?} must be a JSON object of settings, got {}",
                            super::value::show(&value)
                        ))),
                    }
                })?;
                Ok(Top { entries, sections })
            }
        }
        d.deserialize_map(V)
    }
}

/// One setting read from the file: its key, its value and where it was
/// (`$.budget.max_tokens`, or `$.max_tokens` at the top level).
#[derive(Debug)]
pub(crate) struct Entry {
    pub key: String,
    pub value: Value,
    pub pointer: String,
}

/// A checked config file: its settings in file order, and one warning for each setting
/// given at the top level rather than in its section.
#[derive(Debug)]
pub(crate) struct Contents {
    pub entries: Vec<Entry>,
    pub deprecated: Vec<String>,
}

fn file_err(path: &Path, problem: impl Into<String>) -> ConfigError {
    ConfigError::File { path: path.to_path_buf(), problem: problem.into() }
}

fn at(path: &Path, pointer: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::InvalidFile { path: path.to_path_buf(), pointer: pointer.into(), problem: problem.into() }
}

/// Reads and checks the file at `path`.
pub(crate) fn read(path: &Path) -> Result<Contents, ConfigError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| file_err(path, format!("cannot read it ({e}); fix the path or create the file")))?;
    if meta.is_dir() {
        return Err(file_err(path, "is a directory; point to a JSON file instead"));
    }
    if !meta.is_file() {
        return Err(file_err(path, "is not a regular file; point to a JSON file instead"));
    }
    let too_large = || file_err(path, format!("is larger than the limit of {MAX_FILE_BYTES} bytes (1 MiB); shrink it"));
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| file_err(path, format!("cannot read it ({e})")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large());
    }
    if bytes.is_empty() {
        return Err(file_err(path, "is empty; it must hold a JSON object such as {\"version\": 1}"));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        file_err(
            path,
            format!("is not valid UTF-8 (bad byte at offset {}); save it as UTF-8", e.utf8_error().valid_up_to()),
        )
    })?;
    parse(path, &text)
}

/// Checks the text of a config file (`path` names it in errors). Settings sit in their
/// sections (`{"budget": {"max_tokens": 1024}}`); one still at the top level, as before
/// sections, is read with a warning naming its section.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Contents, ConfigError> {
    let Top { entries: mut top, sections } = serde_json::from_str::<Top>(text).map_err(|e| {
        file_err(path, format!("is not a single JSON object ({e}); it must hold exactly one JSON object"))
    })?;

    let Some(i) = top.iter().position(|(k, _)| k == "version") else {
        return Err(at(path, "$.version", format!("required field is missing; add \"version\": {FILE_VERSION}")));
    };
    let (_, version) = top.remove(i);
    if version.as_u64() != Some(FILE_VERSION) {
        return Err(at(
            path,
            "$.version",
            format!("must be {FILE_VERSION} (the only supported version), got {}", super::value::show(&version)),
        ));
    }
    let mut contents = Contents { entries: Vec::new(), deprecated: Vec::new() };
    for (name, value) in top {
        match value {
            Value::Object(settings) if sections.contains(&name) => {
                for (key, value) in settings {
                    let pointer = format!("$.{name}.{key}");
                    match section_of(&key) {
                        Some(section) if section == name => {}
                        Some(section) => {
                            let problem = format!("belongs to the section \"{section}\"; move it to {section}.{key}");
                            return Err(at(path, pointer, problem));
                        }
                        None => return Err(at(path, pointer, unknown_key(&key))),
                    }
                    add(path, &mut contents.entries, Entry { key, value, pointer })?;
                }
            }
            value => {
                let Some(section) = section_of(&name) else {
                    return Err(at(path, format!("$.{name}"), unknown_key(&name)));
                };
                contents.deprecated.push(format!(
                    "{}: the top-level key \"{name}\" is deprecated; move it into the section \"{section}\" \
                     ({section}.{name})",
                    path.display()
                ));
                let pointer = format!("$.{name}");
                add(path, &mut contents.entries, Entry { key: name, value, pointer })?;
            }
        }
    }
    Ok(contents)
}

/// Adds `entry`, unless its setting is given a second time (at the top level and in its section).
fn add(path: &Path, entries: &mut Vec<Entry>, entry: Entry) -> Result<(), ConfigError> {
    if let Some(first) = entries.iter().find(|e| e.key == entry.key) {
        let section = section_of(&entry.key).unwrap_or_default();
        return Err(at(
            path,
            entry.pointer,
            format!("is also given at {}; keep only {section}.{}", first.pointer, entry.key),
        ));
    }
    entries.push(entry);
    Ok(())
}

/// Why `key` is refused: the nearest settings (each with its section) or sections, or where
/// the settings are listed.
fn unknown_key(key: &str) -> String {
    let known: Vec<&str> = KEYS.iter().chain(SECTIONS.iter()).copied().collect();
    let near: Vec<String> = crate::suggest::closest(key, &known)
        .into_iter()
        .map(|name| match section_of(name) {
            Some(section) => format!("\"{section}.{name}\""),
            None => format!("the section \"{name}\""),
        })
        .collect();
    match near.as_slice() {
        [] => "unknown field; `akritas serve --help` lists the settings and docs/configuration.md their sections \
               (a flag's file key is its name with '_' for '-' in its section, such as budget.max_tokens for \
               --max-tokens)"
            .to_string(),
        [one] => format!("unknown field; did you mean {one}?"),
        many => format!("unknown field; did you mean one of {}?", many.join(", ")),
    }
}
