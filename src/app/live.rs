//! Live components derived from the Catalog, reconciled whenever it changes:
//! MCP adapters (connections and their authorized tools) and knowledge-base indexes.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::catalog::policy::ResourcePolicy;
use crate::catalog::readiness::{Check, reasons};
use crate::catalog::secrets::SecretResolver;
use crate::catalog::status::StatusBoard;
use crate::catalog::{CatalogStore, ObjectKey};
use crate::engine::run::Engine;
use crate::knowledge::bases::KnowledgeBases;
use crate::mcp::from_catalog;
use crate::mcp::{AdapterPhase, McpHost};
use crate::resources::Kind;
use crate::resources::knowledge_base::KnowledgeBaseStatus;
use crate::resources::mcp_adapter::McpAdapterStatus;
use crate::resources::skill::SkillStatus;
use crate::resources::validator_profile::ValidatorProfileStatus;

/// The MCP adapters' dependencies: where adapters come from and what they may start.
pub struct McpSources {
    pub store: CatalogStore,
    pub secrets: Arc<dyn SecretResolver>,
    pub secrets_changed: tokio::sync::watch::Receiver<u64>,
    pub policy: Arc<ResourcePolicy>,
}

/// Keeps the MCP host in line with the Catalog and the engine's tools in line with
/// the host, until cancelled; then stops every adapter.
pub async fn mcp_adapters(
    host: McpHost,
    sources: McpSources,
    board: StatusBoard,
    engine: Arc<Engine>,
    cancel: CancellationToken,
) {
    let McpSources { store, secrets, mut secrets_changed, policy } = sources;
    let mut catalog_changes = store.subscribe();
    let mut host_changes = host.subscribe();
    let mut secrets_open = true;
    let mut failures = reconcile(&host, &store, secrets.as_ref(), &policy).await;
    publish(&host, &store, &board, &engine, &failures);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            changed = catalog_changes.changed() => {
                if changed.is_err() { break; }
                failures = reconcile(&host, &store, secrets.as_ref(), &policy).await;
            }
            changed = host_changes.changed() => {
                if changed.is_err() { break; }
            }
            // A rotated Secret: adapters whose resolved configuration changed restart.
            changed = secrets_changed.changed(), if secrets_open => {
                match changed {
                    Ok(()) => failures = reconcile(&host, &store, secrets.as_ref(), &policy).await,
                    Err(_) => secrets_open = false,
                }
            }
        }
        publish(&host, &store, &board, &engine, &failures);
    }
    host.shutdown().await;
}

async fn reconcile(
    host: &McpHost,
    store: &CatalogStore,
    secrets: &dyn SecretResolver,
    policy: &ResourcePolicy,
) -> Vec<(ObjectKey, Check)> {
    let catalog = store.current();
    // Refused adapters are logged with the other resources that are not Ready.
    let (configs, failures) = from_catalog::adapters(&catalog, secrets, policy);
    host.reconcile(configs).await;
    failures.into_iter().collect()
}

fn publish(
    host: &McpHost,
    store: &CatalogStore,
    board: &StatusBoard,
    engine: &Engine,
    failures: &[(ObjectKey, Check)],
) {
    engine.set_namespaced_tools(&host.registries());
    let catalog = store.current();
    let statuses = host.status();
    for (key, _) in catalog.of_kind(Kind::McpAdapter) {
        let name = key.to_string();
        let (facts, check) = match (statuses.iter().find(|s| s.key == name), failures.iter().find(|(k, _)| k == key)) {
            (_, Some((_, check))) => {
                (McpAdapterStatus { authorized_tools: Some(0), ..Default::default() }, check.clone())
            }
            (Some(status), None) => {
                let authorized = status.tools.iter().filter(|t| t.authorized).count();
                let check = match status.phase {
                    AdapterPhase::Connected => Check::passed(
                        reasons::CONNECTED,
                        format!("{} tools listed, {authorized} authorized", status.tools.len()),
                    ),
                    AdapterPhase::Connecting => Check::pending(reasons::CONNECTING, "starting the session"),
                    AdapterPhase::Retrying => Check::failed(
                        reasons::NOT_CONNECTED,
                        format!("{}; retrying", status.last_error.as_deref().unwrap_or("the session ended")),
                    ),
                };
                let authorized_tools = Some(u32::try_from(authorized).unwrap_or(u32::MAX));
                (McpAdapterStatus { tools: status.tools.clone(), authorized_tools, ..Default::default() }, check)
            }
            (None, None) => (McpAdapterStatus::default(), Check::pending(reasons::CONNECTING, "starting the session")),
        };
        board.set_facts(key, facts);
        board.set_check(key, check);
    }
    board.retain_observed(|key| key.kind != Kind::McpAdapter || catalog.entries.contains_key(key));
}

/// How often knowledge-base sources are re-read for changed files.
pub const KNOWLEDGE_RESCAN: std::time::Duration = std::time::Duration::from_secs(30);

/// Keeps the knowledge-base indexes in line with the Catalog and their files.
pub async fn knowledge_bases(
    bases: KnowledgeBases,
    store: CatalogStore,
    board: StatusBoard,
    policy: Arc<ResourcePolicy>,
    cancel: CancellationToken,
) {
    let mut catalog_changes = store.subscribe();
    let mut rescan = tokio::time::interval(KNOWLEDGE_RESCAN);
    loop {
        let catalog = store.current();
        let (worker, policy) = (bases.clone(), policy.clone());
        let refreshed = match tokio::task::spawn_blocking(move || {
            let refreshed = worker.refresh(&catalog, &policy);
            release_freed_memory();
            refreshed
        })
        .await
        {
            Ok(refreshed) => refreshed,
            Err(error) => {
                tracing::error!(%error, "knowledge-base refresh failed");
                Vec::new()
            }
        };
        for item in refreshed {
            let (facts, check) = match &item.outcome {
                Ok(stats) => (
                    KnowledgeBaseStatus {
                        documents: Some(stats.documents as u64),
                        chunks: Some(stats.chunks as u64),
                        index_sha256: Some(stats.content_sha256.clone()),
                        ..KnowledgeBaseStatus::skipping(&item.skipped)
                    },
                    Check::passed(reasons::INDEXED, format!("{} documents, {} chunks", stats.documents, stats.chunks)),
                ),
                Err(error) => {
                    tracing::warn!(knowledge_base = %item.key, %error, "knowledge base not indexed");
                    (KnowledgeBaseStatus::skipping(&item.skipped), Check::failed(error.reason(), error.to_string()))
                }
            };
            board.set_facts(&item.key, facts);
            board.set_check(&item.key, check);
        }
        let catalog = store.current();
        board.retain_observed(|key| key.kind != Kind::KnowledgeBase || catalog.entries.contains_key(key));
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = catalog_changes.changed() => if changed.is_err() { return; },
            _ = rescan.tick() => {}
        }
    }
}

/// Gives memory freed after an indexing pass or a journal replay back to the operating system.
pub fn release_freed_memory() {
    crate::telemetry::release_freed_memory();
}

/// Publishes every AlertSource's webhook path and counters whenever the Catalog
/// changes (deliveries refresh them as they happen).
pub async fn alert_sources(
    alerts: Arc<crate::alerts::store::AlertStore>,
    store: CatalogStore,
    board: StatusBoard,
    cancel: CancellationToken,
) {
    let mut catalog_changes = store.subscribe();
    loop {
        let catalog = store.current();
        for (key, _) in catalog.of_kind(Kind::AlertSource) {
            crate::alerts::source_status::publish(&alerts, &board, key);
        }
        board.retain_observed(|key| key.kind != Kind::AlertSource || catalog.entries.contains_key(key));
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = catalog_changes.changed() => if changed.is_err() { return; },
        }
    }
}

/// Longest wait for the Catalog's MCP adapters to connect before Runs that need
/// their tools start (`ask`, alert investigations after a start).
pub const MCP_CONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Waits, at most `limit`, until `expected` adapters have a status and none of
/// them is still connecting.
pub async fn adapters_settled(host: &McpHost, expected: usize, limit: std::time::Duration) {
    let mut changes = host.subscribe();
    let settled = |host: &McpHost| {
        let status = host.status();
        status.len() >= expected && status.iter().all(|s| !matches!(s.phase, crate::mcp::AdapterPhase::Connecting))
    };
    let _ = tokio::time::timeout(limit, async {
        while !settled(host) {
            if changes.changed().await.is_err() {
                break;
            }
        }
    })
    .await;
}

/// Publishes facts discovered about Skills (content hash) and ValidatorProfiles
/// (preflight: the program allowed by `validator_commands`, found on PATH, and its
/// version, run in the sandbox) whenever the Catalog changes (Workspaces: see
/// [`super::workspaces`]).
pub async fn discovered_facts(
    store: CatalogStore,
    board: StatusBoard,
    secrets: Arc<dyn SecretResolver>,
    validators: crate::change::validators::ValidatorPolicy,
    mut secrets_changed: tokio::sync::watch::Receiver<u64>,
    cancel: CancellationToken,
) {
    use sha2::{Digest, Sha256};
    let mut catalog_changes = store.subscribe();
    let mut secrets_open = true;
    loop {
        let catalog = store.current();
        for (key, entry) in &catalog.entries {
            // Every secret reference must resolve (a rotated or deleted Secret shows here).
            let spec = entry.resource.to_value().get("spec").cloned().unwrap_or_default();
            let outcome = crate::catalog::secrets::resolve_all(&spec, &key.namespace, secrets.as_ref());
            board.set_secrets(key, outcome);
            let check = match entry.resource.as_ref() {
                crate::resources::Resource::Skill(_) => {
                    if let Some(content) = catalog.skill_content(key) {
                        let sha256 = hex::encode(Sha256::digest(content.as_bytes()));
                        board.update_facts(key, |status: &mut SkillStatus| status.content_sha256 = Some(sha256));
                    }
                    None
                }
                crate::resources::Resource::NotificationReceiver(receiver) => {
                    Some(receiver_egress(&receiver.spec, &key.namespace, secrets.as_ref()))
                }
                crate::resources::Resource::ValidatorProfile(profile) => {
                    let (found, check) =
                        preflight(&validators, &key.namespace, &profile.spec.argv, &profile.spec.env).await;
                    let sandbox = validators.sandbox.describe();
                    board.update_facts(key, |status: &mut ValidatorProfileStatus| {
                        if let Some((program, version)) = found {
                            status.resolved_program = Some(program);
                            status.version = version;
                        }
                        status.sandbox = Some(sandbox);
                    });
                    Some(check)
                }
                _ => None,
            };
            if let Some(check) = check {
                board.set_check(key, check);
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = catalog_changes.changed() => if changed.is_err() { return; },
            changed = secrets_changed.changed(), if secrets_open => if changed.is_err() { secrets_open = false; },
        }
    }
}

/// Whether the egress policy lets a receiver's URLs be reached: the webhook URL (read
/// from its secret when it is kept in one) and the Telegram or Mattermost base URL.
fn receiver_egress(
    spec: &crate::resources::notification_receiver::NotificationReceiverSpec,
    namespace: &str,
    secrets: &dyn SecretResolver,
) -> Check {
    // (field, URL, whether a credential travels with it)
    let mut urls: Vec<(&str, String, bool)> = Vec::new();
    if let Some(webhook) = &spec.webhook {
        let bearer = webhook.bearer_token.is_some();
        match (&webhook.url, &webhook.url_from) {
            (Some(url), _) => urls.push(("spec.webhook.url", url.clone(), bearer)),
            (None, Some(reference)) => {
                if let Ok(url) = secrets.resolve(namespace, reference) {
                    urls.push(("spec.webhook.urlFrom", url.expose().to_string(), bearer));
                }
            }
            (None, None) => {}
        }
    }
    if let Some(telegram) = &spec.telegram {
        let base = telegram.base_url.clone().unwrap_or_else(|| "https://api.telegram.org".to_string());
        urls.push(("spec.telegram.baseUrl", base, true));
    }
    if let Some(mattermost) = &spec.mattermost {
        urls.push(("spec.mattermost.baseUrl", mattermost.base_url.clone(), true));
    }
    if let Some(slack) = &spec.slack {
        let base = slack.base_url.clone().unwrap_or_else(|| crate::notify::slack::SLACK_DEFAULT_BASE_URL.to_string());
        urls.push(("spec.slack.baseUrl", base, true));
    }
    let policy = crate::egress::Egress::current();
    for (field, url, credential) in &urls {
        let checked = if *credential { policy.check_credential_url(url) } else { policy.check_url(url) };
        if let Err(error) = checked {
            // The message names the host and the address, never the URL (it may hold a token).
            return Check::failed(error.reason(), format!("{field}: {error}"));
        }
    }
    Check::passed(reasons::EGRESS_ALLOWED, "the egress policy allows the receiver's URLs")
}

/// Checks a validator's program against the policy (nothing runs for a refused one),
/// then reads the first line of its `--version` in the sandbox.
async fn preflight(
    policy: &crate::change::validators::ValidatorPolicy,
    namespace: &str,
    argv: &[String],
    env: &[String],
) -> (Option<(String, Option<String>)>, Check) {
    let resolved = match policy.check(namespace, argv, env) {
        Ok(resolved) => resolved,
        Err(refusal) => return (None, Check::failed(refusal.reason, refusal.message)),
    };
    let program = argv.first().map_or("", String::as_str);
    let version = match crate::change::validators::version(policy, program, &resolved).await {
        Ok(version) => version,
        Err(message) => {
            let message = format!("{message}; make it an executable file the sandbox can run");
            return (None, Check::failed(reasons::PROGRAM_NOT_RUNNABLE, message));
        }
    };
    let check = Check::passed(reasons::PROGRAM_FOUND, format!("{program} is {}", resolved.display()));
    (Some((resolved.display().to_string(), version)), check)
}
