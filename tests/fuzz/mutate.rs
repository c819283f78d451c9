//! Structure-aware mutations of seed documents: edits of the parsed JSON/YAML value
//! (replace, remove, insert, graft, wrap, huge strings) followed by byte-level edits
//! of the rendered text (bit flips, truncation, deletion, repetition, inserted tokens:
//! deep nesting, huge numbers, invalid UTF-8, YAML and front-matter syntax).
//!
//! Every parameter is a small number or string, so an input is cheap to clone and to
//! print; sizes (a 2 MiB string, 100,000 brackets) are expanded only when applied.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// A value to put somewhere in the document.
#[derive(Clone, Debug)]
pub enum Leaf {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    /// `len` bytes of `ch` (a huge string).
    Long {
        len: usize,
        ch: char,
    },
    EmptyArray,
    EmptyObject,
    /// `depth` nested arrays (kept shallow: deeper nesting is a text token).
    Nested {
        depth: usize,
    },
}

/// One edit of the parsed document; node numbers are taken modulo the node count,
/// in pre-order.
#[derive(Clone, Debug)]
pub enum Edit {
    Set { at: usize, to: Leaf },
    Remove { at: usize },
    Insert { at: usize, key: String, value: Leaf },
    Graft { from: usize, to: usize },
    Wrap { at: usize, depth: usize },
}

/// A fragment spliced into the text.
#[derive(Clone, Debug)]
pub enum Token {
    Dict(usize),
    Bytes(Vec<u8>),
    /// A number with this many digits.
    Digits(usize),
    /// `depth` copies of an opening bracket (`[`, `{"a":`, `- `, `a:\n `…).
    Open {
        kind: usize,
        depth: usize,
    },
}

/// One edit of the rendered text; positions are taken modulo the length.
#[derive(Clone, Debug)]
pub enum ByteEdit {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Insert { at: usize, token: Token },
    Delete { at: usize, len: usize },
    Truncate { at: usize },
    Repeat { at: usize, len: usize, times: usize },
}

/// One fuzz input: which seed, how its structure changes, how its text changes.
#[derive(Clone, Debug)]
pub struct Input {
    pub seed: usize,
    pub edits: Vec<Edit>,
    pub bytes: Vec<ByteEdit>,
}

/// Fragments that parsers of JSON, YAML, front matter and journals treat specially.
const DICTIONARY: &[&str] = &[
    "null",
    "true",
    "-0",
    "1e999999",
    "-1e999999",
    "18446744073709551616",
    "-9223372036854775809",
    "0.000000000000000000000000000000000000000000000001",
    "NaN",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"\\udfff\\ud800\"",
    "\\",
    "\"",
    "{}",
    "[]",
    "{\"\":",
    ",",
    ":",
    "\n",
    "\r\n",
    "\t",
    "\n---\n",
    "---\n",
    "\n...\n",
    "- ",
    "? ",
    "&a ",
    "*a",
    "<<: *a\n",
    "!!binary ",
    "!!str ",
    "!custom ",
    "%YAML 1.2\n",
    "|\n",
    ">-\n",
    "#",
    "a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c]\n",
    "\u{feff}",
    "\u{202e}",
    "tool-call:",
    "tool-call:call-1 \"",
    "match:\n  - ",
    "name: ",
    "description: ",
    "apiVersion: akritas.io/v1alpha1\n",
    "kind: List\nitems:\n",
    "\"status\": {}",
    "\"version\": 1",
    "\"seq\":",
    "\"prev\":\"",
    "\"hash\":\"",
    "journal.torn_tail_truncated",
    "2026-02-30T25:61:61Z",
    "9999-12-31T23:59:59Z",
    "-000001-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
];

/// Short strings that mean something to the parsers.
const WORDS: &[&str] =
    &["", " ", "a", "firing", "resolved", "critical", "tool-call:call-1", "read", "Skill", "\u{0}", "\u{10ffff}"];

/// Opening fragments for deep nesting, by `Token::Open::kind`.
const OPENERS: &[&str] = &["[", "{\"a\":", "- ", "a:\n ", "[{", "\"\\"];

fn leaf() -> impl Strategy<Value = Leaf> {
    prop_oneof![
        3 => Just(Leaf::Null),
        3 => any::<bool>().prop_map(Leaf::Bool),
        3 => prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(-1i64), Just(0i64), any::<i64>()].prop_map(Leaf::Int),
        2 => prop_oneof![Just(f64::MAX), Just(f64::MIN_POSITIVE), Just(-0.0), any::<f64>()].prop_map(Leaf::Float),
        6 => any::<String>().prop_map(Leaf::Text),
        4 => prop::sample::select(WORDS).prop_map(|w| Leaf::Text(w.to_string())),
        1 => (prop_oneof![9 => 256usize..70_000, 1 => 1_000_000usize..2_200_000], any::<char>())
            .prop_map(|(len, ch)| Leaf::Long { len, ch }),
        2 => Just(Leaf::EmptyArray),
        2 => Just(Leaf::EmptyObject),
        1 => (1usize..64).prop_map(|depth| Leaf::Nested { depth }),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        5 => (any::<usize>(), leaf()).prop_map(|(at, to)| Edit::Set { at, to }),
        3 => any::<usize>().prop_map(|at| Edit::Remove { at }),
        3 => (any::<usize>(), "[a-z_]{0,12}", leaf()).prop_map(|(at, key, value)| Edit::Insert { at, key, value }),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(from, to)| Edit::Graft { from, to }),
        1 => (any::<usize>(), 1usize..48).prop_map(|(at, depth)| Edit::Wrap { at, depth }),
    ]
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![
        6 => (0..DICTIONARY.len()).prop_map(Token::Dict),
        3 => prop::collection::vec(any::<u8>(), 1..8).prop_map(Token::Bytes),
        1 => prop_oneof![20usize..400, 4000usize..20_000].prop_map(Token::Digits),
        1 => (0..OPENERS.len(), prop_oneof![100usize..1_000, 10_000usize..100_000])
            .prop_map(|(kind, depth)| Token::Open { kind, depth }),
    ]
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        4 => (any::<usize>(), 0u8..8).prop_map(|(at, bit)| ByteEdit::Flip { at, bit }),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| ByteEdit::Set { at, byte }),
        6 => (any::<usize>(), token()).prop_map(|(at, token)| ByteEdit::Insert { at, token }),
        3 => (any::<usize>(), 1usize..64).prop_map(|(at, len)| ByteEdit::Delete { at, len }),
        2 => any::<usize>().prop_map(|at| ByteEdit::Truncate { at }),
        1 => (any::<usize>(), 1usize..256, 2usize..64).prop_map(|(at, len, times)| ByteEdit::Repeat { at, len, times }),
    ]
}

/// One to four structural edits.
pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(edit(), 1..5)
}

/// Up to three byte edits.
pub fn byte_edits() -> impl Strategy<Value = Vec<ByteEdit>> {
    prop::collection::vec(byte_edit(), 0..4)
}

/// Inputs over `seeds` seeds: about one in six is a seed unchanged (valid seeds must stay valid).
pub fn input(seeds: usize) -> impl Strategy<Value = Input> {
    let edits = prop_oneof![1 => Just(Vec::new()), 3 => prop::collection::vec(edit(), 1..5)];
    let bytes = prop_oneof![2 => Just(Vec::new()), 3 => prop::collection::vec(byte_edit(), 1..4)];
    (0..seeds.max(1), edits, bytes).prop_map(|(seed, edits, bytes)| Input { seed, edits, bytes })
}

impl Leaf {
    fn value(&self) -> Value {
        match self {
            Leaf::Null => Value::Null,
            Leaf::Bool(b) => Value::Bool(*b),
            Leaf::Int(i) => Value::from(*i),
            Leaf::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Leaf::Text(s) => Value::String(s.clone()),
            Leaf::Long { len, ch } => Value::String(std::iter::repeat_n(*ch, len / ch.len_utf8()).collect()),
            Leaf::EmptyArray => Value::Array(Vec::new()),
            Leaf::EmptyObject => Value::Object(Map::new()),
            Leaf::Nested { depth } => (0..*depth).fold(Value::Null, |inner, _| Value::Array(vec![inner])),
        }
    }
}

fn count(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(count).sum(),
        _ => 0,
    }
}

/// The `n`-th node in pre-order (0 is the root).
fn node_mut(value: &mut Value, n: usize) -> Option<&mut Value> {
    fn walk<'v>(value: &'v mut Value, n: &mut usize) -> Option<&'v mut Value> {
        if *n == 0 {
            return Some(value);
        }
        *n -= 1;
        let children: Vec<&'v mut Value> = match value {
            Value::Array(items) => items.iter_mut().collect(),
            Value::Object(map) => map.values_mut().collect(),
            _ => return None,
        };
        for child in children {
            if let Some(found) = walk(child, n) {
                return Some(found);
            }
        }
        None
    }
    let mut n = n;
    walk(value, &mut n)
}

/// Removes the `n`-th node (n ≥ 1) from its parent.
fn remove(value: &mut Value, n: usize) {
    fn walk(value: &mut Value, n: &mut usize) -> bool {
        match value {
            Value::Array(items) => {
                for i in 0..items.len() {
                    if *n == 0 {
                        items.remove(i);
                        return true;
                    }
                    *n -= 1;
                    if walk(&mut items[i], n) {
                        return true;
                    }
                }
            }
            Value::Object(map) => {
                let keys: Vec<String> = map.keys().cloned().collect();
                for key in keys {
                    if *n == 0 {
                        map.remove(&key);
                        return true;
                    }
                    *n -= 1;
                    if let Some(child) = map.get_mut(&key)
                        && walk(child, n)
                    {
                        return true;
                    }
                }
            }
            _ => {}
        }
        false
    }
    let mut n = n - 1;
    walk(value, &mut n);
}

/// Applies the structural edits.
pub fn edit_value(value: &mut Value, edits: &[Edit]) {
    for edit in edits {
        let nodes = count(value);
        match edit {
            Edit::Set { at, to } => {
                if let Some(node) = node_mut(value, at % nodes) {
                    *node = to.value();
                }
            }
            Edit::Remove { at } => {
                if nodes > 1 {
                    remove(value, 1 + at % (nodes - 1));
                }
            }
            Edit::Insert { at, key, value: leaf } => match node_mut(value, at % nodes) {
                Some(Value::Object(map)) => {
                    map.insert(key.clone(), leaf.value());
                }
                Some(Value::Array(items)) => items.push(leaf.value()),
                Some(other) => *other = leaf.value(),
                None => {}
            },
            Edit::Graft { from, to } => {
                let copy = node_mut(value, from % nodes).cloned();
                if let (Some(copy), Some(node)) = (copy, node_mut(value, to % nodes)) {
                    match node {
                        Value::Array(items) => items.push(copy),
                        other => *other = copy,
                    }
                }
            }
            Edit::Wrap { at, depth } => {
                if let Some(node) = node_mut(value, at % nodes) {
                    let inner = node.take();
                    *node = (0..*depth).fold(inner, |inner, _| Value::Array(vec![inner]));
                }
            }
        }
    }
}

impl Token {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Token::Dict(i) => DICTIONARY[i % DICTIONARY.len()].as_bytes().to_vec(),
            Token::Bytes(b) => b.clone(),
            Token::Digits(n) => {
                let mut digits = vec![b'9'; *n];
                digits[0] = b'1';
                digits
            }
            Token::Open { kind, depth } => OPENERS[kind % OPENERS.len()].repeat(*depth).into_bytes(),
        }
    }
}

/// Applies the byte edits.
pub fn edit_bytes(text: &mut Vec<u8>, edits: &[ByteEdit]) {
    for edit in edits {
        let len = text.len();
        let pos = |at: usize| if len == 0 { 0 } else { at % (len + 1) };
        match edit {
            ByteEdit::Flip { at, bit } if len > 0 => text[at % len] ^= 1 << (bit % 8),
            ByteEdit::Set { at, byte } if len > 0 => text[at % len] = *byte,
            ByteEdit::Insert { at, token } => {
                let at = pos(*at);
                text.splice(at..at, token.bytes());
            }
            ByteEdit::Delete { at, len: n } => {
                let at = pos(*at);
                let end = (at + n).min(len);
                text.drain(at..end);
            }
            ByteEdit::Truncate { at } => text.truncate(pos(*at)),
            ByteEdit::Repeat { at, len: n, times } => {
                let at = pos(*at);
                let end = (at + n).min(len);
                let slice = text[at..end].to_vec();
                let repeated = slice.repeat(*times);
                text.splice(end..end, repeated);
            }
            _ => {}
        }
    }
}

/// How a seed is rendered after structural edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    Json,
    Yaml,
    /// Text only: structural edits do not apply.
    Text,
}

/// A seed document of a target's corpus.
#[derive(Clone, Debug)]
pub struct Seed {
    pub name: String,
    pub text: String,
    pub syntax: Syntax,
}

/// The bytes `input` makes of its seed.
pub fn render(seeds: &[Seed], input: &Input) -> Vec<u8> {
    let seed = &seeds[input.seed % seeds.len()];
    let mut text = if input.edits.is_empty() || seed.syntax == Syntax::Text {
        seed.text.clone().into_bytes()
    } else {
        let parsed = match seed.syntax {
            Syntax::Json => serde_json::from_str::<Value>(&seed.text).ok(),
            _ => yaml_documents(&seed.text),
        };
        match parsed {
            Some(mut value) => {
                edit_value(&mut value, &input.edits);
                match (seed.syntax, value) {
                    (Syntax::Yaml, Value::Array(documents)) => documents
                        .iter()
                        .map(|d| serde_saphyr::to_string(d).unwrap_or_else(|_| d.to_string()))
                        .collect::<Vec<_>>()
                        .join("---\n"),
                    (_, value) => value.to_string(),
                }
                .into_bytes()
            }
            None => seed.text.clone().into_bytes(),
        }
    };
    edit_bytes(&mut text, &input.bytes);
    text
}

/// The documents of a YAML stream as one array (the root the structural edits start from).
fn yaml_documents(text: &str) -> Option<Value> {
    let mut documents = Vec::new();
    let mut current = String::new();
    for line in text.lines().chain(["---"]) {
        if line.trim_end() == "---" {
            if !current.trim().is_empty() {
                documents.push(serde_saphyr::from_str::<Value>(&current).ok()?);
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    Some(Value::Array(documents))
}

/// Whether `input` leaves its seed as it is.
pub fn is_unchanged(input: &Input) -> bool {
    input.edits.is_empty() && input.bytes.is_empty()
}

/// The seed `input` starts from.
pub fn seed<'s>(seeds: &'s [Seed], input: &Input) -> &'s Seed {
    &seeds[input.seed % seeds.len()]
}

impl Seed {
    /// Whether the seed's path contains one of `parts`.
    pub fn is_named(&self, parts: &[&str]) -> bool {
        parts.iter().any(|p| self.name.contains(p))
    }
}
