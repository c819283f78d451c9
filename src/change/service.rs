//! The change service: previews (snapshot → proposal → edits → diff → validators →
//! approval) and applies, each an audited Run (`change_preview`, `change_apply`).
//!
//! Every model call of a preview is charged to the preview's own Run budget, and a
//! preview never holds an engine Run slot: a slow preview (discovery, two proposal
//! attempts, validators) never blocks chats or investigations. Previews
//! at once are bounded by their own semaphore.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::approvals::{ApprovalError, ApprovalId, ApprovalStore, ChangeState, PendingChange, TakeError};
pub use super::error::ChangeError;
pub use super::preview::ATTEMPTS;
use super::preview::{Params, Prepared, Preview};
use super::record::Record;
use super::types::millis;
pub use super::types::{
    ApplyOutcome, Approver, ChangeSettings, ChangeView, FetchedHead, PreviewOutcome, PreviewRequest, Publish,
    PublishView, Requester, ResolvedWorkspace, SourceView, Timings, WorkspaceDirectory, WorkspaceView,
};
use super::{FileChange, ValidatorResult, ValidatorStatus, git};
use crate::audit::{AuditLog, NewEvent, NewRun};
use crate::engine::budget::Budget;
use crate::llm::LlmClient;
use crate::slots::{Class, FairSlots};

/// The change pipeline.
pub struct ChangeService {
    pub(super) llm: LlmClient,
    audit: Option<Arc<AuditLog>>,
    approvals: ApprovalStore,
    workspaces: Arc<dyn WorkspaceDirectory>,
    pub(super) settings: ChangeSettings,
    previews: Arc<FairSlots>,
}

impl ChangeService {
    /// Builds the service.
    pub fn new(
        llm: LlmClient,
        audit: Option<Arc<AuditLog>>,
        approvals: ApprovalStore,
        workspaces: Arc<dyn WorkspaceDirectory>,
        settings: ChangeSettings,
    ) -> Self {
        let previews = Arc::new(FairSlots::new(crate::slots::Limits {
            pool: "previews",
            total: (settings.max_concurrent_previews, "change_max_concurrent_previews"),
            reserved: (0, "change_max_concurrent_previews"),
            per_key: (settings.max_previews_per_namespace, "change_max_previews_per_namespace"),
        }));
        Self { llm, audit, approvals, workspaces, settings, previews }
    }

    /// The Workspaces, for `GET /api/v1/workspaces`.
    pub fn workspaces(&self) -> Vec<WorkspaceView> {
        self.workspaces.list()
    }

    /// The approval store.
    pub fn approvals(&self) -> &ApprovalStore {
        &self.approvals
    }

    /// Fetches a git Workspace now.
    pub async fn fetch(&self, namespace: &str, name: &str) -> Result<FetchedHead, ChangeError> {
        self.workspaces.fetch(namespace, name).await
    }

    /// A pending or finished change by its approval id: its preview and state, as every
    /// replica has recorded it.
    pub async fn get(&self, id: &ApprovalId) -> Result<Option<(String, ChangeView)>, ChangeError> {
        let current = self.approvals.get_current(id).await.map_err(|e| ChangeError::Approval(e.to_string()))?;
        let Some((change, state)) = current else { return Ok(None) };
        let mut preview = change.summary.as_object().cloned().unwrap_or_default();
        preview.remove("state");
        preview.remove("expires_at");
        Ok(Some((change.namespace, ChangeView { preview, state, expires_at: change.expires_at })))
    }

    /// Prepares a change and, when it may be applied, issues its approval. The work runs
    /// on its own task: when the caller goes away (its future is dropped), the preview is
    /// abandoned, its validators' process trees are killed, and its slot is given back
    /// only once they are gone and the copy is removed.
    pub async fn preview(
        self: &Arc<Self>,
        request: PreviewRequest,
        who: Requester,
    ) -> Result<PreviewOutcome, ChangeError> {
        let cancel = tokio_util::sync::CancellationToken::new();
        let _abandon_on_drop = cancel.clone().drop_guard();
        let service = Arc::clone(self);
        tokio::spawn(async move { service.preview_until(request, who, cancel).await })
            .await
            .map_err(|_| ChangeError::Interrupted)?
    }

    async fn preview_until(
        &self,
        request: PreviewRequest,
        who: Requester,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<PreviewOutcome, ChangeError> {
        let started = Instant::now();
        let params = self.check(&request)?;
        let namespace = request.namespace.clone().unwrap_or_else(|| who.namespace.clone());
        let workspace = self.workspaces.resolve(&namespace, request.workspace.trim())?;
        // A share is counted against the caller's namespace.
        let _slot = self
            .previews
            .acquire(&who.namespace, Class::Shared, self.settings.queue_timeout)
            .await
            .map_err(ChangeError::Busy)?;
        let model = self.llm.model().await.map_err(|e| ChangeError::Upstream(e.to_string()))?;
        let record = Record::open(
            self.audit.as_ref(),
            NewRun {
                namespace: who.namespace.clone(),
                source: "change_preview".into(),
                actor: who.actor.clone(),
                model: Some(model.clone()),
                catalog_version: 0,
                metadata: BTreeMap::from([
                    ("workspace".into(), json!(format!("{}/{}", workspace.namespace, workspace.name))),
                    ("requested_by".into(), json!(who.source)),
                ]),
            },
        )
        .await?;
        let mut preview = Preview {
            llm: &self.llm,
            settings: &self.settings,
            budget: Budget::new(self.settings.limits.clone(), Instant::now()),
            record: &record,
            params,
            timings: Timings::default(),
            attempts: Vec::new(),
            protocol: None,
            requester: who.namespace.clone(),
            cancel,
        };
        let result = preview.execute(&request, &workspace).await;
        let budget = preview.budget.usage(Instant::now());
        let mut timings = preview.timings.clone();
        timings.total_ms = millis(started.elapsed());
        let usage = json!({"model_calls": budget.model_calls, "output_tokens": budget.output_tokens,
            "prompt_tokens": budget.prompt_tokens, "duration_ms": budget.duration_ms});
        match result {
            Ok(prepared) => {
                let outcome = self.conclude(prepared, &workspace, &who, &record, model, timings).await;
                let error = outcome.as_ref().err();
                record.close(error, usage).await;
                outcome
            }
            Err(error) => {
                record.close(Some(&error), usage).await;
                Err(error)
            }
        }
    }

    fn check(&self, request: &PreviewRequest) -> Result<Params, ChangeError> {
        if request.workspace.trim().is_empty() {
            return Err(ChangeError::Invalid("workspace is required: name the Workspace to change".into()));
        }
        super::snapshot::check_request(&request.request).map_err(|e| ChangeError::Invalid(e.to_string()))?;
        if request.files.len() > super::MAX_FILES {
            return Err(ChangeError::Invalid(format!(
                "files lists {} paths; give at most {}",
                request.files.len(),
                super::MAX_FILES
            )));
        }
        let max_tokens = request.max_tokens.unwrap_or(self.settings.default_max_tokens);
        if max_tokens == 0 || max_tokens > self.settings.max_tokens_limit {
            return Err(ChangeError::Invalid(format!(
                "max_tokens must be between 1 and {}",
                self.settings.max_tokens_limit
            )));
        }
        let temperature = request.temperature.unwrap_or(self.settings.temperature);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ChangeError::Invalid("temperature must be between 0 and 2".into()));
        }
        Ok(Params { max_tokens, temperature })
    }

    /// Stores the approval (when the change may be applied), records the outcome
    /// and builds the answer.
    async fn conclude(
        &self,
        prepared: Prepared,
        workspace: &ResolvedWorkspace,
        who: &Requester,
        record: &Record,
        model: String,
        timings: Timings,
    ) -> Result<PreviewOutcome, ChangeError> {
        let failed: Vec<&str> = prepared
            .validators
            .iter()
            .filter(|v| v.status == ValidatorStatus::Failed)
            .map(|v| v.name.as_str())
            .collect();
        let withheld = if prepared.changes.is_empty() {
            Some("no change was proposed".to_string())
        } else if !workspace.writable {
            Some("the Workspace is read-only (spec.writable: false): previews only".to_string())
        } else if !failed.is_empty() {
            Some(format!("validators failed: {}", failed.join(", ")))
        } else {
            None
        };
        let mut result = super::answer::result_json(&prepared);
        if let Some(reason) = &withheld {
            result["approval_withheld"] = json!(reason);
        }
        let answer = super::answer::markdown(&prepared, withheld.as_deref());
        let summary = json!({
            "run_id": record.id(),
            "namespace": workspace.namespace,
            "workspace": workspace.name,
            "model": model,
            "requested_by": who.actor,
            "answer": answer,
            "result": result,
        });
        let mut approval = None;
        if withheld.is_none() {
            let created = jiff::Timestamp::now();
            let pending = PendingChange {
                namespace: workspace.namespace.clone(),
                workspace: workspace.name.clone(),
                commit: prepared.commit.clone(),
                location: Some(workspace.location()),
                run_id: record.id().to_string(),
                requester: who.actor.clone(),
                diff: prepared.diff.clone(),
                diff_sha256: prepared.diff_sha256.clone(),
                changes: prepared.changes.clone(),
                validators: prepared.validators.clone(),
                validators_sha256: validators_sha256(&prepared.validators),
                created_at: created.to_string(),
                expires_at: String::new(),
                summary: summary.clone(),
            };
            let id = self.approvals.insert(pending).await.map_err(|e| match e {
                ApprovalError::Full { .. } => {
                    crate::slots::count_refusal("pending_changes", "pending_changes_host_limit", &workspace.namespace);
                    ChangeError::TooManyPending(e.to_string())
                }
                ApprovalError::NamespaceFull { .. } => {
                    crate::slots::count_refusal(
                        "pending_changes",
                        "change_max_pending_per_namespace",
                        &workspace.namespace,
                    );
                    ChangeError::TooManyPending(e.to_string())
                }
                other => ChangeError::Approval(other.to_string()),
            })?;
            let expires_at = self.approvals.get(&id).map(|(change, _)| change.expires_at).unwrap_or_default();
            approval = Some(json!({"id": id, "status": "pending", "expires_at": expires_at}));
        }
        record
            .event(NewEvent {
                kind: "accepted".into(),
                status: Some(if approval.is_some() { "approval_issued" } else { "no_approval" }.into()),
                metadata: BTreeMap::from([
                    ("changed_files".into(), json!(prepared.changes.iter().map(|c| &c.path).collect::<Vec<_>>())),
                    ("diff_sha256".into(), json!(prepared.diff_sha256)),
                    ("commit".into(), json!(prepared.commit)),
                    ("approval_required".into(), json!(approval.is_some())),
                    ("approval_withheld".into(), json!(withheld)),
                ]),
                ..NewEvent::default()
            })
            .await;
        Ok(PreviewOutcome {
            run_id: record.id().to_string(),
            model,
            namespace: workspace.namespace.clone(),
            workspace: workspace.name.clone(),
            answer,
            result,
            approval,
            timings,
        })
    }

    /// Applies a pending change once: re-verifies every original byte, then writes
    /// atomically (or publishes a branch). The approval is consumed whatever happens.
    pub async fn apply(&self, id: &ApprovalId, approver: Approver) -> Result<ApplyOutcome, ChangeError> {
        let change = self.approvals.take(id, &approver.name).await.map_err(|e| match e {
            TakeError::Store(error) => ChangeError::Approval(error.to_string()),
            other => ChangeError::NotFound(other.to_string()),
        })?;
        let record = Record::open(
            self.audit.as_ref(),
            NewRun {
                namespace: change.namespace.clone(),
                source: "change_apply".into(),
                actor: approver.name.clone(),
                model: None,
                catalog_version: 0,
                metadata: BTreeMap::from([
                    ("workspace".into(), json!(format!("{}/{}", change.namespace, change.workspace))),
                    ("preview_run_id".into(), json!(change.run_id)),
                    ("diff_sha256".into(), json!(change.diff_sha256)),
                    ("requested_by".into(), json!(change.requester)),
                    ("approver".into(), json!(approver.name)),
                ]),
            },
        )
        .await?;
        let started = Instant::now();
        let written = self.write(&change, &record).await;
        let duration_ms = millis(started.elapsed());
        let at = jiff::Timestamp::now().to_string();
        let state = match &written {
            Ok((branch, commit)) => ChangeState::Applied {
                run_id: record.id().to_string(),
                approver: approver.name.clone(),
                at,
                detail: json!({"branch": branch, "commit": commit}),
            },
            Err(error) => ChangeState::Failed {
                run_id: record.id().to_string(),
                approver: approver.name.clone(),
                at,
                error: error.to_string(),
            },
        };
        if let Err(error) = self.approvals.finish(id, state).await {
            tracing::error!(%error, "the outcome of an apply could not be stored");
        }
        let changed_files: Vec<String> = change.changes.iter().map(|c| c.path.clone()).collect();
        record
            .event(NewEvent {
                kind: "workspace_apply".into(),
                status: Some(if written.is_ok() { "succeeded" } else { "failed" }.into()),
                metadata: BTreeMap::from([
                    ("changed_files".into(), json!(changed_files)),
                    ("diff_sha256".into(), json!(change.diff_sha256)),
                    ("validators".into(), json!(validator_summary(&change.validators))),
                    ("approver".into(), json!(approver.name)),
                    ("duration_ms".into(), json!(duration_ms)),
                ]),
                ..NewEvent::default()
            })
            .await;
        record.close(written.as_ref().err(), json!({"duration_ms": duration_ms})).await;
        let (branch, commit) = written?;
        Ok(ApplyOutcome {
            run_id: record.id().to_string(),
            status: "applied",
            namespace: change.namespace,
            workspace: change.workspace,
            changed_files,
            branch,
            commit,
            duration_ms,
        })
    }

    /// Checks the stored change against its bindings, then writes it.
    async fn write(
        &self,
        change: &PendingChange,
        record: &Record,
    ) -> Result<(Option<String>, Option<String>), ChangeError> {
        let workspace = self.workspaces.resolve(&change.namespace, &change.workspace)?;
        let moved = |what: String| {
            ChangeError::Conflict(format!(
                "Workspace {}/{} {what} since the preview; nothing was written: preview the change again",
                change.namespace, change.workspace
            ))
        };
        match &change.location {
            None => return Err(moved("may have moved (the approval predates location binding)".into())),
            Some(approved) if *approved != workspace.location() => {
                return Err(moved(format!("moved from {approved} to {}", workspace.location())));
            }
            Some(_) => {}
        }
        if !workspace.writable {
            return Err(ChangeError::Conflict(format!(
                "Workspace {}/{} is no longer writable; nothing was written",
                change.namespace, change.workspace
            )));
        }
        let diff = super::diff::unified(&change.changes);
        if super::diff::sha256(&diff) != change.diff_sha256
            || validators_sha256(&change.validators) != change.validators_sha256
        {
            return Err(ChangeError::Conflict(
                "the stored change does not match its approved diff or validator results; nothing was written".into(),
            ));
        }
        let _exclusive = workspace.lock.clone().write_owned().await;
        let changes = change.changes.clone();
        match &workspace.publish {
            None => {
                let dir = workspace.dir.clone();
                let head = tokio::task::spawn_blocking(move || git::head(&dir).ok().map(|h| h.commit))
                    .await
                    .map_err(|_| ChangeError::Interrupted)?;
                if let Some(approved) = &change.commit
                    && head.as_ref() != Some(approved)
                {
                    let now = head.unwrap_or_else(|| "no commit".into());
                    return Err(moved(format!("HEAD moved from {approved} to {now}")));
                }
                let dir = workspace.dir.clone();
                tokio::task::spawn_blocking(move || super::apply::apply(&dir, &changes))
                    .await
                    .map_err(|_| ChangeError::Interrupted)?
                    .map_err(ChangeError::from)?;
                Ok((None, None))
            }
            Some(publish) => {
                let Some(base) = change.commit.clone() else {
                    return Err(ChangeError::Conflict("the preview has no snapshot commit to branch from".into()));
                };
                let branch = format!("{}{}", publish.branch_prefix, record.id());
                let message = commit_message(change, record.id());
                let (dir, remote) = (workspace.dir.clone(), publish.remote.clone());
                let branch_name = branch.clone();
                let published = tokio::task::spawn_blocking(move || {
                    verify_blobs(&dir, &base, &changes)?;
                    git::publish(
                        &dir,
                        &remote,
                        &base,
                        &changes,
                        &branch_name,
                        &message,
                        ("Akritas", "akritas@localhost"),
                    )
                    .map_err(|e| ChangeError::Git(e.to_string()))
                })
                .await
                .map_err(|_| ChangeError::Interrupted)??;
                Ok((Some(published.branch), Some(published.commit)))
            }
        }
    }
}

/// Every replaced file's original bytes must be the snapshot commit's, and every
/// created path must be absent from it.
fn verify_blobs(dir: &std::path::Path, base: &str, changes: &[FileChange]) -> Result<(), ChangeError> {
    for change in changes {
        let blob = git::blob_at(dir, base, &change.path).map_err(|e| ChangeError::Git(e.to_string()))?;
        let matches = match (&change.before, blob) {
            (Some(before), Some(blob)) => before.as_bytes() == blob.as_slice(),
            (None, None) => true,
            _ => false,
        };
        if !matches {
            return Err(ChangeError::Stale(format!(
                "stale preview: {:?} at commit {base} is not what the preview read",
                change.path
            )));
        }
    }
    Ok(())
}

/// The commit message of a published change: the Run id and the validator summary.
fn commit_message(change: &PendingChange, run_id: &str) -> String {
    let title = match change.summary["result"]["analysis"].as_str() {
        Some(analysis) => crate::text::truncate_chars(&crate::text::one_line(analysis), 60, crate::text::ELLIPSIS),
        None => format!("Change to {}", change.workspace),
    };
    let mut message = format!(
        "{title}\n\nPrepared by Akritas (preview Run {}, apply Run {run_id}), requested by {}.\nDiff sha256: {}\n\nValidators:\n",
        change.run_id, change.requester, change.diff_sha256
    );
    for line in validator_summary(&change.validators) {
        message.push_str(&format!("- {line}\n"));
    }
    if change.validators.is_empty() {
        message.push_str("- none configured\n");
    }
    message
}

/// One line per validator: `name: status (N ms)`.
pub fn validator_summary(validators: &[ValidatorResult]) -> Vec<String> {
    validators
        .iter()
        .map(|v| {
            format!(
                "{}: {} ({} ms)",
                v.name,
                serde_json::to_value(v.status).unwrap_or_default().as_str().unwrap_or(""),
                v.duration_ms
            )
        })
        .collect()
}

/// The hash binding an approval to the validator results it was issued with.
pub fn validators_sha256(validators: &[ValidatorResult]) -> String {
    let bytes = serde_json::to_vec(validators).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}
