//! Secret resolution behind one trait: `{env: NAME}` reads the process environment
//! (both modes); `{secretKeyRef}` reads a Kubernetes Secret (operator mode only).
//! Resolved values never leave the component that uses them and never print.

use std::fmt;

use crate::resources::common::SecretRef;

/// A resolved secret value. `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a value.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

/// Why a secret could not be resolved. Names the reference, never a value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// The environment variable is unset or blank.
    #[error("environment variable {0} is not set or empty; set it in the Akritas process environment")]
    EnvUnset(String),
    /// A `secretKeyRef` outside operator mode.
    #[error("secretKeyRef {name}/{key} needs operator mode (serve --kubernetes); in standalone mode use {{env: NAME}}")]
    NeedsKubernetes {
        /// Secret name.
        name: String,
        /// Key.
        key: String,
    },
    /// The Secret or key does not exist or cannot be read.
    #[error("secret {name}/{key} in namespace {namespace}: {reason}")]
    Unavailable {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// Key.
        key: String,
        /// What went wrong.
        reason: String,
    },
    /// The value is larger than allowed.
    #[error("secret value from {0} is larger than 8 KiB")]
    TooLarge(String),
    /// The reference sets neither or both of `env` and `secretKeyRef`.
    #[error("secret reference must set exactly one of env or secretKeyRef")]
    Invalid,
}

/// Largest secret value accepted.
pub const MAX_SECRET_BYTES: usize = 8192;

/// Resolves secret references for resources in a namespace.
pub trait SecretResolver: Send + Sync {
    /// Resolves one reference.
    fn resolve(&self, namespace: &str, reference: &SecretRef) -> Result<SecretValue, SecretError>;
}

/// Standalone resolver: environment variables only.
pub struct EnvSecrets<F = fn(&str) -> Option<String>> {
    lookup: F,
}

impl EnvSecrets {
    /// Reads the process environment.
    pub fn process() -> Self {
        Self { lookup: |name| std::env::var(name).ok() }
    }
}

impl<F: Fn(&str) -> Option<String> + Send + Sync> EnvSecrets<F> {
    /// Reads from the given lookup (tests).
    pub fn with_lookup(lookup: F) -> Self {
        Self { lookup }
    }
}

impl<F: Fn(&str) -> Option<String> + Send + Sync> SecretResolver for EnvSecrets<F> {
    fn resolve(&self, _namespace: &str, reference: &SecretRef) -> Result<SecretValue, SecretError> {
        match (&reference.env, &reference.secret_key_ref) {
            (Some(name), None) => {
                let value = (self.lookup)(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
                let value = value.ok_or_else(|| SecretError::EnvUnset(name.clone()))?;
                if value.len() > MAX_SECRET_BYTES {
                    return Err(SecretError::TooLarge(format!("environment variable {name}")));
                }
                Ok(SecretValue(value))
            }
            (None, Some(selector)) => {
                Err(SecretError::NeedsKubernetes { name: selector.name.clone(), key: selector.key.clone() })
            }
            _ => Err(SecretError::Invalid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::common::KeySelector;

    #[test]
    fn env_secrets_resolve_trimmed_values_and_never_print_them() {
        let resolver = EnvSecrets::with_lookup(|name: &str| (name == "TOKEN").then(|| " s3cr3t \n".to_string()));
        let value =
            resolver.resolve("default", &SecretRef { env: Some("TOKEN".into()), secret_key_ref: None }).unwrap();
        assert_eq!(value.expose(), "s3cr3t");
        assert!(!format!("{value:?}").contains("s3cr3t"));
        let missing =
            resolver.resolve("default", &SecretRef { env: Some("OTHER".into()), secret_key_ref: None }).unwrap_err();
        assert_eq!(missing, SecretError::EnvUnset("OTHER".into()));
    }

    #[test]
    fn secret_key_refs_need_operator_mode() {
        let resolver = EnvSecrets::process();
        let reference =
            SecretRef { env: None, secret_key_ref: Some(KeySelector { name: "hooks".into(), key: "token".into() }) };
        let error = resolver.resolve("default", &reference).unwrap_err();
        assert!(error.to_string().contains("serve --kubernetes"), "{error}");
    }
}
