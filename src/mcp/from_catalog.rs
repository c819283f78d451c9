//! McpAdapter resources → adapter configurations, with secrets resolved through the
//! one secret resolver. An adapter whose secrets cannot be resolved is not started;
//! the reason is reported on the resource.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::adapter::{AdapterConfig, Transport};
use super::error::McpError;
use crate::catalog::secrets::SecretResolver;
use crate::catalog::{Catalog, ObjectKey};
use crate::resources::common::NamedValue;
use crate::resources::{Kind, Resource};

/// The command name that means "this Akritas binary" (for the bundled MCP servers).
pub const SELF_COMMAND: &str = "akritas";

/// Adapter configurations for every McpAdapter of the Catalog, and the keys whose
/// configuration could not be built (with why, for status).
pub fn adapters(catalog: &Catalog, secrets: &dyn SecretResolver) -> (Vec<AdapterConfig>, BTreeMap<ObjectKey, String>) {
    let mut configs = Vec::new();
    let mut failures = BTreeMap::new();
    for (key, entry) in catalog.of_kind(Kind::McpAdapter) {
        let Resource::McpAdapter(adapter) = entry.resource.as_ref() else { continue };
        match config(key, adapter, entry.base_dir.as_ref(), secrets) {
            Ok(config) => configs.push(config),
            Err(error) => {
                failures.insert(key.clone(), error.to_string());
            }
        }
    }
    (configs, failures)
}

fn config(
    key: &ObjectKey,
    adapter: &crate::resources::McpAdapter,
    base_dir: Option<&PathBuf>,
    secrets: &dyn SecretResolver,
) -> Result<AdapterConfig, McpError> {
    let spec = &adapter.spec;
    let mut fingerprint = Sha256::new();
    fingerprint.update(serde_json::to_vec(spec).unwrap_or_default());
    let mut resolve = |values: &[NamedValue], what: &'static str| -> Result<Vec<(String, String)>, McpError> {
        values
            .iter()
            .map(|item| {
                let value = match (&item.value, &item.value_from) {
                    (Some(value), _) => value.clone(),
                    (None, Some(reference)) => secrets
                        .resolve(&key.namespace, reference)
                        .map_err(|source| McpError::Secret { what, name: item.name.clone(), source: Box::new(source) })?
                        .expose()
                        .to_string(),
                    (None, None) => return Err(McpError::NoValue { what, name: item.name.clone() }),
                };
                fingerprint.update(item.name.as_bytes());
                fingerprint.update(Sha256::digest(value.as_bytes()));
                Ok((item.name.clone(), value))
            })
            .collect()
    };
    let transport = match (&spec.transport.stdio, &spec.transport.http) {
        (Some(stdio), _) => {
            let command = if stdio.command == SELF_COMMAND {
                std::env::current_exe().map(|p| p.display().to_string()).map_err(McpError::SelfCommand)?
            } else {
                stdio.command.clone()
            };
            let working_dir = stdio.working_dir.as_ref().map(|dir| match base_dir {
                Some(base) if !PathBuf::from(dir).is_absolute() => base.join(dir),
                _ => PathBuf::from(dir),
            });
            Transport::Stdio { command, args: stdio.args.clone(), env: resolve(&stdio.env, "env")?, working_dir }
        }
        (None, Some(http)) => Transport::Http { url: http.url.clone(), headers: resolve(&http.headers, "header")? },
        (None, None) => return Err(McpError::NoTransport),
    };
    Ok(AdapterConfig {
        key: key.to_string(),
        namespace: spec.namespace.clone().unwrap_or_else(|| format!("mcp.{}", key.name)),
        transport,
        allow: spec.allow.iter().copied().collect(),
        tools: spec.tools.as_ref().map(|tools| tools.iter().cloned().collect::<BTreeSet<_>>()),
        call_timeout: Duration::from_secs(u64::from(spec.call_timeout_seconds)),
        fingerprint: hex::encode(fingerprint.finalize()),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{Value, json};

    use super::*;
    use crate::catalog::secrets::EnvSecrets;
    use crate::resources::McpAdapter;

    fn key() -> ObjectKey {
        ObjectKey { kind: Kind::McpAdapter, namespace: "ops".into(), name: "vm".into() }
    }

    fn adapter(spec: Value) -> McpAdapter {
        McpAdapter::new("vm", serde_json::from_value(spec).unwrap())
    }

    fn token(value: &'static str) -> EnvSecrets<impl Fn(&str) -> Option<String> + Send + Sync> {
        EnvSecrets::with_lookup(move |name| (name == "VM_TOKEN").then(|| value.to_owned()))
    }

    #[test]
    fn stdio_adapters_resolve_secrets_and_relative_directories() {
        let spec = json!({
            "transport": {"stdio": {
                "command": "mcp-vm",
                "args": ["--read-only"],
                "env": [{"name": "TOKEN", "valueFrom": {"env": "VM_TOKEN"}}, {"name": "MODE", "value": "ro"}],
                "workingDir": "servers",
            }},
            "allow": ["read"],
        });
        let base = PathBuf::from("/etc/akritas");
        let built = config(&key(), &adapter(spec.clone()), Some(&base), &token("s3cr3t")).unwrap();
        assert_eq!(built.namespace, "mcp.vm");
        assert_eq!(built.call_timeout, Duration::from_secs(10));
        let Transport::Stdio { command, args, env, working_dir } = &built.transport else { panic!("stdio") };
        assert_eq!((command.as_str(), args.as_slice()), ("mcp-vm", ["--read-only".to_owned()].as_slice()));
        assert_eq!(env, &[("TOKEN".to_owned(), "s3cr3t".to_owned()), ("MODE".to_owned(), "ro".to_owned())]);
        assert_eq!(working_dir.as_deref(), Some(Path::new("/etc/akritas/servers")));
        // The fingerprint follows resolved secrets, so a rotated token restarts the adapter.
        let again = config(&key(), &adapter(spec.clone()), Some(&base), &token("s3cr3t")).unwrap();
        let rotated = config(&key(), &adapter(spec), Some(&base), &token("n3w")).unwrap();
        assert_eq!(built.fingerprint, again.fingerprint);
        assert_ne!(built.fingerprint, rotated.fingerprint);
    }

    #[test]
    fn unresolvable_entries_are_named_without_values() {
        let spec = json!({
            "transport": {"http": {"url": "http://vm/mcp", "headers": [{"name": "Authorization", "valueFrom": {"env": "OTHER"}}]}},
            "allow": ["read"],
        });
        let err = config(&key(), &adapter(spec), None, &token("s3cr3t")).unwrap_err();
        assert!(err.to_string().starts_with("header Authorization: environment variable OTHER is not set"), "{err}");
        let spec = json!({
            "transport": {"http": {"url": "http://vm/mcp", "headers": [{"name": "X-Empty"}]}},
            "allow": ["read"],
        });
        let err = config(&key(), &adapter(spec), None, &token("s3cr3t")).unwrap_err();
        assert_eq!(err.to_string(), "header X-Empty: no value");
    }
}
