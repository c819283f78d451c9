//! What makes a resource `Ready`, in both modes: the condition vocabulary, what
//! each object needs observed before it works (its secrets resolved, the live check
//! of its kind), and the outcome of such a check. The status board derives the
//! conditions from these (see [`super::status::StatusBoard`]); the directory view
//! and the operator's status writer show the same conditions.

use crate::resources::common::secret_refs;
use crate::resources::{Kind, Resource};

/// Condition types.
pub(crate) mod conditions {
    /// Whether the object works: valid, its secrets resolve and its live check passed.
    pub const READY: &str = crate::resources::common::READY;
    /// Whether every secret reference of the object resolves now.
    pub const SECRETS_RESOLVED: &str = "SecretsResolved";
    /// McpAdapter: the session with the server is up. Slack NotificationReceiver: its Socket
    /// Mode connection is open (`inbound.mode: socket`), or its bot token answers `auth.test`.
    pub const CONNECTED: &str = "Connected";
    /// Workspace: the local path is a git working tree with a HEAD commit, or the
    /// remote is cloned.
    pub const CHECKED: &str = "Checked";
    /// ValidatorProfile: the program was found and runs.
    pub const PROGRAM_FOUND: &str = "ProgramFound";
    /// KnowledgeBase: the index is built.
    pub const INDEXED: &str = "Indexed";
    /// NotificationReceiver: the egress policy lets its URLs be reached.
    pub const EGRESS_ALLOWED: &str = "EgressAllowed";
    /// RunSchedule: every receiver and skill it names exists and its namespace sees it.
    pub const REFERENCES_RESOLVED: &str = "ReferencesResolved";
    /// RunSchedule: `spec.suspend` is true (no tick runs); not part of `Ready`.
    pub const SUSPENDED: &str = "Suspended";
}

/// Condition reasons. `Ready` carries the reason of the first condition that is
/// not good (validation first, then secrets, then the live check).
pub(crate) mod reasons {
    /// `Ready=True`: the object works.
    pub const READY: &str = "Ready";
    /// The newest version is invalid (the message lists every problem).
    pub const INVALID: &str = "Invalid";
    /// Every secret reference resolves.
    pub const SECRETS_RESOLVED: &str = "SecretsResolved";
    /// A secret reference does not resolve (unset variable, missing Secret or key).
    pub const SECRETS_UNRESOLVED: &str = "SecretsUnresolved";
    /// The secret references have not been resolved yet.
    pub const RESOLVING: &str = "Resolving";
    /// McpAdapter or Slack receiver: the session or connection is being started.
    pub const CONNECTING: &str = "Connecting";
    /// McpAdapter: the session is up and its tools are listed; Slack receiver: connected.
    pub const CONNECTED: &str = "Connected";
    /// McpAdapter or Slack receiver: the server could not be started or reached (retried).
    pub const NOT_CONNECTED: &str = "NotConnected";
    /// Workspace or ValidatorProfile: the check has not run yet.
    pub const CHECKING: &str = "Checking";
    /// Workspace: HEAD resolves to a commit.
    pub const HEAD_FOUND: &str = "HeadFound";
    /// Workspace or KnowledgeBase: a source path does not exist (or cannot be read).
    pub const PATH_NOT_FOUND: &str = "PathNotFound";
    /// Workspace: the path is not a git working tree with a commit.
    pub const NOT_A_REPOSITORY: &str = "NotARepository";
    /// Workspace: the remote is cloned and checked out at the ref.
    pub const CLONED: &str = "Cloned";
    /// Workspace: the remote could not be cloned (never `Ready`).
    pub const CLONE_FAILED: &str = "CloneFailed";
    /// Workspace: the latest fetch failed; the previous checkout stays in use.
    pub const FETCH_FAILED: &str = "FetchFailed";
    /// ValidatorProfile: the program exists and runs.
    pub const PROGRAM_FOUND: &str = "ProgramFound";
    /// ValidatorProfile: the program exists but cannot be executed.
    pub const PROGRAM_NOT_RUNNABLE: &str = "ProgramNotRunnable";
    /// ValidatorProfile: the program is not on PATH (or not a file).
    pub const PROGRAM_NOT_FOUND: &str = "ProgramNotFound";
    /// KnowledgeBase: the index is being built.
    pub const INDEXING: &str = "Indexing";
    /// KnowledgeBase: the index is built.
    pub const INDEXED: &str = "Indexed";
    /// KnowledgeBase: the sources could not be read or indexed.
    pub const INDEX_FAILED: &str = "IndexFailed";
    /// The object declares something this version of Akritas does not do.
    pub const NOT_AVAILABLE: &str = "NotAvailable";
    /// McpAdapter: the stdio command (or its arguments) is not allowed by `stdio_commands`;
    /// ValidatorProfile: the program is not allowed by `validator_commands`.
    pub const COMMAND_NOT_ALLOWED: &str = "CommandNotAllowed";
    /// McpAdapter: `workingDir` is outside what the service allows.
    pub const WORKING_DIR_NOT_ALLOWED: &str = "WorkingDirNotAllowed";
    /// McpAdapter: another adapter visible to the same Runs has this tool namespace.
    pub const TOOL_NAMESPACE_TAKEN: &str = "ToolNamespaceTaken";
    /// `{env: NAME}` names a variable resources may not read (`resource_env`, the
    /// service's own credentials), or an McpAdapter sets a loader variable.
    pub const ENV_NOT_ALLOWED: &str = "EnvNotAllowed";
    /// KnowledgeBase: a directory is outside `knowledge_roots` or overlaps the data directory.
    pub const PATH_NOT_ALLOWED: &str = "PathNotAllowed";
    /// ValidatorProfile: the validator sandbox cannot be had on this host (no Landlock),
    /// so nothing runs.
    pub const SANDBOX_UNAVAILABLE: &str = "SandboxUnavailable";
    /// A URL the object declares may be reached under the egress policy.
    pub const EGRESS_ALLOWED: &str = "EgressAllowed";
    /// RunSchedule: every receiver and skill it names resolves.
    pub const REFERENCES_RESOLVED: &str = "ReferencesResolved";
    /// RunSchedule: a receiver or skill it names does not exist or is not visible to its namespace.
    pub const REFERENCE_NOT_FOUND: &str = "ReferenceNotFound";
    /// RunSchedule: `spec.suspend` is true.
    pub const SUSPENDED: &str = "Suspended";
    /// RunSchedule: its ticks run.
    pub const ACTIVE: &str = "Active";
    // A URL leading where the egress policy refuses, or a credential over plain http: the
    // reasons `crate::egress::EGRESS_NOT_ALLOWED` and `crate::egress::CLEARTEXT_CREDENTIAL`.
}

/// The live check a kind has: its condition type and the reason shown until the
/// first outcome arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveCheck {
    /// Condition type.
    pub condition: &'static str,
    /// Reason while no outcome has been reported.
    pub pending: &'static str,
}

/// What must be observed about an object before it is `Ready`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// It has secret references, which must resolve.
    pub secrets: bool,
    /// The live check its kind has, if any.
    pub check: Option<LiveCheck>,
    /// What the object declares that this version does not do: it is never
    /// `Ready` while it declares it (the message says what is missing).
    pub unavailable: Option<&'static str>,
}

impl Needs {
    /// The needs of a valid resource.
    pub fn of(resource: &Resource) -> Self {
        let spec = resource.to_value().get("spec").cloned().unwrap_or_default();
        let check = live_check(resource.kind());
        // Everything a valid resource declares is served by this version.
        Needs { secrets: !secret_refs(&spec).is_empty(), check, unavailable: None }
    }
}

/// The live check of a kind.
pub fn live_check(kind: Kind) -> Option<LiveCheck> {
    let (condition, pending) = match kind {
        Kind::McpAdapter => (conditions::CONNECTED, reasons::CONNECTING),
        Kind::Workspace => (conditions::CHECKED, reasons::CHECKING),
        Kind::ValidatorProfile => (conditions::PROGRAM_FOUND, reasons::CHECKING),
        Kind::KnowledgeBase => (conditions::INDEXED, reasons::INDEXING),
        Kind::NotificationReceiver => (conditions::EGRESS_ALLOWED, reasons::CHECKING),
        Kind::RunSchedule => (conditions::REFERENCES_RESOLVED, reasons::CHECKING),
        _ => return None,
    };
    Some(LiveCheck { condition, pending })
}

/// Where a live check stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckState {
    /// Under way (an adapter connecting).
    Pending,
    /// The object works.
    Passed,
    /// The object does not work; the message says why.
    Failed,
}

/// The outcome of an object's live check, reported by the component that uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Where it stands.
    pub state: CheckState,
    /// One of [`reasons`].
    pub reason: &'static str,
    /// What was found, or what to fix.
    pub message: String,
}

impl Check {
    /// Under way.
    pub fn pending(reason: &'static str, message: impl Into<String>) -> Self {
        Check { state: CheckState::Pending, reason, message: message.into() }
    }

    /// The object works.
    pub fn passed(reason: &'static str, message: impl Into<String>) -> Self {
        Check { state: CheckState::Passed, reason, message: message.into() }
    }

    /// The object does not work.
    pub fn failed(reason: &'static str, message: impl Into<String>) -> Self {
        Check { state: CheckState::Failed, reason, message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::validate::parse_manifest;

    fn resource(yaml: &str) -> Resource {
        parse_manifest(serde_saphyr::from_str(yaml).unwrap()).unwrap()
    }

    #[test]
    fn needs_follow_secret_references_and_the_kind() {
        let receiver = resource(
            "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {name: hook}\n\
             spec: {type: webhook, webhook: {urlFrom: {env: HOOK_URL}}}\n",
        );
        assert_eq!(
            Needs::of(&receiver),
            Needs { secrets: true, check: live_check(Kind::NotificationReceiver), unavailable: None }
        );
        let remote = resource(
            "apiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {name: w}\n\
             spec: {source: {git: {url: \"https://git.example/infra.git\", ref: main}}}\n",
        );
        assert_eq!(
            Needs::of(&remote),
            Needs { check: live_check(Kind::Workspace), ..Needs::default() },
            "a remote workspace is Ready only once its clone works"
        );
        let local = resource(
            "apiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {name: w}\nspec: {source: {path: /srv/w}}\n",
        );
        assert_eq!(Needs::of(&local).check.map(|c| c.condition), Some(conditions::CHECKED));
        assert_eq!(Needs::of(&local).unavailable, None);
        let bot = resource(
            "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata: {name: bot}\n\
             spec: {type: telegram, telegram: {botToken: {env: T}, chatId: \"-100\"}, \
             inbound: {mode: polling, allowedUserIds: [\"1\"]}}\n",
        );
        assert_eq!(Needs::of(&bot).unavailable, None, "inbound bots are served");
        let validator = resource(
            "apiVersion: akritas.io/v1alpha1\nkind: ValidatorProfile\nmetadata: {name: v}\nspec: {argv: [yamllint]}\n",
        );
        assert_eq!(Needs::of(&validator).unavailable, None, "validators run in the change pipeline");
        assert_eq!(Needs::of(&validator).check.map(|c| c.condition), Some(conditions::PROGRAM_FOUND));
    }
}
