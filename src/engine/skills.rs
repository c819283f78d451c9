//! Skill selection: exact facts from the request and from successful inventory or
//! CMDB results select host-supplied skills. Skills guide; they never add a tool.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock, Mutex};

use regex::Regex;
use serde_json::Value;
use sha2::Digest;

use crate::catalog::Catalog;
use crate::resources::{Kind, Resource};
use crate::tenancy::Scope;
use crate::tools::Registry;

/// Most skills one Run may select (automatically and by loading).
pub const MAX_SKILLS_PER_RUN: usize = 8;
/// Most facts taken from one source.
pub const MAX_FACTS: usize = 64;
const MAX_DEPTH: usize = 32;
const FACT_KEYS: &[&str] = &[
    // The alert's name: a skill lists the alerts it is about (`kubepodcrashlooping`).
    "alertname",
    "role",
    "roles",
    "service",
    "services",
    "technology",
    "technologies",
    "component",
    "components",
    "database",
    "databases",
    "db",
    "engine",
    "platform",
];

static FACT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?im)(?:^|[\s,{])["']?(?:alertname|role|service|technology|component|database|db|engine|platform)["']?\s*[:=]\s*["']?([a-z0-9][a-z0-9._-]{0,63})"#,
    )
    .unwrap_or_else(|_| unreachable!("static pattern"))
});

/// A skill as a Run sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillEntry {
    /// Name used by the tools and the audit.
    pub name: String,
    /// One-line description.
    pub description: Option<String>,
    /// Facts that select it.
    pub selectors: BTreeSet<String>,
    /// The guidance.
    pub content: Arc<str>,
    /// Where it came from (`Skill/<namespace>/<name>`).
    pub source: String,
    /// SHA-256 of the content, recorded with every selection.
    pub sha256: String,
}

/// The skills of a Catalog a Run of `scope` may use, by name. A name defined in
/// several of those namespaces is qualified as `<namespace>/<name>`.
pub fn skills_of(catalog: &Catalog, scope: &Scope) -> BTreeMap<String, SkillEntry> {
    let visible = || catalog.of_kind(Kind::Skill).filter(|(key, _)| scope.sees(&key.namespace));
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (key, _) in visible() {
        *counts.entry(key.name.as_str()).or_default() += 1;
    }
    let mut skills = BTreeMap::new();
    for (key, entry) in visible() {
        let (Resource::Skill(skill), Some(content)) = (entry.resource.as_ref(), catalog.skill_content(key)) else {
            continue;
        };
        let name = if counts.get(key.name.as_str()) == Some(&1) {
            key.name.clone()
        } else {
            format!("{}/{}", key.namespace, key.name)
        };
        let mut selectors: BTreeSet<String> = skill.spec.selectors.iter().map(|s| s.to_lowercase()).collect();
        if selectors.is_empty() {
            selectors.insert(key.name.clone());
        }
        let content = content.trim();
        skills.insert(
            name.clone(),
            SkillEntry {
                name,
                description: skill.spec.description.clone(),
                selectors,
                content: Arc::from(content),
                source: format!("Skill/{}/{}", key.namespace, key.name),
                sha256: hex::encode(sha2::Sha256::digest(content.as_bytes())),
            },
        );
    }
    skills
}

/// Facts stated as `key: value` / `key=value` in text (`service: postgresql`).
/// Free-form mentions ("postgres is slow", `host=pg01`) do not count.
pub fn facts_from_text(text: &str) -> BTreeSet<String> {
    FACT.captures_iter(text).filter_map(|c| c.get(1)).map(|m| m.as_str().to_lowercase()).take(MAX_FACTS).collect()
}

/// Facts from explicit request context (`{"service": "postgresql"}`).
pub fn facts_from_context(context: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut facts = BTreeSet::new();
    for (key, value) in context {
        if FACT_KEYS.contains(&key.to_lowercase().as_str()) {
            facts.extend(tokens(value));
        }
    }
    facts.into_iter().take(MAX_FACTS).collect()
}

/// Facts from the tools a Run may call: their names (`alerts.history`). A skill that lists a
/// tool's name is about reading what that tool returns (an alert's own history says whether
/// the alert is noise), so it applies to any Run that may call it, whatever the alert.
pub fn facts_from_tools(tools: &Registry) -> BTreeSet<String> {
    tools.definitions().iter().map(|spec| spec.name.as_str().to_lowercase()).collect()
}

/// Whether a tool is an inventory or CMDB source whose results may select skills.
pub fn is_inventory_tool(name: &str) -> bool {
    name.split(['.', '-', '_']).any(|part| part.eq_ignore_ascii_case("inventory") || part.eq_ignore_ascii_case("cmdb"))
}

/// Facts from a successful inventory/CMDB result: values under fact keys, and
/// `key: value` statements inside any string (MCP text content).
pub fn facts_from_output(output: &Value) -> BTreeSet<String> {
    let mut facts = BTreeSet::new();
    walk(output, None, 0, &mut facts);
    facts.into_iter().take(MAX_FACTS).collect()
}

fn walk(value: &Value, key: Option<&str>, depth: usize, facts: &mut BTreeSet<String>) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::String(text) => {
            if key.is_some_and(|k| FACT_KEYS.contains(&k.to_lowercase().as_str())) {
                facts.extend(tokens(text));
            }
            facts.extend(facts_from_text(text));
        }
        Value::Array(items) => items.iter().for_each(|item| walk(item, key, depth + 1, facts)),
        Value::Object(map) => map.iter().for_each(|(k, v)| walk(v, Some(k), depth + 1, facts)),
        _ => {}
    }
}

fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || matches!(c, '.' | '_' | '-')))
        .filter(|t| !t.is_empty() && t.len() <= 64)
        .map(str::to_lowercase)
}

/// Skills whose selectors equal one of the facts, in name order, at most
/// [`MAX_SKILLS_PER_RUN`].
pub fn select<'a>(skills: &'a BTreeMap<String, SkillEntry>, facts: &BTreeSet<String>) -> Vec<&'a SkillEntry> {
    skills.values().filter(|s| !s.selectors.is_disjoint(facts)).take(MAX_SKILLS_PER_RUN).collect()
}

/// A Run selected as many skills as it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Run already selected the maximum of {MAX_SKILLS_PER_RUN} skills")]
pub struct SkillCapReached;

/// The skills a Run selected so far (shared with the knowledge tools), in the order they were
/// selected: those the request names or its facts select come before those about a tool it
/// may call, so their conclusions' rules decide first ([`super::verdicts::apply`]).
#[derive(Clone, Default)]
pub struct RunSkills {
    inner: Arc<Mutex<Vec<SkillEntry>>>,
}

impl RunSkills {
    /// Adds a skill; `Ok(true)` when new, an error at the cap.
    pub fn add(&self, skill: &SkillEntry) -> Result<bool, SkillCapReached> {
        let mut selected = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if selected.iter().any(|s| s.name == skill.name) {
            return Ok(false);
        }
        if selected.len() >= MAX_SKILLS_PER_RUN {
            return Err(SkillCapReached);
        }
        selected.push(skill.clone());
        Ok(true)
    }

    /// Selected skills in the order they were selected.
    pub fn selected(&self) -> Vec<SkillEntry> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Names in order.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.inner.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|s| s.name.clone()).collect();
        names.sort();
        names
    }
}

/// The text appended to the system message for the selected skills.
pub fn injection(skills: &[SkillEntry]) -> Option<String> {
    if skills.is_empty() {
        return None;
    }
    let mut text = String::from(
        "The host selected the following operational skills. They are trusted guidance written by the operators; \
         they add no tools or permissions, and loading one is not evidence.",
    );
    for skill in skills {
        text.push_str(&format!(
            "\n\n<AKRITAS_SKILL name=\"{}\" source=\"{}\">\n{}\n</AKRITAS_SKILL>",
            skill.name, skill.source, skill.content
        ));
    }
    Some(text)
}

/// Title of the section of a skill that says what to conclude from what the tools showed.
pub const CONCLUSIONS_HEADING: &str = "Conclusions";
/// Most characters of one skill's conclusions given to the structuring step.
const MAX_CONCLUSIONS_CHARS: usize = 4000;

/// The `## Conclusions` section of each skill that has one (the heading at any level, up to the
/// next heading of the same or a higher level), for the step that turns the answer into a
/// status and an actionability: the rest of a skill (which checks to run) is no use there.
pub fn conclusions(skills: &[SkillEntry]) -> Option<String> {
    let sections: Vec<(&SkillEntry, String)> = skills
        .iter()
        .filter_map(|skill| section(&skill.content, CONCLUSIONS_HEADING).map(|text| (skill, text)))
        .collect();
    if sections.is_empty() {
        return None;
    }
    let mut text = String::from(
        "What the operators' skills say to conclude from such findings (trusted guidance; it is not evidence):",
    );
    for (skill, section) in sections {
        let section: String = section.chars().take(MAX_CONCLUSIONS_CHARS).collect();
        text.push_str(&format!("\n\n<AKRITAS_SKILL name=\"{}\">\n{}\n</AKRITAS_SKILL>", skill.name, section.trim()));
    }
    Some(text)
}

/// The line of the heading of the section titled `title` (case-insensitive, outside code
/// fences) and the line its section ends before (the next heading at its level or above, or
/// the end).
pub(super) fn section_lines(content: &str, title: &str) -> Option<(usize, usize)> {
    let mut open: Option<(usize, usize)> = None;
    let mut fenced = false;
    let mut count = 0;
    for (index, line) in content.lines().enumerate() {
        count = index + 1;
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let heading = (!fenced).then(|| heading(line)).flatten();
        match (open, heading) {
            (None, Some((depth, text))) if text.eq_ignore_ascii_case(title) => open = Some((index, depth)),
            (Some((start, level)), Some((depth, _))) if depth <= level => return Some((start, index)),
            _ => {}
        }
    }
    open.map(|(start, _)| (start, count))
}

/// The body of the markdown section titled `title` (case-insensitive), outside code fences.
pub(super) fn section(content: &str, title: &str) -> Option<String> {
    let (start, end) = section_lines(content, title)?;
    let body = content.lines().skip(start + 1).take(end - start - 1).collect::<Vec<_>>().join("\n");
    (!body.trim().is_empty()).then_some(body)
}

/// `(level, title)` of a markdown ATX heading.
fn heading(line: &str) -> Option<(usize, &str)> {
    let depth = line.chars().take_while(|c| *c == '#').count();
    let rest = &line[depth..];
    ((1..=6).contains(&depth) && (rest.is_empty() || rest.starts_with(' '))).then(|| (depth, rest.trim()))
}

#[cfg(test)]
impl SkillEntry {
    /// A resource skill as the engine's tests use it.
    pub(crate) fn fixture(name: &str, content: &str) -> Self {
        Self {
            name: name.into(),
            description: None,
            selectors: Default::default(),
            content: Arc::from(content),
            source: format!("Skill/ops/{name}"),
            sha256: "abc".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_alerts_name_selects_the_skills_that_list_it() {
        assert_eq!(
            facts_from_text(r#"{"labels": {"alertname": "KubePodCrashLooping", "pod": "a"}}"#),
            set(&["kubepodcrashlooping"])
        );
        let context = BTreeMap::from([("alertname".to_string(), "PostgresTooManyConnections".to_string())]);
        assert_eq!(facts_from_context(&context), set(&["postgrestoomanyconnections"]));
    }

    #[test]
    fn conclusions_are_the_section_so_titled_of_each_skill_that_has_one() {
        let with = SkillEntry::fixture(
            "crash",
            "# Crash loops\n1. read the pod\n## Conclusions\n- OOMKilled: raise the limit\n```\n# not a heading\n```\n### Detail\nkept\n## Next\ndropped",
        );
        let without = SkillEntry::fixture("plain", "# Plain\n## Steps\nonly steps");
        let text = conclusions(&[with, without.clone()]).unwrap();
        assert!(text.contains("<AKRITAS_SKILL name=\"crash\">\n- OOMKilled: raise the limit\n```\n# not a heading\n```\n### Detail\nkept\n</AKRITAS_SKILL>"), "{text}");
        assert!(!text.contains("read the pod") && !text.contains("dropped") && !text.contains("plain"), "{text}");
        assert_eq!(conclusions(&[without]), None);
        assert_eq!(conclusions(&[SkillEntry::fixture("empty", "## conclusions\n\n## Other\nx")]), None);
    }

    #[test]
    fn text_facts_need_an_explicit_key() {
        assert_eq!(
            facts_from_text("service: PostgreSQL\nrole=\"redis\", {db: mysql}"),
            set(&["mysql", "postgresql", "redis"])
        );
        assert!(facts_from_text("postgres is slow on host=pg01").is_empty());
        assert!(facts_from_text("myservice: x").is_empty());
    }

    #[test]
    fn context_facts_come_only_from_fact_keys() {
        let context = BTreeMap::from([
            ("Service".to_string(), "PostgreSQL".to_string()),
            ("host".to_string(), "redis-1".to_string()),
            ("db".to_string(), "mysql, sqlite".to_string()),
        ]);
        assert_eq!(facts_from_context(&context), set(&["mysql", "postgresql", "sqlite"]));
    }

    #[test]
    fn inventory_output_facts_come_from_keys_and_statements() {
        let output = json!({"host": "db1", "roles": ["postgresql", "backup agent"], "content": [{"type": "text", "text": "engine: timescaledb"}], "name": "redis"});
        assert_eq!(facts_from_output(&output), set(&["agent", "backup", "postgresql", "timescaledb"]));
        assert!(is_inventory_tool("inventory.host"));
        assert!(is_inventory_tool("mcp.cmdb-lookup"));
        assert!(!is_inventory_tool("linux.processes"));
        assert!(!is_inventory_tool("inventoryx.host"));
    }

    #[test]
    fn selection_is_exact_and_capped() {
        let mut skills = BTreeMap::new();
        for i in 0..10 {
            let name = format!("s{i}");
            skills.insert(
                name.clone(),
                SkillEntry {
                    name: name.clone(),
                    description: None,
                    selectors: set(&["db"]),
                    content: Arc::from("x"),
                    source: name,
                    sha256: String::new(),
                },
            );
        }
        assert_eq!(select(&skills, &set(&["db"])).len(), MAX_SKILLS_PER_RUN);
        assert!(select(&skills, &set(&["DB"])).is_empty());
        let state = RunSkills::default();
        for skill in skills.values().take(8) {
            assert_eq!(state.add(skill), Ok(true));
        }
        assert_eq!(state.add(&skills["s0"]), Ok(false));
        assert!(state.add(&skills["s9"]).unwrap_err().to_string().contains("maximum of 8"));

        // Selection order is kept (the conclusions of the first decide first); names are sorted.
        let state = RunSkills::default();
        for name in ["s5", "s1"] {
            assert_eq!(state.add(&skills[name]), Ok(true));
        }
        let order: Vec<String> = state.selected().into_iter().map(|s| s.name).collect();
        assert_eq!((order, state.names()), (vec!["s5".into(), "s1".into()], vec!["s1".into(), "s5".into()]));
    }
}
