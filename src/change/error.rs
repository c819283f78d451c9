//! Failures of the change pipeline and the HTTP status each one maps to.

use super::proposal::AttemptDiagnostic;

/// Why a preview or an apply did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The request is invalid (400).
    #[error("{0}")]
    Invalid(String),
    /// No such Workspace, or no such pending change (404).
    #[error("{0}")]
    NotFound(String),
    /// The Workspace cannot be used now (409): not ready, not cloned yet.
    #[error("{0}")]
    NotReady(String),
    /// The workspace changed since the preview, or the change no longer fits (409).
    #[error("{0}")]
    Stale(String),
    /// A binding does not hold (409).
    #[error("{0}")]
    Conflict(String),
    /// Every preview slot the request may take is busy (503): which limit stayed full.
    #[error("change previews: {0}")]
    Busy(crate::slots::Refused),
    /// Too many changes wait for approval, host-wide or in the namespace (429).
    #[error("{0}")]
    TooManyPending(String),
    /// The model server failed (502).
    #[error("model request failed: {0}")]
    Upstream(String),
    /// The model gave no valid proposal (502), with the per-attempt diagnostics.
    #[error("{message}")]
    Proposal {
        /// What the model got wrong, as the HTTP error's `message`; `details` holds the attempts.
        message: String,
        /// One per attempt.
        diagnostics: Vec<AttemptDiagnostic>,
    },
    /// The preview's Run budget ran out (502).
    #[error("{0}")]
    Budget(String),
    /// The approval store failed (500/507).
    #[error("approval store: {0}")]
    Approval(String),
    /// The audit log failed (507).
    #[error("audit log: {0}")]
    Audit(String),
    /// Writing the change failed and was rolled back (500).
    #[error("{0}")]
    Write(String),
    /// Publishing the branch failed (502).
    #[error("publishing the change failed: {0}")]
    Git(String),
    /// A worker task ended unexpectedly (500).
    #[error("the change task was interrupted")]
    Interrupted,
}

impl ChangeError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_request",
            Self::NotFound(_) => "not_found",
            Self::NotReady(_) => "workspace_not_ready",
            Self::Stale(_) => "stale_preview",
            Self::Conflict(_) => "conflict",
            Self::Busy(_) => "busy",
            Self::TooManyPending(_) => "too_many_pending",
            Self::Upstream(_) => "upstream_error",
            Self::Proposal { .. } => "proposal_failed",
            Self::Budget(_) => "budget_exhausted",
            Self::Approval(_) => "approval_store",
            Self::Audit(_) => "audit_unavailable",
            Self::Write(_) => "write_failed",
            Self::Git(_) => "publish_failed",
            Self::Interrupted => "interrupted",
        }
    }
}

impl From<super::apply::ApplyError> for ChangeError {
    fn from(error: super::apply::ApplyError) -> Self {
        match error {
            super::apply::ApplyError::Stale { .. } => Self::Stale(error.to_string()),
            other => Self::Write(other.to_string()),
        }
    }
}
