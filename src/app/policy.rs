//! The [`ResourcePolicy`] built from the settings, the secret resolver that applies
//! it, and the registration of the service's own credentials for redaction.

use std::sync::Arc;

use crate::catalog::Catalog;
use crate::catalog::policy::ResourcePolicy;
use crate::catalog::readiness::{Check, reasons};
use crate::catalog::secrets::{EnvAccess, PolicySecrets, SecretError, SecretResolver, SecretValue, resolve_all};
use crate::catalog::status::{BoardSnapshot, InForce, ResourceReport, StatusBoard};
use crate::change::validators::ValidatorPolicy;
use crate::config::Settings;
use crate::resources::common::SecretRef;
use crate::resources::{Kind, Resource};
use crate::tenancy::Tenancy;

/// What resources may start and read, from `stdio_commands`, `resource_env`,
/// `knowledge_roots`, `shared_namespaces`, `data_dir` and (standalone mode) the
/// resource directories.
pub fn resource_policy(settings: &Settings) -> ResourcePolicy {
    ResourcePolicy {
        stdio_commands: settings.stdio_commands.clone(),
        stdio_env: EnvAccess::new(settings.stdio_env.clone(), []).for_namespaces(home_namespaces(settings)),
        env: EnvAccess::new(settings.resource_env.clone(), service_credentials(settings))
            .for_namespaces(home_namespaces(settings)),
        knowledge_roots: settings.knowledge_roots.clone(),
        workspace_roots: settings.workspace_roots.clone(),
        resource_dirs: if settings.kubernetes { Vec::new() } else { settings.resources.clone() },
        data_dir: settings.data_dir.clone(),
        tenancy: Tenancy::new(settings.shared_namespaces.clone()),
    }
}

/// What validators may run and pass through, from `validator_commands`, `validator_env`
/// (never the service's own credentials) and the sandbox.
pub fn validator_policy(settings: &Settings) -> ValidatorPolicy {
    ValidatorPolicy {
        commands: settings.validator_commands.clone(),
        env: EnvAccess::new(settings.validator_env.clone(), service_credentials(settings))
            .for_namespaces(home_namespaces(settings)),
        sandbox: Arc::new(super::process::validator_sandbox(settings)),
    }
}

/// The namespaces plain `resource_env`/`validator_env` names apply to: the home
/// namespace (the pod's in operator mode, `default` standalone) and the shared ones.
fn home_namespaces(settings: &Settings) -> Vec<String> {
    let home = if settings.kubernetes {
        super::process::pod_namespace(settings)
    } else {
        crate::tenancy::DEFAULT_NAMESPACE.to_string()
    };
    std::iter::once(home).chain(settings.shared_namespaces.iter().cloned()).collect()
}

/// Names of the environment variables holding the service's own credentials: the
/// database URL, the audit key, the upstream key and every client API key
/// (`AKRITAS_CONFIG` is always added by [`EnvAccess`]). No resource or validator ever
/// reads them, whatever `resource_env` and `validator_env` say.
fn service_credentials(settings: &Settings) -> Vec<String> {
    [settings.database_url_env.clone(), settings.upstream_api_key_env.clone()]
        .into_iter()
        .chain(settings.api_keys.iter().map(|k| k.env.clone()))
        .chain(settings.audit_key_env.clone())
        .collect()
}

/// Registers the values of the service's own credentials for redaction; of the database
/// URL, its password too (a driver's error may quote it alone).
pub fn register_service_secrets(settings: &Settings, lookup: &dyn Fn(&str) -> Option<String>) {
    for name in service_credentials(settings) {
        let Some(value) = lookup(&name) else { continue };
        if name == settings.database_url_env {
            for password in connection_passwords(&value) {
                crate::redact::register(&password);
            }
        }
        crate::redact::register(&value);
    }
}

/// `inner` behind the policy's `{env:}` rule, registering every value it resolves.
pub fn guarded(inner: Arc<dyn SecretResolver>, policy: &ResourcePolicy) -> Arc<dyn SecretResolver> {
    Arc::new(PolicySecrets::new(inner, policy.env.clone()))
}

/// Installs the process's egress policy from `egress_allow`, `cleartext_credential_hosts`
/// and `egress_proxy` (standalone mode also reaches loopback).
pub fn install_egress(settings: &Settings) {
    crate::egress::Egress::install(
        crate::egress::Egress::new(&settings.egress_allow, !settings.kubernetes)
            .with_cleartext(&settings.cleartext_credential_hosts)
            .with_proxy(settings.egress_proxy.as_deref()),
    );
}

/// The valid resources of a loaded Catalog that `serve` refuses under its policies,
/// each with the `Ready` condition serve shows for it: their `{env:}` references judged
/// by `resource_env`, their MCP adapters by `stdio_commands`, `stdio_env` and the rest
/// of the adapter policy, their validator programs by `validator_commands` and
/// `validator_env`, the way serve judges them. Nothing is read from the environment and
/// nothing is started; `loaded` is the board after the load.
pub fn refusals(
    catalog: &Catalog,
    loaded: &BoardSnapshot,
    policy: &ResourcePolicy,
    validators: &ValidatorPolicy,
    here: Here,
) -> Vec<ResourceReport> {
    let board = StatusBoard::default();
    board.set(loaded.clone());
    let resolver: Arc<dyn SecretResolver> = match here {
        Here::Ignored => Arc::new(AnyValue),
        Here::Checked => Arc::new(crate::catalog::secrets::EnvSecrets::process()),
    };
    let secrets = guarded(resolver, policy);
    for (key, entry) in &catalog.entries {
        let spec = entry.resource.to_value().get("spec").cloned().unwrap_or_default();
        board.set_secrets(key, resolve_all(&spec, &key.namespace, secrets.as_ref()));
    }
    let (_, failures) = crate::mcp::from_catalog::adapters(catalog, secrets.as_ref(), policy);
    for (key, check) in &failures {
        board.set_check(key, check.clone());
    }
    for (key, entry) in catalog.of_kind(Kind::ValidatorProfile) {
        let Resource::ValidatorProfile(profile) = entry.resource.as_ref() else { continue };
        // What the policy refuses; whether the program is installed is judged only here.
        let judged: &[&str] = match here {
            Here::Ignored => &[reasons::COMMAND_NOT_ALLOWED, reasons::ENV_NOT_ALLOWED],
            Here::Checked => &[reasons::COMMAND_NOT_ALLOWED, reasons::ENV_NOT_ALLOWED, reasons::PROGRAM_NOT_FOUND],
        };
        if let Err(refusal) = validators.check(&key.namespace, &profile.spec.argv, &profile.spec.env)
            && judged.contains(&refusal.reason)
        {
            board.set_check(key, Check::failed(refusal.reason, refusal.message));
        }
    }
    if here == Here::Checked {
        directories(catalog, &board, policy);
    }
    for (key, entry) in catalog.of_kind(Kind::RunSchedule) {
        let Resource::RunSchedule(schedule) = entry.resource.as_ref() else { continue };
        board.set_check(key, crate::schedules::report::references(catalog, key, &schedule.spec, &policy.tenancy));
    }
    board.get().resources.iter().filter(|r| r.in_force == InForce::Current && r.problem().is_some()).cloned().collect()
}

/// Whether [`refusals`] judges this machine too: the variables `{env:}` names set here, the
/// directories Workspaces and KnowledgeBases name existing and allowed, validator programs
/// installed. A check for a cluster (or a CI without the secrets) ignores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Here {
    /// Only what the policy refuses.
    Ignored,
    /// What `serve` started here would find too.
    Checked,
}

/// The Workspace and KnowledgeBase directories as `serve` judges them (nothing is cloned
/// or indexed): missing (`PathNotFound`), or outside the roots the policy allows
/// (`PathNotAllowed`), with serve's message.
fn directories(catalog: &Catalog, board: &StatusBoard, policy: &ResourcePolicy) {
    for (key, entry) in catalog.of_kind(Kind::Workspace) {
        let Resource::Workspace(workspace) = entry.resource.as_ref() else { continue };
        let Some(path) = &workspace.spec.source.path else { continue };
        let dir = entry.base_dir.as_deref().map_or_else(|| path.into(), |base| base.join(path));
        if let Err(error) = policy.workspace_dir(&dir, entry.base_dir.is_some()) {
            board.set_check(key, Check::failed(error.reason(), error.at("spec.source.path")));
        }
    }
    for (key, entry) in catalog.of_kind(Kind::KnowledgeBase) {
        let Resource::KnowledgeBase(base) = entry.resource.as_ref() else { continue };
        if let Some(error) = crate::knowledge::bases::directory_problem(&base.spec, entry.base_dir.as_deref(), policy) {
            board.set_check(key, Check::failed(error.reason(), error.to_string()));
        }
    }
}

/// Resolves every reference to an empty value: what the policy lets through, not what
/// this environment holds.
struct AnyValue;

impl SecretResolver for AnyValue {
    fn resolve(&self, _namespace: &str, _reference: &SecretRef) -> Result<SecretValue, SecretError> {
        Ok(SecretValue::new(String::new()))
    }
}

/// The password of a PostgreSQL connection string (`postgres://user:PASSWORD@host/db` or
/// `password=PASSWORD ...`), as written and as the driver decodes it.
fn connection_passwords(url: &str) -> Vec<String> {
    let url = url.trim();
    let written = url::Url::parse(url).ok().and_then(|parsed| parsed.password().map(str::to_string));
    let decoded = url
        .parse::<tokio_postgres::Config>()
        .ok()
        .and_then(|config| config.get_password().map(|p| String::from_utf8_lossy(p).into_owned()));
    let mut passwords: Vec<String> = written.into_iter().chain(decoded).collect();
    passwords.dedup();
    passwords
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_url_and_its_password_are_service_credentials_and_redacted() {
        let settings = Settings { database_url_env: "APP_PG_URL".into(), ..Settings::default() };
        let refused = resource_policy(&settings).env.check("APP_PG_URL").unwrap_err();
        assert_eq!(refused, SecretError::ServiceCredential("APP_PG_URL".into()));
        assert!(refused.to_string().contains("the service's own credential"), "{refused}");
        assert!(validator_policy(&settings).env.check("APP_PG_URL").is_err(), "validators neither");
        let url = "postgres://akritas:pg%2Fpass-41d7@db:5432/akritas";
        register_service_secrets(&settings, &|name| (name == "APP_PG_URL").then(|| url.to_string()));
        let text = format!("connecting with {url} failed; password pg/pass-41d7 or pg%2Fpass-41d7 rejected");
        let clean = crate::redact::redact(&text);
        assert!(!clean.contains("pass-41d7"), "{clean}");
        assert_eq!(connection_passwords("host=db user=a password=kv-pass-0923"), vec!["kv-pass-0923".to_string()]);
        assert!(connection_passwords("postgres://akritas@db/akritas").is_empty());
    }
}
