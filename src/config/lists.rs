//! Checks of the list settings that say what resources may use: namespaces,
//! stdio commands, environment variable patterns and directory roots.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::value::{expected, is_env_name, is_namespace};

/// At most 64 namespace names, no duplicates.
pub(crate) fn check_namespaces(v: Vec<String>, expect: &str) -> Result<Vec<String>, String> {
    if v.len() > 64 {
        return Err(format!("{} namespaces given; expected {expect}", v.len()));
    }
    if let Some(bad) = v.iter().find(|ns| !is_namespace(ns)) {
        return Err(format!("{bad:?} is not a namespace name; expected {expect}"));
    }
    Ok(dedup(v))
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    v.into_iter().filter(|item| seen.insert(item.clone())).collect()
}

/// At most 64 host names or `host:port` authorities (letters, digits, `-`, `.`, `_`, `[`, `]`, `:`).
pub(crate) fn check_hosts(v: Vec<String>, expect: &str) -> Result<Vec<String>, String> {
    if v.len() > 64 {
        return Err(format!("{} hosts given; expected {expect}", v.len()));
    }
    let valid = |h: &str| {
        !h.is_empty() && h.len() <= 261 && h.chars().all(|c| c.is_ascii_alphanumeric() || "-._[]:".contains(c))
    };
    if let Some(bad) = v.iter().find(|h| !valid(h)) {
        return Err(format!("{bad:?} is not a host name or host:port; expected {expect}"));
    }
    Ok(dedup(v.into_iter().map(|h| h.to_ascii_lowercase()).collect()))
}

/// At most 256 networks (`10.0.0.0/8`, an address) or host names resources may reach
/// although the egress policy refuses their range.
pub(crate) fn check_egress(v: Vec<String>, expect: &str) -> Result<Vec<String>, String> {
    if v.len() > 256 {
        return Err(format!("{} entries given; expected {expect}", v.len()));
    }
    let host = |h: &str| {
        !h.is_empty()
            && h.len() <= 253
            && !h.contains('/')
            && h.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
            && h.chars().any(|c| c.is_ascii_alphabetic())
    };
    if let Some(bad) = v.iter().find(|e| crate::egress::parse_network(e).is_none() && !host(e)) {
        return Err(format!("{bad:?} is neither a network (CIDR), an address nor a host name; expected {expect}"));
    }
    Ok(dedup(v))
}

/// The proxy of resource-declared URLs: `http://host[:port]`, nothing else (a path or
/// `https://` would not reach a plain forward proxy; credentials are never settings).
pub(crate) fn check_egress_proxy(v: Option<String>, expect: &str) -> Result<Option<String>, String> {
    let Some(url) = super::value::check_public_url(v, expect)? else { return Ok(None) };
    let parsed = url::Url::parse(&url).map_err(|e| format!("{e}; expected {expect}"))?;
    if parsed.scheme() != "http" {
        return Err(format!(
            "the proxy is spoken to in plain http (https destinations are tunnelled); expected {expect}"
        ));
    }
    if parsed.path() != "/" {
        return Err(format!("a proxy URL has no path; expected {expect}"));
    }
    Ok(Some(url))
}

/// `akritas` (this binary) or absolute paths.
pub(crate) fn check_stdio_commands(v: Vec<String>, expect: &str) -> Result<Vec<String>, String> {
    if v.len() > 64 {
        return Err(format!("{} commands given; expected {expect}", v.len()));
    }
    if let Some(bad) = v.iter().find(|c| c.as_str() != "akritas" && !Path::new(c.as_str()).is_absolute()) {
        return Err(format!("{bad:?} is neither `akritas` nor an absolute path; expected {expect}"));
    }
    Ok(dedup(v))
}

/// Program names (looked up on PATH) or absolute paths.
pub(crate) fn check_validator_commands(v: Vec<String>, expect: &str) -> Result<Vec<String>, String> {
    if v.len() > 64 {
        return Err(format!("{} commands given; expected {expect}", v.len()));
    }
    let name = |c: &str| !c.is_empty() && c.len() <= 255 && !c.contains('/') && !c.starts_with('.');
    if let Some(bad) = v.iter().find(|c| !name(c) && !Path::new(c.as_str()).is_absolute()) {
        return Err(format!("{bad:?} is neither a program name nor an absolute path; expected {expect}"));
    }
    Ok(dedup(v))
}

/// Environment variable names, each optionally ending in `*`.
pub(crate) fn check_env_patterns(v: Vec<String>, expect: &str) -> Result<Vec<String>, String> {
    if v.len() > 64 {
        return Err(format!("{} names given; expected {expect}", v.len()));
    }
    for entry in &v {
        let pattern = match entry.split_once('/') {
            Some((namespace, _)) if !super::value::is_namespace(namespace) => {
                return Err(format!("{entry:?}: {namespace:?} is not a Kubernetes namespace name; expected {expect}"));
            }
            Some((_, pattern)) => pattern,
            None => entry.as_str(),
        };
        let stem = pattern.strip_suffix('*').unwrap_or(pattern);
        if stem.contains('*') || (!stem.is_empty() && !is_env_name(stem)) || (stem.is_empty() && pattern.is_empty()) {
            return Err(format!("{entry:?} is not an environment variable name; expected {expect}"));
        }
    }
    Ok(dedup(v))
}

/// Absolute directory paths.
pub(crate) fn check_roots(v: Vec<PathBuf>, expect: &str) -> Result<Vec<PathBuf>, String> {
    if v.len() > 64 {
        return Err(format!("{} directories given; expected {expect}", v.len()));
    }
    if let Some(bad) = v.iter().find(|p| !p.is_absolute()) {
        return Err(format!("{} is not an absolute path; expected {expect}", bad.display()));
    }
    Ok(v)
}

/// At most 64 resource directories, none empty.
pub(crate) fn check_resources(v: Vec<PathBuf>, expect: &str) -> Result<Vec<PathBuf>, String> {
    if v.len() > 64 {
        return Err(format!("{} directories given; expected {expect}", v.len()));
    }
    if v.iter().any(|p| p.as_os_str().is_empty()) {
        return Err(format!("a directory is empty; expected {expect}"));
    }
    Ok(v)
}

/// A namespace (DNS label); empty = none.
pub(crate) fn check_namespace(v: Option<String>, expect: &str) -> Result<Option<String>, String> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) if is_namespace(s) => Ok(Some(s.to_string())),
        Some(_) => Err(expected(expect)),
    }
}

/// An optional path: absent or empty is `None`.
pub(crate) fn check_optional_env_name(v: Option<String>, expect: &str) -> Result<Option<String>, String> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) if is_env_name(s) => Ok(Some(s.to_string())),
        Some(s) => Err(format!("{s:?} is not an environment variable name; expected {expect}")),
    }
}

/// A path, or nothing.
pub(crate) fn check_optional_path(v: Option<String>, expect: &str) -> Result<Option<String>, String> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) if s.contains('\0') => Err(expected(expect)),
        Some(s) => Ok(Some(s.to_string())),
    }
}
