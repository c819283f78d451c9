//! Reads by other agents (the MCP server's `search_runbooks`, `list_incidents`,
//! `get_incident`, `get_run`): one small `read` record each in the audit journal, so
//! every call is audited. A read belongs to no Run, is not kept in memory, and leaves
//! with its segment when retention removes it. Journals without reads replay as before;
//! a version older than this one refuses a journal holding reads (unknown record kind).
//!
//! A key that reads without pause would fill the journal: each key writes at most
//! [`READS_PER_MINUTE`] read records a minute; the reads past that are counted by tool and
//! written as one `(over the limit)` record when the minute is over
//! ([`AuditLog::flush_reads`] runs every minute), so every read is still accounted for.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{AuditError, AuditLog, Backend, bound};

/// Read records one API key writes per minute; the rest are counted, then written as one.
pub const READS_PER_MINUTE: u32 = 60;
const WINDOW: Duration = Duration::from_secs(60);
/// The tool name of a record that counts the reads over the limit.
pub const OVER_THE_LIMIT: &str = "(over the limit)";

/// Each key's reads of the current minute.
#[derive(Default)]
pub(super) struct ReadBudget(Mutex<HashMap<String, Window>>);

struct Window {
    started: Instant,
    written: u32,
    /// Reads not written one by one: by tool, with the namespace and source of the first.
    over: BTreeMap<String, u32>,
    namespace: String,
    source: String,
}

impl ReadBudget {
    /// Whether this read is written; otherwise it is counted. Also returns the count
    /// record of the key's previous minute when that minute is over.
    fn admit(&self, read: &ReadRecord, now: Instant) -> (bool, Option<ReadRecord>) {
        let mut windows = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let window = windows.entry(read.actor.clone()).or_insert_with(|| Window::new(read, now));
        let finished = if now.duration_since(window.started) >= WINDOW {
            let done = std::mem::replace(window, Window::new(read, now));
            done.summary(&read.actor)
        } else {
            None
        };
        if window.written < READS_PER_MINUTE {
            window.written += 1;
            return (true, finished);
        }
        *window.over.entry(read.tool.clone()).or_default() += 1;
        (false, finished)
    }

    /// The count records of every minute that is over (of every minute with `all`).
    fn finished(&self, now: Instant, all: bool) -> Vec<ReadRecord> {
        let mut windows = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let done: Vec<String> = windows
            .iter()
            .filter(|(_, window)| all || now.duration_since(window.started) >= WINDOW)
            .map(|(actor, _)| actor.clone())
            .collect();
        done.into_iter().filter_map(|actor| windows.remove(&actor).and_then(|window| window.summary(&actor))).collect()
    }
}

impl Window {
    fn new(read: &ReadRecord, now: Instant) -> Self {
        Window {
            started: now,
            written: 0,
            over: BTreeMap::new(),
            namespace: read.namespace.clone(),
            source: read.source.clone(),
        }
    }

    /// One record counting the reads over the limit, if there were any.
    fn summary(self, actor: &str) -> Option<ReadRecord> {
        let total: u32 = self.over.values().sum();
        (total > 0).then(|| ReadRecord {
            namespace: self.namespace,
            source: self.source,
            actor: actor.to_string(),
            tool: OVER_THE_LIMIT.to_string(),
            target: self.over.iter().map(|(tool, n)| format!("{tool}={n}")).collect::<Vec<_>>().join(" "),
            returned: total,
        })
    }
}

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
    /// Records a read (strings bounded like Run fields): written at once while its key is
    /// under [`READS_PER_MINUTE`] this minute, otherwise counted for the minute's summary.
    pub async fn record_read(&self, read: ReadRecord) -> Result<(), AuditError> {
        let read = ReadRecord {
            namespace: bound(&read.namespace),
            source: bound(&read.source),
            actor: bound(&read.actor),
            tool: bound(&read.tool),
            target: bound(&read.target),
            returned: read.returned,
        };
        let (write, finished) = self.reads.admit(&read, Instant::now());
        if let Some(summary) = finished {
            self.append_read(summary).await?;
        }
        if write {
            self.append_read(read).await?;
        }
        Ok(())
    }

    /// Writes the summaries of the minutes that are over (of every minute with `all`, at
    /// shutdown); the service calls it every minute.
    pub async fn flush_reads(&self, all: bool) -> Result<(), AuditError> {
        for summary in self.reads.finished(Instant::now(), all) {
            self.append_read(summary).await?;
        }
        Ok(())
    }

    async fn append_read(&self, read: ReadRecord) -> Result<(), AuditError> {
        let data = json!({ "read": read });
        match &self.backend {
            Backend::File(file) => file.append_read(data).await,
            Backend::Database(db) => db.append_read(data).await,
        }
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
        assert!(reopened.get(&run).await.unwrap().is_some(), "the Run replays next to the reads");
        let text = std::fs::read_to_string(&path).unwrap();
        let reads: Vec<&str> = text.lines().filter(|l| l.contains("\"kind\":\"read\"")).collect();
        assert_eq!(reads.len(), 2, "{text}");
        assert!(reads[0].contains(&"x".repeat(crate::audit::MAX_TEXT_CHARS)));
        assert!(!reads[0].contains(&"x".repeat(crate::audit::MAX_TEXT_CHARS + 1)));
    }

    /// A key reading in a loop writes [`READS_PER_MINUTE`] records a minute and one summary
    /// counting the rest by tool; another key is not affected.
    #[tokio::test]
    async fn a_key_reading_in_a_loop_writes_a_bounded_number_of_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit");
        let audit = AuditLog::open(&path).unwrap();
        let extra = 250;
        for n in 0..READS_PER_MINUTE + extra {
            let mut r = read(&format!("run-{n}"));
            if n % 2 == 0 {
                r.tool = "list_incidents".into();
            }
            audit.record_read(r).await.unwrap();
        }
        audit.record_read(ReadRecord { actor: "other".into(), ..read("x") }).await.unwrap();
        audit.flush_reads(false).await.unwrap();
        let written = |text: &str| text.lines().filter(|l| l.contains("\"kind\":\"read\"")).count();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(written(&text), READS_PER_MINUTE as usize + 1, "the minute is not over yet");
        audit.flush_reads(true).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(written(&text), READS_PER_MINUTE as usize + 2);
        let summary: serde_json::Value =
            serde_json::from_str(text.lines().find(|l| l.contains(OVER_THE_LIMIT)).unwrap()).unwrap();
        let summary = &summary["data"]["read"];
        assert_eq!(summary["returned"], extra, "{summary}");
        assert_eq!(summary["target"], format!("get_run={} list_incidents={}", extra / 2, extra / 2), "{summary}");
        assert_eq!(summary["actor"], "agent");
        drop(audit);
        AuditLog::open(&path).unwrap();
    }
}
