//! Reading manifest files: multi-document YAML and JSON (an object, an array of
//! objects, or a `List`), bounded in size and count.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Largest manifest file read.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Most manifest files read from one set of directories.
pub const MAX_FILES: usize = 10_000;
/// Deepest directory nesting followed.
const MAX_DEPTH: usize = 16;

/// One document of a manifest file.
#[derive(Debug)]
pub struct Document {
    /// Position in the file, counting from 0.
    pub index: usize,
    /// The parsed document, or why it could not be parsed.
    pub value: Result<Value, String>,
}

/// A manifest file and its documents.
#[derive(Debug)]
pub struct ManifestFile {
    /// Path as found under the configured directory.
    pub path: PathBuf,
    /// Its documents, or why the file could not be read at all.
    pub documents: Result<Vec<Document>, String>,
}

/// Whether a path looks like a manifest (`.yaml`, `.yml`, `.json`).
pub fn is_manifest(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"))
}

/// Lists manifest files under the directories, recursively, in a stable order;
/// hidden entries (`.git`, `..data` of ConfigMap mounts) are skipped.
pub fn list_files(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for dir in dirs {
        let meta =
            std::fs::metadata(dir).map_err(|e| format!("{}: cannot read resource directory: {e}", dir.display()))?;
        if !meta.is_dir() {
            return Err(format!("{}: is not a directory", dir.display()));
        }
        walk(dir, 0, &mut files)?;
    }
    Ok(files)
}

fn walk(dir: &Path, depth: usize, files: &mut Vec<PathBuf>) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("{}: directories nested deeper than {MAX_DEPTH} levels", dir.display()));
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        // Follow symlinks (ConfigMap volumes are symlink farms).
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if meta.is_dir() {
            walk(&path, depth + 1, files)?;
        } else if meta.is_file() && is_manifest(&path) {
            if files.len() >= MAX_FILES {
                return Err(format!(
                    "more than {MAX_FILES} manifest files; split the resources or point at a narrower directory"
                ));
            }
            files.push(path);
        }
    }
    Ok(())
}

/// Reads and parses one file.
pub fn read_file(path: &Path) -> ManifestFile {
    let documents = read_bytes(path).and_then(|text| parse_documents(path, &text));
    ManifestFile { path: path.to_path_buf(), documents }
}

fn read_bytes(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("file is {} bytes; the limit is {MAX_FILE_BYTES}", meta.len()));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| format!("not valid UTF-8 (byte {})", e.utf8_error().valid_up_to()))
}

/// Splits and parses the documents of a file's text.
pub fn parse_documents(path: &Path, text: &str) -> Result<Vec<Document>, String> {
    if path.extension().and_then(|e| e.to_str()) == Some("json") {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
        return Ok(flatten(value)
            .into_iter()
            .enumerate()
            .map(|(index, value)| Document { index, value: Ok(value) })
            .collect());
    }
    let mut documents = Vec::new();
    for (index, chunk) in split_yaml(text).into_iter().enumerate() {
        if chunk.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
            continue;
        }
        let value = serde_saphyr::from_str::<Value>(&chunk)
            .map_err(|e| format!("invalid YAML: {}", first_line(&e.to_string())));
        match value {
            Ok(Value::Null) => {}
            Ok(value) => documents.extend(flatten(value).into_iter().map(|value| Document { index, value: Ok(value) })),
            Err(error) => documents.push(Document { index, value: Err(error) }),
        }
    }
    Ok(documents)
}

/// Splits a YAML stream at `---` document markers (a line of its own, optionally
/// followed by a comment) and `...` end markers.
fn split_yaml(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        let trimmed = line.trim_end();
        let is_start = trimmed == "---" || trimmed.starts_with("--- #");
        if is_start || trimmed == "..." {
            docs.push(String::new());
            continue;
        }
        if let Some(current) = docs.last_mut() {
            current.push_str(line);
            current.push('\n');
        }
    }
    // A leading marker creates an empty first document; drop it so indexes count real documents.
    if docs.len() > 1 && docs[0].trim().is_empty() {
        docs.remove(0);
    }
    docs
}

/// `List` objects and top-level arrays become their items.
fn flatten(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        Value::Object(ref object) if object.get("kind").and_then(Value::as_str) == Some("List") => {
            object.get("items").and_then(Value::as_array).cloned().unwrap_or_default()
        }
        other => vec![other],
    }
}

fn first_line(text: &str) -> String {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or("").trim().to_string();
    match lines.next() {
        Some(second) if !second.trim().starts_with("-->") => format!("{first} ({})", second.trim()),
        _ => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_multi_document_yaml_and_keeps_indexes() {
        let text = "---\na: 1\n---\n# only a comment\n---\nb: [\n--- # next\nc: 3\n";
        let docs = parse_documents(Path::new("x.yaml"), text).unwrap();
        let summary: Vec<(usize, bool)> = docs.iter().map(|d| (d.index, d.value.is_ok())).collect();
        assert_eq!(summary, vec![(0, true), (2, false), (3, true)]);
    }

    #[test]
    fn json_lists_are_flattened() {
        let docs = parse_documents(Path::new("x.json"), r#"{"kind":"List","items":[{"a":1},{"b":2}]}"#).unwrap();
        assert_eq!(docs.len(), 2);
    }
}
