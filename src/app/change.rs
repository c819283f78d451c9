//! The change service's view of the Workspaces: the Catalog's Workspace and
//! ValidatorProfile objects joined with the host's clones ([`super::workspaces`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::workspaces::Workspaces;
use crate::catalog::status::StatusBoard;
use crate::catalog::{CatalogStore, ObjectKey};
use crate::change::ChangeError;
use crate::change::ValidatorSpec;
use crate::change::approvals::{ApprovalOptions, ApprovalStore};
use crate::change::service::{
    ChangeService, ChangeSettings, FetchedHead, Publish, PublishView, ResolvedWorkspace, SourceView,
    WorkspaceDirectory, WorkspaceView,
};
use crate::change::validators::CopyLimits;
use crate::resources::Kind;
use crate::resources::Resource;
use crate::resources::common::is_ready;
use crate::resources::workspace::WorkspaceStatus;

/// Workspaces as the change pipeline sees them.
pub struct Directory {
    catalog: CatalogStore,
    board: StatusBoard,
    workspaces: Workspaces,
}

impl Directory {
    /// Joins the Catalog with the host's working trees.
    pub fn new(catalog: CatalogStore, board: StatusBoard, workspaces: Workspaces) -> Arc<Self> {
        Arc::new(Self { catalog, board, workspaces })
    }

    fn key(kind: Kind, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey { kind, namespace: namespace.to_string(), name: name.to_string() }
    }

    fn ready(&self, key: &ObjectKey) -> (bool, Option<String>) {
        let board = self.board.get();
        let Some(report) = board.resources.iter().find(|r| &r.key == key) else { return (false, None) };
        let message =
            report.conditions.iter().find(|c| c.type_ == crate::resources::common::READY).map(|c| c.message.clone());
        (is_ready(&report.conditions), message)
    }
}

impl WorkspaceDirectory for Directory {
    fn resolve(&self, namespace: &str, name: &str) -> Result<ResolvedWorkspace, ChangeError> {
        let catalog = self.catalog.current();
        let key = Self::key(Kind::Workspace, namespace, name);
        let Some(Resource::Workspace(workspace)) = catalog.entries.get(&key).map(|e| e.resource.as_ref()) else {
            return Err(ChangeError::NotFound(format!(
                "Workspace {namespace}/{name} not found (GET /api/v1/workspaces lists them; an invalid one is shown in GET /api/v1/resources)"
            )));
        };
        let (ready, message) = self.ready(&key);
        let local = self.workspaces.local(namespace, name);
        let Some(local) = local.filter(|l| ready && l.head.is_some()) else {
            return Err(ChangeError::NotReady(format!(
                "Workspace {namespace}/{name} is not ready: {}",
                message.unwrap_or_else(|| "its working tree has not been checked yet".into())
            )));
        };
        let mut validators = Vec::new();
        for profile in &workspace.spec.validator_profiles {
            let key = Self::key(Kind::ValidatorProfile, namespace, profile);
            let Some(Resource::ValidatorProfile(found)) = catalog.entries.get(&key).map(|e| e.resource.as_ref()) else {
                return Err(ChangeError::NotReady(format!(
                    "Workspace {namespace}/{name} names ValidatorProfile {profile:?}, which does not exist or is invalid"
                )));
            };
            let spec = &found.spec;
            validators.push(ValidatorSpec {
                name: profile.clone(),
                argv: spec.argv.clone(),
                files: spec.files.clone(),
                timeout: Duration::from_secs(u64::from(spec.timeout_seconds)),
                output_limit: spec.output_limit_bytes as usize,
                env: spec.env.clone(),
                full_tree: spec.copy == crate::resources::validator_profile::WorkspaceCopy::Full,
            });
        }
        let publish = match (&workspace.spec.publish, &local.remote) {
            (Some(publish), Some(remote)) => {
                Some(Publish { remote: remote.clone(), branch_prefix: publish.branch_prefix.clone() })
            }
            (Some(_), None) => {
                return Err(ChangeError::NotReady(format!(
                    "Workspace {namespace}/{name} publishes branches but has no git remote"
                )));
            }
            (None, _) => None,
        };
        Ok(ResolvedWorkspace {
            namespace: namespace.to_string(),
            name: name.to_string(),
            dir: local.dir.clone(),
            writable: workspace.spec.writable,
            validators,
            publish,
            lock: local.lock.clone(),
        })
    }

    fn list(&self) -> Vec<WorkspaceView> {
        let catalog = self.catalog.current();
        catalog
            .of_kind(Kind::Workspace)
            .filter_map(|(key, entry)| {
                let Resource::Workspace(workspace) = entry.resource.as_ref() else { return None };
                let (ready, message) = self.ready(key);
                let facts: WorkspaceStatus = self.board.facts_of(key).unwrap_or_default();
                let spec = &workspace.spec;
                let source = match &spec.source.git {
                    Some(git) => SourceView::Git { url: git.url.clone(), reference: git.reference.clone() },
                    None => SourceView::Path,
                };
                Some(WorkspaceView {
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                    source,
                    writable: spec.writable,
                    publish: spec.publish.as_ref().map(|p| PublishView { branch_prefix: p.branch_prefix.clone() }),
                    validator_profiles: spec.validator_profiles.clone(),
                    ready,
                    message,
                    head_commit: facts.head_commit,
                    last_fetch: facts.last_fetch,
                    last_error: facts.last_error,
                })
            })
            .collect()
    }

    fn fetch<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<FetchedHead, ChangeError>> + Send + 'a>> {
        Box::pin(async move {
            let catalog = self.catalog.current();
            let key = Self::key(Kind::Workspace, namespace, name);
            let Some(Resource::Workspace(workspace)) = catalog.entries.get(&key).map(|e| e.resource.as_ref()) else {
                return Err(ChangeError::NotFound(format!("Workspace {namespace}/{name} not found")));
            };
            if workspace.spec.source.git.is_none() {
                return Err(ChangeError::Invalid(format!(
                    "Workspace {namespace}/{name} is a local path; only git Workspaces are fetched"
                )));
            }
            let head = self.workspaces.fetch_now(namespace, name).await.map_err(|e| ChangeError::Git(e.to_string()))?;
            Ok(FetchedHead {
                namespace: namespace.to_string(),
                name: name.to_string(),
                head_commit: head.commit,
                reference: head.reference,
            })
        })
    }
}

/// Opens the approval journal (`<data_dir>/change/approvals.jsonl`) and builds the
/// change service.
pub async fn service(
    settings: &crate::config::Settings,
    llm: crate::llm::LlmClient,
    audit: Arc<crate::audit::AuditLog>,
    directory: Arc<Directory>,
    stores: &super::storage::Stores,
) -> anyhow::Result<Arc<ChangeService>> {
    use anyhow::Context;
    let path = settings.data_dir.join("change").join("approvals.jsonl");
    let options = ApprovalOptions {
        ttl: settings.change_approval_ttl,
        max_pending_per_namespace: settings.change_max_pending_per_namespace as usize,
        ..ApprovalOptions::default()
    };
    let approvals = match stores.database() {
        Some((db, _)) => {
            ApprovalStore::open_database(db, options).await.context("opening the change approvals in the database")?
        }
        None => tokio::task::spawn_blocking(move || ApprovalStore::open(&path, options))
            .await
            .context("opening the change approval journal")?
            .context("opening the change approval journal")?,
    };
    let engine = crate::app::narrow::engine(settings);
    let change = ChangeSettings {
        limits: engine.limits,
        default_max_tokens: engine.default_max_tokens.max(PROPOSAL_MIN_TOKENS).min(engine.max_tokens_limit),
        max_tokens_limit: engine.max_tokens_limit,
        temperature: engine.temperature,
        response_language: engine.response_language,
        max_concurrent_previews: settings.change_max_concurrent_previews as usize,
        max_previews_per_namespace: settings.change_max_previews_per_namespace as usize,
        queue_timeout: engine.queue_timeout,
        copy_limits: CopyLimits::default(),
        validators: super::policy::validator_policy(settings),
    };
    Ok(Arc::new(ChangeService::new(llm, Some(audit), approvals, directory, change)))
}

/// Output tokens a proposal gets by default at least: it carries whole replacement texts.
const PROPOSAL_MIN_TOKENS: u32 = 1600;
