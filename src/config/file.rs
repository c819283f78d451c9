//! Reading the strict, versioned JSON config file.

use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::ConfigError;

/// Largest accepted config file, in bytes (1 MiB).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The only supported value of `"version"`.
pub const FILE_VERSION: u64 = 1;

/// Top-level JSON object as ordered entries; duplicate keys are rejected.
struct Entries(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Entries, A::Error> {
                let mut out: Vec<(String, Value)> = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, Value>()? {
                    if out.iter().any(|(o, _)| *o == k) {
                        return Err(serde::de::Error::custom(format!("duplicate field {k:?}")));
                    }
                    out.push((k, v));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn file_err(path: &Path, problem: impl Into<String>) -> ConfigError {
    ConfigError::File { path: path.to_path_buf(), problem: problem.into() }
}

fn at(path: &Path, pointer: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::InvalidFile { path: path.to_path_buf(), pointer: pointer.into(), problem: problem.into() }
}

/// Reads and checks the file at `path`; returns the setting entries (without
/// `version`) in file order. `known` lists the accepted setting keys.
pub(crate) fn read(path: &Path, known: &[&str]) -> Result<Vec<(String, Value)>, ConfigError> {
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
    parse(path, &text, known)
}

/// Checks the text of a config file (`path` names it in errors); returns the setting
/// entries (without `version`) in file order.
pub(crate) fn parse(path: &Path, text: &str, known: &[&str]) -> Result<Vec<(String, Value)>, ConfigError> {
    let Entries(mut entries) = serde_json::from_str::<Entries>(text).map_err(|e| {
        file_err(path, format!("is not a single JSON object ({e}); it must hold exactly one JSON object"))
    })?;

    let Some(i) = entries.iter().position(|(k, _)| k == "version") else {
        return Err(at(path, "$.version", format!("required field is missing; add \"version\": {FILE_VERSION}")));
    };
    let (_, version) = entries.remove(i);
    if version.as_u64() != Some(FILE_VERSION) {
        return Err(at(
            path,
            "$.version",
            format!("must be {FILE_VERSION} (the only supported version), got {}", super::value::show(&version)),
        ));
    }
    if let Some((k, _)) = entries.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        return Err(at(path, format!("$.{k}"), unknown_key(k, known)));
    }
    Ok(entries)
}

/// Why `key` is refused: the nearest known keys, or where the keys are listed.
fn unknown_key(key: &str, known: &[&str]) -> String {
    match crate::suggest::did_you_mean(key, known) {
        Some(suggestion) => format!("unknown field; {suggestion}"),
        None => "unknown field; `akritas serve --help` lists the settings (a flag's file key is its name with \
                 '_' for '-', such as max_tokens for --max-tokens)"
            .to_string(),
    }
}
