//! Operator-mode secret resolution: `{secretKeyRef}` reads a Secret from a
//! reflector over the API (so a rotated value is used from the next resolution
//! on), `{env: NAME}` reads the process environment as in standalone mode.

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::catalog::secrets::{EnvSecrets, MAX_SECRET_BYTES, SecretError, SecretResolver, SecretValue};
use crate::resources::common::SecretRef;

/// Secrets from the API server (watched), environment variables otherwise.
pub struct KubeSecrets {
    secrets: Store<Secret>,
    env: EnvSecrets,
}

impl KubeSecrets {
    /// A resolver over a Secret reflector store.
    pub fn new(secrets: Store<Secret>) -> Self {
        KubeSecrets { secrets, env: EnvSecrets::process() }
    }
}

impl SecretResolver for KubeSecrets {
    fn resolve(&self, namespace: &str, reference: &SecretRef) -> Result<SecretValue, SecretError> {
        let Some(selector) = (match (&reference.env, &reference.secret_key_ref) {
            (None, Some(selector)) => Some(selector),
            (Some(_), None) => None,
            _ => return Err(SecretError::Invalid),
        }) else {
            return self.env.resolve(namespace, reference);
        };
        let unavailable = |reason: &str| SecretError::Unavailable {
            namespace: namespace.to_string(),
            name: selector.name.clone(),
            key: selector.key.clone(),
            reason: reason.to_string(),
        };
        let secret = self
            .secrets
            .get(&ObjectRef::new(&selector.name).within(namespace))
            .ok_or_else(|| unavailable("the Secret does not exist or Akritas may not read it"))?;
        let bytes = secret
            .data
            .as_ref()
            .and_then(|data| data.get(&selector.key))
            .map(|v| v.0.clone())
            .or_else(|| secret.string_data.as_ref().and_then(|d| d.get(&selector.key)).map(|v| v.clone().into_bytes()))
            .ok_or_else(|| unavailable("the Secret has no such key"))?;
        if bytes.len() > MAX_SECRET_BYTES {
            return Err(SecretError::TooLarge(format!("secret {}/{}", selector.name, selector.key)));
        }
        let text = String::from_utf8(bytes).map_err(|_| unavailable("the value is not UTF-8"))?;
        let value = text.trim();
        if value.is_empty() {
            return Err(unavailable("the value is empty"));
        }
        Ok(SecretValue::new(value.to_string()))
    }
}
