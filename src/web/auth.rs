//! API-key authentication for `/api/*` and `/v1/*`. Several named keys, so audit
//! can attribute the caller; compared in constant time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::config::ApiKeyRef;

/// Shortest API key accepted.
pub const MIN_KEY_LEN: usize = 16;

/// Who made a request: the name of the API key used, or `anonymous` when
/// authentication is disabled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller(pub String);

/// The configured keys (only their digests are kept).
#[derive(Default, Clone)]
pub struct ApiKeys {
    keys: Vec<(String, [u8; 32])>,
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
        let mut keys: Vec<(String, [u8; 32])> = Vec::new();
        for key in refs {
            let Some(value) = lookup(&key.env).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()) else {
                tracing::info!(key = %key.name, env = %key.env, "API key not configured: environment variable unset");
                continue;
            };
            if value.chars().count() < MIN_KEY_LEN {
                return Err(ApiKeyError::TooShort { name: key.name.clone(), env: key.env.clone() });
            }
            let digest: [u8; 32] = Sha256::digest(value.as_bytes()).into();
            if let Some((other, _)) = keys.iter().find(|(_, d)| *d == digest) {
                return Err(ApiKeyError::Duplicate(other.clone(), key.name.clone()));
            }
            keys.push((key.name.clone(), digest));
        }
        Ok(Self { keys })
    }

    /// Whether any key is configured (otherwise authentication is disabled).
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Names of the configured keys.
    pub fn names(&self) -> Vec<&str> {
        self.keys.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The name of the key matching `presented`, checking every key in constant time.
    pub fn identify(&self, presented: &str) -> Option<&str> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for (name, expected) in &self.keys {
            if bool::from(expected.ct_eq(&digest)) {
                found = Some(name.as_str());
            }
        }
        found
    }
}

/// Middleware: rejects requests without a valid `Authorization: Bearer <key>` and
/// records the caller.
pub async fn require_key(State(keys): State<Arc<ApiKeys>>, mut request: Request, next: Next) -> Response {
    let caller = if keys.enabled() {
        let presented = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match presented.and_then(|p| keys.identify(p)) {
            Some(name) => Caller(name.to_string()),
            None => return ApiError::unauthorized().into_response(),
        }
    } else {
        Caller("anonymous".to_string())
    };
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
    fn identifies_each_named_key() {
        let lookup = |name: &str| match name {
            "K1" => Some("ops-key-0123456789".to_string()),
            "K2" => Some("ci-key-0123456789ab".to_string()),
            _ => None,
        };
        let keys = ApiKeys::from_env(&refs(), &lookup).unwrap();
        assert_eq!(keys.identify("ops-key-0123456789"), Some("ops"));
        assert_eq!(keys.identify("ci-key-0123456789ab"), Some("ci"));
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
