//! McpAdapter resources → adapter configurations, with secrets resolved through the
//! one secret resolver and what the adapter may start decided by the service's
//! [`ResourcePolicy`]: an adapter whose command, working directory, secrets or tool
//! namespace the policy refuses is not started; the reason is reported on the resource.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::adapter::{AdapterConfig, Transport};
use super::error::McpError;
use crate::catalog::policy::ResourcePolicy;
use crate::catalog::readiness::Check;
use crate::catalog::secrets::SecretResolver;
use crate::catalog::{Catalog, ObjectKey};
use crate::resources::common::NamedValue;
use crate::resources::mcp_adapter::StdioTransport;
use crate::resources::{Kind, McpAdapter, Resource};

/// The command name that means "this Akritas binary" (for the bundled MCP servers).
pub const SELF_COMMAND: &str = "akritas";
/// The bundled MCP servers `akritas mcp <server>` may start.
pub const SELF_SERVERS: &[&str] = &["victoriametrics"];
/// Environment names that change what a child loads; never set by a resource.
const LOADER_ENV_PREFIXES: &[&str] = &["LD_", "DYLD_"];

/// Adapter configurations for every McpAdapter of the Catalog that the policy lets
/// start, and for the others why not (a failed check for their status).
pub fn adapters(
    catalog: &Catalog,
    secrets: &dyn SecretResolver,
    policy: &ResourcePolicy,
) -> (Vec<AdapterConfig>, BTreeMap<ObjectKey, Check>) {
    let mut configs = Vec::new();
    let mut failures = BTreeMap::new();
    let taken = tool_namespace_owners(catalog, policy);
    for (key, entry) in catalog.of_kind(Kind::McpAdapter) {
        let Resource::McpAdapter(adapter) = entry.resource.as_ref() else { continue };
        let built = match taken.get(key) {
            Some((namespace, other)) => {
                Err(McpError::ToolNamespaceTaken { namespace: namespace.clone(), other: other.clone() })
            }
            None => config(key, adapter, entry.base_dir.as_deref(), secrets, policy),
        };
        match built {
            Ok(config) => configs.push(config),
            Err(error) => {
                failures.insert(key.clone(), Check::failed(error.reason(), error.to_string()));
            }
        }
    }
    (configs, failures)
}

/// The tool namespace of an adapter (`spec.namespace`, default `mcp.<name>`).
fn tool_namespace(key: &ObjectKey, adapter: &McpAdapter) -> String {
    adapter.spec.namespace.clone().unwrap_or_else(|| format!("mcp.{}", key.name))
}

/// The adapters that lose their tool namespace to another adapter the same Runs see
/// (same Kubernetes namespace, or either in a shared one): an adapter of a shared
/// namespace wins over a tenant's, otherwise the first in key order. Each loser maps
/// to the tool namespace and the adapter that keeps it.
fn tool_namespace_owners(catalog: &Catalog, policy: &ResourcePolicy) -> BTreeMap<ObjectKey, (String, String)> {
    let mut by_tool_namespace: BTreeMap<String, Vec<&ObjectKey>> = BTreeMap::new();
    for (key, entry) in catalog.of_kind(Kind::McpAdapter) {
        if let Resource::McpAdapter(adapter) = entry.resource.as_ref() {
            by_tool_namespace.entry(tool_namespace(key, adapter)).or_default().push(key);
        }
    }
    let tenancy = &policy.tenancy;
    let mut losers = BTreeMap::new();
    for (namespace, mut keys) in by_tool_namespace {
        keys.sort_by_key(|key| (!tenancy.is_shared(&key.namespace), (*key).clone()));
        let mut owners: Vec<&ObjectKey> = Vec::new();
        for key in keys {
            let collides = |owner: &&&ObjectKey| {
                owner.namespace == key.namespace
                    || tenancy.is_shared(&owner.namespace)
                    || tenancy.is_shared(&key.namespace)
            };
            match owners.iter().find(collides) {
                Some(owner) => {
                    losers.insert(key.clone(), (namespace.clone(), owner.to_string()));
                }
                None => owners.push(key),
            }
        }
    }
    losers
}

fn config(
    key: &ObjectKey,
    adapter: &McpAdapter,
    base_dir: Option<&Path>,
    secrets: &dyn SecretResolver,
    policy: &ResourcePolicy,
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
            let command = command(stdio, policy)?;
            let working_dir = match &stdio.working_dir {
                Some(dir) => Some(working_dir(dir, base_dir, policy)?),
                None => None,
            };
            if let Some(entry) = stdio
                .env
                .iter()
                .find(|e| LOADER_ENV_PREFIXES.iter().any(|p| e.name.to_ascii_uppercase().starts_with(p)))
            {
                return Err(McpError::LoaderEnv(entry.name.clone()));
            }
            if let Some(entry) = stdio.env.iter().find(|e| policy.stdio_env.check_in(&key.namespace, &e.name).is_err())
            {
                return Err(McpError::EnvNotAllowed { name: entry.name.clone(), namespace: key.namespace.clone() });
            }
            let mut env = resolve(&stdio.env, "env")?;
            if stdio.command == SELF_COMMAND {
                // The bundled server judges the addresses it connects to by the same policy.
                env.push(crate::egress::Egress::current().child_env());
            }
            Transport::Stdio { command, args: stdio.args.clone(), env, working_dir }
        }
        (None, Some(http)) => {
            // Headers from secrets are credentials: never over plain http to another host.
            let policy = crate::egress::Egress::current();
            let checked = if http.headers.iter().any(|h| h.value_from.is_some()) {
                policy.check_credential_url(&http.url)
            } else {
                policy.check_url(&http.url)
            };
            checked.map_err(|source| McpError::Egress { field: "spec.transport.http.url", source })?;
            Transport::Http { url: http.url.clone(), headers: resolve(&http.headers, "header")? }
        }
        (None, None) => return Err(McpError::NoTransport),
    };
    Ok(AdapterConfig {
        key: key.to_string(),
        namespace: tool_namespace(key, adapter),
        transport,
        allow: spec.allow.iter().copied().collect(),
        tools: spec.tools.as_ref().map(|tools| tools.iter().cloned().collect::<BTreeSet<_>>()),
        call_timeout: Duration::from_secs(u64::from(spec.call_timeout_seconds)),
        fingerprint: hex::encode(fingerprint.finalize()),
    })
}

/// The program to execute: a command of `stdio_commands`, literally; `akritas` is this
/// binary and may only start a bundled server (`akritas mcp <server>`, no listener).
fn command(stdio: &StdioTransport, policy: &ResourcePolicy) -> Result<String, McpError> {
    if !policy.stdio_commands.contains(&stdio.command) {
        return Err(McpError::CommandNotAllowed {
            command: stdio.command.clone(),
            allowed: policy.stdio_commands.join(", "),
        });
    }
    if stdio.command != SELF_COMMAND {
        return Ok(stdio.command.clone());
    }
    let args: Vec<&str> = stdio.args.iter().map(String::as_str).collect();
    let server = match args.as_slice() {
        ["mcp", server, ..] if SELF_SERVERS.contains(server) => server,
        _ => return Err(McpError::SelfArgsNotAllowed(format!("{:?}", stdio.args))),
    };
    if let Some(listen) = args.iter().find(|a| a.starts_with("--listen") || a.starts_with("--allowed-host")) {
        return Err(McpError::SelfArgsNotAllowed(format!("mcp {server} with {listen}")));
    }
    // The bundled server connects where its --base-url says: the egress policy judges that
    // URL here (the child resolves names itself).
    let base_url = args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix("--base-url") {
        Some("") => args.get(i + 1).copied(),
        Some(rest) => rest.strip_prefix('='),
        None => None,
    });
    if let Some(url) = base_url {
        crate::egress::Egress::current()
            .check_url(url)
            .map_err(|source| McpError::Egress { field: "spec.transport.stdio.args --base-url", source })?;
    }
    std::env::current_exe().map(|p| p.display().to_string()).map_err(McpError::SelfCommand)
}

/// The child's working directory: standalone mode only, under a resource directory
/// (relative paths resolve against the manifest's directory; symlinks are resolved).
/// Operator mode has no directory of the resource's own, so it is refused there.
fn working_dir(dir: &str, base_dir: Option<&Path>, policy: &ResourcePolicy) -> Result<std::path::PathBuf, McpError> {
    let Some(base) = base_dir else {
        return Err(McpError::WorkingDirNotAllowed(format!(
            "{dir:?} is not allowed in operator mode; remove spec.transport.stdio.workingDir (the child runs in \
             the service's working directory)"
        )));
    };
    let joined = base.join(dir);
    policy.in_resource_dirs(&joined).ok_or_else(|| {
        McpError::WorkingDirNotAllowed(format!(
            "{} does not exist or is not under a resource directory (symlinks resolved); use a directory next to \
             the manifests",
            joined.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::catalog::readiness::reasons;
    use crate::catalog::secrets::{EnvAccess, EnvSecrets};
    use crate::catalog::{CatalogStore, Entry};
    use crate::tenancy::Tenancy;

    fn key() -> ObjectKey {
        ObjectKey { kind: Kind::McpAdapter, namespace: "ops".into(), name: "vm".into() }
    }

    fn adapter(spec: Value) -> McpAdapter {
        McpAdapter::new("vm", serde_json::from_value(spec).unwrap())
    }

    fn token(value: &'static str) -> EnvSecrets<impl Fn(&str) -> Option<String> + Send + Sync> {
        EnvSecrets::with_lookup(move |name| (name == "VM_TOKEN").then(|| value.to_owned()))
    }

    fn policy(commands: &[&str], resource_dirs: Vec<PathBuf>) -> ResourcePolicy {
        ResourcePolicy {
            stdio_commands: commands.iter().map(|c| c.to_string()).collect(),
            stdio_env: EnvAccess::new(vec!["TOKEN".into(), "MODE".into(), "VM_*".into(), "LD_*".into()], [])
                .for_namespaces(["ops".to_string()]),
            resource_dirs,
            tenancy: Tenancy::new(["platform".to_string()]),
            ..ResourcePolicy::default()
        }
    }

    #[test]
    fn stdio_adapters_resolve_secrets_and_relative_directories() {
        let spec = json!({
            "transport": {"stdio": {
                "command": "/usr/bin/mcp-vm",
                "args": ["--read-only"],
                "env": [{"name": "TOKEN", "valueFrom": {"env": "VM_TOKEN"}}, {"name": "MODE", "value": "ro"}],
                "workingDir": "servers",
            }},
            "allow": ["read"],
        });
        let resources = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(resources.path().join("servers")).unwrap();
        let base = resources.path().to_path_buf();
        let policy = policy(&["/usr/bin/mcp-vm"], vec![base.clone()]);
        let build = |spec: &Value, token| config(&key(), &adapter(spec.clone()), Some(&base), &token, &policy);
        let built = build(&spec, token("s3cr3t")).unwrap();
        assert_eq!(built.namespace, "mcp.vm");
        assert_eq!(built.call_timeout, Duration::from_secs(10));
        let Transport::Stdio { command, args, env, working_dir } = &built.transport else { panic!("stdio") };
        assert_eq!((command.as_str(), args.as_slice()), ("/usr/bin/mcp-vm", ["--read-only".to_owned()].as_slice()));
        assert_eq!(env, &[("TOKEN".to_owned(), "s3cr3t".to_owned()), ("MODE".to_owned(), "ro".to_owned())]);
        assert_eq!(working_dir.as_deref(), Some(base.canonicalize().unwrap().join("servers").as_path()));
        // The fingerprint follows resolved secrets, so a rotated token restarts the adapter.
        let again = build(&spec, token("s3cr3t")).unwrap();
        let rotated = build(&spec, token("n3w")).unwrap();
        assert_eq!(built.fingerprint, again.fingerprint);
        assert_ne!(built.fingerprint, rotated.fingerprint);
    }

    #[test]
    fn commands_arguments_directories_and_loader_env_follow_the_policy() {
        let resources = tempfile::tempdir().unwrap();
        let base = resources.path().to_path_buf();
        let policy = policy(&["akritas", "/usr/bin/mcp-vm"], vec![base.clone()]);
        let stdio = |stdio: Value| json!({"transport": {"stdio": stdio}, "allow": ["read"]});
        let refused = |spec: Value, base: Option<&Path>| {
            let error = config(&key(), &adapter(spec), base, &token("t0k3n"), &policy).unwrap_err();
            (error.reason(), error.to_string())
        };
        let (reason, message) = refused(stdio(json!({"command": "/bin/sh", "args": ["-c", "id"]})), Some(&base));
        assert_eq!(reason, reasons::COMMAND_NOT_ALLOWED);
        assert!(message.contains("\"/bin/sh\"") && message.contains("stdio_commands"), "{message}");
        assert_eq!(refused(stdio(json!({"command": "mcp-vm"})), None).0, reasons::COMMAND_NOT_ALLOWED, "PATH lookup");
        for args in
            [json!(["index", "build", "--output", "/tmp/x"]), json!(["mcp", "probe", "http://x/mcp"]), json!([])]
        {
            let (reason, message) = refused(stdio(json!({"command": "akritas", "args": args})), None);
            assert_eq!(reason, reasons::COMMAND_NOT_ALLOWED, "{args}");
            assert!(message.contains("stdio_commands"), "{message}");
        }
        let listen = json!({"command": "akritas", "args": ["mcp", "victoriametrics", "--listen=0.0.0.0:1"]});
        assert_eq!(refused(stdio(listen), None).0, reasons::COMMAND_NOT_ALLOWED);
        let bundled = json!({"command": "akritas", "args": ["mcp", "victoriametrics", "--base-url", "http://vm"]});
        assert!(config(&key(), &adapter(stdio(bundled)), None, &token("t"), &policy).is_ok());
        for metadata in [
            json!(["mcp", "victoriametrics", "--base-url", "http://169.254.169.254/"]),
            json!(["mcp", "victoriametrics", "--base-url=http://[fd00:ec2::254]/"]),
        ] {
            let (reason, message) = refused(stdio(json!({"command": "akritas", "args": metadata})), None);
            assert_eq!(reason, crate::egress::EGRESS_NOT_ALLOWED, "{message}");
        }
        // Working directories: standalone and under a resource directory only.
        let outside = json!({"command": "/usr/bin/mcp-vm", "workingDir": "/etc"});
        assert_eq!(refused(stdio(outside), Some(&base)).0, reasons::WORKING_DIR_NOT_ALLOWED);
        let escape = json!({"command": "/usr/bin/mcp-vm", "workingDir": ".."});
        assert_eq!(refused(stdio(escape), Some(&base)).0, reasons::WORKING_DIR_NOT_ALLOWED);
        let (reason, message) = refused(stdio(json!({"command": "/usr/bin/mcp-vm", "workingDir": "."})), None);
        assert_eq!(reason, reasons::WORKING_DIR_NOT_ALLOWED);
        assert!(message.contains("operator mode"), "{message}");
        let preload = json!({"command": "/usr/bin/mcp-vm", "env": [{"name": "LD_PRELOAD", "value": "/tmp/x.so"}]});
        assert_eq!(refused(stdio(preload), None).0, reasons::ENV_NOT_ALLOWED, "even when stdio_env lists it");
        let team_b = ObjectKey { namespace: "team-b".into(), ..key() };
        let token_env = json!({"command": "/usr/bin/mcp-vm", "env": [{"name": "TOKEN", "value": "x"}]});
        let error = config(&team_b, &adapter(stdio(token_env)), None, &token("t"), &policy).unwrap_err();
        assert_eq!(error.reason(), reasons::ENV_NOT_ALLOWED, "a plain stdio_env name serves the home namespaces");
        for hook in ["NODE_OPTIONS", "PYTHONPATH", "BASH_ENV", "PERL5OPT", "GIT_CONFIG_GLOBAL"] {
            let spec = json!({"command": "/usr/bin/mcp-vm", "env": [{"name": hook, "value": "/tmp/x"}]});
            let (reason, message) = refused(stdio(spec), None);
            assert_eq!(reason, reasons::ENV_NOT_ALLOWED, "{hook}");
            assert!(
                message.contains(hook) && message.contains("stdio_env") && !message.contains("/tmp/x"),
                "{message}"
            );
        }
    }

    #[test]
    fn a_tool_namespace_belongs_to_one_adapter_per_run_audience() {
        let entry = |namespace: &str, name: &str, tool_namespace: &str| {
            let spec = json!({"transport": {"http": {"url": "http://vm/mcp"}}, "namespace": tool_namespace, "allow": ["read"]});
            let mut adapter = adapter(spec);
            adapter.metadata.name = Some(name.into());
            adapter.metadata.namespace = Some(namespace.into());
            let key = ObjectKey { kind: Kind::McpAdapter, namespace: namespace.into(), name: name.into() };
            (key, Entry { resource: Arc::new(Resource::McpAdapter(adapter)), source: "test".into(), base_dir: None })
        };
        let store = CatalogStore::new();
        store.publish(
            [
                entry("team-a", "vm", "mcp.vm"),
                entry("platform", "vm", "mcp.vm"),
                entry("team-b", "vm", "mcp.vm"),
                entry("team-a", "m1", "mcp.metrics"),
                entry("team-a", "m2", "mcp.metrics"),
                entry("team-b", "m", "mcp.metrics"),
            ]
            .into_iter()
            .collect(),
            BTreeMap::new(),
        );
        let (configs, failures) = adapters(&store.current(), &token("t"), &policy(&[], vec![]));
        let started: BTreeSet<&str> = configs.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(
            started,
            ["McpAdapter/platform/vm", "McpAdapter/team-a/m1", "McpAdapter/team-b/m"].into_iter().collect()
        );
        let refused: BTreeMap<String, (&str, String)> =
            failures.into_iter().map(|(k, c)| (k.to_string(), (c.reason, c.message))).collect();
        for (loser, winner) in [
            ("McpAdapter/team-a/vm", "McpAdapter/platform/vm"),
            ("McpAdapter/team-b/vm", "McpAdapter/platform/vm"),
            ("McpAdapter/team-a/m2", "McpAdapter/team-a/m1"),
        ] {
            let (reason, message) = &refused[loser];
            assert_eq!(*reason, reasons::TOOL_NAMESPACE_TAKEN);
            assert!(message.contains(winner), "{loser}: {message}");
        }
        assert_eq!(refused.len(), 3);
    }

    #[test]
    fn unresolvable_entries_are_named_without_values() {
        let spec = json!({
            "transport": {"http": {"url": "https://vm/mcp", "headers": [{"name": "Authorization", "valueFrom": {"env": "OTHER"}}]}},
            "allow": ["read"],
        });
        let policy = ResourcePolicy::default();
        let err = config(&key(), &adapter(spec), None, &token("s3cr3t"), &policy).unwrap_err();
        assert!(err.to_string().starts_with("header Authorization: environment variable OTHER is not set"), "{err}");
        let spec = json!({
            "transport": {"http": {"url": "http://vm/mcp", "headers": [{"name": "X-Empty"}]}},
            "allow": ["read"],
        });
        let err = config(&key(), &adapter(spec), None, &token("s3cr3t"), &policy).unwrap_err();
        assert_eq!(err.to_string(), "header X-Empty: no value");
    }
}
