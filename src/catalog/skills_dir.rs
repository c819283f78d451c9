//! The standalone skill layout: `<dir>/<name>/SKILL.md`, optionally with front
//! matter (`name`, `description`, `match`). Each skill becomes a `Skill` manifest
//! and goes through the same validation as any other resource.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::resources::API_VERSION;

/// Largest SKILL.md.
pub const MAX_SKILL_BYTES: u64 = 64 * 1024;
/// Largest total of all SKILL.md files.
pub const MAX_TOTAL_BYTES: u64 = 512 * 1024;
/// Most skills in a directory.
pub const MAX_SKILLS: usize = 128;
/// Namespace given to directory skills.
pub const NAMESPACE: &str = "default";

/// The skills shipped with Akritas (`skills/` of the repository), built into the binary: what
/// a host started outside the repository, or from the image without the directory, loads when
/// `skills_dir` is left at its default and `skills` is not a directory.
pub const BUILT_IN: [(&str, &str); 7] = [
    ("alert-flapping", include_str!("../../skills/alert-flapping/SKILL.md")),
    ("kubernetes-crashloop", include_str!("../../skills/kubernetes-crashloop/SKILL.md")),
    ("kubernetes-node-not-ready", include_str!("../../skills/kubernetes-node-not-ready/SKILL.md")),
    ("node-disk-pressure", include_str!("../../skills/node-disk-pressure/SKILL.md")),
    ("persistent-volume-filling", include_str!("../../skills/persistent-volume-filling/SKILL.md")),
    ("postgresql", include_str!("../../skills/postgresql/SKILL.md")),
    ("tls-certificate-expiry", include_str!("../../skills/tls-certificate-expiry/SKILL.md")),
];

/// Where the directory skills come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkillSource {
    /// `<dir>/<name>/SKILL.md`, watched.
    Dir(PathBuf),
    /// The skills built into the binary ([`BUILT_IN`]).
    BuiltIn,
}

/// The built-in skills, as if read from a directory named `(built-in)`.
pub fn built_in() -> Vec<SkillFile> {
    BUILT_IN
        .iter()
        .map(|(name, text)| SkillFile {
            path: Path::new("(built-in)").join(name).join("SKILL.md"),
            name: (*name).to_string(),
            manifest: parse(name, text),
        })
        .collect()
}

/// One SKILL.md read from disk: the manifest it stands for, or why it cannot be used.
#[derive(Debug)]
pub struct SkillFile {
    /// Path of SKILL.md (or of the offending entry).
    pub path: PathBuf,
    /// Directory name (the skill name).
    pub name: String,
    /// The equivalent `Skill` manifest.
    pub manifest: Result<Value, String>,
}

/// Reads every skill under `dir`. A missing directory is an error the caller decides on.
pub fn read(dir: &Path) -> Result<Vec<SkillFile>, String> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: cannot read the skills directory: {e}", dir.display()))?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    let mut skills = Vec::new();
    let mut total = 0u64;
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_file() {
            continue;
        }
        let skill_path = path.join("SKILL.md");
        let manifest = if kind.is_symlink() {
            Err("skill directories must not be symlinks".to_string())
        } else if skills.len() >= MAX_SKILLS {
            Err(format!("more than {MAX_SKILLS} skills in {}", dir.display()))
        } else {
            read_skill(&skill_path, &name, &mut total)
        };
        skills.push(SkillFile { path: skill_path, name, manifest });
    }
    Ok(skills)
}

fn read_skill(path: &Path, name: &str, total: &mut u64) -> Result<Value, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot read SKILL.md: {e}"))?;
    if !meta.is_file() {
        return Err("SKILL.md must be a regular file".into());
    }
    if meta.len() > MAX_SKILL_BYTES {
        return Err(format!("SKILL.md is {} bytes; the limit is {MAX_SKILL_BYTES}", meta.len()));
    }
    *total += meta.len();
    if *total > MAX_TOTAL_BYTES {
        return Err(format!("skills exceed {MAX_TOTAL_BYTES} bytes in total"));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read SKILL.md: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| "SKILL.md is not valid UTF-8".to_string())?;
    parse(name, &text)
}

/// Turns a SKILL.md body into a `Skill` manifest. Front matter starts at the first
/// line `---` and ends at the next `---`; allowed keys: `name` (must equal the
/// directory), `description`, `match` (a list of `- item` lines).
pub fn parse(dir_name: &str, text: &str) -> Result<Value, String> {
    let text = text.replace("\r\n", "\n");
    let mut description = None;
    let mut selectors: Vec<String> = Vec::new();
    let body = match text.strip_prefix("---\n") {
        None => text.as_str(),
        Some(rest) => {
            let end = rest
                .find("\n---\n")
                .map(|i| (i, i + 5))
                .or_else(|| rest.strip_suffix("\n---").map(|r| (r.len(), rest.len())));
            let (end, body_start) = end.ok_or("front matter is not closed by a line `---`")?;
            let mut in_match = false;
            for (n, line) in rest[..end].lines().enumerate() {
                let line_no = n + 2;
                let trimmed = line.trim();
                if trimmed.is_empty() || trimmed.starts_with('#') {
                    continue;
                }
                if let Some(item) = trimmed.strip_prefix("- ") {
                    if !in_match {
                        return Err(format!("front matter line {line_no}: list item outside `match:`"));
                    }
                    selectors.push(unquote(item).to_lowercase());
                    continue;
                }
                in_match = false;
                let (key, value) =
                    trimmed.split_once(':').ok_or(format!("front matter line {line_no}: expected `key: value`"))?;
                let value = unquote(value.trim());
                match key.trim() {
                    "name" if value == dir_name => {}
                    "name" => {
                        return Err(format!("front matter name {value:?} must equal the directory name {dir_name:?}"));
                    }
                    "description" => description = Some(value.to_string()),
                    "match" if value.is_empty() => in_match = true,
                    "match" => {
                        return Err(format!("front matter line {line_no}: `match:` takes `- item` lines below it"));
                    }
                    other => {
                        return Err(format!(
                            "front matter line {line_no}: unknown key {other:?} (allowed: name, description, match)"
                        ));
                    }
                }
            }
            &rest[body_start..]
        }
    };
    let content = body.trim();
    if content.is_empty() {
        return Err("SKILL.md has no content".into());
    }
    let mut spec = json!({ "content": content });
    if let Some(description) = description {
        spec["description"] = json!(description);
    }
    if !selectors.is_empty() {
        selectors.sort();
        spec["match"] = json!(selectors);
    }
    Ok(json!({
        "apiVersion": API_VERSION,
        "kind": "Skill",
        "metadata": {"name": dir_name, "namespace": NAMESPACE},
        "spec": spec,
    }))
}

fn unquote(value: &str) -> &str {
    value.trim().trim_matches(|c| c == '"' || c == '\'')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_skills_are_the_repositorys_skills_directory() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
        let on_disk = read(&dir).unwrap();
        let names: Vec<_> = on_disk.iter().map(|f| f.name.as_str()).collect();
        let listed: Vec<_> = BUILT_IN.iter().map(|(name, _)| *name).collect();
        assert_eq!(listed, names, "src/catalog/skills_dir.rs BUILT_IN lists every skill under skills/, in order");
        for (file, built) in on_disk.iter().zip(built_in()) {
            assert_eq!(file.manifest.as_ref().unwrap(), built.manifest.as_ref().unwrap(), "{}", file.name);
        }
    }

    #[test]
    fn front_matter_becomes_the_spec() {
        let text = "---\nname: postgresql\ndescription: \"PG checks\"\n# comment\nmatch:\n  - Postgres\n  - postgresql\n---\n# Body\nCheck locks.\n";
        let manifest = parse("postgresql", text).unwrap();
        assert_eq!(manifest["spec"]["description"], "PG checks");
        assert_eq!(manifest["spec"]["match"], json!(["postgres", "postgresql"]));
        assert_eq!(manifest["spec"]["content"], "# Body\nCheck locks.");
    }

    #[test]
    fn no_front_matter_uses_the_whole_file() {
        let manifest = parse("redis", "Redis guidance\r\n").unwrap();
        assert_eq!(manifest["spec"]["content"], "Redis guidance");
        assert!(manifest["spec"].get("match").is_none());
    }

    #[test]
    fn front_matter_errors_are_precise() {
        let cases = [
            ("---\nname: other\n---\nx", "front matter name \"other\" must equal the directory name \"pg\""),
            (
                "---\nowner: me\n---\nx",
                "front matter line 2: unknown key \"owner\" (allowed: name, description, match)",
            ),
            ("---\n- a\n---\nx", "front matter line 2: list item outside `match:`"),
            ("---\nmatch: a\n---\nx", "front matter line 2: `match:` takes `- item` lines below it"),
            ("---\nname: pg\nx", "front matter is not closed by a line `---`"),
            ("---\nname: pg\n---\n  \n", "SKILL.md has no content"),
            ("---\nname pg\n---\nx", "front matter line 2: expected `key: value`"),
        ];
        for (text, expected) in cases {
            assert_eq!(parse("pg", text).unwrap_err(), expected);
        }
    }
}
