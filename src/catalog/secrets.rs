//! Secret resolution behind one trait: `{env: NAME}` reads the process environment
//! (both modes); `{secretKeyRef}` reads a Kubernetes Secret (operator mode only).
//! Resolved values never leave the component that uses them and never print.
//! [`PolicySecrets`] applies the service's `{env:}` rule ([`EnvAccess`]) and registers
//! every value it resolves for redaction ([`crate::redact`]).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use super::readiness::reasons;
use crate::config::CONFIG_ENV;
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
        /// Key in that Secret's `data`, as the `secretKeyRef` names it.
        key: String,
    },
    /// The Secret or key does not exist or cannot be read.
    #[error("secret {name}/{key} in namespace {namespace}: {reason}")]
    Unavailable {
        /// Namespace of the resource that references the Secret; the Secret is read there.
        namespace: String,
        /// Secret name.
        name: String,
        /// Key in the Secret's `data` that the reference asks for.
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
    /// The service configuration does not let resources read this variable.
    #[error(
        "environment variable {0} is not readable by resources; add it (or a prefix such as AKRITAS_TEAM_*) \
         to the resource_env setting, or use another variable"
    )]
    EnvNotAllowed(String),
    /// The service configuration lets other namespaces read this variable, not this one.
    #[error(
        "environment variable {name} is not readable by resources of namespace {namespace}: resource_env allows it \
         only for other namespaces; add {namespace}/{name} (or a prefix such as {namespace}/TEAM_*) to resource_env \
         if this namespace may have it"
    )]
    EnvNotForNamespace {
        /// The variable.
        name: String,
        /// The namespace of the resource that asked.
        namespace: String,
    },
    /// The variable holds a credential of the service itself.
    #[error(
        "environment variable {0} is the service's own credential (database_url_env, audit_key_env, \
         upstream_api_key_env, api_keys or AKRITAS_CONFIG); resources may never read it, whatever resource_env or \
         validator_env say; put what the resource needs in another variable"
    )]
    ServiceCredential(String),
}

impl SecretError {
    /// The condition reason of an object whose reference failed this way.
    pub fn reason(&self) -> &'static str {
        match self {
            SecretError::EnvNotAllowed(_)
            | SecretError::EnvNotForNamespace { .. }
            | SecretError::ServiceCredential(_) => reasons::ENV_NOT_ALLOWED,
            _ => reasons::SECRETS_UNRESOLVED,
        }
    }
}

/// Which environment variables resources may read with `{env: NAME}`: names matching
/// a pattern (`NAME`, or `PREFIX*`), never the service's own credentials. A pattern
/// `NAMESPACE/PATTERN` applies to that namespace only; a plain one to the namespaces
/// given to [`EnvAccess::for_namespaces`] (the home and shared namespaces), or to every
/// namespace when none were given.
#[derive(Clone, Debug, Default)]
pub struct EnvAccess {
    patterns: Vec<String>,
    service: BTreeSet<String>,
    plain_for: Option<BTreeSet<String>>,
}

impl EnvAccess {
    /// Access for `patterns` (the `resource_env` setting) except `service_credentials`
    /// (the upstream and client key variables) and `AKRITAS_CONFIG`, whatever the
    /// patterns say.
    pub fn new(patterns: Vec<String>, service_credentials: impl IntoIterator<Item = String>) -> Self {
        let mut service: BTreeSet<String> = service_credentials.into_iter().collect();
        service.insert(CONFIG_ENV.to_string());
        Self { patterns, service, plain_for: None }
    }

    /// Plain patterns (without `NAMESPACE/`) apply to `namespaces` only.
    pub fn for_namespaces(mut self, namespaces: impl IntoIterator<Item = String>) -> Self {
        self.plain_for = Some(namespaces.into_iter().collect());
        self
    }

    /// Whether a resource of any namespace that plain patterns apply to may read `name`.
    pub fn check(&self, name: &str) -> Result<(), SecretError> {
        self.check_for(None, name)
    }

    /// Whether a resource of `namespace` may read `name`.
    pub fn check_in(&self, namespace: &str, name: &str) -> Result<(), SecretError> {
        self.check_for(Some(namespace), name)
    }

    fn check_for(&self, namespace: Option<&str>, name: &str) -> Result<(), SecretError> {
        if self.service.contains(name) {
            return Err(SecretError::ServiceCredential(name.to_string()));
        }
        let matches = |pattern: &str| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => pattern == name,
        };
        let plain_applies = match (namespace, &self.plain_for) {
            (Some(namespace), Some(plain_for)) => plain_for.contains(namespace),
            _ => true,
        };
        let mut elsewhere = false;
        for entry in &self.patterns {
            let (applies, pattern) = match entry.split_once('/') {
                Some((scope, pattern)) => (namespace == Some(scope), pattern),
                None => (plain_applies, entry.as_str()),
            };
            if matches(pattern) {
                if applies {
                    return Ok(());
                }
                elsewhere = true;
            }
        }
        match namespace {
            Some(namespace) if elsewhere => {
                Err(SecretError::EnvNotForNamespace { name: name.to_string(), namespace: namespace.to_string() })
            }
            _ => Err(SecretError::EnvNotAllowed(name.to_string())),
        }
    }
}

/// A resolver behind the service's `{env:}` rule: a refused name is never looked up;
/// every resolved value is registered for redaction.
pub struct PolicySecrets {
    inner: Arc<dyn SecretResolver>,
    access: EnvAccess,
}

impl PolicySecrets {
    /// `inner` restricted by `access`.
    pub fn new(inner: Arc<dyn SecretResolver>, access: EnvAccess) -> Self {
        Self { inner, access }
    }
}

impl SecretResolver for PolicySecrets {
    fn resolve(&self, namespace: &str, reference: &SecretRef) -> Result<SecretValue, SecretError> {
        if let Some(name) = &reference.env {
            self.access.check_in(namespace, name)?;
        }
        let value = self.inner.resolve(namespace, reference)?;
        crate::redact::register(value.expose());
        Ok(value)
    }
}

/// Whether every secret reference in a resource's spec resolves (`None`: it has none);
/// else the reason (a refused name first: resolving it later will not help) and every
/// failure as `path: error`. What the object's `SecretsResolved` condition shows.
pub fn resolve_all(
    spec: &serde_json::Value,
    namespace: &str,
    secrets: &dyn SecretResolver,
) -> Option<Result<(), (&'static str, String)>> {
    let references = crate::resources::common::secret_refs(spec);
    if references.is_empty() {
        return None;
    }
    let unresolved: Vec<(&str, String)> = references
        .iter()
        .filter_map(|(path, reference)| {
            let error = secrets.resolve(namespace, reference).err()?;
            Some((error.reason(), format!("{path}: {error}")))
        })
        .collect();
    if unresolved.is_empty() {
        return Some(Ok(()));
    }
    let reason = unresolved
        .iter()
        .map(|(reason, _)| *reason)
        .find(|reason| *reason == reasons::ENV_NOT_ALLOWED)
        .unwrap_or(reasons::SECRETS_UNRESOLVED);
    let message = unresolved.iter().map(|(_, message)| message.as_str()).collect::<Vec<_>>().join("; ");
    Some(Err((reason, message)))
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
    fn another_namespace_never_reads_a_teams_variable() {
        let access = EnvAccess::new(
            vec!["AKRITAS_*".into(), "team-a/AKRITAS_TEAM_A_*".into(), "team-b/TEAM_B_TOKEN".into()],
            ["OPENAI_API_KEY".to_string()],
        )
        .for_namespaces(["akritas".to_string(), "platform".to_string()]);
        // The home and shared namespaces read the plain patterns.
        assert_eq!(access.check_in("akritas", "AKRITAS_TEAM_A_TOKEN"), Ok(()));
        assert_eq!(access.check_in("platform", "AKRITAS_ALERTMANAGER_TOKEN"), Ok(()));
        // A team reads only what names it.
        assert_eq!(access.check_in("team-a", "AKRITAS_TEAM_A_TOKEN"), Ok(()));
        assert_eq!(access.check_in("team-b", "TEAM_B_TOKEN"), Ok(()));
        assert_eq!(
            access.check_in("team-b", "AKRITAS_TEAM_A_TOKEN"),
            Err(SecretError::EnvNotForNamespace { name: "AKRITAS_TEAM_A_TOKEN".into(), namespace: "team-b".into() })
        );
        assert_eq!(access.check_in("team-b", "UNLISTED"), Err(SecretError::EnvNotAllowed("UNLISTED".into())));
        let refused = access.check_in("team-b", "AKRITAS_TEAM_A_TOKEN").unwrap_err().to_string();
        assert!(refused.contains("team-b/AKRITAS_TEAM_A_TOKEN"), "{refused}");
        // Through the resolver: a refused name is never looked up.
        let inner = EnvSecrets::with_lookup(|_: &str| Some("team-a-secret".to_string()));
        let secrets = PolicySecrets::new(Arc::new(inner), access);
        let reference = SecretRef { env: Some("AKRITAS_TEAM_A_TOKEN".into()), secret_key_ref: None };
        assert!(secrets.resolve("team-b", &reference).is_err());
        assert_eq!(secrets.resolve("team-a", &reference).unwrap().expose(), "team-a-secret");
    }

    #[test]
    fn env_access_follows_the_patterns_and_never_reaches_service_credentials() {
        let access = EnvAccess::new(vec!["AKRITAS_*".into(), "VM_TOKEN".into()], ["AKRITAS_API_KEY".to_string()]);
        assert_eq!(access.check("AKRITAS_TEAM_TOKEN"), Ok(()));
        assert_eq!(access.check("VM_TOKEN"), Ok(()));
        assert_eq!(access.check("VM_TOKEN_2"), Err(SecretError::EnvNotAllowed("VM_TOKEN_2".into())));
        assert_eq!(access.check("AKRITAS_API_KEY"), Err(SecretError::ServiceCredential("AKRITAS_API_KEY".into())));
        assert_eq!(access.check("AKRITAS_CONFIG"), Err(SecretError::ServiceCredential("AKRITAS_CONFIG".into())));
        let everything = EnvAccess::new(vec!["*".into()], ["OPENAI_API_KEY".to_string()]);
        assert!(everything.check("OPENAI_API_KEY").is_err(), "no pattern reaches a service credential");
    }

    #[test]
    fn policy_secrets_never_look_up_a_refused_name_and_register_what_they_resolve() {
        let looked_up = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = looked_up.clone();
        let inner = EnvSecrets::with_lookup(move |name: &str| {
            seen.lock().unwrap().push(name.to_string());
            Some(format!("value-of-{name}-0123"))
        });
        let secrets = PolicySecrets::new(Arc::new(inner), EnvAccess::new(vec!["TEAM_*".into()], []));
        let env = |name: &str| SecretRef { env: Some(name.into()), secret_key_ref: None };
        let error = secrets.resolve("team", &env("OPENAI_API_KEY")).unwrap_err();
        assert_eq!(error.reason(), reasons::ENV_NOT_ALLOWED);
        assert!(error.to_string().contains("resource_env"), "{error}");
        assert!(looked_up.lock().unwrap().is_empty(), "a refused name is never read");
        assert_eq!(secrets.resolve("team", &env("TEAM_TOKEN")).unwrap().expose(), "value-of-TEAM_TOKEN-0123");
        assert_eq!(crate::redact::redact("x value-of-TEAM_TOKEN-0123 y"), "x [redacted] y");
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
