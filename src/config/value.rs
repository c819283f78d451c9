//! Typed parsing of setting values from text (environment variables, flags)
//! and from JSON (the config file), plus per-setting validators.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::types::{parse_scopes, unscoped_namespace_key};
use super::{ApiKeyRef, LogFormat, SandboxMode, Scope};

/// A problem found in a JSON value; `suffix` extends the JSON path of the
/// setting (e.g. `[1].name`) when the problem is inside it.
#[derive(Debug)]
pub(crate) struct JsonErr {
    pub suffix: String,
    pub problem: String,
}

impl JsonErr {
    pub fn new(problem: String) -> Self {
        Self { suffix: String::new(), problem }
    }

    fn got(expect: &str, v: &Value) -> Self {
        Self::new(format!("expected {expect}, got {}", show(v)))
    }
}

/// Compact JSON rendering of a value for error messages, truncated.
pub(crate) fn show(v: &Value) -> String {
    crate::text::truncate_chars(&v.to_string(), 80, crate::text::ELLIPSIS)
}

/// A type a setting can have.
pub(crate) trait SettingValue: Sized {
    /// Parses an environment variable or flag value. `expect` describes the
    /// accepted values for error messages ("a positive integer").
    fn from_text(s: &str, expect: &str) -> Result<Self, String>;

    /// The value as text for help output; `none` when unset or empty.
    fn to_text(&self) -> String;

    /// Parses a value from the config file. By default a JSON string parsed
    /// like text.
    fn from_json(v: &Value, expect: &str) -> Result<Self, JsonErr> {
        match v.as_str() {
            Some(s) => Self::from_text(s, expect).map_err(|p| JsonErr::new(format!("{p}, got {}", show(v)))),
            None => Err(JsonErr::got(expect, v)),
        }
    }

    /// Parses the occurrences of a repeatable flag. Only lists support it;
    /// the error carries the offending text.
    fn from_items(items: &[String], expect: &str) -> Result<Self, (String, String)> {
        let joined = items.join(",");
        Err((joined, format!("expected {expect}; this flag takes a single value")))
    }
}

pub(crate) fn expected(expect: &str) -> String {
    format!("expected {expect}")
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        impl SettingValue for $t {
            fn from_text(s: &str, expect: &str) -> Result<Self, String> {
                s.parse::<$t>().map_err(|_| expected(expect))
            }
            fn to_text(&self) -> String {
                self.to_string()
            }
            fn from_json(v: &Value, expect: &str) -> Result<Self, JsonErr> {
                v.as_u64()
                    .and_then(|n| <$t>::try_from(n).ok())
                    .ok_or_else(|| JsonErr::got(expect, v))
            }
        }
    )*};
}
int_value!(u32, u64);

impl SettingValue for f64 {
    fn from_text(s: &str, expect: &str) -> Result<Self, String> {
        s.parse::<f64>().map_err(|_| expected(expect))
    }
    fn to_text(&self) -> String {
        self.to_string()
    }
    fn from_json(v: &Value, expect: &str) -> Result<Self, JsonErr> {
        v.as_f64().ok_or_else(|| JsonErr::got(expect, v))
    }
}

impl SettingValue for bool {
    fn from_text(s: &str, expect: &str) -> Result<Self, String> {
        match s {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(expected(expect)),
        }
    }
    fn to_text(&self) -> String {
        self.to_string()
    }
    fn from_json(v: &Value, expect: &str) -> Result<Self, JsonErr> {
        v.as_bool().ok_or_else(|| JsonErr::got(expect, v))
    }
}

impl SettingValue for String {
    fn from_text(s: &str, _expect: &str) -> Result<Self, String> {
        Ok(s.to_string())
    }
    fn to_text(&self) -> String {
        self.clone()
    }
}

impl SettingValue for Option<String> {
    /// Empty (or blank) text means "not set".
    fn from_text(s: &str, _expect: &str) -> Result<Self, String> {
        let t = s.trim();
        Ok((!t.is_empty()).then(|| t.to_string()))
    }
    fn to_text(&self) -> String {
        self.clone().unwrap_or_else(|| "none".to_string())
    }
    fn from_json(v: &Value, expect: &str) -> Result<Self, JsonErr> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) => Self::from_text(s, expect).map_err(JsonErr::new),
            _ => Err(JsonErr::got(expect, v)),
        }
    }
}

impl SettingValue for PathBuf {
    fn from_text(s: &str, _expect: &str) -> Result<Self, String> {
        Ok(PathBuf::from(s))
    }
    fn to_text(&self) -> String {
        self.display().to_string()
    }
}

impl SettingValue for SocketAddr {
    fn from_text(s: &str, expect: &str) -> Result<Self, String> {
        s.parse().map_err(|_| expected(expect))
    }
    fn to_text(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for LogFormat {
    fn from_text(s: &str, expect: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(expected(expect)),
        }
    }
    fn to_text(&self) -> String {
        self.as_str().to_string()
    }
}

impl SettingValue for SandboxMode {
    fn from_text(s: &str, expect: &str) -> Result<Self, String> {
        let modes = [SandboxMode::Auto, SandboxMode::Namespaces, SandboxMode::Landlock, SandboxMode::Off];
        modes.into_iter().find(|m| m.as_str() == s).ok_or_else(|| expected(expect))
    }
    fn to_text(&self) -> String {
        self.as_str().to_string()
    }
}

impl SettingValue for crate::llm::structured::Protocol {
    fn from_text(s: &str, expect: &str) -> Result<Self, String> {
        s.parse().map_err(|_| expected(expect))
    }
    fn to_text(&self) -> String {
        self.as_str().to_string()
    }
}

/// An element of a list setting.
pub(crate) trait ListItem: Sized {
    /// Parses one trimmed, non-empty item given as text.
    fn parse_item(s: &str) -> Result<Self, String>;
    /// Parses one element of a JSON array.
    fn from_json_item(v: &Value) -> Result<Self, JsonErr>;
    /// The item as text, as [`ListItem::parse_item`] reads it.
    fn to_item_text(&self) -> String;
}

impl ListItem for PathBuf {
    fn parse_item(s: &str) -> Result<Self, String> {
        Ok(PathBuf::from(s))
    }
    fn to_item_text(&self) -> String {
        self.display().to_string()
    }
    fn from_json_item(v: &Value) -> Result<Self, JsonErr> {
        match v.as_str() {
            Some(s) if !s.trim().is_empty() => Ok(PathBuf::from(s)),
            _ => Err(JsonErr::got("a non-empty path string", v)),
        }
    }
}

impl ListItem for String {
    fn parse_item(s: &str) -> Result<Self, String> {
        Ok(s.to_string())
    }
    fn to_item_text(&self) -> String {
        self.clone()
    }
    fn from_json_item(v: &Value) -> Result<Self, JsonErr> {
        match v.as_str() {
            Some(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            _ => Err(JsonErr::got("a non-empty string", v)),
        }
    }
}

impl ListItem for ApiKeyRef {
    fn parse_item(s: &str) -> Result<Self, String> {
        let Some((name, rest)) = s.split_once('=') else {
            return Err(format!("{s:?} is not NAME=ENV_VAR[:SCOPES][@NAMESPACE] (e.g. ops=AKRITAS_OPS_KEY:read+chat)"));
        };
        let (rest, namespace) = match rest.split_once('@') {
            Some((rest, namespace)) => (rest, Some(namespace.trim().to_string())),
            None => (rest, None),
        };
        let (env, scopes) = match (rest.split_once(':'), &namespace) {
            (Some((env, scopes)), _) => (env, parse_scopes(scopes)?),
            (None, None) => (rest, [Scope::Admin].into()),
            (None, Some(namespace)) => return Err(unscoped_namespace_key(name.trim(), rest.trim(), namespace)),
        };
        let key = ApiKeyRef { name: name.trim().to_string(), env: env.trim().to_string(), scopes, namespace };
        check_api_key_ref(&key)?;
        Ok(key)
    }

    fn to_item_text(&self) -> String {
        let scopes: Vec<&str> = self.scopes.iter().map(|s| s.as_str()).collect();
        let mut text = format!("{}={}:{}", self.name, self.env, scopes.join("+"));
        if let Some(namespace) = &self.namespace {
            text.push('@');
            text.push_str(namespace);
        }
        text
    }

    fn from_json_item(v: &Value) -> Result<Self, JsonErr> {
        let Some(obj) = v.as_object() else {
            return Err(JsonErr::got("an object like {\"name\": \"ops\", \"env\": \"AKRITAS_OPS_KEY\"}", v));
        };
        if let Some(k) = obj.keys().find(|k| !["name", "env", "scopes", "namespace"].contains(&k.as_str())) {
            return Err(JsonErr {
                suffix: format!(".{k}"),
                problem: "unknown field; known fields are: name, env, scopes, namespace".to_string(),
            });
        }
        let field = |k: &str| -> Result<String, JsonErr> {
            match obj.get(k) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => {
                    Err(JsonErr { suffix: format!(".{k}"), problem: format!("expected a string, got {}", show(other)) })
                }
                None => Err(JsonErr { suffix: format!(".{k}"), problem: "required field is missing".to_string() }),
            }
        };
        let scopes = match obj.get("scopes") {
            None if obj.get("namespace").is_some_and(|n| !n.is_null()) => {
                let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                return Err(JsonErr {
                    suffix: ".scopes".to_string(),
                    problem: unscoped_namespace_key(&text("name"), &text("env"), &text("namespace")),
                });
            }
            None => [Scope::Admin].into(),
            Some(Value::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|item| item.as_str().and_then(Scope::parse))
                .collect::<Option<BTreeSet<Scope>>>()
                .ok_or_else(|| JsonErr {
                    suffix: ".scopes".to_string(),
                    problem: format!("expected scopes from metrics, read, chat, admin, got {}", show(&obj["scopes"])),
                })?,
            Some(other) => {
                return Err(JsonErr {
                    suffix: ".scopes".to_string(),
                    problem: format!("expected a non-empty array of scopes, got {}", show(other)),
                });
            }
        };
        let namespace = match obj.get("namespace") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(JsonErr {
                    suffix: ".namespace".to_string(),
                    problem: format!("expected a namespace name, got {}", show(other)),
                });
            }
        };
        let key = ApiKeyRef { name: field("name")?, env: field("env")?, scopes, namespace };
        check_api_key_ref(&key).map_err(|p| JsonErr::new(format!("{p}, got {}", show(v))))?;
        Ok(key)
    }
}

/// Splits list text: empty/blank = empty list, `[...]` = JSON array of
/// strings (nothing may follow it), otherwise comma-separated. Items are
/// trimmed; empty items are errors.
pub(crate) fn split_list(s: &str) -> Result<Vec<String>, String> {
    let t = s.trim();
    if t.is_empty() {
        return Ok(Vec::new());
    }
    let raw: Vec<String> = if t.starts_with('[') {
        serde_json::from_str::<Vec<String>>(t).map_err(|e| format!("expected a JSON array of strings: {e}"))?
    } else {
        t.split(',').map(str::to_string).collect()
    };
    raw.iter()
        .enumerate()
        .map(|(i, item)| {
            let item = item.trim();
            if item.is_empty() {
                Err(format!("list item {} is empty; remove the extra comma or empty string", i + 1))
            } else {
                Ok(item.to_string())
            }
        })
        .collect()
}

impl<T: ListItem> SettingValue for Vec<T> {
    fn from_text(s: &str, _expect: &str) -> Result<Self, String> {
        split_list(s)?
            .iter()
            .enumerate()
            .map(|(i, item)| T::parse_item(item).map_err(|p| format!("list item {}: {p}", i + 1)))
            .collect()
    }

    fn to_text(&self) -> String {
        if self.is_empty() {
            return "none".to_string();
        }
        self.iter().map(ListItem::to_item_text).collect::<Vec<_>>().join(",")
    }

    fn from_json(v: &Value, expect: &str) -> Result<Self, JsonErr> {
        let Some(items) = v.as_array() else {
            return Err(JsonErr::got(&format!("a JSON array ({expect})"), v));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                T::from_json_item(item)
                    .map_err(|e| JsonErr { suffix: format!("[{i}]{}", e.suffix), problem: e.problem })
            })
            .collect()
    }

    fn from_items(items: &[String], _expect: &str) -> Result<Self, (String, String)> {
        items
            .iter()
            .map(|item| {
                let t = item.trim();
                if t.is_empty() {
                    return Err((item.clone(), "expected a non-empty value".to_string()));
                }
                T::parse_item(t).map_err(|p| (item.clone(), p))
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Validators: `fn(value, expect) -> Result<value, problem>`.

/// Accepts any value.
pub(crate) fn ok<T>(v: T, _expect: &str) -> Result<T, String> {
    Ok(v)
}

/// Integer range check.
pub(crate) fn u32_in<const LO: u32, const HI: u32>(v: u32, expect: &str) -> Result<u32, String> {
    if (LO..=HI).contains(&v) { Ok(v) } else { Err(expected(expect)) }
}

/// Integer range check.
pub(crate) fn u64_in<const LO: u64, const HI: u64>(v: u64, expect: &str) -> Result<u64, String> {
    if (LO..=HI).contains(&v) { Ok(v) } else { Err(expected(expect)) }
}

/// Finite temperature in 0.0..=2.0.
pub(crate) fn check_temperature(v: f64, expect: &str) -> Result<f64, String> {
    if v.is_finite() && (0.0..=2.0).contains(&v) { Ok(v) } else { Err(expected(expect)) }
}

/// Non-empty path.
pub(crate) fn non_empty_path(v: PathBuf, expect: &str) -> Result<PathBuf, String> {
    if v.as_os_str().is_empty() { Err(format!("path is empty; expected {expect}")) } else { Ok(v) }
}

static ENV_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z_][A-Za-z0-9_]*$").expect("static regex is valid"));
static MODEL_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$").expect("static regex is valid"));
static KEY_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9][a-z0-9._-]{0,63}$").expect("static regex is valid"));

/// Whether `s` is a valid environment variable name.
pub(crate) fn is_env_name(s: &str) -> bool {
    ENV_NAME.is_match(s)
}

/// Environment variable name (`^[A-Za-z_][A-Za-z0-9_]*$`).
pub(crate) fn check_env_name(v: String, expect: &str) -> Result<String, String> {
    if is_env_name(&v) {
        Ok(v)
    } else {
        Err(format!("{v:?} is not a valid environment variable name; expected {expect}"))
    }
}

/// The storage backend: `embedded` or `postgres`.
pub(crate) fn check_storage_backend(v: String, expect: &str) -> Result<String, String> {
    match v.trim() {
        "embedded" | "postgres" => Ok(v.trim().to_string()),
        other => Err(format!("{other:?} is not a storage backend; expected {expect}")),
    }
}

/// Served model name.
pub(crate) fn check_model(v: String, expect: &str) -> Result<String, String> {
    if v.len() <= 128 && MODEL_NAME.is_match(&v) { Ok(v) } else { Err(expected(expect)) }
}

/// Upstream model: trimmed, empty = none, no control characters.
pub(crate) fn check_upstream_model(v: Option<String>, expect: &str) -> Result<Option<String>, String> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) if s.len() > 256 || s.chars().any(char::is_control) => Err(expected(expect)),
        Some(s) => Ok(Some(s.to_string())),
    }
}

fn check_api_key_ref(k: &ApiKeyRef) -> Result<(), String> {
    if !KEY_NAME.is_match(&k.name) {
        return Err(format!(
            "api key name {:?} is invalid; expected 1-64 characters of a-z, 0-9, '.', '_', '-' starting with a letter or digit",
            k.name
        ));
    }
    if !is_env_name(&k.env) {
        return Err(format!(
            "{:?} is not a valid environment variable name for api key {:?}; expected e.g. AKRITAS_OPS_KEY",
            k.env, k.name
        ));
    }
    if k.scopes.is_empty() {
        return Err(format!("api key {:?} has no scope; give at least one of metrics, read, chat, admin", k.name));
    }
    if let Some(namespace) = &k.namespace
        && !is_namespace(namespace)
    {
        return Err(format!(
            "namespace {namespace:?} of api key {:?} is not a Kubernetes namespace name (lower-case letters, digits and '-', at most 63 characters)",
            k.name
        ));
    }
    Ok(())
}

/// A Kubernetes namespace name (RFC 1123 label).
pub(crate) fn is_namespace(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// At most 32 API keys with unique names.
pub(crate) fn check_api_keys(v: Vec<ApiKeyRef>, expect: &str) -> Result<Vec<ApiKeyRef>, String> {
    if v.len() > 32 {
        return Err(format!("{} api keys given; expected {expect}", v.len()));
    }
    for (i, k) in v.iter().enumerate() {
        if v[..i].iter().any(|o| o.name == k.name) {
            return Err(format!("duplicate api key name {:?}; give each key a unique name", k.name));
        }
    }
    Ok(v)
}

/// Normalised (trimmed, no trailing `/`, lower-case scheme and host)
/// absolute http(s) URL with a host and no userinfo, query or fragment.
pub(crate) fn normalize_http_url(raw: &str) -> Result<String, String> {
    let s = raw.trim().trim_end_matches('/');
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("URL contains spaces or control characters".to_string());
    }
    let Some((scheme, rest)) = s.split_once("://") else {
        return Err("not an absolute http:// or https:// URL".to_string());
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!("scheme {scheme:?} is not http or https"));
    }
    if rest.contains('?') {
        return Err("URL has a query string ('?'); remove it".to_string());
    }
    if rest.contains('#') {
        return Err("URL has a fragment ('#'); remove it".to_string());
    }
    if rest.contains('\\') {
        return Err("URL contains a backslash".to_string());
    }
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err("URL contains user credentials ('user@'); keep secrets in environment variables".to_string());
    }
    let (host, port) = if let Some(after) = authority.strip_prefix('[') {
        let Some((inside, tail)) = after.split_once(']') else {
            return Err("URL has an unterminated IPv6 host ('[')".to_string());
        };
        let ok = !inside.is_empty() && inside.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
        if !ok {
            return Err("URL has an invalid IPv6 host".to_string());
        }
        match tail {
            "" => (authority, None),
            t => match t.strip_prefix(':') {
                Some(p) => (&authority[..authority.len() - t.len()], Some(p)),
                None => return Err("URL has garbage after the IPv6 host".to_string()),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("URL has no host".to_string());
    }
    if !host.starts_with('[') && !host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_') {
        return Err(format!("URL host {host:?} is invalid"));
    }
    if let Some(p) = port
        && (p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err())
    {
        return Err(format!("URL port {p:?} is invalid"));
    }
    Ok(format!("{scheme}://{}{path}", authority.to_ascii_lowercase()))
}

/// Public URL of this service (see [`normalize_http_url`]); empty = none.
pub(crate) fn check_public_url(v: Option<String>, expect: &str) -> Result<Option<String>, String> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) => normalize_http_url(s).map(Some).map_err(|p| format!("{p}; expected {expect}")),
    }
}

/// Upstream OpenAI-compatible base URL ending in `/v1`.
pub(crate) fn check_base_url(v: String, expect: &str) -> Result<String, String> {
    let url = normalize_http_url(&v).map_err(|p| format!("{p}; expected {expect}"))?;
    let path_start = url.find("://").map_or(0, |i| i + 3);
    if !url[path_start..].ends_with("/v1") {
        return Err(format!("URL path does not end in /v1; expected {expect}"));
    }
    Ok(url)
}

/// Response language as a normalised BCP 47 tag.
pub(crate) fn check_language(v: String, expect: &str) -> Result<String, String> {
    crate::language::normalize_language(v.trim())
        .ok_or_else(|| format!("{v:?} is not a valid language tag; expected {expect}"))
}
