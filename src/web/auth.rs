//! API-key authentication for `/api/*`, `/v1/*` and `/metrics`. Several named
//! keys, so audit can attribute the caller; compared in constant time. Each key has
//! scopes (`metrics`, `read`, `chat`, `admin`) and a namespace: its Runs run there
//! and it reads only that namespace's records (`admin` reads every namespace).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::config::{ApiKeyRef, Scope};
use std::collections::BTreeSet;

/// Shortest API key accepted.
pub const MIN_KEY_LEN: usize = 16;

/// Who made a request: the API key used (or `anonymous` with every scope when
/// authentication is disabled), what it may do and the namespace it acts in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Key name, for the audit.
    pub name: String,
    /// Scopes of the key.
    pub scopes: BTreeSet<Scope>,
    /// Namespace its Runs run in and whose records it reads.
    pub namespace: String,
}

impl Caller {
    /// Whether the caller holds `scope` (`admin` holds all; `chat` includes `read`).
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin)
            || self.scopes.contains(&scope)
            || (scope == Scope::Read && self.scopes.contains(&Scope::Chat))
    }

    /// Whether the caller may read records of `namespace`.
    pub fn sees(&self, namespace: &str) -> bool {
        self.scopes.contains(&Scope::Admin) || self.namespace == namespace
    }
}

/// One configured key: its digest, scopes and namespace.
#[derive(Clone)]
struct Key {
    name: String,
    digest: [u8; 32],
    scopes: BTreeSet<Scope>,
    namespace: Option<String>,
}

/// The configured keys (only their digests are kept).
#[derive(Clone)]
pub struct ApiKeys {
    keys: Vec<Key>,
    home: String,
}

impl Default for ApiKeys {
    fn default() -> Self {
        Self { keys: Vec::new(), home: crate::tenancy::DEFAULT_NAMESPACE.to_string() }
    }
}

/// Why the keys could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ApiKeyError {
    /// A key is too short to be safe.
    #[error(
        "API key {name:?} from environment variable {env} is shorter than {MIN_KEY_LEN} characters; use a longer random value"
    )]
    TooShort {
        /// Key name.
        name: String,
        /// Env var.
        env: String,
    },
    /// Two names share one value, so the caller could not be told apart.
    #[error("API keys {0:?} and {1:?} have the same value; give each caller its own key")]
    Duplicate(String, String),
}

impl ApiKeys {
    /// Reads each named key from its environment variable; unset or blank
    /// variables configure no key.
    pub fn from_env(refs: &[ApiKeyRef], lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ApiKeyError> {
        let mut keys: Vec<Key> = Vec::new();
        for key in refs {
            let Some(value) = lookup(&key.env).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()) else {
                tracing::info!(key = %key.name, env = %key.env, "API key not configured: environment variable unset");
                continue;
            };
            if value.chars().count() < MIN_KEY_LEN {
                return Err(ApiKeyError::TooShort { name: key.name.clone(), env: key.env.clone() });
            }
            let digest: [u8; 32] = Sha256::digest(value.as_bytes()).into();
            if let Some(other) = keys.iter().find(|k| k.digest == digest) {
                return Err(ApiKeyError::Duplicate(other.name.clone(), key.name.clone()));
            }
            keys.push(Key {
                name: key.name.clone(),
                digest,
                scopes: key.scopes.clone(),
                namespace: key.namespace.clone(),
            });
        }
        Ok(Self { keys, ..Self::default() })
    }

    /// Sets the namespace of keys that name none (the pod's namespace in operator
    /// mode, `default` standalone), which is also where unauthenticated callers act.
    pub fn with_home_namespace(mut self, home: &str) -> Self {
        self.home = home.to_string();
        self
    }

    /// The caller when authentication is disabled: every scope, home namespace.
    pub fn anonymous(&self) -> Caller {
        Caller { name: "anonymous".to_string(), scopes: [Scope::Admin].into(), namespace: self.home.clone() }
    }

    /// Whether any key is configured (otherwise authentication is disabled).
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Names of the configured keys.
    pub fn names(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.name.as_str()).collect()
    }

    /// The caller whose key matches `presented`, checking every key in constant time.
    pub fn identify(&self, presented: &str) -> Option<Caller> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.digest.ct_eq(&digest)) {
                found = Some(key);
            }
        }
        found.map(|key| Caller {
            name: key.name.clone(),
            scopes: key.scopes.clone(),
            namespace: key.namespace.clone().unwrap_or_else(|| self.home.clone()),
        })
    }

    /// The caller a request's `Authorization: Bearer <key>` identifies (the anonymous caller
    /// when no key is configured); `None` for a missing or unknown key.
    pub fn caller(&self, headers: &axum::http::HeaderMap) -> Option<Caller> {
        if !self.enabled() {
            return Some(self.anonymous());
        }
        let presented = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer_token)?;
        self.identify(presented.trim())
    }
}

/// The credentials of an `Authorization: Bearer <token>` value; the scheme is
/// case-insensitive (RFC 9110 §11.1).
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// The scope a request needs: `metrics` for `/metrics`, `admin` for applying a
/// change (the only write), `read` for reads and for `/mcp` (its `ask` tool checks
/// `chat` itself), `chat` for everything that starts work.
pub fn required_scope(method: &Method, path: &str) -> Scope {
    if path == "/metrics" {
        Scope::Metrics
    } else if path == "/mcp" {
        Scope::Read
    } else if path.starts_with("/api/v1/change/") && path.ends_with("/apply") {
        Scope::Admin
    } else if method == Method::GET || method == Method::HEAD {
        Scope::Read
    } else {
        Scope::Chat
    }
}

/// Middleware: rejects requests without a valid `Authorization: Bearer <key>` and
/// records the caller.
pub async fn require_key(State(keys): State<Arc<ApiKeys>>, mut request: Request, next: Next) -> Response {
    let Some(caller) = keys.caller(request.headers()) else {
        let sent = request.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer_token);
        let refused = if sent.is_some_and(|key| !key.trim().is_empty()) {
            ApiError::unauthorized()
        } else {
            ApiError::missing_key()
        };
        return refused.into_response();
    };
    let needed = required_scope(request.method(), request.uri().path());
    if !caller.allows(needed) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            format!(
                "API key {:?} lacks the {:?} scope this route needs; use a key with it (scopes are set in api_keys as NAME=ENV_VAR:SCOPE+SCOPE)",
                caller.name,
                needed.as_str()
            ),
        )
        .with("param", serde_json::Value::Null)
        .into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs() -> Vec<ApiKeyRef> {
        vec![ApiKeyRef::admin("ops", "K1"), ApiKeyRef::admin("ci", "K2")]
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }

    #[test]
    fn identifies_each_named_key() {
        let lookup = |name: &str| match name {
            "K1" => Some("ops-key-0123456789".to_string()),
            "K2" => Some("ci-key-0123456789ab".to_string()),
            _ => None,
        };
        let keys = ApiKeys::from_env(&refs(), &lookup).unwrap();
        assert_eq!(keys.identify("ops-key-0123456789").map(|c| c.name), Some("ops".into()));
        assert_eq!(keys.identify("ci-key-0123456789ab").map(|c| c.name), Some("ci".into()));
        assert_eq!(keys.identify("ops-key-012345678"), None);
        assert_eq!(keys.identify(""), None);
    }

    #[test]
    fn unset_keys_disable_auth_and_bad_keys_fail() {
        assert!(!ApiKeys::from_env(&refs(), &|_| None).unwrap().enabled());
        let short = ApiKeys::from_env(&refs(), &|n: &str| (n == "K1").then(|| "short".to_string()));
        assert!(matches!(short, Err(ApiKeyError::TooShort { .. })));
        let same = ApiKeys::from_env(&refs(), &|_| Some("same-value-0123456789".to_string()));
        assert!(matches!(same, Err(ApiKeyError::Duplicate(..))));
    }
}
