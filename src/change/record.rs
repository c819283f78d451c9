//! The audit Run of a preview or an apply (nothing is recorded without an audit log).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::error::ChangeError;
use crate::audit::{AuditLog, Finish, NewEvent, NewRun, RunStatus};

/// The audit Run of a preview or apply (nothing is recorded without an audit log).
pub(super) struct Record {
    audit: Option<Arc<AuditLog>>,
    run: Option<crate::audit::ActiveRun>,
    id: String,
}

impl Record {
    pub(super) async fn open(audit: Option<&Arc<AuditLog>>, new: NewRun) -> Result<Self, ChangeError> {
        match audit {
            Some(audit) => {
                let run = audit.start_active(new).await.map_err(|e| ChangeError::Audit(e.to_string()))?;
                let id = run.id().to_string();
                Ok(Self { audit: Some(audit.clone()), run: Some(run), id })
            }
            None => Ok(Self { audit: None, run: None, id: crate::audit::RunId::generate().to_string() }),
        }
    }

    pub(super) fn id(&self) -> &str {
        &self.id
    }

    pub(super) async fn event(&self, event: NewEvent) {
        if let (Some(audit), Some(run)) = (&self.audit, &self.run)
            && let Err(error) = audit.event(run.id(), event).await
        {
            tracing::error!(%error, run_id = %self.id, "change event not recorded");
        }
    }

    pub(super) async fn close(&self, error: Option<&ChangeError>, usage: Value) {
        let (Some(audit), Some(run)) = (&self.audit, &self.run) else { return };
        let finish = Finish {
            status: if error.is_some() { RunStatus::Failed } else { RunStatus::Succeeded },
            error: error.map(ToString::to_string),
            error_code: error.map(|e| e.code().to_string()),
            metadata: BTreeMap::from([("usage".into(), usage)]),
        };
        if let Err(error) = audit.finish(run.id(), finish).await {
            tracing::error!(%error, run_id = %self.id, "change Run not closed");
        }
    }
}
