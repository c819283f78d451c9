//! The change service's public types: Workspaces as the pipeline sees them, the
//! settings, who asks and who approves, requests and outcomes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::RwLock;

use super::error::ChangeError;
use super::{ValidatorSpec, git};
use crate::engine::budget::BudgetLimits;

/// A Workspace as the change pipeline uses it.
#[derive(Clone, Debug)]
pub struct ResolvedWorkspace {
    /// Namespace of the Workspace object.
    pub namespace: String,
    /// `metadata.name` of the Workspace object, unique within `namespace`.
    pub name: String,
    /// The local working tree (the path, or the host's clone of the remote).
    pub dir: PathBuf,
    /// Whether an approved change may be written (or published).
    pub writable: bool,
    /// Validators that run on every preview, in order.
    pub validators: Vec<ValidatorSpec>,
    /// Publish approved changes as a branch on this remote instead of writing the tree.
    pub publish: Option<Publish>,
    /// Held shared while a preview reads the tree, exclusively while it is fetched or written.
    pub lock: Arc<RwLock<()>>,
}

impl ResolvedWorkspace {
    /// Where the Workspace's changes land: `git <remote URL>` when they are published,
    /// else `path <working tree>` (symlinks resolved). An approval is bound to it.
    pub fn location(&self) -> String {
        match &self.publish {
            Some(publish) => format!("git {}", publish.remote.url),
            None => format!("path {}", self.dir.canonicalize().unwrap_or_else(|_| self.dir.clone()).display()),
        }
    }
}

/// Where and how approved changes of a git Workspace are published.
#[derive(Clone, Debug)]
pub struct Publish {
    /// The remote (with its credentials).
    pub remote: git::Remote,
    /// Prefix of the branch name (`akritas/`); the Run id follows.
    pub branch_prefix: String,
}

/// A Workspace as `GET /api/v1/workspaces` shows it (no local paths).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct WorkspaceView {
    /// Namespace of the Workspace object (the `{namespace}` of its `/fetch` path).
    pub namespace: String,
    /// `metadata.name` of the Workspace (the `{name}` of its `/fetch` path).
    pub name: String,
    /// Where its tree comes from.
    pub source: SourceView,
    /// Whether an approved change may be written (or published).
    pub writable: bool,
    /// How approved changes are published, when they are.
    pub publish: Option<PublishView>,
    /// Validator profiles run on every preview.
    pub validator_profiles: Vec<String>,
    /// Whether the Workspace is ready.
    pub ready: bool,
    /// Why it is not ready, or its condition's message.
    pub message: Option<String>,
    /// Head commit last seen.
    pub head_commit: Option<String>,
    /// RFC 3339 time of the last fetch.
    pub last_fetch: Option<String>,
    /// Why the last fetch failed.
    pub last_error: Option<String>,
}

/// Where a Workspace's tree comes from.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SourceView {
    /// A git remote the host clones.
    Git {
        /// Remote URL.
        url: String,
        /// The ref followed.
        #[serde(rename = "ref")]
        reference: String,
    },
    /// A working tree on the host's volume.
    Path,
}

/// How approved changes are published.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PublishView {
    /// Prefix of the pushed branch's name.
    pub branch_prefix: String,
}

/// The head of a git Workspace after a fetch.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct FetchedHead {
    /// Namespace of the fetched Workspace, as the request path named it.
    pub namespace: String,
    /// Name of the fetched Workspace, as the request path named it.
    pub name: String,
    /// Full commit id.
    pub head_commit: String,
    /// The ref followed.
    #[serde(rename = "ref")]
    pub reference: String,
}

/// A pending or finished change (`GET /api/v1/change/simulations/{id}`).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ChangeView {
    /// The preview as it was answered (answer, result, approval, ...).
    #[serde(flatten)]
    pub preview: serde_json::Map<String, Value>,
    /// Where the change is in its life.
    pub state: super::approvals::ChangeState,
    /// When its approval expires (RFC 3339).
    pub expires_at: String,
}

/// Finds Workspaces (implemented by the host over the Catalog and its clones).
pub trait WorkspaceDirectory: Send + Sync {
    /// The Workspace `namespace/name`, ready to use, or why not.
    fn resolve(&self, namespace: &str, name: &str) -> Result<ResolvedWorkspace, ChangeError>;
    /// Every Workspace with its status, for `GET /api/v1/workspaces` (no local paths).
    fn list(&self) -> Vec<WorkspaceView>;
    /// Fetches a git Workspace now; answers its new head.
    fn fetch<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<FetchedHead, ChangeError>> + Send + 'a>>;
}

/// Settings of the change service.
#[derive(Clone, Debug)]
pub struct ChangeSettings {
    /// Budget of each preview Run.
    pub limits: BudgetLimits,
    /// Output tokens of a proposal call when the request does not say.
    pub default_max_tokens: u32,
    /// Largest output tokens a request may ask for.
    pub max_tokens_limit: u32,
    /// Temperature when the request does not say.
    pub temperature: f64,
    /// Language of the prose (BCP 47).
    pub response_language: String,
    /// Previews executing at once.
    pub max_concurrent_previews: usize,
    /// Previews of one namespace executing at once.
    pub max_previews_per_namespace: usize,
    /// Wait for a free preview slot before answering busy.
    pub queue_timeout: Duration,
    /// Bounds of the validators' copy.
    pub copy_limits: super::validators::CopyLimits,
    /// What validators may run, and where.
    pub validators: super::validators::ValidatorPolicy,
}

/// Who asked for a preview.
#[derive(Clone, Debug)]
pub struct Requester {
    /// Namespace the preview Run belongs to.
    pub namespace: String,
    /// `api`, `cli`.
    pub source: String,
    /// API key name or `cli`.
    pub actor: String,
}

/// Who approved an apply. Only the native API's admin route and the CLI build one.
#[derive(Clone, Debug)]
pub struct Approver {
    /// API key name (`admin` scope) or `cli:<user>`.
    pub name: String,
}

/// `POST /api/v1/change/simulations`.
#[derive(Clone, Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewRequest {
    /// Workspace name.
    pub workspace: String,
    /// Namespace of the Workspace (default: the caller's).
    #[serde(default)]
    pub namespace: Option<String>,
    /// What to change.
    pub request: String,
    /// Files to read (relative); empty: discovery.
    #[serde(default)]
    pub files: Vec<String>,
    /// Output tokens of the proposal call.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
}

/// The result of a preview.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PreviewOutcome {
    /// The audit Run.
    pub run_id: String,
    /// Upstream model.
    pub model: String,
    /// Namespace of the Workspace.
    pub namespace: String,
    /// Workspace name.
    pub workspace: String,
    /// The Markdown answer.
    pub answer: String,
    /// The structured result.
    pub result: Value,
    /// The approval to apply this exact diff, when one was issued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Value>,
    /// Where the time went (milliseconds).
    pub timings: Timings,
}

/// Where a preview's time went.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Timings {
    /// Whole preview.
    pub total_ms: u64,
    /// Waiting for the model.
    pub model_ms: u64,
    /// Reading the snapshot (and discovery's scan).
    pub snapshot_ms: u64,
    /// Preparing the copy and running validators.
    pub validators_ms: u64,
}

/// The result of an apply.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ApplyOutcome {
    /// The audit Run.
    pub run_id: String,
    /// `applied`.
    pub status: &'static str,
    /// Namespace of the Workspace.
    pub namespace: String,
    /// Workspace name.
    pub workspace: String,
    /// Paths written (or committed).
    pub changed_files: Vec<String>,
    /// The pushed branch, when the Workspace publishes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The pushed commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Wall time of the write.
    pub duration_ms: u64,
}

/// Milliseconds of a duration, saturating.
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
