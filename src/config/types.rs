//! The typed values of settings that are more than a number or a path: API keys
//! with their scopes and namespace, and the log format.

use std::collections::BTreeSet;
use std::fmt;

/// What an API key may do. `admin` includes every other scope and sees every
/// namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// `GET /metrics`.
    Metrics,
    /// Read Runs, Incidents, alert events, jobs, tools and resources of the key's namespace.
    Read,
    /// Start Runs (chat, follow-ups) in the key's namespace; includes `read`.
    Chat,
    /// Everything, in every namespace.
    Admin,
}

impl Scope {
    /// Every scope, in order.
    pub const ALL: [Scope; 4] = [Scope::Metrics, Scope::Read, Scope::Chat, Scope::Admin];

    /// The config spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scope::Metrics => "metrics",
            Scope::Read => "read",
            Scope::Chat => "chat",
            Scope::Admin => "admin",
        }
    }

    /// Parses the config spelling.
    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == s)
    }
}

/// A named API key whose secret lives in environment variable `env`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRef {
    /// Key name (`^[a-z0-9][a-z0-9._-]{0,63}$`), unique.
    pub name: String,
    /// Name of the environment variable holding the secret.
    pub env: String,
    /// What the key may do; written `NAME=ENV_VAR:read+chat`. Absent = `admin`
    /// (what every key could do before scopes existed).
    pub scopes: BTreeSet<Scope>,
    /// The namespace its Runs run in and whose records it reads; written
    /// `NAME=ENV_VAR@team-a`. Absent = the home namespace.
    pub namespace: Option<String>,
}

impl ApiKeyRef {
    /// A key with every scope in the home namespace.
    pub fn admin(name: &str, env: &str) -> Self {
        Self { name: name.to_string(), env: env.to_string(), scopes: [Scope::Admin].into(), namespace: None }
    }

    /// Whether the key grants `scope` (`admin` grants all; `chat` grants `read`).
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin)
            || self.scopes.contains(&scope)
            || (scope == Scope::Read && self.scopes.contains(&Scope::Chat))
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (`text`).
    #[default]
    Text,
    /// One JSON object per line (`json`).
    Json,
}

impl LogFormat {
    /// The config spelling: `text` or `json`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `validator_sandbox` setting: how validators are confined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxMode {
    /// Namespaces where the kernel and runtime allow them, else Landlock alone.
    #[default]
    Auto,
    /// Each validator in its own user, mount, PID, network, IPC and UTS namespaces, with
    /// Landlock and the seccomp filter inside; where namespaces fail, nothing runs.
    Namespaces,
    /// Landlock and the seccomp filter; without Landlock nothing runs.
    Landlock,
    /// No Landlock, no filter: only the process controls. An explicit choice.
    Off,
}

impl SandboxMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Auto => "auto",
            SandboxMode::Namespaces => "namespaces",
            SandboxMode::Landlock => "landlock",
            SandboxMode::Off => "off",
        }
    }
}

/// Scopes written `read+chat`.
pub(crate) fn parse_scopes(text: &str) -> Result<BTreeSet<Scope>, String> {
    text.split('+')
        .map(|item| {
            Scope::parse(item.trim()).ok_or_else(|| {
                format!("unknown scope {:?}; expected metrics, read, chat or admin joined by '+'", item.trim())
            })
        })
        .collect()
}

/// A key given a namespace but no scopes would be an `admin` key of every namespace
/// (no scopes meant `admin` before namespaces existed): refused, with how to write it.
pub(crate) fn unscoped_namespace_key(name: &str, env: &str, namespace: &str) -> String {
    format!(
        "key {name:?} has namespace {namespace:?} but no scopes, which would make it an admin of every namespace; \
         give its scopes, e.g. {name}={env}:read+chat@{namespace} (file: \"scopes\": [\"read\", \"chat\"]), \
         or drop the namespace for a host-wide admin key"
    )
}
