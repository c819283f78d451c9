//! Reads by other agents (the MCP server's `search_runbooks`, `list_incidents`,
//! `get_incident`, `get_run`): one small `read` record each in the audit journal, so
//! every call is audited. A read belongs to no Run, is not kept in memory, and leaves
//! with its segment when retention removes it. Journals without reads replay as before;
//! a version older than this one refuses a journal holding reads (unknown record kind).

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{AuditError, AuditLog, bound};

/// Journal kind of a read.
pub(super) const READ: &str = "read";

/// One read: who read what, and how many items it returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadRecord {
    /// Namespace of the caller.
    pub namespace: String,
    /// Entry point (`mcp`).
    pub source: String,
    /// API key name.
    pub actor: String,
    /// What was called (`get_run`, `search_runbooks`, …).
    pub tool: String,
    /// What was asked for: an id, a status filter, or a search query's SHA-256 and
    /// length (a query is user text, which the audit never stores).
    pub target: String,
    /// Items returned (0: not found, or not visible to the caller).
    pub returned: u32,
}

impl AuditLog {
    /// Appends a read (strings bounded like Run fields).
    pub async fn record_read(&self, read: ReadRecord) -> Result<(), AuditError> {
        let read = ReadRecord {
            namespace: bound(&read.namespace),
            source: bound(&read.source),
            actor: bound(&read.actor),
            tool: bound(&read.tool),
            target: bound(&read.target),
            returned: read.returned,
        };
        let data = json!({ "read": read });
        let shared = self.shared.clone();
        // As for a start: the task keeps the journal and the state together if the caller goes away.
        tokio::spawn(async move {
            shared.pass_barrier().await;
            let pending = shared.begin();
            let (record, pending) = shared.append(READ, &data, pending).await?;
            shared.apply_record(&record, pending, None)
        })
        .await
        .map_err(|_| AuditError::Interrupted)??;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(target: &str) -> ReadRecord {
        ReadRecord {
            namespace: "team-a".into(),
            source: "mcp".into(),
            actor: "agent".into(),
            tool: "get_run".into(),
            target: target.into(),
            returned: 1,
        }
    }

    #[tokio::test]
    async fn reads_are_journaled_bounded_and_survive_a_reopen_next_to_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit");
        let audit = AuditLog::open(&path).unwrap();
        let run = audit
            .start(super::super::NewRun {
                namespace: "team-a".into(),
                source: "chat".into(),
                actor: "a".into(),
                model: None,
                catalog_version: 1,
                metadata: Default::default(),
            })
            .await
            .unwrap();
        audit.record_read(read(&"x".repeat(2000))).await.unwrap();
        audit.record_read(read(run.as_str())).await.unwrap();
        drop(audit);
        let reopened = AuditLog::open(&path).unwrap();
        assert!(reopened.get(&run).is_some(), "the Run replays next to the reads");
        let text = std::fs::read_to_string(&path).unwrap();
        let reads: Vec<&str> = text.lines().filter(|l| l.contains("\"kind\":\"read\"")).collect();
        assert_eq!(reads.len(), 2, "{text}");
        assert!(reads[0].contains(&"x".repeat(crate::audit::MAX_TEXT_CHARS)));
        assert!(!reads[0].contains(&"x".repeat(crate::audit::MAX_TEXT_CHARS + 1)));
    }
}
