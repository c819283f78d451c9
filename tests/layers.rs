//! The module layers of `src/` (docs/architecture.md): every `crate::`, `super::`,
//! `self::` and child-module path in non-test code is resolved to the file it names;
//! a module may import only from its own layer or the layers below, and neither
//! modules nor files may import each other in a cycle (a directory module naming
//! its own children is their facade, not an import: children may use what their
//! `mod.rs` defines). Also keeps files small: a
//! file's non-test code stays under 600 lines unless its header says why
//! (a `//! Size:` line), and no doc comment only repeats a name (`/// Why.`).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Leaves first. A module imports only from its own layer (without cycles) or lower.
const LAYERS: &[&[&str]] = &[
    &[
        "resources",
        "text",
        "suggest",
        "language",
        "outbound",
        "tenancy",
        "telemetry",
        "redact",
        "egress",
        "slots",
        "severity",
        "ids",
        "cron",
    ],
    &["journal", "llm", "tools", "catalog", "config", "investigation"],
    &["audit", "engine", "mcp", "knowledge", "kubernetes", "victoriametrics"],
    &["alerts", "notify", "change", "bots", "replay", "eval", "schedules"],
    &["operator", "web"],
    &["app"],
    &["cli"],
];

const MAX_LINES: usize = 600;

struct SourceFile {
    /// Module path inside the crate (`["engine", "run"]`); empty for the crate root.
    module: Vec<String>,
    /// Non-test code with comments and literals removed.
    code: String,
    /// Lines of non-test code.
    lines: usize,
    /// Whether the header explains a longer file.
    size_note: bool,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Removes comments, string and character literals (keeping newlines).
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char(chars.get(i.wrapping_sub(1))) {
            // Raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some('\n') => out.push('\n'),
                    _ => {}
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                } else if chars[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// The `#[cfg(test)]` items of stripped code, as byte ranges to cut: a whole test module, or
/// only the attribute of another test-only item. A test module declared as a file
/// (`#[cfg(test)] mod tests;`) comes with its name.
fn test_items(code: &str) -> Vec<(Range<usize>, Option<String>)> {
    const ATTRIBUTE: &str = "#[cfg(test)]";
    let mut items = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find(ATTRIBUTE) {
        let at = from + found;
        let after = code[at + ATTRIBUTE.len()..].trim_start();
        let Some(item) = after.strip_prefix("mod ") else {
            // A test-only item other than a module: drop the attribute only.
            from = at + ATTRIBUTE.len();
            items.push((at..from, None));
            continue;
        };
        let name: String = item.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let body = item[name.len()..].trim_start();
        let body_at = code.len() - body.len();
        if body.starts_with(';') {
            from = body_at + 1;
            items.push((at..from, Some(name)));
            continue;
        }
        // Skip the balanced braces of the inline module.
        let mut depth = 0usize;
        let mut end = body.len();
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        from = body_at + end;
        items.push((at..from, None));
    }
    items
}

/// Cuts `#[cfg(test)]` modules out of stripped code; returns the code and the
/// names of test modules declared as files (`#[cfg(test)] mod tests;`).
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(code.len());
    let mut test_files = Vec::new();
    let mut kept = 0;
    for (cut, file) in test_items(code) {
        out.push_str(&code[kept..cut.start]);
        kept = cut.end;
        test_files.extend(file);
    }
    out.push_str(&code[kept..]);
    (out, test_files)
}

fn load() -> BTreeMap<PathBuf, SourceFile> {
    load_from(&src_dir())
}

/// The files of the crate whose root directory is `root` (its `lib.rs` there).
fn load_from(root: &Path) -> BTreeMap<PathBuf, SourceFile> {
    let mut paths = Vec::new();
    rust_files(root, &mut paths);
    let mut files = BTreeMap::new();
    let mut test_modules = BTreeSet::new();
    for path in paths {
        let relative = path.strip_prefix(root).expect("under the crate's root").with_extension("");
        let mut module: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let dir_module = matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main"));
        if dir_module {
            module.pop();
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        let (code, tests) = without_tests(&strip(&text));
        let parent = if dir_module { module.clone() } else { module[..module.len() - 1].to_vec() };
        for name in tests {
            let mut m = parent.clone();
            m.push(name);
            test_modules.insert(m);
        }
        let lines = code.lines().count();
        let size_note = text.lines().take(12).any(|l| l.trim_start().starts_with("//! Size:"));
        files.insert(path, SourceFile { module, code, lines, size_note });
    }
    files.retain(|_, f| !test_modules.iter().any(|t| f.module.starts_with(t)));
    files
}

/// Every path a file names: expanded `use` trees and inline `crate::`/`super::`/`self::` paths.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let tokens = tokenize(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "use" && (i == 0 || tokens[i - 1] != "::") {
            let start = i + 1;
            let mut end = start;
            while end < tokens.len() && tokens[end] != ";" {
                end += 1;
            }
            expand_tree(&tokens[start..end], &mut Vec::new(), &mut out);
            i = end;
        } else if matches!(tokens[i].as_str(), "crate" | "super" | "self") && (i == 0 || tokens[i - 1] != "::") {
            let mut path = vec![tokens[i].clone()];
            let mut j = i + 1;
            while j + 1 < tokens.len() && tokens[j] == "::" && is_ident(&tokens[j + 1]) {
                path.push(tokens[j + 1].clone());
                j += 2;
            }
            if path.len() > 1 {
                out.push(path);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn is_ident(token: &str) -> bool {
    token.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
}

fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".into());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// Expands a `use` tree (`a::{b, c::{d, e as f}, self}`) into full paths.
fn expand_tree(tokens: &[String], prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut depth = 0;
    let mut start = 0;
    // Split at top-level commas.
    let mut parts = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match t.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "," if depth == 0 => {
                parts.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tokens[start..]);
    for part in parts {
        let mut path = prefix.clone();
        let mut i = 0;
        while i < part.len() {
            let t = &part[i];
            if t == "{" {
                let inner = &part[i + 1..part.len() - 1];
                expand_tree(inner, &mut path, out);
                path.clear();
                break;
            } else if t == "as" || t == "*" {
                break;
            } else if t != "::" && t != "pub" && t != "(" && t != ")" && is_ident(t) {
                path.push(t.clone());
            }
            i += 1;
        }
        if !path.is_empty() && path != *prefix {
            if path.last().is_some_and(|s| s == "self") {
                path.pop();
            }
            out.push(path);
        }
    }
}

/// The file a path names, seen from the module `from`.
fn resolve(path: &[String], from: &SourceFile, modules: &BTreeMap<Vec<String>, PathBuf>) -> Option<PathBuf> {
    let mut base: Vec<String> = from.module.clone();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &path[1..];
        }
        Some("self") => rest = &path[1..],
        Some("super") => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            for _ in 0..supers {
                base.pop();
            }
            rest = &path[supers..];
        }
        Some(first) => {
            // A relative path: names a child module of this module, if any.
            if !modules.contains_key(&[from.module.clone(), vec![first.to_string()]].concat()) {
                return None;
            }
        }
        None => return None,
    }
    let mut full = base;
    full.extend(rest.iter().cloned());
    while !full.is_empty() {
        if let Some(file) = modules.get(&full) {
            return Some(file.clone());
        }
        full.pop();
    }
    None
}

struct Graph {
    files: BTreeMap<PathBuf, SourceFile>,
    edges: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

fn graph() -> Graph {
    graph_of(&src_dir())
}

fn graph_of(root: &Path) -> Graph {
    let files = load_from(root);
    let modules: BTreeMap<Vec<String>, PathBuf> = files.iter().map(|(p, f)| (f.module.clone(), p.clone())).collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (path, file) in &files {
        // The crate root declares every module; its `mod` lines are not imports.
        if file.module.is_empty() {
            continue;
        }
        for named in named_paths(&file.code) {
            // A module's own children are its parts: a `mod.rs` re-exporting or
            // calling them is their facade, not an import.
            if let Some(target) = resolve(&named, file, &modules)
                && target != *path
                && !files[&target].module.is_empty()
                && !files[&target].module.starts_with(&file.module)
            {
                edges.entry(path.clone()).or_default().insert(target);
            }
        }
    }
    Graph { files, edges }
}

fn top(file: &SourceFile) -> &str {
    file.module.first().map(String::as_str).unwrap_or("")
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Strongly connected components with more than one member (Tarjan).
fn cycles<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct State<N> {
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        on_stack: BTreeSet<N>,
        next: usize,
        found: Vec<Vec<N>>,
    }
    fn visit<N: Ord + Clone>(v: &N, edges: &BTreeMap<N, BTreeSet<N>>, s: &mut State<N>) {
        s.index.insert(v.clone(), s.next);
        s.low.insert(v.clone(), s.next);
        s.next += 1;
        s.stack.push(v.clone());
        s.on_stack.insert(v.clone());
        for w in edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, edges, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v.clone(), low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v.clone(), low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(&w);
                let done = w == *v;
                component.push(w);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(v, edges, &mut state);
        }
    }
    state.found
}

fn display(path: &Path) -> String {
    path.strip_prefix(src_dir()).map(|p| format!("src/{}", p.display())).unwrap_or_else(|_| path.display().to_string())
}

#[test]
fn every_module_has_a_layer() {
    let g = graph();
    let unknown: BTreeSet<&str> =
        g.files.values().map(top).filter(|m| !m.is_empty() && layer_of(m).is_none()).collect();
    assert!(unknown.is_empty(), "modules missing from LAYERS in tests/layers.rs: {unknown:?}");
}

/// The Layout of docs/architecture.md names every entry of `src/` (a module directory or
/// file, `lib.rs`, `main.rs`), and each module under the layer LAYERS gives it.
#[test]
fn the_architecture_layout_lists_every_module_in_its_layer() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
        .expect("docs/architecture.md");
    let layout = doc.split("\n## Layout\n").nth(1).expect("docs/architecture.md has a Layout section");
    let block = layout.split("```").nth(1).expect("the Layout's code block");
    let mut listed: BTreeMap<String, Option<usize>> = BTreeMap::new();
    let mut layer = None;
    for line in block.lines() {
        let mut words = line.split_whitespace().peekable();
        if words.peek() == Some(&"layer") {
            words.next();
            layer = Some(words.next().and_then(|n| n.parse::<usize>().ok()).expect("layer N"));
        } else if !line.starts_with(' ') {
            layer = None;
        }
        if let Some(entry) = words.next().and_then(|w| w.strip_prefix("src/")) {
            listed.insert(entry.trim_end_matches('/').to_string(), layer);
        }
    }
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(src_dir()).expect("read src") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !path.is_dir() && !name.ends_with(".rs") {
            continue;
        }
        let module = name.trim_end_matches(".rs");
        match listed.get(&name) {
            None => missing.push(format!("src/{name}{}", if path.is_dir() { "/" } else { "" })),
            Some(shown) if layer_of(module).is_some() => {
                assert_eq!(*shown, layer_of(module), "docs/architecture.md shows src/{name} in another layer")
            }
            Some(_) => {}
        }
    }
    assert!(missing.is_empty(), "docs/architecture.md's Layout misses {missing:?}");
}

#[test]
fn modules_import_only_from_their_layer_or_below() {
    let g = graph();
    let mut violations = Vec::new();
    for (from, targets) in &g.edges {
        let from_module = top(&g.files[from]);
        for to in targets {
            let to_module = top(&g.files[to]);
            if let (Some(a), Some(b)) = (layer_of(from_module), layer_of(to_module))
                && b > a
            {
                violations.push(format!(
                    "{} (layer {a}, {from_module}) imports {} (layer {b}, {to_module})",
                    display(from),
                    display(to)
                ));
            }
        }
    }
    assert!(violations.is_empty(), "imports against the layer order:\n{}", violations.join("\n"));
}

#[test]
fn no_import_cycle_between_modules() {
    let g = graph();
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in &g.edges {
        for to in targets {
            let (a, b) = (top(&g.files[from]), top(&g.files[to]));
            if a != b {
                modules.entry(a.to_string()).or_default().insert(b.to_string());
            }
        }
    }
    let found = cycles(&modules);
    assert!(found.is_empty(), "modules importing each other: {found:?}");
}

#[test]
fn no_import_cycle_between_files() {
    let g = graph();
    let found: Vec<Vec<String>> = cycles(&g.edges).iter().map(|c| c.iter().map(|p| display(p)).collect()).collect();
    assert!(found.is_empty(), "files importing each other: {found:#?}");
}

/// The testkit's harnesses import each other in no cycle either.
#[test]
fn no_import_cycle_between_the_testkits_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testkit/src");
    let g = graph_of(&root);
    assert!(g.files.len() > 20, "the testkit's files are read: {}", g.files.len());
    let shown = |p: &PathBuf| {
        p.strip_prefix(&root).map_or_else(|_| p.display().to_string(), |p| format!("testkit/src/{}", p.display()))
    };
    let found: Vec<Vec<String>> = cycles(&g.edges).iter().map(|c| c.iter().map(shown).collect()).collect();
    assert!(found.is_empty(), "testkit files importing each other: {found:#?}");
}

#[test]
fn files_stay_small_unless_their_header_says_why() {
    let g = graph();
    let long: Vec<String> = g
        .files
        .iter()
        .filter(|(_, f)| f.lines > MAX_LINES && !f.size_note)
        .map(|(p, f)| format!("{}: {} lines of non-test code", display(p), f.lines))
        .collect();
    assert!(long.is_empty(), "files above {MAX_LINES} lines without a `//! Size:` note:\n{}", long.join("\n"));
}

/// Whether a line is a doc comment of one capitalised word and a period (`/// Why.`), the
/// regex `^\s*/// [A-Z][a-z]+\.$`: a comment that only repeats the name it documents.
fn is_filler(line: &str) -> bool {
    let Some(word) = line.trim_start().strip_prefix("/// ").and_then(|w| w.strip_suffix('.')) else {
        return false;
    };
    let mut chars = word.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && !chars.as_str().is_empty()
        && chars.all(|c| c.is_ascii_lowercase())
}

/// The filler doc comments of a source file outside its test modules: 1-based line and text.
fn filler_lines(text: &str) -> Vec<(usize, String)> {
    // `strip` keeps every newline, so a line of the stripped code is the same line of `text`.
    let code = strip(text);
    let line_of = |at: usize| code[..at].matches('\n').count();
    let tests: Vec<Range<usize>> =
        test_items(&code).into_iter().map(|(cut, _)| line_of(cut.start)..line_of(cut.end) + 1).collect();
    text.lines()
        .enumerate()
        .filter(|(i, line)| is_filler(line) && !tests.iter().any(|t| t.contains(i)))
        .map(|(i, line)| (i + 1, line.trim().to_string()))
        .collect()
}

/// A doc comment says what a name cannot: what the value means, its unit, where it comes
/// from, who reads it. `/// Why.` on `error` or `/// Name.` on `name` says nothing.
#[test]
fn doc_comments_say_more_than_the_name() {
    let mut found = Vec::new();
    for path in load().keys() {
        let text = std::fs::read_to_string(path).expect("read source");
        for (line, comment) in filler_lines(&text) {
            found.push(format!("{}:{line}: {comment}", display(path)));
        }
    }
    assert!(
        found.is_empty(),
        "doc comments that only repeat the name (say what it means, its unit, its source or its reader):\n{}",
        found.join("\n")
    );
}

/// The checker itself: a planted upward import and a planted cycle are found.
#[test]
fn the_checker_finds_what_it_looks_for() {
    let code = strip(
        "use super::{a::B, c::{self, D as E}};\nfn f() { crate::x::y(); let s = \"crate::z::w\"; }\n// crate::q\n",
    );
    let paths = named_paths(&code);
    let names: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(names, ["super::a::B", "super::c", "super::c::D", "crate::x::y"]);
    let mut edges: BTreeMap<u8, BTreeSet<u8>> = BTreeMap::new();
    edges.entry(1).or_default().insert(2);
    edges.entry(2).or_default().insert(3);
    edges.entry(3).or_default().insert(1);
    edges.entry(3).or_default().insert(4);
    assert_eq!(cycles(&edges), vec![vec![1, 2, 3]]);
    let (code, files) =
        without_tests("fn a() {}\n#[cfg(test)]\nmod tests { use crate::cli::x; }\n#[cfg(test)]\nmod more;\n");
    assert!(!code.contains("cli"));
    assert_eq!(files, ["more"]);
    let text = "/// Why.\nstruct A {\n    /// Id.\n    id: u8,\n    /// The id, as the journal names it.\n}\n\
                #[cfg(test)]\nmod tests {\n    /// Case.\n}\n/// ID.\n/// A.\n//// Four.\n";
    assert_eq!(filler_lines(text), [(1, "/// Why.".to_string()), (3, "/// Id.".to_string())]);
}

/// Inside `alerts`, intake decides without I/O and knows neither the store nor the worker;
/// the store knows nothing of the worker.
#[test]
fn alerts_intake_and_store_do_not_reach_later_stages() {
    let alerts = src_dir().join("alerts");
    let rules = [("intake", &["store", "worker"][..]), ("store", &["worker"][..])];
    let mut offenders = Vec::new();
    for (stage, later) in rules {
        let mut files = Vec::new();
        rust_files(&alerts.join(stage), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for next in later {
                if text.contains(&format!("crate::alerts::{next}")) || text.contains(&format!("alerts::{{{next}")) {
                    offenders.push(format!("{} uses alerts::{next}", file.display()));
                }
            }
        }
    }
    assert!(offenders.is_empty(), "{offenders:#?}");
}
